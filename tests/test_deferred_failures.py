"""ACC-15: the properties of an on_wait program whose copy raises in the waiter that runs it (ACC-11), decided on
the runs up to that wait: proofs of the program with the view made indexable hold, a violation counts only
where its witness replays without the failure, and anything else stays unknown."""

from __future__ import annotations

import pytest

from semcheck.checker.properties.checking import check_program
from semcheck.model import (Access, DmaStart, InterpreterView, Loc, Scratch, SemRef, Topology, Wait, launch,
                            run)
from semcheck.model.ops import Region

SCRATCH = [Scratch("sems", 1), Scratch("buf", kind="buffer", nbytes=64),
           Scratch("src", kind="buffer", nbytes=128, memory_space="hbm")]
BAD = InterpreterView("ReshapeTransform", "copy", "k.py:10", side="source")


def box(*dims):
    return Region(tuple(dims))


def _bad_copy() -> list:
    """A local copy through a view the interpreter cannot index, and its wait: the wait raises in every run."""
    return [DmaStart(SemRef("sems", 0), 32, src_buf="src", src_region=box((0, 8)), dst_buf="buf",
                     dst_region=box((0, 8)), view_error=BAD, loc=Loc("k.py", 10)),
            Wait(SemRef("sems", 0), 32, kind="dma", loc=Loc("k.py", 11))]


def _store(line: int) -> Access:
    return Access("src", box((64, 72)), True, Loc("k.py", line))


def _verdicts(bodies, topology) -> dict:
    program = launch(topology, bodies, scratch=SCRATCH)
    return program, {v.property: v for v in check_program(program, "on_wait")}


@pytest.mark.rule("ACC-15", "ACC-11")
def test_every_property_is_decided_when_every_run_raises_in_a_waiter():
    _, vs = _verdicts([_bad_copy(), []], Topology(2))
    assert vs["deadlock-free"].verdict == "violated"
    assert [loc.line for loc in vs["deadlock-free"].witness.locs] == [10, 11]  # the copy, the wait that runs it
    assert not [v for v in vs.values() if v.verdict == "unknown"], vs
    assert all(v.holds for p, v in vs.items() if p != "deadlock-free")
    assert "ACC-15" in vs["race-free"].reason


@pytest.mark.rule("ACC-15", "DR-1")
def test_a_race_before_the_failing_wait_is_violated_with_its_schedule():
    # the two cores of one device store to one HBM window before core 0 reaches the wait that raises
    program, vs = _verdicts([[_store(20), *_bad_copy()], [_store(30)]], Topology(1, 2))
    race = vs["race-free"]
    assert race.verdict == "violated" and race.stats.get("rule") == "ACC-15"
    assert {loc.line for loc in race.witness.locs} >= {20, 30}
    assert not run(program, "on_wait", race.witness.schedule, finish=False).failures  # a run that has not failed


@pytest.mark.rule("ACC-15", "ACC-39")
def test_a_race_only_past_the_failing_wait_is_not_reported():
    # core 0's store comes after a wait that raises in every run: no run of the interpreter gets there, but the
    # program with the view made indexable races there; ACC-15 does not claim it, and ACC-39 proves it absent
    # (only the failing copy signals that wait's semaphore)
    _, vs = _verdicts([[*_bad_copy(), _store(20)], [_store(30)]], Topology(1, 2))
    race = vs["race-free"]
    assert race.verdict == "proved" and race.stats.get("rule") == "ACC-39", race
    assert vs["deadlock-free"].verdict == "violated"
