"""jax's race-detection test kernel (tests/pallas/tpu_pallas_interpret_distributed_test.py,
`test_race_detection`), ported (clean).

A table of (source, destination) pairs sits in SMEM on every device. For each
pair, the source device copies its whole input block into the destination's
output block and waits for the send; every device counts the pairs that name
it as destination (`recv_count`, data) and, if any, waits on its receive
semaphore for that many blocks at once, through a dummy descriptor
`x_ref.at[pl.ds(0, 8 * recv_count)]` whose only use is its byte count (a
DMA wait whose size is data; the view is taller than `x_ref` when two blocks
arrive, which a wait never checks).

The default table (`pairs=None`, `default_pairs`) is a ring 0 -> 1 -> ... -> N-1 -> 0:
each device receives exactly one block, so nothing races and every output is
written (jax's test asserts no race on the chain [[0, 1], [1, 2], [2, 3]],
which leaves device 0's output unwritten). buggy/race_recv_count_two_writers.py
is the test's second table: two sources write one destination's block.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

AXIS = "x"


def _interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def default_pairs(num_devices: int) -> np.ndarray:
    """(i, i + 1 mod N) for every i: a ring, every device receiving once."""
    i = np.arange(num_devices)
    return np.stack([i, (i + 1) % num_devices], axis=1).astype(np.int32)


def _kernel(pairs_ref, x_ref, o_ref, send_sem, recv_sem):
    me = lax.axis_index(AXIS)
    pairs = pairs_ref[:]
    recv_count = 0
    for k in range(pairs.shape[0]):
        src, dst = pairs[k, 0], pairs[k, 1]

        @pl.when(src == me)
        def _send(dst=dst):
            copy = pltpu.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem, device_id={AXIS: dst})
            copy.start()
            copy.wait_send()

        recv_count += jnp.where(dst == me, 1, 0)

    @pl.when(recv_count > 0)
    def _receive():
        pltpu.make_async_remote_copy(
            x_ref.at[pl.ds(0, 8 * recv_count)], o_ref.at[pl.ds(0, 8 * recv_count)], send_sem, recv_sem,
            device_id={AXIS: me}).wait_recv()


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None, pairs=None):
    """The kernel on every device of a 1-D mesh, on the (source, destination) table `pairs` (K x 2)."""
    n = num_devices
    mesh = jax.make_mesh((n,), (AXIS,))
    table = default_pairs(n) if pairs is None else np.asarray(pairs, dtype=np.int32).reshape(-1, 2)
    if table.size and (table.min() < 0 or table.max() >= n):
        raise ValueError(f"pairs must name devices 0..{n - 1}, got {table.tolist()}")
    call = pl.pallas_call(
        _kernel,
        out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM), pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA],
        interpret=_interpret_params(dma_mode, interpret),
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=(P(None), P(AXIS, None)), out_specs=P(AXIS, None),
                               check_vma=False))
    x = jax.random.uniform(jax.random.key(0), (8 * n, 128))
    x = jax.device_put(x, NamedSharding(mesh, P(AXIS, None)))
    return fn, (table, x)


def reference(pairs, x, *, num_devices: int):
    """Device d ends with the block of the last pair's source that names d (numpy)."""
    blocks = np.asarray(x).reshape(num_devices, 8, 128)
    out = np.full_like(blocks, np.nan)
    for src, dst in np.asarray(pairs).reshape(-1, 2):
        out[dst] = blocks[src]
    return out.reshape(num_devices * 8, 128)
