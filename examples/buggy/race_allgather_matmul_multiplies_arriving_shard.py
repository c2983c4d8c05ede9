"""BUGGY: an all-gather grouped matmul that multiplies the halves still arriving.

Pattern: as examples/allgather_grouped_matmul.py: a bidirectional ring gathers
the row shards (top halves clockwise, bottom halves counter-clockwise, one slot
per shard) while each step multiplies rows it holds by their experts' weights.

Bug: data race (line 52 against the copy started at line 51 on the left
neighbour).  The loop was "optimised" to multiply the halves of step s itself
(shards me - s - 1 and me + s + 1, the ones step s receives) instead of the
ones it sends (received at step s - 1): the multiply (its load at line 55 of
the clean kernel, called from line 52) reads a slot the neighbour's copy of
this step may still be writing, before the wait.  Under on_wait the copy runs
only at the wait, so the multiply reads stale rows and the output is wrong.

Expected semcheck report: race-free violated in every mode, the witness naming
the load (line 55 of the clean kernel) and the neighbour's copy (line 51).
Ids, deadlock, exit balance and DMA bytes hold.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import jax


def _clean():
    path = Path(__file__).resolve().parent.parent / "allgather_grouped_matmul.py"
    spec = importlib.util.spec_from_file_location("semcheck_example_allgather_grouped_matmul", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_c = _clean()
AXIS = _c.AXIS


def _kernel(off_ref, ngroups_ref, x_ref, w_ref, o_ref, gathered, send_sems, recv_sems, *, n, rows):
    me = jax.lax.axis_index(AXIS)
    mult = functools.partial(_c._multiply, off_ref, ngroups_ref, gathered, w_ref, o_ref, rows=rows)
    _c.enter(x_ref, gathered, n=n)
    mult(me, 0)
    mult(me, 1)

    def step(s, carry):
        copies = _c.ring_copies(gathered, send_sems, recv_sems, s, n=n, rows=rows)
        for c in copies:
            c.start()
        mult(jax.lax.rem(me + 2 * n - s - 1, n), 0)  # BUG: the halves this step receives, not yet waited
        mult(jax.lax.rem(me + s + 1, n), 1)
        for c in copies:
            c.wait_send()
        for c in copies:
            c.wait_recv()
        return carry

    jax.lax.fori_loop(0, n - 1, step, 0)


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    return _c.build(num_devices, dma_mode=dma_mode, interpret=interpret, kernel=_kernel)


def reference(offsets, used, x, w, *, num_devices: int):
    return _c.reference(offsets, used, x, w, num_devices=num_devices)
