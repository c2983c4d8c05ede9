"""The analysis of a program: its checks share one object's facts, and nothing outlives it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from z3_strategies import examples, programs

from ring_programs import ring_allreduce
from semcheck.checker.properties.checking import check_program
from semcheck.checker.properties.analysis import Analysis, analysis_of
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


def _clocks_joined_per_core(hb):
    """`HappensBefore`'s clocks as they were before RUN-33: each core's barrier joins every participant's."""
    import numpy as np

    from semcheck.model.barrier import awaited, opens_at

    prog = hb.program
    n = prog.topology.num_cores
    segs = [[(-1, np.zeros(n, dtype=np.int64))] for _ in range(n)]
    frontier, nxt = [0] * n, [0] * n
    bpos_by_core = [sorted(p for (c, p) in hb.barriers if c == core) for core in range(n)]

    def vc_at(core, pos):
        for bpos, vc in reversed(segs[core]):
            if bpos < pos:
                v = vc.copy()
                v[core] = max(v[core], pos)
                return v

    changed = True
    while changed:
        changed = False
        for core in range(n):
            while True:
                if nxt[core] >= len(bpos_by_core[core]):
                    if frontier[core] != len(prog.cores[core]):
                        frontier[core], changed = len(prog.cores[core]), True
                    break
                i = bpos_by_core[core][nxt[core]]
                if frontier[core] != i:
                    frontier[core], changed = i, True
                b = hb.barriers[(core, i)]
                where = awaited(b.participants, lambda p, b=b: hb.barrier_pos.get((p, b.name, b.k)))
                if not opens_at(b.k, where, frontier):
                    break
                joined = vc_at(core, i)
                for p, pp in where.items():
                    np.maximum(joined, vc_at(p, pp), out=joined)
                segs[core].append((i, joined))
                nxt[core] += 1
                frontier[core], changed = i + 1, True
    return frontier, vc_at


@st.composite
def _barrier_programs(draw):
    """Cores that meet at barriers of a few names, each name with its own participants, in any order and
    count (so some never open), between operations that do not synchronise."""
    from semcheck.model.ops import Barrier, ExitCheck, Program, Topology

    n = draw(st.integers(1, 5))
    names = {name: frozenset(draw(st.sets(st.integers(0, n - 1), min_size=1))) for name in "abc"}
    cores = []
    for g in range(n):
        mine = [name for name, parts in names.items() if g in parts]
        ops = []
        for _ in range(draw(st.integers(0, 6))):
            name = draw(st.sampled_from(mine + [None]))
            ops.append(ExitCheck(device=g) if name is None else Barrier(name, names[name]))
        cores.append(tuple(ops))
    return Program(Topology(n), tuple(cores))


@examples(200)
@given(_barrier_programs())
@pytest.mark.rule("RUN-33")
def test_a_barriers_clock_joined_once_is_each_participants_own(program):
    hb = lower(program, "hardware").hb
    frontier, vc_at = _clocks_joined_per_core(hb)
    n = len(program.cores)
    assert [hb.reach(c) for c in range(n)] == frontier
    for b in range(n):
        for j in range(hb.reach(b) + 1):
            if j < len(program.cores[b]) or j == 0:
                assert [hb.before(a, i, b, j) for a in range(n) for i in range(len(program.cores[a]))] == [
                    (i < j if a == b else int(vc_at(b, j)[a]) > i)
                    for a in range(n) for i in range(len(program.cores[a]))]
