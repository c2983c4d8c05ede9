"""Launch arguments typed with a memory space jax's TPU interpreter refuses (ERR-36).

jax 0.12's `interpret_pallas_call` binds `remove_memory_space` on every argument of the call it runs (a
`pallas_call`'s dynamic grid bounds, index operands and inputs; a `core_map`'s inputs, as the `mpmd_map`
fallback passes them) before it does anything else. Its abstract evaluation keeps an array typed with no
memory space, ANY or HBM, and raises `NotImplementedError: Unsupported memory space: smem` for any other
space of pallas's (SMEM, VMEM, ...), which `pltpu.with_memory_space_constraint` gives an array. Nothing of
the call runs. A TPU places the array there and runs the call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from semcheck.model.errors import TypedOperand


def refused_spaces(avals: Sequence[Any], names: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """(name, space as jax prints it) of each launch argument, in order, whose array the interpreter refuses."""
    from jax._src import core as jax_core  # lazy: the CLI imports no jax at start
    from jax._src.pallas import core as pallas_core
    from jax._src.pallas.mosaic import core as mosaic_core

    kept = (None, pallas_core.MemorySpace.ANY, mosaic_core.MemorySpace.HBM)
    out = []
    for aval, name in zip(avals, names):
        ms = getattr(aval, "memory_space", None)
        if not isinstance(aval, jax_core.ShapedArray) or isinstance(ms, jax_core.MemorySpace):
            continue
        if not any(ms is k for k in kept):
            out.append((name, str(ms)))
    return tuple(out)


def typed_operand_failure(refused: Sequence[tuple[str, str]]) -> TypedOperand | None:
    """ERR-36: the interpreter's failure at the first refused argument, or None."""
    return TypedOperand(*refused[0]) if refused else None


__all__ = ["refused_spaces", "typed_operand_failure"]
