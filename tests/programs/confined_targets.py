"""Programs where invocation-confined is violated (PRG-114) and another violation may or may not need a
landing outside its call (PRG-128): the ring and pairwise kernels of
examples/programs/distinct_collective_ids_two_patterns.py on one collective id (from 4 devices a copy
can land before its target entered, PRG-17), followed by a call that waits on a semaphore nothing
signals."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import semcheck

_path = Path(__file__).resolve().parents[2] / "examples" / "programs" / "distinct_collective_ids_two_patterns.py"
_spec = importlib.util.spec_from_file_location("semcheck_confined_targets_patterns", _path)
tp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tp)


def _stuck_kernel(x_ref, o_ref, sem):
    pl.semaphore_wait(sem, 1)  # BUG: nothing signals it, on every device, whatever lands where
    o_ref[...] = x_ref[...]


def _stuck(x, params):
    return pl.pallas_call(_stuck_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          scratch_shapes=[pltpu.SemaphoreType.REGULAR], interpret=params)(x)


def _build(num_devices, interpret, stuck):
    params = tp.interpret_params("eager", interpret)
    mesh = jax.make_mesh((num_devices,), (tp.AXIS,))

    def program(x):
        x = tp.call(tp._pair_kernel, tp.call(tp._ring_kernel, x, 0, params), 0, params)
        return _stuck(x, params) if stuck else x

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=P(tp.AXIS), out_specs=P(tp.AXIS), check_vma=False))
    x = jnp.ones((num_devices * tp.ROWS, tp.LANES), jnp.float32)
    return fn, (jax.device_put(x, NamedSharding(mesh, P(tp.AXIS))),)


@semcheck.target(devices=[4])
def mixed_then_stuck(num_devices: int, *, interpret=None):
    return _build(num_devices, interpret, stuck=True)
