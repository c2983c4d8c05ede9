"""Copies of no element waited for 0, then an access of their buffer: races as jax's detector sees them (ERR-34,
DR-6, DR-4).

Under `eager` a copy signals its semaphores inside its start, so a wait on them that its core runs after the start
takes the copy's clock, whatever it waits for (0 included, DR-1). Under `on_wait` a wait for 0 runs no task: a copy
of no element it "waited" stays queued, and the detector sees its window only if a later wait runs it (ERR-34).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from semcheck.checker.properties.decide import decide
from semcheck.model.fast import fast_run
from semcheck.model.launch import launch
from semcheck.model.ops import Access, DmaStart, Loc, Program, SemRef, Topology, Wait
from semcheck.model.race import find_races
from test_races import SCRATCH, box, detector_race

SEM = SemRef("sems", 0)


def _copy(nbytes: int, lo: int, *, line: int, device: int | None = None, src_sem: SemRef | None = None) -> DmaStart:
    """A copy of `nbytes` (4 per element) from `src[lo:...]` into `buf[lo:...]`: no element when 0 bytes."""
    region = box((lo, lo + nbytes // 4))
    return DmaStart(SEM, nbytes, src_sem=src_sem, device=device, src_buf="src", src_region=region, dst_buf="buf",
                    dst_region=region, loc=Loc("k.py", line))


def _wait(value: int, sem: SemRef = SEM) -> Wait:
    return Wait(sem, value, kind="dma", loc=Loc("k.py", 20))


def primed_empty_copy_then_load(*, late: bool = False, idle_core: bool = False) -> Program:
    """A copy of one element into `buf[15]` waited (its semaphore holds a clock from then on), a copy of no element
    into `buf[0:0]` waited for 0, and a load of `buf[0:8]`. `late`: another copy of one element into `buf[14]` is
    started before the empty one and waited after the load; under on_wait that wait runs the empty copy's task
    first (the last queued, SEM-7), after the load. `idle_core`: the device has a second core that does nothing,
    so the program is not schedule-free (ACC-49)."""
    body = [_copy(4, 15, line=10), _wait(4)]
    if late:
        body.append(_copy(4, 14, line=11))
    body += [_copy(0, 0, line=12), _wait(0), Access("buf", box((0, 8)), False, Loc("k.py", 30))]
    if late:
        body.append(_wait(4))
    if idle_core:
        return launch(Topology(1, 2), [body, []], scratch=SCRATCH, detect_races=True)
    return launch(Topology(1), [body], scratch=SCRATCH, detect_races=True)


@pytest.mark.rule("DR-6", "DR-7")
def test_an_empty_copy_waited_for_0_is_ordered_before_the_load_under_eager():
    program = primed_empty_copy_then_load()
    assert detector_race(program) is False
    assert find_races(program, "eager").races == ()
    assert decide("race-free", program, "eager").verdict == "proved"


@pytest.mark.rule("ERR-34", "DR-4")
def test_an_empty_copy_its_wait_for_0_leaves_queued_is_no_race_the_detector_reports():
    program = primed_empty_copy_then_load(idle_core=True)
    races = find_races(program, "on_wait").races
    assert races and not any(r.confirmed for r in races)
    assert {r.doubt for r in races} == {"ERR-34"}
    verdict = decide("race-free", program, "on_wait")
    assert verdict.verdict == "unknown" and verdict.stats.get("rule") == "ERR-34"
    assert "ERR-34" in verdict.reason


@pytest.mark.rule("ACC-51", "ERR-34")
def test_a_copy_the_own_run_leaves_queued_is_no_race_of_a_schedule_free_program():
    # one core: its steps, the pops of its waits included, are the same in every run, and its own run never runs
    # the empty copy's task, so no run does and jax's detector never meets its window (it reports no race)
    program = primed_empty_copy_then_load()
    assert find_races(program, "on_wait").races == ()
    assert decide("race-free", program, "on_wait").verdict == "proved"
    # the same program with an idle second core is not schedule-free: the pair stays in doubt
    assert decide("race-free", primed_empty_copy_then_load(idle_core=True), "on_wait").verdict == "unknown"


@pytest.mark.rule("ACC-51", "ERR-34", "DR-4")
def test_a_copy_the_own_run_performs_after_the_load_still_races():
    # the late wait pops the empty copy's task after the load in the own run: ACC-51 does not apply
    program = primed_empty_copy_then_load(late=True)
    assert any(r.confirmed for r in find_races(program, "on_wait").races)


@pytest.mark.rule("ERR-34", "DR-4")
def test_an_empty_copy_a_later_wait_runs_after_the_load_races_under_on_wait():
    program = primed_empty_copy_then_load(late=True)
    assert any(r.confirmed for r in find_races(program, "on_wait").races)
    assert decide("race-free", program, "on_wait").verdict == "violated"
    assert decide("race-free", program, "eager").verdict == "proved"


@st.composite
def sized_copies(draw) -> Program:
    """Device 0 primes its semaphores with a copy of one element into `buf[15]` (waited, unless drawn not to), then
    makes a copy of 0, 1 or 2 elements into `buf[0:n]` (local, to device 1, with or without a send semaphore),
    waits for a drawn part of it on the side drawn (send, receive or both), and an access of `buf` follows on a
    drawn core: device 0's or device 1's."""
    remote = draw(st.booleans())
    send = SemRef("sems", 1) if remote and draw(st.booleans()) else None
    target = 1 if remote else None
    n = draw(st.sampled_from([0, 1, 2]))
    waited = draw(st.sampled_from([0, n]))
    sender: list = []
    receiver: list = []
    prime = draw(st.booleans())
    if prime:
        sender += [_copy(4, 15, line=10, device=target, src_sem=send)] + ([_wait(4, send)] if send else [])
        receiver += [_wait(4)]
    local = [] if remote else sender + receiver  # one core: the prime's waits before the copy
    sender, receiver = ([], []) if not remote else (sender, receiver)
    sender.append(_copy(4 * n, 0, line=12, device=target, src_sem=send))
    side = draw(st.sampled_from(["send", "recv", "both"])) if send is not None else "recv"
    if side in ("send", "both"):
        sender.append(_wait(4 * waited, send))
    if side in ("recv", "both"):
        receiver.append(_wait(4 * waited))
    region = draw(st.sampled_from([box((0, 8)), box((0, 1)), box((1, 2))]))
    access = Access(draw(st.sampled_from(["buf", "src"])), region, draw(st.booleans()), Loc("k.py", 30))
    if not remote:
        return launch(Topology(1), [local + sender + receiver + [access]], scratch=SCRATCH, detect_races=True)
    reader = draw(st.sampled_from([0, 1]))
    bodies = [sender + ([access] if reader == 0 else []), receiver + ([access] if reader == 1 else [])]
    return launch(Topology(2), bodies, scratch=SCRATCH, detect_races=True)


@pytest.mark.rule("DR-6", "DR-7", "ERR-27")
@settings(max_examples=1000 if os.environ.get("SEMCHECK_PROFILE") == "ci-long" else 150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(sized_copies())
def test_eager_races_of_copies_of_0_1_or_2_elements_are_the_detector_s(program):
    """Copies of 0, 1 or 2 elements, waited for all or none of their bytes, local or remote, with or without a send
    semaphore: under eager semcheck confirms a race exactly where the detector's clocks over every schedule find
    one (`detector_race`), the empty windows ERR-27 reads as meeting included."""
    if fast_run(program, "eager", record=False).state.failure is not None:
        return  # a wait for 0 on a counter no signal reached fails (RACE-1): deadlock-free's business
    truth = detector_race(program)
    if truth is None:
        return
    report = find_races(program, "eager")
    if truth:
        assert any(r.confirmed for r in report.races), "a race of the detector's was missed"
    else:
        assert not any(r.confirmed for r in report.races), "a confirmed race the detector never reports"


sys.path.insert(0, str(Path(__file__).resolve().parent / "kernels"))
import empty_copy_cases as ec  # noqa: E402

CASES = sorted(ec.RECORDED)


def _kernel_verdict(name: str, mode: str):
    from semcheck.checker.frontend.lower import lower_kernel
    from semcheck.checker.frontend.trace import trace_kernels

    (call,) = trace_kernels(*ec.build_case(name, dma_mode=mode))
    return decide("race-free", lower_kernel(call), mode)


@pytest.mark.jax
@pytest.mark.rule("ERR-34", "ERR-27", "DR-6", "DR-7", "DR-48", "ACC-51")
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[1]}")
def test_semcheck_violates_race_free_exactly_where_the_interpreter_reported_a_race(case):
    """jax's detector ran each kernel (`RECORDED`): where it reported a race race-free is violated; where it was
    silent race-free is never violated: proved under eager where a wait orders the copy, unknown where only the
    read's whole window keeps the detector from meeting the empty one (ERR-27), and under on_wait, where the empty
    copy's task is never run, proved: each kernel has one core per device and no remote copy, and its own run
    leaves the task queued, so no run performs it (ACC-51)."""
    name, mode = case
    v = _kernel_verdict(name, mode)
    if ec.RECORDED[case] == "RACE":
        assert v.verdict == "violated", v
    elif name == "unwaited_whole":
        assert v.verdict == "unknown" and v.stats.get("rule") == "ERR-27", v
    else:
        assert v.verdict == "proved", v


@pytest.mark.jax
@pytest.mark.slow
@pytest.mark.rule("ERR-34")
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[1]}")
def test_the_recorded_empty_copy_outcomes_are_the_interpreters(case):
    assert ec.run_case(*case) == ec.RECORDED[case]


@pytest.mark.jax
@pytest.mark.rule("ACC-51")
def test_a_slice_block_headed_by_an_empty_slice_is_race_free_under_on_wait():
    """examples/kv_slices_empty_lead.py: the empty slice heading the second block is waited for 0 and never
    popped, so the call's read of the cache meets no copy of it (jax's detector reports no race there)."""
    from semcheck.testing import verify_target

    path = Path(__file__).resolve().parents[1] / "examples" / "kv_slices_empty_lead.py"
    data, _, _ = verify_target(str(path), devices=2, dma_mode="on_wait", properties=["race-free"], cache=False)
    (row,) = [r for r in data["results"] if r["property"] == "race-free"]
    assert row["verdict"] == "proved", row
