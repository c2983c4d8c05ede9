"""BUGGY: the done kernel reads the VMEM destination before it waits for the copy.

Pattern: examples/programs/async_copy_into_memory_spaces.py (a copy started in one call into an
output typed `pltpu.VMEM(...)`, waited in the next), but the done kernel computes its result from the
destination first and waits for the copy after.

BUG: on a TPU the destination is one VMEM array for both calls (specs/semantics/accesses.md GRID-5): the copy
may still be writing it while the done kernel reads it. race-free violated under `hardware` (the
copy's write against the done kernel's load).

What the interpreter does: lowering fails with `NotImplementedError: nan + dma_sem` (PRG-12) before
any call starts, in both DMA modes.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import PartitionSpec as P


def _correct():
    path = Path(__file__).resolve().parents[1] / "async_copy_into_memory_spaces.py"
    spec = importlib.util.spec_from_file_location("semcheck_programs_async_copy_into_memory_spaces", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


ac = _correct()


def _done_kernel(src_ref, dst_ref, sem, dst_alias_ref):
    dst_alias_ref[...] = dst_ref[...] * 2.0  # BUG: the copy into dst_ref may still be landing
    pltpu.make_async_copy(src_ref, dst_ref, sem).wait()


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    params = ac.interpret_params(dma_mode, interpret)

    def program(x):
        x, dst, sem = ac.copy_start(x, pltpu.VMEM, params)
        return ac.copy_done(x, dst, sem, pltpu.VMEM, params, kernel=_done_kernel)

    mesh = jax.make_mesh((num_devices,), (ac.AXIS,))
    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=P(ac.AXIS), out_specs=P(ac.AXIS), check_vma=False))
    x, _ = ac.example_inputs(mesh, num_devices)
    return fn, (x,)


def reference(x, *, num_devices: int):
    del num_devices
    return x * 2.0
