"""Ring attention over two kernel calls whose step counts and row counts a planning kernel computes (correct).

Pattern (written for semcheck): a first kernel call, the plan, reads the per-device sequence lengths (a
concrete array replicated on every device, in SMEM) and writes two small tables into SMEM outputs: how many
real rows each device's KV block holds, and how the ring's `num_devices - 1` steps split over two calls
(first step and step count of each). The two calls of the ring kernel of
examples/programs/ring_attention_two_calls.py then take those tables as their scalar-prefetch operands: their
step loops and per-step row loops are bounds that an earlier `pallas_call` computed, not the build's arrays
(specs/deciding/programs.md PRG-169: semcheck runs the plan in interpret mode on the example arrays, and keeps
its outputs as facts only where the plan is race-free in the mode).

What is right: the plan gives every device the same split, so each step of each ring call meets both
neighbours in the same step (the double barrier), every copy is waited in its step and the barrier count
returns to zero in each call. On a TPU each device's accumulator is the sum of the other devices' real rows.

What the interpreter does: completes with the right numbers in both DMA modes (its calls are globally
synchronised, PRG-10), and its race detector reports nothing.

`build_with` is the building block of the seeded misuse in
examples/programs/buggy/ring_attention_planned_skips_steps.py.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


def _ring():
    path = Path(__file__).resolve().parent / "ring_attention_two_calls.py"
    spec = importlib.util.spec_from_file_location("semcheck_programs_ring_attention_two_calls", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


ring = _ring()
AXIS, TOKENS_PER_ROW = ring.AXIS, ring.TOKENS_PER_ROW


def _plan_kernel(lens_ref, mine_ref, split_ref, rows_ref, *, num_devices, skip_short):
    half = (num_devices - 1) // 2
    longer = jnp.int32(0)
    for d in range(num_devices):
        rows_ref[d] = (lens_ref[d] + TOKENS_PER_ROW - 1) // TOKENS_PER_ROW
        longer += (lens_ref[d] > mine_ref[0]).astype(jnp.int32)
    rest = num_devices - 1 - half
    split_ref[0] = 0
    split_ref[1] = half
    split_ref[2] = half
    # skip_short (the seeded bug): the second call only runs as many steps as there are longer blocks
    split_ref[3] = jnp.minimum(rest, longer) if skip_short else jnp.int32(rest)


def plan(lens, mine, params, *, num_devices, skip_short=False):
    """The plan call: (split table, rows per device) from the lengths and this device's own length."""
    smem = pl.BlockSpec(memory_space=pltpu.SMEM)
    return pl.pallas_call(
        functools.partial(_plan_kernel, num_devices=num_devices, skip_short=skip_short),
        out_shape=(jax.ShapeDtypeStruct((4,), jnp.int32), jax.ShapeDtypeStruct(lens.shape, jnp.int32)),
        in_specs=[smem, smem], out_specs=(smem, smem),
        interpret=params,
    )(lens, mine)


def build_with(num_devices: int, params, *, skip_short=False):
    mesh = jax.make_mesh((num_devices,), (AXIS,))

    def program(lens, mine, kv):
        split, rows = plan(lens, mine, params, num_devices=num_devices, skip_short=skip_short)
        kv, acc = ring.ring_part(split, rows, kv, jnp.zeros_like(kv), params, part=0)
        _, acc = ring.ring_part(split, rows, kv, acc, params, part=1)
        return acc

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=(P(), P(AXIS), P(AXIS)), out_specs=P(AXIS),
                               check_vma=False))
    kv = (jnp.arange(num_devices * ring.ROWS * ring.LANES, dtype=jnp.float32) % 251).reshape(
        num_devices * ring.ROWS, ring.LANES)
    lens = jnp.asarray(ring.seq_lens(num_devices))
    return fn, (jax.device_put(lens, NamedSharding(mesh, P())), jax.device_put(lens, NamedSharding(mesh, P(AXIS))),
                jax.device_put(kv, NamedSharding(mesh, P(AXIS))))


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    return build_with(num_devices, ring.interpret_params(dma_mode, interpret))


def reference(lens, mine, kv, *, num_devices: int):
    del mine
    return ring.reference(lens, kv, num_devices=num_devices)
