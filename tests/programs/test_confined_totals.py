"""`invocation-confined` by totals (specs/deciding/confined.md PRG-140 .. PRG-142).

The totals answer "this cannot land outside the window" without a run; each claim is checked against
the maximal run it replaces (PRG-111's frozen run, PRG-112's held run), which RUN-3 makes exact, on
generated ring-like kernels that mix handshakes, remote signals and copies and waits that cover all,
part or more of what arrives.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from semcheck.checker.properties import confined
from semcheck.checker.properties.confined import decide, invocation_confined, single_landings
from semcheck.checker.properties.confined_totals import Totals
from semcheck.model.fast import fast_run
from semcheck.model.launch import Scratch, launch
from semcheck.model.ops import BARRIER, Barrier, DmaStart, GetBarrierSem, SemRef, Signal, Topology, Wait

REPO = Path(__file__).resolve().parents[2]


@st.composite
def kernels(draw, incs=(1, 1, 2, 0)):
    """Each device runs a few pieces towards a partner: a barrier handshake, a remote signal or copy (of
    an increment from `incs`), waits on its own semaphores for amounts that may match what arrives, or not."""
    n = draw(st.integers(2, 4))
    cores = draw(st.sampled_from([1, 1, 1, 2])) if n <= 2 else 1
    topo = Topology(n, cores)
    shift = draw(st.integers(1, n - 1))
    bodies = []
    for g in range(topo.num_cores):
        d = topo.device_of(g)
        peer, back = (d + shift) % n, (d - shift) % n
        ops = []
        for piece in draw(st.lists(st.sampled_from(["shake", "signal", "copy", "wait_s", "wait_r", "wait_many"]),
                                   max_size=5)):
            if piece == "shake":
                ops += [GetBarrierSem(), Signal(SemRef(BARRIER), 1, device=back), Wait(SemRef(BARRIER), 1)]
            elif piece == "signal":
                ops.append(Signal(SemRef("s"), draw(st.sampled_from(incs)), device=peer,
                                  core=draw(st.none() | st.integers(0, cores - 1))))
            elif piece == "copy":
                ops.append(DmaStart(SemRef("r"), draw(st.sampled_from([4, 8])), src_sem=SemRef("t"), device=peer,
                                    core=draw(st.none() | st.integers(0, cores - 1))))
            elif piece == "wait_s":
                ops.append(Wait(SemRef("s"), draw(st.integers(0, 2))))
            elif piece == "wait_r":
                ops.append(Wait(SemRef("r"), draw(st.sampled_from([4, 8])), "dma"))
            else:
                ops += [Wait(SemRef("r"), 4, "dma"), Wait(SemRef("t"), 4, "dma")]
        bodies.append(ops)
    return launch(topo, bodies, collective_id=draw(st.sampled_from([0, 0, None])),
                  scratch=[Scratch("s"), Scratch("r"), Scratch("t")])


@contextlib.contextmanager
def without_totals():
    """`decide` as it was before PRG-140 and PRG-141: every question a maximal run."""
    class Never:
        def __init__(self, program, lowering=None):
            pass

        def landed_before_exit(self, la):
            return False

        def reached_after_entry(self, la):
            return False

        def settled(self, *columns):
            return None

    with mock.patch.object(confined, "Totals", Never):
        yield


def _late_run(program, la):
    op = program.cores[la.core][la.pc]
    if type(op) is DmaStart:
        return fast_run(program, "hardware", suppress=frozenset({(la.core, la.pc, "write")}))
    return fast_run(program, "hardware", hold={la.core: la.pc})


SETTINGS = settings(max_examples=150, deadline=None, database=None, suppress_health_check=list(HealthCheck))


@pytest.mark.rule("PRG-140")
@SETTINGS
@given(kernels())
def test_totals_rule_out_late_landings_only_where_the_held_run_does(program):
    totals = Totals(program)
    for la in single_landings(program):
        if totals.landed_before_exit(la):
            run = _late_run(program, la)  # RUN-3: every run without the landing is a prefix of this one
            assert run.state.pcs[la.target] < la.exit


@pytest.mark.rule("PRG-141")
@SETTINGS
@given(kernels())
def test_totals_rule_out_early_landings_only_where_the_frozen_run_does(program):
    totals = Totals(program)
    for la in single_landings(program):
        if totals.reached_after_entry(la):
            run = fast_run(program, "hardware", hold={la.target: la.entry})
            assert run.state.pcs[la.core] <= la.pc


@pytest.mark.rule("PRG-142")
@SETTINGS
@given(kernels())
def test_decide_gives_the_same_verdict_with_and_without_totals(program):
    landings = single_landings(program)
    fast = decide(program, landings)
    with without_totals():
        slow = decide(program, landings)
    assert fast == slow


def _ring(n, *, waits=1, extra=False):
    """A ring: handshake with the left neighbour, a copy and a signal to the right one, then waits."""
    def body(d):
        right, left = (d + 1) % n, (d - 1) % n
        ops = [GetBarrierSem(), Signal(SemRef(BARRIER), 1, device=left), Wait(SemRef(BARRIER), 1),
               DmaStart(SemRef("r"), 8, src_sem=SemRef("t"), device=right), Signal(SemRef("s"), 1, device=right)]
        if extra:
            ops.append(Signal(SemRef("s"), 1, device=right))
        ops += [Wait(SemRef("t"), 8, "dma"), Wait(SemRef("r"), 8, "dma")] + [Wait(SemRef("s"), 1)] * waits
        return ops
    return launch(Topology(n), [body(d) for d in range(n)], collective_id=0,
                  scratch=[Scratch("s"), Scratch("r"), Scratch("t")])


def _counting_runs():
    calls = []
    real = confined.fast_run

    def counted(*a, **k):
        calls.append(k.get("freeze") or k.get("suppress"))
        return real(*a, **k)

    return calls, mock.patch.object(confined, "fast_run", counted)


@pytest.mark.rule("PRG-140", "PRG-141")
def test_a_ring_all_reduce_is_decided_without_a_run():
    calls, patch = _counting_runs()
    with patch:
        v = invocation_confined(_ring(8), "hardware")
    assert v.verdict == "proved" and calls == []
    # the example itself, lowered from jax, at 64 devices: its landings are ruled out by totals alone
    script = ("import semcheck.checker.properties.confined as c; from semcheck.checker.frontend.api import load; n = []; "
              "r = c.fast_run; c.fast_run = lambda *a, **k: n.append(1) or r(*a, **k); "
              "k = load('examples/ring_allreduce.py', devices=64, dma_mode='hardware')[0]; "
              "v = c.invocation_confined(k.program, 'hardware'); print(v.verdict, len(n))")
    out = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=600,
                         env=dict(os.environ, JAX_PLATFORMS="cpu"))
    assert out.stdout.split()[-2:] == ["proved", "0"], out.stderr[-2000:]


@pytest.mark.rule("PRG-140")
def test_where_a_premise_fails_the_run_decides():
    # a signal the target never waits for: totals cannot rule it out, the held run shows it late
    calls, patch = _counting_runs()
    with patch:
        v = invocation_confined(_ring(4, extra=True), "hardware")
    assert v.verdict == "violated" and v.witness.details["when"] == "late" and calls
    # waiting for more than arrives: the target never leaves, so nothing is late, by totals alone
    calls, patch = _counting_runs()
    with patch:
        assert invocation_confined(_ring(4, waits=2), "hardware").verdict == "proved"
    assert calls == []
    # a semaphore on core 1 of a two-core device: core 0's window is not that core's; the runs decide
    two = launch(Topology(2, 2), [
        [GetBarrierSem(), Signal(SemRef(BARRIER), 1, device=1 - g // 2), Wait(SemRef(BARRIER), 1),
         Signal(SemRef("s"), 1, device=1 - g // 2, core=1)] + ([Wait(SemRef("s"), 2)] if g % 2 else [])
        for g in range(4)], collective_id=0, scratch=[Scratch("s")])
    totals = Totals(two)
    assert not any(totals.landed_before_exit(la) for la in single_landings(two))
    fast = decide(two, single_landings(two))
    with without_totals():
        assert decide(two, single_landings(two)) == fast


@pytest.mark.rule("PRG-141")
def test_a_barrier_before_the_copy_rules_out_an_early_landing():
    # no collective id: the start barrier (LAUNCH-1) keeps every sender out until every device entered;
    # the copy's receive semaphore counts bytes and is waited in full, so neither side needs a run
    def body(d, n=3):
        return [DmaStart(SemRef("r"), 8, src_sem=SemRef("t"), device=(d + 1) % n), Wait(SemRef("t"), 8, "dma"),
                Wait(SemRef("r"), 8, "dma")]

    program = launch(Topology(3), [body(d) for d in range(3)], scratch=[Scratch("r"), Scratch("t")])
    assert any(type(op) is Barrier for op in program.cores[0])
    totals = Totals(program)
    landings = single_landings(program)
    assert landings and all(totals.reached_after_entry(la) for la in landings)
    calls, patch = _counting_runs()
    with patch:
        assert decide(program, landings).verdict == "proved"
    assert calls == []


@pytest.mark.rule("PRG-147")
@SETTINGS
@given(kernels())
def test_totals_and_landings_read_off_a_complete_lowering_are_the_programs(program):
    from semcheck.checker.properties.confined_totals import complete
    from semcheck.checker.static.lowering import lower

    low = lower(program, "hardware")
    scanned, lowered = Totals(program), Totals(program, low)
    landings = single_landings(program)
    if not complete(low):
        assert lowered._landings is None  # the scan decides: the lowering lacks operations
        return
    assert single_landings(program, "hardware", low) == landings
    assert lowered.sound == scanned.sound and lowered.barriers == scanned.barriers
    if scanned.sound:
        assert lowered.counters == scanned.counters and lowered.waits_of == scanned.waits_of
    for la in landings:
        assert lowered.landed_before_exit(la) == scanned.landed_before_exit(la)
        assert lowered.reached_after_entry(la) == scanned.reached_after_entry(la)
    assert decide(program, landings, lowering=low) == decide(program, landings)


@pytest.mark.rule("RUN-32")
@SETTINGS
@given(kernels())
def test_settled_columns_are_the_totals_asked_landing_by_landing(program):
    from semcheck.checker.properties.confined import landing_columns
    from semcheck.checker.properties.confined_totals import complete
    from semcheck.checker.static.lowering import lower

    low = lower(program, "hardware")
    totals = Totals(program, low)
    if not complete(low):
        assert totals.settled(*[None] * 7) is None  # no lowering to read: every landing is asked on its own
        return
    columns = landing_columns(program, low)
    landings = single_landings(program)  # the scan's, as PRG-147 has them
    assert [columns[j] for j in range(len(columns))] == landings
    settled = totals.settled(columns.core, columns.pc, columns.target, columns.entry, columns.exit, columns.counter,
                             columns.counters)
    topo = program.topology
    scanned = Totals(program)
    assert settled.tolist() == [topo.device_of(la.core) != topo.device_of(la.target)
                                and scanned.waits_hold_back(la) and scanned.landed_before_exit(la) for la in landings]
    # and so the verdict, reason and witness of every landing asked on its own, with and without the totals
    assert decide(program, columns, lowering=low) == decide(program, landings)
    with without_totals():
        assert decide(program, landings) == decide(program, columns, lowering=low)


def _zero_then_waited() -> object:
    """Two devices each signal 1 to the other, wait for 1, then signal 0: the second signal's counters are
    not positive (a zero increment), so neither total settles it (PRG-140, PRG-141)."""
    body = [Signal(SemRef("s"), 1, device=None), Wait(SemRef("s"), 1), Signal(SemRef("s"), 0, device=None)]
    bodies = [[dataclasses.replace(op, device=1 - d) if type(op) is Signal else op for op in body] for d in range(2)]
    return launch(Topology(2, 1), bodies, collective_id=0, scratch=[Scratch("s"), Scratch("r"), Scratch("t")])


@pytest.mark.rule("RUN-55")
@settings(SETTINGS, max_examples=400)
@given(kernels(incs=(0, 1, 2)))
@example(_zero_then_waited())
def test_counter_sums_in_one_array_are_the_totals_asked_landing_by_landing(program):
    """RUN-55's one array of every counter's sums answers as each landing's own counter does, zero and
    uneven increments (a counter that is not positive) included."""
    from semcheck.checker.properties.confined import landing_columns
    from semcheck.checker.properties.confined_totals import complete
    from semcheck.checker.static.lowering import lower

    low = lower(program, "hardware")
    if not complete(low):
        return
    columns = landing_columns(program, low)
    settled = Totals(program, low).settled(columns.core, columns.pc, columns.target, columns.entry, columns.exit,
                                           columns.counter, columns.counters)
    scanned = Totals(program)
    topo = program.topology
    assert settled.tolist() == [topo.device_of(la.core) != topo.device_of(la.target) and scanned.waits_hold_back(la)
                                and scanned.landed_before_exit(la) for la in single_landings(program)]
