"""A `lax.cond` chooses the order of two kernels with different patterns, each on its own id (correct).

Pattern: the ring and pairwise kernels of examples/programs/distinct_collective_ids_two_patterns.py
(collective ids `ring_id` 0 and `pair_id` 1), called in a `lax.cond` on a replicated flag: ring then
pairwise when `ring_first` is true, pairwise then ring otherwise. Needs an even number of devices.

What is right: the flag is the same on every device (its `in_specs` entry is `P()`), so every device
runs the same branch; in each branch the two kernels have distinct barrier semaphores (PRG-17). The
front end follows the branch the build's flag takes and, where it cannot tell the flag, checks both
branches (specs/deciding/programs.md PRG-126). examples/programs/buggy/cond_two_patterns_one_id.py puts both
kernels of the pairwise-first branch on one id.

What the interpreter does: completes with the right numbers in both DMA modes, for either flag
(PRG-10).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


def _patterns():
    path = Path(__file__).resolve().parent / "distinct_collective_ids_two_patterns.py"
    spec = importlib.util.spec_from_file_location("semcheck_programs_cond_patterns", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


tp = _patterns()


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None, ring_first: bool = True,
          ring_id: int = 0, pair_id: int = 1, second_ring_id: int | None = None):
    """`second_ring_id`: the ring kernel's id in the pairwise-first branch (default `ring_id`)."""
    if num_devices % 2:
        raise ValueError("the pairwise kernel needs an even number of devices")
    params = tp.interpret_params(dma_mode, interpret)
    mesh = jax.make_mesh((num_devices,), (tp.AXIS,))
    late_ring = ring_id if second_ring_id is None else second_ring_id

    def ring_then_pair(x):
        return tp.call(tp._pair_kernel, tp.call(tp._ring_kernel, x, ring_id, params), pair_id, params)

    def pair_then_ring(x):
        return tp.call(tp._ring_kernel, tp.call(tp._pair_kernel, x, pair_id, params), late_ring, params)

    def program(x, flag):
        return jax.lax.cond(flag[0] != 0, ring_then_pair, pair_then_ring, x)

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=(P(tp.AXIS), P()), out_specs=P(tp.AXIS),
                               check_vma=False))
    x = (jnp.arange(num_devices * tp.ROWS * tp.LANES, dtype=jnp.float32) % 251).reshape(
        num_devices * tp.ROWS, tp.LANES)
    flag = jnp.asarray([1 if ring_first else 0], dtype=jnp.int32)
    return fn, (jax.device_put(x, NamedSharding(mesh, P(tp.AXIS))), jax.device_put(flag, NamedSharding(mesh, P())))


def reference(x, flag, *, num_devices: int):
    ring_first = bool(np.asarray(flag)[0])
    parts = np.asarray(x).reshape(num_devices, tp.ROWS, tp.LANES)
    swap = np.arange(num_devices) ^ 1
    out = np.roll(parts, 1, axis=0)[swap] if ring_first else np.roll(parts[swap], 1, axis=0)
    return out.reshape(-1, tp.LANES)
