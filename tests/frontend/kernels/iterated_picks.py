"""Kernels whose DMA sizes come from each token's top 2 of 3 experts, picked inside the kernel by an iterated
argmax over a softmax, each pick masked with -inf before the next (ACC-74).

Each device holds `TOKENS` = 1 token's gating logits over `EXPERTS` = 3 experts (float32, given as input), scores
them by a softmax (which rounds: under `hardware` its values are a TPU's own, ACC-37) and picks the token's top
`K` = 2 experts. The count of picks per expert is moved to SMEM by a local copy; for each expert with a pick the
device copies `count[e]` rows into the expert's two-row slot of its output and then waits for one row per expert
with a pick, on one semaphore:

* `masked_argmax`: the picks by `jnp.argmax`, the first masked with -inf before the second, as expert-parallel MoE
  kernels do: the two picks differ, each count is 0 or 1, and every copy is waited for whatever a TPU's softmax
  gives; a pick that repeated would copy two rows into one expert's slot and wait for one;
* `masked_top_k`: the picks by `lax.top_k(probs, 2, is_stable=False)` (Mosaic: an iterated argmax, each pick masked by -inf);
* `stable_top_k`: the same with `lax.top_k`'s default `is_stable=True`, which jax's TPU lowering refuses (ACC-88);
* `unmasked_argmax`: the second pick an argmax of the softmax's values masked by `0.0` rather than -inf: a TPU's
  probability may be 0 (an `exp` that underflows), so the pick may repeat: no case is excluded;
* `truncated`: no pick: the count of expert `e` is `int(2 * probs[e])` (1 for the likeliest expert, 0 for the others:
  their probabilities are far from 1/2), a conversion semcheck decides from the softmax's bounds in the interpreter's
  modes (ACC-36) and never under `hardware`, where its operand carries only the bounds of its exact value (ACC-74).
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
EXPERTS = 3
TOKENS = 1
K = 2


def logits(num_devices: int, seed: int = 0) -> np.ndarray:
    """`(N * TOKENS, EXPERTS)` float32 logits, a unit apart in every row."""
    rng = np.random.default_rng(seed)
    return np.stack([rng.permutation(EXPERTS) for _ in range(num_devices * TOKENS)]).astype(np.float32)


def _one_hot(pick):
    return jax.lax.broadcasted_iota(jnp.int32, (TOKENS, EXPERTS), 1) == pick


def _argmax_picks(probs, fill):
    picks = []
    for _ in range(K):
        best = jnp.argmax(probs, axis=1, keepdims=True)  # the pick's line
        picks.append(_one_hot(best))
        probs = jnp.where(picks[-1], fill, probs)
    return picks


def _masked_argmax(probs):
    return _argmax_picks(probs, -jnp.inf)


def _unmasked_argmax(probs):
    return _argmax_picks(probs, 0.0)


def _masked_top_k(probs):
    ids = jax.lax.top_k(probs, K, is_stable=False)[1]  # the top_k's line
    return [_one_hot(ids[:, j:j + 1]) for j in range(K)]


def _stable_top_k(probs):
    ids = jax.lax.top_k(probs, K)[1]  # the stable top_k's line
    return [_one_hot(ids[:, j:j + 1]) for j in range(K)]


def _truncated(probs):
    return [(probs * 2.0).astype(jnp.int32)]  # the conversion's line


def _kernel(logits_ref, x_ref, o_ref, cnt_v, cnt_s, sem, csem, *, pick):
    probs = jax.nn.softmax(logits_ref[...], axis=-1)  # the softmax's line
    cnt_v[...] = jnp.sum(sum(p.astype(jnp.int32) for p in pick(probs)), axis=0, keepdims=True)
    pltpu.async_copy(cnt_v, cnt_s, csem).wait()

    def rows(e, size):
        return pltpu.make_async_copy(x_ref.at[pl.ds(0, size)], o_ref.at[pl.ds(2 * e, size)], sem)

    for e in range(EXPERTS):
        @pl.when(cnt_s[0, e] > 0)
        def _():
            rows(e, cnt_s[0, e]).start()  # the copy's line
    for e in range(EXPERTS):
        @pl.when(cnt_s[0, e] > 0)
        def _():
            rows(e, 1).wait()  # the wait's line


def _build(num_devices: int, pick, table=None, dma_mode="eager"):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    call = pl.pallas_call(
        functools.partial(_kernel, pick=pick),
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
def masked_argmax(num_devices: int, dma_mode: str = "eager", table=None):
    return _build(num_devices, _masked_argmax, table=table, dma_mode=dma_mode)


@semcheck.target(devices=(2,))
def masked_top_k(num_devices: int, dma_mode: str = "eager", table=None):
    return _build(num_devices, _masked_top_k, table=table, dma_mode=dma_mode)


@semcheck.target(devices=(2,))
def stable_top_k(num_devices: int, dma_mode: str = "eager", table=None):
    return _build(num_devices, _stable_top_k, table=table, dma_mode=dma_mode)


@semcheck.target(devices=(2,))
def unmasked_argmax(num_devices: int, dma_mode: str = "eager", table=None):
    return _build(num_devices, _unmasked_argmax, table=table, dma_mode=dma_mode)


@semcheck.target(devices=(2,))
def truncated(num_devices: int, dma_mode: str = "eager", table=None):
    return _build(num_devices, _truncated, table=table, dma_mode=dma_mode)
