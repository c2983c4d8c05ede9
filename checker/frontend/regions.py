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

A lane the walk widened although every value is known (a stride, a gather, a
mask with holes, a reshape or bitcast of a part that is not one box) is then
made exact from the view's elements (`region_elements`, ACC-16): a union of
disjoint boxes (`Region.parts`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from semcheck.checker.frontend.region_elements import (
    LANES_ELEMENT_LIMIT,
    GiveUp,
    TooLarge,
    element_boxes,
    lane_count,
    lane_key,
    view_size,
)
from semcheck.checker.frontend.region_transforms import (
    I64,
    jax_types,
    describe_unknown,
    Box,
    whole_extent,
    forward_shapes,
    indexer_preimage,
    reshape_preimage,
    bitcast_preimage,
    lane_chain,
    size_lanes,
)
from semcheck.model.ops import Region

__all__ = ["NO_WINDOW", "RegionCache", "empty_region", "flatten_ref", "full_region", "lane_keys", "ref_regions", "refuse_multi_ref", "foreign_transform", "unindexed"]


class RegionCache:
    """Interns `Region`s: equal regions become one object (shared by many ops)."""

    __slots__ = ("_regions",)

    def __init__(self) -> None:
        self._regions: dict[tuple[Any, ...], Region] = {}

    def get(self, box: tuple[tuple[int, int], ...], exact: bool = True, why: str = "",
            parts: tuple[tuple[tuple[int, int], ...], ...] = ()) -> Region:
        key = (box, exact, why, parts)
        r = self._regions.get(key)
        if r is None:
            r = self._regions[key] = Region(box, exact, why, parts)
        return r

    def __len__(self) -> int:
        return len(self._regions)


_DEFAULT_CACHE = RegionCache()


def full_region(shape: Sequence[int], cache: RegionCache | None = None, why: str = "") -> Region:
    """The whole buffer of `shape` (exact unless `why` says it was widened)."""
    box = tuple((0, int(s)) for s in shape)
    return (_DEFAULT_CACHE if cache is None else cache).get(box, not why, why)


def empty_region(rank: int, cache: RegionCache | None = None, why: str = "") -> Region:
    """A region of no elements of a rank-`rank` buffer: what a copy of 0 bytes touches (a size-0 slice,
    ACC-7), recorded so that the copy is known to touch nothing (rather than unknown). With `why`, its window
    (where jax's race detector takes it to start, ERR-27) is not known: the region is inexact."""
    return (_DEFAULT_CACHE if cache is None else cache).get(((0, 0),) * rank, not why, why)


NO_WINDOW = "a view of no element whose window (where jax's race detector takes it to start) semcheck does not know"


def flatten_ref(ref: Any, transforms: Sequence[Any] = ()) -> tuple[Any, tuple[Any, ...]]:
    """`(base, transforms)`: the underlying ref of a (nested) `TransformedRef` and the whole chain."""
    chain = tuple(t for t in transforms if t is not None)
    tref = jax_types().TransformedRef
    while isinstance(ref, tref):
        chain = (*ref.transforms, *chain)
        ref = ref.ref
    return ref, chain


def refuse_multi_ref(ref: Any) -> bool:
    """Whether `ref` is a view over several refs (`pl.select_ref`: a `MultiRefTransform` such as
    `SelectTransform`), which names no single buffer: the rules refuse it (`Unsupported`)."""
    J = jax_types()
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
    J = jax_types()
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


def ref_regions(
    shape: Sequence[int],
    transforms: Sequence[Any] = (),
    *,
    dtype: Any = None,
    mask: Any = None,
    cache: RegionCache | None = None,
    windows: bool = False,
) -> tuple[Region | None, ...]:
    """Per lane, the region of a buffer of `shape` (and `dtype`) that the view `transforms` covers.

    `mask` is the access's mask (None: unmasked), a per-lane bool array of
    the view's shape (`(n, *view_shape)`), or an opaque value. The result has
    one entry per lane, or a single one when every lane touches the same
    region; an entry is None where the access touches nothing (a size-0
    slice, an all-false mask). With `windows`, a size-0 slice's entry is its
    window instead, a box with a dimension of no element at the slice's start
    (ERR-27: jax's race detector compares windows by their starts). Equal
    regions are one object (interned in `cache`).
    """
    base_shape = tuple(int(s) for s in shape)
    if cache is None:
        cache = _DEFAULT_CACHE
    chain = tuple(t for t in transforms if t is not None)
    lanes = size_lanes(chain)
    if lanes > 1:  # slice sizes that differ per lane (ACC-7): each lane's view is static, walk each
        out: list[Region | None] = []
        for lane in range(lanes):
            m = mask[lane : lane + 1] if type(mask) is np.ndarray and mask.ndim and mask.shape[0] > 1 else mask
            rs = ref_regions(base_shape, lane_chain(chain, lane), dtype=dtype, mask=m, cache=cache, windows=windows)
            out.append(rs[0] if len(rs) == 1 else rs[lane])
        return _compress(out)
    try:
        box = _walk(base_shape, tuple(t for t in transforms if t is not None), dtype, mask)
        if len(box.lo) != len(base_shape) or len(box.hi) != len(base_shape):
            raise ValueError(f"a view of rank {len(box.lo)} of a rank-{len(base_shape)} buffer")
        regions = _finish(box, base_shape, cache, windows)
    except Exception as e:  # never fail a lowering over a region: widen instead
        return (full_region(base_shape, cache, f"the view could not be analysed ({type(e).__name__}: {e})"),)
    return _exact_lanes(regions, base_shape, chain, dtype, mask, cache)


def unindexed(regions: tuple[Region | None, ...], view: Sequence[Any]) -> tuple[Region | None, ...]:
    """`regions` marked `whole` when the access names its buffer with no index (`view` holds no transform):
    jax's race detector then reads its window as whole in every dimension (ERR-27)."""
    if any(t is not None for t in view):
        return regions
    return tuple(r if r is None or r.whole else dataclasses.replace(r, whole=True) for r in regions)


def _exact_lanes(regions: tuple[Region | None, ...], base_shape: tuple[int, ...], chain: tuple[Any, ...],
                 dtype: Any, mask: Any, cache: RegionCache) -> tuple[Region | None, ...]:
    """ACC-16: each lane the box walk widened, made exact from the view's elements where they can be
    enumerated (`region_elements`); a lane they cannot be keeps the walk's widened box and reason."""
    if all(r is None or r.exact for r in regions):
        return regions
    lanes = max(len(regions), lane_count(chain, mask))
    size = view_size(base_shape, chain, dtype) or 0
    spent = 0
    memo: dict[Any, Region | None] = {}
    out: list[Region | None] = []
    for lane in range(lanes):
        r = regions[min(lane, len(regions) - 1)]
        if r is None or r.exact:
            out.append(r)
            continue
        key = (r, lane_key(chain, mask, lane))
        if key not in memo:
            spent += size
            if spent > LANES_ELEMENT_LIMIT:
                memo[key] = cache.get(r.box, False, f"{r.why}; its elements not enumerated: more than "
                                      f"{LANES_ELEMENT_LIMIT} elements over the view's lanes", r.parts)
            else:
                memo[key] = _lane_elements(r, base_shape, chain, dtype, mask, lane, cache)
        out.append(memo[key])
    return _compress(out)


def _lane_elements(widened: Region, base_shape: tuple[int, ...], chain: tuple[Any, ...], dtype: Any, mask: Any,
                   lane: int, cache: RegionCache) -> Region | None:
    try:
        boxes, partial = element_boxes(base_shape, chain, dtype, mask, lane)
    except TooLarge as e:
        return cache.get(widened.box, False, f"{widened.why}; its elements not enumerated: {e}", widened.parts)
    except GiveUp:  # a value not known, or out of bounds: the walk's reason says so
        return widened
    except Exception:  # never fail a lowering over a region: keep the widened one
        return widened
    if not boxes:
        return None
    if len(boxes) == 1:
        return cache.get(boxes[0], not partial, partial)
    bound = tuple((min(b[d][0] for b in boxes), max(b[d][1] for b in boxes)) for d in range(len(base_shape)))
    return cache.get(bound, not partial, partial, tuple(boxes))


def _walk(base_shape: tuple[int, ...], transforms: tuple[Any, ...], dtype: Any, mask: Any) -> Box:
    J = jax_types()
    shapes, dtypes = forward_shapes(base_shape, dtype, transforms)
    n = len(transforms)
    multi = sum(1 for t in transforms if isinstance(t, J.NDIndexer)) > 1
    # Start at the top of the chain, or below the last transform whose output we cannot describe.
    top = n
    while shapes[top] is None:
        top -= 1
    lo, hi = whole_extent(shapes[top])  # type: ignore[arg-type]
    box = Box(lo, hi)
    if top < n:
        t = transforms[top]
        box.widen(f"a {type(t).__name__} view (not understood: the whole of what it views)")
    elif mask is not None:
        _apply_mask(box, mask, shapes[n])  # type: ignore[arg-type]
    return _descend(box, transforms, shapes, dtypes, top, multi)


def _descend(box: Box, transforms: tuple[Any, ...], shapes: list, dtypes: list, top: int, multi: bool) -> Box:
    """Map `box`, a box of the output of `transforms[top - 1]`, down to the buffer (the walk's loop)."""
    J = jax_types()
    k_index = sum(1 for t in transforms[:top] if isinstance(t, J.NDIndexer))
    for k in range(top - 1, -1, -1):
        t = transforms[k]
        in_shape = shapes[k]
        assert in_shape is not None
        if isinstance(t, J.NDIndexer):
            where = f" of indexer {k_index}" if multi else ""
            k_index -= 1
            indexer_preimage(box, t, in_shape, where)
        elif isinstance(t, J.Transpose):
            perm = [int(p) for p in t.permutation]
            lo, hi = [None] * len(perm), [None] * len(perm)
            for out_d, in_d in enumerate(perm):
                lo[in_d], hi[in_d] = box.lo[out_d], box.hi[out_d]
            box.lo, box.hi = lo, hi  # type: ignore[assignment]
        elif isinstance(t, J.Reshape):
            reshape_preimage(box, in_shape, shapes[k + 1])  # type: ignore[arg-type]
        elif isinstance(t, J.Bitcast):
            bitcast_preimage(box, in_shape, dtypes[k], t.dtype)
        elif isinstance(t, J.identity):
            pass
        else:  # unreachable: shapes[k + 1] would be None
            box.lo, box.hi = whole_extent(in_shape)
            box.widen(f"a {type(t).__name__} view")
    return box


def _apply_mask(box: Box, mask: Any, view_shape: tuple[int, ...]) -> None:
    """Narrow the top box to the bounding box of the mask's true elements."""
    if type(mask) is np.ndarray and mask.ndim == len(view_shape) and len(view_shape) > 0:
        mask = mask[None]  # a static mask without a lane axis
    if type(mask) is not np.ndarray or mask.shape[1:] != view_shape:
        what = describe_unknown(mask) if type(mask) is not np.ndarray else f"a mask of shape {mask.shape[1:]}"
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
        first = np.argmax(proj, axis=1).astype(I64)
        last = view_shape[d] - np.argmax(proj[:, ::-1], axis=1).astype(I64)
        lo.append(first)
        hi.append(last)
    empty = count == 0
    if empty.any():
        box.off = empty
    volume = np.ones(lanes, dtype=I64)
    for d in range(rank):
        volume = volume * (hi[d] - lo[d])
    box.lo, box.hi = lo, hi
    box.widen("a masked access: the bounding box of the mask's true elements", volume != count)


def _finish(box: Box, base_shape: tuple[int, ...], cache: RegionCache, windows: bool = False) -> tuple[Region | None, ...]:
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
        if (box.off is not None and bool(box.off[0])) or (not windows and any(h <= l for l, h in b)):
            return (None,)
        return (cache.get(b, *_lane_exact(box, 0)),)
    # A lane's region is decided by its row of the bounds, the switch-off, the exactness and the reasons'
    # masks: lanes with equal rows (many, when grid steps run as lanes) share one computation.
    cols = [np.broadcast_to(x, (lanes,)) for x in arrays]
    cols += [np.broadcast_to(m, (lanes,)) for m in (box.off, box.exact, *(m for m, _ in box.why))
             if type(m) is np.ndarray]
    rows = np.stack(cols, axis=1).astype(np.int64) if cols else np.zeros((lanes, 0), dtype=np.int64)
    if lanes > _DEDUPE_LANES:
        _, pick, inverse = np.unique(rows, axis=0, return_index=True, return_inverse=True)
    else:
        pick, inverse = np.arange(lanes), None
    if arrays:
        lo = rows[pick, : len(box.lo)].tolist()
        hi = rows[pick, len(box.lo) : len(arrays)].tolist()
    off = np.broadcast_to(box.off, (lanes,)) if box.off is not None else None
    out: list[Region | None] = []
    for k, lane in enumerate(pick.tolist()):
        b = tuple(zip(lo[k], hi[k])) if arrays else ()
        if (off is not None and off[lane]) or (not windows and any(h <= l for l, h in b)):
            out.append(None)
        else:
            out.append(cache.get(b, *_lane_exact(box, lane)))
    if inverse is not None:
        out = [out[i] for i in inverse.reshape(-1).tolist()]
    return _compress(out)


# Above this many lanes, `_finish` computes the region of each distinct lane once.
_DEDUPE_LANES = 64


def _lane_exact(box: Box, lane: int) -> tuple[bool, str]:
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


def with_windows(elements: tuple[Region | None, ...], windows: tuple[Region | None, ...]) -> tuple[Region | None, ...]:
    """ERR-28: per lane, a masked store's region (the mask's true elements, `elements`) carrying the indexed
    window jax's race detector takes it to write (`windows`, the view walked without the mask) where the two
    differ. A lane whose mask is all false touches no element: its region is an empty box at the window's
    start, which `hardware` drops and the interpreter modes read as its window; a scalar's is its window."""
    lanes = max(len(elements), len(windows))
    memo: dict[tuple[int, int], Region | None] = {}
    out: list[Region | None] = []
    for lane in range(lanes):
        r, w = elements[min(lane, len(elements) - 1)], windows[min(lane, len(windows) - 1)]
        key = (id(r), id(w))
        got = memo.get(key, _MISSING_REGION)
        if got is _MISSING_REGION:
            if w is None or r == w:
                got = r
            elif r is None:
                got = dataclasses.replace(w, box=tuple((lo, lo) for lo, _ in w.box), parts=(), window=w) if w.box else w
            else:
                got = dataclasses.replace(r, window=w)
            memo[key] = got
        out.append(got)  # type: ignore[arg-type]
    return _compress(out)


_MISSING_REGION = object()


def _compress(regions: list[Region | None]) -> tuple[Region | None, ...]:
    first = regions[0]
    if all(r is first for r in regions):
        return (first,)
    return tuple(regions)
