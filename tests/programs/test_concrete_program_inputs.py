"""PRG-167: the calls of a program read the values the example arrays give them (per device), so programs
whose loop bounds come from concrete arrays are decided under `hardware`; a value an earlier kernel
computes is followed only where it is a fact (PRG-169)."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]
KV = REPO / "examples" / "programs" / "kv_transfer_layers.py"
LAYERS = 4  # kv_transfer_layers.LAYERS


def _verify(target: str, devices: int = 2, cwd: Path = REPO) -> dict:
    run = subprocess.run([sys.executable, "-m", "semcheck.checker.run.cli", "verify", target, "--devices",
                          str(devices), "--dma-mode", "hardware", "--format", "json", "--no-cache"],
                         capture_output=True, text=True, cwd=cwd, timeout=900)
    assert run.returncode in (0, 1, 3), run.stderr[-3000:]
    return {r["property"]: r for r in json.loads(run.stdout)["results"]}


def _verdicts(got: dict) -> dict[str, str]:
    return {p: r["verdict"] for p, r in got.items()}


@pytest.mark.jax
@pytest.mark.rule("PRG-167", "PRG-115")
def test_calls_read_the_values_their_arrays_give():
    """The per-device layer counts [3, 2] reach both calls: the correct transfer is proved, and with the last
    wait missing the unwaited semaphore is each device's own last layer (sems[2] on 0, sems[1] on 1). The
    two-call ring, whose step counts and row loops come from the lengths, is proved (was unknown)."""
    assert set(_verdicts(_verify("examples/programs/kv_transfer_layers.py")).values()) == {"proved"}
    assert set(_verdicts(_verify("examples/programs/ring_attention_two_calls.py")).values()) == {"proved"}
    bad = _verify("examples/programs/buggy/kv_transfer_layers_last_wait_missing.py")
    assert bad["exit-balance"]["verdict"] == "violated", bad["exit-balance"]
    msg = bad["exit-balance"]["witness"]["message"]
    assert "sems[2] of _start_kernel (call 0) on device 0" in msg and "sems[1] of _start_kernel (call 0) on device 1" in msg
    assert "sems[2] of _start_kernel (call 0) on device 1" not in msg


@pytest.mark.jax
@pytest.mark.rule("PRG-167", "PRG-169")
def test_an_earlier_kernel_s_output_that_is_not_a_fact_stays_unknown():
    """The wait call's counts come from a kernel that reads scratch memory nothing wrote: its runs with NaN and
    zero fills differ, so the counts are no fact and the program is unknown, naming the call and the loop."""
    got = _verify("tests/programs/followed_targets.py::count_from_uninitialised")
    assert set(_verdicts(got).values()) == {"unknown"}, got
    reason = got["deadlock-free"]["reason"]
    assert "the output of kernel call 0" in reason and "never writes" in reason, reason
    assert "kv_transfer_layers.py:" in reason, reason


@pytest.mark.jax
@pytest.mark.rule("PRG-200", "PRG-169")
def test_an_output_the_fills_agree_on_is_no_fact_on_a_tpu_where_the_kernel_reads_its_scratch():
    """The producer reads a scratch nothing writes, through a test both fills fail (2**31 - 1 and 0), so its runs
    agree; on a TPU the scratch holds what was there and the count may be one more. Under `hardware` every
    property but race-free is unknown, naming the call, its scratch and PRG-200 (before: all 8 proved); the
    producer that reads its inputs only keeps its proofs."""
    got = _verify("tests/programs/followed_targets.py::count_from_scratch_the_fills_agree_on")
    assert {p: v for p, v in _verdicts(got).items() if p != "race-free"} == {
        p: "unknown" for p in got if p != "race-free"}, got
    reason = got["deadlock-free"]["reason"]
    assert "kernel call 0 (_fills_agree_kernel" in reason and "through a scratch buffer" in reason, reason
    assert "PRG-200" in reason, reason
    assert set(_verdicts(_verify("tests/programs/followed_targets.py::count_from_written_part")).values()) == {
        "proved"}


@pytest.mark.jax
@pytest.mark.rule("PRG-202", "PRG-200")
def test_an_output_read_at_a_negative_index_is_no_fact_on_a_tpu():
    """The producer reads its count at index -1: jax's interpreter counts it from the end and both fills' runs agree,
    a TPU reads before the ref. Under `hardware` every property but race-free is unknown, naming the index's line
    and PRG-200 (before: all 8 proved)."""
    got = _verify("tests/programs/followed_targets.py::count_at_a_negative_index")
    assert {p: v for p, v in _verdicts(got).items() if p != "race-free"} == {
        p: "unknown" for p in got if p != "race-free"}, got
    reason = got["deadlock-free"]["reason"]
    line = _line_of(REPO / "tests" / "programs" / "followed_targets.py", "count_ref[jnp.minimum(count_ref[0], 0) - 1]")
    assert "an index semcheck cannot show is at least 0" in reason and f"followed_targets.py:{line}" in reason, reason


@pytest.mark.jax
@pytest.mark.rule("PRG-233", "PRG-202")
def test_an_index_after_a_counter_that_wraps_is_no_fact_on_a_tpu():
    """The producer's loop runs until an int16 counter stepping by 3 reaches 32,767: it wraps past the dtype's end
    and runs 54,613 trips, so the count is read at -1. Under `hardware` every property but race-free is unknown,
    naming the read's line (before: all 8 proved, the trips taken as at most 32,767)."""
    got = _verify("tests/programs/followed_targets.py::count_after_a_wrapping_counter")
    assert {p: v for p, v in _verdicts(got).items() if p != "race-free"} == {
        p: "unknown" for p in got if p != "race-free"} and len(got) == 8, got
    line = _line_of(REPO / "tests" / "programs" / "followed_targets.py", "count_ref[jnp.maximum(jnp.minimum(left")
    assert f"followed_targets.py:{line}" in got["deadlock-free"]["reason"], got["deadlock-free"]


def _line_of(path: Path, text: str) -> int:
    return next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if text in ln)


@pytest.mark.jax
@pytest.mark.rule("PRG-200", "PRG-169")
def test_a_local_call_checked_alone_on_such_an_output_is_unknown_on_a_tpu_only():
    """The same producer gives a local call (checked alone) the row block it copies: under `hardware` its verdicts
    are unknown, naming PRG-200 (before: proved); under `eager` the interpreter's fills are the facts: proved."""
    run = subprocess.run([sys.executable, "-m", "semcheck.checker.run.cli", "verify",
                          "tests/programs/followed_targets.py::local_row_from_scratch_the_fills_agree_on", "--devices",
                          "2", "--dma-mode", "all", "--format", "json", "--no-cache"],
                         capture_output=True, text=True, cwd=REPO, timeout=900)
    assert run.returncode in (0, 1, 3), run.stderr[-3000:]
    got: dict = {}
    for r in json.loads(run.stdout)["results"]:
        got.setdefault((r["target"].rsplit("#", 1)[-1], r["dma_mode"]), {})[r["property"]] = r
    assert {r["verdict"] for r in got[("1", "hardware")].values()} == {"unknown"}, got[("1", "hardware")]
    assert all("PRG-200" in r["reason"] and "through a scratch buffer" in r["reason"]
               for r in got[("1", "hardware")].values())
    assert {r["verdict"] for r in got[("1", "eager")].values()} == {"proved"}, got[("1", "eager")]


@pytest.mark.jax
@pytest.mark.rule("PRG-192", "PRG-193", "PRG-169")
def test_a_later_call_that_reads_only_what_the_producer_wrote_is_decided():
    """The producer writes element 0 of its 8 (its runs differ on the others): the wait call that reads element
    0, whole or through XLA ops, is proved (it was unknown: the runs differ); one that reads element 7 (reversed
    into its operand, read in the kernel) or element 3 (sliced before the call) is unknown, naming the call, the
    output's unknown elements and the loop that needs one."""
    for target in ("count_from_written_part", "count_from_written_part_computed"):
        got = _verify(f"tests/programs/followed_targets.py::{target}")
        assert set(_verdicts(got).values()) == {"proved"}, (target, got)
    for target in ("count_from_unwritten_part_reversed", "count_from_unwritten_part"):
        got = _verify(f"tests/programs/followed_targets.py::{target}")
        assert set(_verdicts(got).values()) == {"unknown"}, (target, got)
        reason = got["deadlock-free"]["reason"]
        assert ("the output of kernel call 0 (_first_element_kernel" in reason and "(and 6 more) of output 0"
                in reason and "never writes" in reason), reason
        assert "kv_transfer_layers.py:69" in reason, reason


@pytest.mark.jax
@pytest.mark.rule("PRG-219")
def test_a_producer_that_stores_in_a_loop_gives_facts_on_a_tpu():
    """The producer stores element 0 of its 8 in a `fori_loop`: under `hardware` the call that reads element 0 is
    proved (it was unknown: the loop was taken as reading its output back), the one reading element 3 unknown."""
    got = _verify("tests/programs/followed_targets.py::count_from_a_loop_written_part")
    assert set(_verdicts(got).values()) == {"proved"}, got
    got = _verify("tests/programs/followed_targets.py::count_from_a_loop_unwritten_part")
    assert set(_verdicts(got).values()) == {"unknown"}, got
    assert "never writes" in got["deadlock-free"]["reason"], got["deadlock-free"]["reason"]


@pytest.mark.jax
@pytest.mark.rule("PRG-220")
def test_an_index_loaded_from_an_input_the_kernel_never_writes_is_bounded_by_its_values():
    """The producer indexes at `min(count, 1) - 1` with counts 3 and 2: the load's interval is the counts' own, so
    the index is 0 and the program is proved under `hardware` (it was unknown: a loaded index may be negative)."""
    got = _verify("tests/programs/followed_targets.py::count_at_an_index_its_input_holds")
    assert set(_verdicts(got).values()) == {"proved"}, got


def _second_call(target: str) -> dict[str, dict]:
    run = subprocess.run([sys.executable, "-m", "semcheck.checker.run.cli", "verify", target, "--devices", "2",
                          "--dma-mode", "hardware", "--format", "json", "--no-cache"],
                         capture_output=True, text=True, cwd=REPO, timeout=900)
    assert run.returncode in (0, 1, 3), run.stderr[-3000:]
    return {r["property"]: r for r in json.loads(run.stdout)["results"] if r["target"].endswith("#1")}


@pytest.mark.jax
@pytest.mark.rule("PRG-228")
def test_a_store_at_a_loop_accumulated_index_gives_facts_on_a_tpu():
    """The chunk-table metadata kernel stores at `count + j`, `count` the chunks its `fori_loop` accumulated: walked
    trip by trip on the lengths it runs on, every index is shown at least 0, and the copy call that reads the
    tables is proved under `hardware` (it was unknown). With tables one entry per sequence the store runs past
    them, jax's interpreter raises, and the copy call stays unknown there, naming the metadata call."""
    got = _second_call("examples/programs/chunk_table_planned.py")
    assert {p: r["verdict"] for p, r in got.items()} == {p: "proved" for p in got} and len(got) == 8, got
    bad = _second_call("examples/programs/buggy/chunk_table_planned_table_per_sequence.py")
    assert {r["verdict"] for r in bad.values()} == {"unknown"}, bad
    assert "kernel call 0 (_metadata_kernel" in bad["deadlock-free"]["reason"], bad["deadlock-free"]


@pytest.mark.jax
@pytest.mark.rule("PRG-167")
def test_a_launch_reached_with_different_values_stays_unknown():
    """One jitted start and one jitted wait run two transfers: the same launch equations are reached twice.
    On equal counts both reaches agree and the program is proved; on different counts the launch's values
    are not told apart, so the program is unknown (the first reach's values would be a guess)."""
    assert set(_verdicts(_verify("tests/programs/followed_targets.py::shared_launch_same_counts")).values()) == {
        "proved"}
    got = _verify("tests/programs/followed_targets.py::shared_launch_other_counts")
    assert set(_verdicts(got).values()) == {"unknown"}, got
    assert "more than once with different scalar inputs" in got["deadlock-free"]["reason"], got


_TARGET = '''
import importlib.util

_spec = importlib.util.spec_from_file_location("semcheck_programs_kv_transfer_layers", {path!r})
kv = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(kv)


def build(num_devices, *, dma_mode="eager", interpret=None):
    return kv.build_with(num_devices, kv.interpret_params(dma_mode, interpret), counts={counts!r},
                         wait_counts={wait!r})
'''


@pytest.mark.jax
@pytest.mark.rule("PRG-167")
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(1, LAYERS), st.integers(0, LAYERS)), min_size=2, max_size=2))
def test_random_counts_decide_the_kv_transfer(pairs):
    """The start call reads one per-device array, the wait call another: a device that waits more layers
    than it started deadlocks, one that waits fewer leaves a copy unwaited, equal counts are proved."""
    counts, wait = [c for c, _ in pairs], [w for _, w in pairs]
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "kv_counts.py").write_text(_TARGET.format(path=str(KV), counts=counts, wait=wait))
        got = _verdicts(_verify(str(Path(d) / "kv_counts.py"), cwd=Path(d)))
    assert "unknown" not in got.values(), got
    if any(w > c for c, w in pairs):
        assert got["deadlock-free"] == "violated", (pairs, got)
    elif any(w < c for c, w in pairs):
        assert got["deadlock-free"] == "proved" and got["exit-balance"] == "violated", (pairs, got)
    else:
        assert set(got.values()) == {"proved"}, (pairs, got)


@pytest.mark.jax
@pytest.mark.rule("PRG-168", "PRG-167", "PRG-183")
def test_a_loop_of_calls_reads_the_values_every_iteration_gives():
    """Two KV transfers in a fori_loop: on the counts every iteration carries unchanged the calls read them
    and the program is proved (it was unknown: a call in a loop had no values); on counts the loop changes, each
    iteration's calls read their own (PRG-183: it was unknown, the launch's two reaches differing), so the
    program is proved, and the twin whose wait reads the next iteration's counts deadlocks."""
    same = _verify("tests/programs/followed_targets.py::loop_same_counts")
    assert set(_verdicts(same).values()) == {"proved"}, same
    other = _verify("tests/programs/followed_targets.py::loop_other_counts")
    assert set(_verdicts(other).values()) == {"proved"}, other
    ahead = _verdicts(_verify("tests/programs/followed_targets.py::loop_wait_ahead"))
    assert ahead["deadlock-free"] == "violated", ahead
