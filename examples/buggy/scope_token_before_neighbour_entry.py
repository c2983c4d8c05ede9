"""BUGGY: a token signalled onto a neighbour's scoped semaphore before the neighbour is in its scope.

Pattern: a row-block pipeline over a grid. Every step stages its block in a
`pl.run_scoped` region (a VMEM buffer and a DMA semaphore for the HBM -> VMEM
copy), then opens a second region with a REGULAR semaphore `token_sem` to pass
a token around the ring: each device signals its right neighbour's
`token_sem` and waits for the token from its left neighbour before writing
the block out. Every device runs the same sequence of scopes, so the k-th
allocation has the same id everywhere in jax's interpreter and the signal
names the semaphore the neighbour waits on.

Bug (line 66): nothing tells the device that its right neighbour has entered
the token scope. The token can land while the neighbour is still staging its
block. On a TPU a scope's semaphores are slots of the region's allocation
(`tpu.sem_alloc` in a `tpu.region`), given no initial value and handed to
whichever region is allocated there: the two regions of a step follow each
other at one point of the kernel, so the early token can count on the staging
copy's DMA semaphore instead. jax's interpreter frees no semaphore and gives
each entry of a scope fresh ids: the early count waits on the id of the
neighbour's `token_sem`, and every run completes with the right output.

Expected semcheck report: invocation-confined violated in every mode (SEM-10):
the signal at line 66 can land before device 1 has entered the scope of
`token_sem` (line 69), on a core where another region's semaphore may hold the slot;
every other property proved. The fix,
`examples/scope_token_on_scratch_semaphore.py`, passes the token on a scratch
semaphore, which no scope shares.
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


def _kernel(x_hbm, o_ref, *, num_devices, rows):
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

    def pass_token(token_sem):
        # BUG: the right neighbour may still be staging, outside this scope
        pl.semaphore_signal(token_sem, 1, device_id=(right,))
        pl.semaphore_wait(token_sem, 1)

    pl.run_scoped(pass_token, pltpu.SemaphoreType.REGULAR)


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None,
          steps: int = 4, rows: int = 8, lanes: int = 128):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    call = pl.pallas_call(
        functools.partial(_kernel, num_devices=num_devices, rows=rows),
        out_shape=jax.ShapeDtypeStruct((steps * rows, lanes), jnp.float32),
        grid=(steps,),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec((rows, lanes), lambda i: (i, 0)),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)),
        interpret=_interpret_params(dma_mode, interpret),
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS), check_vma=False))
    x = (jnp.arange(num_devices * steps * rows * lanes, dtype=jnp.float32) % 1000).reshape(-1, lanes)
    x = jax.device_put(x, NamedSharding(mesh, P(AXIS)))
    return fn, (x,)


def reference(x, *, num_devices: int):
    return x * 2.0 + 1.0
