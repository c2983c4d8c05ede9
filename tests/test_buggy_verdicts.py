"""Every buggy example gets exactly its violations (and every property not listed is proved or unknown).

`semcheck verify --format json` at 2 devices (`DEVICES` says where not), all DMA modes. The first
property of each row is the bug the file is named for; the others follow from
it (a leaked send semaphore also receives bytes no DMA wait asks for, etc.).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SEMCHECK = [sys.executable, "-m", "semcheck.checker.run.cli"]
I, H = ("eager", "on_wait"), ("eager", "on_wait", "hardware")

EXPECTED = {
    # the ring's token is signalled onto the neighbour's scoped semaphore with no sign it has entered (SEM-10)
    "cross_device_id_disagreement.py": {"id-agreement": I, "deadlock-free": I, "dma-bytes": I,
                                        "invocation-confined": H},
    "cyclic_wait_deadlock.py": {"deadlock-free": H},
    "dma_byte_mismatch_wait_larger.py": {"dma-bytes": H, "deadlock-free": H},
    # on a TPU the copy's tail may still land after the wait, against the read of the result after the
    # call (DR-9, PRG-120); the interpreter copies whole
    "dma_byte_mismatch_wait_smaller.py": {"dma-bytes": H, "exit-balance": H, "race-free": ("hardware",)},
    "exit_leak_extra_signal.py": {"exit-balance": H},
    "exit_leak_two_semaphores.py": {"exit-balance": H, "dma-bytes": H},
    "exit_leak_unwaited_send.py": {"exit-balance": H, "dma-bytes": H},
    # every interpreter run raises (RUN-11): deadlock-free follows (ERR-16)
    "fixed_id_collision.py": {"id-disjoint": I, "deadlock-free": I},
    # every schedule the explorer follows raises (ERR-19): deadlock-free follows
    "fixed_id_collision_scoped.py": {"id-disjoint": I, "deadlock-free": I},
    "int16_overflow.py": {"id-int16": I, "deadlock-free": I},
    # the grid's write-back of block i races the hand-written prefetch still reading it (GRID-1, GRID-2)
    "race_grid_writeback_prefetch_off_by_one.py": {"race-free": H},
    # the inbox zero-filled after the start barrier: a peer's round-0 copy may land first (ACC-8 computes the bound)
    "race_grouped_matmul_zero_fill_after_barrier.py": {"race-free": H},
    "race_local_copy_read_before_wait.py": {"race-free": H},
    # an empty copy's window starts inside another copy's: only jax's race detector takes them to meet (ERR-27)
    "race_empty_copy_window.py": {"race-free": I},
    # two copies through a reshape view write rows 60..67 both (ACC-2: the exact rows, not bounding boxes);
    # the interpreter cannot copy through the view: every run raises (ERR-9; under on_wait in a wait, ACC-11)
    "tpu_race_reshaped_rows_overlap.py": {"race-free": ("hardware",), "deadlock-free": I},
    # two copies through a bitcast of every other row of a reshaped lane write the same rows (ACC-16: the
    # exact elements of a strided part through a reshape); the interpreter cannot copy through the view
    "tpu_race_packed_rows_overlap.py": {"race-free": ("hardware",), "deadlock-free": I},
    # two write-backs overlap by two rows; the interpreter raises at the page fetch through a reshape view first
    # (eager at its start, on_wait in its wait, which comes before the write-backs' waits: ACC-39)
    "tpu_race_writebacks_past_reshaped_fetch.py": {"race-free": ("hardware",), "deadlock-free": I},
    # the same write-backs past a staged wait that pops an empty copy at a dimension's end first, though the other
    # staged copy brings its bytes (ERR-33: race-free proved under on_wait up to the failure, as above)
    "tpu_race_writebacks_past_empty_copy_popped_first.py": {"race-free": ("hardware",), "deadlock-free": I},
    # the receive's wait runs the copy into a reshape view under on_wait and raises (ACC-11); eager at the start
    "ring_copy_into_reshaped_view.py": {"deadlock-free": I},
    # the copy may land in parts on a TPU (DR-9); the interpreter copies whole
    "partial_arrival_read.py": {"race-free": ("hardware",), "dma-bytes": H},
    # both cores of a megacore split write back one output block (GRID-2)
    "race_megacore_grid_same_output_block.py": {"race-free": H},
    "race_read_before_wait_recv.py": {"race-free": H},
    "race_send_buffer_reuse.py": {"race-free": H},
    "race_two_cores_one_hbm_region.py": {"race-free": H},
    "race_two_senders_one_slot.py": {"race-free": H},
    "race_wrong_slot_wait.py": {"race-free": H},
    "recv_before_send_deadlock.py": {"deadlock-free": H},
    # interpret mode cannot compile semaphore_read: no core ever starts (LAUNCH-3, D12)
    "semaphore_read_in_interpret_mode.py": {},  # unrunnable under eager and on_wait (REP-21)
    "smem_table_in_interpret_mode.py": {},  # the interpreter refuses the SMEM-typed argument (ERR-36, REP-21)
    # every interpret-mode run raises after the step back at block 0 (GRID-3, D24); a TPU runs it
    "revisited_output_block.py": {"deadlock-free": I},
    # every eager run raises at a zero-size copy starting at a dimension's end (ACC-10, ERR-20); on_wait is
    # unknown (the copy raises only if a waiter runs it), a TPU copies nothing (D33)
    "copy_window_at_dimension_end.py": {"deadlock-free": ("eager",)},
    # a zero-fill after the start barrier races a peer's push; then an empty copy at a dimension's end raises
    # in every interpreter run (eager at its start, on_wait in the later wait, after both copies ran: ERR-24)
    "race_zero_fill_then_empty_copy_at_end.py": {"race-free": H, "deadlock-free": I},
    # two racing pairs and an empty copy at a dimension's end: under on_wait the failing wait comes after pair
    # B ran and before pair A runs, and semcheck's race pass meets pair A first (ERR-29)
    "race_second_pair_before_empty_copy_at_end.py": {"race-free": H, "deadlock-free": I},
    # device 0's races lie past its failing wait (ERR-29 meets them first); device 1's pair runs before it (ERR-31)
    "race_pair_on_one_device_while_another_fails.py": {"race-free": H, "deadlock-free": I},
    # with the race detector on, the wait for the empty copy's 0 bytes runs no task under on_wait and fails
    # its clock assertion in every run (RACE-1, ERR-21); eager runs the copy at its start
    "clock_empty_copy_wait.py": {"deadlock-free": ("on_wait",)},
    # a copy counts 1 on a REGULAR semaphore on a TPU v6+, its bytes in interpret mode (D20, DMA-6)
    "regular_semaphore_dma_leaks_in_interpreter.py": {"exit-balance": I, "dma-bytes": I},
    "missing_signal_deadlock.py": {"deadlock-free": H},
    # ACC-9: a peer's count read before its copy's wait: the race, and nothing the count decides is a fact; but under
    # on_wait every run reads the uninitialised fill there (ACC-71), whose receive waits wrap to -512 bytes (ACC-76):
    # 512 left on each receive semaphore, a raising wait on a DMA semaphore; under eager a case's run in which device 1
    # reads its count before device 0 starts the copy leaves its bytes (ACC-77)
    "moe_count_read_before_wait.py": {"race-free": H, "exit-balance": I, "dma-bytes": ("on_wait",)},
    # ACC-30: the count table a local copy fetches from HBM read before the copy's wait: the race, and nothing
    # the counts decide is a fact
    "moe_count_table_read_before_fetch_wait.py": {"race-free": H},
    # ACC-43: the same race on a schedule a local copy fetches into a run_scoped SMEM buffer
    "race_scoped_schedule_read_before_fetch_wait.py": {"race-free": H},
    # ACC-55: the same race on the routes a core_map fetches, its copies' devices and rows
    "race_core_map_route_read_before_fetch_wait.py": {"race-free": H},
    # the interpreter leaves a row per source on the semaphores; a TPU's expert may read the row landing, a
    # race on data no count comes from, so the counts stay facts and a TPU leaves the row's bytes too (ACC-20)
    "moe_dispatch_wait_one_row_short.py": {"dma-bytes": H, "exit-balance": H, "race-free": ("hardware",)},
    # ACC-25: the same off-by-one where the counts come from an in-kernel top-k over float logits
    "moe_topk_dispatch_wait_one_row_short.py": {"dma-bytes": H, "exit-balance": H, "race-free": ("hardware",)},
    # ACC-35: counts announced by a threshold on an in-kernel softmax, decided within bounds in the interpreter's
    # modes; every property unknown under hardware, where no bound of a TPU's exp is documented (ACC-37)
    "moe_softmax_count_by_threshold.py": {"dma-bytes": I, "exit-balance": I},
    # the interpreter hangs at the combine's wait, device 0 exiting with 1024 bytes on back_recv[1]: no run
    # reaches the counts' reads it skips, so every verdict stands (ACC-19); on a TPU the wait that takes too
    # few bytes passes before the rows land, against the output's write-back: a race on no count (ACC-20)
    "moe_combine_waits_wrong_count.py": {"deadlock-free": H, "exit-balance": H, "dma-bytes": H,
                                         "race-free": ("hardware",)},
    "two_core_missing_core_index.py": {"deadlock-free": I, "race-free": H},  # jax reports the race too
    "two_core_signal_hangs_on_tpu.py": {"deadlock-free": ("hardware",)},
    "wait_too_large_deadlock.py": {"deadlock-free": H},
    # a copy that outlives its run_scoped buffer, or lands in a scope not yet entered (BUF-13); on a TPU the
    # next scope's input copy writes the slot the write-back still reads (BUF-15)
    # (BUF-14: where the interpreter's runs raise KeyError, deadlock-free says so: on_wait for a late wait,
    # eager for a copy into a scope not yet entered)
    "scope_writeback_outlives_buffer.py": {"invocation-confined": H, "deadlock-free": ("on_wait",)},
    "scope_stack_slot_reused_by_next_fill.py": {"invocation-confined": H, "race-free": ("hardware",),
                                                "deadlock-free": ("on_wait",)},
    "scope_remote_copy_before_entry.py": {"invocation-confined": H, "deadlock-free": ("eager",)},
    # a count on a run_scoped semaphore outside its scope (SEM-10): the interpreter keeps it on the id the
    # issuer named (no run fails), a TPU in whatever scope holds the slot then; the unwaited send's bytes stay
    "scope_token_before_neighbour_entry.py": {"invocation-confined": H},
    "scope_send_semaphore_outlives_scope.py": {"invocation-confined": H, "exit-balance": H, "dma-bytes": H},
    # device 0 signals itself, passes its barrier and copies into device 1, which may not have entered (PRG-113)
    "wrong_neighbour_deadlock.py": {"deadlock-free": H, "invocation-confined": ("hardware",)},
    # a decode loop's prefetch refills the slot whose write-back is waited only a block later
    "race_decode_prefetch_overwrites_writeback_slot.py": {"race-free": H},
    # two tokens' copies queued on one semaphore into one cache row: under on_wait the state right after
    # both starts replays (DR-44), as jax's detector reports it
    "race_kv_cache_update_page_table_row_dropped.py": {"race-free": H},
    # every run raises at the copy one row past its page (ACC-10): eager in its start, on_wait in the wait that
    # runs it (ACC-11; past the explorer's budget the fast run's failure decides it, ACC-12); a TPU writes the
    # next page's row (D33)
    "kv_cache_update_row_past_page.py": {"deadlock-free": I},
    # each sequence's last page read without its wait, its copies' bytes left on the semaphores (PROP-5)
    "ragged_paged_attention_last_page_not_waited.py": {"exit-balance": H, "dma-bytes": H, "race-free": H},
    # the race needs an odd N (specs/deciding/parametric.md PAR-15): checked at 3 devices
    "race_two_hop_ring_slot_by_parity.py": {"race-free": H},
    # the multiply reads the halves this ring step receives, before their wait
    "race_allgather_matmul_multiplies_arriving_shard.py": {"race-free": H},
    # three page slots indexed p % 2: page p + 2's prefetch writes the slot page p's fold reads
    "race_paged_attention_prefetch_wrong_slot.py": {"race-free": H},
    # the arrival's wait skipped with a future block's compute: its bytes left at exit; at 2 devices the block is
    # the last, never forwarded (no race: jax's detector agrees), and a TPU may land it after device 0 has left
    "ring_attention_wait_skipped_with_block.py": {"exit-balance": H, "dma-bytes": H, "invocation-confined": ("hardware",)},
    # every run raises at the window one row past a full sequence (ACC-10): eager in the copy's start, on_wait in
    # the wait that runs it (ACC-11); a TPU does not check the window (D33)
    "conv_state_window_off_by_one.py": {"deadlock-free": I},
    # the push's write one row past the receiver's output: eager in its start, on_wait in the receiver's wait_recv,
    # which runs its write half (ACC-11); the other properties hold up to that wait (ACC-15); a TPU does not check
    "ring_push_one_row_past_output.py": {"deadlock-free": I},
    # per-row copies sized by a broadcast mask (`iota < n`), one row short in the receive's wait: the row may land
    # after the caller reads the output, its bytes stay, and on a TPU it may land after the receiver has left
    # ACC-21: a ring step waits only for its send half, so the count rows are used still landing: the race,
    # and nothing the counts decide is a fact (the other properties unknown)
    "masked_row_push_recv_one_row_short.py": {"race-free": H, "exit-balance": H, "dma-bytes": H,
                                              "invocation-confined": ("hardware",)},
}
DEVICES = {"race_two_hop_ring_slot_by_parity.py": 3}
"""The device count a file is verified at, where it is not 2: its bug needs that count. At the other counts
the race ground truth records (tests/test_race_ground_truth.py reads this table) jax reports no race."""


# interpret mode cannot run these at all (a primitive with no interpret-mode rule, D12): not a bug of the
# kernel, so no violation, and exit code 4 (specs/deciding/report.md REP-21)
UNRUNNABLE = {"semaphore_read_in_interpret_mode.py", "smem_table_in_interpret_mode.py"}


def _file_exit_code(rows: list[dict], errors: list[dict]) -> int:
    """The exit code `semcheck verify` gives one file alone (specs/deciding/report.md, REP-21), from its rows of a
    run of many files: 1 a violation, 2 an input error, 3 an unknown (or no row), 4 an unrunnable, else 0."""
    verdicts = {r["verdict"] for r in rows}
    if "violated" in verdicts:
        return 1
    if errors:
        return 2
    if "unknown" in verdicts or not rows:
        return 3
    return 4 if "unrunnable" in verdicts else 0


def _verify(names: list[str], devices: int) -> dict[str, tuple[int, dict[str, tuple[str, ...]]]]:
    """One `semcheck verify` of the files at one device count (one process importing jax once, not one per
    file): per file, its own exit code and its violated properties with their DMA modes."""
    paths = [f"examples/buggy/{name}" for name in names]
    proc = subprocess.run(
        [*SEMCHECK, "verify", *paths, "--devices", str(devices), "--format", "json", "--jobs", "2"],
        cwd=ROOT, capture_output=True, text=True, timeout=1800,
    )
    report = json.loads(proc.stdout)
    assert report["files"] == paths, proc.stderr[-2000:]
    codes = []
    out = {}
    for name, path in zip(names, paths):
        rows = [r for r in report["results"] if r["file"] == path]
        codes.append(_file_exit_code(rows, [e for e in report["errors"] if e["file"] == path]))
        violated: dict[str, list[str]] = {}
        for r in rows:
            if r["verdict"] == "violated":
                violated.setdefault(r["property"], []).append(r["dma_mode"])
        out[name] = codes[-1], {p: tuple(sorted(m)) for p, m in violated.items()}
    assert proc.returncode == min(codes), proc.stderr[-2000:]  # 1 before 4: a violation anywhere decides it
    return out


@pytest.fixture(scope="module")
def verdicts() -> dict[str, tuple[int, dict[str, tuple[str, ...]]]]:
    by_devices: dict[int, list[str]] = {}
    for name in EXPECTED:
        by_devices.setdefault(DEVICES.get(name, 2), []).append(name)
    out = {}
    for n, names in sorted(by_devices.items()):
        out.update(_verify(names, n))
    return out


def test_every_buggy_example_is_listed():
    assert sorted(EXPECTED) == sorted(p.name for p in (ROOT / "examples" / "buggy").glob("*.py"))


@pytest.mark.jax
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_buggy_example_gets_exactly_its_violations(verdicts, name):
    want = {p: tuple(sorted(m)) for p, m in EXPECTED[name].items()}
    code, got = verdicts[name]
    assert code == (4 if name in UNRUNNABLE else 1)
    assert got == want
