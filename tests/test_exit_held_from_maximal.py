"""RUN-45: exit-balance's held run read off the program's maximal run.

Under `eager` and `hardware`, in a program no run of which fails, when every check ends its core
(at most a barrier after it, the last operation of each participant), the run that holds every
checking core before its check ends where the maximal run ends, each core capped at the start of
its tail; its counts, copies and failures are the maximal run's. Held to the held fast run itself
on generated programs, and the per-device warnings to those computed from that run.

RUN-46: the search for a quiet run tries the sets of one that cover first; the warnings are held to
the search that makes every run of one first. RUN-48: the rotation the interpreter's modes share
is each mode's own.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strategies import programs

from semcheck.checker.properties import exit_balance
from semcheck.checker.properties.exit_balance import (
    _exit_checks,
    _held_at_checks,
    _never_fails,
    _orbit_rep,
    _warnings,
    before_checks,
    tail_caps,
)
from semcheck.checker.properties.analysis import Analysis
from semcheck.checker.static.least_stuck import maximal_run
from semcheck.checker.static.symmetry import find_rotation
from semcheck.checker.static.lowering import lower
from semcheck.model import Loc, Scratch, SemRef, Signal, Topology, Wait, launch
from semcheck.model.fast import fast_run

sys.path.insert(0, str(Path(__file__).resolve().parent / "z3"))
from z3_strategies import programs as z3_programs  # noqa: E402


def _applies(program, mode):
    checks = _exit_checks(program)
    low = lower(program, mode)
    if not checks or not _never_fails(program, mode, low):
        return None
    caps = tail_caps(program, checks)
    return None if caps is None else (checks, low, caps)


@pytest.mark.rule("RUN-45")
@pytest.mark.parametrize("mode", ["eager", "hardware"])
@settings(max_examples=150, deadline=None)
@given(program=programs())
def test_the_held_run_is_the_maximal_run_capped_at_the_tails(mode, program):
    found = _applies(program, mode)
    if found is None:
        return
    checks, low, caps = found
    whole = maximal_run(program, mode)
    if whole.failure is not None:
        return
    held = fast_run(program, mode, hold={c: x for c, x in checks.values()}, record=False).state
    read = before_checks(whole.state, caps)
    assert read.pcs == held.pcs
    assert dict(read.counts) == dict(held.counts)
    assert [d.phase for d in read.dmas] == [d.phase for d in held.dmas]
    assert read.failures == held.failures == ()
    if _held_at_checks(program, mode, checks) is not None:  # the reading exit-balance takes
        assert _held_at_checks(program, mode, checks, whole, low).pcs == held.pcs


@pytest.mark.rule("RUN-45")
@pytest.mark.parametrize("mode", ["eager", "hardware"])
@settings(max_examples=100, deadline=None)
@given(program=programs())
def test_the_warnings_are_those_of_the_held_run(mode, program):
    low = lower(program, mode)
    if not low.ok or not _exit_checks(program):
        return
    whole = maximal_run(program, mode)
    if whole.failure is not None:
        return
    excess = {}
    assert _warnings(program, mode, low, excess, whole) == _warnings(program, mode, low, excess)


@pytest.mark.rule("RUN-45")
def test_a_tail_with_more_than_a_barrier_is_not_read_off():
    # the launch's clean-up barrier ends every core: RUN-45 applies; an operation after it does not
    def body(d):
        return [Signal(SemRef("s"), 1, device=(d + 1) % 2, loc=Loc("k.py", 1)), Wait(SemRef("s"), 1, loc=Loc("k.py", 2))]

    program = launch(Topology(2), [body(0), body(1)], scratch=[Scratch("s")])
    checks = _exit_checks(program)
    assert tail_caps(program, checks) is not None
    cores = list(program.cores)
    cores[0] = cores[0] + (cores[0][-1],)  # a second clean-up barrier on core 0 only
    assert tail_caps(dataclasses.replace(program, cores=tuple(cores)), checks) is None


@pytest.mark.rule("RUN-46")
@pytest.mark.parametrize("mode", ["eager", "hardware"])
@pytest.mark.parametrize("bounds", [True, False])
@settings(max_examples=200, deadline=None)
@given(program=st.one_of(programs(), z3_programs()))
def test_the_quiet_run_search_trying_sets_of_one_first_decides_as_the_whole_search(mode, bounds, program):
    # without the lower bounds (past their size limit, as at pod scale) the search decides more devices
    low = lower(program, mode)
    if not low.ok or not _exit_checks(program):
        return
    saved = exit_balance.must_have_passed
    if not bounds:
        exit_balance.must_have_passed = lambda *args, **kwargs: None
    try:
        fast = _warnings(program, mode, low, {})
        exit_balance.SINGLETONS_FIRST = False
        assert fast == _warnings(program, mode, low, {})
    finally:
        exit_balance.SINGLETONS_FIRST = True
        exit_balance.must_have_passed = saved


@pytest.mark.rule("RUN-48")
@settings(max_examples=150, deadline=None)
@given(program=st.one_of(programs(), z3_programs()))
def test_the_rotation_the_modes_share_is_each_modes_own(program):
    shared = Analysis(program)
    for mode in ("eager", "on_wait", "hardware"):
        facts = shared.mode(mode)
        if not facts.lowering.ok:
            continue
        own = find_rotation(lower(program, mode))
        assert (facts.rotation is None) == (own is None)
        if own is not None:
            assert facts.rotation == own
            checks = _exit_checks(program)
            assert _orbit_rep(facts.lowering, checks, lambda: facts.rotation) == _orbit_rep(lower(program, mode), checks)


@pytest.mark.rule("RUN-48")
@settings(max_examples=150, deadline=None)
@given(program=st.one_of(programs(), z3_programs()))
def test_the_totals_of_a_hung_program_the_modes_share_are_each_modes_own(program):
    """exit-balance's counts at the stuck positions of a program that hangs, made once for the interpreter's modes
    of one analysis: every verdict (reason, witness, details) is what each mode's own analysis gives."""
    shared = Analysis(program)
    for mode in ("eager", "on_wait", "hardware"):
        mine = exit_balance.exit_balance(program, mode, facts=shared.mode(mode))
        own = exit_balance.exit_balance(program, mode)
        assert (mine.verdict, mine.reason, mine.witness) == (own.verdict, own.reason, own.witness)


@pytest.mark.rule("RUN-48")
def test_the_totals_of_a_hung_program_are_counted_once_for_the_interpreter():
    """The deadlocking ring: eager and on_wait hang at the same positions (RUN-3) on one lowering, so the counts
    exit-balance reads there are counted once; hardware, on its own lowering, counts its own."""
    sys.path.insert(0, str(Path(__file__).parent))
    from ring_programs import ring_allreduce

    program = ring_allreduce(4, bug="deadlock")
    counted = []
    real = exit_balance._hung

    def counting(*args):
        counted.append(args[2])
        return real(*args)

    shared = Analysis(program)
    saved, exit_balance._hung = exit_balance._hung, counting
    try:
        verdicts = [exit_balance.exit_balance(program, mode, facts=shared.mode(mode))
                    for mode in ("eager", "on_wait", "hardware")]
    finally:
        exit_balance._hung = saved
    assert all(v.verdict in ("proved", "violated") for v in verdicts)
    assert len(counted) == 2
