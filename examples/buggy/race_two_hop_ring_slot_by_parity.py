"""BUGGY: a two-hop ring that picks the landing slot by the sender's parity; it races only at odd N.

Pattern: at every grid step each device sends its block to the device one to
its right and to the device two to its right.  A receiver has a landing buffer
of two slots, one per sender, and adds both into its block once both copies
have arrived.  Before sending, each device hands each of its two senders a
credit (its own semaphore per sender, so a count says who signalled) and waits
for the credits of its two receivers: a copy of step s+1 never overwrites a
slot before the receiver has read it at step s.

Bug: data race at odd N only (lines 66-71).  The sender picks the slot by its
own parity, `me % 2`, assuming that the two devices feeding a receiver, d - 1
and d - 2, always differ in parity.  They do when N is even.  When N is odd,
device 1 is fed by devices 0 and N - 1, both even: their copies of one step
write slot 0 of device 1 at once, and nothing orders them.  At N = 2, 4, 6, ...
every property holds.

Expected semcheck report: race-free violated at every odd N (at N = 3: the
copies of devices 0 and 2 into slot 0 of device 1); at every even N, race-free
proved.  `semcheck every-n` says violated at N = 3, 5, 7, ... (the race
argument of specs/deciding/parametric.md PAR-14 finds it too, at its smallest N); the
semaphore properties hold at every N.
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


def _kernel(x_ref, o_ref, landing, send1, send2, recv, credit1, credit2, *, num_devices, rows):
    n = num_devices
    step = pl.program_id(0)
    me = jax.lax.axis_index(AXIS)
    right1 = jax.lax.rem(me + 1, n)
    right2 = jax.lax.rem(me + 2, n)
    left1 = jax.lax.rem(me + n - 1, n)
    left2 = jax.lax.rem(me + n - 2, n)

    @pl.when(step == 0)
    def _():
        o_ref[...] = x_ref[...]

    # Credits: my slots are free for this step; wait until both receivers say so of theirs.
    pl.semaphore_signal(credit1, 1, device_id=(left1,))
    pl.semaphore_signal(credit2, 1, device_id=(left2,))
    pl.semaphore_wait(credit1, 1)
    pl.semaphore_wait(credit2, 1)

    slot = jax.lax.rem(me, 2)  # BUG: d - 1 and d - 2 share a parity across the wrap when N is odd
    dst = landing.at[pl.ds(pl.multiple_of(slot * rows, rows), rows)]
    one = pltpu.make_async_remote_copy(src_ref=o_ref, dst_ref=dst, send_sem=send1, recv_sem=recv,
                                       device_id=(right1,))
    two = pltpu.make_async_remote_copy(src_ref=o_ref, dst_ref=dst, send_sem=send2, recv_sem=recv,
                                       device_id=(right2,))
    one.start()
    two.start()
    one.wait_send()
    two.wait_send()
    one.wait_recv()
    two.wait_recv()
    o_ref[...] += landing[pl.ds(0, rows), :] + landing[pl.ds(rows, rows), :]


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None, rows: int = 8, lanes: int = 128):
    n = num_devices
    mesh = jax.make_mesh((n,), (AXIS,))
    params = _interpret_params(dma_mode, interpret)

    call = pl.pallas_call(
        functools.partial(_kernel, num_devices=n, rows=rows),
        out_shape=jax.ShapeDtypeStruct((rows, lanes), jnp.float32),
        grid=(n,),
        in_specs=[pl.BlockSpec((rows, lanes), lambda s: (0, 0))],
        out_specs=pl.BlockSpec((rows, lanes), lambda s: (0, 0)),
        scratch_shapes=[pltpu.VMEM((2 * rows, lanes), jnp.float32)]
        + [pltpu.SemaphoreType.DMA] * 3 + [pltpu.SemaphoreType.REGULAR] * 2,
        compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)),
        interpret=params,
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS), check_vma=False))
    x = jnp.arange(n * rows * lanes, dtype=jnp.float32).reshape(n * rows, lanes) % 7
    x = jax.device_put(x, NamedSharding(mesh, P(AXIS)))
    return fn, (x,)
