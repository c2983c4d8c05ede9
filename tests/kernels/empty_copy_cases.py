"""Kernels with a copy of no element waited for 0, then an access of its buffer (specs/semantics/buffers.md ERR-34).

One pallas_call on one device: `x` an (8, 128) HBM input, `buf` an (8, 128) VMEM scratch, `sem` a DMA semaphore,
`o` the output. Every kernel first copies row 7 of `x` into `buf` and waits for it, so `sem` holds a clock (RACE-1)
before the copy of no element, `buf[0:0]`, is started and waited for 0; the `unwaited_*` ones read `buf` between
that copy's start and its wait, with no index (`buf[...]`, a window the detector reads as whole, ERR-27) or rows
0:4. `RECORDED` is what jax 0.12's interpreter did with `detect_races=True` ("ok", or "RACE" for
`RuntimeError: RACE DETECTED`); `python tests/kernels/empty_copy_cases.py` runs them again and prints the table
(tests/test_empty_copy_races.py holds semcheck to it, and its slow sibling jax).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _copy(x, buf, sem, start, rows):
    return pltpu.make_async_copy(x.at[pl.ds(start, rows)], buf.at[pl.ds(start, rows)], sem)


def _primed(x, buf, sem):
    c = _copy(x, buf, sem, 7, 1)
    c.start()
    c.wait()  # from here on `sem` holds a clock: a wait for 0 on it passes


def _queued_load(x, buf, sem, o):
    _primed(x, buf, sem)
    empty = _copy(x, buf, sem, 0, 0)
    empty.start()
    empty.wait()  # for 0: eager ran the copy in its start; on_wait leaves its task queued, never run
    o[0:4, :] = buf[0:4, :]


def _queued_store(x, buf, sem, o):
    _primed(x, buf, sem)
    empty = _copy(x, buf, sem, 0, 0)
    empty.start()
    empty.wait()
    buf[0:4, :] = jnp.ones((4, 128), jnp.float32)
    o[0:4, :] = buf[0:4, :]


def _run_late(x, buf, sem, o):
    _primed(x, buf, sem)
    late = _copy(x, buf, sem, 6, 1)
    empty = _copy(x, buf, sem, 0, 0)
    late.start()
    empty.start()
    empty.wait()  # for 0: on_wait leaves the empty copy queued, after the late one
    o[0:4, :] = buf[0:4, :]
    late.wait()  # on_wait: pops the empty copy first (the last queued), which writes buf[0:0] after the load


def _unwaited(x, buf, sem, o, read):
    _primed(x, buf, sem)
    empty = _copy(x, buf, sem, 0, 0)
    empty.start()  # eager: the copy writes buf[0:0] here; nothing orders it before the read below
    read(buf, o)
    empty.wait()  # for 0: eager's start signalled it, on_wait leaves its task queued


def _read_whole(buf, o):
    o[...] = buf[...]  # no index: jax's detector reads the window as whole


def _read_sliced(buf, o):
    o[0:4, :] = buf[0:4, :]  # rows 0:4: the empty window buf[0:0] starts inside it


BODIES = {"queued_load": _queued_load, "queued_store": _queued_store, "run_late": _run_late,
          "unwaited_whole": lambda x, buf, sem, o: _unwaited(x, buf, sem, o, _read_whole),
          "unwaited_sliced": lambda x, buf, sem, o: _unwaited(x, buf, sem, o, _read_sliced)}

# (case, dma mode) -> what jax 0.12's interpreter did with detect_races=True
RECORDED = {
    ("queued_load", "eager"): "ok", ("queued_load", "on_wait"): "ok",
    ("queued_store", "eager"): "ok", ("queued_store", "on_wait"): "ok",
    ("run_late", "eager"): "ok", ("run_late", "on_wait"): "RACE",
    ("unwaited_whole", "eager"): "ok", ("unwaited_whole", "on_wait"): "ok",
    ("unwaited_sliced", "eager"): "RACE", ("unwaited_sliced", "on_wait"): "ok",
}


def build_case(name: str, *, dma_mode: str = "eager"):
    """(fn, args) of case `name`."""
    def kernel(x, o, buf, sem):
        o[...] = jnp.zeros(o.shape, o.dtype)
        BODIES[name](x, buf, sem, o)

    call = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32), pltpu.SemaphoreType.DMA],
        interpret=pltpu.InterpretParams(dma_execution_mode=dma_mode, detect_races=True),
    )
    return jax.jit(call), (jnp.ones((8, 128), jnp.float32),)


def run_case(name: str, mode: str) -> str:
    """What jax's interpreter does with the case: "ok", "RACE", or the innermost error's type."""
    import contextlib
    import io
    import sys
    import traceback
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import run_interpret as ri

    try:
        with contextlib.redirect_stderr(io.StringIO()):  # the interpreter prints each callback's traceback
            fn, args = build_case(name, dma_mode=mode)
            jax.block_until_ready(fn(*args))
    except Exception as e:  # noqa: BLE001 - the outcome is what is recorded
        text = "".join(traceback.format_exception(e))
        return "RACE" if "RACE DETECTED" in text else ri.innermost_error(text)[0]
    return "ok"


if __name__ == "__main__":
    for name, mode in RECORDED:
        print(f"    ({name!r}, {mode!r}): {run_case(name, mode)!r},")
