"""ERR-49 .. ERR-51: the properties of runs that fail where only the model's runs follow (a copy's half at a freed
run_scoped buffer, BUF-14; a wait without a clock, RACE-1), decided on every run up to its failure through the
relaxed program, every run of which extends such a run."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import programs, scope_programs

from semcheck.checker.properties.checking import check_program
from semcheck.checker.properties.failing_prefixes import relaxed
from semcheck.model import (Access, AllocBuffer, DmaStart, FreeBuffer, Loc, Scratch, SemRef, Topology, Wait, launch,
                            run)
from semcheck.model.errors import UnclockedWait, UnknownBuffer
from semcheck.model.explore import ExplorationLimit, walk
from semcheck.model.ops import Region

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
