"""Regenerate tests/kernels/ground_truth.json by running every example in interpret mode.

    python tests/kernels/make_ground_truth.py                 # full matrix
    python tests/kernels/make_ground_truth.py --only buggy/int16 --devices 2
    python tests/kernels/make_ground_truth.py --only test_shipped_ops.py --devices 2

jax's shipped ops are recorded through tests/test_shipped_ops.py's builders
(SHIPPED below, path "file::builder"), at the device counts their targets declare.

Each configuration (example file, device count, DMA execution mode, extra
build kwargs) runs in a fresh subprocess through run_interpret.run_kernel.
A run that has not finished after the hang timeout is recorded as "hang".
Runs that print non-zero-count warnings are repeated (`--leak-repeats`) and
the union of what was printed is stored, because that output is racy. Runs of
a configuration whose intended verdict is a race are repeated too: its output
can depend on the schedule, so output_matches_reference is None when the runs
disagree (output_varies_between_runs).

With --only, existing entries for other configurations are kept.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import platform
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import run_interpret as ri  # noqa: E402

# What each example is, and which (semaphore, count) leaks its design implies
# for the default sizes.  This is the intended verdict, independent of what
# the interpreter manages to show.
EXAMPLES: dict[str, dict] = {
    "examples/ring_permute.py": {"kind": "clean"},
    "examples/ring_allgather.py": {"kind": "clean"},
    "examples/ring_allreduce.py": {"kind": "clean"},
    "examples/bidirectional_reduce_scatter.py": {"kind": "clean"},
    "examples/scoped_semaphores.py": {"kind": "clean"},
    "examples/double_buffered_pipeline.py": {"kind": "clean"},
    "examples/two_core_signal.py": {"kind": "clean", "cores_per_device": 2},
    "examples/emit_pipeline.py": {"kind": "clean"},
    "examples/buggy/missing_signal_deadlock.py": {"kind": "deadlock"},
    "examples/buggy/wait_too_large_deadlock.py": {"kind": "deadlock"},
    "examples/buggy/wrong_neighbour_deadlock.py": {"kind": "deadlock"},
    "examples/buggy/cyclic_wait_deadlock.py": {"kind": "deadlock"},
    "examples/buggy/recv_before_send_deadlock.py": {"kind": "deadlock"},
    "examples/buggy/dma_byte_mismatch_wait_larger.py": {"kind": "deadlock"},
    "examples/buggy/two_core_missing_core_index.py": {
        "kind": "deadlock", "cores_per_device": 2},
    # works in interpret mode (its signal without core_index reaches core 0 there), hangs a TPU
    "examples/buggy/two_core_signal_hangs_on_tpu.py": {"kind": "tpu_hang", "cores_per_device": 2},
    "examples/buggy/cross_device_id_disagreement.py": {
        "kind": "id_disagreement", "also": ["deadlock"]},
    "examples/buggy/exit_leak_extra_signal.py": {
        "kind": "exit_leak", "expected_leaks": [{"semaphore": 0, "count": 1}]},
    "examples/buggy/exit_leak_unwaited_send.py": {
        "kind": "exit_leak", "expected_leaks": [{"semaphore": 2000, "count": 4096}]},
    "examples/buggy/exit_leak_two_semaphores.py": {
        "kind": "exit_leak",
        "expected_leaks": [{"semaphore": 0, "count": 1},
                           {"semaphore": 2000, "count": 4096}]},
    "examples/buggy/dma_byte_mismatch_wait_smaller.py": {
        "kind": "exit_leak", "expected_leaks": [{"semaphore": 2001, "count": 2048}]},
    # a TPU v6+ kernel (a copy counts 1 on a REGULAR semaphore): the interpreter adds the bytes (D20)
    "examples/buggy/regular_semaphore_dma_leaks_in_interpreter.py": {
        "kind": "exit_leak",
        "expected_leaks": [{"semaphore": 2000, "count": 4095}, {"semaphore": 2001, "count": 4095}]},
    "examples/buggy/fixed_id_collision.py": {
        "kind": "id_collision", "colliding_id": 2000},
    "examples/buggy/fixed_id_collision_scoped.py": {
        "kind": "id_collision", "colliding_id": 2002},
    "examples/buggy/int16_overflow.py": {"kind": "int16_overflow"},
    # data races: the semaphores balance, so the kernel completes; the numbers may be wrong
    # (on_wait runs a copy late), which is race_ground_truth.json's business
    "examples/buggy/race_local_copy_read_before_wait.py": {"kind": "race"},
    "examples/buggy/race_read_before_wait_recv.py": {"kind": "race"},
    "examples/buggy/race_send_buffer_reuse.py": {"kind": "race"},
    "examples/buggy/race_two_cores_one_hbm_region.py": {"kind": "race", "cores_per_device": 2},
    "examples/buggy/race_two_senders_one_slot.py": {"kind": "race"},
    "examples/buggy/race_wrong_slot_wait.py": {"kind": "race"},
    # the race needs an odd N (PAR-14): recorded at 2, 3 and 4 devices
    "examples/buggy/race_two_hop_ring_slot_by_parity.py": {"kind": "race", "devices": [2, 3, 4]},
    # races only on a TPU, where the copy may land in parts (DR-9): the interpreter copies whole
    "examples/buggy/partial_arrival_read.py": {"kind": "clean"},
    "examples/whole_copy_wait.py": {"kind": "clean"},
    # the interpreter cannot compile pl.semaphore_read (LAUNCH-3, D12); the fix records a known count
    "examples/buggy/semaphore_read_in_interpret_mode.py": {
        "kind": "interpreter_error", "error_type": "NotImplementedError"},
    "examples/dma_count_without_read.py": {"kind": "clean"},
    # the interpreter refuses a call argument typed SMEM before anything runs (ERR-36); a TPU runs it
    "examples/buggy/smem_table_in_interpret_mode.py": {
        "kind": "interpreter_error", "error_type": "NotImplementedError"},
    # jax's shipped all_gather, unchanged: one receive semaphore per direction for N - 1 copies,
    # so a sender's next copy can land first (from 4 devices on the ring; on_wait runs it first
    # and the output is wrong there); eager completes with the right numbers
    "examples/jax_ops/all_gather.py": {"kind": "race"},
    "examples/jax_ops/buggy/race_all_gather_own_slot_unwaited.py": {"kind": "race"},
    # per-peer chunk counts from a scalar-prefetch table; the bug waits counts[me, s] instead of
    # counts[s, me], which the default table (not symmetric) exposes at every device count
    "examples/jax_ops/ragged_all_to_all.py": {"kind": "clean"},
    "examples/jax_ops/buggy/deadlock_ragged_all_to_all_transposed_counts.py": {"kind": "deadlock"},
    # jax's shipped paged attention and ragged paged attention, unchanged, with a bug seeded by
    # wrapping their own copy-descriptor class while the op is traced (one device's op: the other
    # devices are idle). A block's start that skips its last page: the block's wait never returns.
    "examples/jax_ops/buggy/deadlock_paged_attention_last_page_not_started.py": {"kind": "deadlock"},
    # ragged paged attention cannot run in the interpreter (D22), but the hang comes first
    "examples/jax_ops/buggy/deadlock_ragged_paged_attention_last_page_not_started.py": {
        "kind": "deadlock"},
    # K's wait on V's semaphore and V's on K's: the counts balance, K's block is read before (on_wait)
    # or unordered after (eager, detector) its copies
    "examples/jax_ops/buggy/race_paged_attention_kv_waits_crossed.py": {"kind": "race"},
    # the grid's own block copies (BlockSpecs): an in-place update whose hand-written prefetch reads the
    # block the grid writes back, a megacore grid whose cores write back one output block, and the fixes
    "examples/buggy/race_grid_writeback_prefetch_off_by_one.py": {"kind": "race"},
    "examples/inplace_prefetch_grid.py": {"kind": "clean"},
    # an expert-parallel MoE whose DMA sizes, offsets and predicates are counts the kernel computes and
    # exchanges by remote copies into SMEM (ACC-9), and its seeded bugs: a peer's count read before its
    # copy's wait (the values then depend on the schedule: on_wait runs the exchange late, reads stale
    # counts and leaves the dispatch's bytes on the semaphores), a dispatch wait one row short (a row's
    # bytes left at exit per source), a combine waiting the count it received instead of the one it sent
    # (hangs). The leaks are the default routing's at 2, 4 and 8 devices, as recorded.
    "examples/moe_dispatch_combine.py": {"kind": "clean"},
    "examples/masked_row_push.py": {"kind": "clean"},
    "examples/moe_counts_ring_allreduce.py": {"kind": "clean"},
    # under on_wait the wait runs only the copies it needs; the last row's is dropped at the call's end (PROP-5)
    "examples/buggy/masked_row_push_recv_one_row_short.py": {"kind": "exit_leak", "leaks_in": ["eager"],
                                                             "expected_leaks": [{"semaphore": 2001, "count": 512}]},
    "examples/buggy/moe_count_read_before_wait.py": {"kind": "race", "expected_leaks": [
        {"semaphore": 2006, "count": 512}, {"semaphore": 2007, "count": 512},
        {"semaphore": 2012, "count": 512}, {"semaphore": 2013, "count": 512},
        {"semaphore": 2026, "count": 512}, {"semaphore": 2027, "count": 512},
        {"semaphore": 2031, "count": 512}]},
    "examples/buggy/moe_dispatch_wait_one_row_short.py": {"kind": "exit_leak", "expected_leaks": [
        {"semaphore": 2006, "count": 512}, {"semaphore": 2007, "count": 512},
        {"semaphore": 2012, "count": 512}, {"semaphore": 2013, "count": 512},
        {"semaphore": 2014, "count": 512}, {"semaphore": 2015, "count": 512},
        {"semaphore": 2024, "count": 512}, {"semaphore": 2025, "count": 512},
        {"semaphore": 2026, "count": 512}, {"semaphore": 2027, "count": 512},
        {"semaphore": 2028, "count": 512}, {"semaphore": 2029, "count": 512},
        {"semaphore": 2030, "count": 512}, {"semaphore": 2031, "count": 512}]},
    # it hangs; the devices that exit first (device 0 at 2 devices; 2, 3 and 7 at 8) leave several back_recv
    # counts, of which the interpreter prints one per device (the first of a set): each listed is on a device
    # a recorded run saw leave with a leak, as semcheck's exit-balance names them (ACC-19, ACC-20)
    "examples/buggy/moe_combine_waits_wrong_count.py": {"kind": "deadlock", "expected_leaks": [
        {"semaphore": 2011, "count": 1024}, {"semaphore": 2040, "count": 512},
        {"semaphore": 2040, "count": 1024}, {"semaphore": 2041, "count": 512},
        {"semaphore": 2041, "count": 1024}, {"semaphore": 2043, "count": 512},
        {"semaphore": 2044, "count": 512}, {"semaphore": 2044, "count": 1024},
        {"semaphore": 2045, "count": 512}, {"semaphore": 2047, "count": 512}]},
    # the MoE routing itself by a top-k over float logits in the kernel (ACC-25), and its seeded bug: a
    # dispatch wait one row short (a row's bytes left at exit per source that sent more than one row: the
    # recv_sems of 2, 4 and 8 devices; the interpreter prints some of them, one per device)
    "examples/moe_topk_routing.py": {"kind": "clean"},
    # the counts fetched from an HBM table into SMEM by the kernel's own local copy (ACC-30), and its seeded
    # bug: the fetch waited only at the end (on_wait lands it there: the dispatch reads the zeros stored first
    # and sends nothing, so the output is not `reference`'s; eager lands it at its start)
    "examples/moe_count_table_fetch.py": {"kind": "clean", "devices": [2, 4]},
    "examples/buggy/moe_count_table_read_before_fetch_wait.py": {"kind": "race", "devices": [2, 4]},
    # ACC-43: a step schedule fetched into a run_scoped SMEM buffer by a local copy, and its seeded bug: the step
    # count loaded before the fetch's wait (on_wait reads the buffer's uninitialised int32 maximum: every device
    # runs all planned steps, so the output is not `reference`'s; eager lands the fetch at its start)
    "examples/scoped_schedule_fetch.py": {"kind": "clean", "devices": [2, 4]},
    "examples/buggy/race_scoped_schedule_read_before_fetch_wait.py": {"kind": "race", "devices": [2, 4]},
    # ACC-55: a core_map (one core per device) whose remote copies' devices and rows come from a routing table
    # it fetches from HBM into SMEM by a local copy, and its seeded bug: the routes loaded before the fetch's wait
    # (on_wait reads the identity routing stored first: every device sends its rows to itself, so the output
    # is not `reference`'s; eager lands the fetch at its start)
    "examples/core_map_routed_scatter.py": {"kind": "clean", "devices": [2, 4]},
    "examples/buggy/race_core_map_route_read_before_fetch_wait.py": {"kind": "race", "devices": [2, 4]},
    "examples/buggy/moe_topk_dispatch_wait_one_row_short.py": {"kind": "exit_leak", "expected_leaks": [
        {"semaphore": 2007, "count": 512}, {"semaphore": 2008, "count": 512}, {"semaphore": 2013, "count": 512}, {"semaphore": 2014, "count": 512},
        {"semaphore": 2015, "count": 512}, {"semaphore": 2016, "count": 512}, {"semaphore": 2025, "count": 512}, {"semaphore": 2026, "count": 512},
        {"semaphore": 2027, "count": 512}, {"semaphore": 2028, "count": 512}, {"semaphore": 2029, "count": 512}, {"semaphore": 2030, "count": 512},
        {"semaphore": 2031, "count": 512}, {"semaphore": 2032, "count": 512}]},
    # the MoE's counts from a softmax and a top-k in the kernel, followed within bounds (ACC-35), and its seeded
    # bug: each expert's count announced by a probability threshold, not the top-k (at 2 devices every token
    # goes to both experts, about half prefer each: the rows an expert does not wait for leave their bytes)
    "examples/moe_softmax_topk_dispatch.py": {"kind": "clean", "devices": [2, 4]},
    "examples/buggy/moe_softmax_count_by_threshold.py": {"kind": "exit_leak", "devices": [2], "expected_leaks": [
        {"semaphore": 2008, "count": 1536}, {"semaphore": 2008, "count": 2560}, {"semaphore": 2009, "count": 1536},
        {"semaphore": 2009, "count": 2560}]},
    "examples/buggy/race_megacore_grid_same_output_block.py": {"kind": "race", "cores_per_device": 2},
    "examples/megacore_grid.py": {"kind": "clean", "cores_per_device": 2},
    # an output block visited again after the grid left it: every interpret-mode run raises
    # (`_check_for_revisiting`); a TPU writes the block back twice
    "examples/buggy/revisited_output_block.py": {"kind": "interpreter_error", "error_type": "RuntimeError"},
    # copies through reshape views: a TPU runs them, the interpreter raises when the copy runs (D22, ACC-11)
    "examples/buggy/ring_copy_into_reshaped_view.py": {"kind": "interpreter_error", "error_type": "AttributeError"},
    "examples/buggy/tpu_race_reshaped_rows_overlap.py": {"kind": "interpreter_error", "error_type": "AttributeError"},
    # a page fetch through a reshape view, waited before two overlapping write-backs are: every interpreter run
    # raises at the fetch (eager) or its wait (on_wait) before the write-backs run, a TPU races them (ACC-39);
    # another device's BrokenBarrierError (the cleanup barrier broken by the failure, ERR-7) surfaces in some runs
    "examples/buggy/tpu_race_writebacks_past_reshaped_fetch.py": {"kind": "interpreter_error",
                                                                  "error_type": "AttributeError",
                                                                  "also_surfaces": ["BrokenBarrierError"]},
    # the same through a bitcast of every other row of a reshaped lane (ACC-16); which device's exception jax
    # surfaces first is racy: another device's BrokenBarrierError (its barrier broken by the failure, ERR-7)
    # was recorded at 2, 4 and 8 devices in some runs
    "examples/buggy/tpu_race_packed_rows_overlap.py": {"kind": "interpreter_error", "error_type": "AttributeError",
                                                      "also_surfaces": ["BrokenBarrierError"]},
    # two overlapping write-backs started before a staged wait whose semaphore also queues an empty copy at a
    # dimension's end, the newest task there: eager raises at its start; under on_wait the staged wait runs its
    # task first (LIFO) and raises before the write-backs' waits run them, though the other staged copy brings
    # the bytes it asks (ERR-33); a TPU races the write-backs. Recorded at 2 devices, as the examples below;
    # another device's BrokenBarrierError (its barrier broken by the failure, ERR-7) surfaces in some runs
    "examples/buggy/tpu_race_writebacks_past_empty_copy_popped_first.py": {"kind": "window_error",
                                                                           "error_type": "IndexError",
                                                                           "raises_in": ["eager", "on_wait"],
                                                                           "also_surfaces": ["BrokenBarrierError"],
                                                                           "devices": [2]},
    "examples/consecutive_output_blocks.py": {"kind": "clean"},
    # a zero-size copy whose start is a dimension's end: every eager run raises at the copy (ACC-10); under
    # on_wait the wait for 0 bytes runs no task, so the copy never runs; the fix skips the empty copy.
    # With more than 2 devices, which device's exception jax surfaces first under eager is racy (another
    # device's BrokenBarrierError, its barrier broken by the failure, ERR-7); on_wait runs complete
    "examples/buggy/copy_window_at_dimension_end.py": {"kind": "window_error", "error_type": "IndexError",
                                                       "also_surfaces": ["BrokenBarrierError"]},
    "examples/copy_window_inside_dimension.py": {"kind": "clean"},
    # a race of two copies (an output's zero-fill after the start barrier, a peer's push into it), then an
    # empty copy at a dimension's end: eager raises at its start; under on_wait the later wait runs its task
    # first (the newest) and raises there, after both racing copies ran (ERR-24; the race is in
    # race_ground_truth.json). Recorded at 2 devices, as the example above
    "examples/buggy/race_zero_fill_then_empty_copy_at_end.py": {"kind": "window_error", "error_type": "IndexError",
                                                                "raises_in": ["eager", "on_wait"], "devices": [2]},
    # two pairs of racing row copies and an empty copy at a dimension's end: eager raises at its start, after
    # pair A ran; under on_wait the first wait on pair A's semaphore runs the empty copy's task first (the
    # newest) and raises there, after pair B's waits ran pair B (ERR-29; the race is in race_ground_truth.json).
    # Recorded at 2 devices, as the example above
    "examples/buggy/race_second_pair_before_empty_copy_at_end.py": {"kind": "window_error",
                                                                    "error_type": "IndexError",
                                                                    "raises_in": ["eager", "on_wait"],
                                                                    "devices": [2]},
    # a racing pair of row copies on device 1, and on device 0 a load of rows before their copies are waited
    # and an empty copy at a dimension's end: eager raises at its start; under on_wait device 0's first wait
    # runs the empty copy's task first (the newest) and raises there, so device 0's races are in no run, while
    # device 1's pair runs before it (ERR-31; the race is in race_ground_truth.json)
    "examples/buggy/race_pair_on_one_device_while_another_fails.py": {"kind": "window_error",
                                                                      "error_type": "IndexError",
                                                                      "raises_in": ["eager", "on_wait"],
                                                                      "devices": [2, 4]},
    # a copy of 0 bytes waited with jax's race detector on: under on_wait the wait runs no task, so no signal
    # reaches its semaphore and the wait fails the manager's clock assertion (RACE-1); eager runs the copy at
    # its start; the fix skips the empty copy. Every device fails at its wait, and which device's exception jax
    # surfaces first is racy: another device's BrokenBarrierError (its barrier broken by the failure, ERR-7)
    # was recorded at 2 and 4 devices, the assertion at 8
    "examples/buggy/clock_empty_copy_wait.py": {"kind": "clock_error", "error_type": "AssertionError",
                                                        "also_surfaces": ["BrokenBarrierError"],
                                                        "raises_in": ["on_wait"]},
    "examples/clock_empty_copy_skipped.py": {"kind": "clean"},
    # an empty copy whose window starts inside another unordered copy's: only jax's race detector sees a race
    # (ERR-27; recorded in race_ground_truth.json); without it every run completes with the right output
    "examples/buggy/race_empty_copy_window.py": {"kind": "race"},
    # DMAs whose sizes are data (ACC-7), ported from jax: its ragged all-to-all (offsets and sizes
    # from SMEM, dummy descriptors for the byte totals), the race-detection test kernel (a wait for
    # a data-dependent receive count) and test_dynamic_dma_on_2nd_minor; with their seeded bugs
    "examples/jax_ops/ragged_all_to_all_offsets.py": {"kind": "clean"},
    # devices that wait for less than they receive leave first: under eager with the bytes the
    # others' copies bring (all of them if every copy landed before the exit check); under on_wait
    # their waits take whole copies (the default table's copies to one device are of one size)
    "examples/jax_ops/buggy/deadlock_ragged_offsets_receive_count_wrong_row.py": {
        "kind": "deadlock", "expected_leaks": [{"semaphore": 2001, "count": 2048},
                                               {"semaphore": 2001, "count": 4096},
                                               {"semaphore": 2001, "count": 8192}]},
    # every copy one row too long: bytes left on both semaphores of every device (which the exit
    # check prints first is racy, EXIT-1), and two sources write one row (race_ground_truth.json)
    "examples/jax_ops/buggy/race_ragged_offsets_size_off_by_one.py": {
        "kind": "exit_leak", "also": ["race"], "expected_leaks": [
        {"semaphore": 2000, "count": 512}, {"semaphore": 2000, "count": 1024},
        {"semaphore": 2000, "count": 1536}, {"semaphore": 2000, "count": 2048},
        {"semaphore": 2000, "count": 2560}, {"semaphore": 2000, "count": 3072},
        {"semaphore": 2000, "count": 3584}, {"semaphore": 2000, "count": 4608},
        {"semaphore": 2000, "count": 6144}, {"semaphore": 2001, "count": 512},
        {"semaphore": 2001, "count": 1024}, {"semaphore": 2001, "count": 2048},
        {"semaphore": 2001, "count": 3072}, {"semaphore": 2001, "count": 4096},
        {"semaphore": 2001, "count": 6144}, {"semaphore": 2001, "count": 8192}]},
    "examples/jax_ops/recv_count_race_detection.py": {"kind": "clean"},
    "examples/jax_ops/buggy/race_recv_count_two_writers.py": {"kind": "race"},
    "examples/jax_ops/dynamic_dma_2nd_minor.py": {"kind": "clean"},
    "examples/jax_ops/buggy/dma_bytes_dynamic_dma_wait_one_row_short.py": {
        "kind": "exit_leak", "expected_leaks": [{"semaphore": 2000, "count": 512}]},
    # a kernel closing over run_state's refs (LAUNCH-4), and one that never waits for its arrival
    "examples/jax_ops/stateful_async_copy.py": {"kind": "clean"},
    # a group-loop bound computed before the kernel (lax.pmax of per-device group counts, ACC-8);
    # the bug zero-fills the inbox after the start barrier, which peers' copies may already write
    "examples/reduce_scatter_grouped_matmul.py": {"kind": "clean"},
    "examples/buggy/race_grouped_matmul_zero_fill_after_barrier.py": {"kind": "race"},
    "examples/jax_ops/buggy/exit_leak_stateful_copy_unwaited_send.py": {
        "kind": "exit_leak", "expected_leaks": [{"semaphore": 2000, "count": 4096}]},
    # run_scoped buffers (BUF-13 .. BUF-15, D32): a copy that outlives its scope raises KeyError where the
    # interpreter runs its half after the free (on_wait for a deferred write-back; eager for a write into a
    # neighbour's scope it has not entered) and completes in the other mode; on a TPU the slot is reused
    "examples/buggy/scope_writeback_outlives_buffer.py": {
        "kind": "scope_error", "error_type": "KeyError", "also_surfaces": ["BrokenBarrierError"],
        "raises_in": ["on_wait"]},
    "examples/buggy/scope_stack_slot_reused_by_next_fill.py": {
        "kind": "scope_error", "error_type": "KeyError", "raises_in": ["on_wait"]},
    "examples/scope_writeback_waited_in_scope.py": {"kind": "clean"},
    "examples/buggy/scope_remote_copy_before_entry.py": {
        "kind": "scope_error", "error_type": "KeyError", "raises_in": ["eager"]},
    "examples/scope_remote_copy_handshake.py": {"kind": "clean"},
    # counts on a run_scoped semaphore outside its scope, beside another region (SEM-10): the interpreter keeps
    # them on the id the issuer named, so an early token completes (a bug only a TPU shows) and a late send
    # count is left at exit
    "examples/buggy/scope_token_before_neighbour_entry.py": {"kind": "tpu_hang"},
    "examples/buggy/scope_send_semaphore_outlives_scope.py": {
        "kind": "exit_leak", "expected_leaks": [{"semaphore": i, "count": 4096} for i in range(2001, 2005)]},
    "examples/scope_send_semaphore_waited_in_scope.py": {"kind": "clean"},
    "examples/scope_token_on_scratch_semaphore.py": {"kind": "clean"},
    # serving-style kernels with data-dependent windows and buffer reuse (issue 38): a decode loop
    # whose prefetch refills the slot a write-back still reads; the fixed loop waits it first
    "examples/decode_slot_reuse_waits_writeback.py": {"kind": "clean"},
    "examples/buggy/race_decode_prefetch_overwrites_writeback_slot.py": {"kind": "race"},
    # a KV-cache update at data-dependent slots (page table and lengths in scalar prefetch); its bugs: two
    # tokens written to one row, and a row one past the page (the interpreter raises at the write, both modes)
    "examples/kv_cache_update.py": {"kind": "clean"},
    "examples/kv_slices_padded.py": {"kind": "clean"},
    "examples/kv_slices_empty_lead.py": {"kind": "clean"},
    "examples/buggy/race_kv_cache_update_page_table_row_dropped.py": {"kind": "race"},
    "examples/buggy/kv_cache_update_row_past_page.py": {"kind": "window_error", "error_type": "ValueError",
                                                         "raises_in": ["eager", "on_wait"]},
    # ragged paged attention (page table and lengths in scalar prefetch, a data-dependent page count); the
    # bug never waits a sequence's last page: eager leaves its bytes on the slot's semaphores (K: 2000, 2001;
    # V: 2002, 2003), on_wait never runs the copy (the numbers are wrong, nothing is printed)
    "examples/ragged_paged_attention.py": {"kind": "clean"},
    "examples/buggy/ragged_paged_attention_last_page_not_waited.py": {"kind": "race", "expected_leaks": [
        {"semaphore": 2000, "count": 12288}, {"semaphore": 2001, "count": 4096},
        {"semaphore": 2002, "count": 12288}, {"semaphore": 2003, "count": 4096}]},
    # the kernels teams ship, more classes (issue 38): an all-gather grouped matmul on a bidirectional ring (its
    # bug multiplies the halves still arriving), a ring attention with causal block skipping (its bug skips the
    # arrival's wait with the compute: eager leaves the skipped copies' bytes on device 0's receive semaphores),
    # a paged attention prefetching two pages ahead into three slots (its bug keeps a two-slot index), and a conv
    # decode step copying a state window that ends at a dimension's end (its bug starts it one row late: every
    # run raises at the copy, eager in its start, on_wait in the wait that runs it, ACC-10, ACC-11)
    "examples/allgather_grouped_matmul.py": {"kind": "clean"},
    "examples/buggy/race_allgather_matmul_multiplies_arriving_shard.py": {"kind": "race"},
    "examples/ring_attention_causal_skip.py": {"kind": "clean"},
    "examples/buggy/ring_attention_wait_skipped_with_block.py": {"kind": "race", "expected_leaks": [
        {"semaphore": 2002, "count": 4096}, {"semaphore": 2003, "count": 4096},
        {"semaphore": 2004, "count": 4096}, {"semaphore": 2005, "count": 4096},
        {"semaphore": 2002, "count": 8192}, {"semaphore": 2003, "count": 8192},
        {"semaphore": 2004, "count": 8192}, {"semaphore": 2005, "count": 8192},
        {"semaphore": 2002, "count": 12288}, {"semaphore": 2003, "count": 12288},
        {"semaphore": 2004, "count": 12288}, {"semaphore": 2005, "count": 12288}]},
    "examples/paged_attention_three_slots.py": {"kind": "clean"},
    "examples/buggy/race_paged_attention_prefetch_wrong_slot.py": {"kind": "race"},
    "examples/conv_state_decode.py": {"kind": "clean"},
    "examples/buggy/conv_state_window_off_by_one.py": {"kind": "window_error", "error_type": "IndexError",
                                                        "raises_in": ["eager", "on_wait"]},
    "examples/ring_push_after_own_rows.py": {"kind": "clean"},
    # the receiver's wait_recv runs the push's write half under on_wait and raises there (ACC-11, ACC-15)
    "examples/buggy/ring_push_one_row_past_output.py": {"kind": "window_error", "error_type": "ValueError",
                                                         "raises_in": ["eager", "on_wait"]},
}

# jax's shipped Pallas TPU ops (jax.experimental.pallas.ops.tpu) as tests/test_shipped_ops.py builds
# them: `file::builder`, each builder called as `builder(devices, dma_mode=...)`, at the device counts
# its @semcheck.target declares. Kept apart from EXAMPLES (which lists the files under examples/).
SHIPPED_OPS = "tests/test_shipped_ops.py"
SHIPPED: dict[str, dict] = {
    f"{SHIPPED_OPS}::paged_attention": {"kind": "clean", "devices": [2]},
    f"{SHIPPED_OPS}::paged_attention_seq_grid": {"kind": "clean", "devices": [2]},
    # megacore with two TensorCores per device: each core takes half of the first grid axis
    f"{SHIPPED_OPS}::paged_attention_megacore_kv_head": {
        "kind": "clean", "devices": [2], "cores_per_device": 2},
    f"{SHIPPED_OPS}::paged_attention_megacore_batch": {
        "kind": "clean", "devices": [2], "cores_per_device": 2},
    # megacore on a one-core device: the second half's first copy is never started; a short
    # timeout, since a hang is the expected outcome
    f"{SHIPPED_OPS}::paged_attention_megacore_one_core": {
        "kind": "deadlock", "devices": [2], "hang_timeout": 10.0},
    # runs on a TPU; the interpreter cannot load through a reshape view of a copied buffer (D22)
    f"{SHIPPED_OPS}::ragged_paged_attention": {
        "kind": "interpreter_error", "devices": [2], "error_type": "AttributeError"},
}

# Extra configurations with non-default build kwargs:
# (path, kwargs, devices, intended verdict for this configuration).
VARIANTS: list[tuple[str, dict, tuple[int, ...], str]] = [
    # ids wrap to negative inside a used range -> KeyError on first use
    ("examples/buggy/int16_overflow.py", {"rows_per_step": 64}, (2, 4), "int16_overflow"),
    # the straddling allocation wraps silently but only valid ids are used:
    # the interpreter completes, yet ids still exceed int16
    ("examples/buggy/int16_overflow.py", {"steps": 16}, (2, 4, 8), "int16_overflow"),
    # collective id above every allocated internal id: no collision
    ("examples/buggy/fixed_id_collision.py", {"collective_id": 2002}, (2, 4, 8), "clean"),
    # grid too short for run_scoped ids to reach the collective id
    ("examples/buggy/fixed_id_collision_scoped.py", {"steps": 2}, (2, 4, 8), "clean"),
    # the shipped all_gather on a 2-D mesh, gathering along one axis (max(2, N // 2) devices)
    ("examples/jax_ops/all_gather.py", {"gather": "x"}, (2, 4, 8), "race"),
    ("examples/jax_ops/all_gather.py", {"gather": "y"}, (2, 4, 8), "race"),
    # the fixed halves (disjoint rows): race-free on a TPU; the interpreter still cannot copy through the view
    ("examples/buggy/tpu_race_reshaped_rows_overlap.py", {"overlap": 0}, (2,), "interpreter_error"),
    # the fixed parity (disjoint rows, ACC-16): race-free on a TPU; the interpreter cannot copy through the view
    ("examples/buggy/tpu_race_packed_rows_overlap.py", {"odd": 1}, (2,), "interpreter_error"),
]


def expected_kind(path: str, kwargs: dict) -> str:
    """Intended verdict for one configuration (what semcheck should say)."""
    for p, kw, _, kind in VARIANTS:
        if p == path and kw == kwargs:
            return kind
    return (EXAMPLES.get(path) or SHIPPED[path])["kind"]


def _hang_timeout(path: str, timeout: float) -> float:
    """The hang timeout of one configuration: a shipped op's own, else `timeout` scaled by SLOW."""
    own = SHIPPED.get(path, {}).get("hang_timeout")
    return own if own is not None else timeout * SLOW.get(path, 1.0)


# Interpreter behaviour observed while building this ground truth (jax 0.12.0.1).
NOTES = [
    "Deadlocks hang: Semaphore.wait polls forever (cv.wait(timeout=0.1) loop); "
    "a 150 s run of cyclic_wait_deadlock still had not returned.",
    "Fixed-id collisions raise ValueError('Semaphore N occurs as both fixed-id and "
    "internal.') at the first lookup of N once both tables hold it; every device "
    "then fails and the run ends with that error (no hang). A collective_id that "
    "no internal allocation reaches (e.g. 2002 with two scratch semaphores) is fine.",
    "_allocate_semaphores IS wrapped in fail_on_exception in this jax version, so "
    "an int16 overflow ends the run with an error instead of hanging.",
    "int16 ids: np.arange(start, stop, dtype=int16) only range-checks start and "
    "start+1. An allocation that starts <= 32766 and runs past 32767 silently "
    "wraps (32768 -> -32768); using a wrapped id then fails with KeyError(-32768). "
    "An allocation starting at >= 32767 (with >1 id) or at >= 32768 raises "
    "OverflowError('Python integer N out of bounds for int16'). If the wrapped ids "
    "are never used, the kernel completes with correct output "
    "(int16_overflow steps=16).",
    "Non-zero-count warnings are racy: each device checks only its own counts, "
    "right after it leaves the kernel and before the clean-up barrier, so a "
    "signal sent by a slower device may arrive after the check.",
    "Only the first non-zero semaphore per device is printed, and which one comes "
    "first varies between runs (iteration order of a set of (id, Semaphore) pairs): "
    "see exit_leak_two_semaphores.",
    "A run_scoped allocation under device-dependent control flow shifts every "
    "later scoped id on that device; a remote signal then targets the sender's id "
    "on the receiver, which hangs here (cross_device_id_disagreement).",
    "Shipped ops (shipped_ops, tests/test_shipped_ops.py builders): paged_attention with "
    "megacore_mode on a one-core device hangs (the second half of the parallel axis finds "
    "init_flag already 0 and never starts its first copy); ragged_paged_attention raises "
    "AttributeError(\"'ReshapeTransform' object has no attribute 'indices'\") at its strided "
    "load of the KV block, a reshape view of the copied buffer, in both DMA modes.",
]

# Examples that take longer than the rest get a longer hang timeout.
SLOW = {"examples/buggy/int16_overflow.py": 4.0}

# The ground truth records a fragment of the error message to match on.
def _error_fragment(message: str | None) -> str | None:
    if message is None:
        return None
    # a buffer key's KeyError (BUF-14) names the device that failed first, which varies between runs
    key = re.match(r"^(\('\w+', -?\d+, )\d+, \d+\)$", message.strip())
    if key:
        return key.group(1)
    # an out-of-bounds window (ERR-20): the part after the buffer's key, which semcheck names by its label
    m = re.match(r"Out-of-bounds (?:read|write|swap) of \(\d+ \d+ \w+ \d+\): (.*)$", message.strip())
    return m.group(1) if m else message.strip()


def _configs(args) -> list[tuple[str, int, str, dict]]:
    configs = []
    for path, spec in EXAMPLES.items():
        for n in (d for d in args.devices if d in spec.get("devices", args.devices)):
            for mode in args.modes:
                configs.append((path, n, mode, {}))
    for path, kwargs, devs, _ in VARIANTS:
        for n in devs:
            if n not in args.devices:
                continue
            for mode in args.modes:
                configs.append((path, n, mode, kwargs))
    for path, spec in SHIPPED.items():
        for n in spec["devices"]:
            if n not in args.devices:
                continue
            for mode in args.modes:
                configs.append((path, n, mode, {}))
    if args.only:
        configs = [c for c in configs if any(o in c[0] for o in args.only)]
    return configs


def _run_case(path, n, mode, kwargs, timeout, leak_repeats):
    t = _hang_timeout(path, timeout)
    reports = [ri.run_kernel(ri.REPO_ROOT / path, n, mode, t, kwargs=kwargs)]
    racy = expected_kind(path, kwargs) == "race"  # its output can depend on the schedule
    if reports[0]["outcome"] == "completed" and (reports[0]["nonzero_count_warnings"] or racy):
        for _ in range(leak_repeats - 1):
            reports.append(ri.run_kernel(ri.REPO_ROOT / path, n, mode, t, kwargs=kwargs))
    return reports


def _summarise(path, n, mode, kwargs, reports, timeout) -> dict:
    first = reports[0]
    outcomes = sorted({r["outcome"] for r in reports})
    warnings = sorted({w for r in reports for w in r["nonzero_count_warnings"]})
    per_run = [sorted(r["nonzero_count_warnings"]) for r in reports]
    outputs = {r.get("output_matches_reference") for r in reports}
    case = {
        "path": path,
        "devices": n,
        "dma_mode": mode,
        "kwargs": kwargs,
        "expected_kind": expected_kind(path, kwargs),
        "outcome": first["outcome"] if len(outcomes) == 1 else "flaky:" + ",".join(outcomes),
        "error_type": first.get("error_type"),
        "error_message": first.get("error_message"),
        "error_fragment": _error_fragment(first.get("error_message")),
        "nonzero_count_warnings": warnings,
        "leaks_observed": ri.leak_pairs(warnings),
        "warnings_vary_between_runs": len({tuple(w) for w in per_run}) > 1,
        # None when repeated runs disagree (a race decides the numbers)
        "output_matches_reference": (outputs.pop() if len(outputs) == 1 else None),
        "output_varies_between_runs": len(outputs) > 1,
        "runs": len(reports),
        "seconds": max(r["seconds"] for r in reports),
        "hang_timeout": round(_hang_timeout(path, timeout), 1),
    }
    if first["outcome"] == "error":
        case["outer_error_type"] = first.get("outer_error_type")
    return case


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--devices", default="2,4,8")
    ap.add_argument("--modes", default="eager,on_wait")
    ap.add_argument("--timeout", type=float, default=20.0,
                    help="hang timeout in seconds (scaled up for slow examples)")
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--leak-repeats", type=int, default=3)
    ap.add_argument("--only", action="append", default=[],
                    help="substring of example paths to (re)run; repeatable")
    ap.add_argument("--out", default=str(ri.GROUND_TRUTH_PATH))
    args = ap.parse_args(argv)
    args.devices = [int(d) for d in args.devices.split(",")]
    args.modes = args.modes.split(",")

    out = Path(args.out)
    existing: dict[str, dict] = {}
    if args.only and out.exists():
        for c in ri.load_ground_truth(out)["cases"]:
            existing[ri.case_key(c["path"], c["devices"], c["dma_mode"], c["kwargs"])] = c

    configs = _configs(args)
    print(f"{len(configs)} configurations, {args.workers} workers", file=sys.stderr)
    t0 = time.monotonic()
    results: dict[str, dict] = {}
    with cf.ThreadPoolExecutor(max_workers=args.workers) as pool:
        futs = {
            pool.submit(_run_case, p, n, m, kw, args.timeout, args.leak_repeats): (p, n, m, kw)
            for p, n, m, kw in configs
        }
        for fut in cf.as_completed(futs):
            p, n, m, kw = futs[fut]
            case = _summarise(p, n, m, kw, fut.result(), args.timeout)
            results[ri.case_key(p, n, m, kw)] = case
            print(
                f"[{time.monotonic() - t0:7.1f}s] {p} n={n} {m} {kw or ''} -> "
                f"{case['outcome']} {case['error_type'] or ''} "
                f"{(case['error_message'] or '')[:60]} "
                f"leaks={[(d['semaphore'], d['count']) for d in case['leaks_observed']]} "
                f"({case['seconds']}s)",
                file=sys.stderr,
            )

    existing.update(results)
    cases = sorted(
        existing.values(),
        key=lambda c: (c["path"], json.dumps(c["kwargs"], sort_keys=True),
                       c["devices"], c["dma_mode"]),
    )
    import jax
    import numpy as np

    doc = {
        "schema_version": 1,
        "description": (
            "Observed behaviour of the example kernels under Pallas TPU interpret "
            "mode (CPU, --xla_force_host_platform_device_count=devices). "
            "outcome: completed | hang (no exit within hang_timeout) | error. "
            "error_message is the innermost exception message. "
            "nonzero_count_warnings is the union over `runs` runs of the "
            "interpreter's 'Semaphore N has non-zero count ... at kernel exit' "
            "lines; leaks_observed lists the distinct (semaphore, count) pairs "
            "in them. expected_kind is the intended verdict for the configuration "
            "(examples[path].kind for default kwargs; shipped_ops[path].kind for jax's "
            "shipped ops, whose path is 'file::builder')."
        ),
        "notes": NOTES,
        "environment": {
            "jax": jax.__version__,
            "numpy": np.__version__,
            "python": platform.python_version(),
        },
        "examples": EXAMPLES,
        "shipped_ops": SHIPPED,
        "cases": cases,
    }
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {len(cases)} cases to {out} in {time.monotonic() - t0:.0f}s",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
