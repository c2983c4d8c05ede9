"""The exact elements a view touches, as boxes of its buffer (ACC-16).

`regions.ref_regions` maps one box per lane down a view's chain; where the
elements are not one box (a reshape or bitcast of a part that is not one box,
a stride, a gather, a mask with holes) that box is widened. This module is the
exact path for such a lane: it takes the view's selected elements as
coordinate arrays and maps them down the chain one transform at a time (an
indexer picks input coordinates, a transpose permutes them, a reshape goes
through the row-major flat index, a bitcast maps rows as TPU's packing does),
then writes the buffer elements it reaches as a few disjoint boxes.

It works on the view's elements, not on the buffer's, so its cost is the
view's size: past `ELEMENT_LIMIT` elements, or past `MAX_BOXES` boxes, it
gives up with the reason and the caller keeps the widened box. It gives up too
where a value is unknown or out of bounds (the box walk's reasons stand then).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from semcheck.checker.frontend.region_transforms import (
    array_index,
    forward_shapes,
    indexer_dims,
    jax_types,
    scalar_index,
)

# A view of more elements than this per lane is not enumerated (its region stays widened).
ELEMENT_LIMIT = 1 << 22
# A region of more disjoint boxes than this stays widened (overlap is decided box by box).
MAX_BOXES = 4096
# One view's lanes (devices, grid steps) enumerate at most this many elements in all: the lanes past it
# stay widened, so a view read at every step of a long grid costs a bounded time.
LANES_ELEMENT_LIMIT = 1 << 24

Box = tuple[tuple[int, int], ...]


class GiveUp(Exception):
    """The lane's elements cannot be enumerated: the message says why."""


class TooLarge(GiveUp):
    """The lane's elements are known but too many to enumerate, or make too many boxes."""


def lane_count(chain: tuple[Any, ...], mask: Any) -> int:
    """How many lanes the index values of `chain` (and `mask`) hold: the longest leading axis."""
    J = jax_types()
    lanes = 1
    for t in chain:
        if isinstance(t, J.NDIndexer):
            for idx in t.indices:
                leaves = (idx.start, idx.size) if isinstance(idx, J.Slice) else (idx,)
                for v in leaves:
                    if type(v) is np.ndarray and v.ndim:
                        lanes = max(lanes, int(v.shape[0]))
    if type(mask) is np.ndarray and mask.ndim:
        lanes = max(lanes, int(mask.shape[0]))
    return lanes


def lane_key(chain: tuple[Any, ...], mask: Any, lane: int) -> tuple[Any, ...]:
    """A hashable key of what lane `lane` reads of the chain's values: equal keys, equal elements."""
    J = jax_types()
    key: list[Any] = []
    leaves: list[Any] = []
    for t in chain:
        if isinstance(t, J.NDIndexer):
            for idx in t.indices:
                leaves += [idx.start, idx.size] if isinstance(idx, J.Slice) else [idx]
    leaves.append(mask)
    for v in leaves:
        if type(v) is np.ndarray:
            row = v[min(lane, v.shape[0] - 1)] if v.ndim else v
            key.append((row.shape, np.ascontiguousarray(row).tobytes()))
        elif isinstance(v, (int, np.integer, type(None))):
            key.append(v)
        else:
            key.append(id(v))
    return tuple(key)


def element_boxes(base_shape: tuple[int, ...], chain: tuple[Any, ...], dtype: Any, mask: Any,
                  lane: int) -> tuple[list[Box], str]:
    """ACC-16: lane `lane`'s elements of the buffer as disjoint boxes, and "" or why the boxes hold more
    than the view touches (a narrowing bitcast touches part of an element). Raises `GiveUp`."""
    shapes, dtypes = forward_shapes(base_shape, dtype, chain)
    if any(s is None for s in shapes):
        raise GiveUp("a view whose shapes are not all known")
    view = shapes[-1]
    assert view is not None
    if math.prod(view) > ELEMENT_LIMIT:
        raise TooLarge(f"a view of more than {ELEMENT_LIMIT} elements")
    coords = _selected(view, mask, lane)
    partial = ""
    for k in range(len(chain) - 1, -1, -1):
        coords, why = _preimage(chain[k], coords, shapes[k], shapes[k + 1], dtypes[k], lane)  # type: ignore[arg-type]
        partial = partial or why
    return _boxes(coords, base_shape), partial


def view_size(base_shape: tuple[int, ...], chain: tuple[Any, ...], dtype: Any) -> int | None:
    """How many elements the view `chain` of the buffer has, or None when its shape is not known."""
    shapes, _ = forward_shapes(base_shape, dtype, chain)
    return None if shapes[-1] is None else math.prod(shapes[-1])


def _selected(view: tuple[int, ...], mask: Any, lane: int) -> np.ndarray:
    """The view's selected elements as an int64 array of coordinates, one row per dimension."""
    if mask is None:
        if not view:  # a scalar view: one element, no coordinates
            return np.zeros((0, 1), dtype=np.int64)
        return np.indices(view, dtype=np.int64).reshape(len(view), -1)
    if type(mask) is not np.ndarray:
        raise GiveUp("a mask not known at lowering time")
    m = mask if mask.shape == view else mask[min(lane, mask.shape[0] - 1)]
    if m.shape != view:
        raise GiveUp(f"a mask of shape {m.shape} for a view of shape {view}")
    if not view:
        return np.zeros((0, int(bool(m))), dtype=np.int64)
    return np.stack(np.nonzero(m.astype(bool, copy=False))).astype(np.int64).reshape(len(view), -1)


def _preimage(t: Any, coords: np.ndarray, in_shape: tuple[int, ...], out_shape: tuple[int, ...], in_dtype: Any,
              lane: int) -> tuple[np.ndarray, str]:
    """The input coordinates of the elements `coords` of the transform's output (and the bitcast's note)."""
    J = jax_types()
    if isinstance(t, J.NDIndexer):
        return _indexer(t, coords, in_shape, lane), ""
    if isinstance(t, J.Transpose):
        perm = [int(p) for p in t.permutation]
        out = np.empty_like(coords)
        for o, d in enumerate(perm):
            out[d] = coords[o]
        return out, ""
    if isinstance(t, J.Reshape):
        if not in_shape or not out_shape:
            return np.zeros((len(in_shape), coords.shape[1]), dtype=np.int64), ""
        flat = np.ravel_multi_index(tuple(coords), out_shape)
        return np.stack(np.unravel_index(flat, in_shape)).astype(np.int64), ""
    if isinstance(t, J.Bitcast):
        return _bitcast(coords, in_dtype, t.dtype, out_shape)
    if isinstance(t, J.identity):
        return coords, ""
    raise GiveUp(f"a {type(t).__name__} view")


def _lane_value(v: np.ndarray, lane: int) -> np.ndarray:
    return v[min(lane, v.shape[0] - 1)]


def _indexer(t: Any, coords: np.ndarray, in_shape: tuple[int, ...], lane: int) -> np.ndarray:
    is_int, int_shape, int_dims, out_of = indexer_dims(t)
    n = coords.shape[1]
    out = np.empty((len(in_shape), n), dtype=np.int64)
    for j, idx in enumerate(t.indices):
        if not is_int[j]:
            start = scalar_index(idx.start)
            if type(start) is str:
                raise GiveUp(start)
            stride = int(idx.stride) if isinstance(idx.stride, (int, np.integer)) else None
            if stride is None or stride < 1:
                raise GiveUp(f"a slice with stride {idx.stride}")
            vals = int(_lane_value(start, lane)) + stride * coords[out_of[j]]
        elif not int_shape:
            v = scalar_index(idx)
            if type(v) is str:
                raise GiveUp(v)
            vals = np.full(n, int(_lane_value(v, lane)), dtype=np.int64)
        else:
            arr = array_index(idx, int_shape)
            if type(arr) is str:
                raise GiveUp(arr)
            vals = _lane_value(arr, lane)[tuple(coords[d] for d in int_dims)]
        if n and (vals.min() < 0 or vals.max() >= in_shape[j]):
            raise GiveUp(f"dim {j}: an index out of bounds for size {in_shape[j]}")
        out[j] = vals
    return out


def _bitcast(coords: np.ndarray, in_dtype: Any, out_dtype: Any, out_shape: tuple[int, ...]) -> tuple[np.ndarray, str]:
    """TPU packs a narrower type along the second-minor dimension: with `k` = the ratio of the widths,
    row `r` of the wider type holds rows `r*k .. r*k+k-1` of the narrower (jax's `state.utils.bitcast`)."""
    J = jax_types()
    bx, by = J.itemsize_bits(in_dtype), J.itemsize_bits(out_dtype)
    if bx == by:
        return coords, ""
    d = len(out_shape) - 2
    if by > bx:  # one output element is `k` input elements, one per row
        k = by // bx
        reps = np.repeat(coords, k, axis=1)
        reps[d] = reps[d] * k + np.tile(np.arange(k, dtype=np.int64), coords.shape[1])
        return reps, ""
    k = bx // by  # one input element holds `k` output elements, one per row
    flat = np.unique(np.ravel_multi_index(tuple(coords), out_shape))
    coords = np.stack(np.unravel_index(flat, out_shape)).astype(np.int64)
    coords[d] //= k
    inner = np.unique(np.ravel_multi_index(tuple(coords), (*out_shape[:d], out_shape[d] // k, out_shape[d + 1])),
                      return_counts=True)[1]
    why = f"dim {d}: a bitcast to a narrower type touches part of an element" if (inner < k).any() else ""
    return coords, why


def _boxes(coords: np.ndarray, shape: tuple[int, ...]) -> list[Box]:
    """The elements `coords` of `shape` as disjoint boxes: runs along the last dimension, merged with
    their neighbours dimension by dimension until no two meet."""
    rank = len(shape)
    if coords.shape[1] == 0:
        return []
    if rank == 0:
        return [()]
    flat = np.unique(np.ravel_multi_index(tuple(coords), shape))
    last = shape[-1]
    # a run breaks where the next element is not the next index, or starts a new row
    breaks = np.flatnonzero((np.diff(flat) != 1) | (flat[1:] % last == 0)) + 1
    starts = flat[np.concatenate(([0], breaks))]
    stops = flat[np.concatenate((breaks - 1, [flat.size - 1]))] + 1
    pos = np.stack(np.unravel_index(starts, shape)).astype(np.int64)
    arr = np.empty((starts.size, rank, 2), dtype=np.int64)
    arr[:, :, 0] = pos.T
    arr[:, :, 1] = pos.T + 1
    arr[:, -1, 1] = arr[:, -1, 0] + (stops - starts)
    arr = merge_box_array(arr)
    if arr.shape[0] > MAX_BOXES:
        raise TooLarge(f"more than {MAX_BOXES} boxes")
    return sorted(tuple((int(a), int(b)) for a, b in row) for row in arr)


def merge_box_array(arr: np.ndarray) -> np.ndarray:
    """Disjoint boxes `(n, rank, 2)` with neighbours merged: boxes equal in every dimension but one,
    where they meet, become one, until none do (the union is unchanged)."""
    rank = arr.shape[1]
    while True:
        before = arr.shape[0]
        for d in reversed(range(rank)):
            arr = _merge_along(arr, d)
        if arr.shape[0] == before:
            return arr


def _merge_along(arr: np.ndarray, d: int) -> np.ndarray:
    if arr.shape[0] < 2:
        return arr
    others = [arr[:, e, s] for e in range(arr.shape[1]) if e != d for s in (0, 1)]
    order = np.lexsort((arr[:, d, 0], *reversed(others)))
    a = arr[order]
    same = np.ones(a.shape[0] - 1, dtype=bool)
    for e in range(a.shape[1]):
        if e != d:
            same &= (a[1:, e, 0] == a[:-1, e, 0]) & (a[1:, e, 1] == a[:-1, e, 1])
    joins = same & (a[1:, d, 0] == a[:-1, d, 1])
    first = np.concatenate(([True], ~joins))
    heads = np.flatnonzero(first)
    tails = np.concatenate((heads[1:] - 1, [a.shape[0] - 1]))
    out = a[heads].copy()
    out[:, d, 1] = a[tails, d, 1]
    return out


__all__ = ["ELEMENT_LIMIT", "GiveUp", "LANES_ELEMENT_LIMIT", "MAX_BOXES", "TooLarge", "element_boxes", "lane_count", "lane_key", "merge_box_array", "view_size"]
