"""The region of its underlying buffer that a ref view touches (ACC-1).

A kernel reaches a buffer through a chain of ref transforms: `.at[...]` and
`x_ref[...]` indexers (`NDIndexer`: `Slice`s, integer indices, arrays of
indices), `.T`/transposes, `.reshape(...)`, `.bitcast(...)`. This module
turns such a chain, with the index values the SPMD evaluator computed for
every lane (device), into a `Region` of the buffer per lane.

The walk goes backwards: it starts from the box the access covers in the
final view (the whole view, or the bounding box of a known mask's true
elements) and maps it through each transform's preimage down to the buffer.
Going backwards means a transform that cannot be understood only costs the
precision of what lies above it: `x.at[3].<unknown>()[...]` is still row 3.

Index values (the leaves of the indexers) are

* Python or numpy integers: static, the same on every lane;
* numpy arrays with a leading lane axis of length 1 (the same on every lane)
  or L (one value per lane): a scalar index has shape `(n,)` (or `(n, 1)`), an
  array (gather-like) index `(n, *int_indexer_shape)`;
* anything else (an opaque evaluator value, a jax tracer or `Var`): unknown.
  Its `why` and `loc` attributes, if any, go into the reason.

Precision rules: a dimension is exact when every start and size along it is
known for the lane. A stride, a gather-like index, a mask, an unknown index
or an out-of-bounds index widens the dimension to the tightest bound that is
still sound (the whole dimension when nothing better is known) and the region
becomes `exact=False` with a `why` naming the dimension and the cause. An
unknown transform widens everything below it to its whole input. Nothing here
raises on a kernel's transforms.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from semcheck.model.ops import Region

__all__ = ["RegionCache", "flatten_ref", "full_region", "lane_keys", "ref_regions", "refuse_multi_ref", "foreign_transform"]


class RegionCache:
    """Interns `Region`s: equal regions become one object (shared by many ops)."""

    __slots__ = ("_regions",)

    def __init__(self) -> None:
        self._regions: dict[tuple[Any, ...], Region] = {}

    def get(self, box: tuple[tuple[int, int], ...], exact: bool = True, why: str = "") -> Region:
        key = (box, exact, why)
        r = self._regions.get(key)
        if r is None:
            r = self._regions[key] = Region(box, exact, why)
        return r

    def __len__(self) -> int:
        return len(self._regions)


_DEFAULT_CACHE = RegionCache()


def full_region(shape: Sequence[int], cache: RegionCache | None = None, why: str = "") -> Region:
    """The whole buffer of `shape` (exact unless `why` says it was widened)."""
    box = tuple((0, int(s)) for s in shape)
    return (_DEFAULT_CACHE if cache is None else cache).get(box, not why, why)


def flatten_ref(ref: Any, transforms: Sequence[Any] = ()) -> tuple[Any, tuple[Any, ...]]:
    """`(base, transforms)`: the underlying ref of a (nested) `TransformedRef` and the whole chain."""
    chain = tuple(t for t in transforms if t is not None)
    tref = _jax().TransformedRef
    while isinstance(ref, tref):
        chain = (*ref.transforms, *chain)
        ref = ref.ref
    return ref, chain


def refuse_multi_ref(ref: Any) -> bool:
    """Whether `ref` is a view over several refs (`pl.select_ref`: a `MultiRefTransform` such as
    `SelectTransform`), which names no single buffer: the rules refuse it (`Unsupported`)."""
    J = _jax()
    while isinstance(ref, J.TransformedRef):
        if isinstance(ref.ref, (tuple, list)) or any(isinstance(t, J.MultiRef) for t in ref.transforms):
            return True
        ref = ref.ref
    return isinstance(ref, (tuple, list))


def foreign_transform(chain: Sequence[Any]) -> Any:
    """The first transform of `chain` whose meaning this module does not know, or None.

    Known: indexers, transposes, reshapes, bitcasts, and the identities
    (memory-space casts, access assumptions). Anything else (a transform of
    another back end, such as a GPU peer-memory ref, or of a newer jax) may
    name other memory than the ref's buffer, so widening its region would not
    be sound: the rules refuse it (`Unsupported`).
    """
    J = _jax()
    known = (J.NDIndexer, J.Transpose, J.Reshape, J.Bitcast, *J.identity)
    for t in chain:
        if t is not None and not isinstance(t, known):
            return t
    return None


def lane_keys(values: Sequence[Any], lanes: int) -> list[Any] | None:
    """Per lane, a hashable key of the index values `values` (the dynamic leaves of a view).

    Two lanes (or two evaluations of one equation) with equal keys have equal
    regions, so a caller can cache what it builds from a region under the key
    and call `ref_regions` only on a miss. Returns a list of length 1 (every
    lane agrees) or `lanes`, or None when a value is not a per-lane integer
    scalar (an array index, an opaque value): then there is no cheap key.
    """
    cols: list[Any] = []
    wide = False
    for v in values:
        if type(v) is np.ndarray:
            if v.dtype.kind not in "iub":
                return None
            n = v.shape[0] if v.ndim else 1
            if v.size != n:
                return None
            flat = v.reshape(n)
            if n == 1:
                cols.append(int(flat[0]))
            else:
                if n != lanes:
                    return None
                cols.append(flat)
                wide = True
        elif isinstance(v, (int, np.integer)):
            cols.append(int(v))
        elif v is None:
            cols.append(None)
        else:
            return None
    if not wide:
        return [tuple(cols)]
    if len(cols) == 1:
        return cols[0].tolist()
    mat = np.empty((lanes, len(cols)), dtype=object)
    for k, c in enumerate(cols):
        mat[:, k] = c.tolist() if type(c) is np.ndarray else c
    return list(map(tuple, mat.tolist()))


# --- jax types (imported lazily: the package imports without jax) -------------------


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


def _jax() -> _JaxTypes:
    global _JAX
    if _JAX is None:
        _JAX = _JaxTypes()
    return _JAX


# --- values --------------------------------------------------------------------------

_I64 = np.int64


def _describe_unknown(x: Any) -> str:
    why = getattr(x, "why", None)
    if isinstance(why, str):
        loc = getattr(x, "loc", None)
        where = f" at {loc}" if loc is not None and getattr(loc, "line", 0) else ""
        return f"{why}{where}"
    return f"a value not known at lowering time ({type(x).__name__})"


def _scalar(x: Any) -> np.ndarray | str:
    """A per-lane scalar index as an int64 array of shape (n,), or the reason it is unknown."""
    if isinstance(x, (bool, np.bool_)):
        return np.array([int(x)], dtype=_I64)
    if isinstance(x, (int, np.integer)):
        return np.array([int(x)], dtype=_I64)
    if type(x) is np.ndarray:
        if x.ndim == 0:
            x = x[None]
        if x.dtype.kind not in "iub":
            return f"a non-integer index ({x.dtype})"
        if x.ndim > 1:
            if math.prod(x.shape[1:]) != 1:
                return "an array index where a scalar was expected"
            x = x.reshape(x.shape[0])
        return x.astype(_I64, copy=False)
    val = getattr(x, "val", None)  # a jax Literal (when called on an unevaluated jaxpr)
    if val is not None and not hasattr(x, "why"):
        try:
            arr = np.asarray(val)
        except Exception:
            return _describe_unknown(x)
        if arr.ndim == 0 and arr.dtype.kind in "iub":
            return np.array([int(arr)], dtype=_I64)
    return _describe_unknown(x)


def _array(x: Any, shape: tuple[int, ...]) -> np.ndarray | str:
    """A per-lane array index of `shape` as int64 `(n, *shape)`, or the reason it is unknown."""
    if isinstance(x, (int, np.integer)):
        return np.full((1, *shape), int(x), dtype=_I64)
    if type(x) is np.ndarray:
        if x.dtype.kind not in "iub":
            return f"a non-integer index ({x.dtype})"
        if x.ndim == len(shape):  # no lane axis (a static constant)
            x = x[None]
        try:
            return np.broadcast_to(x, (x.shape[0], *shape)).astype(_I64, copy=False)
        except ValueError:
            return f"an index array of shape {x.shape[1:]} for an indexer of shape {shape}"
    val = getattr(x, "val", None)
    if val is not None and not hasattr(x, "why"):
        try:
            arr = np.asarray(val)
            if arr.dtype.kind in "iub":
                return np.broadcast_to(arr, shape)[None].astype(_I64)
        except Exception:
            pass
    return _describe_unknown(x)


def _static_int(x: Any) -> int | None:
    if isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_)):
        return int(x)
    v = _scalar(x)
    if type(v) is np.ndarray and v.shape[0] == 1:
        return int(v[0])
    return None


# --- the walk ------------------------------------------------------------------------


class _Box:
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


def _whole(shape: Sequence[int]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    return ([np.zeros(1, dtype=_I64) for _ in shape], [np.array([int(s)], dtype=_I64) for s in shape])


def _forward_shapes(
    base_shape: tuple[int, ...], dtype: Any, transforms: Sequence[Any]
) -> tuple[list[tuple[int, ...] | None], list[Any]]:
    """Input shape (and dtype) of each transform, then the final view's: None past an unknown one."""
    J = _jax()
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
    J = _jax()
    slice_sizes = []
    is_int = []
    for idx in t.indices:
        if isinstance(idx, J.Slice):
            size = _static_int(idx.size)
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


def ref_regions(
    shape: Sequence[int],
    transforms: Sequence[Any] = (),
    *,
    dtype: Any = None,
    mask: Any = None,
    cache: RegionCache | None = None,
) -> tuple[Region | None, ...]:
    """Per lane, the region of a buffer of `shape` (and `dtype`) that the view `transforms` covers.

    `mask` is the access's mask (None: unmasked), a per-lane bool array of
    the view's shape (`(n, *view_shape)`), or an opaque value. The result has
    one entry per lane, or a single one when every lane touches the same
    region; an entry is None where the access touches nothing (a size-0
    slice, an all-false mask). Equal regions are one object (interned in
    `cache`).
    """
    base_shape = tuple(int(s) for s in shape)
    if cache is None:
        cache = _DEFAULT_CACHE
    try:
        box = _walk(base_shape, tuple(t for t in transforms if t is not None), dtype, mask)
        if len(box.lo) != len(base_shape) or len(box.hi) != len(base_shape):
            raise ValueError(f"a view of rank {len(box.lo)} of a rank-{len(base_shape)} buffer")
        return _finish(box, base_shape, cache)
    except Exception as e:  # never fail a lowering over a region: widen instead
        return (full_region(base_shape, cache, f"the view could not be analysed ({type(e).__name__}: {e})"),)


def _walk(base_shape: tuple[int, ...], transforms: tuple[Any, ...], dtype: Any, mask: Any) -> _Box:
    J = _jax()
    shapes, dtypes = _forward_shapes(base_shape, dtype, transforms)
    n = len(transforms)
    multi = sum(1 for t in transforms if isinstance(t, J.NDIndexer)) > 1
    # Start at the top of the chain, or below the last transform whose output we cannot describe.
    top = n
    while shapes[top] is None:
        top -= 1
    lo, hi = _whole(shapes[top])  # type: ignore[arg-type]
    box = _Box(lo, hi)
    if top < n:
        t = transforms[top]
        box.widen(f"a {type(t).__name__} view (not understood: the whole of what it views)")
    elif mask is not None:
        _apply_mask(box, mask, shapes[n])  # type: ignore[arg-type]
    k_index = sum(1 for t in transforms[:top] if isinstance(t, J.NDIndexer))
    for k in range(top - 1, -1, -1):
        t = transforms[k]
        in_shape = shapes[k]
        assert in_shape is not None
        if isinstance(t, J.NDIndexer):
            where = f" of indexer {k_index}" if multi else ""
            k_index -= 1
            _indexer_preimage(box, t, in_shape, where)
        elif isinstance(t, J.Transpose):
            perm = [int(p) for p in t.permutation]
            lo, hi = [None] * len(perm), [None] * len(perm)
            for out_d, in_d in enumerate(perm):
                lo[in_d], hi[in_d] = box.lo[out_d], box.hi[out_d]
            box.lo, box.hi = lo, hi  # type: ignore[assignment]
        elif isinstance(t, J.Reshape):
            _reshape_preimage(box, in_shape, shapes[k + 1])  # type: ignore[arg-type]
        elif isinstance(t, J.Bitcast):
            _bitcast_preimage(box, in_shape, dtypes[k], t.dtype)
        elif isinstance(t, J.identity):
            pass
        else:  # unreachable: shapes[k + 1] would be None
            box.lo, box.hi = _whole(in_shape)
            box.widen(f"a {type(t).__name__} view")
    return box


def _apply_mask(box: _Box, mask: Any, view_shape: tuple[int, ...]) -> None:
    """Narrow the top box to the bounding box of the mask's true elements."""
    if type(mask) is np.ndarray and mask.ndim == len(view_shape) and len(view_shape) > 0:
        mask = mask[None]  # a static mask without a lane axis
    if type(mask) is not np.ndarray or mask.shape[1:] != view_shape:
        what = _describe_unknown(mask) if type(mask) is not np.ndarray else f"a mask of shape {mask.shape[1:]}"
        box.widen(f"a masked access (the mask is {what}): the whole indexed view")
        return
    m = mask.astype(bool, copy=False)
    lanes = m.shape[0]
    rank = len(view_shape)
    if rank == 0:
        box.off = ~m.reshape(lanes)
        return
    flat = m.reshape(lanes, -1)
    count = flat.sum(axis=1)
    lo, hi = [], []
    for d in range(rank):
        other = tuple(a for a in range(1, rank + 1) if a != d + 1)
        proj = m.any(axis=other) if other else m
        first = np.argmax(proj, axis=1).astype(_I64)
        last = view_shape[d] - np.argmax(proj[:, ::-1], axis=1).astype(_I64)
        lo.append(first)
        hi.append(last)
    empty = count == 0
    if empty.any():
        box.off = empty
    volume = np.ones(lanes, dtype=_I64)
    for d in range(rank):
        volume = volume * (hi[d] - lo[d])
    box.lo, box.hi = lo, hi
    box.widen("a masked access: the bounding box of the mask's true elements", volume != count)


def _indexer_preimage(box: _Box, t: Any, in_shape: tuple[int, ...], where: str) -> None:
    J = _jax()
    indices = t.indices
    is_int = [not isinstance(i, J.Slice) for i in indices]
    int_shape = tuple(int(s) for s in t.int_indexer_shape)
    # The output dims of the view: the slices in order, with the integer indexers'
    # broadcast shape in place of the first integer index when the integer
    # indices are adjacent, in front of everything otherwise (numpy's rule).
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
            v = _scalar(idx)
            if type(v) is str:
                lo_j, hi_j = np.zeros(1, dtype=_I64), np.array([size_j], dtype=_I64)
                box.widen(f"{dim}: the index depends on {v}")
            else:
                lo_j, hi_j = v, v + 1
                oob = (v < 0) | (v >= size_j)
                if oob.any():
                    lo_j = np.where(oob, 0, lo_j)
                    hi_j = np.where(oob, size_j, hi_j)
                    box.widen(f"{dim}: index out of bounds for size {size_j}", oob)
        else:
            arr = _array(idx, int_shape)
            if type(arr) is str:
                lo_j, hi_j = np.zeros(1, dtype=_I64), np.array([size_j], dtype=_I64)
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
                lo_j = np.array(lo_j, dtype=_I64)
                hi_j = np.array(hi_j, dtype=_I64)
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
    box: _Box, idx: Any, olo: np.ndarray, ohi: np.ndarray, size_j: int, dim: str
) -> tuple[np.ndarray, np.ndarray]:
    start = _scalar(idx.start)
    stride = int(idx.stride) if isinstance(idx.stride, (int, np.integer)) else None
    size = _static_int(idx.size)
    whole = (np.zeros(1, dtype=_I64), np.array([size_j], dtype=_I64))
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
    box: _Box,
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


def _reshape_preimage(box: _Box, in_shape: tuple[int, ...], out_shape: tuple[int, ...]) -> None:
    """A box of the reshaped view -> the tightest box of the input holding its elements."""
    lanes = max([1, *(x.shape[0] for x in box.lo), *(x.shape[0] for x in box.hi)])
    if in_shape == out_shape:
        return
    full = all(x.shape[0] == 1 and int(x[0]) == 0 for x in box.lo) and all(
        x.shape[0] == 1 and int(x[0]) == s for x, s in zip(box.hi, out_shape)
    )
    if full:
        box.lo, box.hi = _whole(in_shape)
        return
    rank_in = len(in_shape)
    new_lo = np.zeros((lanes, rank_in), dtype=_I64)
    new_hi = np.zeros((lanes, rank_in), dtype=_I64)
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
    box.widen(f"a reshape {tuple(in_shape)} -> {tuple(out_shape)} of a part that is not one "
              "box of the input (its bounding box)", inexact)


def _bitcast_preimage(box: _Box, in_shape: tuple[int, ...], in_dtype: Any, out_dtype: Any) -> None:
    J = _jax()
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


def _finish(box: _Box, base_shape: tuple[int, ...], cache: RegionCache) -> tuple[Region | None, ...]:
    arrays = [*box.lo, *box.hi]
    lanes = max([1, *(x.shape[0] for x in arrays)])
    if type(box.exact) is np.ndarray:
        lanes = max(lanes, box.exact.shape[0])
    if box.off is not None:
        lanes = max(lanes, box.off.shape[0])
    for m, _ in box.why:
        if m is not None:
            lanes = max(lanes, m.shape[0])
    if lanes == 1:
        b = tuple((int(l[0]), int(h[0])) for l, h in zip(box.lo, box.hi))
        if (box.off is not None and bool(box.off[0])) or any(h <= l for l, h in b):
            return (None,)
        return (cache.get(b, *_lane_exact(box, 0)),)
    if arrays:
        lo = np.stack([np.broadcast_to(x, (lanes,)) for x in box.lo], axis=1).tolist()
        hi = np.stack([np.broadcast_to(x, (lanes,)) for x in box.hi], axis=1).tolist()
    off = np.broadcast_to(box.off, (lanes,)) if box.off is not None else None
    out: list[Region | None] = []
    for lane in range(lanes):
        b = tuple(zip(lo[lane], hi[lane])) if arrays else ()
        if (off is not None and off[lane]) or any(h <= l for l, h in b):
            out.append(None)
        else:
            out.append(cache.get(b, *_lane_exact(box, lane)))
    return _compress(out)


def _lane_exact(box: _Box, lane: int) -> tuple[bool, str]:
    exact = box.exact
    if type(exact) is np.ndarray:
        ex = bool(exact[min(lane, exact.shape[0] - 1)])
    else:
        ex = bool(exact)
    if ex:
        return True, ""
    reasons = []
    for m, w in box.why:
        if m is None or m[min(lane, m.shape[0] - 1)]:
            if w not in reasons:
                reasons.append(w)
    return False, "; ".join(reasons)


def _compress(regions: list[Region | None]) -> tuple[Region | None, ...]:
    first = regions[0]
    if all(r is first for r in regions):
        return (first,)
    return tuple(regions)
