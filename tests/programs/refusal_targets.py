"""A program of calls whose collective ids jax picks (PRG-125) with one call jax's TPU lowering refuses
(LAUNCH-7): the two barrier kernels of examples/programs/two_patterns_two_tags.py without
tags under `jax_pallas_auto_assign_collective_ids='yes'` (each module its own id), then a kernel that
adds one and uses no barrier semaphore, which `yes` gives an id too. Set in the build, as a program
that sets the mode before it is traced does, so it is verified in its own process."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jax
from jax.experimental import pallas as pl

import semcheck

_path = Path(__file__).resolve().parents[2] / "examples" / "programs" / "two_patterns_two_tags.py"
_spec = importlib.util.spec_from_file_location("semcheck_refusal_targets_tags", _path)
tags = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tags)


def _add_one_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0


@semcheck.target(devices=[4])
def yes_with_a_plain_call(num_devices: int, *, interpret=None):
    jax.config.update("jax_pallas_auto_assign_collective_ids", "yes")
    params = tags.interpret_params("eager", interpret)
    mesh = jax.make_mesh((num_devices,), (tags.AXIS,))

    def program(x):
        y = tags.call(tags._pair_kernel(None), tags.call(tags._ring_kernel(None), x, params), params)
        return pl.pallas_call(_add_one_kernel, out_shape=jax.ShapeDtypeStruct(y.shape, y.dtype),
                              interpret=params)(y)

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=tags.P(tags.AXIS), out_specs=tags.P(tags.AXIS),
                               check_vma=False))
    _, args = tags.build(num_devices, interpret=interpret, ring_tag=None, pair_tag=None)
    return fn, args
