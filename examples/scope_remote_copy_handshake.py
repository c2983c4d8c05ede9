"""A ring shift into a `run_scoped` receive buffer, with the handshake inside the scope (clean).

The fix of `buggy/scope_remote_copy_before_entry.py`: every device opens a `pl.run_scoped` region
with a VMEM receive buffer `recv_buf` and, inside it, signals both ring neighbours on the barrier
semaphore and waits for both: a device starts its copy into its RIGHT neighbour's `recv_buf` only
after that neighbour has entered its scope, and leaves the scope only after the copy from its left
neighbour has landed (`wait_recv`). On a TPU no copy touches a neighbour's stack memory outside its
scope; in interpret mode no copy meets a buffer that does not exist, in either DMA mode.

Expected semcheck verdict: all properties proved in every mode.
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


def _kernel(x_ref, o_ref, send_sem, recv_sem, *, num_devices):
    me = jax.lax.axis_index(AXIS)
    right = jax.lax.rem(me + 1, num_devices)
    left = jax.lax.rem(me + num_devices - 1, num_devices)

    def body(recv_buf):
        # inside the scope: the left neighbour may write `recv_buf` once this device says it is here,
        # and this device writes into its right neighbour's once that one has said so
        barrier = pltpu.get_barrier_semaphore()
        pl.semaphore_signal(barrier, 1, device_id=(left,))
        pl.semaphore_signal(barrier, 1, device_id=(right,))
        pl.semaphore_wait(barrier, 2)
        copy = pltpu.make_async_remote_copy(
            src_ref=x_ref, dst_ref=recv_buf, send_sem=send_sem, recv_sem=recv_sem,
            device_id=(right,))
        copy.start()
        copy.wait_send()
        copy.wait_recv()  # the left neighbour's copy has landed before the scope ends
        o_ref[...] = recv_buf[...]

    pl.run_scoped(body, pltpu.VMEM(x_ref.shape, x_ref.dtype))


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None,
          rows: int = 8, lanes: int = 128):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    call = pl.pallas_call(
        functools.partial(_kernel, num_devices=num_devices),
        out_shape=jax.ShapeDtypeStruct((rows, lanes), jnp.float32),
        scratch_shapes=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA],
        compiler_params=pltpu.CompilerParams(collective_id=0),
        interpret=_interpret_params(dma_mode, interpret),
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS),
                               check_vma=False))
    x = jnp.arange(num_devices * rows * lanes, dtype=jnp.float32).reshape(-1, lanes)
    x = jax.device_put(x, NamedSharding(mesh, P(AXIS)))
    return fn, (x,)


def reference(x, *, num_devices: int):
    blocks = x.reshape(num_devices, -1, x.shape[-1])
    return jnp.roll(blocks, 1, axis=0).reshape(x.shape)
