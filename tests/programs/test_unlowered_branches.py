"""PRG-221: a kernel call with a semaphore result that no device runs (a cond's other branch, a loop body run zero
times) still fails interpret mode's lowering of its computation: the programs of
tests/programs/unlowered_branch_targets.py, held against jax."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
TARGETS = "tests/programs/unlowered_branch_targets.py"
NAMES = ("semaphore_result_in_the_other_branch", "semaphore_result_in_a_loop_run_zero_times")
MARKER = "@@RAISED@@ "

_JAX = """
import json, os, sys
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
os.environ["JAX_PLATFORMS"] = "cpu"
sys.path.insert(0, "tests/programs")
import jax
from jax.experimental.pallas import tpu as pltpu
import unlowered_branch_targets as t
out = {}
for name in %r:
    for mode in ("eager", "on_wait"):
        params = pltpu.InterpretParams(dma_execution_mode=mode, detect_races=True, vector_clock_size=1024)
        fn, args = getattr(t, name)(2, dma_mode=mode, interpret=params)
        try:
            jax.block_until_ready(fn(*args))
            out[name + " " + mode] = None
        except Exception as e:
            out[name + " " + mode] = [type(e).__name__, str(e)]
print(%r + json.dumps(out))
""" % (NAMES, MARKER)


@pytest.fixture(scope="module")
def rows() -> dict[tuple[str, str], dict[str, dict]]:
    """(target, mode) -> property -> the JSON report's row."""
    run = subprocess.run([sys.executable, "-m", "semcheck.checker.run.cli", "verify", TARGETS, "--devices", "2",
                          "--dma-mode", "all", "--format", "json", "--no-cache", "--no-config"],
                         capture_output=True, text=True, cwd=REPO, timeout=900)
    assert run.returncode in (0, 1, 3, 4), run.stderr[-3000:]
    report = json.loads(run.stdout)
    assert not report["errors"], report["errors"]
    out: dict[tuple[str, str], dict[str, dict]] = {}
    for r in report["results"]:
        out.setdefault((r["target"], r["dma_mode"]), {})[r["property"]] = r
    return out


@pytest.mark.rule("PRG-221")
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("mode", ["eager", "on_wait"])
def test_a_semaphore_result_no_device_runs_makes_the_program_unrunnable(rows, name, mode):
    row = rows[(name, mode)]
    assert len(row) == 8
    for v in row.values():
        assert v["verdict"] == "unrunnable", v
        assert "nan + dma_sem" in v["reason"], v


@pytest.mark.rule("PRG-221")
@pytest.mark.parametrize("name", NAMES)
def test_on_a_tpu_the_taken_calls_run(rows, name):
    """A TPU lowers the semaphore result (LAUNCH-2 is the interpreter's): the copy the program makes is proved."""
    for v in rows[(name, "hardware")].values():
        assert v["verdict"] == "proved", v


@pytest.mark.jax
@pytest.mark.rule("PRG-221")
def test_jax_fails_both_programs_while_lowering_them():
    run = subprocess.run([sys.executable, "-c", _JAX], capture_output=True, text=True, cwd=REPO, timeout=900)
    line = next((s for s in run.stdout.splitlines() if s.startswith(MARKER)), None)
    assert line is not None, run.stderr[-3000:]
    got = json.loads(line.removeprefix(MARKER))
    assert set(got) == {f"{n} {m}" for n in NAMES for m in ("eager", "on_wait")}
    for raised in got.values():
        assert raised == ["NotImplementedError", "nan + dma_sem"], got
