"""Async copies into outputs typed with a memory space (correct).

Pattern (the idioms of jax's tests/pallas/tpu_pallas_async_test.py that keep a result in VMEM or SMEM
and hand the copy's semaphore on as a result, written anew): a start kernel starts a copy of its input
into an output whose `out_shape` is `pltpu.VMEM(...)` (and one into `pltpu.SMEM(...)`) and returns the
copy's DMA semaphore (a SEMAPHORE output); a done kernel takes the input, the destination (aliased to
its own result, typed the same way) and the semaphore, and waits.

What is right: a TPU keeps an array typed with a memory space in that space for the whole program
(jax's TPU lowering places the custom call's result there, and an input aliased to it too), and the
kernel's ref is that array: no grid copy reads or writes it (specs/semantics/accesses.md GRID-5). So the
copy lands in the very array the done kernel waits on, nothing touches it in between, and every
semaphore is back at zero at the program's end.

What the interpreter does (PRG-12, D21): it cannot build the initial value of a semaphore result, so
lowering the program fails with `NotImplementedError: nan + dma_sem` before any call starts, in both
DMA modes; semcheck says so (deadlock-free violated, at launch) and proves the program under
`--dma-mode hardware`.
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
WORDS = 16  # the SMEM copy's int32 words

_ANY = pl.BlockSpec(memory_space=pl.ANY)
_SEM = pl.BlockSpec(memory_space=pltpu.SEMAPHORE)


def interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def _start_kernel(src_ref, src_alias_ref, dst_ref, sem):
    del src_alias_ref  # the source stays alive (aliased) until the done kernel
    pltpu.make_async_copy(src_ref, dst_ref, sem).start()


def _done_kernel(src_ref, dst_ref, sem, dst_alias_ref):
    del dst_alias_ref  # the destination is the result: it stays where the start kernel's copy lands
    pltpu.make_async_copy(src_ref, dst_ref, sem).wait()


def copy_start(x, space, params):
    """Starts copying `x` into an array of memory space `space` (pltpu.VMEM or pltpu.SMEM); returns
    (x, destination, DMA semaphore)."""
    return pl.pallas_call(
        _start_kernel,
        out_shape=(jax.ShapeDtypeStruct(x.shape, x.dtype), space(x.shape, x.dtype), pltpu.SemaphoreType.DMA(())),
        in_specs=[_ANY],
        out_specs=(_ANY, pl.BlockSpec(memory_space=space), _SEM),
        input_output_aliases={0: 0},
        interpret=params,
    )(x)


def copy_done(x, dst, sem, space, params, kernel=_done_kernel):
    """Waits for the copy of `x` into `dst` (of memory space `space`); returns `dst`."""
    spec = pl.BlockSpec(memory_space=space)
    return pl.pallas_call(
        kernel,
        out_shape=space(x.shape, x.dtype),
        in_specs=[_ANY, spec, _SEM],
        out_specs=spec,
        input_output_aliases={1: 0},
        interpret=params,
    )(x, dst, sem)


def copy_into(x, space, params):
    """Copies `x` into an array of memory space `space`: a start call and a done call, the semaphore handed
    from one to the other."""
    x, dst, sem = copy_start(x, space, params)
    return copy_done(x, dst, sem, space, params)


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    params = interpret_params(dma_mode, interpret)

    def program(x, w):
        return copy_into(x, pltpu.VMEM, params), copy_into(w, pltpu.SMEM, params)

    mesh = jax.make_mesh((num_devices,), (AXIS,))
    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=(P(AXIS), P(AXIS)), out_specs=(P(AXIS), P(AXIS)),
                               check_vma=False))
    return fn, example_inputs(mesh, num_devices)


def example_inputs(mesh, num_devices: int):
    x = (jnp.arange(num_devices * ROWS * LANES, dtype=jnp.float32) % 251).reshape(num_devices * ROWS, LANES)
    w = jnp.arange(num_devices * WORDS, dtype=jnp.int32)
    return jax.device_put(x, NamedSharding(mesh, P(AXIS))), jax.device_put(w, NamedSharding(mesh, P(AXIS)))


def reference(x, w, *, num_devices: int):
    del num_devices
    return np.asarray(x), np.asarray(w)
