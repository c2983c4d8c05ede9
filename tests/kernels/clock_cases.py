"""Kernels whose waits meet the race detector's clocks (specs/semantics/buffers.md RACE-1, ERR-21).

One pallas_call on one device: `sem` is a REGULAR semaphore, `dsem` a DMA one, `x` an (8, 128) HBM
input, `buf` an (8, 128) VMEM scratch. `RECORDED` is what jax 0.12's interpreter did with each case
(`python tests/kernels/clock_cases.py` runs them again and prints the table; tests/test_race_clocks.py
holds semcheck's prediction to it, and its slow sibling jax's runs).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _copy(x, buf, sem, rows):
    return pltpu.make_async_copy(x.at[pl.ds(0, rows)], buf.at[pl.ds(0, rows)], sem)


def _wait0(x, buf, sem, dsem):
    pl.semaphore_wait(sem, 0)  # no signal reached `sem`


def _signal0_wait0(x, buf, sem, dsem):
    pl.semaphore_signal(sem, 0)  # a signal of 0 leaves a clock
    pl.semaphore_wait(sem, 0)


def _copy0(x, buf, sem, dsem):
    c = _copy(x, buf, dsem, 0)
    c.start()
    c.wait()


def _copy_then_copy0(x, buf, sem, dsem):
    c = _copy(x, buf, dsem, 1)
    c.start()
    c.wait()  # runs the copy (on_wait): `dsem` has a clock from now on
    c0 = _copy(x, buf, dsem, 0)
    c0.start()
    c0.wait()


def _copy0_waited_last(x, buf, sem, dsem):
    c0 = _copy(x, buf, dsem, 0)
    c0.start()
    c = _copy(x, buf, dsem, 1)
    c.start()
    c.wait()
    c0.wait()


def _copy0_waited_first(x, buf, sem, dsem):
    c0 = _copy(x, buf, dsem, 0)
    c0.start()
    c = _copy(x, buf, dsem, 1)
    c.start()
    c0.wait()  # on_wait: a wait for 0 runs no task, and nothing has signalled `dsem` yet
    c.wait()


def _signal_wait(x, buf, sem, dsem):
    pl.semaphore_signal(sem, 1)
    pl.semaphore_wait(sem, 1)


BODIES = {
    "wait0": _wait0,
    "signal0_wait0": _signal0_wait0,
    "copy0": _copy0,
    "copy_then_copy0": _copy_then_copy0,
    "copy0_waited_last": _copy0_waited_last,
    "copy0_waited_first": _copy0_waited_first,
    "signal_wait": _signal_wait,
}

# (case, dma mode, detect_races) -> what jax 0.12's interpreter did: "ok", or the error it raised
RECORDED = {
    ("wait0", "eager", True): "AssertionError", ("wait0", "eager", False): "ok",
    ("wait0", "on_wait", True): "AssertionError", ("wait0", "on_wait", False): "ok",
    ("signal0_wait0", "eager", True): "ok", ("signal0_wait0", "on_wait", True): "ok",
    ("copy0", "eager", True): "ok", ("copy0", "eager", False): "ok",
    ("copy0", "on_wait", True): "AssertionError", ("copy0", "on_wait", False): "ok",
    ("copy_then_copy0", "eager", True): "ok", ("copy_then_copy0", "on_wait", True): "ok",
    ("copy0_waited_last", "eager", True): "ok", ("copy0_waited_last", "on_wait", True): "ok",
    ("copy0_waited_first", "eager", True): "ok", ("copy0_waited_first", "on_wait", True): "AssertionError",
    ("copy0_waited_first", "on_wait", False): "ok",
    ("signal_wait", "eager", True): "ok", ("signal_wait", "on_wait", True): "ok",
}


def build_case(name: str, *, dma_mode: str = "eager", detect_races: bool = True):
    """(fn, args) of case `name`."""
    def kernel(x, o, buf, sem, dsem):
        BODIES[name](x, buf, sem, dsem)
        o[...] = jnp.zeros(o.shape, o.dtype)

    call = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32), pltpu.SemaphoreType.REGULAR, pltpu.SemaphoreType.DMA],
        interpret=pltpu.InterpretParams(dma_execution_mode=dma_mode, detect_races=detect_races),
    )
    return jax.jit(call), (jnp.ones((8, 128), jnp.float32),)


def run_case(name: str, mode: str, detect_races: bool) -> str:
    """What jax's interpreter does with the case: "ok" or the innermost error's type."""
    import contextlib
    import io
    import sys
    import traceback
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import run_interpret as ri

    try:
        with contextlib.redirect_stderr(io.StringIO()):  # the interpreter prints each callback's traceback
            fn, args = build_case(name, dma_mode=mode, detect_races=detect_races)
            jax.block_until_ready(fn(*args))
    except Exception as e:  # noqa: BLE001 - the outcome is what is recorded
        return ri.innermost_error("".join(traceback.format_exception(e)))[0]
    return "ok"


if __name__ == "__main__":
    for name, mode, races in RECORDED:
        print(f"    ({name!r}, {mode!r}, {races}): {run_case(name, mode, races)!r},")
