"""ERR-49 .. ERR-51: the properties of runs that fail where only the model's runs follow (a copy's half at a freed
run_scoped buffer, BUF-14; a wait without a clock, RACE-1), decided on every run up to its failure through the
relaxed program, every run of which extends such a run."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import programs, scope_programs
from test_races import brute_force_race, detector_race, programs_with_accesses

from semcheck.checker.properties.checking import check_program
from semcheck.checker.properties.failing_prefixes import relaxed, renames
from semcheck.model import (Access, AllocBuffer, DmaStart, FreeBuffer, Loc, Scratch, SemRef, Topology, Wait, launch,
                            run)
from semcheck.model.errors import UnclockedWait, UnknownBuffer
from semcheck.model.explore import ExplorationLimit, walk
from semcheck.model.ops import AllocSem, Barrier, ExitCheck, Program, Region

MODES = ("eager", "on_wait")
SCRATCH = [Scratch("sems", 1), Scratch("src", kind="buffer", nbytes=128, memory_space="hbm"),
           Scratch("dst", kind="buffer", nbytes=128, memory_space="hbm")]


def box(*dims):
    return Region(tuple(dims))


def _late_writeback() -> list:
    """A write-back of a run_scoped buffer waited after its scope: under on_wait the wait runs the copy's read half
    when the manager no longer holds the buffer, and raises KeyError in every run (BUF-14)."""
    return [AllocBuffer("b1", 64, "vmem", "core"),
            DmaStart(SemRef("sems", 0), 32, src_buf="b1", src_region=box((0, 8)), dst_buf="dst",
                     dst_region=box((0, 8)), loc=Loc("k.py", 10)),
            FreeBuffer("b1"), Wait(SemRef("sems", 0), 32, kind="dma", loc=Loc("k.py", 11))]


def _store(line: int) -> Access:
    return Access("src", box((64, 72)), True, Loc("k.py", line))


def _verdicts(bodies, topology) -> tuple:
    program = launch(topology, bodies, scratch=SCRATCH)
    return program, {v.property: v for v in check_program(program, "on_wait")}


def _same(a, b) -> bool:
    """ERR-49: two states alike in all a step reads but the run_scoped keys and the clocks (and the keys the copies
    recorded for their halves)."""
    return (a.pcs, a.counts, a.allocs, a.tables, a.queues, a.warnings, a.reads, a.passed) == \
        (b.pcs, b.counts, b.allocs, b.tables, b.queues, b.warnings, b.reads, b.passed) and \
        [dataclasses.replace(d, buffers=(None, None)) for d in a.dmas] == \
        [dataclasses.replace(d, buffers=(None, None)) for d in b.dmas]


@pytest.mark.rule("ERR-49")
@settings(max_examples=60, deadline=None)
@given(scope_programs() | programs(max_devices=2, max_ops=3).map(lambda p: dataclasses.replace(p, detect_races=True)),
       st.sampled_from(MODES))
def test_every_run_up_to_its_failure_is_a_run_of_the_relaxed_program(program, mode):
    """Every state the walk of every state (RUN-60) reaches on the program, replayed on the relaxed program, is the
    same state; where the program's last step raises BUF-14's KeyError or RACE-1's assertion, the relaxed program's
    step does not fail."""
    clean = relaxed(program)
    reached = []
    try:
        walk(program, mode, lambda s, path, actors: reached.append((s, path())), max_states=3_000, reduce=False)
    except ExplorationLimit:
        return
    for state, schedule in reached:
        other = run(clean, mode, schedule, finish=False)
        if not state.failures:
            assert not other.failures and _same(state, other), schedule
            continue
        failed = state.failures[-1].violation
        if isinstance(failed, (UnknownBuffer, UnclockedWait)):
            assert not any(isinstance(f.violation, (UnknownBuffer, UnclockedWait)) for f in other.failures)
            before = run(clean, mode, schedule[:-1], finish=False)
            assert _same(run(program, mode, schedule[:-1], finish=False), before)


def _keyed(items, old: int, new: int) -> list:
    """A map's entries, the fixed-id semaphore `old` named `new` (ERR-49's renamed collective id)."""
    return sorted(repr(kv).replace(f"('fixed', {old})", f"('fixed', {new})") for kv in items)


@pytest.mark.rule("ERR-49", "SEM-3")
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(programs(max_devices=2, max_ops=4).filter(renames), st.sampled_from(MODES))
def test_every_run_up_to_a_collision_is_a_run_of_the_program_with_the_collective_id_renamed(program, mode):
    """Where some core allocates the collective id and every core fetches the barrier semaphore before using it, every
    state the walk of every state reaches without a failure, replayed on the program whose collective id no core
    allocates, is the same state but for that id's name (positions, allocations, the internal table, the fixed one,
    counts and queues), without a failure."""
    if not renames(program):
        return
    clean = relaxed(program, rename=True)
    old, new = program.collective_id, clean.collective_id
    reached = []
    try:
        walk(program, mode, lambda s, path, actors: reached.append((s, path())), max_states=3_000, reduce=False)
    except ExplorationLimit:
        return
    assert new != old and not any(new in state.tables.internal for state, _ in reached)
    for state, schedule in reached:
        if state.failures:
            continue
        other = run(clean, mode, schedule, finish=False)
        assert not other.failures, schedule
        assert (state.pcs, state.allocs, state.tables.internal) == (other.pcs, other.allocs, other.tables.internal)
        assert {new if i == old else i for i in state.tables.fixed} == set(other.tables.fixed)
        assert _keyed(state.counts.items(), old, new) == _keyed(other.counts.items(), old, new)
        assert _keyed(state.queues.items(), old, new) == _keyed(other.queues.items(), old, new)


@pytest.mark.rule("ERR-50", "ERR-49")
def test_a_proof_of_the_relaxed_program_holds_up_to_the_failure():
    program, vs = _verdicts([_late_writeback(), []], Topology(2))
    assert vs["deadlock-free"].verdict == "violated"  # KeyError in every on_wait run (BUF-14)
    for prop in ("dma-bytes", "race-free"):
        assert vs[prop].verdict == "proved" and vs[prop].stats.get("rule") == "ERR-50", vs[prop]
        assert "on every run up to its failure" in vs[prop].reason
    # the relaxed program completes: its proofs are of its own runs
    (own,) = check_program(relaxed(program), "on_wait", ("deadlock-free",))
    assert own.verdict == "proved"


@pytest.mark.rule("ERR-51", "ERR-50")
def test_a_race_before_the_failure_is_violated_and_one_after_it_is_not_decided():
    # the two cores of one device store to one HBM window before core 0's wait raises: a run shows the race first
    program, vs = _verdicts([[_store(20), *_late_writeback()], [_store(30)]], Topology(1, 2))
    race = vs["race-free"]
    assert race.verdict == "violated" and race.stats.get("rule") == "ERR-51", race
    assert {loc.line for loc in race.witness.locs} >= {20, 30}
    assert not run(program, "on_wait", race.witness.schedule, finish=False).failures
    # core 0's store after the wait that raises in every run: the relaxed program races there, no run of the
    # interpreter gets there, and nothing is claimed
    _, vs = _verdicts([[*_late_writeback(), _store(20)], [_store(30)]], Topology(1, 2))
    race = vs["race-free"]
    assert race.verdict == "unknown" and "ERR-51" in race.reason, race


@st.composite
def failing_race_programs(draw) -> Program:
    """`programs_with_accesses` whose runs may fail where only the model's runs follow: with race detection on and
    some waits for 0 (RACE-1's assertion where no signal reached the counter), or with a core writing a run_scoped
    buffer back and waiting for it inside or after the scope (BUF-14's KeyError under on_wait)."""
    program = draw(programs_with_accesses())
    cores = [list(ops) for ops in program.cores]
    if draw(st.booleans()):
        for ops in cores:
            for i, op in enumerate(ops):
                if type(op) is Wait and draw(st.booleans()):
                    ops[i] = dataclasses.replace(op, value=0)
        return dataclasses.replace(program, cores=tuple(map(tuple, cores)), detect_races=True)
    core = draw(st.integers(0, len(cores) - 1))
    body = [i for i, op in enumerate(cores[core]) if type(op) not in (AllocSem, AllocBuffer, Barrier, ExitCheck)]
    first = next((i for i, op in enumerate(cores[core]) if type(op) not in (AllocSem, AllocBuffer)), 0)
    at = draw(st.sampled_from([first, *[i + 1 for i in body]]))
    cell = draw(st.integers(0, 2))
    wait = Wait(SemRef("sems", 1), 1, kind="dma")
    block = [AllocBuffer("b1", 64, "vmem", "core"), Access("b1", box((cell, cell + 1)), True),
             DmaStart(SemRef("sems", 1), 1, src_buf="b1", src_region=box((cell, cell + 1)), dst_buf="buf",
                      dst_region=box((cell, cell + 1)))]
    block += [wait, FreeBuffer("b1")] if draw(st.booleans()) else [FreeBuffer("b1"), wait]
    cores[core][at:at] = block
    return dataclasses.replace(program, cores=tuple(map(tuple, cores)))


@pytest.mark.rule("ERR-50", "ERR-51", "PROP-7")
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(failing_race_programs(), st.sampled_from(MODES))
def test_race_free_up_to_the_failure_agrees_with_every_schedule(program, mode):
    """race-free decided on every run up to its failure never contradicts every schedule of the program, failing
    runs' prefixes included: jax's detector over every eager schedule (`detector_race`, each prefix's accesses
    checked as they run), a conflicting pair both pending in some reached state under on_wait (`brute_force_race`)."""
    (v,) = check_program(program, mode, ("race-free",), fold=False)
    if v.verdict not in ("proved", "violated") or v.stats.get("rule") not in ("ERR-50", "ERR-51"):
        return
    truth = detector_race(program) if mode == "eager" else brute_force_race(program, mode)
    if truth is None:
        return
    assert truth == (v.verdict == "violated"), (v.verdict, v.reason, program.name)


@pytest.mark.rule("ERR-50", "ERR-44", "RUN-60")
def test_past_the_explorer_s_budget_the_properties_of_one_state_are_decided_up_to_the_failure(monkeypatch):
    """Past ERR-19's budget neither the explorer nor RUN-60's walk of every state decides anything; the relaxed
    program's proofs still hold on every run up to its failure, the id properties of one state included
    (`id-agreement`, which reads a run's end, is left to ERR-44)."""
    from semcheck.checker.properties import failing_facts

    monkeypatch.setattr(failing_facts, "FALLBACK_STATES", 4)
    _, vs = _verdicts([_late_writeback(), _late_writeback()], Topology(2))
    for prop in ("dma-bytes", "race-free", "id-disjoint", "id-int16"):
        assert vs[prop].verdict == "proved" and vs[prop].stats.get("rule") == "ERR-50", vs[prop]
        assert "exceeded 4 states" in vs[prop].reason
    assert vs["id-agreement"].verdict != "proved" or "ERR-50" not in vs["id-agreement"].reason
