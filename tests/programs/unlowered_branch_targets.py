"""Programs whose only kernel call with a semaphore result sits where no device runs it: in a cond's other branch,
or in a loop body that runs zero times (PRG-221). jax lowers both, so interpret mode fails either program while it
lowers it, before any call runs; a TPU runs the copy the taken branch makes.

PRG-222: the same holds of every failure jax's interpreter raises while it lowers a call: a kernel it cannot
translate for the CPU (a `semaphore_read`, LAUNCH-3) in a cond's other branch before such a loop, an argument typed
VMEM (ERR-36) in a cond's other branch. PRG-223: the reports name the line of the call that fails (the lines
marked `# fails`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import semcheck

AXIS = "x"
ROWS, LANES = 8, 128
_ANY = pl.BlockSpec(memory_space=pl.ANY)


def _params(interpret, dma_mode="eager"):
    return pltpu.InterpretParams(dma_execution_mode=dma_mode) if interpret is None or interpret is True else interpret


def _copy_kernel(src, dst, sem):
    copy = pltpu.make_async_copy(src, dst, sem)
    copy.start()
    copy.wait()


def _begin_kernel(src, src_alias, dst, sem):
    del src_alias
    pltpu.make_async_copy(src, dst, sem).start()


def _finish_kernel(src, dst, sem, dst_alias):
    del dst_alias
    pltpu.make_async_copy(src, dst, sem).wait()


def copied(x, params):
    """One call that copies `x` and waits: no semaphore result."""
    return pl.pallas_call(_copy_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), in_specs=[_ANY],
                          out_specs=_ANY, scratch_shapes=[pltpu.SemaphoreType.DMA(())], interpret=params)(x)


def copied_in_two_calls(x, params):
    """A call that starts the copy and returns its DMA semaphore (a semaphore result), and one that waits it."""
    shape = jax.ShapeDtypeStruct(x.shape, x.dtype)
    x, dst, sem = pl.pallas_call(  # fails
        _begin_kernel, out_shape=(shape, shape, pltpu.SemaphoreType.DMA(())), in_specs=[_ANY],
        out_specs=(_ANY, _ANY, pl.BlockSpec(memory_space=pltpu.SEMAPHORE)), input_output_aliases={0: 0},
        interpret=params)(x)
    return pl.pallas_call(
        _finish_kernel, out_shape=shape, in_specs=[_ANY, _ANY, pl.BlockSpec(memory_space=pltpu.SEMAPHORE)],
        out_specs=_ANY, input_output_aliases={1: 0}, interpret=params)(x, dst, sem)


def _sharded(program, num_devices, flag):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=(P(AXIS), P()), out_specs=P(AXIS), check_vma=False))
    x = jnp.arange(num_devices * ROWS * LANES, dtype=jnp.float32).reshape(num_devices * ROWS, LANES)
    return fn, (jax.device_put(x, NamedSharding(mesh, P(AXIS))),
                jax.device_put(jnp.asarray([flag], jnp.int32), NamedSharding(mesh, P())))


@semcheck.target(devices=[2])
def semaphore_result_in_the_other_branch(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """`lax.cond` on a flag of 0: the taken branch copies in one call, the other in two calls handing over a
    semaphore."""
    params = _params(interpret, dma_mode)

    def program(x, flag):
        return jax.lax.cond(flag[0] != 0, lambda v: copied_in_two_calls(v, params), lambda v: copied(v, params), x)

    return _sharded(program, num_devices, 0)


@semcheck.target(devices=[2])
def semaphore_result_in_a_loop_run_zero_times(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """One copy, then a `while_loop` whose condition is false at once around the two calls handing over a
    semaphore."""
    params = _params(interpret, dma_mode)

    def program(x, flag):
        y = copied(x, params)
        out, _ = jax.lax.while_loop(lambda c: c[1] < flag[0], lambda c: (copied_in_two_calls(c[0], params), c[1] + 1),
                                    (y, jnp.int32(0)))
        return out

    return _sharded(program, num_devices, 0)


def _read_kernel(src, dst, sem):
    pl.semaphore_signal(sem, 1)
    count = pl.semaphore_read(sem)  # fails
    pl.semaphore_wait(sem, 1)
    dst[...] = src[...]
    dst[0, 0] = count.astype(jnp.float32)


def semaphore_read(x, params):
    """A call that stores a semaphore's count: jax's interpreter has no CPU rule for `semaphore_read`."""
    vmem = pl.BlockSpec(memory_space=pltpu.VMEM)
    return pl.pallas_call(_read_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), in_specs=[vmem],
                          out_specs=vmem, scratch_shapes=[pltpu.SemaphoreType.REGULAR], interpret=params)(x)


def copied_from_vmem(x, params):
    """The copy of `copied`, its argument typed VMEM outside the kernel: jax's interpreter refuses it (ERR-36)."""
    x = pltpu.with_memory_space_constraint(x, pltpu.VMEM)
    return pl.pallas_call(_copy_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), in_specs=[_ANY],  # fails
                          out_specs=_ANY, scratch_shapes=[pltpu.SemaphoreType.DMA(())], interpret=params)(x)


@semcheck.target(devices=[2])
def untranslatable_call_before_a_semaphore_result(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """A cond on a flag of 0 whose other branch reads a semaphore's count, then a `while_loop` run zero times around
    the two calls handing over a semaphore: jax lowers the cond first."""
    params = _params(interpret, dma_mode)

    def program(x, flag):
        y = jax.lax.cond(flag[0] != 0, lambda v: semaphore_read(v, params), lambda v: copied(v, params), x)
        out, _ = jax.lax.while_loop(lambda c: c[1] < flag[0], lambda c: (copied_in_two_calls(c[0], params), c[1] + 1),
                                    (y, jnp.int32(0)))
        return out

    return _sharded(program, num_devices, 0)


@semcheck.target(devices=[2])
def typed_argument_in_the_other_branch(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """A cond on a flag of 0: the taken branch copies twice, the other copies an argument typed VMEM."""
    params = _params(interpret, dma_mode)

    def program(x, flag):
        return jax.lax.cond(flag[0] != 0, lambda v: copied_from_vmem(v, params),
                            lambda v: copied(copied(v, params), params), x)

    return _sharded(program, num_devices, 0)
