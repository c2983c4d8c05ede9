"""A family of one-directional rings with a landing buffer of several slots, for PAR-11 .. PAR-14
(tests/test_parametric_races.py): `build(num_devices, slots=S, off=O, skew=K, credit=C, early=E, loop=L)`.

At grid step s each device copies its block into slot (s + O) mod S of its right neighbour's landing
buffer, waits for its send and for the copy from its left neighbour, and adds slot (s + O + K) mod S
of its own landing buffer into its block. With `credit` every step first hands the left neighbour a
credit on the barrier semaphore and waits for the right neighbour's (examples/ring_allreduce.py's
handshake). Race-free exactly when there is a credit and the read comes after the receive's wait
(`early` reads before it); a skew K reads another slot than the one that arrived, which with the
credit is wrong data but no race. `loop` reads the slot in a `fori_loop` (outside PAR-11).
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


def _kernel(x_ref, o_ref, landing, send_sem, recv_sem, *, n, rows, slots, off, skew, credit, early, loop):
    step = pl.program_id(0)
    me = jax.lax.axis_index(AXIS)
    right = jax.lax.rem(me + 1, n)
    left = jax.lax.rem(me + n - 1, n)

    @pl.when(step == 0)
    def _():
        o_ref[...] = x_ref[...]

    if credit:
        barrier = pltpu.get_barrier_semaphore()
        pl.semaphore_signal(barrier, 1, device_id=(left,))
        pl.semaphore_wait(barrier, 1)
    put = jax.lax.rem(step + off, slots)
    get = jax.lax.rem(step + off + skew, slots)
    copy = pltpu.make_async_remote_copy(src_ref=o_ref, dst_ref=landing.at[pl.ds(put * rows, rows)],
                                        send_sem=send_sem, recv_sem=recv_sem, device_id=(right,))
    copy.start()
    copy.wait_send()

    def add():
        if loop:
            def body(k, carry):
                o_ref[pl.ds(k, 1), :] += landing[pl.ds(get * rows + k, 1), :]
                return carry

            jax.lax.fori_loop(0, rows, body, 0)
        else:
            o_ref[...] += landing[pl.ds(get * rows, rows), :]

    if early:
        add()
    copy.wait_recv()
    if not early:
        add()


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None, rows: int = 8, lanes: int = 128,
          slots: int = 1, off: int = 0, skew: int = 0, credit: bool = True, early: bool = False,
          loop: bool = False):
    n = num_devices
    mesh = jax.make_mesh((n,), (AXIS,))
    params = pltpu.InterpretParams(dma_execution_mode=dma_mode) if interpret in (None, True) else interpret
    call = pl.pallas_call(
        functools.partial(_kernel, n=n, rows=rows, slots=slots, off=off, skew=skew, credit=credit,
                          early=early, loop=loop),
        out_shape=jax.ShapeDtypeStruct((rows, lanes), jnp.float32),
        grid=(n,),
        in_specs=[pl.BlockSpec((rows, lanes), lambda s: (0, 0))],
        out_specs=pl.BlockSpec((rows, lanes), lambda s: (0, 0)),
        scratch_shapes=[pltpu.VMEM((slots * rows, lanes), jnp.float32)] + [pltpu.SemaphoreType.DMA] * 2,
        compiler_params=pltpu.CompilerParams(collective_id=0 if credit else None,
                                             dimension_semantics=("arbitrary",)),
        interpret=params,
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS), check_vma=False))
    x = jnp.arange(n * rows * lanes, dtype=jnp.float32).reshape(n * rows, lanes) % 5
    return fn, (jax.device_put(x, NamedSharding(mesh, P(AXIS))),)
