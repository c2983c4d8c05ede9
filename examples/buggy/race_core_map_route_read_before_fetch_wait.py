"""BUGGY: a `core_map` scatter that reads its routes before the copy fetching them is waited.

The kernel of examples/core_map_routed_scatter.py (a `pl.kernel` over a one-core
`TensorCoreMesh` that fetches a routing table from HBM into SMEM by a local copy
and sends each row to the device and row the table names), with one change: the
table is first filled with the identity routing (each row to itself), and the
routes are loaded after the fetch's start and before its wait, so the loads may
run while the copy is still landing.

Expected semcheck verdict: race-free violated in every mode (the loads of
`table` against the fetch's write half); under `hardware` id-disjoint and id-int16
proved, the rest unknown by the cases of the routes a TPU may read (spec ACC-80); under eager and on_wait each load
reads one route in every run, and the rest is proved (spec ACC-71). Interpret mode: under `on_wait` the fetch lands only at
its wait, so the loads read the identity routing and every device sends its rows
to itself: the output is the input, not `reference`'s; `eager` lands the fetch at
its start, and the output matches. jax's race detector reports the loads and the
fetch in both.
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
TOKENS = 8  # rows per device
LANES = 128
ROWS = 16  # the table's source axis, padded (to the device count past 16)


def _interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def route_table(n: int) -> np.ndarray:
    """route[s, i]: the global output row of source s's row i (g -> 5 g + 3 mod n * TOKENS, a permutation
    for every n that 5 does not divide); the padding is zero."""
    table = np.zeros((max(ROWS, n), LANES), np.int32)
    for s in range(n):
        table[s, :TOKENS] = (5 * (s * TOKENS + np.arange(TOKENS)) + 3) % (n * TOKENS)
    return table


def send_rows(x_ref, o_ref, targets, send_sem, recv_sem):
    """The remote copies of this device's rows, row i to global output row `targets[i]`."""
    return [pltpu.make_async_remote_copy(
        x_ref.at[pl.ds(i, 1)], o_ref.at[pl.ds(jax.lax.rem(g, TOKENS), 1)], send_sem, recv_sem,
        device_id=(jax.lax.div(g, TOKENS),), device_id_type=pl.DeviceIdType.MESH) for i, g in enumerate(targets)]


def meet_and_scatter(copies, n):
    """Steps 2 to 4: the barrier, the sends, their waits and the arrivals' wait."""
    barrier = pltpu.get_barrier_semaphore()
    for d in range(n):
        pl.semaphore_signal(barrier, 1, device_id=(d,), device_id_type=pl.DeviceIdType.MESH)
    pl.semaphore_wait(barrier, n)
    for c in copies:
        c.start()
    for c in copies:
        c.wait_send()


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    n = num_devices

    def kernel(route_hbm, x_ref, o_ref):
        def scoped(table, fetch_sem, send_sem, recv_sem):
            me = jax.lax.axis_index(AXIS)
            for i in range(TOKENS):  # the identity routing, until the fetched table lands
                table[me, i] = me * TOKENS + i
            fetch = pltpu.make_async_copy(route_hbm, table, fetch_sem)
            fetch.start()
            targets = [table[me, i] for i in range(TOKENS)]  # BUG: read before the fetch's wait
            fetch.wait()
            copies = send_rows(x_ref, o_ref, targets, send_sem, recv_sem)
            meet_and_scatter(copies, n)
            pltpu.make_async_copy(o_ref, o_ref, recv_sem).wait()  # the TOKENS rows that land here

        dma = pltpu.SemaphoreType.DMA
        pl.run_scoped(scoped, pltpu.SMEM((max(ROWS, n), LANES), jnp.int32), dma(()), dma(()), dma(()))

    def f(route, x):
        return pl.kernel(kernel, out_type=jax.ShapeDtypeStruct((TOKENS, LANES), jnp.float32),
                         mesh=pltpu.TensorCoreMesh(axis_name="core", num_cores=1),
                         compiler_params=pltpu.CompilerParams(collective_id=0),
                         interpret=_interpret_params(dma_mode, interpret))(route, x)

    mesh = jax.make_mesh((n,), (AXIS,))
    fn = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=(P(), P(AXIS)), out_specs=P(AXIS), check_vma=False))
    x = jnp.arange(n * TOKENS * LANES, dtype=jnp.float32).reshape(n * TOKENS, LANES) % 97
    return fn, (jax.device_put(jnp.asarray(route_table(n)), NamedSharding(mesh, P())),
                jax.device_put(x, NamedSharding(mesh, P(AXIS))))


def reference(route, x, *, num_devices: int):
    """Global output row route[s, i] holds source s's row i."""
    route, x = np.asarray(route), np.asarray(x)
    out = np.zeros_like(x)
    for s in range(num_devices):
        for i in range(TOKENS):
            out[route[s, i]] = x[s * TOKENS + i]
    return out
