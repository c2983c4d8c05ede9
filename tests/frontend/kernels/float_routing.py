"""Kernels whose DMA sizes come from routing computed in the kernel from float logits (ACC-25).

Each device holds `ROWS` tokens' gating logits over `EXPERTS` experts (float32, given as input) and
routes every token to its top `K` experts inside the kernel, as shipped expert-parallel MoE kernels do:
iterated `max`/`argmax` with the chosen expert masked by -inf (or `lax.top_k`), a per-expert count of
an integer mask. The count of the device's own expert is moved to SMEM by a local copy and sizes a
copy of that many rows.

* `iterated_topk`, `lax_topk`, `float_count`: routing by exact operations only (the float count
  sums 0.0 and 1.0: no partial sum rounds): every property decided in every mode;
* `softmax_topk`: the logits go through a softmax first (an `exp`, a sum and a division, which round):
  followed within bounds in the interpreter's modes (ACC-35), where every top-k choice has a clear margin:
  decided there; unknown under hardware, naming the softmax's line (ACC-37);
* `near_tie_softmax`: the same with two of a token's logits one float32 ulp apart: their softmax bounds
  overlap, unknown in every mode, naming the argmax's line (ACC-36);
* `branch_softmax`: device 0 scores by the softmax of its logits, the others by that of their negation, in the
  two branches of a `cond`: bounds do not cross a branch (ACC-35), unknown in every mode;
* `tied_topk`: two experts tie for a token's top pick: decided in the interpreter's modes (ACC-28),
  unknown under hardware, naming the argmax's line;
* `logits_from_matmul`: the logits are computed around the kernel by a matmul (which rounds):
  unknown, naming the matmul's line; `logits_sliced` takes them by exact slicing: decided.
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
EXPERTS = 4
K = 2


def logits(num_devices: int, seed: int = 0) -> np.ndarray:
    """`(N * ROWS, EXPERTS)` float32 logits, distinct in every row."""
    return np.random.default_rng(seed).normal(size=(num_devices * ROWS, EXPERTS)).astype(np.float32)


def routed_rows(table: np.ndarray, num_devices: int) -> list[int]:
    """Per device `d`: how many of its tokens chose expert `d` among their top `K` (numpy's reading)."""
    top = np.argsort(-table, axis=1)[:, :K].reshape(num_devices, ROWS, K)
    return [int((top[d] == d).sum()) for d in range(num_devices)]


def _iterated(g):
    iota = jax.lax.broadcasted_iota(jnp.int32, g.shape, 1)
    t2e = jnp.zeros(g.shape, jnp.int32)
    for _ in range(K):
        idx = jnp.argmax(g, axis=1, keepdims=True)  # the argmax's line
        mask = iota == idx
        t2e += mask.astype(jnp.int32)
        g = jnp.where(mask, -jnp.inf, g)
    return t2e


def _top_k(g):
    _, idx = jax.lax.top_k(g, K, is_stable=False)
    iota = jax.lax.broadcasted_iota(jnp.int32, (g.shape[0], K, g.shape[1]), 2)
    return (idx[:, :, None] == iota).astype(jnp.int32).sum(axis=1)


def _route_kernel(logits_ref, x_ref, o_ref, cnt_v, cnt_s, sem, csem, *, route, score, float_count):
    me = jax.lax.axis_index(AXIS)
    g = score(logits_ref[...])
    t2e = route(g)
    if float_count:
        sizes = jnp.sum(t2e.astype(jnp.float32), axis=0, keepdims=True).astype(jnp.int32)
    else:
        sizes = jnp.sum(t2e, axis=0, keepdims=True)
    cnt_v[...] = sizes
    pltpu.async_copy(cnt_v, cnt_s, csem).wait()
    size = cnt_s[0, me]

    @pl.when(size > 0)
    def _():
        pltpu.async_copy(x_ref.at[pl.ds(0, size)], o_ref.at[pl.ds(0, size)], sem).wait()


def _softmax(g):
    return jax.nn.softmax(g, axis=-1)  # the softmax's line


def _build(num_devices: int, *, route=_iterated, score=lambda g: g, float_count=False, table=None,
           around=None, dma_mode="eager"):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    call = pl.pallas_call(
        functools.partial(_route_kernel, route=route, score=score, float_count=float_count),
        out_shape=jax.ShapeDtypeStruct((ROWS, LANES), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM), pl.BlockSpec(memory_space=pltpu.VMEM)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        scratch_shapes=[pltpu.VMEM((1, EXPERTS), jnp.int32), pltpu.SMEM((1, EXPERTS), jnp.int32),
                        pltpu.SemaphoreType.DMA(()), pltpu.SemaphoreType.DMA(())],
        interpret=interpret(dma_mode),
    )
    table = logits(num_devices) if table is None else table
    x = np.arange(num_devices * ROWS * LANES, dtype=np.float32).reshape(num_devices * ROWS, LANES)
    table, x = (jax.device_put(jnp.asarray(a), NamedSharding(mesh, P(AXIS))) for a in (table, x))
    if around is None:
        fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=(P(AXIS), P(AXIS)), out_specs=P(AXIS),
                                   check_vma=False))
        return fn, (table, x)

    def body(h, w, x):
        return call(around(h, w), x)

    fn = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P(AXIS), P(), P(AXIS)), out_specs=P(AXIS),
                               check_vma=False))
    return fn, (table, jax.device_put(jnp.eye(EXPERTS, dtype=jnp.float32), NamedSharding(mesh, P())), x)


@semcheck.target(devices=(2, 4))
def iterated_topk(num_devices: int, dma_mode: str = "eager"):
    return _build(num_devices, dma_mode=dma_mode)


@semcheck.target(devices=(2,))
def lax_topk(num_devices: int, dma_mode: str = "eager"):
    return _build(num_devices, route=_top_k, dma_mode=dma_mode)


@semcheck.target(devices=(2,))
def float_count(num_devices: int, dma_mode: str = "eager"):
    return _build(num_devices, float_count=True, dma_mode=dma_mode)


@semcheck.target(devices=(2,))
def softmax_topk(num_devices: int, dma_mode: str = "eager"):
    return _build(num_devices, score=_softmax, dma_mode=dma_mode)


def _branch_softmax(g):
    me = jax.lax.axis_index(AXIS)
    return jax.lax.cond(me == 0, _softmax, lambda g: _softmax(-g), g)  # the branches' line


@semcheck.target(devices=(2,))
def branch_softmax(num_devices: int, dma_mode: str = "eager"):
    return _build(num_devices, score=_branch_softmax, dma_mode=dma_mode)


def near_tie_logits(num_devices: int) -> np.ndarray:
    table = logits(num_devices)
    top = np.float32(table[3].max() + 1.0)
    table[3, 1], table[3, 2] = top, np.nextafter(top, np.float32(np.inf))  # token 3: one ulp apart, first
    return table


@semcheck.target(devices=(2,))
def near_tie_softmax(num_devices: int, dma_mode: str = "eager"):
    return _build(num_devices, score=_softmax, table=near_tie_logits(num_devices), dma_mode=dma_mode)


def tied_logits(num_devices: int) -> np.ndarray:
    table = logits(num_devices)
    table[3, 1] = table[3, 2] = table[3].max() + 1.0  # token 3 of device 0: experts 1 and 2 tie first
    return table


@semcheck.target(devices=(2,))
def tied_topk(num_devices: int, dma_mode: str = "eager"):
    return _build(num_devices, table=tied_logits(num_devices), dma_mode=dma_mode)


def _matmul(h, w):
    return h @ w  # the matmul's line


def _sliced(h, w):
    return h[:, :EXPERTS]


@semcheck.target(devices=(2,))
def logits_from_matmul(num_devices: int, dma_mode: str = "eager"):
    return _build(num_devices, around=_matmul, dma_mode=dma_mode)


@semcheck.target(devices=(2,))
def logits_sliced(num_devices: int, dma_mode: str = "eager"):
    return _build(num_devices, around=_sliced, dma_mode=dma_mode)
