"""ERR-43: a vmapped `pallas_call` given `dimension_semantics`, which jax's interpreter cannot lower.

The test kernels (`kernels/vmapped_semantics.py`) add two blocks on a grid of two steps, vmapped over a
batch or not, with and without semantics; what jax's interpreter does with each is run here and compared
with the failure the front end reads off the call, and the CLI's verdicts are checked per mode.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(HERE / "kernels"))
from cli._support import semcheck  # noqa: E402

KERNELS = "tests/frontend/kernels/vmapped_semantics.py"
PROPERTIES = 8
CASES = [(("arbitrary",), True), (("parallel",), True), (None, True), (("arbitrary",), False)]


@pytest.mark.jax
@pytest.mark.rule("ERR-43")
@pytest.mark.parametrize("semantics, vmapped", CASES)
def test_the_interpreter_refuses_exactly_the_calls_semcheck_says(semantics, vmapped):
    import jax
    from jax.experimental.pallas import tpu as pltpu

    import vmapped_semantics as kernels
    from semcheck.checker.frontend.lower import vmapped_semantics_failure
    from semcheck.checker.frontend.trace import trace_kernels

    fn, args = kernels.batched_call(semantics, vmapped)
    (call,) = trace_kernels(fn, args)
    failure = vmapped_semantics_failure(call)
    assert (failure is not None) == (vmapped and semantics is not None)
    for mode in ("eager", "on_wait"):
        params = pltpu.InterpretParams(dma_execution_mode=mode, detect_races=True)
        try:
            with pltpu.force_tpu_interpret_mode(params):
                jax.block_until_ready(fn(*args))
            raised = None
        except ValueError as e:
            raised = str(e)
        assert raised == (None if failure is None else failure.message), (semantics, vmapped, mode, raised)


@pytest.mark.jax
@pytest.mark.rule("ERR-43", "REP-21")
def test_a_vmapped_call_with_semantics_is_unrunnable_in_interpret_mode_and_decided_on_hardware():
    """The two vmapped calls given semantics are unrunnable under eager and on_wait (each property, naming
    the call's line and the rule) and proved under hardware; without semantics every mode is proved."""
    for target, refused in (("vmapped_arbitrary", True), ("vmapped_parallel", True), ("vmapped_unnamed", False)):
        run = semcheck("verify", f"{KERNELS}::{target}", "--devices", "2", "--dma-mode", "all", "--format", "json",
                       "--no-cache", "--no-config", cwd=ROOT, timeout=900)
        assert run.returncode in (0, 4), run.stderr[-2000:]
        rows: dict[str, list[dict]] = {}
        for r in json.loads(run.stdout)["results"]:
            rows.setdefault(r["dma_mode"], []).append(r)
        assert [r["verdict"] for r in rows["hardware"]] == ["proved"] * PROPERTIES
        for mode in ("eager", "on_wait"):
            assert len(rows[mode]) == PROPERTIES
            for r in rows[mode]:
                if refused:
                    assert r["verdict"] == "unrunnable" and r["stats"]["rule"] == "ERR-43", (target, mode, r)
                    assert "vmapped_semantics.py:" in r["reason"] and "safe_zip" in r["reason"]
                else:
                    assert r["verdict"] == "proved", (target, mode, r)
