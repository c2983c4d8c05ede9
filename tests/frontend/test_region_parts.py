"""Regions through reshapes of parts that are not one box (ACC-2, ACC-16): exact unions of boxes, held to
a brute-force reference (the sets of flat indices numpy's own reshape and slicing touch)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from semcheck.model.ops import Region


def _elements(shape, boxes) -> set[int]:
    """The flat (row-major) indices of `shape` that the union of `boxes` holds."""
    flat = np.arange(math.prod(shape)).reshape(shape)
    out: set[int] = set()
    for b in boxes:
        out.update(flat[tuple(slice(lo, hi) for lo, hi in b)].ravel().tolist())
    return out


@st.composite
def two_shapes(draw):
    """Two shapes of one size (a reshape), each of rank 1 to 4."""
    factors = draw(st.lists(st.sampled_from([2, 2, 3, 4, 5]), min_size=1, max_size=5))

    def split():
        dims, cur = [], 1
        for f in draw(st.permutations(factors)):
            cur *= f
            if draw(st.booleans()):
                dims.append(cur)
                cur = 1
        dims.append(cur)
        return tuple(dims[:4]) if len(dims) <= 4 else (*dims[:3], math.prod(dims[3:]))

    return split(), split()


@st.composite
def box_of(draw, shape):
    lo, hi = [], []
    for s in shape:
        a = draw(st.integers(0, s - 1))
        lo.append(a)
        hi.append(draw(st.integers(a + 1, s)))
    return lo, hi


# --- through the front end's walk (jax's transforms) -------------------------------------------------------

jax = pytest.importorskip("jax")

from jax._src.state import types as state_types  # noqa: E402
from jax._src.state.indexing import NDIndexer, Slice  # noqa: E402

from semcheck.checker.frontend.regions import ref_regions  # noqa: E402


def _indexer(shape, box):
    return NDIndexer.from_indices_shape(tuple(Slice(a, b - a, 1) for a, b in box), shape)


@st.composite
def views(draw, base=None):
    """A chain [slice of the buffer] -> reshape -> slice of the reshaped view, and the base shape."""
    if base is None:
        base, _ = draw(two_shapes())
    lo, hi = draw(box_of(base))
    first = tuple(zip(lo, hi))
    mid = tuple(b - a for a, b in first)
    shape2 = draw(st.sampled_from(_reshapes(mid)))
    lo2, hi2 = draw(box_of(shape2))
    return base, (_indexer(base, first), state_types.ReshapeTransform(shape2), _indexer(shape2, tuple(zip(lo2, hi2)))), (
        first, shape2, tuple(zip(lo2, hi2)))


def _reshapes(shape):
    n = math.prod(shape)
    divisors = [d for d in range(1, n + 1) if n % d == 0]
    return [(n,), *((d, n // d) for d in divisors), *((a, b, n // (a * b)) for a in divisors for b in divisors
                                                      if n % (a * b) == 0)][:24]


def _touched(base, spec) -> set[int]:
    """numpy's own answer: the buffer's flat indices the view names."""
    first, shape2, second = spec
    flat = np.arange(math.prod(base)).reshape(base)
    view = flat[tuple(slice(a, b) for a, b in first)].reshape(shape2)
    return set(view[tuple(slice(a, b) for a, b in second)].ravel().tolist())


def _region_elements(base, r: Region) -> set[int]:
    return _elements(base, r.parts or (r.box,))


@pytest.mark.rule("ACC-2", "ACC-1")
@given(st.data())
def test_a_view_through_a_reshape_is_exact_and_overlap_is_decided_exactly(data):
    base, chain, spec = data.draw(views())
    (r,) = ref_regions(base, chain)
    touched = _touched(base, spec)
    assert r is not None and r.exact and _region_elements(base, r) == touched
    _, chain2, spec2 = data.draw(views(base))
    (q,) = ref_regions(base, chain2)
    assert q.exact and r.overlaps(q) == bool(touched & _touched(base, spec2)) == q.overlaps(r)


@pytest.mark.rule("ACC-2")
def test_copies_into_reshaped_rows_race_exactly_when_their_rows_meet():
    """examples/buggy/tpu_race_reshaped_rows_overlap.py under hardware: the copies' rows are two boxes each;
    race-free is violated by the seeded eight-row overlap and proved for the disjoint halves (both were
    unknown while each region was its bounding box, which meet in either case)."""
    from pathlib import Path

    from semcheck.testing import verify_target

    path = str(Path(__file__).resolve().parents[2] / "examples" / "buggy" / "tpu_race_reshaped_rows_overlap.py")
    got = {}
    for entry in ("build", "build_disjoint"):
        report, _, _ = verify_target(path, devices=(2,), dma_mode="hardware", entry=entry, cache=False)
        got[entry] = {r["property"]: r for r in report["results"]}
    race = got["build"]["race-free"]
    assert race["verdict"] == "violated" and "(2 boxes)" in race["witness"]["message"]
    assert {p: r["verdict"] for p, r in got["build_disjoint"].items()} == {p: "proved" for p in got["build_disjoint"]}
