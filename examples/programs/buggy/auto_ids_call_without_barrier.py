"""BUGGY (on a TPU only): a program that turns on jax's automatic collective ids and calls a kernel that
uses no barrier semaphore.

Pattern: `jax.config.update("jax_pallas_auto_assign_collective_ids", "yes")`, as a program does to let
jax pick the collective ids of its barrier kernels, and a kernel that stages its block through VMEM with
a local async copy (started and waited), called twice in one jitted program.

BUG: under `yes` jax gives every kernel without a collective_id an id of its own (keyed by its module),
and its TPU lowering refuses a kernel that has an id but no barrier semaphore: `_lowered_to_custom_call_config`
(jax/_src/tpu_custom_call.py) raises `ValueError: collective_id has to be unspecified or None when not
using a custom barrier`. Nothing of the jitted program runs on a TPU (specs/semantics/kernels.md LAUNCH-7).
semcheck under `--dma-mode hardware`: deadlock-free violated with jax's error, the rest proved (nothing
runs, LAUNCH-5). Fix: leave the mode at "no" (the default) when some kernel has no barrier, give ids by
hand to the barrier kernels, or set `CompilerParams(allow_collective_id_without_custom_barrier=True)`.

What the interpreter does (recorded in tests/programs/ground_truth.json): it uses no collective id it
does not need, so both calls run and the result is right, in both DMA modes (divergence D31).
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


def _kernel(x_hbm, o_hbm, acc, sem):
    copy_in = pltpu.make_async_copy(x_hbm, acc, sem)
    copy_in.start()
    copy_in.wait()
    acc[...] = acc[...] + 1.0
    copy_out = pltpu.make_async_copy(acc, o_hbm, sem)
    copy_out.start()
    copy_out.wait()


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    jax.config.update("jax_pallas_auto_assign_collective_ids", "yes")  # BUG: with a kernel without a barrier
    params = _interpret_params(dma_mode, interpret)
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    call = pl.pallas_call(
        _kernel,
        out_shape=jax.ShapeDtypeStruct((ROWS, LANES), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.VMEM((ROWS, LANES), jnp.float32), pltpu.SemaphoreType.DMA],
        interpret=params,
    )

    def program(x):
        return call(call(x))

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS),
                               check_vma=False))
    x = (jnp.arange(num_devices * ROWS * LANES, dtype=jnp.float32) % 251).reshape(
        num_devices * ROWS, LANES)
    return fn, (jax.device_put(x, NamedSharding(mesh, P(AXIS))),)


def reference(x, *, num_devices: int):
    del num_devices
    return np.asarray(x) + 2.0
