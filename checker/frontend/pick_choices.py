"""ACC-75: the values a pick of rounded floats may take on a TPU, row by row.

ACC-64 takes each element of an `argmax`, `argmin` or `top_k` of float values a TPU computes with its own rounding
as any position along the reduced axis. In `hardware`'s lowering by cases the operand carries the bounds of its
*exact* value (ACC-74: `values.Bounded`, from which nothing is decided): where every element of a row is either a
number (finite bounds: the exact value is a normal float32 of one sign, so a TPU's result, whose last bits may
differ, is a number too, never NaN or an infinity) or exactly the padding value (`-inf` for `argmax` and `top_k`,
`+inf` for `argmin`: a `select` or a constant, which round nothing), and at least one is a number, a TPU's pick is
never a padded position: Mosaic's `tpu.reduce_index` gives a position of the row's largest (smallest) value, and a
number beats the padding. So the iterated top-k of an MoE router, which masks each pick with `-inf` before the
next, never repeats a pick (Mosaic's own `_top_k_impl` rests on the same fact: "assumes the input has at least k
values distinct from -inf"). A `top_k` of `k` picks takes `k` distinct numbers' positions in any order where a row
holds at least `k` numbers. Any other row takes every position (every tuple), as ACC-64 says.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from semcheck.checker.frontend.values import Bounded

# the value a pick of each primitive never prefers to a number (ACC-75)
PADDING = {"argmax": -np.inf, "top_k": -np.inf, "argmin": np.inf}


# a row's choices: the positions it may pick from, and whether its picks are distinct (a `top_k`'s)
Row = tuple[tuple[int, ...], bool]


def row_choices(prim: str, x: Any, lanes: int, axis: int, width: int) -> tuple[Row, ...] | None:
    """Per row of `x` along `axis` (lane axis excluded; rows in C order of the other axes, lanes first), the
    positions a TPU's `prim` may pick, `width` of them (distinct where so marked); None where no row excludes any
    (ACC-64's independent elements)."""
    if type(x) is not Bounded or prim not in PADDING:
        return None
    lo, hi = (np.moveaxis(np.broadcast_to(b, (lanes, *np.shape(b)[1:])), axis + 1, -1) for b in (x.lo, x.hi))
    size = lo.shape[-1]
    lo, hi = lo.reshape(-1, size), hi.reshape(-1, size)
    number = np.isfinite(lo) & np.isfinite(hi)
    padded = (lo == PADDING[prim]) & (hi == PADDING[prim])
    every: Row = (tuple(range(size)), False)
    rows: list[Row] = []
    for num, pad in zip(number, padded):
        keep = tuple(np.flatnonzero(num).tolist())
        if not (num | pad).all() or len(keep) < width or (len(keep) == size and width == 1):
            rows.append(every)
        else:
            rows.append((keep, width > 1))
    return tuple(rows) if any(r is not every for r in rows) else None


def row_count(row: Row, width: int) -> int:
    positions, distinct = row
    return math.perm(len(positions), width) if distinct else len(positions) ** width


def count(rows: tuple[Row, ...], width: int) -> int:
    return math.prod(row_count(r, width) for r in rows)


def row_values(row: Row, width: int) -> Any:
    """The tuples of `width` positions one row may take."""
    positions, distinct = row
    return itertools.permutations(positions, width) if distinct else itertools.product(positions, repeat=width)


def assemble(combo: tuple[tuple[int, ...], ...], shape: tuple[int, ...], axis: int | None) -> np.ndarray:
    """The lane array of `shape` whose rows are `combo` (one tuple per row): for a `top_k` (`axis`, the lane-array
    axis of its `k` picks) each tuple fills that axis; else each row is one element, in C order."""
    flat = np.asarray(combo, dtype=np.int64)
    if axis is None:
        return flat.reshape(shape)
    moved = (*shape[:axis], *shape[axis + 1:], shape[axis])
    return np.moveaxis(flat.reshape(moved), -1, axis)


__all__ = ["PADDING", "Row", "assemble", "count", "row_choices", "row_count", "row_values"]
