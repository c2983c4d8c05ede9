"""RUN-34: the static system counts a barrier's arrivals (BAR-1 counted) instead of asking every
participant at every pass, and must decide exactly as asking them does.

Two engines of the static system decide barriers: the barrier-only simulation behind happens-before
(`static.system.HappensBefore`: how far each core gets, and the clocks) and the least stuck vector
(`static.least_stuck.least_stuck_vector`). Each is held here to the slow way on generated programs:
happens-before to the fixpoint over positions it replaced (every core swept until nothing moves,
each barrier asked of every participant through `awaited`/`opens_at`, the clocks joined as RUN-33
says), the least stuck vector to itself with a count that never answers (it then asks `opens` of
every participant). IR-1 gives a name one participant set, so the count always answers; the
happens-before's fallback for a name reached with two sets (positions, as before) is held to the
same fixpoint by a count that never answers.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import programs

from semcheck.checker.static import least_stuck as least_stuck_module
from semcheck.checker.static import system as system_module
from semcheck.checker.static.least_stuck import least_stuck_vector
from semcheck.checker.static.lowering import lower
from semcheck.checker.static.system import HappensBefore
from semcheck.model import DMA_MODES
from semcheck.model.barrier import Counted, awaited, opens_at
from semcheck.model.launch import Scratch, launch
from semcheck.model.ops import Barrier, Program, SemRef, Signal, Topology, Wait

sys.path.insert(0, str(Path(__file__).resolve().parent / "z3"))
from z3_strategies import programs as z3_programs  # noqa: E402
from z3_strategies import symmetric_programs  # noqa: E402


class _Asking(Counted):
    """The count that never answers: the engine falls back to asking every participant."""

    def opens(self, name, k, participants):
        return None


def _swept(program: Program, barriers: dict, barrier_pos: dict) -> tuple[list[int], dict]:
    """The barrier-only simulation as a fixpoint over positions: every core is moved to its next barrier
    and on past it while `opens_at` says it opens, until no core moves; a core passing a barrier takes
    the join of its own clock and each participant's before its own barrier (RUN-33). Returns each
    core's frontier and the clock before every position it passes a barrier at."""
    n = program.topology.num_cores
    frontier = [0] * n
    after: dict[tuple[int, int], np.ndarray] = {}  # (core, barrier position) -> its clock after it
    mine = [sorted(p for (c, p) in barriers if c == core) for core in range(n)]
    nxt = [0] * n

    def vc_at(core: int, pos: int) -> np.ndarray:
        passed = [p for p in mine[core][: nxt[core]] if p < pos]
        v = after[(core, passed[-1])].copy() if passed else np.zeros(n, dtype=np.int64)
        v[core] = max(v[core], pos)
        return v

    moved = True
    while moved:
        moved = False
        for core in range(n):
            while nxt[core] < len(mine[core]):
                i = mine[core][nxt[core]]
                frontier[core] = i
                b = barriers[(core, i)]
                where = awaited(b.participants, lambda p, b=b: barrier_pos.get((p, b.name, b.k)))
                if not opens_at(b.k, where, frontier):
                    break
                joined = vc_at(core, i)
                for p, pp in where.items():
                    np.maximum(joined, vc_at(p, pp), out=joined)
                after[(core, i)] = joined
                nxt[core] += 1
                frontier[core] = i + 1
                moved = True
            else:
                if frontier[core] != len(program.cores[core]):
                    frontier[core] = len(program.cores[core])
                    moved = True
    return frontier, after


def _same_happens_before(program: Program, mode: str) -> None:
    low = lower(program, mode)
    hb = HappensBefore(program, low.barrier_pos, low.barriers)
    frontier, after = _swept(program, low.barriers, low.barrier_pos)
    n = program.topology.num_cores
    assert [hb.reach(c) for c in range(n)] == frontier
    if not low.barriers:
        return
    for b in range(n):
        for j in range(len(program.cores[b]) + 1):
            passed = [p for (c, p) in after if c == b and p < j]
            want = after[(b, max(passed))].copy() if passed else np.zeros(n, dtype=np.int64)
            want[b] = max(want[b], j)
            assert (hb._vc_at(b, j) == want).all(), (b, j)
            for a in range(n):
                for i in range(len(program.cores[a])):
                    assert hb.before(a, i, b, j) == (i < j if a == b else want[a] > i)


@st.composite
def every_device_barriers(draw) -> Program:
    """Rings of devices with barriers of every device between rounds of a signal and a wait."""
    n = draw(st.integers(2, 6))
    topo = Topology(n, draw(st.sampled_from([1, 2])))
    everyone = frozenset(range(topo.num_cores))
    bodies = []
    for g in range(topo.num_cores):
        ops = []
        for _ in range(draw(st.integers(1, 3))):
            if draw(st.booleans()):
                ops.append(Signal(SemRef("s0", 0), 1, device=(topo.device_of(g) + 1) % n))
                ops.append(Wait(SemRef("s0", 0), 1))
            ops.append(Barrier("all", everyone))
        bodies.append(ops)
    return launch(topo, bodies, collective_id=draw(st.sampled_from([None, 0])), scratch=[Scratch("s0", 1)])


def _any_program():
    return st.one_of(programs(), z3_programs(), every_device_barriers(),
                     symmetric_programs(perturb=True).map(lambda case: case[0]))


@pytest.mark.rule("RUN-34")
@pytest.mark.parametrize("mode", DMA_MODES)
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_happens_before_counted_reaches_and_orders_as_the_fixpoint_over_positions(mode, data):
    program = data.draw(_any_program())
    _same_happens_before(program, mode)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(system_module, "Counted", _Asking)
        _same_happens_before(program, mode)


@pytest.mark.rule("RUN-34")
@pytest.mark.parametrize("mode", DMA_MODES)
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_the_least_stuck_vector_counted_ends_where_asking_every_participant_does(mode, data):
    program = data.draw(_any_program())
    low = lower(program, mode)
    if not low.ok:
        return
    counted = least_stuck_vector(low)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(least_stuck_module, "Counted", _Asking)
        asked = least_stuck_vector(low)
    assert counted == asked
