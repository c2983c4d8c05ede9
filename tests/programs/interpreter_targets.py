"""The programs of probes `manager_per_call` and `race_detector_per_call` (tests/programs/probes.py) as
semcheck targets, so that semcheck's interpreter predictions can be held against what those probes
recorded (specs/semantics/calls.md PRG-10, PRG-14)."""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import semcheck

sys.path.insert(0, str(Path(__file__).resolve().parent))
import probes  # noqa: E402


@semcheck.target(devices=[2, 4])
def three_calls(num_devices: int, *, interpret=None):
    """Probe `manager_per_call`: a kernel that adds one, called three times in one jitted program."""
    del interpret
    _, program, x = probes._interpret_calls(num_devices, "eager")
    return program("add_one", "add_one", "add_one"), (x,)


def _unwaited_kernel(x_ref, o_hbm, acc, sem):
    acc[...] = x_ref[...]
    pltpu.make_async_copy(acc, o_hbm, sem).start()  # never waited: it races with the read of the result


def _add_one_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1


def _race_programs(num_devices: int):
    mesh = jax.make_mesh((num_devices,), ("x",))
    params = pltpu.InterpretParams(dma_execution_mode="eager", detect_races=True)
    shape = jax.ShapeDtypeStruct((8, 128), jnp.float32)
    racy = pl.pallas_call(
        _unwaited_kernel, out_shape=shape, in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32), pltpu.SemaphoreType.DMA], interpret=params)
    clean = pl.pallas_call(_add_one_kernel, out_shape=shape, interpret=params)
    x = jax.device_put(jnp.zeros((8 * num_devices, 128), jnp.float32), NamedSharding(mesh, P("x")))

    def sharded(f):
        return jax.jit(jax.shard_map(f, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))

    return sharded(racy), sharded(lambda v: clean(racy(v))), x


@semcheck.target(devices=[2])
def racy_call_alone(num_devices: int, *, interpret=None):
    """Probe `race_detector_per_call`, its first program: a call whose write-back copy is never waited."""
    del interpret
    alone, _, x = _race_programs(num_devices)
    return alone, (x,)


@semcheck.target(devices=[2])
def racy_then_clean_call(num_devices: int, *, interpret=None):
    """Its second program: the same call, then a race-free call, in one jitted program."""
    del interpret
    _, then_clean, x = _race_programs(num_devices)
    return then_clean, (x,)
