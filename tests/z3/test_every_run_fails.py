"""RUN-9 on generated programs: when semcheck says every run fails, every explored run fails.

checker/properties/failing_runs.py decides deadlock-free, exit-balance and race-free of a program whose S'
ends at a failing position (RUN-11); the explorer (RUN-4) enumerates every interleaving.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from z3_strategies import examples, programs

import z3_truth as truth
from semcheck.checker.properties.analysis import Analysis
from semcheck.checker.properties.failing_runs import failing_run_verdict
from semcheck.checker.properties.decide import decide
from semcheck.model.run import run


@pytest.mark.rule("RUN-9", "RUN-10", "ERR-16", "ERR-17")
@examples(300)
@given(programs())
def test_when_every_run_fails_by_semcheck_every_explored_run_fails(p):
    for mode in ("eager", "on_wait"):
        facts = Analysis(p).mode(mode)
        end = facts.every_run_fails
        if end is None:
            continue
        ex = truth.explored(p, mode)
        assert {o.kind for o in ex.outcomes} == {"error"}, (mode, ex.kinds())
        dl = failing_run_verdict("deadlock-free", p, mode, facts=facts, recheck=decide)
        assert dl.verdict == "violated" and dl.witness.schedule
        eb = failing_run_verdict("exit-balance", p, mode, facts=facts, recheck=decide)
        if eb is not None and eb.holds:
            # no run reaches an exit check: no explored outcome warns at an exit
            assert not any(o.state.warnings for o in ex.outcomes), mode


@pytest.mark.rule("ERR-17", "PROP-5")
@examples(300)
@given(programs())
def test_exit_balance_of_runs_that_fail_agrees_with_every_explored_run(p):
    """ERR-17: proved means no explored run ends with a count left or a copy pending on a device that
    passed its exit check; violated means one does."""
    from semcheck.checker.properties.exit_balance import exit_balance

    for mode in ("eager", "on_wait"):
        facts = Analysis(p).mode(mode)
        if facts.every_run_fails is None:
            continue
        v = failing_run_verdict("exit-balance", p, mode, facts=facts, recheck=decide) or exit_balance(p, mode, facts=facts)
        assert v.verdict in ("proved", "vacuous", "violated"), v.reason
        ex = truth.explored(p, mode)
        exited = truth.exit_devices(p)
        left = False
        for o in ex.outcomes:
            passed = {d for d in exited if truth_passed(p, o.state, d)}
            cores = {c for d in passed for c in p.topology.cores_of_device(d)}
            if any(n != 0 and k[1] in cores for k, n in o.state.counts.items()):
                left = True
        if v.holds:  # proved, or vacuous (REP-20): no run left a count at a passed exit either way
            assert not left, mode
        else:  # the witness, the run to just before the failure, leaves it (or a copy pending) on such a device
            state = run(p, mode, v.witness.schedule, finish=False)
            passed = {d for d in exited if truth_passed(p, state, d)}
            cores = {c for d in passed for c in p.topology.cores_of_device(d)}
            assert any(n != 0 and k[1] in cores for k, n in state.counts.items()) or any(
                d.phase < 2 and (d.src_core in cores or d.dst_core in cores) for d in state.dmas), mode


def truth_passed(p, state, d) -> bool:
    """Whether device d's exit check ran in `state` (its checking core is past it)."""
    from semcheck.model.ops import ExitCheck

    for c, ops in enumerate(p.cores):
        for i, op in enumerate(ops):
            if type(op) is ExitCheck and op.device == d:
                return state.pcs[c] > i
    return False


@pytest.mark.rule("PRG-208")
@examples(300)
@given(programs())
def test_a_failure_raised_in_every_run_is_every_explored_run_s(p):
    """PRG-208: where semcheck says every interpreted run raises one failure, in both modes, every explored
    outcome of both modes is that failure."""
    from semcheck.checker.programs.interpreter import raised_in_every_run

    raised = raised_in_every_run(p)
    if raised is None:
        return
    for mode in ("eager", "on_wait"):
        ex = truth.explored(p, mode)
        assert {o.kind for o in ex.outcomes} == {"error"}, (mode, ex.kinds())
        assert {o.failure.violation for o in ex.outcomes} == {raised}, mode


@pytest.mark.rule("PRG-217")
@examples(300)
@given(programs())
def test_a_failure_raised_in_every_run_of_a_mode_is_every_explored_run_of_it(p):
    """PRG-217: where semcheck says every run of a mode raises one failure, every explored outcome of that mode is
    that failure (the other mode may raise another, or none)."""
    from semcheck.checker.programs.interpreter import raised_per_mode

    for mode, raised in raised_per_mode(p).items():
        if raised is None:
            continue
        ex = truth.explored(p, mode)
        assert {o.kind for o in ex.outcomes} == {"error"}, (mode, ex.kinds())
        assert {o.failure.violation for o in ex.outcomes} == {raised}, mode
