"""ERR-27: which windows jax's race detector takes to meet, held against the detector's own test, and where
that differs from the elements (ACC-2): a window of size 0 that starts inside another, which semcheck's
interpreter modes take to meet as the detector does (DR-1) and the hardware does not."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from semcheck.model.detector_windows import detector_windows_meet
from semcheck.model.ops import Region

pytestmark = pytest.mark.jax


def _jax_meets(a, b) -> bool:
    from jax._src.pallas.mosaic.interpret import race_detection_state as rds

    as_jax = lambda w: tuple(slice(None) if d is None else slice(d[0], d[1], 1) for d in w)  # noqa: E731
    return bool(rds._ranges_overlap(as_jax(a), as_jax(b)))


_dim = st.one_of(st.none(), st.tuples(st.integers(0, 6), st.integers(0, 4)).map(lambda t: (t[0], t[0] + t[1])))
_window = st.lists(_dim, min_size=1, max_size=3)


@pytest.mark.rule("ERR-27")
@settings(max_examples=300, deadline=None)
@given(_window, _window)
def test_the_detector_s_test_is_the_rule(a, b):
    assert detector_windows_meet(a, b) == _jax_meets(a, b), (a, b)


@pytest.mark.rule("ERR-27")
@pytest.mark.parametrize("empty, meets", [((0, 0), True), ((1, 1), True), ((2, 2), False), ((3, 3), False)])
def test_an_empty_window_inside_another_meets_it_for_the_detector_only(empty, meets):
    """Copies write rows [0:2) and [k:k) of one output: the detector has them meet for k inside [0, 2) (measured
    for k = 0 on the skipped slot of tests/frontend/kernels/empty_copy_regular.py, eager); so do semcheck's
    interpreter modes (`regions_meet`), and under hardware they never meet: they share no element."""
    from semcheck.model.access import regions_meet

    written, skipped = ((0, 2), (0, 128)), (empty, (0, 128))
    assert detector_windows_meet(written, skipped) is meets
    assert Region(skipped).empty and not Region(written).empty
    assert regions_meet(Region(written), Region(skipped), "eager") is meets
    assert regions_meet(Region(written), Region(skipped), "on_wait") is meets
    assert regions_meet(Region(written), Region(skipped), "hardware") is False


_SHAPE = (6, 5)


@st.composite
def _indexer(draw):
    """One NDIndexer of a (6, 5) buffer: per dimension a slice (of size 0 too, starting inside the dimension)
    or an integer index."""
    out = []
    for n in _SHAPE:
        if draw(st.booleans()):
            out.append(draw(st.integers(0, n - 1)))
        else:
            start = draw(st.integers(0, n - 1))
            out.append((start, draw(st.integers(0, n - start))))
    return out


def _as_jax(spec):
    import jax
    from jax._src.state import indexing

    idx = tuple(indexing.Slice(s[0], s[1]) if isinstance(s, tuple) else s for s in spec)
    return jax.tree.map(int, indexing.NDIndexer.from_indices_shape(idx, _SHAPE))


@pytest.mark.rule("ERR-27")
@settings(max_examples=300, deadline=None)
@given(_indexer(), _indexer())
def test_the_front_end_records_an_empty_window_where_the_slice_starts(a, b):
    """The front end's region of a view (`ref_regions(..., windows=True)`, what a copy's halves and an unmasked
    load or store record) is the window jax's interpreter hands its race detector (`to_range` of the view's
    indexer), a slice of size 0 included: the interpreter-mode conflict test (`regions_meet`) on the two regions
    is the detector's own `_ranges_overlap` on the two windows."""
    from jax._src.pallas.mosaic.interpret import race_detection_state as rds
    from jax._src.pallas.mosaic.interpret.utils import to_range

    from semcheck.checker.frontend.regions import ref_regions
    from semcheck.model.access import regions_meet

    ta, tb = _as_jax(a), _as_jax(b)
    (ra,), (rb,) = ref_regions(_SHAPE, (ta,), windows=True), ref_regions(_SHAPE, (tb,), windows=True)
    assert ra.exact and rb.exact
    wa, wb = to_range((ta,)), to_range((tb,))
    assert ra.box == tuple((w, w + 1) if isinstance(w, int) else (w.start, w.stop) for w in wa)
    assert regions_meet(ra, rb, "eager") == bool(rds._ranges_overlap(wa, wb)), (a, b)
    assert regions_meet(ra, rb, "hardware") == ra.overlaps(rb)
