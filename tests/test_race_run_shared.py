"""DR-46: the maximal run and the race pass read one fast run of the program per run mode.

The race pass (DR-6, DR-37) records the calls of the program's fast run; the maximal run (RUN-3) is
that run continued. Where the analysis knows the pass will read the program's own run, the maximal
run records its calls and the pass reads them instead of running again. Held to the two runs made
apart: the same maximal run, schedule and state, and the same ordering, on generated programs.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_happens_before_reference import _key, many_senders
from test_races import _two_senders_then_read, programs_with_accesses

from semcheck.checker.properties.analysis import Analysis, ModeAnalysis
from semcheck.checker.static import least_stuck
from semcheck.model import happens_before as hb
from semcheck.model.access import accesses
from semcheck.model.fast import fast_run
from semcheck.model.ops import DMA_MODES


def _traced(program):
    def given_run(mode):
        out, trace = hb.traced_run(program, mode)
        return out.state, trace
    return given_run


@pytest.mark.rule("DR-46")
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(many_senders(), programs_with_accesses()))
def test_the_traced_run_is_the_fast_run_and_orders_as_a_run_of_its_own(program):
    for mode in DMA_MODES:
        out, _ = hb.traced_run(program, mode)
        plain = fast_run(program, mode)
        assert out.schedule == plain.schedule and out.state == plain.state
    events = accesses(program, "hardware")[0]
    if not events:
        return
    for asked in ({m: events for m in DMA_MODES}, *({m: events} for m in DMA_MODES)):
        new = hb.order_modes(program, asked, runs=_traced(program))
        old = hb.order_modes(program, asked)
        assert {m: _key(o) for m, o in new.items()} == {m: _key(o) for m, o in old.items()}


@pytest.mark.rule("DR-46")
@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.one_of(many_senders(), programs_with_accesses()))
def test_the_analysis_runs_each_run_mode_once_and_decides_as_two_runs(monkeypatch, program):
    _same_with_one_run(monkeypatch, program)


@pytest.mark.rule("DR-46")
def test_a_program_without_a_fold_is_run_three_times_not_five(monkeypatch):
    program = _two_senders_then_read()  # no rotation maps it onto itself: the pass reads its own runs
    assert _same_with_one_run(monkeypatch, program)


def _same_with_one_run(monkeypatch, program) -> bool:
    """The analysis' maximal runs and race passes with the runs shared and apart; whether they were shared."""
    def facts(shared: bool):
        a = Analysis(program, modes=DMA_MODES)
        a.symmetry  # known before the maximal runs, as `semcheck verify` knows it (the fold)
        runs, order = {}, {}
        with monkeypatch.context() as m:
            if not shared:
                m.setattr(ModeAnalysis, "_race_reads_own_run", lambda self: False)
            calls = []
            real = hb.fast_run
            counted = lambda *args, **kw: calls.append(args[1]) or real(*args, **kw)  # noqa: E731
            m.setattr(hb, "fast_run", counted)
            m.setattr(least_stuck, "fast_run", counted)
            for mode in DMA_MODES:
                runs[mode] = a.mode(mode).maximal_run()
                order[mode] = a.mode(mode).race_order
        return runs, order, calls, a

    runs, order, calls, a = facts(True)
    runs0, order0, calls0, _ = facts(False)
    for mode in DMA_MODES:
        assert runs[mode].schedule == runs0[mode].schedule and runs[mode].state == runs0[mode].state
        assert order[mode].events == order0[mode].events
        assert _key(order[mode].ordering) == _key(order0[mode].ordering)
    assert all(not m.__dict__.get("traced_run") for m in a._modes.values())  # read, then dropped
    if a.symmetry[1] is None and a.symmetry[0] >= program.topology.num_devices:
        # eager's and hardware's runs serve both (on_wait's race pass reads eager's, DR-7); on_wait's own maximal run
        read = {hb.reading(m)[0] for m in DMA_MODES if order0[m].events}  # run modes whose pass ran the program
        assert sorted(calls) == ["eager", "hardware", "on_wait"] and len(calls0) == 3 + len(read)
        return bool(read)
    return False
