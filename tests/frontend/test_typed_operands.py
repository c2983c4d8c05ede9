"""ERR-36: a call given an argument typed with a memory space jax's interpreter refuses; ACC-47: the values
of a `core_map`'s tracked inputs.

The test kernels (`kernels/typed_operands.py`) hand a `core_map` or a `pallas_call` a one-entry table typed
with each memory space; what jax's interpreter does with each is run here and compared with what the front
end reads off the call.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(HERE / "kernels"))
from cli._support import semcheck  # noqa: E402

KERNELS = "tests/frontend/kernels/typed_operands.py"
PROPERTIES = 8


@pytest.mark.jax
@pytest.mark.rule("ERR-36")
@pytest.mark.parametrize("kind", ["core_map", "pallas_call"])
def test_the_interpreter_refuses_exactly_the_arguments_semcheck_says(kind):
    import jax
    from jax.experimental.pallas import tpu as pltpu

    import typed_operands as kernels
    from semcheck.checker.frontend.trace import trace_kernels
    from semcheck.checker.frontend.typed_operands import typed_operand_failure

    refused = []
    for space in kernels.SPACES:
        fn, args = kernels.table_call(kind, space, reads=False)
        (call,) = trace_kernels(fn, args)
        failure = typed_operand_failure(call.refused_spaces)
        for mode in ("eager", "on_wait"):
            params = pltpu.InterpretParams(dma_execution_mode=mode, detect_races=True)
            try:
                with pltpu.force_tpu_interpret_mode(params):
                    jax.block_until_ready(fn(*args))
                raised = None
            except NotImplementedError as e:
                raised = str(e)
            assert raised == (None if failure is None else failure.message), (kind, space, mode, raised)
        if failure is not None:
            refused.append(space)
            assert failure.operand == "n_ref"
    assert refused == ["smem", "vmem"]


def _rows(target: str, codes=(1, 4)) -> dict[str, dict[str, dict]]:
    run = semcheck("verify", f"{KERNELS}::{target}", "--devices", "2", "--dma-mode", "all", "--format", "json",
                   "--no-cache", "--no-config", cwd=ROOT, timeout=900)
    assert run.returncode in codes, run.stderr[-2000:]
    out: dict[str, dict[str, dict]] = {}
    for r in json.loads(run.stdout)["results"]:
        out.setdefault(r["dma_mode"], {})[r["property"]] = r
    return out


@pytest.mark.jax
@pytest.mark.rule("ERR-36", "ACC-47", "REP-21")
def test_a_typed_argument_is_unrunnable_in_interpret_mode_and_decided_on_hardware():
    """The table typed SMEM bounds the kernel's loop: the interpreter refuses the call in both modes, and
    `hardware` is decided on the table's value (one start: clean; two: a copy in flight at the exit)."""
    for target, violated in (("core_map_smem_bound", set()),
                             ("core_map_smem_leak", {"exit-balance", "dma-bytes", "race-free"})):
        rows = _rows(target)
        for mode in ("eager", "on_wait"):
            assert len(rows[mode]) == PROPERTIES
            for r in rows[mode].values():
                assert r["verdict"] == "unrunnable" and r["stats"]["rule"] == "ERR-36", (target, mode, r)
                assert "Unsupported memory space: smem" in r["reason"] and "'n_ref'" in r["reason"]
        hardware = {p: r["verdict"] for p, r in rows["hardware"].items()}
        assert len(hardware) == PROPERTIES
        assert hardware == {p: "violated" if p in violated else "proved" for p in hardware}, (target, hardware)


@pytest.mark.jax
@pytest.mark.rule("ACC-47")
def test_a_core_maps_tracked_inputs_have_values():
    import typed_operands as kernels
    from semcheck.checker.frontend.concrete_inputs import trace_with_inputs

    for kind in ("core_map", "pallas_call"):
        for starts in (1, 3):
            fn, args = kernels.table_call(kind, "smem", starts=starts)
            (call,), (inputs,) = trace_with_inputs(fn, args)
            assert call.operands[0].name == "n_ref" and call.operands[0].memory_space == "smem"
            assert np.array_equal(inputs.values[0], [[starts]]), (kind, starts, inputs)


@pytest.mark.jax
@pytest.mark.rule("ACC-55", "ERR-36")
def test_a_table_copied_into_smem_decides_a_one_core_core_map():
    """The loop bound is the table copied into SMEM, which the front end follows in a core_map over one core:
    typed SMEM, the interpreter refuses the call (unrunnable) and `hardware` is decided on the copied value
    (one start: clean; two: a copy in flight at the exit); untyped, every mode is proved, as jax runs it."""
    import jax
    from jax.experimental.pallas import tpu as pltpu

    import typed_operands as kernels

    for target, violated in (("core_map_smem_copied", set()),
                             ("core_map_smem_copied_leak", {"exit-balance", "dma-bytes", "race-free"})):
        rows = _rows(target)
        for mode in ("eager", "on_wait"):
            assert {(r["verdict"], r["stats"]["rule"]) for r in rows[mode].values()} == {("unrunnable", "ERR-36")}
        hardware = {p: r["verdict"] for p, r in rows["hardware"].items()}
        assert hardware == {p: "violated" if p in violated else "proved" for p in hardware}, (target, hardware)
        assert len(hardware) == PROPERTIES
    untyped = _rows("core_map_untyped_copied", codes=(0,))
    assert {r["verdict"] for m in untyped.values() for r in m.values()} == {"proved"}
    assert sum(len(m) for m in untyped.values()) == 3 * PROPERTIES
    fn, args = kernels.copied_bound_call(None)
    for mode in ("eager", "on_wait"):
        params = pltpu.InterpretParams(dma_execution_mode=mode, detect_races=True, vector_clock_size=1024)
        with pltpu.force_tpu_interpret_mode(params):
            assert np.array_equal(np.asarray(jax.block_until_ready(fn(*args))), np.asarray(args[1]))  # no race raised


@pytest.mark.jax
@pytest.mark.rule("ACC-56", "ERR-36", "ACC-20", "ACC-80")
def test_a_refused_call_reads_no_copied_value():
    """The bound is loaded before its copy's wait (a race on a followed value, which jax reports where it runs
    the call: untyped). Typed SMEM, the interpreter raises at the call in both modes, before any load: every
    property is unrunnable, as for any refused call (before ACC-56: unknown, the values "not facts"); under
    `hardware` the race is violated and the rest is decided by the cases of the value the load may read (ACC-80)."""
    import jax
    from jax.experimental.pallas import tpu as pltpu
    from jax._src.pallas.mosaic.interpret import interpret_pallas_call as ipc

    import typed_operands as kernels

    rows = _rows("core_map_smem_copied_early")
    for mode in ("eager", "on_wait"):
        assert len(rows[mode]) == PROPERTIES
        assert {(r["verdict"], r["stats"]["rule"]) for r in rows[mode].values()} == {("unrunnable", "ERR-36")}
    # under hardware the load reads the bound stored first or the copied one, and each case proves the rest (ACC-80)
    assert {p: r["verdict"] for p, r in rows["hardware"].items()} == {
        p: "violated" if p == "race-free" else "proved" for p in rows["hardware"]}
    assert all("ACC-80" in r["reason"] for p, r in rows["hardware"].items() if p != "race-free")
    fn, args = kernels.copied_bound_call(None, early=True)
    for mode in ("eager", "on_wait"):
        params = pltpu.InterpretParams(dma_execution_mode=mode, detect_races=True, on_race="warn",
                                       vector_clock_size=1024)
        with pltpu.force_tpu_interpret_mode(params):
            jax.block_until_ready(fn(*args))
        assert ipc.races.races_found, mode


@pytest.mark.jax
@pytest.mark.rule("ERR-37", "ERR-36")
def test_a_refused_call_is_decided_in_interpret_mode_where_its_kernel_is_not_lowered():
    """The front end cannot lower the kernel (its loop bound arrives by a copy it does not follow in a
    core_map of two cores per device, ACC-9); the interpreter refuses the call by its argument alone, so its
    modes are decided and hardware is unknown with the lowering's reason. Untyped, the interpreter runs the
    call: every mode unknown."""
    import jax
    from jax.experimental.pallas import tpu as pltpu

    import typed_operands as kernels

    fn, args = kernels.copied_bound_call("smem", cores=2)
    for mode in ("eager", "on_wait"):
        with pytest.raises(NotImplementedError, match="Unsupported memory space: smem"):
            with pltpu.force_tpu_interpret_mode(pltpu.InterpretParams(dma_execution_mode=mode, detect_races=True)):
                jax.block_until_ready(fn(*args))
    rows = _rows("core_map_smem_unlowered", codes=(3,))
    for mode in ("eager", "on_wait"):
        assert {r["verdict"] for r in rows[mode].values()} == {"unrunnable"}
        assert {r["stats"]["rule"] for r in rows[mode].values()} == {"ERR-36"}
    assert len(rows["hardware"]) == PROPERTIES
    for r in rows["hardware"].values():
        assert r["verdict"] == "unknown" and r["stats"]["rule"] == "ERR-37", r
        assert r["reason"].startswith("unsupported while at") and "typed_operands.py" in r["reason"], r
    untyped = _rows("core_map_untyped_unlowered", codes=(3,))
    assert {r["verdict"] for m in untyped.values() for r in m.values()} == {"unknown"}
