"""DR-1, ACC-20: a copy that rewrites the bytes a load reads, unordered with the load, is a race whatever the bytes.

`kernels/refetch.py` fetches a row of sizes into SMEM, waits, fetches the same row again and loads a size before
that copy's wait. The load reads the same value in every order, but nothing orders it with the copy's write: jax's
race detector reports it, and semcheck keeps the size unknown (the values a race touches are no facts).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from cli._support import semcheck  # noqa: E402

KERNEL = "tests/frontend/kernels/refetch.py"


def _lines() -> tuple[int, int]:
    """The second fetch's start and the load after it (1-based)."""
    lines = (HERE / "kernels" / "refetch.py").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if "the same bytes again" in line)
    return start + 1, start + 2


@pytest.mark.jax
@pytest.mark.rule("ACC-20", "ACC-71")
def test_a_copy_rewriting_the_bytes_a_load_reads_is_a_race_decided_where_the_interpreter_lands_it():
    """`race-free` violated in every mode; under `hardware` nothing else is claimed (ACC-20); under eager and
    on_wait the load reads, in every run, the second fetch's bytes (eager) or the first's (on_wait: the second lands
    at its wait), the same values, so the rest is proved (ACC-71, ACC-62)."""
    run = semcheck("verify", KERNEL, "--devices", "2", "--format", "json", "--no-cache", cwd=ROOT, timeout=900)
    assert run.returncode == 1, run.stderr[-2000:]
    rows = json.loads(run.stdout)["results"]
    assert len(rows) == 3 * 8
    fetch, load = _lines()
    for r in rows:
        text = json.dumps(r)
        if r["property"] == "race-free":
            assert r["verdict"] == "violated", r
            assert f"refetch.py:{fetch}" in text and f"refetch.py:{load}" in text, r
        elif r["dma_mode"] == "hardware":
            assert r["verdict"] == "unknown" and "ACC-20" in r["reason"], r
            assert f"refetch.py:{fetch}" in text and f"refetch.py:{load}" in text, r
        else:
            assert r["verdict"] == "proved", r


_DETECTOR = """
import json, logging, os, re, sys
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
os.environ["JAX_PLATFORMS"] = "cpu"
sys.path.insert(0, "tests/frontend/kernels")
import jax
from jax.experimental.pallas import tpu as pltpu
from jax._src.pallas.mosaic.interpret import interpret_pallas_call as ipc
import refetch
said = []
class Keep(logging.Handler):
    def emit(self, record):
        said.append(record.getMessage())
logging.getLogger().addHandler(Keep(level=logging.WARNING))
out = {}
for mode in ("eager", "on_wait"):
    said.clear()
    params = pltpu.InterpretParams(dma_execution_mode=mode, detect_races=True, on_race="warn",
                                   vector_clock_size=1024)
    fn, args = refetch.refetch_same_bytes(2, params=params)
    jax.block_until_ready(fn(*args))
    lines = sorted({int(m) for s in said for m in re.findall(r"refetch.py:(\\d+)", s)})
    out[mode] = [bool(ipc.races is not None and ipc.races.races_found), lines]
print("@@" + json.dumps(out))
"""


@pytest.mark.jax
@pytest.mark.rule("ACC-20")
def test_jax_s_race_detector_reports_the_rewrite_of_the_same_bytes():
    run = subprocess.run([sys.executable, "-c", _DETECTOR], cwd=ROOT, capture_output=True, text=True, timeout=900)
    line = next((x for x in run.stdout.splitlines() if x.startswith("@@")), None)
    assert line is not None, run.stderr[-2000:]
    got = json.loads(line[2:])
    fetch, load = _lines()
    for mode in ("eager", "on_wait"):
        found, lines = got[mode]
        assert found and load in lines, got
