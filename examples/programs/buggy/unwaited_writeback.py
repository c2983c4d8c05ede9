"""BUGGY: a kernel whose last write-back DMA is never waited before it exits.

Pattern: a kernel computes its block in a VMEM scratch buffer and writes it back to its HBM result
(`pl.ANY`) with a local async copy, as hand-pipelined kernels do, then the program reads the result
in an XLA operation (`y * 2`).

BUG: the write-back's `.wait()` is missing. The copy can still be writing the result when the kernel
has exited and the result is read. On a TPU: race-free violated (the copy's write half against the
read of the result after the call, specs/semantics/calls.md PRG-9) and exit-balance violated (the scratch DMA
semaphore is not zero at the kernel's exit, PRG-8).

What the interpreter does (recorded in tests/programs/ground_truth.json): under `eager` the copy runs
inside `.start()`, so the numbers are right, the exit check prints the semaphore's non-zero count, and
jax's race detector reports the copy's write against the call's own read of its result at the end of
the call; under `on_wait` the copy is a task nobody runs, so the result keeps its uninitialised
(NaN) value and there is no race to report (no write happens) and no count left.
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
ROWS, LANES = 8, 128


def _interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def _kernel(x_ref, o_hbm, acc, sem):
    acc[...] = x_ref[...] + 1.0
    pltpu.make_async_copy(acc, o_hbm, sem).start()
    # BUG: no .wait() on the write-back before the kernel exits


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    params = _interpret_params(dma_mode, interpret)
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    call = pl.pallas_call(
        _kernel,
        out_shape=jax.ShapeDtypeStruct((ROWS, LANES), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.VMEM((ROWS, LANES), jnp.float32), pltpu.SemaphoreType.DMA],
        interpret=params,
    )

    def program(x):
        return call(x) * 2.0  # an XLA read of the result

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS),
                               check_vma=False))
    x = (jnp.arange(num_devices * ROWS * LANES, dtype=jnp.float32) % 251).reshape(
        num_devices * ROWS, LANES)
    return fn, (jax.device_put(x, NamedSharding(mesh, P(AXIS))),)


def reference(x, *, num_devices: int):
    del num_devices
    return (np.asarray(x) + 1.0) * 2.0
