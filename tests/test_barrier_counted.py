"""BAR-1 counted (`barrier.Counted`): the fast run decides a barrier by counting the participants
that reached it, and must run exactly as when it asks every participant (`barrier.opens`).

Each generated program, with some cores held (at their first operation too, where a barrier may
stand), is run twice, once with the count and once with the count refusing to answer (the run then
asks every participant): the outcomes, the recorded schedules and what an observer is told, in
order, are compared. The race pass's observer joins a barrier's participants once for every core
that passes it (DR-6): its clocks are held to joining them afresh at each pass.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import programs

from semcheck.model import DMA_MODES, fast_run
from semcheck.model import fast as fast_module
from semcheck.model.barrier import Counted, opens
from semcheck.model.clock_rows import dense
from semcheck.model import hb_observers
from semcheck.model.hb_observers import Observer
from semcheck.model.launch import Scratch, launch
from semcheck.model.ops import Barrier, Program, SemRef, Signal, Topology, Wait

sys.path.insert(0, str(Path(__file__).resolve().parent / "z3"))
from z3_strategies import programs as z3_programs  # noqa: E402


class _Asking(Counted):
    """The count that never answers: the run falls back to asking every participant."""

    def opens(self, name, k, participants):
        return None


class _Log:
    """Every event an observer is told, in order."""

    def __init__(self) -> None:
        self.events: list[tuple] = []

    def __getattr__(self, kind):
        return lambda *args: self.events.append((kind, *args))


def _both(program: Program, mode: str, hold: dict[int, int]) -> None:
    counted_log, asked_log = _Log(), _Log()
    counted = fast_run(program, mode, hold=dict(hold), observer=counted_log)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(fast_module, "Counted", _Asking)
        asked = fast_run(program, mode, hold=dict(hold), observer=asked_log)
    assert counted.kind == asked.kind
    assert counted.state == asked.state
    assert counted.schedule == asked.schedule
    assert counted.blocked == asked.blocked
    assert counted_log.events == asked_log.events


@st.composite
def held(draw, program: Program) -> dict[int, int]:
    cores = program.cores
    chosen = draw(st.sets(st.integers(0, len(cores) - 1), max_size=len(cores)))
    return {c: draw(st.integers(0, len(cores[c]))) for c in chosen}


@st.composite
def every_device_barriers(draw) -> Program:
    """Rings of devices with barriers of every device, some of them a core's first operation."""
    n = draw(st.integers(2, 6))
    topo = Topology(n, draw(st.sampled_from([1, 2])))
    everyone = frozenset(range(topo.num_cores))
    bodies = []
    rounds = draw(st.integers(1, 3))
    for g in range(topo.num_cores):
        ops = []
        for _ in range(rounds):
            if draw(st.booleans()):
                ops.append(Signal(SemRef("s0", 0), 1, device=(topo.device_of(g) + 1) % n))
                ops.append(Wait(SemRef("s0", 0), 1))
            ops.append(Barrier("all", everyone))
        bodies.append(ops)
    return launch(topo, bodies, collective_id=draw(st.sampled_from([None, 0])), scratch=[Scratch("s0", 1)])


@pytest.mark.rule("BAR-1")
@pytest.mark.parametrize("mode", DMA_MODES)
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_counting_runs_as_asking_every_participant(mode, data):
    program = data.draw(st.one_of(programs(), z3_programs(), every_device_barriers()))
    hold = data.draw(st.just({}) | held(program))
    _both(program, mode, hold)


@pytest.mark.rule("BAR-1")
def test_the_count_answers_as_opens_and_refuses_two_participant_sets():
    every, two = frozenset({0, 1, 2}), frozenset({0, 1})
    c = Counted()
    c.reach(0, "b", 1, every)
    c.reach(0, "b", 1, every)  # arriving again is not reaching again
    c.reach(1, "b", 1, frozenset(every))  # an equal set, another object
    assert c.opens("b", 1, every) is opens(1, [1, 1, 0]) is False
    c.reach(2, "b", 1, every)
    assert c.opens("b", 1, every) is opens(1, [1, 1, 1]) is True
    assert c.opens("b", 2, every) is opens(2, [1, 1, 1]) is False
    c.reach(0, "b", 2, two)
    assert c.opens("b", 2, every) is None
    assert c.opens("b", 1, two) is None


class _JoinEachTime(Observer):
    """The observer that joins a barrier's participants afresh for every core that passes it."""

    def barrier(self, core, pc, name, k, participants):
        self.joined.clear()
        super().barrier(core, pc, name, k, participants)


@pytest.mark.rule("DR-6")
@pytest.mark.parametrize("mode", DMA_MODES)
@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_a_barrier_joined_once_gives_each_core_the_clock_of_joining_it_each_time(mode, data):
    program = data.draw(st.one_of(programs(), z3_programs(), every_device_barriers()))
    hold = data.draw(st.just({}) | held(program))
    once, each = Observer(program, [], "start"), _JoinEachTime(program, [], "start")
    fast_run(program, mode, hold=dict(hold), observer=once)
    fast_run(program, mode, hold=dict(hold), observer=each)
    n = program.topology.num_cores  # the rows may be sparse (DR-45): compared as the dense rows they stand for
    assert [dense(r, n).tolist() for r in once.clock] == [dense(r, n).tolist() for r in each.clock]


class _EveryRow:
    """Tells an observer each event and keeps every core's row (as the dense row it stands for) after it."""

    def __init__(self, o: Observer) -> None:
        self.o, self.rows = o, []

    def __getattr__(self, kind):
        def told(*args):
            getattr(self.o, kind)(*args)
            n = self.o.n
            self.rows.append((kind, args, [dense(r, n).tolist() for r in self.o.clock]))
        return told


@pytest.mark.rule("DR-49")
@pytest.mark.parametrize("mode", DMA_MODES)
@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_a_shared_barrier_row_reads_and_changes_as_a_row_of_its_own(mode, data):
    program = data.draw(st.one_of(programs(), z3_programs(), every_device_barriers()))
    hold = data.draw(st.just({}) | held(program))
    arrival = data.draw(st.sampled_from(["start", "completion"]))
    shared, own = _EveryRow(Observer(program, [], arrival)), _EveryRow(Observer(program, [], arrival))
    within = hb_observers.within
    with pytest.MonkeyPatch.context() as m:
        # sometimes a row that could share joins instead: a shared row then meets the join in place too
        m.setattr(hb_observers, "within", lambda row, other: within(row, other) and data.draw(st.booleans()))
        fast_run(program, mode, hold=dict(hold), observer=shared)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(hb_observers, "within", lambda row, other: False)  # every pass joins into a row of its own
        fast_run(program, mode, hold=dict(hold), observer=own)
    assert shared.rows == own.rows
    assert shared.o.candidates == own.o.candidates and shared.o.broken == own.o.broken
    # a copy made on the way (DR-38) goes on as its original would
    copy = shared.o.resumed({})
    assert [dense(r, copy.n).tolist() for r in copy.clock] == shared.rows[-1][2] if shared.rows else True
