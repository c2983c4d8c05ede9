"""Unit tests of the buffer rules (semcheck.model.buffer and .kernel_buffer, spec specs/semantics/buffers.md).

These test the model alone (numpy only); the differential suite holds it
against jax's manager.
"""

from __future__ import annotations

import numpy as np
import pytest

from semcheck.model import buffer as b
from semcheck.model import errors as err
from semcheck.model import kernel_buffer as kb
from semcheck.model.errors import Int16Overflow

K = ("vmem", 100, 0, 0)


def store_with(content, logical=None, key=K, refs=1):
    out = b.allocate(b.BufferStore(), key, refs, np.asarray(content), logical)
    assert isinstance(out, b.BufferStore)
    return out


def grid(rows, cols, dtype=np.int32):
    return np.arange(rows * cols, dtype=dtype).reshape(rows, cols)


# --- BUF-1 ids ---------------------------------------------------------------------------


@pytest.mark.rule("BUF-1")
def test_buffer_ids_start_at_100_and_count_per_device_and_core():
    s = b.BufferStore()
    s, a = b.next_buffer_id(s, (0, 0))
    s, c = b.next_buffer_id(s, (0, 0))
    s, other_core = b.next_buffer_id(s, (0, 1))
    s, other_device = b.next_buffer_id(s, (1, 0))
    assert (a, c, other_core, other_device) == (100, 101, 100, 100)


# --- BUF-2 allocation ------------------------------------------------------------------


@pytest.mark.rule("BUF-2")
def test_allocation_of_an_existing_key_keeps_the_old_buffer_silently():
    s = store_with(np.zeros(3, np.int32), refs=1)
    again = b.allocate(s, K, 5, np.ones(7, np.float32))
    assert again == s
    assert again.mem[K].ref_count == 1


@pytest.mark.rule("BUF-2")
def test_logical_shape_larger_than_content_is_a_value_error_with_the_managers_message():
    out = b.allocate(b.BufferStore(), K, 1, grid(2, 4), (3, 4))
    assert isinstance(out, err.LogicalShapeTooBig)
    assert out.python_type == "ValueError"
    assert out.message == "Logical shape (3, 4) cannot be bigger than content shape (2, 4)."


@pytest.mark.rule("BUF-2")
def test_logical_shape_of_another_rank_is_reported_as_a_zip_length_error():
    shorter = b.allocate(b.BufferStore(), K, 1, grid(2, 4), (2,))
    longer = b.allocate(b.BufferStore(), K, 1, grid(2, 4), (2, 4, 1))
    assert shorter.message == "zip() argument 2 is shorter than argument 1"
    assert longer.message == "zip() argument 2 is longer than argument 1"


@pytest.mark.rule("BUF-2")
def test_a_too_big_dimension_is_reported_before_a_rank_mismatch():
    out = b.allocate(b.BufferStore(), K, 1, grid(2, 4), (5,))
    assert isinstance(out, err.LogicalShapeTooBig)


def test_allocation_copies_the_value_so_later_changes_to_the_caller_array_do_not_show():
    value = grid(2, 2)
    s = store_with(value)
    value[0, 0] = 99
    assert s.mem[K].content[0, 0] == 0


# --- BUF-3 reference counts and deallocation -----------------------------------------------


@pytest.mark.rule("BUF-3")
def test_deallocation_frees_only_when_the_last_reference_goes():
    s = store_with(np.zeros(4, np.float32), refs=2)
    s = b.deallocate(s, K)
    assert s.mem[K].ref_count == 1 and s.deallocated_bytes == 0
    s = b.deallocate(s, K)
    assert K not in s.mem and s.deallocated_bytes == 16


@pytest.mark.rule("BUF-3")
def test_deallocating_an_unknown_key_is_a_key_error_naming_the_key():
    out = b.deallocate(b.BufferStore(), K)
    assert out.python_type == "KeyError" and out.message == "('vmem', 100, 0, 0)"


@pytest.mark.rule("BUF-3")
def test_freed_byte_counter_restarts_after_passing_the_threshold():
    s = b.BufferStore(deallocated_bytes=b.GC_THRESHOLD - 8)
    s = b.allocate(s, K, 1, np.zeros(2, np.int32))
    s = b.deallocate(s, K)
    assert s.deallocated_bytes == b.GC_THRESHOLD  # reached, not passed
    s = b.allocate(s, K, 1, np.zeros(1, np.int8))
    s = b.deallocate(s, K)
    assert s.deallocated_bytes == 0


# --- BUF-4 reads ------------------------------------------------------------------------------


@pytest.mark.rule("BUF-4")
def test_reads_are_bounded_by_the_padded_content_not_the_logical_shape():
    s = store_with(grid(3, 4), (2, 3))
    got = b.get(s, K, (slice(0, 3, 1), slice(0, 4, 1)))
    assert got.value.shape == (3, 4)
    assert got.shape == (2, 3)  # what the manager reports is the logical shape


@pytest.mark.rule("BUF-4", "BUF-4a")
def test_a_short_range_covers_the_missing_dimensions_logically():
    s = store_with(grid(3, 4), (2, 3))
    got = b.get(s, K, (slice(1, 3, 1),))
    np.testing.assert_array_equal(got.value, grid(3, 4)[1:3, 0:3])


@pytest.mark.rule("BUF-4", "BUF-4b")
def test_a_partly_outside_read_returns_the_part_inside():
    s = store_with(grid(2, 2))
    got = b.get(s, K, (slice(1, 5, 1), 0))
    np.testing.assert_array_equal(got.value, [2])


@pytest.mark.rule("BUF-4", "BUF-4b")
def test_a_read_wholly_outside_returns_none():
    s = store_with(grid(2, 2))
    assert b.get(s, K, (2,)).value is None
    assert b.get(s, K, (0, slice(2, 2, 1))).value is None  # even an empty slice at the end


@pytest.mark.rule("BUF-4b")
def test_a_range_longer_than_the_rank_is_a_zip_error_unless_an_earlier_dimension_missed():
    s = store_with(grid(2, 2))
    assert b.get(s, K, (0, 0, 0)).message == "zip() argument 2 is shorter than argument 1"
    assert b.get(s, K, (5, 0, 0)).value is None


@pytest.mark.rule("BUF-4")
def test_reading_an_unknown_key_is_a_key_error():
    assert isinstance(b.get(b.BufferStore(), K, ()), err.UnknownBuffer)


# --- BUF-5 stores --------------------------------------------------------------------------


@pytest.mark.rule("BUF-5", "BUF-5a")
def test_a_store_partly_outside_the_padded_shape_is_refused_whole():
    s = store_with(np.zeros(4, np.int32))
    s2, acc = b.store_(s, K, (slice(2, 6, 1),), np.ones(4, np.int32))
    assert not acc.in_bounds
    assert s2 == s


@pytest.mark.rule("BUF-5", "BUF-5b")
def test_a_store_into_the_padding_is_accepted_but_dropped():
    s = store_with(np.zeros(4, np.int32), (2,))
    s2, acc = b.store_(s, K, (slice(0, 4, 1),), np.array([1, 2, 3, 4], np.int32))
    assert acc.in_bounds
    np.testing.assert_array_equal(s2.mem[K].content, [1, 2, 0, 0])


@pytest.mark.rule("BUF-5a")
def test_a_strided_store_is_out_of_bounds_only_if_its_last_element_is():
    s = store_with(np.zeros(8, np.int32))
    _, fits = b.store_(s, K, (slice(6, 10, 4),), np.ones(1, np.int32))
    _, spills = b.store_(s, K, (slice(0, 9, 2),), np.ones(5, np.int32))
    assert fits.in_bounds and not spills.in_bounds


@pytest.mark.rule("BUF-5a", "BUF-4b")
def test_an_empty_store_at_the_end_is_in_bounds_but_an_empty_read_there_is_not():
    s = store_with(np.zeros(4, np.int32))
    _, acc = b.store_(s, K, (slice(4, 4, 1),), np.zeros(0, np.int32))
    assert acc.in_bounds
    assert b.get(s, K, (slice(4, 4, 1),)).value is None


@pytest.mark.rule("BUF-5")
def test_a_store_with_a_value_of_too_low_rank_reads_as_out_of_bounds():
    s = store_with(grid(2, 2))
    _, acc = b.store_(s, K, (slice(0, 2, 1), slice(0, 2, 1)), np.zeros(2, np.int32))
    assert not acc.in_bounds


@pytest.mark.rule("BUF-5")
def test_a_store_of_another_dtype_fails_an_assertion():
    s = store_with(np.zeros(2, np.int32))
    out = b.store_(s, K, (), np.zeros(2, np.float32))
    assert out.python_type == "AssertionError"


@pytest.mark.rule("BUF-5a")
def test_a_negative_index_in_a_store_fails_an_assertion():
    s = store_with(np.zeros(2, np.int32))
    assert b.store_(s, K, (-1,), np.zeros((), np.int32)).python_type == "AssertionError"


# --- BUF-6 / BUF-7 swaps ----------------------------------------------------------------------


@pytest.mark.rule("BUF-6")
def test_a_swap_returns_the_old_data_and_writes_the_new():
    s = store_with(np.arange(4, dtype=np.int32))
    s2, acc = b.swap(s, K, (slice(1, 3, 1),), np.array([9, 9], np.int32))
    np.testing.assert_array_equal(acc.value, [1, 2])
    np.testing.assert_array_equal(s2.mem[K].content, [0, 9, 9, 3])


@pytest.mark.rule("BUF-6")
def test_an_unmasked_swap_running_past_the_end_is_refused():
    s = store_with(np.arange(4, dtype=np.int32))
    s2, acc = b.swap(s, K, (slice(2, 6, 1),), np.zeros(4, np.int32))
    assert acc.value is None and s2 == s


@pytest.mark.rule("BUF-6")
def test_an_unmasked_swap_whose_value_fits_the_clipped_read_raises_index_error():
    s = store_with(np.arange(4, dtype=np.int32))
    out = b.swap(s, K, (slice(2, 6, 1),), np.zeros(2, np.int32))
    assert isinstance(out, err.RangeOutOfBounds)
    assert out.message == "Range (slice(2, 6, 1),) is (at least partially) out of bounds for allocation shape (4,)."


@pytest.mark.rule("BUF-7")
def test_a_masked_swap_exchanges_only_masked_positions():
    s = store_with(np.arange(4, dtype=np.int32))
    mask = np.array([True, False, True, False])
    s2, acc = b.swap(s, K, (slice(0, 4, 1),), np.full(4, 7, np.int32), mask)
    np.testing.assert_array_equal(acc.value, [0, 7, 2, 7])
    np.testing.assert_array_equal(s2.mem[K].content, [7, 1, 7, 3])


@pytest.mark.rule("BUF-7")
def test_a_masked_swap_past_the_end_is_fine_while_the_mask_is_off_there():
    s = store_with(np.arange(4, dtype=np.int32))
    mask = np.array([True, False, False, False])
    s2, acc = b.swap(s, K, (slice(2, 6, 1),), np.full(4, 7, np.int32), mask)
    np.testing.assert_array_equal(acc.value, [2, 7, 7, 7])
    np.testing.assert_array_equal(s2.mem[K].content, [0, 1, 7, 3])


@pytest.mark.rule("BUF-7")
def test_a_masked_swap_with_the_mask_on_past_the_end_is_refused():
    s = store_with(np.arange(4, dtype=np.int32))
    mask = np.array([False, False, True, False])
    _, acc = b.swap(s, K, (slice(2, 6, 1),), np.zeros(4, np.int32), mask)
    assert acc.value is None


@pytest.mark.rule("BUF-7")
def test_a_masked_swap_judges_bounds_along_the_first_axis_only():
    # 2x4 buffer, swap columns 2..6: the read is 2x2. The manager cuts the
    # mask's first axis at every extent (2 and 2), so row 0 column 3 (outside)
    # counts as in bounds and is silently dropped.
    s = store_with(grid(2, 4))
    mask = np.zeros((2, 4), bool)
    mask[0, 3] = True
    s2, acc = b.swap(s, K, (slice(0, 2, 1), slice(2, 6, 1)), np.full((2, 4), -1, np.int32), mask)
    assert acc.value is not None
    assert s2.mem[K] == s.mem[K]
    # and a mask entry inside the buffer but in a row past the smallest extent is refused
    s3 = store_with(grid(4, 2))
    mask = np.zeros((4, 4), bool)
    mask[3, 0] = True  # row 3 column 0 lies inside the 4x2 buffer
    _, acc = b.swap(s3, K, (slice(0, 4, 1), slice(0, 4, 1)), np.zeros((4, 4), np.int32), mask)
    assert acc.value is None


@pytest.mark.rule("BUF-7", "BUF-5b")
def test_a_masked_swap_writes_only_inside_the_logical_shape():
    s = store_with(np.arange(4, dtype=np.int32), (2,))
    s2, acc = b.swap(s, K, (slice(0, 4, 1),), np.full(4, 9, np.int32), np.ones(4, bool))
    np.testing.assert_array_equal(acc.value, [0, 1, 2, 3])
    np.testing.assert_array_equal(s2.mem[K].content, [9, 9, 2, 3])


# --- BUF-8 .. BUF-12 the interpreter's use ------------------------------------------------


@pytest.mark.rule("BUF-8")
def test_a_device_wide_vmem_allocation_gives_every_core_its_own_buffer():
    s, handed = kb.allocate_for_kernel(b.BufferStore(), 0, None, "vmem", np.zeros(2, np.int32), 2)
    assert handed == 100
    assert set(s.mem) == {("vmem", 100, 0, 0), ("vmem", 100, 0, 1)}
    assert all(buf.ref_count == 1 for buf in s.mem.values())


@pytest.mark.rule("BUF-8")
def test_an_hbm_allocation_is_one_buffer_under_core_0_counted_once_per_core():
    s, handed = kb.allocate_for_kernel(b.BufferStore(), 1, None, "hbm", np.zeros(2, np.int32), 3)
    assert handed == 100
    assert list(s.mem) == [("hbm", 100, 1, 0)]
    assert s.mem[("hbm", 100, 1, 0)].ref_count == 3


@pytest.mark.rule("BUF-9", "BUF-3")
def test_an_hbm_buffer_needs_a_deallocation_from_every_core():
    s, _ = kb.allocate_for_kernel(b.BufferStore(), 0, None, "any", np.zeros(2, np.int32), 2)
    s = kb.deallocate_for_kernel(s, 0, 1, "any", 100)
    assert ("any", 100, 0, 0) in s.mem
    s = kb.deallocate_for_kernel(s, 0, 0, "any", 100)
    assert len(s.mem) == 0


@pytest.mark.rule("BUF-8", "BUF-1")
def test_cores_out_of_step_make_a_device_wide_allocation_fail_an_assertion():
    s, _ = kb.allocate_for_kernel(b.BufferStore(), 0, 1, "vmem", np.zeros(1, np.int32), 2)  # core 1 only
    s, handed = kb.allocate_for_kernel(s, 0, None, "vmem", np.zeros(1, np.int32), 2)
    assert handed.python_type == "AssertionError"
    assert ("vmem", 100, 0, 0) in s.mem and ("vmem", 101, 0, 1) in s.mem  # allocated anyway


@pytest.mark.rule("BUF-8", "BUF-2")
def test_out_of_step_hbm_allocations_share_one_content_array():
    s, _ = kb.allocate_for_kernel(b.BufferStore(), 0, 1, "vmem", np.zeros(1, np.int32), 2)
    s, _ = kb.allocate_for_kernel(s, 0, None, "hbm", np.zeros(2, np.int32), 2)
    a, c = ("hbm", 100, 0, 0), ("hbm", 101, 0, 0)
    s, _ = b.store_(s, a, (0,), np.array(5, np.int32))
    assert s.mem[c].content[0] == 5


@pytest.mark.rule("BUF-8a", "BUF-8b", "BUF-8c")
def test_kernel_allocations_are_padded_with_uninitialized_memory():
    s, _ = kb.allocate_for_kernel(b.BufferStore(), 0, 0, "vmem", np.ones(3, np.float32), 1, (8,), "nan")
    buf = s.mem[("vmem", 100, 0, 0)]
    assert buf.logical_shape == (3,) and buf.shape == (8,)
    assert np.isnan(buf.content[3:]).all()
    assert kb.uninitialized_value(np.int32, "nan") == 2**31 - 1
    assert kb.uninitialized_value(np.float32, "zero") == 0
    assert not kb.padding_applies("smem", "padded") and kb.padding_applies("vmem", "padded")


@pytest.mark.rule("BUF-8", "IDS-2")
def test_a_handed_buffer_id_past_int16_is_an_overflow_error():
    s = b.BufferStore(next_id=b.BufferStore().next_id.set((0, 0), 2**15))
    _, handed = kb.allocate_for_kernel(s, 0, 0, "vmem", np.zeros(1, np.int32), 1)
    assert isinstance(handed, Int16Overflow)


@pytest.mark.rule("BUF-10")
def test_a_kernel_read_of_the_padding_is_not_out_of_bounds():
    s, _ = kb.allocate_for_kernel(b.BufferStore(), 0, 0, "vmem", np.ones(3, np.float32), 1, (8,))
    got = kb.kernel_get(s, 0, 0, "vmem", 100, (slice(0, 8, 1),))
    assert got.shape == (8,)
    beyond = kb.kernel_get(s, 0, 0, "vmem", 100, (slice(4, 12, 1),))
    assert isinstance(beyond, err.OutOfBoundsRead)
    assert beyond.message == (
        "Out-of-bounds read of (0 0 vmem 100): reading [(slice(4, 12, 1),)] but buffer has shape (3,)."
    )


@pytest.mark.rule("BUF-10", "BUF-10a")
def test_a_kernel_read_past_the_end_reads_uninitialized_when_allowed():
    s, _ = kb.allocate_for_kernel(b.BufferStore(), 0, 0, "vmem", np.ones(2, np.int32), 1)
    got = kb.kernel_get(s, 0, 0, "vmem", 100, (slice(1, 4, 1),), "uninitialized", "zero")
    np.testing.assert_array_equal(got, [1, 0, 0])


@pytest.mark.rule("BUF-11", "BUF-12")
def test_kernel_store_and_swap_errors_carry_the_interpreters_messages():
    s, _ = kb.allocate_for_kernel(b.BufferStore(), 0, 0, "vmem", np.ones(2, np.int32), 1)
    w = kb.kernel_store(s, 0, 0, "vmem", 100, (slice(1, 4, 1),), np.zeros(3, np.int32))
    assert w.message == "Out-of-bounds write of (0 0 vmem 100): writing [(slice(1, 4, 1),)] but buffer has shape (2,) ."
    sw = kb.kernel_swap(s, 0, 0, "vmem", 100, (slice(1, 4, 1),), np.zeros(3, np.int32))
    assert sw.message.startswith("Out-of-bounds swap of (0 0 vmem 100)")
    msw = kb.kernel_swap(s, 0, 0, "vmem", 100, (slice(1, 4, 1),), np.zeros(3, np.int32), np.ones(3, bool))
    assert msw.message.endswith("but buffer has shape (2,) . ")


@pytest.mark.rule("BUF-9")
def test_hbm_accesses_from_any_core_use_the_core_0_key():
    assert kb.buffer_key("hbm", 100, 1, 3) == ("hbm", 100, 1, 0)
    assert kb.buffer_key("vmem", 100, 1, 3) == ("vmem", 100, 1, 3)


# --- values ----------------------------------------------------------------------------------


def test_buffers_compare_by_content_with_nan_equal_to_nan():
    x = np.array([np.nan, 1.0], np.float32)
    assert store_with(x) == store_with(x.copy())
    assert store_with(x) != store_with(np.array([np.nan, 2.0], np.float32))


def test_stored_contents_are_read_only():
    s = store_with(np.zeros(2, np.int32))
    with pytest.raises(ValueError):
        s.mem[K].content[0] = 1
