"""CLEAN: an expert-parallel dispatch whose per-expert counts go round a ring in VMEM rows.

One expert per device; each device holds `T` tokens sorted by the expert the
router chose (top-1; the sorted expert ids are in SMEM). Inside the kernel,
each device

1. zero-fills its output (a local copy, waited) before any peer may write it;
2. counts its tokens per expert as a vector (`iota(E) == expert id`, summed)
   and stores it as its row of a VMEM table `counts[N, E]` (int32);
3. all-gathers the rows round the ring: at step `k`, after a barrier of all
   devices, it copies row `me - k` into the same row of its right neighbour's
   table and waits for both halves (the row it forwards next is the one it has
   just received);
4. moves the table to SMEM by a local copy and waits for it;
5. dispatches the rows of expert `e` to device `e`, at the rows the sources
   before it fill (`sum(counts[s, e] for s < me)`), sized by `counts[me, e]`,
   and waits, per source `s`, for the `counts[s, me]` rows it sends here.

Every DMA size and offset of the dispatch and every `pl.when` is data the
kernel computed and exchanged by remote copies into VMEM (spec ACC-21).

Expected semcheck verdict: all properties proved in every mode at 2, 4 and 8
devices. Interpret mode: the output matches `reference`.
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
TOKENS = 8  # per device
LANES = 128  # expert axis of the count table, padded to a lane width as kernels do


def _interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def route(n: int) -> np.ndarray:
    """Sorted expert ids per device: device d sends token i to expert (d + i // 3) % n."""
    return np.concatenate([np.sort((d + np.arange(TOKENS) // 3) % n) for d in range(n)]).astype(np.int32)


def ring_step(counts, row, send_sem, recv_sem, right):
    """Row `row` of the count table into the same row of the right neighbour's."""
    return pltpu.make_async_remote_copy(counts.at[pl.ds(row, 1)], counts.at[pl.ds(row, 1)], send_sem, recv_sem,
                                        device_id=(right,), device_id_type=pl.DeviceIdType.MESH)


def _kernel(eid_ref, x_ref, o_ref, counts, table, zeros, fill_sem, ring_send, ring_recv, send_sems, recv_sems,
            *, n, t, wait_recv=True):
    me = jax.lax.axis_index(AXIS)
    right = jax.lax.rem(me + 1, n)

    # 1. zero-fill the output before any peer may write it (peers write after the first barrier)
    zeros[...] = jnp.zeros_like(zeros)
    fill = pltpu.make_async_copy(zeros, o_ref, fill_sem)
    fill.start()
    fill.wait()
    barrier = pltpu.get_barrier_semaphore()

    def sync():  # every device is at the same ring step (and, the first time, inside the kernel)
        for d in range(n):
            pl.semaphore_signal(barrier, 1, device_id=(d,), device_id_type=pl.DeviceIdType.MESH)
        pl.semaphore_wait(barrier, n)

    # 2. this device's row: tokens per expert
    row = jnp.zeros((1, LANES), jnp.int32)
    for i in range(t):
        row = row + (jax.lax.broadcasted_iota(jnp.int32, (1, LANES), 1) == eid_ref[i]).astype(jnp.int32)
    counts[pl.ds(me, 1), :] = row

    # 3. all-gather the rows round the ring (each step forwards the row received the step before)
    for k in range(n - 1):
        # without the barrier a neighbour a step ahead could land its next row first, and the wait
        # below would pass on its bytes with this step's row still in flight
        sync()
        copy = ring_step(counts, jax.lax.rem(me + n - k, n), ring_send, ring_recv, right)
        copy.start()
        copy.wait_send()
        if wait_recv:
            copy.wait_recv()

    # 4. the table into SMEM, where the scalar sizes are read
    to_smem = pltpu.make_async_copy(counts, table, fill_sem)
    to_smem.start()
    to_smem.wait()

    # 5. dispatch, sized and placed by the table
    def rows_before(e, upto):  # rows that sources 0 .. upto - 1 send to expert e
        return jax.lax.fori_loop(0, upto, lambda s, acc: acc + table[s, e], 0)

    def offset(e):  # where this device's rows of expert e start in its sorted tokens
        return jax.lax.fori_loop(0, e, lambda f, acc: acc + table[me, f], 0)

    def dispatch(e):
        count = table[me, e]
        return pltpu.make_async_remote_copy(
            x_ref.at[pl.ds(offset(e), count)], o_ref.at[pl.ds(rows_before(e, me), count)], send_sems.at[e],
            recv_sems.at[me], device_id=(e,), device_id_type=pl.DeviceIdType.MESH)

    def arrival(s):  # the rows source s sends here, on recv_sems[s]
        count = table[s, me]
        return pltpu.make_async_copy(o_ref.at[pl.ds(0, count)], o_ref.at[pl.ds(0, count)], recv_sems.at[s])

    for e in range(n):
        @pl.when(table[me, e] > 0)
        def _(e=e):
            dispatch(e).start()
    for e in range(n):
        @pl.when(table[me, e] > 0)
        def _(e=e):
            dispatch(e).wait_send()
    for s in range(n):
        @pl.when(table[s, me] > 0)
        def _(s=s):
            arrival(s).wait()


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None, kernel=_kernel):
    n = num_devices
    mesh = jax.make_mesh((n,), (AXIS,))
    dma = pltpu.SemaphoreType.DMA
    call = pl.pallas_call(
        functools.partial(kernel, n=n, t=TOKENS),
        out_shape=jax.ShapeDtypeStruct((n * TOKENS, LANES), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM), pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.VMEM((n, LANES), jnp.int32), pltpu.SMEM((n, LANES), jnp.int32),
                        pltpu.VMEM((n * TOKENS, LANES), jnp.float32), dma, dma, dma, dma((n,)), dma((n,))],
        compiler_params=pltpu.CompilerParams(collective_id=0),
        interpret=_interpret_params(dma_mode, interpret),
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=(P(AXIS), P(AXIS)), out_specs=P(AXIS), check_vma=False))
    x = jnp.arange(n * TOKENS * LANES, dtype=jnp.float32).reshape(n * TOKENS, LANES) % 97
    x = jax.device_put(x, NamedSharding(mesh, P(AXIS)))
    e = jax.device_put(jnp.asarray(route(n)), NamedSharding(mesh, P(AXIS)))
    return fn, (e, x)


def reference(eids, x, *, num_devices: int):
    """Device e's output: the tokens routed to e, sources in device order, then zeros."""
    n, eids, x = num_devices, np.asarray(eids).reshape(num_devices, TOKENS), np.asarray(x)
    out = np.zeros((n, n * TOKENS, LANES), np.float32)
    for e in range(n):
        got = [x[s * TOKENS + i] for s in range(n) for i in range(TOKENS) if eids[s, i] == e]
        out[e, :len(got)] = np.asarray(got).reshape(-1, LANES) if got else 0
    return out.reshape(-1, LANES)
