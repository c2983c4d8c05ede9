"""The happens-before pass on the run of one class of devices (DR-41) orders as the whole program's run.

A program that repeats every `k` devices is run on its first `k` devices, every named device taken
modulo `k`, whatever offsets it uses (an all-to-all copies to every other device, which no faithful
fold allows); the observer of DR-8 reads that run. Held to the whole program's run on generated
symmetric programs whose offsets collide modulo the period, and on the examples.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_races import SCRATCH, box, symmetric_rings

from semcheck.checker.properties import races
from semcheck.model import happens_before as hb
from semcheck.model.quotient import class_quotient
from semcheck.model import race
from semcheck.model.access import accesses
from semcheck.model.symmetry import Rotation
from semcheck.model.launch import launch
from semcheck.model.ops import DMA_MODES, Access, Barrier, DmaStart, Program, Region, SemRef, Signal, Topology, Wait


@st.composite
def all_to_alls(draw) -> Program:
    """Every device runs one template: an optional handshake with every peer, then copies, signals,
    waits and accesses to peers at any offset (so several offsets meet modulo every proper divisor of
    the device count), its chunks moved along with the device."""
    n = draw(st.sampled_from([2, 3, 4, 6, 8]))
    handshake = draw(st.booleans())
    steps = []
    for _ in range(draw(st.integers(1, 7))):
        kind = draw(st.sampled_from(["dma", "dma", "wait", "wait", "signal", "access", "access"]))
        steps.append((kind, draw(st.integers(0, n - 1)), draw(st.integers(0, n - 1)), draw(st.integers(0, n - 1)),
                      draw(st.booleans()), draw(st.integers(0, 1)), draw(st.integers(1, 2))))

    def chunk(i: int) -> Region:
        return box((8 * (i % n), 8 * (i % n) + 8))

    bodies = []
    for d in range(n):
        ops: list = []
        if handshake:
            ops += [Signal(SemRef("sems", 0), 1, device=(d + j) % n) for j in range(1, n)]
            ops.append(Wait(SemRef("sems", 0), n - 1))
        for kind, off, a, b, flag, sem, times in steps:
            if kind == "dma":
                ops.append(DmaStart(SemRef("sems", sem), 8, src_sem=SemRef("sems", 1 - sem) if flag else None,
                                    device=(d + off) % n, src_buf="src", src_region=chunk(d + a),
                                    dst_buf="src", dst_region=chunk(d + b)))
            elif kind == "wait":
                ops.append(Wait(SemRef("sems", sem), 8 * times if flag else times, kind="dma" if flag else "semaphore"))
            elif kind == "signal":
                ops.append(Signal(SemRef("sems", sem), times, device=(d + off) % n))
            else:
                ops.append(Access("src", chunk(d + a), flag))
        bodies.append(ops)
    return launch(Topology(n), bodies, scratch=SCRATCH)


def _proves(o: hb.Ordering) -> bool:
    return o.certified and not o.candidates


@pytest.mark.rule("DR-41")
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(all_to_alls(), symmetric_rings()))
def test_the_run_of_one_class_proves_where_the_whole_run_proves(program):
    """The class run alone (no fallback): wherever the whole run's pass proves race-freedom (certified,
    nothing unordered) so does the class run's, and where the class run's proves, the whole run's pass
    and its restricted runs find no race."""
    k = Rotation.observe(program, shifted=True).devices
    fold = class_quotient(program, k)
    if fold is None:
        return
    events = accesses(program, "hardware", near=k)[0]
    if not events:
        return
    for mode in DMA_MODES:
        whole = hb.order_modes(program, {mode: events})[mode]
        one = hb.order_modes(program, {mode: events}, fold)[mode]
        if _proves(whole):
            assert _proves(one), mode
        if _proves(one):  # (of this program: under hardware race-free asks DR-9's split of it too)
            with pytest.MonkeyPatch.context() as monkeypatch:
                monkeypatch.setattr(race, "class_quotient", lambda program, period: None)
                report = race.find_races(program, mode)
            assert not [r for r in report.races if r.exact and r.confirmed], mode


def _verdict(v) -> tuple:
    return (v.verdict, v.reason, None if v.witness is None else (v.witness.message, v.witness.schedule))


def _same(program: Program) -> list[str]:
    """The modes in which race-free differs with the class run and without (verdict, reason, witness)."""
    got = {m: races.race_free(program, m) for m in DMA_MODES}
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(race, "class_quotient", lambda program, period: None)
        want = {m: races.race_free(program, m) for m in DMA_MODES}
    differ = []
    for m in DMA_MODES:
        if _verdict(got[m]) == _verdict(want[m]):
            continue
        # the class run proved with nothing unordered where the whole run left pairs that the restricted
        # runs then ordered: the same verdict, told as DR-6's proof
        if got[m].verdict == want[m].verdict == "proved" and "happens-before over one run" in got[m].reason:
            continue
        differ.append(m)
    return differ


@pytest.mark.rule("DR-41", "DR-5")
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(all_to_alls(), symmetric_rings()))
def test_race_freedom_is_decided_on_the_class_run_as_on_the_whole_run(program):
    """Verdict, reason and witness in every mode, with the class run and with the whole program's run."""
    assert _same(program) == []


@pytest.mark.rule("DR-41")
def test_a_barrier_across_the_classes_that_the_rotation_renames_has_no_class_run():
    """RUN-7 (c): devices 1, 2 meet at one barrier and 3, 0 at another, which the rotation by two devices
    swaps; the run of devices 0 and 1 alone cannot open device 0's barrier as the program does."""
    n = 4
    pair = {d: ("a", frozenset({1, 2})) if d in (1, 2) else ("b", frozenset({3, 0})) for d in range(n)}
    bodies = [[Barrier(*pair[d]), Access("src", box((0, 8)), True)] for d in range(n)]
    program = launch(Topology(n), bodies, scratch=SCRATCH)
    assert Rotation.observe(program, shifted=True).devices == 2
    assert class_quotient(program, 2) is None


class _Guarded(tuple):
    """A program's cores that record which cores are read."""

    def __new__(cls, cores, read: set[int]):
        self = super().__new__(cls, cores)
        self.read = read
        return self

    def __getitem__(self, i):
        if isinstance(i, int):
            self.read.add(i % len(self))
        return super().__getitem__(i)

    def __iter__(self):
        self.read.update(range(len(self)))
        return super().__iter__()


def _ring(n: int) -> Program:
    """Each device copies a chunk to its right neighbour and waits for its own copy to land, n - 1 times,
    then reads what landed, with a signal to its left neighbour as a credit between steps."""
    def chunk(i: int) -> Region:
        return box((8 * (i % n), 8 * (i % n) + 8))

    bodies = []
    for d in range(n):
        ops: list = []
        for s in range(n - 1):
            ops += [Signal(SemRef("sems", 0), 1, device=(d - 1) % n), Wait(SemRef("sems", 0), 1),
                    DmaStart(SemRef("sems", 1), 8, src_sem=None, device=(d + 1) % n, src_buf="src",
                             src_region=chunk(d - s), dst_buf="src", dst_region=chunk(d - s)),
                    Wait(SemRef("sems", 1), 8, kind="dma"), Access("src", chunk(d - s - 1), False)]
        bodies.append(ops)
    return launch(Topology(n), bodies, scratch=SCRATCH)


@pytest.mark.rule("DR-42", "DR-41")
@pytest.mark.parametrize("n", [8, 64])
def test_a_ring_of_any_size_is_ordered_on_one_device_reading_only_its_neighbours(n):
    """The pass on the ring's class run reads the cores of devices 0 and 1 (the class and the next
    period, for DR-41's barrier check) and orders as the whole run does."""
    import dataclasses

    program = _ring(n)
    k, fold = Rotation.observe(program, shifted=True).devices, None
    events, unrecorded = accesses(program, "hardware", near=k)
    whole = {m: hb.order_modes(program, {m: events})[m] for m in DMA_MODES}
    read: set[int] = set()
    guarded = dataclasses.replace(program)
    object.__setattr__(guarded, "cores", _Guarded(program.cores, read))
    got = race.ordered_modes(guarded, DMA_MODES, symmetry=(k, fold), listed=lambda near: (events, unrecorded))
    assert read <= {0, 1}
    for m in DMA_MODES:
        assert _proves(whole[m]) and _proves(got[m].ordering), m


@pytest.mark.rule("DR-42", "DR-32")
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(all_to_alls(), symmetric_rings()))
def test_the_split_programs_accesses_are_listed_from_one_period_of_forerunners(program):
    """Under hardware the race pass lists the split program's accesses with each core's forerunners read
    off its core on the first period: the accesses of the whole split program."""
    from semcheck.checker.properties.analysis import Analysis
    from semcheck.checker.properties.race_order import access_lister
    from semcheck.model.partial_arrivals import split

    facts = Analysis(program, modes=("hardware",))
    k, _ = facts.symmetry
    near = k if k < program.topology.num_devices else None
    listed = access_lister(facts.partial_arrivals[1].mode("hardware"))(near)
    assert listed == accesses(split(program).program, "hardware", near=near)


def _examples() -> list[str]:
    import pathlib

    root = pathlib.Path(__file__).resolve().parent.parent
    return sorted(str(p) for p in [*(root / "examples").rglob("*.py"), *(root / "bench" / "kernels").glob("*.py")])


def sweep(paths: list[str], sizes: tuple[int, ...]) -> tuple[int, int, list[str]]:
    """(kernels compared, kernels with a class run, differences) over the examples, in a fresh process."""
    from semcheck.checker.frontend.targets import provision_devices

    provision_devices(max(sizes))
    from semcheck.checker.frontend import load
    from semcheck.checker.frontend.errors import FrontendError

    compared, with_class, differences = 0, 0, []
    for path in paths:
        for n in sizes:
            try:
                kernels = load(path, devices=n)
            except FrontendError:
                continue
            for kernel in kernels:
                program = kernel.program
                compared += 1
                with_class += class_quotient(program, Rotation.observe(program, shifted=True).devices) is not None
                differ = _same(program)
                if differ:
                    differences.append(f"{path} at {n}: {differ}")
    return compared, with_class, differences


@pytest.mark.slow
@pytest.mark.rule("DR-41")
def test_every_example_is_decided_on_the_class_run_as_on_the_whole_run():
    """Every example and bench kernel at 2, 4 and 8 devices: race-free in every mode, reason and witness
    included, is what the whole program's run gives."""
    import concurrent.futures
    import multiprocessing

    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        compared, with_class, differences = pool.submit(sweep, _examples(), (2, 4, 8)).result()
    assert compared > 50 and with_class > 10 and differences == []
