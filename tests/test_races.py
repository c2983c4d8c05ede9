"""The race property's model: accesses, conflicts and restricted runs (ACC-1..3, DR-1..4)."""

from __future__ import annotations

import dataclasses
import os
from collections import deque

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from semcheck.checker.properties.decide import decide
from semcheck.model.access import accesses, buffer_of, buffer_spaces, conflicting_pairs
from semcheck.model.fast import fast_run
from semcheck.model.launch import Scratch, launch
from semcheck.model.ops import (
    DMA_MODES,
    Access,
    DmaMode,
    DmaStart,
    Loc,
    Program,
    Region,
    SemRef,
    Signal,
    Topology,
    Wait,
)
from semcheck.model.race import find_races
from semcheck.model.run import run
from semcheck.model.state import State
from semcheck.model.step import enabled, step


def box(*dims: tuple[int, int]) -> Region:
    return Region(tuple(dims))


SCRATCH = [
    Scratch("sems", 2),
    Scratch("buf", kind="buffer", nbytes=64),
    Scratch("src", kind="buffer", nbytes=128, memory_space="hbm"),
]


def single_core(body: list) -> Program:
    return launch(Topology(1), [body], scratch=SCRATCH)


def fetch(i: int, slot: int) -> DmaStart:
    return DmaStart(
        SemRef("sems", slot), 32, src_buf="src", src_region=box((8 * i, 8 * i + 8)),
        dst_buf="buf", dst_region=box((8 * slot, 8 * slot + 8)), loc=Loc("k.py", 10 + i),
    )


def wait(slot: int) -> Wait:
    return Wait(SemRef("sems", slot), 32, kind="dma", loc=Loc("k.py", 20))


def load(slot: int) -> Access:
    return Access("buf", box((8 * slot, 8 * slot + 8)), False, Loc("k.py", 30))


def double_buffered(steps: int, *, wrong_slot: bool) -> Program:
    """fetch(i+1) into the other slot, wait, read this slot; `wrong_slot` waits on the prefetch's semaphore."""
    body = [fetch(0, 0)]
    for i in range(steps):
        slot = i % 2
        if i + 1 < steps:
            body.append(fetch(i + 1, 1 - slot))
        body.append(wait(1 - slot) if wrong_slot and i + 1 < steps else wait(slot))
        body.append(load(slot))
    return single_core(body)


def modes_with_races(program: Program) -> set[str]:
    return {m for m in DMA_MODES if any(r.exact and r.confirmed for r in find_races(program, m).races)}


# --- ACC ---------------------------------------------------------------------------


@pytest.mark.rule("ACC-1")
def test_accesses_name_buffers_per_device_for_hbm_and_per_core_otherwise():
    program = launch(Topology(2, 2), [[]] * 4, scratch=SCRATCH)
    spaces = buffer_spaces(program)
    # cores 0 and 1 are device 0: they share the HBM buffer, each has its own VMEM buffer
    assert buffer_of(program, spaces, 0, "src") == buffer_of(program, spaces, 1, "src")
    assert buffer_of(program, spaces, 0, "buf") != buffer_of(program, spaces, 1, "buf")
    assert buffer_of(program, spaces, 0, "src") != buffer_of(program, spaces, 2, "src")


@pytest.mark.rule("ACC-2")
def test_regions_overlap_only_when_every_dimension_does():
    assert box((0, 8), (0, 4)).overlaps(box((7, 9), (3, 5)))
    assert not box((0, 8), (0, 4)).overlaps(box((8, 9), (0, 4)))
    assert not box((0, 8), (0, 4)).overlaps(box((0, 8), (4, 8)))
    # two loads never conflict; a load and a store of one core are ordered by the core
    body = [load(0), load(0), Access("buf", box((0, 8)), True)]
    events, _ = accesses(single_core(body), "hardware")
    assert conflicting_pairs(events, "hardware") == []


@pytest.mark.rule("ACC-3")
def test_a_dma_without_regions_makes_races_unknown():
    program = single_core([DmaStart(SemRef("sems", 0), 32), wait(0)])
    report = find_races(program, "hardware")
    assert report.races == () and len(report.unrecorded) == 1


# --- DR ----------------------------------------------------------------------------


@pytest.mark.rule("DR-1", "PROP-7")
def test_wrong_slot_wait_races_in_every_mode():
    # eager copies land inside their start, but jax's detector (and DR-1) orders a copy's data only
    # through its start and its semaphore: the load is unordered in eager mode too
    assert modes_with_races(double_buffered(3, wrong_slot=True)) == {"eager", "on_wait", "hardware"}


@pytest.mark.rule("DR-1", "PROP-7")
def test_correct_double_buffering_is_race_free():
    assert modes_with_races(double_buffered(4, wrong_slot=False)) == set()


@pytest.mark.rule("DR-1", "PROP-7")
def test_read_before_wait_recv_races_in_every_mode():
    # device d copies its src into the right neighbour's buf; the receiver reads buf before waiting
    def body(d: int) -> list:
        return [
            DmaStart(SemRef("sems", 1), 32, src_sem=SemRef("sems", 0), device=(d + 1) % 2,
                     src_buf="src", src_region=box((0, 8)), dst_buf="buf", dst_region=box((0, 8)), loc=Loc("k.py", 5)),
            load(0),
            Wait(SemRef("sems", 1), 32, kind="dma", loc=Loc("k.py", 7)),
            Wait(SemRef("sems", 0), 32, kind="dma", loc=Loc("k.py", 8)),
        ]

    program = launch(Topology(2), [body(0), body(1)], scratch=SCRATCH, collective_id=None)
    assert modes_with_races(program) == {"eager", "on_wait", "hardware"}


@pytest.mark.rule("DR-4")
def test_on_wait_races_replay_on_the_step_relation():
    program = double_buffered(3, wrong_slot=True)
    race = find_races(program, "on_wait").races[0]
    state = run(program, "on_wait", race.outcome.schedule, finish=False)
    assert state.pcs[race.second.core] == race.second.pc or state.pcs[race.first.core] == race.first.pc


def _copies_then_waits(dsts: tuple[int, ...]) -> Program:
    """One core starts a copy into row `d` of a 4-row buffer for each `d` of `dsts`, all on one
    semaphore, then waits them all (a KV-cache update's page table mapping tokens to rows)."""
    scratch = [Scratch("sems", 2), Scratch("buf", kind="buffer", nbytes=4 * 8 * 4),
               Scratch("src", kind="buffer", nbytes=4 * 8 * 8, memory_space="hbm")]
    ops: list = [DmaStart(SemRef("sems", 0), 32, src_buf="src", src_region=box((8 * n, 8 * n + 8)),
                          dst_buf="buf", dst_region=box((8 * d, 8 * d + 8)), loc=Loc("k.py", 10 + n))
                 for n, d in enumerate(dsts)]
    ops += [Wait(SemRef("sems", 0), 32, kind="dma", loc=Loc("k.py", 20)) for _ in dsts]
    return launch(Topology(1), [ops], scratch=scratch)


@pytest.mark.rule("DR-44")
def test_two_copies_queued_on_one_semaphore_race_under_on_wait():
    # the restricted run's end does not replay (the last-in-first-out waiter would pop the suppressed
    # copy, SEM-7), but the state right after the starts does: both writes pending (jax's detector agrees)
    program = _copies_then_waits((0, 1, 0, 3))
    race = find_races(program, "on_wait").races[0]
    assert race.exact and race.confirmed
    state = run(program, "on_wait", race.outcome.schedule, finish=False)
    assert _pending(program, "on_wait", state, race.first) and _pending(program, "on_wait", state, race.second)


@pytest.mark.rule("DR-44")
@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=2, max_size=5).map(tuple))
def test_copies_into_one_row_are_a_confirmed_race_in_every_mode(dsts):
    collide = len(set(dsts)) < len(dsts)
    assert modes_with_races(_copies_then_waits(dsts)) == (set(DMA_MODES) if collide else set())


# --- the restricted runs agree with every interleaving (DR-2, DR-3) -------------------


def _pending(program: Program, mode: DmaMode, state: State, e) -> bool:
    if not e.is_dma:
        return state.pcs[e.core] == e.pc
    if state.pcs[e.core] <= e.pc:
        return False
    k = sum(type(op) is DmaStart for op in program.cores[e.core][: e.pc])
    mine = [d for d in state.dmas if d.src_core == e.core]
    return mine[k].phase < (1 if e.half == "read" else 2)


def _conflict(a, b, mode: DmaMode) -> bool:
    """ACC-2 and ERR-27 written out for the explorers, apart from `model.access.conflicts`: one buffer, one a
    write, not ordered by program order alone, and sharing an element, or (in the interpreter) windows that
    jax's detector takes to meet."""
    from semcheck.model.detector_windows import detector_windows_meet

    if a.buffer != b.buffer or not (a.write or b.write):
        return False
    if (a.core, a.pc) == (b.core, b.pc) or (not a.is_dma and not b.is_dma and a.core == b.core):
        return False
    hw = mode == "hardware"
    if hw and (a.region.empty or b.region.empty):
        return False
    if hw:
        return a.region.overlaps(b.region)
    ra, rb = a.region.window or a.region, b.region.window or b.region  # ERR-28: a masked store's window
    return ra.overlaps(rb) or detector_windows_meet(ra.box, rb.box)


def brute_force_race(program: Program, mode: DmaMode, limit: int = 20_000) -> bool | None:
    """Every reachable state, no reduction: is some conflicting pair both pending? None past `limit`."""
    events, _ = accesses(program, None)
    pairs = [(a, b) for i, a in enumerate(events) for b in events[i + 1:] if _conflict(a, b, mode)]
    if not pairs:
        return False
    seen = {State.initial(program)}
    todo = deque(seen)
    while todo:
        s = todo.popleft()
        if s.failure is not None:
            continue
        if any(_pending(program, mode, s, a) and _pending(program, mode, s, b) for a, b in pairs):
            return True
        for actor in enabled(program, mode, s):
            t = step(program, mode, s, actor)
            if t not in seen:
                if len(seen) >= limit:
                    return None
                seen.add(t)
                todo.append(t)
    return False


def detector_race(program: Program, limit: int = 20_000) -> bool | None:
    """Every eager schedule, each with the interpreter's race detector (DR-1, DR-7): a clock per core and
    per copy; a copy runs inside its start with a clock of its own, a signal joins the signaller's clock
    into the semaphore's and a wait that passes joins the semaphore's clock into the core's. Is some
    conflicting access ever unordered with an earlier one? None past `limit` schedules' steps."""
    from semcheck.model.access import buffer_of, buffer_spaces, AccessEvent
    from semcheck.model.step import resolve, target_core

    spaces = buffer_spaces(program)
    budget = [limit]

    def join(a: dict, b: dict) -> dict:
        return {k: max(a.get(k, 0), b.get(k, 0)) for k in a.keys() | b.keys()}

    def before(a: dict, b: dict) -> bool:
        return all(v <= b.get(k, 0) for k, v in a.items())

    def explore(state: State, clocks: dict, sems: dict, history: tuple) -> bool | None:
        if state.failure is not None:
            return False
        for actor in enabled(program, "eager", state):
            budget[0] -= 1
            if budget[0] < 0:
                return None
            core = actor[1]
            pc = state.pcs[core]
            op = program.cores[core][pc]
            t = step(program, "eager", state, actor)
            cl, sm, hist = dict(clocks), dict(sems), history
            mine = dict(cl.get(core, {}))
            new_accesses = []
            moved = t.pcs[core] != pc
            if moved and isinstance(op, Access):
                mine[("core", core)] = mine.get(("core", core), 0) + 1
                buf = buffer_of(program, spaces, core, op.buf)
                new_accesses.append((AccessEvent(core, pc, None, buf, op.region, op.write, core, op.loc), dict(mine)))
            elif moved and isinstance(op, (Signal, DmaStart)):
                mine[("core", core)] = mine.get(("core", core), 0) + 1
                up = {k: t.counts.get(k, 0) - state.counts.get(k, 0) for k in set(t.counts) | set(state.counts)}
                if isinstance(op, Signal):
                    for k, v in up.items():
                        if v > 0:
                            sm[k] = join(sm.get(k, {}), mine)
                else:
                    # as the interpreter's DMA: its clock ticks before and after each half, and each
                    # semaphore gets the clock right after its half (send after the read, receive
                    # after the write)
                    dma = ("dma", len(state.dmas))
                    clock = dict(mine)
                    dst = target_core(program, "eager", core, op.device, op.core, dma=True)
                    src_key = (t.dmas[-1].src_key, t.dmas[-1].src_core) if op.src_sem is not None else None
                    dst_key = (t.dmas[-1].dst_key, t.dmas[-1].dst_core)
                    clock[dma] = 1
                    if op.src_buf is not None:
                        src_b = buffer_of(program, spaces, core, op.src_buf)
                        new_accesses.append((AccessEvent(core, pc, "read", src_b, op.src_region, False, core, op.loc), dict(clock)))
                    clock[dma] = 2
                    if src_key is not None:
                        sm[src_key] = join(sm.get(src_key, {}), clock)
                    clock[dma] = 3
                    if op.src_buf is not None:
                        dst_b = buffer_of(program, spaces, dst, op.dst_buf)
                        new_accesses.append((AccessEvent(core, pc, "write", dst_b, op.dst_region, True, dst, op.loc), dict(clock)))
                    clock[dma] = 4
                    sm[dst_key] = join(sm.get(dst_key, {}), clock)
            elif moved and isinstance(op, Wait):
                # the wait takes its counter's clock, whatever it waits for (0 included, RACE-1)
                key = state.looked_up.get(core) or resolve(program, "eager", state, core, op.sem)
                mine = join(mine, sm.get((key, core), {}))
            cl[core] = mine
            for e, c in new_accesses:
                for f, d in hist:
                    if _conflict(f, e, "eager") and not before(d, c):
                        return True
                hist = hist + ((e, c),)
            r = explore(t, cl, sm, hist)
            if r is not False:
                return r
        return False

    return explore(State.initial(program), {}, {}, ())


def masked(lo: int, hi: int, elements: Region) -> Region:
    """A masked store's region (ERR-28): `elements`, and the window `[lo, hi)` jax's detector takes it to write."""
    return dataclasses.replace(elements, window=box((lo, hi)))


@st.composite
def programs_with_accesses(draw, empty: bool = False, masks: bool = False) -> Program:
    """`empty`: regions of no element too (windows `[i, i)`, which ERR-27's detector takes to meet `[i, i + 1)`).
    `masks`: kernel accesses are mostly masked stores (ERR-28), a window `[0, 3)` or `[i, i + 2)` round
    elements `[i, i + 1)` or none."""
    devices = draw(st.integers(1, 2))
    cores = draw(st.sampled_from([1, 2])) if devices == 1 else 1
    topo = Topology(devices, cores)
    cells = st.integers(0, 2).map(lambda i: box((i, i + 1)))
    if empty:
        cells = st.one_of(cells, st.integers(0, 2).map(lambda i: box((i, i))))
    sem = st.integers(0, 1).map(lambda i: SemRef("sems", i))
    bufs = st.sampled_from(["buf", "src"])
    target = st.one_of(st.none(), st.integers(0, devices - 1))
    bodies = []
    for g in range(topo.num_cores):
        ops = []
        for _ in range(draw(st.integers(1, 4))):
            kind = draw(st.sampled_from(["access", "access", "dma", "signal", "wait"]))
            if kind == "access":
                if masks and draw(st.integers(0, 3)) > 0:
                    i = draw(st.integers(0, 2))
                    lo, hi = draw(st.sampled_from([(0, 3), (i, i + 2), (max(i - 1, 0), i + 1)]))
                    elements = box((i, i)) if draw(st.integers(0, 3)) == 0 else box((i, i + 1))
                    ops.append(Access(draw(bufs), masked(lo, hi, elements), True))
                else:
                    ops.append(Access(draw(bufs), draw(cells), draw(st.booleans())))
            elif kind == "dma":
                ops.append(DmaStart(draw(sem), 1, src_sem=draw(st.one_of(st.none(), sem)), device=draw(target),
                                    src_buf=draw(bufs), src_region=draw(cells), dst_buf=draw(bufs), dst_region=draw(cells)))
            elif kind == "signal":
                ops.append(Signal(draw(sem), 1, device=draw(target), core=draw(st.sampled_from([None, 0]))))
            else:
                ops.append(Wait(draw(sem), 1))
        bodies.append(ops)
    return launch(topo, bodies, scratch=SCRATCH, collective_id=0)


@pytest.mark.rule("DR-2", "DR-3", "DR-6", "PROP-7")
@settings(max_examples=3000 if os.environ.get("SEMCHECK_PROFILE") == "ci-long" else 150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(programs_with_accesses(), st.sampled_from(DMA_MODES))
def test_restricted_runs_decide_races_as_the_explorer_does(program, mode):
    if fast_run(program, mode, record=False).state.failure is not None:
        return  # a failing program is the other properties' business (the race property is unknown)
    truth = detector_race(program) if mode == "eager" else brute_force_race(program, mode)
    if truth is None:
        return
    report = find_races(program, mode)
    confirmed = any(r.confirmed for r in report.races)
    if truth:
        assert report.races, "a race every-interleaving exploration finds was missed"
    else:
        assert not confirmed, "a confirmed race that no interleaving reaches"
    if mode != "on_wait":
        assert all(r.confirmed for r in report.races)


@pytest.mark.rule("DR-5")
def test_one_pair_per_orbit_decides_as_every_pair(monkeypatch):
    import sys

    from ring_programs import ring_allreduce

    race_module = sys.modules["semcheck.model.race"]
    for bug in (None, "unguarded"):
        program = ring_allreduce(6) if bug is None else _unguarded_ring(6)
        reduced = {m: bool(find_races(program, m).races) for m in DMA_MODES}
        monkeypatch.setattr(race_module, "race_symmetry", lambda p, **_: (p.topology.num_devices, None))
        full = {m: bool(find_races(program, m).races) for m in DMA_MODES}
        monkeypatch.undo()
        assert reduced == full
        assert any(full.values()) == (bug is not None)


def _chunk_ring(n: int, *, guarded: bool) -> Program:
    """Device d sends its chunk d into the same chunk of its right neighbour, then reads the chunk its
    left neighbour sends (d - 1): the regions move one chunk per device, so the program repeats only
    with its buffer's rows shifted (DR-5). Unguarded, the read comes before the receive wait."""
    def chunk(i: int) -> Region:
        return box((8 * (i % n), 8 * (i % n) + 8))

    bodies = []
    for d in range(n):
        send = DmaStart(SemRef("sems", 0), 32, src_sem=SemRef("sems", 1), device=(d + 1) % n, src_buf="src",
                        src_region=chunk(d), dst_buf="src", dst_region=chunk(d))
        read = Access("src", chunk(d - 1))
        waits = [Wait(SemRef("sems", 1), 32, kind="dma"), Wait(SemRef("sems", 0), 32, kind="dma")]
        bodies.append([send, *waits, read] if guarded else [send, read, *waits])
    return launch(Topology(n), bodies, scratch=SCRATCH)


@pytest.mark.rule("DR-5")
def test_a_ring_on_shifted_chunks_is_decided_on_one_device_as_on_all(monkeypatch):
    import sys

    from semcheck.model.symmetry import Rotation

    race_module = sys.modules["semcheck.model.race"]
    for guarded in (True, False):
        program = _chunk_ring(8, guarded=guarded)
        rot = Rotation.observe(program, shifted=True)
        k, shifts = rot.devices, dict(rot.shifts)
        assert k == 1 and shifts["src"] == (8, 64)
        reduced = {m: bool(find_races(program, m).races) for m in DMA_MODES}
        monkeypatch.setattr(race_module, "race_symmetry", lambda p, **_: (p.topology.num_devices, None))
        full = {m: bool(find_races(program, m).races) for m in DMA_MODES}
        monkeypatch.undo()
        assert reduced == full == {m: not guarded for m in DMA_MODES}
    # a region the shift would wrap round is no box: no symmetry
    broken = _chunk_ring(8, guarded=True)
    cores = list(broken.cores)
    cores[3] = tuple(dataclasses.replace(op, region=box((60, 68))) if isinstance(op, Access) else op
                     for op in cores[3])
    assert Rotation.observe(dataclasses.replace(broken, cores=tuple(cores)), shifted=True).devices == 8


def _masked_chunk_ring(n: int, *, guarded: bool) -> Program:
    """Device d copies the first half of its chunk d into its right neighbour's, then stores the second half
    of chunk d - 1 with a masked store over the whole chunk (ERR-28: the detector's window is the chunk, the
    incoming copy's half included). Unguarded, the store comes before the receive wait."""
    def rows(i: int, lo: int, hi: int) -> Region:
        return box((8 * (i % n) + lo, 8 * (i % n) + hi))

    bodies = []
    for d in range(n):
        send = DmaStart(SemRef("sems", 0), 16, src_sem=SemRef("sems", 1), device=(d + 1) % n, src_buf="src",
                        src_region=rows(d, 0, 4), dst_buf="src", dst_region=rows(d, 0, 4))
        store = Access("src", dataclasses.replace(rows(d - 1, 4, 8), window=rows(d - 1, 0, 8)), True)
        waits = [Wait(SemRef("sems", 1), 16, kind="dma"), Wait(SemRef("sems", 0), 16, kind="dma")]
        bodies.append([send, *waits, store] if guarded else [send, store, *waits])
    return launch(Topology(n), bodies, scratch=SCRATCH)


@pytest.mark.rule("DR-5", "ERR-28")
def test_a_ring_of_masked_stores_on_shifted_chunks_is_decided_on_one_device_as_on_all(monkeypatch):
    """The rotation moves a masked store's window with its elements (`shift_region`): the one-device
    decision is the whole program's, a race of the window under the interpreter modes only."""
    import sys

    from semcheck.model.symmetry import Rotation

    race_module = sys.modules["semcheck.model.race"]
    for guarded in (True, False):
        program = _masked_chunk_ring(8, guarded=guarded)
        rot = Rotation.observe(program, shifted=True)
        assert rot.devices == 1 and dict(rot.shifts)["src"] == (8, 64)
        reduced = {m: bool(find_races(program, m).races) for m in DMA_MODES}
        monkeypatch.setattr(race_module, "race_symmetry", lambda p, **_: (p.topology.num_devices, None))
        full = {m: bool(find_races(program, m).races) for m in DMA_MODES}
        monkeypatch.undo()
        assert reduced == full == {m: not guarded and m != "hardware" for m in DMA_MODES}
        verdicts = {m: decide("race-free", program, m).verdict for m in DMA_MODES}
        assert verdicts == {m: "violated" if not guarded and m != "hardware" else "proved" for m in DMA_MODES}


def _unguarded_ring(n: int) -> Program:
    """Each device copies into its right neighbour's slot and reads its own slot before waiting."""
    whole = box((0, 8))
    bodies = [
        [DmaStart(SemRef("sems", 0), 32, device=(d + 1) % n, src_buf="src", src_region=whole,
                  dst_buf="buf", dst_region=whole), Access("buf", whole), Wait(SemRef("sems", 0), 32, kind="dma")]
        for d in range(n)
    ]
    return launch(Topology(n), bodies, scratch=SCRATCH)


def _two_senders_then_read() -> Program:
    """Devices 1 and 2 each copy into their own half of device 0's buffer, signalling one semaphore;
    device 0 waits for both copies, then reads the whole buffer: race-free. Device 1 starts only after
    a relay through devices 3 and 4, so in the greedy run its copy arrives after device 0's first wait
    passed, and which copy that wait takes depends on the schedule: no certificate (DR-6)."""
    def copy(half: Region) -> DmaStart:
        return DmaStart(SemRef("sems", 0), 32, device=0, src_buf="src", src_region=box((0, 4)), dst_buf="buf",
                        dst_region=half)

    bodies = [
        [Wait(SemRef("sems", 0), 32, kind="dma"), Wait(SemRef("sems", 0), 32, kind="dma"), Access("buf", box((0, 8)))],
        [Wait(SemRef("sems", 1), 1), copy(box((0, 4)))],
        [copy(box((4, 8)))],
        [Signal(SemRef("sems", 1), 1, device=4)],
        [Wait(SemRef("sems", 1), 1), Signal(SemRef("sems", 1), 1, device=1)],
    ]
    return launch(Topology(5), bodies, scratch=SCRATCH)


@pytest.mark.rule("PROP-7")
def test_races_past_the_work_budget_are_unknown_at_once_never_proved(monkeypatch):
    import semcheck.model.happens_before as hb
    import semcheck.model.race as race_module
    from semcheck.checker.properties.races import race_free
    from semcheck.model.happens_before import order

    monkeypatch.setattr(hb, "MAX_PASSES", 1)  # no second pass: the first one's certificate fails
    program = _two_senders_then_read()
    assert not order(program, "hardware", accesses(program, "hardware")[0]).certified
    report = find_races(program, "hardware", max_work=1)
    assert report.over_budget and not report.complete and report.races == ()
    monkeypatch.setattr(race_module, "MAX_WORK", 1)
    v = race_free(program, "hardware")
    assert v.verdict == "unknown" and "fewer devices" in v.reason


@pytest.mark.rule("DR-6")
def test_a_counter_whose_arrivals_overtake_its_waits_is_decided_against_all_it_receives():
    # device 1's copy arrives after device 0's first wait passed in the run, so the first pass has no
    # certificate; the second decides that semaphore against both copies: neither is needed by the
    # first wait, both by the second, and the read after it is ordered
    from semcheck.model.happens_before import order

    program = _two_senders_then_read()
    o = order(program, "hardware", accesses(program, "hardware")[0])
    assert o.certified and o.candidates == ()


@pytest.mark.rule("DR-6")
def test_a_certified_happens_before_pass_proves_without_restricted_runs():
    program = double_buffered(4, wrong_slot=False)
    report = find_races(program, "hardware", max_work=1)
    assert report.complete and report.races == () and report.runs == 0
    assert find_races(_two_senders_then_read(), "hardware").races == ()  # decided by restricted runs




def _one_sender_two_copies() -> Program:
    """Device 0 copies twice into device 1, both copies signalling one semaphore (as jax's shipped
    all_gather does); device 1 waits for one copy's bytes and reads the first copy's slot."""
    def copy(slot: int) -> DmaStart:
        return DmaStart(SemRef("sems", 0), 32, device=1, src_buf="src", src_region=box((0, 8)), dst_buf="buf",
                        dst_region=box((8 * slot, 8 * slot + 8)))

    bodies = [[copy(0), copy(1)], [Wait(SemRef("sems", 0), 32, kind="dma"), Access("buf", box((0, 8)))]]
    return launch(Topology(2), bodies, scratch=SCRATCH)


@pytest.mark.rule("DR-1", "DR-7")
def test_eager_orders_a_copy_before_every_wait_after_its_start_as_the_detector_does():
    # under eager the first copy signals inside its start, before the second starts: the wait cannot
    # pass before it, and takes its clock; on a TPU the second copy may land first (a real race)
    program = _one_sender_two_copies()
    assert detector_race(program) is False
    assert find_races(program, "eager").races == ()
    assert find_races(program, "hardware").races
    assert brute_force_race(program, "hardware") is True


@pytest.mark.rule("DR-47", "ERR-27")
@settings(max_examples=1000 if os.environ.get("SEMCHECK_PROFILE") == "ci-long" else 120, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(programs_with_accesses(empty=True), st.sampled_from(DMA_MODES))
def test_restricted_runs_decide_races_as_the_explorer_does_with_empty_windows(program, mode):
    """DR-47: with copies and accesses of no element, the passes that decide races (the happens-before pass's
    chains and partners, the sweep, restricted runs) find a race exactly where exploring every schedule does
    with the mode's conflicts: under eager the detector's own clocks and windows (ERR-27), under hardware no
    access of no element."""
    if fast_run(program, mode, record=False).state.failure is not None:
        return
    truth = detector_race(program) if mode == "eager" else brute_force_race(program, mode)
    if truth is None:
        return
    report = find_races(program, mode)
    if truth:
        assert report.races, "a race every-interleaving exploration finds was missed"
    else:
        assert not any(r.confirmed for r in report.races), "a confirmed race that no interleaving reaches"


@pytest.mark.rule("DR-48", "ERR-27")
def test_a_race_of_windows_says_so_and_the_modes_differ_note_names_err_27():
    from semcheck.checker.properties.differences import differences, exposures
    from semcheck.checker.run.request import Result

    head = DmaStart(SemRef("sems", 0), 32, src_buf="src", src_region=box((0, 8)), dst_buf="buf",
                    dst_region=box((0, 8)), loc=Loc("k.py", 11))
    tail = DmaStart(SemRef("sems", 0), 0, src_buf="src", src_region=box((8, 8)), dst_buf="buf",
                    dst_region=box((0, 0)), loc=Loc("k.py", 12))  # of no element, starting inside the head's
    program = single_core([head, tail, wait(0)])
    verdicts = {m: decide("race-free", program, m) for m in DMA_MODES}
    assert verdicts["hardware"].verdict == "proved"
    for mode in ("eager", "on_wait"):
        v = verdicts[mode]
        assert v.verdict == "violated", mode
        assert "share no element (ERR-27)" in v.witness.message and "line 12" in v.witness.message
        assert "on a TPU no data is shared" in v.witness.message and v.witness.details["rule"] == "ERR-27"
    exposed = exposures(program)
    assert [e.locs for e in exposed if e.code == "ERR-27"] == [(Loc("k.py", 12),)]
    rs = [Result("build", 1, m, [verdicts[m]], program={"exposures": exposed}) for m in DMA_MODES]
    (d,) = differences(rs)
    assert "ERR-27" in [e.code for e in d.causes]
    # two windows of no element at one start do not meet (neither start lies inside the other)
    program = single_core([tail, dataclasses.replace(tail, loc=Loc("k.py", 13)), wait(0)])
    assert all(decide("race-free", program, m).verdict in ("proved", "vacuous") for m in DMA_MODES)
    # copies that share a row are a race in every mode: no note
    program = single_core([head, dataclasses.replace(tail, dst_region=box((0, 1))), wait(0)])
    assert all(decide("race-free", program, m).verdict == "violated" for m in DMA_MODES)


@pytest.mark.rule("DR-47", "ERR-28", "ACC-51")
@settings(max_examples=2000 if os.environ.get("SEMCHECK_PROFILE") == "ci-long" else 400, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(programs_with_accesses(empty=True, masks=True), st.sampled_from(DMA_MODES))
def test_restricted_runs_decide_races_as_the_explorer_does_with_masked_windows(program, mode):
    """ERR-28: with masked stores whose window jax's detector takes them to write is more than their elements,
    the passes that decide races (the happens-before pass, the sweep, restricted runs, and the whole decision)
    find a race exactly where exploring every schedule does: under eager with the detector's clocks and the
    stores' windows, under hardware with their elements."""
    if fast_run(program, mode, record=False).state.failure is not None:
        return
    truth = detector_race(program) if mode == "eager" else brute_force_race(program, mode)
    if truth is None:
        return
    report = find_races(program, mode)
    verdict = decide("race-free", program, mode).verdict
    if truth and not report.races and report.unperformed:
        # ACC-51: the pair exploration finds pending has an empty window and a copy half no run performs
        # (on_wait, schedule-free): jax's detector never meets it
        assert mode == "on_wait"
    elif truth:
        assert report.races, "a race every-interleaving exploration finds was missed"
        assert verdict not in ("proved", "vacuous"), "race-free proved where exploration finds a race"
    else:
        assert not any(r.confirmed for r in report.races), "a confirmed race that no interleaving reaches"


@pytest.mark.rule("DR-48", "ERR-28")
def test_a_race_of_a_masked_store_s_window_says_so_and_the_modes_differ_note_names_err_28():
    from semcheck.checker.properties.differences import differences, exposures
    from semcheck.checker.run.request import Result

    copy = DmaStart(SemRef("sems", 0), 32, src_buf="src", src_region=box((0, 4)), dst_buf="buf",
                    dst_region=box((0, 4)), loc=Loc("k.py", 11))
    store = Access("buf", masked(0, 8, box((4, 8))), True, Loc("k.py", 12))  # mask true on rows 4..8 only
    program = single_core([copy, store, wait(0)])
    verdicts = {m: decide("race-free", program, m) for m in DMA_MODES}
    assert verdicts["hardware"].verdict == "proved"
    for mode in ("eager", "on_wait"):
        v = verdicts[mode]
        assert v.verdict == "violated", mode
        assert "whole indexed window (ERR-28)" in v.witness.message and "line 12" in v.witness.message
        assert "buf[4:8] (window [0:8])" in v.witness.message and v.witness.details["rule"] == "ERR-28"
    exposed = exposures(program)
    assert [e.locs for e in exposed if e.code == "ERR-28"] == [(Loc("k.py", 12),)]
    rs = [Result("build", 1, m, [verdicts[m]], program={"exposures": exposed}) for m in DMA_MODES]
    (d,) = differences(rs)
    assert "ERR-28" in [e.code for e in d.causes]
    # a window that does not reach the copy's rows: proved in every mode
    program = single_core([copy, dataclasses.replace(store, region=masked(4, 8, box((5, 8)))), wait(0)])
    assert all(decide("race-free", program, m).verdict == "proved" for m in DMA_MODES)
    # an all-false mask: no element on a TPU, its window still for the detector
    program = single_core([copy, dataclasses.replace(store, region=masked(0, 8, box((0, 0)))), wait(0)])
    assert decide("race-free", program, "hardware").verdict == "proved"
    assert decide("race-free", program, "eager").verdict == "violated"
    assert [e.code for e in exposures(program) if e.code.startswith("ERR")] == ["ERR-28"]  # not a window of no element


@pytest.mark.rule("ACC-2", "DR-47")
@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 3), st.integers(0, 12), st.integers(0, 6),
                          st.booleans(), st.sampled_from([1, 1, 1, 0, 2])), max_size=14), st.sampled_from(DMA_MODES))
def test_the_sweep_finds_every_conflicting_pair_a_comparison_of_all_pairs_finds(specs, mode):
    """Windows of no element included (width 0): under the interpreter modes they meet one that starts where
    they do (ERR-27), which the sweep must pair too."""
    from semcheck.model.access import AccessEvent, conflicts

    events = []
    for i, (buf, core, lo, width, write, rank) in enumerate(specs):
        dims = [(lo, lo + width)] + [(0, 4)] * (rank - 1) if rank else []
        events.append(AccessEvent(core, i, None, (0, None, buf), Region(tuple(dims)), write, core, Loc("k.py", i)))
    naive = [(a, b) for i, a in enumerate(events) for b in events[i + 1:] if conflicts(a, b, mode)]
    assert sorted(conflicting_pairs(events, mode), key=lambda p: (p[0].pc, p[1].pc)) == \
        sorted(naive, key=lambda p: (p[0].pc, p[1].pc))


@st.composite
def symmetric_rings(draw, empty: bool = False) -> Program:
    """Every device runs one template, its targets and chunks moved one device and one chunk along. `empty`:
    some chunks are windows of no element at the chunk's start (ERR-27)."""
    n = draw(st.sampled_from([4, 6, 8]))
    steps = []
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["dma", "wait", "signal", "access", "access"]))
        steps.append((kind, draw(st.integers(0, 2)), draw(st.integers(0, n - 1)), draw(st.integers(0, n - 1)),
                      draw(st.booleans()), draw(st.integers(0, 1))))
    # the steps whose chunks are windows of no element (the same step on every device: the ring still rotates)
    hollow = set(draw(st.sets(st.integers(0, len(steps) - 1)))) if empty else set()
    now = [0]

    def chunk(i: int) -> Region:
        lo = 8 * (i % n)
        return box((lo, lo if now[0] in hollow else lo + 8))

    bodies = []
    for d in range(n):
        ops = []
        for now[0], (kind, off, a, b, flag, sem) in enumerate(steps):
            if kind == "dma":
                ops.append(DmaStart(SemRef("sems", sem), 8, src_sem=SemRef("sems", 1 - sem) if flag else None,
                                    device=(d + off) % n, src_buf="src", src_region=chunk(d + a),
                                    dst_buf="src", dst_region=chunk(d + b)))
            elif kind == "wait":
                ops.append(Wait(SemRef("sems", sem), 8 if flag else 1, kind="dma" if flag else "semaphore"))
            elif kind == "signal":
                ops.append(Signal(SemRef("sems", sem), 1, device=(d + off) % n))
            else:
                ops.append(Access("src", chunk(d + a), flag))
        bodies.append(ops)
    return launch(Topology(n), bodies, scratch=SCRATCH)


@pytest.mark.rule("DR-8", "DR-47")
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(symmetric_rings(), symmetric_rings(empty=True)))
def test_the_fold_run_orders_accesses_as_the_whole_run_does(program):
    from semcheck.model.fold import find_fold
    from semcheck.model.symmetry import Rotation
    from semcheck.model.happens_before import order_modes

    fold = find_fold(program, shifted=True)
    if fold is None:
        return
    k = Rotation.observe(program, shifted=True).devices
    for mode in DMA_MODES:
        events = accesses(program, mode, near=k)[0]
        full = order_modes(program, {mode: events})[mode]
        sym = order_modes(program, {mode: events}, fold)[mode]
        key = sorted(((a.core, a.pc, a.half), (b.core, b.pc, b.half)) for a, b in full.candidates)
        if full.certified:
            assert sym.certified and key == sorted(((a.core, a.pc, a.half), (b.core, b.pc, b.half))
                                                   for a, b in sym.candidates), mode


@pytest.mark.rule("ACC-1", "DR-47")
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(programs_with_accesses(), programs_with_accesses(empty=True), symmetric_rings()))
def test_a_program_makes_the_same_accesses_in_every_mode(program):
    """`ordered_modes` lists the accesses once for all modes: a copy lands where SIG-1 says in every mode; each
    mode then sees them as `in_mode` says (the hardware none of no element, ERR-27)."""
    from semcheck.model.access import in_mode

    every, unrecorded = accesses(program, None)
    for mode in DMA_MODES:
        assert accesses(program, mode) == (in_mode(every, mode), unrecorded), mode
    assert all(not e.region.empty for e in accesses(program, "hardware")[0])


@pytest.mark.rule("RUN-7")
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(programs_with_accesses(), symmetric_rings()))
def test_the_skeleton_fold_read_off_the_program_symmetry_is_the_skeleton_own_fold(program):
    """The analysis takes the skeleton's fold from the race check's symmetry when that rotates by one device
    (`model.fold.skeleton_fold`); it must be exactly the fold a search on the skeleton finds, and where
    there is none, the class run's (RUN-31)."""
    from semcheck.checker.properties.analysis import Analysis
    from semcheck.model.access import skeleton
    from semcheck.model.fold import find_fold

    got = Analysis(program).fold
    want = find_fold(skeleton(program))
    if want is None and got is not None:
        assert not got.faithful and got.devices >= 2 and got.program == skeleton(got.program)
    else:
        assert got == want


@pytest.mark.rule("DR-7")
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(programs_with_accesses(), symmetric_rings()))
def test_the_interpreter_modes_sharing_a_run_decide_as_each_alone(program):
    from semcheck.model.race import ordered_modes

    def key(o):
        return (o.ordering.certified, sorted(((a.core, a.pc, a.half), (b.core, b.pc, b.half))
                                             for a, b in o.ordering.candidates))

    together = ordered_modes(program, ("eager", "on_wait"))
    for mode in ("eager", "on_wait"):
        assert key(together[mode]) == key(ordered_modes(program, (mode,))[mode]), mode


@pytest.mark.rule("DR-4")
def test_an_on_wait_race_too_long_to_replay_is_unknown_and_says_so(monkeypatch):
    """A witness past REPLAY_LIMIT steps is not replayed (the step relation copies its state per step),
    so the race is not believed: unknown, naming the limit, and the orbit's images (as long) not tried."""
    import semcheck.checker.properties.races as checker_races
    import semcheck.model.race as race_module
    from semcheck import check_program

    program = double_buffered(3, wrong_slot=True)
    (v,) = check_program(program, "on_wait", ("race-free",), fold=False)
    assert v.verdict == "violated"  # replayed within the limit
    monkeypatch.setattr(race_module, "REPLAY_LIMIT", 3)
    monkeypatch.setattr(checker_races, "REPLAY_LIMIT", 3)
    (v,) = check_program(program, "on_wait", ("race-free",), fold=False)
    assert v.verdict == "unknown" and "more than semcheck replays (3)" in v.reason


# --- DR-9: copies that land in parts ---------------------------------------------------------


def _partial(first_wait: int) -> Program:
    """One 64-byte copy of 16 rows, a wait for `first_wait` bytes, a read of the 16 rows, a wait for the rest."""
    copy = DmaStart(SemRef("sems", 0), 64, src_buf="src", src_region=box((0, 16)), dst_buf="buf",
                    dst_region=box((0, 16)), loc=Loc("k.py", 10))
    body = [copy, Wait(SemRef("sems", 0), first_wait, kind="dma", loc=Loc("k.py", 11)),
            Access("buf", box((0, 16)), False, Loc("k.py", 12))]
    if first_wait < 64:
        body.append(Wait(SemRef("sems", 0), 64 - first_wait, kind="dma", loc=Loc("k.py", 13)))
    return single_core(body)


def _race_verdicts(program: Program) -> dict[str, object]:
    from semcheck.checker.properties.registry import BY_ID

    return {m: decide("race-free", program, m) for m in DMA_MODES}


@pytest.mark.rule("DR-9", "PROP-7")
def test_a_read_after_waiting_for_part_of_a_copy_races_only_on_hardware():
    program = _partial(32)
    v = _race_verdicts(program)
    assert {m: x.verdict for m, x in v.items()} == {"eager": "proved", "on_wait": "proved", "hardware": "violated"}
    w = v["hardware"].witness
    assert w.details["rule"] == "DR-9" and "all 64 bytes" in w.message and w.schedule == ()
    assert [loc.line for loc in w.locs[:2]] == [10, 12]
    # the whole-copy model has no such race: the split program's is the only one
    assert not any(r.exact and r.confirmed for r in find_races(program, "hardware").races)
    # the positions are the program's (the forerunner is not one of its operations)
    at = next(pc for pc, op in enumerate(program.cores[0]) if type(op) is DmaStart)
    assert {(c, pc) for c, pc, _ in w.blocked} == {(0, at), (0, at + 2)}
    stopped = w.details["timeline"]
    assert stopped and "k.py:12" in str(stopped)


@pytest.mark.rule("DR-9", "PROP-7")
def test_waiting_for_the_whole_copy_before_the_read_is_race_free_in_every_mode():
    assert {m: x.verdict for m, x in _race_verdicts(_partial(64)).items()} == dict.fromkeys(DMA_MODES, "proved")


@pytest.mark.rule("DR-9", "DR-5", "DR-8")
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(symmetric_rings())
def test_the_split_program_has_the_symmetry_read_off_the_program(program):
    from semcheck.checker.properties.analysis import Analysis
    from semcheck.model.fold import race_symmetry

    parts, analysis = Analysis(program).partial_arrivals
    if parts.program is program:
        return
    derived = analysis.symmetry  # read off the program's own by `Analysis.partial_arrivals`
    direct = race_symmetry(parts.program)
    assert derived[0] == direct[0]
    assert (derived[1] is None) == (direct[1] is None)
    if direct[1] is not None:
        assert derived[1] == direct[1]


@pytest.mark.rule("DR-9")
def test_a_copy_mixing_semaphore_types_leaves_hardware_races_unknown():
    copy = DmaStart(SemRef("sems", 0), 64, src_sem=SemRef("sems", 1), src_buf="src", src_region=box((0, 16)),
                    dst_buf="buf", dst_region=box((0, 16)), src_sem_type="regular", loc=Loc("k.py", 10))
    program = single_core([copy, Wait(SemRef("sems", 0), 64, kind="dma"), Wait(SemRef("sems", 1), 1),
                           Access("buf", box((0, 16)), False, Loc("k.py", 12))])
    v = _race_verdicts(program)["hardware"]
    assert v.verdict == "unknown" and "REGULAR" in v.reason and "k.py:10" in v.reason


@pytest.mark.rule("DR-52")
def test_a_confirming_replay_counts_each_copys_rank_among_its_starts_once(monkeypatch):
    # the replay asks at every step whether both events are next; a copy's half is found by its rank among its
    # core's starts, which is counted once per event, not once per step (the same race, found as before)
    from semcheck.model import race as race_module

    program = _copies_then_waits((0, 1, 2, 3, 0))
    counted = []
    real = race_module.start_rank
    monkeypatch.setattr(race_module, "start_rank", lambda *a: counted.append(a) or real(*a))
    found = find_races(program, "on_wait").races[0]
    assert found.exact and found.confirmed and {found.first.pc, found.second.pc} == {
        pc for pc, op in enumerate(program.cores[0]) if type(op) is DmaStart and op.dst_region == box((0, 8))}
    assert len(found.outcome.schedule) > 2 and 0 < len(counted) <= 2
