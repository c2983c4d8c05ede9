"""Binomial-tree reduction to device 0 (clean; the devices do not repeat).

Pattern: a sum over devices gathered on the root in ceil(log2 N) rounds.  In
round k (stride s = 2**k) every device whose index is an odd multiple of s
sends its partial sum to device `me - s` and is done; every device whose index
is a multiple of 2s with a partner `me + s` below N receives that partner's
partial sum and adds it to its own.  Device 0 ends with the total, the others
with the partial sums of their subtrees.  Device 0 receives log2 N times,
device 1 never: no rotation maps the program onto itself, so semcheck cannot
fold it (spec RUN-7) and checks every device.

Synchronisation: before round k's copy the receiver signals the barrier
semaphore (collective_id=0) of its partner ("my landing slot k is free") and
the partner waits for that credit; each round lands in its own VMEM slot and
counts on its own receive semaphore, so an early copy of round k+1 can never
satisfy round k's wait.

Expected semcheck verdict: all seven properties proved.  Interpret mode: the
output of every device matches `reference`.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

AXIS = "x"


def _rounds(num_devices: int) -> int:
    return max(1, (num_devices - 1).bit_length())


def _interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def _kernel(x_ref, acc_ref, landing, send_sem, recv_sems, *, num_devices):
    n = num_devices
    me = jax.lax.axis_index(AXIS)
    barrier = pltpu.get_barrier_semaphore()
    acc_ref[...] = x_ref[...]

    for k in range(_rounds(n)):
        s = 1 << k

        @pl.when((me % (2 * s) == 0) & (me + s < n))
        def _receive():
            partner = me + s
            pl.semaphore_signal(barrier, 1, device_id=(partner,))  # credit: slot k is free
            copy = pltpu.make_async_remote_copy(
                src_ref=acc_ref, dst_ref=landing.at[k], send_sem=send_sem,
                recv_sem=recv_sems.at[k], device_id=(me,),
            )
            copy.wait_recv()
            acc_ref[...] += landing[k]

        @pl.when(me % (2 * s) == s)
        def _send():
            parent = me - s
            pl.semaphore_wait(barrier, 1)
            copy = pltpu.make_async_remote_copy(
                src_ref=acc_ref, dst_ref=landing.at[k], send_sem=send_sem,
                recv_sem=recv_sems.at[k], device_id=(parent,),
            )
            copy.start()
            copy.wait_send()


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None,
          rows: int = 8, lanes: int = 128):
    n = num_devices
    mesh = jax.make_mesh((n,), (AXIS,))
    rounds = _rounds(n)
    call = pl.pallas_call(
        functools.partial(_kernel, num_devices=n),
        out_shape=jax.ShapeDtypeStruct((rows, lanes), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        scratch_shapes=[
            pltpu.VMEM((rounds, rows, lanes), jnp.float32),
            pltpu.SemaphoreType.DMA,
            pltpu.SemaphoreType.DMA((rounds,)),
        ],
        compiler_params=pltpu.CompilerParams(collective_id=0),
        interpret=_interpret_params(dma_mode, interpret),
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS),
                               check_vma=False))
    # Small integers keep the float sums exact.
    x = (jnp.arange(n * rows * lanes, dtype=jnp.float32) % 97).reshape(n * rows, lanes)
    x = jax.device_put(x, NamedSharding(mesh, P(AXIS)))
    return fn, (x,)


def reference(x, *, num_devices: int):
    """Device d ends with the sum of the blocks of its subtree: d .. d + lowbit(d) - 1 (the root: all)."""
    n = num_devices
    parts = np.split(np.asarray(x), n, axis=0)
    out = []
    for d in range(n):
        span = n if d == 0 else d & -d
        out.append(np.sum(parts[d:min(n, d + span)], axis=0))
    return np.concatenate(out, axis=0)
