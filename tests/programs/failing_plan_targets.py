"""Programs whose planning call raises in jax's interpreter (specs/deciding/programs.md PRG-208).

Built on examples/programs/buggy/plan_copy_past_its_table.py: a plan whose write-back copy reads past its SMEM
table, then a call whose step count is the plan's first entry.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import semcheck


def _example():
    path = Path(__file__).resolve().parents[2] / "examples" / "programs" / "buggy" / "plan_copy_past_its_table.py"
    spec = importlib.util.spec_from_file_location("semcheck_programs_plan_copy_past_its_table", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


ex = _example()


def _lengths_kernel(lens_ref, out_ref):
    for s in range(ex.SEQS):
        out_ref[s] = lens_ref[s]


@semcheck.target(devices=[2])
def plan_on_a_kernel_s_lengths(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """The failing plan reads its lengths from an earlier kernel call's output: its failure would rest on that
    call's run (PRG-169), so the call after it is not stood in for, and the target stays unknown (PRG-208)."""
    params = pltpu.InterpretParams(dma_execution_mode=dma_mode) if interpret in (None, True) else interpret
    smem = pl.BlockSpec(memory_space=pltpu.SMEM)
    mesh = jax.make_mesh((num_devices,), (ex.AXIS,))

    def program(lens, x):
        again = pl.pallas_call(_lengths_kernel, out_shape=jax.ShapeDtypeStruct(lens.shape, lens.dtype),
                               in_specs=[smem], out_specs=smem, interpret=params)(lens)
        return ex.run_steps(ex.plan(again, params), x, params)

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=(P(), P(ex.AXIS)), out_specs=P(ex.AXIS),
                               check_vma=False))
    _, (lens, x) = ex.build(num_devices, dma_mode=dma_mode, interpret=interpret)
    return fn, (jax.device_put(lens, NamedSharding(mesh, P())), jax.device_put(x, NamedSharding(mesh, P(ex.AXIS))))


def _fixed_steps_kernel(lens_ref, x_hbm, o_hbm, sem):
    del lens_ref
    for _ in range(2):
        copy = pltpu.make_async_copy(x_hbm, o_hbm, sem.at[0])
        copy.start()
        copy.wait()


@semcheck.target(devices=[2])
def plan_then_a_call_it_does_not_feed(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """The failing plan, then a call that does not read it and is lowered: the plan fails past its start barrier
    (after the launch), in every run, so the second call never starts (PRG-122), though one greedy run's
    failure is not before every wait and barrier."""
    params = pltpu.InterpretParams(dma_execution_mode=dma_mode) if interpret in (None, True) else interpret
    mesh = jax.make_mesh((num_devices,), (ex.AXIS,))

    def program(lens, x):
        plan = ex.plan(lens, params)
        out = pl.pallas_call(
            _fixed_steps_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            grid_spec=pltpu.PrefetchScalarGridSpec(
                num_scalar_prefetch=1, in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                out_specs=pl.BlockSpec(memory_space=pl.ANY), scratch_shapes=[pltpu.SemaphoreType.DMA((1,))]),
            interpret=params)(lens, x)
        return out, plan

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=(P(), P(ex.AXIS)), out_specs=(P(ex.AXIS), P(ex.AXIS)),
                               check_vma=False))
    _, (lens, x) = ex.build(num_devices, dma_mode=dma_mode, interpret=interpret)
    return fn, (jax.device_put(lens, NamedSharding(mesh, P())), jax.device_put(x, NamedSharding(mesh, P(ex.AXIS))))
