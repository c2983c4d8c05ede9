"""Two kernel calls that route by float logits (specs/deciding/frontend.md ACC-57, programs.md PRG-207).

A router call computes each token's float logits (`h @ w`, exact here: multiples of 1/64 times small integers,
so every order of the sums gives the same bits), and a dispatch call fetches them from HBM by a local copy and
routes each token to its top-1 expert with the kernel of examples/moe_topk_routing.py: the ids go to SMEM by a
local copy, a count table indexed by them sizes the dispatch, and the counts are exchanged by remote copies.
Per device: `TOKENS` tokens, one expert per device.

* `router_then_dispatch`: correct; every device receives the rows the numpy top-1 of the logits sends it;
* `router_then_dispatch_wait_one_row_short`: the dispatch kernel of
  examples/buggy/moe_topk_dispatch_wait_one_row_short.py, whose receive waits one row short.

`reference(num_devices)` is the output of the correct program.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import semcheck


def _load(rel: str, name: str):
    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parents[2] / rel)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


routing = _load("examples/moe_topk_routing.py", "semcheck_float_router_moe_topk_routing")
short = _load("examples/buggy/moe_topk_dispatch_wait_one_row_short.py", "semcheck_float_router_wait_short")
AXIS, TOKENS, LANES = routing.AXIS, routing.TOKENS, routing.LANES
HIDDEN = 128
TOP_K = 1


def _router_kernel(h_ref, w_ref, o_ref):
    o_ref[...] = jnp.dot(h_ref[...], w_ref[...], preferred_element_type=jnp.float32)


def _fetching(kernel):
    def dispatch(logits_hbm, x_ref, o_ref, *rest, n, t, k):
        *scratch, gating, fetch_sem = rest
        pltpu.async_copy(logits_hbm, gating, fetch_sem).wait()  # the router's logits, by a local copy
        kernel(gating, x_ref, o_ref, *scratch, n=n, t=t, k=k)

    return dispatch


def inputs(num_devices: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(h, w, x): tokens' hidden states and the router's weights, exact in float32; the rows dispatched."""
    rng = np.random.default_rng(3)
    h = (np.round(rng.normal(size=(num_devices * TOKENS, HIDDEN)) * 64) / 64).astype(np.float32)
    w = rng.integers(-3, 4, size=(HIDDEN, num_devices)).astype(np.float32)
    x = (np.arange(num_devices * TOKENS * LANES, dtype=np.float32) % 97).reshape(num_devices * TOKENS, LANES)
    return h, w, x


def _build(num_devices: int, dma_mode: str, interpret, kernel):
    n = num_devices
    mesh = jax.make_mesh((n,), (AXIS,))
    params = routing._interpret_params(dma_mode, interpret)
    vmem = pl.BlockSpec(memory_space=pltpu.VMEM)
    router = pl.pallas_call(_router_kernel, out_shape=jax.ShapeDtypeStruct((TOKENS, n), jnp.float32),
                            in_specs=[vmem, vmem], out_specs=vmem, interpret=params)
    dma = pltpu.SemaphoreType.DMA
    k = TOP_K
    dispatch = pl.pallas_call(
        functools.partial(_fetching(kernel), n=n, t=TOKENS, k=k),
        out_shape=jax.ShapeDtypeStruct((TOKENS, LANES), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY), vmem], out_specs=vmem,
        scratch_shapes=[pltpu.VMEM((TOKENS, k), jnp.int32), pltpu.SMEM((TOKENS, k), jnp.int32),
                        pltpu.SMEM((TOKENS, k), jnp.int32), pltpu.SMEM((n,), jnp.int32), pltpu.SMEM((n,), jnp.int32),
                        pltpu.VMEM((n, TOKENS, LANES), jnp.float32), pltpu.VMEM((n, TOKENS, LANES), jnp.float32),
                        pltpu.VMEM((n, TOKENS, LANES), jnp.float32),
                        dma(()), dma((n,)), dma((n,)), dma((n,)), dma((n,)), dma((n,)), dma((n,)),
                        pltpu.VMEM((TOKENS, n), jnp.float32), dma(())],
        compiler_params=pltpu.CompilerParams(collective_id=0), interpret=params)

    def program(h, w, x):
        return dispatch(router(h, w), x)

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=(P(AXIS), P(), P(AXIS)), out_specs=P(AXIS),
                               check_vma=False))
    h, w, x = inputs(n)
    put = jax.device_put
    return fn, (put(h, NamedSharding(mesh, P(AXIS))), put(w, NamedSharding(mesh, P())),
                put(x, NamedSharding(mesh, P(AXIS))))


@semcheck.target(devices=[2, 4])
def router_then_dispatch(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    return _build(num_devices, dma_mode, interpret, routing._kernel)


@semcheck.target(devices=[2, 4])
def router_then_dispatch_wait_one_row_short(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    return _build(num_devices, dma_mode, interpret, short._kernel)


def counts(num_devices: int) -> list[int]:
    """Per expert device, the tokens numpy's top-1 of the exact logits routes to it."""
    h, w, _ = inputs(num_devices)
    top = (h.astype(np.float64) @ w.astype(np.float64)).argmax(axis=1)
    return [int((top == e).sum()) for e in range(num_devices)]


def reference(num_devices: int) -> np.ndarray:
    h, w, x = inputs(num_devices)
    return routing.reference(h.astype(np.float64) @ w.astype(np.float64), x, num_devices=num_devices, top_k=TOP_K)
