"""ERR-27: which windows jax's race detector takes to meet, held against the detector's own test, and where
that differs from semcheck's elements (ACC-2): a window of size 0 that starts inside another."""

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
    for k = 0 on the skipped slot of tests/frontend/kernels/empty_copy_regular.py, eager); semcheck records no
    access for the empty window (ACC-1), so for it they never meet."""
    written, skipped = ((0, 2), (0, 128)), (empty, (0, 128))
    assert detector_windows_meet(written, skipped) is meets
    assert Region(skipped).empty and not Region(written).empty
