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


@pytest.mark.rule("ERR-28")
@settings(max_examples=300, deadline=None)
@given(_indexer(), _indexer(), st.data())
def test_a_masked_store_is_its_indexed_window_for_the_detector_and_its_elements_on_a_tpu(a, b, data):
    """The front end's masked store (`with_windows` of its elements and its unmasked view) is the indexed
    window jax's interpreter hands its race detector under the interpreter modes, whatever the mask (all false
    included): the conflict test there is the detector's `_ranges_overlap`; under hardware the store is the
    mask's true elements, so it conflicts with a store of them and with none away from them."""
    import numpy as np
    from jax._src.pallas.mosaic.interpret import race_detection_state as rds
    from jax._src.pallas.mosaic.interpret.utils import to_range

    from semcheck.checker.frontend.regions import ref_regions, with_windows
    from semcheck.model.access import AccessEvent, conflicts, in_mode
    from semcheck.model.ops import Loc

    ta, tb = _as_jax(a), _as_jax(b)
    view = tuple(s[1] for s in a if isinstance(s, tuple))
    if not all(view):  # a window of no element: an unmasked store's rule (ERR-27)
        return
    mask = np.array(data.draw(st.lists(st.booleans(), min_size=int(np.prod(view)), max_size=int(np.prod(view)))),
                    dtype=bool).reshape(view)
    (ra,) = with_windows(ref_regions(_SHAPE, (ta,), mask=mask), ref_regions(_SHAPE, (ta,), windows=True))
    (rb,) = ref_regions(_SHAPE, (tb,), windows=True)
    store = AccessEvent(0, 0, None, (0, None, "o"), ra, True, 0, Loc("k.py", 1))
    other = AccessEvent(1, 0, None, (0, None, "o"), rb, True, 1, Loc("k.py", 2))
    wa, wb = to_range((ta,)), to_range((tb,))
    for mode in ("eager", "on_wait"):
        seen = in_mode([store, other], mode)
        assert conflicts(*seen, mode) == bool(rds._ranges_overlap(wa, wb)), (a, b, mask)
    written = np.zeros(_SHAPE, dtype=bool)
    written[tuple(slice(s[0], s[0] + s[1]) if isinstance(s, tuple) else s for s in a)] = mask
    touched = np.zeros(_SHAPE, dtype=bool)
    touched[tuple(slice(s[0], s[0] + s[1]) if isinstance(s, tuple) else s for s in b)] = True
    hw = in_mode([store, other], "hardware")
    shared = bool((written & touched).any())
    assert (len(hw) == 2 and conflicts(*hw, "hardware")) == shared or (not shared and not ra.exact), (a, b, mask)


@pytest.mark.rule("ERR-28", "DR-48")
def test_a_masked_store_beside_a_copy_races_for_the_detector_only_end_to_end():
    """tests/frontend/kernels/masked_store_window.py: a neighbour's copy into rows 0..4 of a scratch and a masked
    store of rows 4..8 over all 8 rows, unordered. Measured with jax 0.12 at 2 devices, `detect_races=True`:
    `RACE DETECTED` under eager and on_wait (the store's write of rows [0, 8)); without the detector both
    complete. On a TPU they write disjoint rows."""
    import json

    from tests.cli._support import semcheck

    kernel = "tests/frontend/kernels/masked_store_window.py"
    r = semcheck("verify", kernel, "--devices", "2", "--dma-mode", "all", "--no-cache", "--no-config",
                 "--format", "json")
    out = json.loads(r.stdout)
    race = {row["dma_mode"]: row for row in out["results"] if row["property"] == "race-free"}
    assert race["hardware"]["verdict"] == "proved"
    for mode in ("eager", "on_wait"):
        assert race[mode]["verdict"] == "violated" and race[mode]["witness"]["details"]["rule"] == "ERR-28"
        assert "(window [0:8, 0:128]) at line 35" in race[mode]["witness"]["message"]
    (d,) = [d for d in out["differences"] if d["property"] == "race-free"]
    assert [c["divergence"] for c in d["causes"]] == ["ERR-28"]
    assert {row["verdict"] for row in out["results"] if row["property"] != "race-free"} == {"proved"}
