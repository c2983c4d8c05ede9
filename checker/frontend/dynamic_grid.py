"""Grid bounds known only at run time (ACC-5): their values from the concrete evaluation.

A `pallas_call` whose grid names a traced value (megablox's `num_active_tiles`,
computed from the group sizes outside the kernel) passes each such bound
before its operands; `trace` leaves it `None` in `KernelCall.grid`.
`resolve_grid` puts in the value `concrete_inputs` computed from the example
arguments, or raises: `NeedsConcreteInputs` (with the hint) when they were
shapes, `Unsupported` with the pallas_call's line otherwise. A bound is never
guessed: the grid's extent decides which steps, copies and accesses exist.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numpy as np

from semcheck.checker.frontend.errors import Unsupported
from semcheck.checker.frontend.trace import KernelCall

if TYPE_CHECKING:
    from semcheck.checker.frontend.concrete_inputs import KernelInputs

_ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth")


def _axis(d: int) -> str:
    return f"the {_ORDINALS[d]} grid axis" if d < len(_ORDINALS) else f"grid axis {d}"


def resolve_grid(call: KernelCall, inputs: KernelInputs | None) -> KernelCall:
    """`call` with every dynamic grid bound replaced by its value (module docstring)."""
    if not call.dynamic_grid_dims:
        return call
    from semcheck.checker.frontend.scalar_memory import CONCRETE_HINT, NeedsConcreteInputs

    bounds = inputs.grid_bounds if inputs is not None else ()
    grid = list(call.grid)
    for k, d in enumerate(call.dynamic_grid_dims):
        value = bounds[k] if k < len(bounds) else None
        if value is None:
            what = f"the bound of {_axis(d)} is a value computed at run time"
            if inputs is None or inputs.abstract:
                raise NeedsConcreteInputs("pallas_call", f"{what}, from arguments given as shapes; {CONCRETE_HINT}",
                                          call.loc)
            raise Unsupported("pallas_call", f"{what} that semcheck could not compute ({inputs.why_of_bound(k)})", call.loc)
        lanes = np.asarray(value).reshape(-1)
        if lanes.size != 1:
            raise Unsupported("pallas_call", f"the bound of {_axis(d)} differs between devices "
                              f"({sorted(set(int(v) for v in lanes))}): semcheck lowers one grid for all of them",
                              call.loc)
        size = int(lanes[0])
        if size < 0:
            raise Unsupported("pallas_call", f"the bound of {_axis(d)} is negative ({size})", call.loc)
        ds = call.dimension_semantics or ()
        if d < len(ds) and ds[d] == "parallel" and call.interpret_params is not None:
            # jax's interpreter shuffles a parallel axis with a permutation built at trace time
            raise Unsupported("pallas_call", f"{_axis(d)} is parallel and its bound is a run-time value "
                              f"({size} here): jax's TPU interpreter needs a parallel axis's bound at "
                              "trace time", call.loc)
        grid[d] = size
    return dataclasses.replace(call, grid=tuple(grid), dynamic_grid_dims=())


__all__ = ["resolve_grid"]
