"""ACC-39 and ERR-33: under on_wait, a wait that asks more than every signal a run can get to it before it fails (the others
come from copies that raise in their waiter) is never passed; `race-free` is proved on the program with the views
made indexable held before those waits, with the copies no remaining wait can run moved apart."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from semcheck.checker.properties.checking import check_program
from semcheck.checker.properties.dead_waits import held_at_dead_waits
from semcheck.checker.properties.failing_runs import indexable
from semcheck.model import (Access, AllocSem, DmaStart, InterpreterView, Loc, Scratch, SemRef, Signal, Topology,
                            Wait, launch)
from semcheck.model.explore import ExplorationLimit, explore
from semcheck.model.ops import Region

SCRATCH = [Scratch("sems", 2), Scratch("buf", kind="buffer", nbytes=64),
           Scratch("src", kind="buffer", nbytes=128, memory_space="hbm")]
BAD = InterpreterView("ReshapeTransform", "copy", "k.py:10", side="source")


def box(*dims):
    return Region(tuple(dims))


def _copy(line: int, *, sem: int = 0, bad: bool = False, rows=(0, 8)) -> DmaStart:
    return DmaStart(SemRef("sems", sem), 32, src_buf="src", src_region=box(rows), dst_buf="buf",
                    dst_region=box((0, 8)), view_error=BAD if bad else None, loc=Loc("k.py", line))


def _wait(line: int, *, sem: int = 0, value: int = 32) -> Wait:
    return Wait(SemRef("sems", sem), value, kind="dma", loc=Loc("k.py", line))


def _store(line: int, rows=(64, 72)) -> Access:
    return Access("src", box(rows), True, Loc("k.py", line))


def _race_free(bodies, topology=Topology(1, 2)):
    program = launch(topology, bodies, scratch=SCRATCH)
    return program, {v.property: v for v in check_program(program, "on_wait")}["race-free"]


@pytest.mark.rule("ACC-39", "ACC-15")
def test_a_race_past_a_wait_only_failing_copies_signal_is_proved_absent():
    # core 0's store comes after a wait only its failing copy could satisfy: no run gets there before it fails
    _, race = _race_free([[_copy(10, bad=True), _wait(11), _store(20)], [_store(30)]])
    assert race.verdict == "proved" and race.stats.get("rule") == "ACC-39", race
    assert "k.py:11" in race.reason and "on every run up to its failure" in race.reason


@pytest.mark.rule("ACC-39")
def test_a_wait_another_copy_can_satisfy_is_not_dead():
    # a good copy of the other core signals the same device's semaphore with enough bytes: the wait may pass
    # (semaphores are per core: core 1's copy signals core 0's)
    bodies = [[_copy(10, bad=True), _wait(11), _store(20)],
              [dataclasses.replace(_copy(30, rows=(16, 24)), core=0), _store(31)]]
    program, race = _race_free(bodies)
    assert held_at_dead_waits(program, indexable(program), "on_wait") is None
    assert race.verdict == "violated" and race.stats.get("rule") != "ACC-39", race  # core 1's copy lets it pass
    # the same wait asking more than the good copy brings is dead again
    bodies[0][1] = _wait(11, value=64)
    program, race = _race_free(bodies)
    assert held_at_dead_waits(program, indexable(program), "on_wait") is not None
    assert race.verdict == "proved" and race.stats.get("rule") == "ACC-39", race


@pytest.mark.rule("ACC-39")
def test_a_copy_started_before_the_dead_wait_whose_wait_lies_past_it_is_moved_apart():
    # both cores start a good copy into one window before core 0's dead wait; each waits for it only past
    # core 0's dead wait (core 1 waits on the same device's semaphore 1 after its own failing copy's dead wait)
    into = [_copy(12, sem=1, rows=(16, 24)), _copy(13, bad=True), _wait(14)]
    bodies = [[*into, _wait(15, sem=1)], [*into, _wait(15, sem=1)]]
    program, race = _race_free(bodies)
    assert race.verdict == "proved" and race.stats.get("rule") == "ACC-39", race
    held = held_at_dead_waits(program, indexable(program), "on_wait")
    moved = [op for ops in held.program.cores for op in ops if type(op) is DmaStart and op.loc.line == 12]
    assert len(moved) == 2 and all(op.dst_buf.startswith("unrun-copy-") for op in moved)
    assert len({op.dst_buf for op in moved}) == 2


@pytest.mark.rule("ACC-39")
def test_a_signal_through_another_label_of_the_same_id_keeps_the_wait_live():
    # each core allocates one run_scoped semaphore, under a label of its own: both get the same id (each core's
    # counter), so core 0's signal through its label lands on the semaphore core 1 waits on through its own
    # (jax's interpreter resolves a reference by the issuing core's id); the wait can pass, so it is not dead,
    # and core 1 is held only at its wait for the failing copy
    bodies = [[AllocSem("mine", 1, "a", "core", Loc("k.py", 1)),
               Signal(SemRef("mine", 0), 1, core=1, loc=Loc("k.py", 2)), _store(3)],
              [AllocSem("yours", 1, "b", "core", Loc("k.py", 5)), _copy(6, bad=True),
               Wait(SemRef("yours", 0), 1, loc=Loc("k.py", 7)), _store(8), _wait(9)]]
    program = launch(Topology(1, 2), bodies, scratch=SCRATCH)
    held = held_at_dead_waits(program, indexable(program), "on_wait")
    assert held is not None and held.loc.line == 9, held


def _op(draw, line: int, core: int):
    kind = draw(st.sampled_from(["bad", "good", "wait", "signal", "store", "own-wait", "own-signal"]))
    sem = draw(st.integers(0, 1))
    own = SemRef(f"own{core}", 0)  # the core's run_scoped semaphore: the same id on both, under another label
    if kind == "own-wait":
        return Wait(own, 1, loc=Loc("k.py", line))
    if kind == "own-signal":
        return Signal(own, 1, device=draw(st.sampled_from([None, 0, 1])), loc=Loc("k.py", line))
    if kind in ("bad", "good"):
        return _copy(line, sem=sem, bad=kind == "bad", rows=draw(st.sampled_from([(0, 8), (16, 24)])))
    if kind == "wait":
        return _wait(line, sem=sem, value=draw(st.sampled_from([1, 32, 64])))
    if kind == "signal":
        return Signal(SemRef("sems", sem), draw(st.sampled_from([1, 32])), device=draw(st.sampled_from([None, 0, 1])),
                      loc=Loc("k.py", line))
    return _store(line, draw(st.sampled_from([(64, 72), (0, 8)])))


@st.composite
def programs(draw):
    bodies = [[AllocSem(f"own{c}", 1, f"site{c}", "core", Loc("k.py", 100 * c)),
               *[_op(draw, 100 * c + i, c) for i in range(1, draw(st.integers(2, 5)))]] for c in range(2)]
    return launch(Topology(2), bodies, scratch=SCRATCH)


@pytest.mark.rule("ACC-39")
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_no_explored_run_passes_a_dead_wait_or_runs_a_copy_moved_apart(program):
    # every schedule of the program itself (no reduction): no terminal state has a core past its dead wait, and
    # no good copy moved apart has run a half (its task stays queued until the run ends)
    held = held_at_dead_waits(program, indexable(program), "on_wait")
    if held is None:
        return
    try:
        ex = explore(program, "on_wait", max_states=20_000, reduce=False)
    except ExplorationLimit:
        return
    moved = {op.loc for c, ops in enumerate(held.program.cores) for pc, op in enumerate(ops)
             if type(op) is DmaStart and op.src_buf.startswith("unrun-copy-")
             and program.cores[c][pc].view_error is None}  # a copy no wait before the holds can run
    for outcome in ex.outcomes:
        state = outcome.state
        assert all(state.pcs[c] <= pos for c, pos in held.holds.items()), (outcome.kind, state.pcs, held.holds)
        assert not [d for d in state.dmas if d.loc in moved and d.phase > 0], state.dmas


@pytest.mark.rule("ERR-33", "ACC-39")
def test_a_wait_that_pops_a_failing_copy_before_the_good_one_under_it_is_dead():
    # core 0 queues a good copy and then a failing one on one semaphore: its wait has bytes enough in the good copy
    # (not dead by ACC-39's count), but it pops the failing copy's task first (last in, first out) and raises
    bodies = [[_copy(10), _copy(11, bad=True), _wait(12), _store(20)], [_store(30)]]
    program, race = _race_free(bodies)
    held = held_at_dead_waits(program, indexable(program), "on_wait")
    assert held is not None and list(held.holds) == [0] and held.runs_first.loc == Loc("k.py", 11)
    assert program.cores[0][held.holds[0]].loc == held.loc == Loc("k.py", 12)
    assert race.verdict == "proved" and race.stats.get("rule") == "ERR-33", race
    assert "k.py:12" in race.reason and "k.py:11" in race.reason and "last-in-first-out" in race.reason


@pytest.mark.rule("ERR-33")
def test_a_good_copy_queued_over_the_failing_one_or_after_a_wait_lets_the_wait_pass():
    # the good copy queued last is popped first and brings the bytes: the wait may pass, and the race is shown
    program, race = _race_free([[_copy(11, bad=True), _copy(10), _wait(12), _store(20)], [_store(30)]])
    assert held_at_dead_waits(program, indexable(program), "on_wait") is None
    assert race.verdict == "violated", race
    # a wait between the good copy and the failing one may have run the good copy already, its bytes still counted
    bodies = [[_copy(10), _wait(9, value=1), _copy(11, bad=True), _wait(12, value=31), _store(20)], [_store(30)]]
    program, race = _race_free(bodies)
    assert held_at_dead_waits(program, indexable(program), "on_wait") is None
    assert race.verdict == "violated", race
    # a good copy another core queues on the same queue may land over the failing task at any time
    bodies = [[_copy(10), _copy(11, bad=True), _wait(12), _store(20)],
              [dataclasses.replace(_copy(30, rows=(16, 24)), core=0), _store(31)]]
    program, _ = _race_free(bodies)
    assert held_at_dead_waits(program, indexable(program), "on_wait") is None


@st.composite
def queued_programs(draw):
    # core 0 queues good and failing copies on one semaphore in every order, with waits among them, and then
    # waits; core 1 may queue copies onto core 0's queue or its own, and stores
    def copy(line, bad, cores):
        rows = draw(st.sampled_from([(0, 8), (16, 24)]))
        return dataclasses.replace(_copy(line, bad=bad, rows=rows), core=draw(st.sampled_from(cores)))

    def op(line, cores):
        kind = draw(st.sampled_from(["bad", "good", "good", "wait"]))
        if kind == "wait":
            return _wait(line, value=draw(st.sampled_from([1, 32])))
        return copy(line, kind == "bad", cores)

    first = [op(100 + i, [None, None, 1]) for i in range(draw(st.integers(1, 4)))]
    first.insert(draw(st.integers(0, len(first))), copy(99, True, [None]))
    first += [_wait(110, value=draw(st.sampled_from([1, 32, 64]))), _store(111)]
    second = [draw(st.sampled_from([copy(200 + i, False, [0, None]), _store(200 + i), _wait(200 + i, value=1)]))
              for i in range(draw(st.integers(0, 2)))]
    return launch(Topology(1, 2), [first, second + [_store(220)]], scratch=SCRATCH)


@pytest.mark.rule("ERR-33")
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(queued_programs())
def test_no_explored_run_passes_a_wait_that_pops_a_failing_copy_first(program):
    # every schedule of the program itself (no reduction): no terminal state has a core past the wait the LIFO
    # rule finds dead (a run that pops the failing task raises there and ends)
    held = held_at_dead_waits(program, indexable(program), "on_wait")
    if held is None:
        return
    try:
        ex = explore(program, "on_wait", max_states=20_000, reduce=False)
    except ExplorationLimit:
        return
    for outcome in ex.outcomes:
        assert all(outcome.state.pcs[c] <= pos for c, pos in held.holds.items()), (outcome.kind, outcome.state.pcs)


@pytest.mark.rule("DR-51", "ERR-33")
def test_the_held_program_is_checked_before_the_program_with_the_views_made_indexable(monkeypatch):
    # a proof on the held program holds whatever the indexable program's race passes would find, so when there is
    # one those passes (a race pass, ERR-24's runs, ERR-29's and ERR-31's passes) are not run at all
    from semcheck.checker.properties import failing_runs

    analysed = []
    real = failing_runs.Analysis
    monkeypatch.setattr(failing_runs, "Analysis", lambda program, *a, **k: analysed.append(program) or real(program, *a, **k))

    def race_free(bodies):
        program = launch(Topology(1, 2), bodies, scratch=SCRATCH)
        analysed.clear()
        (v,) = check_program(program, "on_wait", ("race-free",))
        return program, v

    program, race = race_free([[_copy(10), _copy(11, bad=True), _wait(12), _store(20)], [_store(30)]])
    assert race.verdict == "proved" and race.stats.get("rule") == "ERR-33", race
    held = held_at_dead_waits(program, indexable(program), "on_wait")
    assert analysed == [held.program]  # the held program alone, never the indexable one
    # without a dead wait the indexable program is checked as before (ACC-15) and its race shown
    program, race = race_free([[_copy(11, bad=True), _copy(10), _wait(12), _store(20)], [_store(30)]])
    assert race.verdict == "violated" and analysed[0] == indexable(program), race
