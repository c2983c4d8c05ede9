"""ERR-24: under on_wait, a race of copies (one event a copy's half) that one run performs before a waiter pops a
copy that raises (ACC-11) is a violation of the program itself; past the failing wait it stays ACC-15's unknown."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from semcheck.checker.properties.checking import check_program
from semcheck.model import (DmaStart, InterpreterView, Loc, Scratch, SemRef, Topology, Wait, launch, run)
from semcheck.model.ops import Region

SCRATCH = [Scratch("sems", 1), Scratch("buf", kind="buffer", nbytes=64),
           Scratch("out", kind="buffer", nbytes=128, memory_space="hbm")]
BAD = InterpreterView("ReshapeTransform", "copy", "k.py:10", side="source")


def _bad_copy() -> list:
    """A local copy through a view the interpreter cannot index, and the wait that runs it and raises."""
    return [DmaStart(SemRef("sems", 0), 32, src_buf="out", src_region=Region(((0, 8),)), dst_buf="buf",
                     dst_region=Region(((0, 8),)), view_error=BAD, loc=Loc("k.py", 10)),
            Wait(SemRef("sems", 0), 32, kind="dma", loc=Loc("k.py", 11))]


def _fill(line: int) -> list:
    """A copy from the core's own buffer into the device's shared output window, and its wait."""
    return [DmaStart(SemRef("sems", 0), 32, src_buf="buf", src_region=Region(((0, 8),)), dst_buf="out",
                     dst_region=Region(((16, 24),)), loc=Loc("k.py", line)),
            Wait(SemRef("sems", 0), 32, kind="dma", loc=Loc("k.py", line + 1))]


def _race(bodies):
    program = launch(Topology(1, 2), bodies, scratch=SCRATCH)
    return program, {v.property: v for v in check_program(program, "on_wait")}


@pytest.fixture(scope="module")
def before():
    # both cores copy into one window of the device's output; core 0 then waits a copy that raises
    return _race([[*_fill(20), *_bad_copy()], _fill(30)])


@pytest.mark.rule("ERR-24", "ACC-15")
def test_a_race_of_copies_run_before_the_failing_wait_is_violated(before):
    program, vs = before
    race = vs["race-free"]
    assert race.verdict == "violated" and race.stats.get("rule") == "ERR-24", race
    assert {loc.line for loc in race.witness.locs} >= {20, 30}
    state = run(program, "on_wait", race.witness.schedule, finish=False)
    assert not state.failures  # a run that has not failed ...
    assert all(d.phase == 2 for d in state.dmas[:2])  # ... in which both copies have landed
    assert vs["deadlock-free"].verdict == "violated"


@pytest.mark.rule("ERR-24", "ACC-15")
def test_a_race_past_the_failing_wait_stays_unknown():
    # core 0 starts its copy only after the wait that raises in every run: no run performs both copies
    _, vs = _race([[*_bad_copy(), *_fill(20)], _fill(30)])
    race = vs["race-free"]
    assert race.verdict == "unknown" and "ACC-15" in race.reason, race


@pytest.mark.rule("ERR-24")
def test_a_witness_that_fails_first_is_replaced_by_a_run_that_reaches_both_copies(before):
    # the schedule runs core 0 through its copy and into the wait that raises before core 1 starts its copy;
    # a run that brings both cores to their copies first performs both writes before any failure
    from semcheck.checker.properties.race_before_failure import both_run
    from semcheck.checker.properties.verdict import Witness
    from semcheck.model.race import event_pending
    from semcheck.model.state import State
    from semcheck.model.step import enabled, step

    program, _ = before
    starts = [next(pc for pc, op in enumerate(ops) if type(op) is DmaStart and op.view_error is None)
              for ops in program.cores]
    halves = [(0, starts[0], "write"), (1, starts[1], "write")]
    state, failing = State.initial(program), []
    while not state.failures:  # core 0 whenever it can move: it reaches the wait that raises first
        actor = min(enabled(program, "on_wait", state))
        state, failing = step(program, "on_wait", state, actor), [*failing, actor]
    assert not event_pending(program, state, 0, starts[0], "write")  # core 0's copy ran ...
    assert state.pcs[1] <= starts[1]  # ... before core 1 started its own
    got, alt = both_run(program, "on_wait", Witness("race", schedule=tuple(failing), details={"halves": halves}))
    assert got is not None and alt is None
    state = run(program, "on_wait", got, finish=False)
    assert not state.failures and not any(event_pending(program, state, *e) for e in halves)


def _fill_at(line: int, start: int) -> list:
    """`_fill` into the output's window from `start`."""
    return [DmaStart(SemRef("sems", 0), 32, src_buf="buf", src_region=Region(((0, 8),)), dst_buf="out",
                     dst_region=Region(((start, start + 8),)), loc=Loc("k.py", line)),
            Wait(SemRef("sems", 0), 32, kind="dma", loc=Loc("k.py", line + 1))]


@pytest.mark.rule("ERR-29", "ERR-24")
def test_another_race_is_shown_when_the_first_one_found_lies_past_the_failing_wait():
    # the race pass finds core 0's copy against core 1's first; core 0 copies only after its wait that raises, so
    # that race is in no run; core 1's second copy against core 2's is, before any wait raises
    bodies = [[*_bad_copy(), *_fill_at(20, 16)], [*_fill_at(30, 16), *_fill_at(50, 0)], _fill_at(60, 0)]
    program = launch(Topology(1, 3), bodies, scratch=SCRATCH)
    from semcheck.checker.properties.failing_runs import indexable
    from semcheck.model.race import find_races

    first = find_races(indexable(program), "on_wait").races[0]
    assert {program.cores[e.core][e.pc].loc.line for e in (first.first, first.second)} == {20, 30}
    race = {v.property: v for v in check_program(program, "on_wait")}["race-free"]
    assert race.verdict == "violated" and race.stats.get("rule") == "ERR-24", race
    assert {loc.line for loc in race.witness.locs} >= {50, 60}
    state = run(program, "on_wait", race.witness.schedule, finish=False)
    assert not state.failures


@pytest.mark.rule("ERR-29")
def test_find_races_stops_at_as_many_races_as_asked():
    from semcheck.checker.properties.failing_runs import indexable
    from semcheck.model.race import find_races

    bodies = [[*_fill_at(20, 16), *_fill_at(40, 0)], [*_fill_at(30, 16), *_fill_at(50, 0)]]
    program = indexable(launch(Topology(1, 2), bodies, scratch=SCRATCH))
    real = [[r for r in find_races(program, "on_wait", first=n).races if r.exact and r.confirmed] for n in (1, 2, 0)]
    assert [len(r) for r in real] == [1, 2, 2]


@pytest.mark.rule("ERR-29")
def test_the_race_shown_instead_brings_its_own_message_and_fix():
    bodies = [[*_bad_copy(), *_fill_at(20, 16)], [*_fill_at(30, 16), *_fill_at(50, 0)], _fill_at(60, 0)]
    program = launch(Topology(1, 3), bodies, scratch=SCRATCH)
    race = {v.property: v for v in check_program(program, "on_wait")}["race-free"]
    assert "k.py:50" in race.witness.message and "k.py:60" in race.witness.message, race.witness.message
    assert "k.py:20" not in race.witness.message and "k.py:20" not in (race.witness.hint or "")


# ERR-31: core 0's copy after its failing wait races core 1's first copy (the race pass's first race, in no run);
# core 1's second copy races core 2's, before any wait raises
_PAST_AND_BEFORE = [[*_bad_copy(), *_fill_at(20, 16)], [*_fill_at(30, 16), *_fill_at(50, 0)], _fill_at(60, 0)]


@pytest.mark.rule("ERR-31", "ERR-24")
def test_a_race_before_the_failing_waits_is_shown_when_every_race_tried_lies_past_them(monkeypatch):
    # ERR-29 tries 1 + ALTERNATIVES races; with none besides the first, it has only the race past the failing wait
    from semcheck.checker.properties import races

    monkeypatch.setattr(races, "ALTERNATIVES", 0)
    program = launch(Topology(1, 3), _PAST_AND_BEFORE, scratch=SCRATCH)
    race = {v.property: v for v in check_program(program, "on_wait")}["race-free"]
    assert race.verdict == "violated" and race.stats.get("rule") == "ERR-31", race
    assert {loc.line for loc in race.witness.locs} >= {50, 60} and "ERR-31" in race.witness.message
    state = run(program, "on_wait", race.witness.schedule, finish=False)
    assert not state.failures


def _remote_bad_copy(device: int) -> list:
    """A copy to `device` through a view the interpreter cannot index, on send semaphore `send` and receive
    semaphore `recv`, and the wait on its send semaphore."""
    return [DmaStart(SemRef("recv", 0), 32, src_sem=SemRef("send", 0), device=device, src_buf="out",
                     src_region=Region(((0, 8),)), dst_buf="buf", dst_region=Region(((0, 8),)), view_error=BAD,
                     loc=Loc("k.py", 10)),
            Wait(SemRef("send", 0), 32, kind="dma", loc=Loc("k.py", 11))]


@pytest.mark.rule("ERR-31")
def test_the_cut_holds_each_core_before_its_first_wait_that_may_run_a_failing_task():
    from semcheck.checker.properties.failing_runs import indexable
    from semcheck.checker.properties.race_before_failure import before_failing_waits

    scratch = [*SCRATCH, Scratch("send", 1), Scratch("recv", 1)]
    recv = Wait(SemRef("recv", 0), 32, kind="dma", loc=Loc("k.py", 40))
    other = Wait(SemRef("sems", 0), 32, kind="dma", loc=Loc("k.py", 41))
    # device 0 waits its send semaphore before its failing copy (that wait runs a good copy's read, not the
    # failing one's) and after it;
    # device 1, the destination, waits another semaphore and then the receive semaphore; device 2 is untouched
    good = DmaStart(SemRef("recv", 0), 32, src_sem=SemRef("send", 0), device=1, src_buf="out",
                    src_region=Region(((16, 24),)), dst_buf="buf", dst_region=Region(((0, 8),)), loc=Loc("k.py", 5))
    bodies = [[good, _remote_bad_copy(1)[1], *_fill(20), *_remote_bad_copy(1)], [*_fill(30), other, recv], _fill(50)]
    program = launch(Topology(3, 1), bodies, scratch=scratch)
    cut, ran = before_failing_waits(program, indexable(program), "on_wait")
    last_wait = [max(pc for pc, op in enumerate(ops) if type(op) is Wait) for ops in program.cores]
    assert len(cut.cores[0]) == last_wait[0]  # device 0 is held before the send wait after its copy
    assert len(cut.cores[1]) == last_wait[1]  # device 1 before the receive wait
    assert len(cut.cores[2]) == len(program.cores[2])
    fill0 = [pc for pc, op in enumerate(cut.cores[0]) if type(op) is DmaStart][1]
    bad = max(pc for pc, op in enumerate(cut.cores[0]) if type(op) is DmaStart)
    class E:  # the fields of an access event that `ran` reads
        def __init__(self, core, pc, half):
            self.core, self.pc, self.half = core, pc, half

    assert ran(E(0, fill0, "write")) and not ran(E(0, bad, "write"))
    assert before_failing_waits(indexable(program), indexable(program), "on_wait") is None  # nothing fails


@pytest.mark.rule("ERR-31")
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(0, 3), min_size=1, max_size=6), st.integers(0, 2), st.integers(0, 2))
def test_the_cut_program_runs_no_failing_task(lines, bad_core, dest):
    # whatever the copies around it, the cut program's maximal run is a run of the program that does not fail
    from semcheck.checker.properties.failing_runs import indexable
    from semcheck.checker.properties.race_before_failure import before_failing_waits
    from semcheck.model.fast import fast_run

    scratch = [*SCRATCH, Scratch("send", 1), Scratch("recv", 1)]
    bodies = [[op for k in lines for op in _fill_at(20 + 10 * k + core, 8 * (k % 2))] for core in range(3)]
    bodies[bad_core][len(bodies[bad_core]) // 2:len(bodies[bad_core]) // 2] = _remote_bad_copy(dest)
    bodies[dest].append(Wait(SemRef("recv", 0), 32, kind="dma", loc=Loc("k.py", 12)))
    program = launch(Topology(3, 1), bodies, scratch=scratch)
    cut, _ = before_failing_waits(program, indexable(program), "on_wait")
    out = fast_run(cut, "on_wait")
    state = run(program, "on_wait", out.schedule, finish=False)
    assert not state.failures and state.pcs == out.state.pcs
