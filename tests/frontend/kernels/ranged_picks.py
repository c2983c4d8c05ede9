"""Kernels whose DMA sizes come from each token's argmax over a softmax inside the kernel (ACC-64).

Each device holds `TOKENS` tokens' gating logits over `EXPERTS` = 2 experts (float32, given as input), scores
them by a softmax (which rounds: under `hardware` its values are a TPU's own, ACC-37) and picks each token's
expert by an argmax. The count of tokens per expert is moved to SMEM by a local copy; the device copies
`count[me]` rows (`send`) and waits for `recv` rows on the same semaphore:

* `own_count`: `recv = count[me]`: every property holds whatever the picks (ACC-64: proved under hardware);
* `complement`: `recv = TOKENS - count[1 - me]`: equal to `count[me]` because each token picks one expert,
  which the two counts, derived from the same picks, keep;
* `wait_one_more`: `recv = count[me] + 1`, the copy always made: one row's bytes short for every pick, violated;
* `expert_zero`: `recv = count[0]`: equal on device 0 only; on device 1 whether it holds depends on the picks;
* `lax_top_k`: `own_count` with the pick by `lax.top_k` (Mosaic: an iterated argmax);
* `threshold_count` (ACC-65): the count is of the tokens whose probability for expert 0 is at least 1/2 (a
  comparison of rounded floats: true or false whatever a TPU computes), sent and waited for alike.
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

import semcheck

from _common import LANES, ROWS, interpret

AXIS = "x"
EXPERTS = 2
TOKENS = 2


def logits(num_devices: int, seed: int = 0) -> np.ndarray:
    """`(N * TOKENS, EXPERTS)` float32 logits, far apart in every row."""
    table = np.random.default_rng(seed).normal(scale=2.0, size=(num_devices * TOKENS, EXPERTS))
    table[:, 1] = table[:, 0] + np.where(table[:, 1] > table[:, 0], 1.0, -1.0)
    return table.astype(np.float32)


def _argmax(probs):
    return jnp.argmax(probs, axis=1, keepdims=True)  # the argmax's line


def _top_k(probs):
    return jax.lax.top_k(probs, 1, is_stable=False)[1]  # the top_k's line


def _counts(probs, pick):
    iota = jax.lax.broadcasted_iota(jnp.int32, (TOKENS, EXPERTS), 1)
    return jnp.sum((iota == pick(probs)).astype(jnp.int32), axis=0, keepdims=True)


def _threshold(probs, pick, threshold=0.5):
    over = jnp.sum((probs[:, :1] >= threshold).astype(jnp.int32), axis=0, keepdims=True)  # the threshold's line
    return jnp.concatenate([over, TOKENS - over], axis=1)


def _kernel(logits_ref, x_ref, o_ref, cnt_v, cnt_s, sem, csem, *, recv_of, always, count, pick):
    me = jax.lax.axis_index(AXIS)
    probs = jax.nn.softmax(logits_ref[...], axis=-1)  # the softmax's line
    cnt_v[...] = count(probs, pick)
    pltpu.async_copy(cnt_v, cnt_s, csem).wait()
    send = cnt_s[0, me] + (1 if always else 0)
    recv = recv_of(cnt_s, me)

    def rows(size):
        return pltpu.make_async_copy(x_ref.at[pl.ds(0, size)], o_ref.at[pl.ds(0, size)], sem)

    @pl.when(send > 0)
    def _():
        rows(send).start()  # the copy's line

    @pl.when(recv > 0)
    def _():
        rows(recv).wait()  # the wait's line


def _build(num_devices: int, recv_of, *, always=False, count=_counts, pick=_argmax, table=None, dma_mode="eager"):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    call = pl.pallas_call(
        functools.partial(_kernel, recv_of=recv_of, always=always, count=count, pick=pick),
        out_shape=jax.ShapeDtypeStruct((ROWS, LANES), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM), pl.BlockSpec(memory_space=pltpu.VMEM)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        scratch_shapes=[pltpu.VMEM((1, EXPERTS), jnp.int32), pltpu.SMEM((1, EXPERTS), jnp.int32),
                        pltpu.SemaphoreType.DMA(()), pltpu.SemaphoreType.DMA(())],
        interpret=interpret(dma_mode),
    )
    table = logits(num_devices) if table is None else np.asarray(table, np.float32)
    x = np.arange(num_devices * ROWS * LANES, dtype=np.float32).reshape(num_devices * ROWS, LANES)
    table, x = (jax.device_put(jnp.asarray(a), NamedSharding(mesh, P(AXIS))) for a in (table, x))
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=(P(AXIS), P(AXIS)), out_specs=P(AXIS), check_vma=False))
    return fn, (table, x)


@semcheck.target(devices=(2,))
def own_count(num_devices: int, dma_mode: str = "eager", table=None):
    return _build(num_devices, lambda c, me: c[0, me] + 0, table=table, dma_mode=dma_mode)


@semcheck.target(devices=(2,))
def complement(num_devices: int, dma_mode: str = "eager", table=None):
    return _build(num_devices, lambda c, me: TOKENS - c[0, 1 - me], table=table, dma_mode=dma_mode)


@semcheck.target(devices=(2,))
def wait_one_more(num_devices: int, dma_mode: str = "eager", table=None):
    return _build(num_devices, lambda c, me: c[0, me] + 2, always=True, table=table, dma_mode=dma_mode)


@semcheck.target(devices=(2,))
def expert_zero(num_devices: int, dma_mode: str = "eager", table=None):
    return _build(num_devices, lambda c, me: c[0, 0] + 0, table=table, dma_mode=dma_mode)


@semcheck.target(devices=(2,))
def lax_top_k(num_devices: int, dma_mode: str = "eager", table=None):
    return _build(num_devices, lambda c, me: c[0, me] + 0, pick=_top_k, table=table, dma_mode=dma_mode)


@semcheck.target(devices=(2,))
def threshold_count(num_devices: int, dma_mode: str = "eager", table=None, threshold: float = 0.5):
    return _build(num_devices, lambda c, me: c[0, me] + 0, count=functools.partial(_threshold, threshold=threshold),
                  table=table, dma_mode=dma_mode)
