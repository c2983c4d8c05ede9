"""examples/reduce_scatter_grouped_matmul.py with the inbox zero-filled after the start barrier (BUG).

The clean kernel zero-fills its inbox before it signals the barrier: a peer
starts its copies into my inbox only after it has my signal, so after my
zero-fill. Here the zero-fill comes after the barrier wait (line 37): once
a peer has every signal it sends its round-0 partials into my inbox slot
[0, peer] while I may still be storing zeros over the whole inbox. Nothing
orders the peer's copy (its write half) and my store: race-free violated. On
a TPU a fast peer's rows are overwritten with zeros and its contribution is
lost; the semaphores still balance, so every other property holds.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

_PATH = Path(__file__).resolve().parents[1] / "reduce_scatter_grouped_matmul.py"
_spec = importlib.util.spec_from_file_location("_reduce_scatter_grouped_matmul", _PATH)
clean = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(clean)


def _kernel(bound_ref, off_ref, x_ref, w_ref, o_ref, outbox, inbox, acc, send_sems, recv_sems, *, n, rows):
    me = jax.lax.axis_index(clean.AXIS)
    acc[...] = jnp.zeros_like(acc)
    barrier = pltpu.get_barrier_semaphore()
    for s in range(1, n):
        pl.semaphore_signal(barrier, 1, device_id=(jax.lax.rem(me + s, n),))
    pl.semaphore_wait(barrier, n - 1)
    inbox[...] = jnp.zeros_like(inbox)  # BUG: peers may already be writing into the inbox
    clean.group_rounds(bound_ref, off_ref, x_ref, w_ref, outbox, inbox, acc, send_sems, recv_sems, n=n, rows=rows)
    o_ref[...] = acc[...]


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None, **kwargs):
    return clean.build(num_devices, dma_mode=dma_mode, interpret=interpret, kernel=_kernel, **kwargs)


def reference(sizes, x, w, *, num_devices: int):
    return clean.reference(sizes, x, w, num_devices=num_devices)
