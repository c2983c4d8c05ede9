"""ACC-49: under on_wait, a program whose cores reach nothing across devices runs one sequence of steps
per core in every run, so a race the restricted run cannot replay is decided on the program's own run."""

from __future__ import annotations

import dataclasses
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_races import SCRATCH, box, brute_force_race

from semcheck.checker.properties.decide import decide
from semcheck.model.fast import fast_run
from semcheck.model.launch import Scratch, launch
from semcheck.model.local_cores import schedule_free
from semcheck.model.ops import Access, DmaStart, GetBarrierSem, Loc, SemRef, Signal, Topology, Wait
from semcheck.model.race import find_races

OUT = "hbm0"  # the call's one result (launch's first HBM buffer)


def slice_update(num_devices: int, *, lens: tuple[int, ...], wait_all: bool = True,
                 order: tuple[int, ...] | None = None):
    """A block of slice copies into the result on one DMA semaphore, the padding slices of no row (a
    serving kernel's padded slice table): the copies start in order, then each is waited for its own
    bytes. The first wait is short and pops the tasks last in, first out (SEM-7), so the empty copies run
    inside it, before the call's read of the result. `wait_all=False` leaves the last real copy unwaited;
    `order`: the copies' waits, by index, in the order made."""
    sem = SemRef("sems", 0)
    body, waits, row = [], [], 0
    for i, n in enumerate(lens):
        body.append(DmaStart(sem, 512 * n, src_buf="buf", src_region=box((0, n), (0, 128)), dst_buf=OUT,
                             dst_region=box((row, row + n), (0, 128)), loc=Loc("k.py", 10 + i)))
        waits.append(Wait(sem, 512 * n, kind="dma", loc=Loc("k.py", 30 + i)))
        row += n
    if not wait_all:
        waits = [w for w, n in zip(waits, lens) if n == 0] + [w for w, n in zip(waits, lens) if n][:-1]
    if order is not None:  # the waits in this order, some perhaps left out
        waits = [waits[i] for i in order]
    exit_read = Access(OUT, box((0, 16), (0, 128)), False, Loc("k.py", 50))
    scratch = [Scratch("sems", 2), Scratch("buf", kind="buffer", nbytes=8 * 512)]
    return launch(Topology(num_devices), [body + waits] * num_devices, scratch=scratch, hbm_buffers=1,
                  collective_id=0, exit_accesses=[exit_read])


@pytest.mark.rule("ACC-49")
@pytest.mark.parametrize("devices", [1, 2])
def test_empty_padding_copies_popped_by_the_first_wait_are_no_race_under_on_wait(devices):
    program = slice_update(devices, lens=(3, 0, 0, 0))
    report = find_races(program, "on_wait")
    assert report.complete and not report.races
    assert brute_force_race(program, "on_wait") is False
    verdict = decide("race-free", program, "on_wait")
    assert verdict.verdict == "proved", verdict.reason


@pytest.mark.rule("ACC-49")
def test_an_unwaited_copy_on_a_schedule_free_program_is_still_a_race():
    program = slice_update(2, lens=(3, 0, 2), wait_all=False)
    assert schedule_free(program) is None
    verdict = decide("race-free", program, "on_wait")
    assert verdict.verdict == "violated"


@pytest.mark.rule("ACC-49")
def test_what_keeps_a_program_from_being_schedule_free():
    sem = SemRef("sems", 0)
    copy = DmaStart(sem, 4, src_buf="buf", src_region=box((0, 1)), dst_buf="buf", dst_region=box((1, 2)))
    scratch = [Scratch("sems", 1), Scratch("buf", kind="buffer", nbytes=64)]

    def program(body, topology=Topology(2)):
        return launch(topology, [body] * topology.num_cores, scratch=scratch, collective_id=0)

    assert schedule_free(program([copy, Wait(sem, 4, kind="dma")])) is None
    assert schedule_free(program([Signal(sem, 1, device=0), Wait(sem, 1)])) is not None  # device 1 signals device 0
    assert schedule_free(program([dataclasses.replace(copy, device=1)])) is not None
    assert schedule_free(program([GetBarrierSem()])) is not None
    assert schedule_free(program([copy], Topology(1, 2))) == "a device has several cores"


@st.composite
def local_programs(draw):
    """Programs whose copies and signals stay on their own core (ACC-49), with copies of no element."""
    devices = draw(st.integers(1, 2))
    cells = st.one_of(st.integers(0, 2).map(lambda i: box((i, i + 1))), st.integers(0, 2).map(lambda i: box((i, i))))
    sem = st.integers(0, 1).map(lambda i: SemRef("sems", i))
    bufs = st.sampled_from(["buf", "src"])
    bodies = []
    for _ in range(devices):
        ops = []
        for _ in range(draw(st.integers(1, 6))):
            kind = draw(st.sampled_from(["access", "dma", "dma", "dma", "signal", "wait", "wait"]))
            if kind == "access":
                ops.append(Access(draw(bufs), draw(cells), draw(st.booleans())))
            elif kind == "dma":
                src, dst = draw(cells), draw(cells)
                size = 0 if src.box[0][0] == src.box[0][1] else 1
                ops.append(DmaStart(draw(sem), size, src_sem=draw(st.one_of(st.none(), sem)), src_buf=draw(bufs),
                                    src_region=src, dst_buf=draw(bufs), dst_region=dst))
            elif kind == "signal":
                ops.append(Signal(draw(sem), 1))
            else:
                ops.append(Wait(draw(sem), draw(st.integers(0, 1)), kind=draw(st.sampled_from(["dma", "semaphore"]))))
        bodies.append(ops)
    reads = [Access("src", box((0, 3)), False)] if draw(st.booleans()) else []  # the call's read of a result
    return launch(Topology(devices), bodies, scratch=SCRATCH, collective_id=0, exit_accesses=reads)


@pytest.mark.rule("ACC-49", "ACC-51", "DR-4")
@settings(max_examples=1000 if os.environ.get("SEMCHECK_PROFILE") == "ci-long" else 150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(local_programs())
def test_on_wait_races_of_schedule_free_programs_are_decided_as_the_explorer_does(program):
    """Every race the pass keeps is confirmed (none is left for unknown), and there is one exactly when
    exploring every schedule reaches two conflicting accesses pending at once (DR-1)."""
    assert schedule_free(program) is None
    if fast_run(program, "on_wait", record=False).state.failure is not None:
        return
    truth = brute_force_race(program, "on_wait")
    if truth is None:
        return
    report = find_races(program, "on_wait", first=0)
    _decided_as_explored(report, truth)


def _decided_as_explored(report, truth: bool) -> None:
    """Every race kept is confirmed, or left open for jax's detector's own reading of an empty window (ERR-27,
    ERR-34: unknown, said so), which only a pair the explorer finds pending can be; with none left open there
    is a race exactly when the explorer finds one, except where the pending pair has a copy half the program's
    own run never performs, which jax's detector never meets (ACC-51): only a pair the explorer finds pending
    is cleared so."""
    assert all(r.confirmed or r.doubt for r in report.races), "a race left unconfirmed on a schedule-free program"
    if any(r.doubt for r in report.races) or report.unperformed:
        assert truth
        return
    assert bool(report.races) == truth


@st.composite
def slice_tables(draw):
    lens = tuple(draw(st.lists(st.sampled_from([0, 0, 1, 2]), min_size=1, max_size=5)))
    order = draw(st.permutations(range(len(lens))))
    keep = draw(st.integers(max(len(lens) - 1, 0), len(lens)))
    return slice_update(draw(st.integers(1, 2)), lens=lens, order=tuple(order[:keep]))


@pytest.mark.rule("ACC-49", "DR-4")
@settings(max_examples=600 if os.environ.get("SEMCHECK_PROFILE") == "ci-long" else 60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(slice_tables())
def test_padded_slice_tables_are_decided_under_on_wait_as_the_explorer_does(program):
    """Copies of some rows and of none on one semaphore, waited in any order, one wait perhaps left out,
    then the call's read of the result: a race under on_wait is reported, confirmed, exactly when exploring
    every schedule finds one (the restricted run of an empty copy seldom replays: its task is popped first)."""
    truth = brute_force_race(program, "on_wait")
    if truth is None or fast_run(program, "on_wait", record=False).state.failure is not None:
        return
    report = find_races(program, "on_wait", first=0)
    _decided_as_explored(report, truth)


@pytest.mark.rule("ACC-49")
def test_a_pair_left_open_says_why_the_programs_own_run_does_not_decide_it():
    """A handshake with the neighbour after the copies (a signal to another device) keeps the program from
    being schedule-free: the padding copy's pair stays open, and the reason says why ACC-49 did not apply."""
    base = slice_update(2, lens=(3, 0, 0, 0))
    hand = SemRef("sems", 1)
    cores = []
    for d, ops in enumerate(base.cores):
        at = next(i for i, op in enumerate(ops) if type(op) is Access)  # the call's read of its result
        shake = (Signal(hand, 1, device=1 - d, loc=Loc("k.py", 40)), Wait(hand, 1, loc=Loc("k.py", 41)))
        cores.append(ops[:at] + shake + ops[at:])
    program = dataclasses.replace(base, cores=tuple(cores))
    assert schedule_free(program) == "a signal targets another device (line 40)"
    verdict = decide("race-free", program, "on_wait")
    assert verdict.verdict == "unknown"
    assert "ACC-49: a signal targets another device (line 40)" in verdict.reason
