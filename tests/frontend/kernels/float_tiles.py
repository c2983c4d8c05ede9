"""Kernels that route by float logits they fetch themselves with a local copy (ACC-41, ACC-42, ACC-26).

A mixture of experts that routes inside the kernel reads its gating logits from an HBM input, a block of
tokens at a time, into a VMEM buffer by a local copy; it picks each token's expert by an argmax of the block
and sizes a copy by the number of tokens routed to it. Per device:

* `tile_fetch`: a block of 8 x 128 logits, an HBM input of 1,024 floats, one VMEM slot;
* `gating_double_buffer`: the shape of a shipped kernel's gating buffer, two slots of 8 x 128 (2,048 floats),
  from an HBM input of 16 x 128 logits that passes through `pltpu.with_memory_space_constraint` before the
  call (ACC-26), the second block fetched;
* `tile_read_before_wait`: `tile_fetch` reading the block before the fetch's wait (a race on the logits).

`tile_fetch` takes drawn logits as `table`. `count(num_devices, tokens, block)` is the number of rows each
device copies (what the tests expect semcheck to follow).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import semcheck

from _common import LANES, ROWS, interpret, mesh_1d

AXIS = "x"


def logits(num_devices: int, tokens: int) -> np.ndarray:
    """Normal logits, one row per token (distinct values: no argmax ties)."""
    return np.random.default_rng(7).normal(size=(num_devices * tokens, LANES)).astype(np.float32)


def count(num_devices: int, tokens: int, block: int, table: np.ndarray | None = None) -> list[int]:
    """Per device, the tokens of block `block` whose argmax lane has the device's parity."""
    table = (logits(num_devices, tokens) if table is None else table).reshape(num_devices, tokens, LANES)
    top = table[:, block * ROWS:(block + 1) * ROWS].argmax(axis=-1)
    return [int(((top[d] % 2) == d % 2).sum()) for d in range(num_devices)]


def _kernel(slots: int, block: int, early: bool):
    def kernel(logits_hbm, x_hbm, o_ref, gating, buf, sem, copy_sem):
        me = jax.lax.axis_index(AXIS)
        slot = slots - 1
        fetch = pltpu.make_async_copy(logits_hbm.at[pl.ds(block * ROWS, ROWS)], gating.at[slot], sem)
        fetch.start()
        if early:
            tile = gating[slot]
            fetch.wait()
        else:
            fetch.wait()
            tile = gating[slot]
        n = jnp.sum((jnp.argmax(tile, axis=-1) % 2 == me % 2).astype(jnp.int32))
        cp = pltpu.make_async_copy(x_hbm.at[pl.ds(0, n)], buf.at[pl.ds(0, n)], copy_sem)
        cp.start()
        cp.wait()
        out = pltpu.make_async_copy(buf, o_ref, copy_sem)
        out.start()
        out.wait()

    return kernel


def _build(num_devices: int, *, slots: int = 1, tokens: int = ROWS, block: int = 0, constrain: bool = False,
           early: bool = False, dma_mode: str = "eager", table: np.ndarray | None = None):
    mesh = mesh_1d(num_devices, AXIS)
    call = pl.pallas_call(
        _kernel(slots, block, early),
        out_shape=jax.ShapeDtypeStruct((ROWS, LANES), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY), pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.VMEM((slots, ROWS, LANES), jnp.float32), pltpu.VMEM((ROWS, LANES), jnp.float32),
                        pltpu.SemaphoreType.DMA(()), pltpu.SemaphoreType.DMA(())],
        interpret=interpret(dma_mode),
    )

    def body(g, x):
        if constrain:
            g = pltpu.with_memory_space_constraint(g, pltpu.HBM)
        return call(g, x)

    fn = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P(AXIS), P(AXIS)), out_specs=P(AXIS), check_vma=False))
    x = np.arange(num_devices * ROWS * LANES, dtype=np.float32).reshape(num_devices * ROWS, LANES)
    put = jax.device_put
    sharding = NamedSharding(mesh, P(AXIS))
    table = logits(num_devices, tokens) if table is None else np.asarray(table, np.float32)
    return fn, (put(table, sharding), put(x, sharding))


@semcheck.target(devices=(2, 4))
def tile_fetch(num_devices: int, dma_mode: str = "eager", table: np.ndarray | None = None):
    return _build(num_devices, dma_mode=dma_mode, table=table)


@semcheck.target(devices=(2, 4))
def gating_double_buffer(num_devices: int, dma_mode: str = "eager"):
    return _build(num_devices, slots=2, tokens=2 * ROWS, block=1, constrain=True, dma_mode=dma_mode)


@semcheck.target(devices=(2,))
def tile_read_before_wait(num_devices: int, dma_mode: str = "eager"):
    return _build(num_devices, early=True, dma_mode=dma_mode)


def _ids_kernel(logits_hbm, x_hbm, o_ref, gating, buf, ids_v, ids, hist, sem, copy_sem):
    """`tile_fetch` whose count goes through an index: each token's top-1 lane (`lax.top_k`) is moved to SMEM by a
    local copy, and a histogram indexed by its parity gives the copy's size (ACC-57)."""
    me = jax.lax.axis_index(AXIS)
    fetch = pltpu.make_async_copy(logits_hbm.at[pl.ds(0, ROWS)], gating.at[0], sem)
    fetch.start()
    fetch.wait()
    _, top = jax.lax.top_k(gating[0], 1, is_stable=False)
    ids_v[...] = top
    pltpu.async_copy(ids_v, ids, sem).wait()
    hist[0] = 0
    hist[1] = 0
    for i in range(ROWS):
        e = ids[i, 0] % 2
        hist[e] = hist[e] + 1
    n = hist[me % 2]
    cp = pltpu.make_async_copy(x_hbm.at[pl.ds(0, n)], buf.at[pl.ds(0, n)], copy_sem)
    cp.start()
    cp.wait()
    out = pltpu.make_async_copy(buf, o_ref, copy_sem)
    out.start()
    out.wait()


@semcheck.target(devices=(2, 4))
def tile_topk_ids(num_devices: int, dma_mode: str = "eager", table: np.ndarray | None = None):
    mesh = mesh_1d(num_devices, AXIS)
    call = pl.pallas_call(
        _ids_kernel,
        out_shape=jax.ShapeDtypeStruct((ROWS, LANES), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY), pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.VMEM((1, ROWS, LANES), jnp.float32), pltpu.VMEM((ROWS, LANES), jnp.float32),
                        pltpu.VMEM((ROWS, 1), jnp.int32), pltpu.SMEM((ROWS, 1), jnp.int32), pltpu.SMEM((2,), jnp.int32),
                        pltpu.SemaphoreType.DMA(()), pltpu.SemaphoreType.DMA(())],
        interpret=interpret(dma_mode),
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=(P(AXIS), P(AXIS)), out_specs=P(AXIS), check_vma=False))
    x = np.arange(num_devices * ROWS * LANES, dtype=np.float32).reshape(num_devices * ROWS, LANES)
    sharding = NamedSharding(mesh, P(AXIS))
    table = logits(num_devices, ROWS) if table is None else np.asarray(table, np.float32)
    return fn, (jax.device_put(table, sharding), jax.device_put(x, sharding))
