"""The analysis of a program: its checks share one object's facts, and nothing outlives it."""

from __future__ import annotations

import pytest
from hypothesis import given
from z3_strategies import examples, programs

from ring_programs import ring_allreduce
from semcheck.checker.checking import check_program
from semcheck.checker.analysis import Analysis, analysis_of
from semcheck.checker.static.least_stuck import s_prime_run
from semcheck.checker.static.lowering import lower
from semcheck.checker.static.system import EncodingBug


def test_checks_of_one_program_share_its_lowering_and_interpreter_modes_share_one() -> None:
    a = Analysis(ring_allreduce(3))
    assert a.mode("hardware").lowering is a.mode("hardware").lowering
    eager, on_wait = a.mode("eager").lowering, a.mode("on_wait").lowering
    assert (eager.mode, on_wait.mode) == ("eager", "on_wait")
    assert eager.contributions is on_wait.contributions  # one lowering, two mode labels
    assert a.mode("hardware").lowering.contributions is not eager.contributions


def test_two_analyses_of_one_program_share_nothing() -> None:
    p = ring_allreduce(3)
    assert Analysis(p).mode("eager").lowering is not Analysis(p).mode("eager").lowering
    assert lower(p, "eager") is not lower(p, "eager")  # the lowering itself keeps nothing


def test_check_program_reads_the_analysis_it_is_handed() -> None:
    p = ring_allreduce(3)
    a = Analysis(p)
    check_program(p, "eager", ("deadlock-free",), fold=False, analysis=a)
    low = a.mode("eager").lowering
    check_program(p, "on_wait", ("exit-balance",), fold=False, analysis=a)
    assert a.mode("on_wait").lowering.contributions is low.contributions
    with pytest.raises(ValueError):
        check_program(ring_allreduce(2), "eager", ("deadlock-free",), analysis=a)
    with pytest.raises(ValueError):
        analysis_of(p, "hardware", a.mode("eager"))


@examples(300)
@given(program=programs())
@pytest.mark.rule("RUN-3")
def test_eager_and_on_wait_runs_of_s_prime_end_alike(program) -> None:
    """What the analysis shares between the interpreter's modes: S''s kind, positions and allocations."""
    low = lower(program, "eager")
    if not low.ok:
        return
    ends = []
    for mode in ("eager", "on_wait"):
        try:
            sp = s_prime_run(lower(program, mode))
        except EncodingBug:
            return  # a failing S' run: the lowering's own guard, no sharing is attempted
        ends.append((sp.kind, sp.state.pcs, held(sp.state.allocs)))
    assert ends[0] == ends[1]
    a = Analysis(program)
    first = a.mode("on_wait").end
    assert a.mode("eager").end is first
    assert (first.kind, first.pcs, held(first.allocs)) == ends[1]


def held(allocs) -> dict:
    """What id-agreement reads of each allocation a core holds."""
    return {k: (a.site, a.count, tuple(a.ids or ())) for k, a in allocs.items()}


@examples(100)
@given(programs())
@pytest.mark.rule("RUN-29")
def test_a_lowering_on_another_modes_happens_before_is_its_own(program):
    import dataclasses

    def fields(low):
        return {f.name: getattr(low, f.name) for f in dataclasses.fields(low) if f.name != "hb"}

    for mode, other in (("hardware", "eager"), ("on_wait", "hardware"), ("eager", "on_wait")):
        given_hb = lower(program, other).hb
        shared, own = lower(program, mode, hb=given_hb), lower(program, mode)
        assert shared.hb is given_hb
        assert fields(shared) == fields(own)
        assert [shared.hb.reach(c) for c in range(len(program.cores))] == [own.hb.reach(c) for c in range(len(program.cores))]
    # the analysis hands the first lowering's to the next mode's
    analysis = Analysis(program)
    assert analysis.mode("eager").lowering.hb is analysis.mode("hardware").lowering.hb
