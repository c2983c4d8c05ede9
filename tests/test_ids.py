"""IDS-1, IDS-2: int16 ids as numpy hands them out."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from semcheck.model.errors import Int16Overflow
from semcheck.model.ids import arange_int16, scalar_int16, wrap_int16


@pytest.mark.rule("IDS-1")
def test_range_inside_int16_is_returned_unchanged():
    assert arange_int16(2000, 3) == (2000, 2001, 2002)


@pytest.mark.rule("IDS-1", "ERR-3")
def test_range_whose_second_value_overflows_raises():
    assert arange_int16(32767, 2) == Int16Overflow(32768)
    assert arange_int16(32767, 1) == (32767,)


@pytest.mark.rule("IDS-1")
def test_range_past_the_second_value_wraps_silently():
    assert arange_int16(32766, 3) == (32766, 32767, -32768)


@pytest.mark.rule("IDS-2", "ERR-3")
def test_scalar_outside_int16_raises_overflow():
    assert scalar_int16(32767) == 32767
    assert scalar_int16(32768) == Int16Overflow(32768)
    assert Int16Overflow(32768).message == "Python integer 32768 out of bounds for int16"


@given(base=st.integers(32000, 33000) | st.integers(-33000, -32000) | st.integers(0, 5000), n=st.integers(0, 6))
@pytest.mark.rule("IDS-1")
def test_arange_rule_matches_numpy(base, n):
    try:
        expected = tuple(int(x) for x in np.arange(base, base + n, dtype=np.int16))
    except OverflowError as e:
        got = arange_int16(base, n)
        assert isinstance(got, Int16Overflow)
        assert str(e) == got.message
        return
    assert arange_int16(base, n) == expected


@given(x=st.integers(-70000, 70000))
@pytest.mark.rule("IDS-2")
def test_scalar_rule_matches_numpy(x):
    try:
        expected = int(np.int16(x))
    except OverflowError as e:
        assert scalar_int16(x) == Int16Overflow(x)
        assert str(e) == Int16Overflow(x).message
        return
    assert scalar_int16(x) == expected
    assert wrap_int16(x) == expected
