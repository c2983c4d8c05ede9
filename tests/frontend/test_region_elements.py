"""Exact regions through any chain of views (ACC-16), held to numpy's own answer.

The oracle applies a random chain (slices with strides, integer and gather-like indices, transposes,
reshapes, bitcasts between 32-, 16- and 8-bit types) to an array of the buffer's flat indices and reads
which buffer elements the view's elements come from; the region semcheck computes must hold exactly
those (and say it is exact, unless a narrowing bitcast touches part of an element).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

jax = pytest.importorskip("jax")

from jax._src.state import types as state_types  # noqa: E402
from jax._src.state.indexing import NDIndexer, Slice  # noqa: E402

from semcheck.checker.frontend.region_elements import MAX_BOXES, merge_box_array  # noqa: E402
from semcheck.checker.frontend.regions import ref_regions  # noqa: E402
from semcheck.model.ops import Region  # noqa: E402

pytestmark = pytest.mark.jax

DTYPES = (np.dtype(np.int32), np.dtype(np.int16), np.dtype(np.int8))


def _bitcast_sources(src: np.ndarray, bx: int, by: int) -> np.ndarray:
    """TPU's bitcast of the ref, on arrays of sources: `src` is (*shape, m), each element's `m` buffer
    elements; a wider type packs `k` consecutive rows, a narrower one splits a row into `k` rows."""
    *lead, rows, cols, m = src.shape
    if by > bx:
        k = by // bx
        s = src.reshape(*lead, rows // k, k, cols, m).swapaxes(-3, -2)
        return s.reshape(*lead, rows // k, cols, k * m)
    k = bx // by
    s = np.repeat(src[..., None, :], k, axis=-2).swapaxes(-3, -2)  # (*lead, rows, k, cols, m)
    return s.reshape(*lead, rows * k, cols, m)


@st.composite
def _reshape_of(draw, shape):
    n = math.prod(shape)
    factors, d = [], 2
    while n > 1:
        while n % d:
            d += 1
        factors.append(d)
        n //= d
    factors = draw(st.permutations(factors))
    dims, cur = [], 1
    for f in factors:
        cur *= f
        if draw(st.booleans()):
            dims.append(cur)
            cur = 1
    dims.append(cur)
    rank = draw(st.integers(1, 4))
    while len(dims) > rank:
        dims[-2:] = [dims[-2] * dims[-1]]
    return tuple(dims)


@st.composite
def _indexer_of(draw, shape, with_gather=True):
    """An NDIndexer of `shape` and the numpy index that names the same elements."""
    indices, np_index, gathered = [], [], False
    for s in shape:
        kind = draw(st.sampled_from(["slice", "slice", "int", "gather"] if with_gather and not gathered
                                    else ["slice", "slice", "int"]))
        if kind == "int":
            i = draw(st.integers(0, s - 1))
            indices.append(i)
            np_index.append(i)
        elif kind == "gather":
            vals = np.array(draw(st.lists(st.integers(0, s - 1), min_size=1, max_size=4)), dtype=np.int32)
            indices.append(vals[None])  # one lane
            np_index.append(vals)
            gathered = True
        else:
            stride = draw(st.sampled_from([1, 1, 2, 3]))
            start = draw(st.integers(0, s - 1))
            size = draw(st.integers(1, (s - 1 - start) // stride + 1))
            indices.append(Slice(start, size, stride))
            np_index.append(slice(start, start + (size - 1) * stride + 1, stride))
    int_shape = next(((v.shape[1],) for v in indices if type(v) is np.ndarray), ())
    return NDIndexer(tuple(indices), tuple(shape), int_shape), tuple(np_index)


@st.composite
def chains(draw):
    """A buffer (shape, dtype), a chain of views of it, and the view's sources (numpy's answer)."""
    shape = draw(st.sampled_from([(8, 4), (4, 8, 2), (16, 4), (2, 8, 6), (6, 4, 4), (32,), (4, 4, 4, 2)]))
    dtype = draw(st.sampled_from(DTYPES))
    src = np.arange(math.prod(shape)).reshape(*shape, 1)
    chain, cur, cur_dtype, narrowed = [], shape, dtype, False
    for _ in range(draw(st.integers(1, 5))):
        kinds = ["index", "reshape", "transpose"]
        widths = [d for d in DTYPES if len(cur) >= 2 and d.itemsize != cur_dtype.itemsize
                  and (cur[-2] * cur_dtype.itemsize) % d.itemsize == 0]
        if widths:
            kinds += ["bitcast", "bitcast"]
        kind = draw(st.sampled_from(kinds))
        if kind == "index":
            t, idx = draw(_indexer_of(cur))
            src = src[idx]
        elif kind == "reshape":
            new = draw(_reshape_of(cur))
            t = state_types.ReshapeTransform(new)
            src = src.reshape(*new, src.shape[-1])
        elif kind == "transpose":
            perm = tuple(draw(st.permutations(range(len(cur)))))
            t = state_types.TransposeTransform(perm)
            src = src.transpose(*perm, len(cur))
        else:
            to = draw(st.sampled_from(widths))
            t = state_types.BitcastTransform(to)
            narrowed |= to.itemsize < cur_dtype.itemsize
            src = _bitcast_sources(src, cur_dtype.itemsize, to.itemsize)
            cur_dtype = to
        chain.append(t)
        cur = src.shape[:-1]
        if 0 in cur:
            break
    return shape, dtype, tuple(chain), src, narrowed


def _elements(shape, r: Region | None) -> set[int]:
    if r is None:
        return set()
    flat = np.arange(math.prod(shape)).reshape(shape)
    out: set[int] = set()
    for b in r.parts or (r.box,):
        out.update(flat[tuple(slice(lo, hi) for lo, hi in b)].ravel().tolist())
    return out


def test_the_bitcast_oracle_is_jaxs_bitcast():
    """The sources `_bitcast_sources` names are the elements whose bits jax's own bitcast moves."""
    from jax._src.state.utils import bitcast

    rng = np.random.default_rng(0)
    x = rng.integers(0, 2**16, size=(4, 3), dtype=np.uint16)
    wide = np.asarray(bitcast(x, np.uint32))  # (2, 3): rows 2r and 2r+1 of x
    src = _bitcast_sources(np.arange(12).reshape(4, 3, 1), 16, 32)
    for (r, c), v in np.ndenumerate(wide):
        parts = [int(x.flat[i]) for i in src[r, c]]
        assert int(v) in (parts[0] | parts[1] << 16, parts[1] | parts[0] << 16)
    y = rng.integers(0, 2**32, size=(2, 3), dtype=np.uint32)
    narrow = np.asarray(bitcast(y, np.uint8))  # (8, 3): row r of y is rows 4r .. 4r+3
    src = _bitcast_sources(np.arange(6).reshape(2, 3, 1), 32, 8)
    for (r, c), v in np.ndenumerate(narrow):
        (i,) = src[r, c]
        assert int(v) in y.flat[i].tobytes()


@pytest.mark.rule("ACC-16")
@settings(deadline=None)
@given(chains(), st.data())
def test_a_region_through_any_chain_is_exactly_numpys_elements(case, data):
    shape, dtype, chain, src, narrowed = case
    (r,) = ref_regions(shape, chain, dtype=dtype)
    want = set(np.unique(src).tolist()) if src.size else set()
    got = _elements(shape, r)
    assert got >= want
    if r is not None and r.exact:
        assert got == want
    if not narrowed:  # only part of an element stays inexact
        assert r is None or r.exact, r.why
        assert got == want
    if r is not None and r.parts:
        assert sum(math.prod(b - a for a, b in p) for p in r.parts) == len(got)  # disjoint boxes
    # overlap is the intersection of the elements, exactly when both are exact, never less
    other = data.draw(chains().filter(lambda c: c[0] == shape))
    (q,) = ref_regions(shape, other[2], dtype=other[1])
    theirs = set(np.unique(other[3]).tolist()) if other[3].size else set()
    if r is None or q is None:
        return
    meet = bool(want & theirs)
    if r.exact and q.exact:
        assert r.overlaps(q) == meet == q.overlaps(r)
    else:
        assert r.overlaps(q) or not meet


@pytest.mark.rule("ACC-16")
def test_two_reshapes_of_parts_stay_exact_and_decide_overlap():
    """Rows of a (16, 8, 2, 128) buffer reached through (128, 2, 128) and then (64, 2, 2, 128): each
    copy's rows are several boxes of the buffer; they meet only if their rows do."""
    first = state_types.ReshapeTransform((128, 2, 128))
    lanes = NDIndexer((Slice(0, 128, 1), 1, Slice(0, 128, 1)), (128, 2, 128), ())
    second = state_types.ReshapeTransform((64, 2, 128))

    def rows(start, size):
        return NDIndexer((Slice(start, size, 1), 1, Slice(0, 128, 1)), (64, 2, 128), ())

    (a,) = ref_regions((16, 8, 2, 128), (first, lanes, second, rows(0, 20)))
    (b,) = ref_regions((16, 8, 2, 128), (first, lanes, second, rows(20, 44)))
    (c,) = ref_regions((16, 8, 2, 128), (first, lanes, second, rows(19, 4)))
    assert a.exact and b.exact and c.exact and a.parts and b.parts
    assert not a.overlaps(b) and a.overlaps(c) and b.overlaps(c)


@pytest.mark.rule("ACC-16")
def test_past_the_bound_a_region_stays_widened_and_says_why():
    x = state_types.ReshapeTransform((2 * MAX_BOXES + 2, 2))
    idx = NDIndexer((Slice(0, 2 * MAX_BOXES + 2, 1), 1), (2 * MAX_BOXES + 2, 2), ())
    (r,) = ref_regions((4 * MAX_BOXES + 4,), (x, idx))  # every other element: one box each
    assert not r.exact and f"more than {MAX_BOXES} boxes" in r.why and r.box == ((1, 4 * MAX_BOXES + 4),)


@pytest.mark.rule("ACC-16")
def test_a_narrowing_bitcast_of_half_an_element_is_a_tight_superset():
    narrow = state_types.BitcastTransform(np.dtype(np.int16))
    rows = NDIndexer((Slice(0, 8, 2), Slice(0, 128, 1)), (16, 128), ())  # rows 0, 2, .., 14 of int16
    (r,) = ref_regions((8, 128), (narrow, rows), dtype=np.dtype(np.int32))
    assert r.box == ((0, 8), (0, 128)) and not r.exact and "part of an element" in r.why


def test_merging_keeps_the_union_of_disjoint_boxes():
    arr = np.array([[[0, 1], [0, 2]], [[1, 2], [0, 2]], [[2, 3], [1, 2]], [[2, 3], [0, 1]]])
    out = merge_box_array(arr)
    assert sorted(map(lambda b: tuple(map(tuple, b)), out.tolist())) == [((0, 3), (0, 2))]


@pytest.mark.rule("ACC-16")
def test_past_the_lanes_budget_the_remaining_lanes_stay_widened(monkeypatch):
    import semcheck.checker.frontend.regions as regions

    monkeypatch.setattr(regions, "LANES_ELEMENT_LIMIT", 16)
    idx = NDIndexer((Slice(np.array([0, 1, 2]), 8, 2),), (32,), ())  # 8 elements per lane, 3 lanes
    a, b, c = ref_regions((32,), (idx,))
    assert a.exact and b.exact and len(a.parts) == len(b.parts) == 8
    assert not c.exact and "over the view's lanes" in c.why


@pytest.mark.rule("ACC-16")
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30)), min_size=1, max_size=40, unique=True),
       st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30)), min_size=1, max_size=40, unique=True))
def test_regions_of_many_boxes_overlap_exactly_when_some_cell_is_shared(cells_a, cells_b):
    """Regions of many single-cell boxes (past the pairwise loop's size) meet exactly when a cell is shared."""

    def region(cells):
        parts = tuple(sorted(((r, r + 1), (c, c + 1)) for r, c in cells))
        box = ((min(p[0][0] for p in parts), max(p[0][1] for p in parts)),
               (min(p[1][0] for p in parts), max(p[1][1] for p in parts)))
        return Region(box, True, "", parts if len(parts) > 1 else ())

    a, b = region(cells_a), region(cells_b)
    assert a.overlaps(b) == b.overlaps(a) == bool(set(cells_a) & set(cells_b))
