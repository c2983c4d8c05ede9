"""The preimages of ref transforms: how a box of a view maps back onto the view's input (ACC-1).

`regions.ref_regions` walks a ref's transform chain backwards; this module holds
the per-transform steps of that walk (indexers, strided and gather-like indices,
reshapes, bitcasts) and the readers of the evaluator's per-lane index values.
Its precision rules are `regions`' module docstring's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np



class _JaxTypes:
    def __init__(self) -> None:
        from jax._src.state import types as st
        from jax._src.state.indexing import NDIndexer, Slice

        self.TransformedRef = st.TransformedRef
        self.NDIndexer = NDIndexer
        self.Slice = Slice
        self.Transpose = st.TransposeTransform
        self.Reshape = st.ReshapeTransform
        self.Bitcast = st.BitcastTransform
        self.MultiRef = st.MultiRefTransform
        identity: list[type] = [st.MemorySpaceCastTransform]
        try:
            from jax._src.pallas.mosaic.core import AccessAssumptionTransform

            identity.append(AccessAssumptionTransform)
        except ImportError:  # pragma: no cover - older or newer jax
            pass
        self.identity = tuple(identity)
        try:
            from jax._src.dtypes import itemsize_bits

            self.itemsize_bits = itemsize_bits
        except ImportError:  # pragma: no cover
            self.itemsize_bits = lambda dt: np.dtype(dt).itemsize * 8


_JAX: _JaxTypes | None = None


def jax_types() -> _JaxTypes:
    global _JAX
    if _JAX is None:
        _JAX = _JaxTypes()
    return _JAX


# --- values --------------------------------------------------------------------------

I64 = np.int64


def describe_unknown(x: Any) -> str:
    why = getattr(x, "why", None)
    if isinstance(why, str):
        loc = getattr(x, "loc", None)
        where = f" at {loc}" if loc is not None and getattr(loc, "line", 0) else ""
        return f"{why}{where}"
    return f"a value not known at lowering time ({type(x).__name__})"


def scalar_index(x: Any) -> np.ndarray | str:
    """A per-lane scalar index as an int64 array of shape (n,), or the reason it is unknown."""
    if isinstance(x, (bool, np.bool_)):
        return np.array([int(x)], dtype=I64)
    if isinstance(x, (int, np.integer)):
        return np.array([int(x)], dtype=I64)
    if type(x) is np.ndarray:
        if x.ndim == 0:
            x = x[None]
        if x.dtype.kind not in "iub":
            return f"a non-integer index ({x.dtype})"
        if x.ndim > 1:
            if math.prod(x.shape[1:]) != 1:
                return "an array index where a scalar was expected"
            x = x.reshape(x.shape[0])
        return x.astype(I64, copy=False)
    val = getattr(x, "val", None)  # a jax Literal (when called on an unevaluated jaxpr)
    if val is not None and not hasattr(x, "why"):
        try:
            arr = np.asarray(val)
        except Exception:
            return describe_unknown(x)
        if arr.ndim == 0 and arr.dtype.kind in "iub":
            return np.array([int(arr)], dtype=I64)
    return describe_unknown(x)


def array_index(x: Any, shape: tuple[int, ...]) -> np.ndarray | str:
    """A per-lane array index of `shape` as int64 `(n, *shape)`, or the reason it is unknown."""
    if isinstance(x, (int, np.integer)):
        return np.full((1, *shape), int(x), dtype=I64)
    if type(x) is np.ndarray:
        if x.dtype.kind not in "iub":
            return f"a non-integer index ({x.dtype})"
        if x.ndim == len(shape):  # no lane axis (a static constant)
            x = x[None]
        try:
            return np.broadcast_to(x, (x.shape[0], *shape)).astype(I64, copy=False)
        except ValueError:
            return f"an index array of shape {x.shape[1:]} for an indexer of shape {shape}"
    val = getattr(x, "val", None)
    if val is not None and not hasattr(x, "why"):
        try:
            arr = np.asarray(val)
            if arr.dtype.kind in "iub":
                return np.broadcast_to(arr, shape)[None].astype(I64)
        except Exception:
            pass
    return describe_unknown(x)


def static_int(x: Any) -> int | None:
    if isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_)):
        return int(x)
    v = scalar_index(x)
    if type(v) is np.ndarray and v.shape[0] == 1:
        return int(v[0])
    return None


# --- the walk ------------------------------------------------------------------------


class Box:
    """Per-dimension lane arrays `lo`, `hi` (half-open), per-lane exactness and reasons."""

    __slots__ = ("lo", "hi", "exact", "why", "off")

    def __init__(self, lo: list[np.ndarray], hi: list[np.ndarray]) -> None:
        self.lo = lo
        self.hi = hi
        self.exact: np.ndarray | bool = True  # bool, or a per-lane bool array
        self.why: list[tuple[np.ndarray | None, str]] = []
        self.off: np.ndarray | None = None  # per lane: a mask switches the whole access off

    def widen(self, why: str, lanes: np.ndarray | None = None) -> None:
        """Mark the region inexact (on `lanes`, a per-lane bool array, or everywhere)."""
        if lanes is None:
            self.exact = False
            self.why.append((None, why))
        else:
            lanes = np.asarray(lanes, dtype=bool).reshape(-1)
            if not lanes.any():
                return
            if lanes.all():
                self.widen(why)
                return
            self.exact = np.logical_and(self.exact, ~lanes)
            self.why.append((lanes, why))


def whole_extent(shape: Sequence[int]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    return ([np.zeros(1, dtype=I64) for _ in shape], [np.array([int(s)], dtype=I64) for s in shape])


def forward_shapes(
    base_shape: tuple[int, ...], dtype: Any, transforms: Sequence[Any]
) -> tuple[list[tuple[int, ...] | None], list[Any]]:
    """Input shape (and dtype) of each transform, then the final view's: None past an unknown one."""
    J = jax_types()
    shapes: list[tuple[int, ...] | None] = [base_shape]
    dtypes: list[Any] = [dtype]
    shape: tuple[int, ...] | None = base_shape
    for t in transforms:
        if shape is not None:
            try:
                if isinstance(t, J.NDIndexer):
                    ok = tuple(int(s) for s in t.shape) == shape and len(t.indices) == len(shape)
                    shape = _indexer_out_shape(t) if ok else None
                elif isinstance(t, J.Transpose):
                    perm = tuple(int(p) for p in t.permutation)
                    shape = tuple(shape[p] for p in perm) if sorted(perm) == list(range(len(shape))) else None
                elif isinstance(t, J.Reshape):
                    new = tuple(int(s) for s in t.shape)
                    shape = new if math.prod(new) == math.prod(shape) and all(s >= 0 for s in new) else None
                elif isinstance(t, J.Bitcast):
                    if dtype is None:
                        shape = None
                    else:
                        bx, by = J.itemsize_bits(dtype), J.itemsize_bits(t.dtype)
                        if bx == by:
                            pass
                        elif len(shape) < 2 or (shape[-2] * bx) % by:
                            shape = None
                        else:
                            shape = (*shape[:-2], shape[-2] * bx // by, shape[-1])
                        dtype = t.dtype
                elif isinstance(t, J.identity):
                    pass
                else:
                    shape = None
            except Exception:
                shape = None
        shapes.append(shape)
        dtypes.append(dtype)
    return shapes, dtypes


def _indexer_out_shape(t: Any) -> tuple[int, ...] | None:
    """The output shape of an NDIndexer, or None when a size is dynamic."""
    J = jax_types()
    slice_sizes = []
    is_int = []
    for idx in t.indices:
        if isinstance(idx, J.Slice):
            size = static_int(idx.size)
            if size is None:
                return None
            slice_sizes.append(size)
            is_int.append(False)
        else:
            is_int.append(True)
    int_shape = tuple(t.int_indexer_shape)
    if not all(isinstance(s, (int, np.integer)) for s in int_shape):
        return None
    int_shape = tuple(int(s) for s in int_shape)
    if not any(is_int):
        return tuple(slice_sizes)
    positions = [k for k, b in enumerate(is_int) if b]
    contiguous = positions == list(range(positions[0], positions[-1] + 1))
    if not contiguous:
        return int_shape + tuple(slice_sizes)
    pos = positions[0]
    return tuple(slice_sizes[:pos]) + int_shape + tuple(slice_sizes[pos:])


def indexer_dims(t: Any) -> tuple[list[bool], tuple[int, ...], list[int], dict[int, int]]:
    """Of an NDIndexer: which indices are integer (or array) ones, their broadcast shape, the output
    dims that shape occupies, and the output dim of each slice. The output dims are the slices in
    order, with the integer indexers' broadcast shape in place of the first integer index when the
    integer indices are adjacent, in front of everything otherwise (numpy's rule)."""
    J = jax_types()
    is_int = [not isinstance(i, J.Slice) for i in t.indices]
    int_shape = tuple(int(s) for s in t.int_indexer_shape)
    positions = [k for k, b in enumerate(is_int) if b]
    contiguous = bool(positions) and positions == list(range(positions[0], positions[-1] + 1))
    int_dims: list[int] = []
    out_of: dict[int, int] = {}
    o = 0
    if positions and not contiguous:
        int_dims = list(range(len(int_shape)))
        o = len(int_shape)
    for k, b in enumerate(is_int):
        if not b:
            out_of[k] = o
            o += 1
        elif contiguous and k == positions[0]:
            int_dims = list(range(o, o + len(int_shape)))
            o += len(int_shape)
    return is_int, int_shape, int_dims, out_of


def indexer_preimage(box: Box, t: Any, in_shape: tuple[int, ...], where: str) -> None:
    indices = t.indices
    is_int, int_shape, int_dims, out_of = indexer_dims(t)
    new_lo: list[np.ndarray] = []
    new_hi: list[np.ndarray] = []
    gathers: list[tuple[int, np.ndarray]] = []  # (input dim, per-lane values over the output sub-box)
    for j, idx in enumerate(indices):
        size_j = in_shape[j]
        dim = f"dim {j}{where}"
        if not is_int[j]:
            olo, ohi = box.lo[out_of[j]], box.hi[out_of[j]]
            lo_j, hi_j = _slice_preimage(box, idx, olo, ohi, size_j, dim)
        elif not int_shape:
            v = scalar_index(idx)
            if type(v) is str:
                lo_j, hi_j = np.zeros(1, dtype=I64), np.array([size_j], dtype=I64)
                box.widen(f"{dim}: the index depends on {v}")
            else:
                lo_j, hi_j = v, v + 1
                oob = (v < 0) | (v >= size_j)
                if oob.any():
                    lo_j = np.where(oob, 0, lo_j)
                    hi_j = np.where(oob, size_j, hi_j)
                    box.widen(f"{dim}: index out of bounds for size {size_j}", oob)
        else:
            arr = array_index(idx, int_shape)
            if type(arr) is str:
                lo_j, hi_j = np.zeros(1, dtype=I64), np.array([size_j], dtype=I64)
                box.widen(f"{dim}: a gather-like index that depends on {arr}")
            else:
                vals = _sub_box_values(arr, [box.lo[d] for d in int_dims], [box.hi[d] for d in int_dims])
                lo_j, hi_j = [], []
                for lane_vals in vals:
                    if lane_vals.size:
                        lo_j.append(int(lane_vals.min()))
                        hi_j.append(int(lane_vals.max()) + 1)
                    else:
                        lo_j.append(0)
                        hi_j.append(0)
                lo_j = np.array(lo_j, dtype=I64)
                hi_j = np.array(hi_j, dtype=I64)
                oob = (lo_j < 0) | (hi_j > size_j)
                if oob.any():
                    lo_j = np.where(oob, 0, lo_j)
                    hi_j = np.where(oob, size_j, hi_j)
                    box.widen(f"{dim}: a gather-like index out of bounds for size {size_j}", oob)
                gathers.append((j, vals))  # type: ignore[arg-type]
        new_lo.append(lo_j)
        new_hi.append(hi_j)
    if gathers:
        _gather_exactness(box, gathers, new_lo, new_hi, where)
    box.lo, box.hi = new_lo, new_hi


def _slice_preimage(
    box: Box, idx: Any, olo: np.ndarray, ohi: np.ndarray, size_j: int, dim: str
) -> tuple[np.ndarray, np.ndarray]:
    start = scalar_index(idx.start)
    stride = int(idx.stride) if isinstance(idx.stride, (int, np.integer)) else None
    size = static_int(idx.size)
    whole = (np.zeros(1, dtype=I64), np.array([size_j], dtype=I64))
    if type(start) is str:
        box.widen(f"{dim}: the slice start depends on {start}")
        return whole
    if size is None:
        box.widen(f"{dim}: a slice of dynamic size")
        return whole
    if stride is None or stride < 1:
        box.widen(f"{dim}: a slice with stride {idx.stride}")
        return whole
    nonempty = ohi > olo
    lo = start + stride * olo
    hi = np.where(nonempty, start + stride * (ohi - 1) + 1, lo)
    if stride > 1:
        strided = nonempty & (ohi - olo > 1)
        box.widen(f"{dim}: stride {stride} (every {_ordinal(stride)} element of the range)", strided)
    if size > 0:
        oob = (start < 0) | (start + stride * (size - 1) >= size_j)
        if oob.any():
            lo = np.where(oob, 0, lo)
            hi = np.where(oob, size_j, hi)
            box.widen(f"{dim}: a slice out of bounds for size {size_j}", oob)
    return lo, hi


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _sub_box_values(arr: np.ndarray, lo: list[np.ndarray], hi: list[np.ndarray]) -> list[np.ndarray]:
    """Per lane, the flat values of `arr` (shape (n, *int_shape)) inside the output sub-box."""
    lanes = max([arr.shape[0], *(x.shape[0] for x in lo), *(x.shape[0] for x in hi)])
    full = all(
        x.shape[0] == 1 and int(x[0]) == 0 for x in lo
    ) and all(x.shape[0] == 1 and int(x[0]) == s for x, s in zip(hi, arr.shape[1:]))
    out = []
    for lane in range(lanes):
        a = arr[min(lane, arr.shape[0] - 1)]
        if not full:
            sl = tuple(
                slice(int(l[min(lane, l.shape[0] - 1)]), int(h[min(lane, h.shape[0] - 1)]))
                for l, h in zip(lo, hi)
            )
            a = a[sl]
        out.append(a.reshape(-1))
    return out


def _gather_exactness(
    box: Box,
    gathers: list[tuple[int, list[np.ndarray]]],
    lo: list[np.ndarray],
    hi: list[np.ndarray],
    where: str,
) -> None:
    """A gather is exact on a lane when its index tuples fill their bounding box."""
    dims = [j for j, _ in gathers]
    lanes = max(len(v) for _, v in gathers)
    inexact = np.zeros(lanes, dtype=bool)
    for lane in range(lanes):
        cols = [v[min(lane, len(v) - 1)] for _, v in gathers]
        if cols[0].size == 0:
            continue
        volume = 1
        for j in dims:
            volume *= int(hi[j][min(lane, hi[j].shape[0] - 1)] - lo[j][min(lane, lo[j].shape[0] - 1)])
        if cols[0].size < volume:
            inexact[lane] = True
            continue
        unique = np.unique(np.stack(cols, axis=1), axis=0).shape[0]
        inexact[lane] = unique != volume
    names = ", ".join(str(j) for j in dims)
    box.widen(f"dim{'s' if len(dims) > 1 else ''} {names}{where}: a gather-like index "
              "(the bounding box of the indices)", inexact)


def reshape_preimage(box: Box, in_shape: tuple[int, ...], out_shape: tuple[int, ...]) -> None:
    """A box of the reshaped view -> the tightest box of the input holding its elements. Where those
    elements are not one box, the lane is widened to it: `region_elements` then gives the lane its exact
    boxes (ACC-16)."""
    lanes = max([1, *(x.shape[0] for x in box.lo), *(x.shape[0] for x in box.hi)])
    if in_shape == out_shape:
        return
    full = all(x.shape[0] == 1 and int(x[0]) == 0 for x in box.lo) and all(
        x.shape[0] == 1 and int(x[0]) == s for x, s in zip(box.hi, out_shape)
    )
    if full:
        box.lo, box.hi = whole_extent(in_shape)
        return
    rank_in = len(in_shape)
    new_lo = np.zeros((lanes, rank_in), dtype=I64)
    new_hi = np.zeros((lanes, rank_in), dtype=I64)
    inexact = np.zeros(lanes, dtype=bool)
    for lane in range(lanes):
        lo = [int(x[min(lane, x.shape[0] - 1)]) for x in box.lo]
        hi = [int(x[min(lane, x.shape[0] - 1)]) for x in box.hi]
        if any(h <= l for l, h in zip(lo, hi)):
            continue  # empty: stays [0, 0) everywhere
        count = math.prod(h - l for l, h in zip(lo, hi))
        first = int(np.ravel_multi_index(lo, out_shape)) if out_shape else 0
        last = int(np.ravel_multi_index([h - 1 for h in hi], out_shape)) if out_shape else 0
        a = np.unravel_index(first, in_shape) if in_shape else ()
        b = np.unravel_index(last, in_shape) if in_shape else ()
        differ = False
        for d in range(rank_in):
            if differ:
                new_lo[lane, d], new_hi[lane, d] = 0, in_shape[d]
            elif a[d] == b[d]:
                new_lo[lane, d], new_hi[lane, d] = a[d], a[d] + 1
            else:
                differ = True
                new_lo[lane, d], new_hi[lane, d] = a[d], b[d] + 1
        volume = int(np.prod(new_hi[lane] - new_lo[lane]))
        inexact[lane] = volume != count
    box.lo = [new_lo[:, d] for d in range(rank_in)]
    box.hi = [new_hi[:, d] for d in range(rank_in)]
    box.widen(f"a reshape {tuple(in_shape)} -> {tuple(out_shape)} of a part that is not one box of the input "
              "(its bounding box)", inexact)


def bitcast_preimage(box: Box, in_shape: tuple[int, ...], in_dtype: Any, out_dtype: Any) -> None:
    J = jax_types()
    bx, by = J.itemsize_bits(in_dtype), J.itemsize_bits(out_dtype)
    if bx == by:
        return
    d = len(in_shape) - 2
    if by > bx:  # one output row packs `k` input rows
        k = by // bx
        box.lo[d] = box.lo[d] * k
        box.hi[d] = box.hi[d] * k
        return
    k = bx // by  # one input row holds `k` output rows
    lo, hi = box.lo[d], box.hi[d]
    nonempty = hi > lo
    new_lo = lo // k
    new_hi = np.where(nonempty, (hi - 1) // k + 1, new_lo)
    partial = nonempty & ((lo % k != 0) | (hi % k != 0))
    box.lo[d], box.hi[d] = new_lo, new_hi
    box.widen(f"dim {d}: a bitcast to a narrower type touches part of an element", partial)


# --- views whose slice sizes are data (ACC-7) ------------------------------------------


def size_lanes(chain: Sequence[Any]) -> int:
    """How many lanes the slice sizes of `chain` differ over: 1 when every size is static or the
    same on every lane, the lane count when some size is a per-lane array (ACC-7)."""
    J = jax_types()
    lanes = 1
    for t in chain:
        if isinstance(t, J.NDIndexer):
            for idx in t.indices:
                if isinstance(idx, J.Slice) and type(idx.size) is np.ndarray and idx.size.ndim:
                    lanes = max(lanes, int(idx.size.shape[0]))
    return lanes


def dynamic_sizes(chain: Sequence[Any]) -> list[Any]:
    """The slice sizes of `chain` that are not Python integers (evaluator values), in order."""
    J = jax_types()
    out = []
    for t in chain:
        if isinstance(t, J.NDIndexer):
            for idx in t.indices:
                if isinstance(idx, J.Slice) and not isinstance(idx.size, (int, np.integer)):
                    out.append(idx.size)
    return out


def lane_chain(chain: Sequence[Any], lane: int) -> tuple[Any, ...]:
    """`chain` as lane `lane` sees it: every per-lane index value cut to that lane, and every slice
    size that is now one integer made a Python integer (so shapes and regions are static)."""
    J = jax_types()
    out: list[Any] = []
    for t in chain:
        if not isinstance(t, J.NDIndexer):
            out.append(t)
            continue
        int_rank = len(t.int_indexer_shape)
        indices = []
        for idx in t.indices:
            if isinstance(idx, J.Slice):
                size = _one_lane(idx.size, lane)
                static = static_int(size)
                indices.append(J.Slice(_one_lane(idx.start, lane), size if static is None else static, idx.stride))
            elif type(idx) is np.ndarray and idx.ndim == int_rank + 1:
                indices.append(_one_lane(idx, lane))
            else:
                indices.append(idx)
        out.append(J.NDIndexer(tuple(indices), t.shape, t.int_indexer_shape))
    return tuple(out)


def _one_lane(v: Any, lane: int) -> Any:
    if type(v) is np.ndarray and v.ndim and v.shape[0] > 1:
        return v[lane : lane + 1]
    return v


def view_shape(base_shape: tuple[int, ...], dtype: Any, chain: Sequence[Any]) -> tuple[tuple[int, ...], Any] | None:
    """The shape and dtype of the view `chain` of a buffer, when every slice size is one integer."""
    shapes, dtypes = forward_shapes(base_shape, dtype, chain)
    if shapes[-1] is None:
        return None
    return shapes[-1], dtypes[-1]
