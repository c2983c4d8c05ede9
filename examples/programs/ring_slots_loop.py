"""A decode loop over a ring of cache slots, one kernel call per step, 136 steps (correct).

Pattern (written for semcheck): a decoding loop keeps the last `SLOTS` steps' rows in a ring of cache slots in HBM.
Each of its `STEPS` iterations calls one kernel whose scalar-prefetch operand holds the slot (`step % SLOTS`) and
the step itself: the kernel copies that slot's new rows (`new[slot]`) into `cache[slot, pos:pos + ROWS]` with an
async copy and waits for it, and stamps the step into a small SMEM output the loop carries (the last step written).
The cache is the kernel's output, aliased to its input and carried through the loop.

What is right: every slot index is inside the cache, each copy is waited before the call ends.

What semcheck does: each iteration gives the call different scalar inputs (136 distinct (slot, step) pairs, more
than the 128 distinct inputs PRG-185 lowers one by one), but the step is only data to the kernel (it is stored,
never used for an index or a branch), so the 136 lowerings are 4 programs, one per slot, each checked once
(specs/deciding/programs.md PRG-199): every property is proved in every mode.

What the interpreter does: completes with the right numbers in both DMA modes.

`build_with` is the building block of the seeded misuse in examples/programs/buggy/ring_slots_loop_one_slot_short.py.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

AXIS = "x"
STEPS, SLOTS, ROOM, ROWS, LANES = 136, 4, 32, 8, 128
POS = 16  # the rows of a step in its slot

_ANY = pl.BlockSpec(memory_space=pl.ANY)


def interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def _write_slot_kernel(meta_ref, new_ref, cache_in_ref, stamp_in_ref, cache_ref, stamp_ref, sem):
    del cache_in_ref, stamp_in_ref  # the same buffers as cache_ref and stamp_ref (aliased)
    slot = meta_ref[0]
    copy = pltpu.make_async_copy(new_ref.at[slot], cache_ref.at[slot, pl.ds(POS, ROWS)], sem)
    copy.start()
    stamp_ref[0] = meta_ref[1]  # the step: data, never an index
    copy.wait()


def write_slot(slot, step, new, cache, stamp, params):
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1, grid=(1,), in_specs=[_ANY, _ANY, pl.BlockSpec(memory_space=pltpu.SMEM)],
        out_specs=[_ANY, pl.BlockSpec(memory_space=pltpu.SMEM)], scratch_shapes=[pltpu.SemaphoreType.DMA])
    return pl.pallas_call(
        _write_slot_kernel,
        grid_spec=grid_spec,
        out_shape=(jax.ShapeDtypeStruct(cache.shape, cache.dtype), jax.ShapeDtypeStruct(stamp.shape, stamp.dtype)),
        input_output_aliases={2: 0, 3: 1},
        compiler_params=pltpu.CompilerParams(has_side_effects=True),
        interpret=params,
    )(jnp.stack([slot, step]).astype(jnp.int32), new, cache, stamp)


def build_with(num_devices: int, params, *, slots_in_cache: int = SLOTS):
    """The loop of STEPS steps over a ring of SLOTS slots, writing into a cache of `slots_in_cache` slots."""
    mesh = jax.make_mesh((num_devices,), (AXIS,))

    def program(new, cache, stamp):
        def step(i, carry):
            return write_slot(i % SLOTS, i, new, *carry, params)

        return jax.lax.fori_loop(0, STEPS, step, (cache, stamp))

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=(P(AXIS), P(AXIS), P(AXIS)),
                               out_specs=(P(AXIS), P(AXIS)), check_vma=False))
    new = (jnp.arange(num_devices * SLOTS * ROWS * LANES, dtype=jnp.float32) % 97).reshape(
        num_devices * SLOTS, ROWS, LANES)
    cache = jnp.zeros((num_devices * slots_in_cache, ROOM, LANES), jnp.float32)
    stamp = jnp.full((num_devices,), -1, jnp.int32)
    sharded = NamedSharding(mesh, P(AXIS))
    return fn, tuple(jax.device_put(a, sharded) for a in (new, cache, stamp))


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    return build_with(num_devices, interpret_params(dma_mode, interpret))


def reference(new, cache, stamp, *, num_devices: int):
    """Each device's cache: every slot's rows [POS, POS + ROWS) are that slot's new rows; the stamp, the last step."""
    out = np.asarray(cache).reshape(num_devices, SLOTS, ROOM, LANES).copy()
    out[:, :, POS:POS + ROWS] = np.asarray(new).reshape(num_devices, SLOTS, ROWS, LANES)
    return out.reshape(num_devices * SLOTS, ROOM, LANES), np.full((num_devices,), STEPS - 1, np.int32)
