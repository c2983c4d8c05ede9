"""Sub-rules of the interpreter's buffer use (specs/semantics/buffers.md) that tests/test_buffer.py touches only
in passing: BUF-8a uninitialized memory, BUF-8b when padding applies, BUF-10a a kernel read's shape."""

from __future__ import annotations

import numpy as np
import pytest

from semcheck.model import buffer, kernel_buffer as b


def _allocated(value, padded_shape=None, space="vmem"):
    s, handed = b.allocate_for_kernel(buffer.BufferStore(), 0, 0, space, np.asarray(value), 1, padded_shape, "zero")
    assert handed == 100
    return s


@pytest.mark.rule("BUF-8a")
@pytest.mark.parametrize(
    "dtype, nan, zero",
    [(np.float32, "nan", 0), (np.int32, 2**31 - 1, 0), (np.int8, 127, 0), (np.uint8, 255, 0), (np.bool_, True, 0)],
)
def test_uninitialized_memory_is_nan_max_or_true_and_zero_under_zero(dtype, nan, zero):
    got = b.uninitialized_value(dtype, "nan")
    if nan == "nan":
        assert np.isnan(got)
    else:
        assert got == nan and type(got) is not float
    assert b.uninitialized_value(dtype, "zero") == zero


@pytest.mark.rule("BUF-8b", "BUF-8c")
@pytest.mark.parametrize("space, bounds, padded", [
    ("vmem", "padded", True), ("hbm", "padded", True), ("any", "padded", True),
    ("smem", "padded", False), ("vmem", "logical", False), ("hbm", "logical", False),
])
def test_padding_applies_only_when_padded_and_never_to_smem(space, bounds, padded):
    assert b.padding_applies(space, bounds) is padded


@pytest.mark.rule("BUF-8c")
def test_the_value_sits_in_the_leading_corner_of_the_padded_content():
    s, _ = b.allocate_for_kernel(buffer.BufferStore(), 0, 0, "vmem", np.ones((2, 3), np.int32), 1, (4, 8), "nan")
    buf = s.mem[("vmem", 100, 0, 0)]
    assert buf.shape == (4, 8) and buf.logical_shape == (2, 3)
    assert (buf.content[:2, :3] == 1).all()
    rest = buf.content.copy()
    rest[:2, :3] = 2**31 - 1
    assert (rest == 2**31 - 1).all()


@pytest.mark.rule("BUF-10a", "BUF-10")
@pytest.mark.parametrize(
    "rnge, want",
    [
        ((), (4, 6)),  # no range: the logical extents
        ((1,), (6,)),  # an index contributes nothing
        ((slice(0, 4, 2),), (2, 6)),  # a slice: (stop - start) // step, then the rest logical
        ((slice(1, 3, 1), 5), (2,)),
        ((slice(0, 6, 3), slice(1, 7, 2)), (2, 3)),
    ],
)
def test_a_kernel_read_has_the_expected_shape_of_its_range(rnge, want):
    s = _allocated(np.arange(24, dtype=np.int32).reshape(4, 6))
    got = b.kernel_get(s, 0, 0, "vmem", 100, rnge, "uninitialized", "zero")
    assert got.shape == want


@pytest.mark.rule("BUF-10a", "BUF-10")
def test_the_expected_shape_follows_the_logical_shape_not_the_padding():
    s = _allocated(np.arange(6, dtype=np.int32).reshape(2, 3), (4, 8))
    assert b.kernel_get(s, 0, 0, "vmem", 100, (), "uninitialized", "zero").shape == (2, 3)
    # past the logical end, inside the padding: the padding is read, not uninitialized filler
    got = b.kernel_get(s, 0, 0, "vmem", 100, (slice(0, 4, 1), slice(0, 3, 1)), "raise")
    assert got.shape == (4, 3)


@pytest.mark.rule("BUF-10a")
def test_a_kernel_read_with_a_range_longer_than_the_logical_rank_fails_an_assertion():
    s = _allocated(np.zeros(4, np.int32))
    # the manager reads first: a range that misses in an earlier dimension reads nothing (BUF-4b), and
    # then the expected shape cannot be formed
    out = b.kernel_get(s, 0, 0, "vmem", 100, (4, 0), "uninitialized", "zero")
    assert out.python_type == "AssertionError" and out.message == ""
    # one that does not miss stops at the manager's own rank check first
    out = b.kernel_get(s, 0, 0, "vmem", 100, (0, 0), "uninitialized", "zero")
    assert out.python_type == "ValueError" and out.message == "zip() argument 2 is shorter than argument 1"
