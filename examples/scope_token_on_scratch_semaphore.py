"""A token passed around the ring on a scratch semaphore, beside a run_scoped staging region (clean).

Pattern: a row-block pipeline over a grid. Every step stages its block in a
`pl.run_scoped` region (a VMEM buffer and a DMA semaphore for the HBM -> VMEM
copy), then passes a token around the ring: each device signals its right
neighbour's `token_sem` and waits for the token from its left neighbour before
it goes on. `token_sem` is a scratch semaphore of the call: it exists for the
whole kernel on every device, so a token that arrives while the neighbour is
still staging waits there for the neighbour's wait, and no scope's semaphore
shares its slot.

Expected semcheck verdict: all properties proved. The buggy variant,
`examples/buggy/scope_token_before_neighbour_entry.py`, allocates the token
semaphore in a run_scoped region of its own.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

AXIS = "x"


def _interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def _kernel(x_hbm, o_ref, token_sem, *, num_devices, rows):
    step = pl.program_id(0)
    me = jax.lax.axis_index(AXIS)
    right = jax.lax.rem(me + 1, num_devices)

    def stage(buf, dma_sem):
        start = pl.multiple_of(step * rows, rows)
        copy = pltpu.make_async_copy(x_hbm.at[pl.ds(start, rows)], buf, dma_sem)
        copy.start()
        copy.wait()
        o_ref[...] = buf[...] * 2.0 + 1.0

    pl.run_scoped(stage, pltpu.VMEM(o_ref.shape, jnp.float32), pltpu.SemaphoreType.DMA)

    # the token's semaphore outlives every scope: an early token waits on it
    pl.semaphore_signal(token_sem, 1, device_id=(right,))
    pl.semaphore_wait(token_sem, 1)


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None,
          steps: int = 4, rows: int = 8, lanes: int = 128):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    call = pl.pallas_call(
        functools.partial(_kernel, num_devices=num_devices, rows=rows),
        out_shape=jax.ShapeDtypeStruct((steps * rows, lanes), jnp.float32),
        grid=(steps,),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec((rows, lanes), lambda i: (i, 0)),
        scratch_shapes=[pltpu.SemaphoreType.REGULAR],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)),
        interpret=_interpret_params(dma_mode, interpret),
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS), check_vma=False))
    x = (jnp.arange(num_devices * steps * rows * lanes, dtype=jnp.float32) % 1000).reshape(-1, lanes)
    x = jax.device_put(x, NamedSharding(mesh, P(AXIS)))
    return fn, (x,)


def reference(x, *, num_devices: int):
    return x * 2.0 + 1.0
