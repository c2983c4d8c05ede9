"""examples/reduce_scatter_grouped_matmul.py on group counts a hypothesis strategy draws (ACC-8, RUN-8).

The kernel's group-loop bound is computed before the `pallas_call`, inside
the `shard_map`: each device's group count from its group sizes, then
`lax.pmax` over the devices. semcheck evaluates that computation on the
example arrays, the collective included (ACC-8). Here the per-device group
counts are drawn (a list repeated over the devices) and the sizes built from
them:

* `grouped_rounds` (clean): proved for every drawn list;
* `grouped_rounds_own_count`: the bound is each device's own count (no
  `pmax`): a device with fewer groups stops sending while its peers wait for
  its next round: deadlock-free violated whenever two devices' counts differ,
  found and shrunk to `[1, 2]`;
* `bound_through_callback`: the count passes a host callback on its way to
  `pmax`: not a value semcheck evaluates, so every property is unknown, with
  the callback's line;
* `bound_from_earlier_kernel`: the count passes through an earlier kernel's
  output: that call is run in interpret mode and is race-free, so the bound
  is followed and the program proved (PRG-169).
* `shapes_only`: the arguments as shapes: unknown with ACC-4's hint.

Used by tests/test_pre_kernel_values.py.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import strategies as st
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import semcheck

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "reduce_scatter_grouped_matmul.py"
GROUPS = 4
ROWS = 8

COUNTS = st.lists(st.integers(1, GROUPS), min_size=1, max_size=8)
"""Per-device group counts, repeated over the devices."""


def _example():
    spec = importlib.util.spec_from_file_location("_reduce_scatter_grouped_matmul", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sizes(counts: list[int], num_devices: int) -> np.ndarray:
    """Device d splits its N * ROWS rows over its first counts[d mod len] groups (none empty)."""
    out = np.zeros((num_devices, GROUPS), np.int32)
    total = num_devices * ROWS
    for d in range(num_devices):
        used = counts[d % len(counts)]
        out[d, :used] = total // used
        out[d, used - 1] += total % used
    return out


@semcheck.target(devices=(2, 4), inputs=COUNTS)
def grouped_rounds(num_devices: int, counts: list[int]):
    return _example().build(num_devices, sizes=sizes(counts, num_devices), groups=GROUPS, rows=ROWS)


@semcheck.target(devices=(2, 4), inputs=COUNTS)
def grouped_rounds_own_count(num_devices: int, counts: list[int]):
    return _example().build(num_devices, sizes=sizes(counts, num_devices), groups=GROUPS, rows=ROWS,
                            combine=lambda count, axis: count)  # BUG: rounds differ between devices


def _through_callback(count, axis):
    count = jax.pure_callback(lambda c: np.asarray(c), jax.ShapeDtypeStruct((), jnp.int32), count)
    return jax.lax.pmax(count, axis)


@semcheck.target(devices=(2,))
def bound_through_callback(num_devices: int):
    return _example().build(num_devices, combine=_through_callback)


def _copy_kernel(c_ref, o_ref):
    o_ref[0] = c_ref[0]


def _through_kernel(count, axis):
    copied = pl.pallas_call(
        _copy_kernel, out_shape=jax.ShapeDtypeStruct((1,), jnp.int32),
        in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM)], out_specs=pl.BlockSpec(memory_space=pltpu.SMEM),
        interpret=pltpu.InterpretParams(),
    )(count.reshape(1))
    return jax.lax.pmax(copied[0], axis)


@semcheck.target(devices=(2,))
def bound_from_earlier_kernel(num_devices: int):
    return _example().build(num_devices, combine=_through_kernel)


@semcheck.target(devices=(2,))
def shapes_only(num_devices: int):
    """The example's arguments as shapes: nothing to compute the bound from (ACC-4's hint)."""
    fn, args = _example().build(num_devices)
    return fn, tuple(jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=a.sharding) for a in args)
