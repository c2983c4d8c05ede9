"""PRG-183: a kernel launched in a loop whose iterations give it different scalar inputs is decided iteration by
iteration, each iteration's call lowered with its own values (tests/programs/chunk_loop_targets.py): the seeded
bug's last copy is out of bounds, where jax's interpreter raises. PRG-185: two nested loops of 72 launches over
four offsets are four lowerings."""

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
@pytest.mark.rule("PRG-183")
@pytest.mark.rule("PRG-182")
@pytest.mark.rule("PRG-185")
def test_each_iteration_of_a_loop_is_decided_with_its_own_values():
    got = _verify("2")
    assert {r["target"] for r in got} == {"clean", "one_chunk_too_many", "nested_loops"}
    assert {r["dma_mode"] for r in got} == {"eager", "on_wait", "hardware"}
    by = {(r["target"], r["dma_mode"], r["property"]): r for r in got}
    for mode in ("eager", "on_wait", "hardware"):
        for prop in {p for _, _, p in by}:
            assert by[("clean", mode, prop)]["verdict"] == "proved", by[("clean", mode, prop)]
            # PRG-185: 72 launches over 4 offsets, four lowerings (unknown under PRG-182 before it)
            assert by[("nested_loops", mode, prop)]["verdict"] == "proved", by[("nested_loops", mode, prop)]
            bug = by[("one_chunk_too_many", mode, prop)]
            if mode == "hardware" or prop != "deadlock-free":
                # a TPU's copy past the end is what a single call's is (D33); every other property holds in
                # every iteration, exit-balance where an exit is reached
                assert bug["verdict"] == "proved", bug
                continue
            # the interpreter raises in the last iteration's copy, as jax does (the slow test below)
            assert bug["verdict"] == "violated", bug
            message = bug["witness"]["message"]
            assert message.startswith("in iteration 4 (counted from 0, of 5) of the loop at chunk_loop_targets.py:"
                                      .replace("chunk", TARGETS.rsplit("/", 1)[0] + "/chunk")), message
            assert "Out-of-bounds read" in message and "reading [(slice(32, 40, 1)" in message, message
            assert "chunk_loop_targets.py:48" in message, message  # the copy's line


@pytest.mark.slow
@pytest.mark.jax
@pytest.mark.rule("PRG-183")
@pytest.mark.parametrize("mode", ["eager", "on_wait"])
def test_the_interpreter_raises_in_the_last_iteration_of_the_seeded_bug(mode):
    """What the rule predicts: jax's interpreter completes the clean loop and raises in the twin's (its last
    iteration's copy reads past the block)."""
    run = subprocess.run([sys.executable, "-c", _RUN.format(devices=2, mode=mode, path=str(REPO / TARGETS),
                                                            marker=MARKER)],
                         capture_output=True, text=True, cwd=REPO, timeout=600)
    (line,) = [s for s in run.stdout.splitlines() if s.startswith(MARKER)] or [None]
    assert line is not None, run.stderr[-3000:]
    assert json.loads(line.removeprefix(MARKER)) == {"clean": "completed", "one_chunk_too_many": "Out-of-bounds read"}
