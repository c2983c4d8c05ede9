"""PRG-182: a kernel launched in a loop whose iterations give it different scalar inputs, where a copy's region
depends on them, is unknown in every mode (tests/programs/chunk_loop_targets.py): the widened region would hide
an iteration whose copy is out of bounds, as the seeded bug's last one is (jax's interpreter raises there)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
TARGETS = "tests/programs/chunk_loop_targets.py"
MARKER = "@@CHUNKS@@ "

_RUN = """
import os, json, importlib.util
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count={devices}"
os.environ.setdefault("JAX_PLATFORMS", "cpu")
import jax, numpy as np
from jax.experimental.pallas import tpu as pltpu
spec = importlib.util.spec_from_file_location("chunks", {path!r})
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
out = {{}}
for name in ("clean", "one_chunk_too_many"):
    fn, args = getattr(m, name)({devices}, interpret=pltpu.InterpretParams(dma_execution_mode={mode!r}))
    try:
        got = np.asarray(jax.block_until_ready(fn(*args)))
        out[name] = "completed" if np.allclose(got, np.roll(np.asarray(args[0]).reshape({devices}, -1, m.LANES), 1,
                                                            axis=0).reshape(-1, m.LANES)) else "wrong numbers"
    except Exception as e:  # the innermost error jax re-raises from the device threads
        out[name] = "Out-of-bounds read" if "Out-of-bounds read" in repr(e) + repr(getattr(e, "exceptions", "")) \\
            else type(e).__name__
print({marker!r} + json.dumps(out))
"""


def _verify(devices: str) -> list[dict]:
    run = subprocess.run([sys.executable, "-m", "semcheck.checker.run.cli", "verify", TARGETS, "--devices", devices,
                          "--dma-mode", "all", "--format", "json", "--no-cache", "--no-config"],
                         capture_output=True, text=True, cwd=REPO, timeout=900)
    assert run.returncode in (0, 1, 3), run.stderr[-3000:]
    return json.loads(run.stdout)["results"]


@pytest.mark.jax
@pytest.mark.rule("PRG-182")
def test_a_copy_whose_offset_the_loop_varies_is_unknown_not_proved():
    got = _verify("2")
    assert {r["target"] for r in got} == {"clean", "one_chunk_too_many"}
    assert {r["dma_mode"] for r in got} == {"eager", "on_wait", "hardware"}
    for r in got:
        assert r["verdict"] == "unknown" and "PRG-182" in r["reason"], r
        assert "chunk_loop_targets.py:" in r["reason"] and "differs between the iterations" in r["reason"], r


@pytest.mark.slow
@pytest.mark.jax
@pytest.mark.rule("PRG-182")
@pytest.mark.parametrize("mode", ["eager", "on_wait"])
def test_the_interpreter_raises_in_the_last_iteration_of_the_seeded_bug(mode):
    """What the rule protects against: jax's interpreter completes the clean loop and raises in the twin's."""
    run = subprocess.run([sys.executable, "-c", _RUN.format(devices=2, mode=mode, path=str(REPO / TARGETS),
                                                            marker=MARKER)],
                         capture_output=True, text=True, cwd=REPO, timeout=600)
    (line,) = [s for s in run.stdout.splitlines() if s.startswith(MARKER)] or [None]
    assert line is not None, run.stderr[-3000:]
    assert json.loads(line.removeprefix(MARKER)) == {"clean": "completed", "one_chunk_too_many": "Out-of-bounds read"}
