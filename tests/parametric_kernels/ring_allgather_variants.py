"""Ring all-gather (examples/ring_allgather.py) and mutants that break only at some device counts.

`build(num_devices, variant=...)`:

* "clean": the example's kernel.
* "wraps_past": BUG: the right neighbour is `((me + 1) mod N) mod WRAP` (WRAP = 2048 by default), the
  neighbour of a table sized for 2048 devices. Up to N = WRAP it is the ring; past it device WRAP - 1
  sends to device 0 instead of WRAP, and device WRAP receives nothing (it hangs in its first receive).
* "odd_n": BUG: the right neighbour is `(me + 1) mod (N - N mod 2)`, a ring drawn for even N. For odd
  N device N - 1 sends to device 1, which then receives twice and device 0 not at all.
* "python_past": BUG: in Python, `if N > PAST` (20 by default) the right neighbour is (me + 2) mod N.
  The jaxpr differs past PAST; no trace below it shows that: only a probe past PAST does.
* "extra_signal_at": BUG: at grid step AT (3000 by default) every device signals its left neighbour's
  barrier semaphore once more. Below N = AT + 2 the grid never reaches that step; from there on every
  device exits with the barrier semaphore at 1 (exit-balance).

* "sems_grow": BUG: the launch also allocates an (unused) array of GROW·N semaphores (GROW = 2 by
  default): the ids 2000 .. 2002 + GROW·N pass int16 from N = 15383 on (id-int16, PAR-9).
* "cid_from_n": BUG: the collective id is N + CID (CID = 1000 by default): at N = 2000 - CID .. 2002 -
  CID it is one of the internal ids 2000 .. 2002 (id-disjoint, PAR-9).
* "extra_copy_at": BUG: at grid step AT (3000 by default) every device also copies half a block to its
  right neighbour on the receive semaphore, which no one waits for: from N = AT + 2 on the copies
  deliver more bytes than the waits take (dma-bytes, exit-balance).
* "bytes_odd_n": BUG: at odd N the receive wait is described by a block one row shorter than the copy:
  it takes fewer bytes than arrive (dma-bytes at odd N).

Each mutant is proved at N = 2 .. 12 where it is a correct ring (the first and third at every traced
N): the parametric check (specs/deciding/parametric.md) must still not say "proved for every N >= 2".
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


def _kernel(x_ref, o_ref, local_sem, send_sem, recv_sem, *unused, num_devices, rows, variant, wrap, at, past):
    n = num_devices
    step = pl.program_id(0)
    me = jax.lax.axis_index(AXIS)
    right = jax.lax.rem(me + 1, n)
    if variant == "wraps_past":
        right = jax.lax.rem(right, wrap)  # BUG past N = wrap
    elif variant == "odd_n":
        right = jax.lax.rem(me + 1, n - n % 2)  # BUG at odd N
    elif variant == "python_past" and n > past:
        right = jax.lax.rem(me + 2, n)  # BUG past N = past, decided in Python
    left = jax.lax.rem(me + n - 1, n)

    @pl.when(step == 0)
    def _():
        own = pltpu.make_async_copy(x_ref, o_ref.at[pl.ds(me * rows, rows)], local_sem)
        own.start()
        own.wait()

    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(left,))
    pl.semaphore_wait(barrier, 1)

    if variant == "extra_signal_at":
        @pl.when(step == at)
        def _():
            pl.semaphore_signal(barrier, 1, device_id=(left,))  # BUG from N = at + 2 on

    slot = jax.lax.rem(me - step + n, n)
    block = o_ref.at[pl.ds(slot * rows, rows)]
    copy = pltpu.make_async_remote_copy(src_ref=block, dst_ref=block, send_sem=send_sem,
                                        recv_sem=recv_sem, device_id=(right,))
    copy.start()
    copy.wait_send()
    if variant == "bytes_odd_n":
        short = o_ref.at[pl.ds(slot * rows, rows - n % 2)]  # BUG at odd N
        pltpu.make_async_remote_copy(src_ref=short, dst_ref=short, send_sem=send_sem, recv_sem=recv_sem,
                                     device_id=(right,)).wait_recv()
    else:
        copy.wait_recv()

    if variant == "extra_copy_at":
        @pl.when(step == at)
        def _():
            half = o_ref.at[pl.ds(slot * rows, rows // 2)]
            extra = pltpu.make_async_remote_copy(src_ref=half, dst_ref=half, send_sem=local_sem,
                                                 recv_sem=recv_sem, device_id=(right,))
            extra.start()
            extra.wait_send()  # BUG: the right neighbour never waits for it (from N = at + 2 on)


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None, rows: int = 8, lanes: int = 128,
          variant: str = "clean", wrap: int = 2048, at: int = 3000, past: int = 20, grow: int = 2,
          cid: int = 1000):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    params = pltpu.InterpretParams(dma_execution_mode=dma_mode) if interpret in (None, True) else interpret
    call = pl.pallas_call(
        functools.partial(_kernel, num_devices=num_devices, rows=rows, variant=variant, wrap=wrap, at=at,
                          past=past),
        out_shape=jax.ShapeDtypeStruct((num_devices * rows, lanes), jnp.float32),
        grid=(max(num_devices - 1, 1),),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.SemaphoreType.DMA] * 3
        + ([pltpu.SemaphoreType.REGULAR((grow * num_devices,))] if variant == "sems_grow" else []),
        compiler_params=pltpu.CompilerParams(collective_id=num_devices + cid if variant == "cid_from_n" else 0,
                                             dimension_semantics=("arbitrary",)),
        interpret=params,
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS), check_vma=False))
    x = jnp.arange(num_devices * rows * lanes, dtype=jnp.float32).reshape(num_devices * rows, lanes)
    return fn, (jax.device_put(x, NamedSharding(mesh, P(AXIS))),)
