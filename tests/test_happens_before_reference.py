"""The happens-before pass (DR-6 .. DR-8) answers exactly as the pass it replaced (DR-37, DR-38).

`hb_reference.py` is the pass as it was before its run was recorded once and told to each
observer, its later passes resuming the first; it is kept unchanged as the reference. On generated
programs (several senders on one counter, so that arrivals overtake waits and the later passes run;
symmetric rings, so that the fold's run is used) both give the same certificate, the same reason and
the same candidate pairs, in every mode.
"""

from __future__ import annotations

import dataclasses

import hb_reference as reference
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_races import SCRATCH, _two_senders_then_read, box, programs_with_accesses, symmetric_rings
from test_races_class_run import all_to_alls

from semcheck.model import happens_before as hb
from semcheck.model.quotient import class_quotient
from semcheck.model.access import accesses
from semcheck.model.fold import find_fold
from semcheck.model.symmetry import Rotation
from semcheck.model.launch import launch
from semcheck.model.ops import DMA_MODES, Access, Barrier, DmaStart, Program, SemRef, Signal, Topology, Wait


@st.composite
def many_senders(draw) -> Program:
    """Up to five devices signalling and copying onto each other's two semaphores, waiting for one or
    two arrivals at a time, and touching three cells of two buffers: arrivals from several devices
    on one counter, in the run's order or overtaking its waits."""
    n = draw(st.integers(2, 5))
    cells = st.integers(0, 2).map(lambda i: box((8 * i, 8 * i + 8)))
    sem = st.integers(0, 1).map(lambda i: SemRef("sems", i))
    bufs = st.sampled_from(["buf", "src"])
    bodies = []
    for _ in range(n):
        ops = []
        for _ in range(draw(st.integers(1, 7))):
            kind = draw(st.sampled_from(["access", "dma", "dma", "signal", "wait", "wait"]))
            to = draw(st.integers(0, n - 1))
            if kind == "access":
                ops.append(Access(draw(bufs), draw(cells), draw(st.booleans())))
            elif kind == "dma":
                ops.append(DmaStart(draw(sem), 8, src_sem=draw(st.one_of(st.none(), sem)), device=to,
                                    src_buf=draw(bufs), src_region=draw(cells), dst_buf=draw(bufs),
                                    dst_region=draw(cells)))
            elif kind == "signal":
                ops.append(Signal(draw(sem), draw(st.integers(1, 2)), device=to))
            else:
                dma = draw(st.booleans())
                ops.append(Wait(draw(sem), 8 * draw(st.integers(1, 2)) if dma else draw(st.integers(1, 2)),
                                kind="dma" if dma else "semaphore"))
        bodies.append(ops)
    return launch(Topology(n), bodies, scratch=SCRATCH)


def _key(o) -> tuple:
    return (o.certified, o.why, [((a.core, a.pc, a.half), (b.core, b.pc, b.half)) for a, b in o.candidates])


def _same(program: Program, events: dict, fold=None) -> None:
    new = hb.order_modes(program, events, fold)
    old = reference.order_modes(program, events, fold)
    assert new.keys() == old.keys()
    for mode in new:
        assert _key(new[mode]) == _key(old[mode]), mode


@pytest.mark.rule("DR-37", "DR-38", "DR-6", "DR-42")
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(many_senders(), programs_with_accesses()))
def test_the_recorded_run_orders_as_one_run_per_pass(program):
    events = accesses(program, "hardware")[0]
    if not events:
        return
    _same(program, {m: events for m in DMA_MODES})  # eager and on_wait share a run
    for mode in DMA_MODES:
        _same(program, {mode: events})


@pytest.mark.rule("DR-37", "DR-8", "DR-42")
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(symmetric_rings())
def test_the_recorded_fold_run_orders_as_one_run_per_pass(program):
    fold = find_fold(program, shifted=True)
    k = Rotation.observe(program, shifted=True).devices
    events = accesses(program, "hardware", near=k)[0]
    if not events:
        return
    _same(program, {m: events for m in DMA_MODES})
    if fold is not None:
        _same(program, {m: events for m in DMA_MODES}, fold)


@pytest.mark.rule("DR-38")
def test_some_generated_program_needs_a_later_pass(monkeypatch):
    """Two copies onto one counter, the second landing after the first wait passed: its certificate
    fails, and the answer comes from the later pass, where the recorded run is told a second time."""
    program = _two_senders_then_read()
    events = accesses(program, "hardware")[0]
    seen = []
    real = hb._verdict

    def spy(o, state):
        seen.append(bool(o.totals))
        return real(o, state)

    monkeypatch.setattr(hb, "_verdict", spy)
    _same(program, {"hardware": events})
    assert seen == [True]


@st.composite
def rings_with_a_device_barrier(draw) -> Program:
    """A symmetric ring or all-to-all with, on a drawn subset of its devices' positions, a barrier of
    every device: each class of every period passes it whole, so DR-43's join per residue is taken."""
    program = draw(st.one_of(symmetric_rings(), all_to_alls()))
    n = program.topology.num_cores
    at = draw(st.integers(0, min(len(ops) for ops in program.cores)))
    everyone = frozenset(range(n))
    return dataclasses.replace(program, cores=tuple(ops[:at] + (Barrier("all", everyone),) + ops[at:]
                                                    for ops in program.cores))


@pytest.mark.rule("DR-43")
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(symmetric_rings(), rings_with_a_device_barrier()))
def test_the_class_run_read_through_its_rotations_orders_as_the_reference_rolls_them(program):
    """DR-43 on DR-41's run of one period: clocks read through their rotation, joins of a row's own
    snapshot skipped and a barrier of every device joined per residue order as the reference pass, which
    rolls every clock into a copy of its own."""
    k = Rotation.observe(program, shifted=True).devices
    if k >= program.topology.num_devices:
        return
    one = class_quotient(program, k)
    events = accesses(program, "hardware", near=k)[0]
    if one is None or not events:
        return
    _same(program, {m: events for m in DMA_MODES}, one)
    for mode in DMA_MODES:
        _same(program, {mode: events}, one)


@pytest.mark.rule("DR-43")
@settings(max_examples=200, deadline=None)
@given(st.integers(1, 6), st.integers(1, 6), st.data())
def test_a_barrier_of_every_member_joins_each_rotation_at_once(step, times, data):
    """DR-43: the join per residue is the join of the snapshot rolled by every multiple of the step."""
    import numpy as np

    from semcheck.model.clock_rows import join_every_rotation

    n = step * times
    entries = st.lists(st.integers(0, 50), min_size=n, max_size=n)
    row = np.array(data.draw(entries), dtype=np.int32)
    snap = np.array(data.draw(entries), dtype=np.int32)
    rolled = row.copy()
    for j in range(times):
        np.maximum(rolled, np.roll(snap, j * step), out=rolled)
    join_every_rotation(row, snap, step)
    assert row.tolist() == rolled.tolist()


@pytest.mark.rule("DR-43")
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(symmetric_rings(), rings_with_a_device_barrier()))
def test_the_class_runs_clocks_read_through_their_rotations_are_the_references_rolled_clocks(program):
    """DR-43: told one run of DR-41's class, the observer ends with the clocks the reference computes by
    rolling every clock, every entry but each row's own (stale, never read), and with the same waits known
    to follow each half. (Few orderings of these programs hang on another core's clock, so the pass's
    answers alone would not show a wrong rotation.)"""
    import numpy as np

    from semcheck.model.fast import fast_run
    from semcheck.model.hb_observers import SymmetricObserver

    k = Rotation.observe(program, shifted=True).devices
    one = class_quotient(program, k) if k < program.topology.num_devices else None
    if one is None:
        return
    events = accesses(program, "hardware", near=k)[0]
    for mode in DMA_MODES:
        run_mode, arrival = hb.reading(mode)
        new = SymmetricObserver(program, one, events, arrival, run_mode)
        old = reference._SymmetricObserver(program, one, events, arrival, run_mode)
        fast_run(one.program, run_mode, record=False, observer=reference._Fanout([new, old]))
        rows = np.arange(new.clock.shape[0])
        mine, theirs = new.clock.copy(), old.clock.copy()
        mine[rows, rows] = theirs[rows, rows] = 0
        assert mine.tolist() == theirs.tolist(), mode
        assert {k: list(v) for k, v in new.done.items()} == {k: list(v) for k, v in old.done.items()}, mode


@pytest.mark.rule("DR-6", "DR-42")
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(many_senders(), programs_with_accesses(), symmetric_rings(), rings_with_a_device_barrier()))
def test_a_counter_that_hears_from_many_cores_reads_them_as_a_row(program):
    """DR-6's chain test per arrival reads each sending core's earliest pending position; past `MANY`
    cores (an all-to-all's counter hears from every core) it reads them as one row of the clock: here
    from the first core on, so that every generated program takes the row, in its own run and in the
    class run, and the pass still orders as the reference."""
    from semcheck.model import hb_counters

    events = accesses(program, "hardware")[0]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(hb_counters, "MANY", 0)
        if events:
            _same(program, {m: events for m in DMA_MODES})
            for mode in DMA_MODES:
                _same(program, {mode: events})
        k = Rotation.observe(program, shifted=True).devices
        one = class_quotient(program, k) if k < program.topology.num_devices else None
        near = accesses(program, "hardware", near=k)[0] if one is not None else []
        if near:
            _same(program, {m: near for m in DMA_MODES}, one)


@pytest.mark.rule("DR-45")
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(many_senders(), programs_with_accesses()), st.sampled_from([0, 1, 2]))
def test_sparse_clock_rows_order_as_the_dense_reference_whenever_they_turn_dense(program, past):
    """DR-45: the pass keeps each clock row sparse (the cores it has heard of) until it names more than
    `DENSE_PAST` cores, then dense. The other tests run it with rows that stay sparse (their programs are
    small); here rows turn dense after naming 0, 1 or 2 cores, so every join of a sparse row with a dense
    one, and every row that changes form in the middle of a run, is held to the dense reference."""
    from semcheck.model import clock_rows

    events = accesses(program, "hardware")[0]
    if not events:
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(clock_rows, "DENSE_PAST", past)
        _same(program, {m: events for m in DMA_MODES})
        for mode in DMA_MODES:
            _same(program, {mode: events})
            _same_clocks_at_every_event(program, mode, events)


def _same_clocks_at_every_event(program: Program, mode: str, events) -> None:
    """Told one run, the observer's rows equal the dense reference's after every event, each row's own
    (stale, never read) entry aside: few generated programs hang an answer on another core's clock."""
    import numpy as np

    from semcheck.model.fast import fast_run
    from semcheck.model.clock_rows import dense
    from semcheck.model.hb_observers import Observer

    run_mode, arrival = hb.reading(mode)
    new = Observer(program, events, arrival)
    old = reference._Observer(program, events, arrival)
    n = program.topology.num_cores

    class Both(reference._Fanout):
        def __getattribute__(self, name):
            told = super().__getattribute__(name)
            if name not in ("signal", "wait", "start", "arrive", "barrier", "access"):
                return told

            def tell(*args):
                told(*args)
                mine = np.array([dense(r, n) for r in new.clock])
                theirs = old.clock.copy()
                mine[np.arange(n), np.arange(n)] = theirs[np.arange(n), np.arange(n)] = 0
                assert mine.tolist() == theirs.tolist(), (name, args)
            return tell

    fast_run(program, run_mode, record=False, observer=Both([new, old]))


@pytest.mark.rule("DR-45")
def test_a_sparse_row_reads_zero_where_it_names_no_core_and_joins_as_the_maximum():
    """DR-45 on its own: a sparse row reads 0 for a core it does not name, and a join with a sparse or a
    dense row is the entrywise maximum, the row becoming dense past `DENSE_PAST` cores."""
    import numpy as np

    from semcheck.model import clock_rows
    from semcheck.model.clock_rows import Sparse, dense, join

    row = Sparse({1: 3})
    assert row[0] == 0 and row[1] == 3 and 0 not in row
    got = join(row, Sparse({1: 2, 4: 7}), 6)
    assert got is row and dict(got) == {1: 3, 4: 7}
    mixed = join(Sparse({2: 5}), np.array([1, 0, 0, 9, 0, 0], dtype=np.int32), 6)
    assert mixed.tolist() == [1, 0, 5, 9, 0, 0]
    into = np.array([0, 4, 0, 0, 0, 0], dtype=np.int32)
    assert join(into, Sparse({1: 2, 3: 8}), 6) is into and into.tolist() == [0, 4, 0, 8, 0, 0]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(clock_rows, "DENSE_PAST", 1)
        grown = join(Sparse({0: 1}), Sparse({5: 2}), 6)
    assert type(grown) is np.ndarray and grown.tolist() == [1, 0, 0, 0, 0, 2]
    assert dense(Sparse(), 3).tolist() == [0, 0, 0]


def _rows(n: int):
    import numpy as np

    from semcheck.model.clock_rows import Sparse

    entries = st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, 9)), max_size=n)
    sparse = entries.map(lambda es: Sparse(dict(es)))
    return st.one_of(sparse, sparse, entries.map(lambda es: np.array(
        [max([v for c, v in es if c == i], default=0) for i in range(n)], dtype=np.int32)))


@pytest.mark.rule("DR-49")
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_a_barrier_joins_its_rows_at_once_as_one_by_one_and_knows_when_a_row_is_within(data):
    """DR-49's two functions against their definitions: `join_all` of rows is their joins one after the
    other (sparse as long as DR-45 keeps it so), and `within` says a row is at most another only when it is."""
    from semcheck.model import clock_rows
    from semcheck.model.clock_rows import Sparse, dense, join, join_all, within

    n = data.draw(st.integers(1, 8))
    rows = data.draw(st.lists(_rows(n), min_size=1, max_size=6))
    before = [dense(r, n).tolist() for r in rows]
    most = data.draw(st.integers(1, 9))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(clock_rows, "DENSE_PAST", most)
        one_by_one = rows[0].copy()
        for r in rows[1:]:
            one_by_one = join(one_by_one, r, n)
        at_once = join_all(rows, n)
    assert dense(at_once, n).tolist() == dense(one_by_one, n).tolist()
    assert type(at_once) is not Sparse or len(at_once) <= most  # DR-45: sparse while it names few cores
    assert [dense(r, n).tolist() for r in rows] == before  # the rows joined are left as they were
    a, b = rows[0], rows[-1]
    below = bool((dense(a, n) <= dense(b, n)).all())
    assert within(a, b) == below or (not within(a, b) and type(a) is not Sparse and type(b) is Sparse)
    assert within(a, join_all([a, b], n)) or type(a) is not Sparse and type(join_all([a, b], n)) is Sparse


@st.composite
def two_cores_a_device(draw) -> Program:
    """Devices of two cores touching their device's HBM buffer with kernel accesses only, some of them
    ordered by a barrier of every core or a signal from the other core."""
    n = draw(st.integers(1, 3))
    topo = Topology(n, 2)
    every = frozenset(range(topo.num_cores))
    cells = st.integers(0, 1).map(lambda i: box((8 * i, 8 * i + 8)))
    rounds = draw(st.integers(1, 3))
    bodies = []
    for g in range(topo.num_cores):
        ops = []
        for _ in range(rounds):
            for _ in range(draw(st.integers(0, 2))):
                ops.append(Access(draw(st.sampled_from(["src", "buf"])), draw(cells), draw(st.booleans())))
            ops.append(draw(st.sampled_from([Barrier("all", every), None])))
        bodies.append([op for op in ops if op is not None])
    return launch(topo, bodies, scratch=SCRATCH)


@pytest.mark.rule("DR-50")
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(many_senders(), programs_with_accesses(), two_cores_a_device()))
def test_a_buffer_only_its_own_core_touches_adds_no_candidate(program):
    """DR-50: the pass that leaves out each buffer whose accesses are one core's kernel accesses orders as the
    pass that keeps them (same certificate, reason and candidates, in every mode)."""
    from semcheck.model import access_index

    events = accesses(program, "hardware")[0]
    if not events:
        return
    given = {m: events for m in DMA_MODES}
    left_out = hb.order_modes(program, given)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(access_index, "one_core", lambda groups: False)
        kept = hb.order_modes(program, given)
    for mode in DMA_MODES:
        assert _key(left_out[mode]) == _key(kept[mode]), mode
