"""BUGGY (in interpret mode): a kernel that reads its DMA semaphore's count with `pl.semaphore_read`.

Pattern: jax's TPU test `test_can_read_dma_semaphore`, in short: each device
starts a local copy of its block into the output, stores the copy's DMA
semaphore count (`pl.semaphore_read(sem)`) into a small SMEM output while the
copy is in flight, and waits for the copy.  On a TPU this runs: the count read
is somewhere between 0 and the copy's 4096 bytes.

Bug: jax's interpret mode cannot run it.  The interpreter translates the
kernel into a CPU program and compiles it before any device starts, and has
no rule for `semaphore_read` (line 44): every run raises
`NotImplementedError: MLIR translation rule for primitive 'semaphore_read'
not found for platform cpu`, so a test of this kernel in interpret mode
never gets to run it.

Expected semcheck report: under eager and on_wait, deadlock-free violated
with that error at line 44 (no core ever starts) and every other property
unknown (LAUNCH-3, specs/semantics/divergences.md D12); under hardware all properties
proved.  The fix (examples/dma_count_without_read.py) records the count it
knows instead of reading the semaphore.
"""

from __future__ import annotations

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


def _kernel(x_hbm, o_hbm, n_ref, sem):
    copy = pltpu.make_async_copy(x_hbm, o_hbm, sem)
    copy.start()
    n_ref[0] = pl.semaphore_read(sem)  # BUG in interpret mode: no CPU rule for semaphore_read
    copy.wait()


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    call = pl.pallas_call(
        _kernel,
        out_shape=(jax.ShapeDtypeStruct((8, 128), jnp.float32), jax.ShapeDtypeStruct((1,), jnp.int32)),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=(pl.BlockSpec(memory_space=pl.ANY), pl.BlockSpec(memory_space=pltpu.SMEM)),
        scratch_shapes=[pltpu.SemaphoreType.DMA],
        interpret=_interpret_params(dma_mode, interpret),
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P(AXIS), out_specs=(P(AXIS), P(AXIS)),
                               check_vma=False))
    x = jnp.arange(num_devices * 8 * 128, dtype=jnp.float32) % 89
    x = jax.device_put(x.reshape(-1, 128), NamedSharding(mesh, P(AXIS)))
    return fn, (x,)
