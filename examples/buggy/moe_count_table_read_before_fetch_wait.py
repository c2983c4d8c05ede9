"""BUGGY: an expert-parallel dispatch that reads its count table before the copy fetching it is waited.

The kernel of examples/moe_count_table_fetch.py (a per-expert count table
fetched from HBM into SMEM by a local copy, its counts used as the sizes,
offsets and predicates of the dispatch), with one change: the fetch is waited
only at the kernel's end, so the loads of `table` that size, place and guard
the dispatch and its waits may run while the copy is still landing in it.

Expected semcheck verdict: race-free violated in every mode (a load of `table`
against the fetch's write half); under `hardware` id-disjoint and id-int16 proved,
the rest unknown by the cases of the counts a TPU may read (spec ACC-80); under eager and on_wait
each load reads one value in every run, and the rest is proved (spec ACC-71). Interpret mode: under `on_wait` the fetch lands only at its
wait, so the dispatch reads the zeros the kernel stored first and sends
nothing (the output is zeros, not `reference`'s); `eager` lands it at its
start, and the output matches.
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
LANES = 128  # the expert axis of the table, padded to a lane width
ROWS = 16  # the source axis of the table, padded (to the device count past 16)


def _interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def experts(n: int) -> np.ndarray:
    """Sorted expert ids per device: device d sends token i to expert (d + i // 3) % n."""
    return np.stack([np.sort((d + np.arange(TOKENS) // 3) % n) for d in range(n)]).astype(np.int32)


def count_table(n: int) -> np.ndarray:
    """counts[s, e]: rows source s sends to expert e (the rest of the padded table is zero)."""
    table = np.zeros((max(ROWS, n), LANES), np.int32)
    for s, ids in enumerate(experts(n)):
        table[s, :n] = np.bincount(ids, minlength=n)
    return table


def _kernel(counts_hbm, x_ref, o_ref, table, zeros, fetch_sem, fill_sem, send_sems, recv_sems, *, n):
    me = jax.lax.axis_index(AXIS)

    # 1. the count table into SMEM, where the scalar sizes are read (BUG: waited only at the end;
    # the entries it uses start at zero, so a dispatch that reads them before the copy lands sends nothing)
    for s in range(n):
        for e in range(n):
            table[s, e] = 0
    fetch = pltpu.make_async_copy(counts_hbm, table, fetch_sem)
    fetch.start()

    # 2. zero-fill the output, then every peer is past its zero-fill
    zeros[...] = jnp.zeros_like(zeros)
    fill = pltpu.make_async_copy(zeros, o_ref, fill_sem)
    fill.start()
    fill.wait()
    barrier = pltpu.get_barrier_semaphore()
    for d in range(n):
        pl.semaphore_signal(barrier, 1, device_id=(d,), device_id_type=pl.DeviceIdType.MESH)
    pl.semaphore_wait(barrier, n)

    # 3. dispatch, sized and placed by the table
    def rows_before(e):  # rows that sources 0 .. me - 1 send to expert e
        return jax.lax.fori_loop(0, me, lambda s, acc: acc + table[s, e], 0)

    def offset(e):  # where this device's rows of expert e start in its sorted tokens
        return jax.lax.fori_loop(0, e, lambda f, acc: acc + table[me, f], 0)

    def dispatch(e):
        count = table[me, e]
        return pltpu.make_async_remote_copy(
            x_ref.at[pl.ds(offset(e), count)], o_ref.at[pl.ds(rows_before(e), count)], send_sems.at[e],
            recv_sems.at[me], device_id=(e,), device_id_type=pl.DeviceIdType.MESH)

    def arrival(s):  # the rows source s sends here, on recv_sems[s]
        count = table[s, me]
        return pltpu.make_async_copy(o_ref.at[pl.ds(0, count)], o_ref.at[pl.ds(0, count)], recv_sems.at[s])

    for e in range(n):
        @pl.when(table[me, e] > 0)
        def _(e=e):
            dispatch(e).start()

    # 4. the sends, then what every source sends here
    for e in range(n):
        @pl.when(table[me, e] > 0)
        def _(e=e):
            dispatch(e).wait_send()
    for s in range(n):
        @pl.when(table[s, me] > 0)
        def _(s=s):
            arrival(s).wait()
    fetch.wait()  # BUG: after every read of the table


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    n = num_devices
    mesh = jax.make_mesh((n,), (AXIS,))
    dma = pltpu.SemaphoreType.DMA
    call = pl.pallas_call(
        functools.partial(_kernel, n=n),
        out_shape=jax.ShapeDtypeStruct((TOKENS, LANES), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY), pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.SMEM((max(ROWS, n), LANES), jnp.int32), pltpu.VMEM((TOKENS, LANES), jnp.float32),
                        dma, dma, dma((n,)), dma((n,))],
        compiler_params=pltpu.CompilerParams(collective_id=0),
        interpret=_interpret_params(dma_mode, interpret),
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=(P(), P(AXIS)), out_specs=P(AXIS), check_vma=False))
    x = jnp.arange(n * TOKENS * LANES, dtype=jnp.float32).reshape(n * TOKENS, LANES) % 97
    x = jax.device_put(x, NamedSharding(mesh, P(AXIS)))
    counts = jax.device_put(jnp.asarray(count_table(n)), NamedSharding(mesh, P()))
    return fn, (counts, x)


def reference(counts, x, *, num_devices: int):
    """Device e's output: the rows every source sends to expert e, source by source, then zeros."""
    counts, x = np.asarray(counts), np.asarray(x)
    n = num_devices
    out = np.zeros_like(x)
    for e in range(n):
        at = e * TOKENS
        for s in range(n):
            start = s * TOKENS + int(counts[s, :e].sum())
            c = int(counts[s, e])
            out[at:at + c] = x[start:start + c]
            at += c
    return out
