"""`invocation-confined` of a single call under `hardware` from the happens-before order of one period
(specs/deciding/confined.md PRG-164), held to PRG-113's held runs of the whole program.

Whenever the period's order proves, the held runs must prove too (soundness); the rings must be proved
on their period; kernels that can land outside the call must not be; and the ring all-reduce at 8,960
devices is proved without building its whole program.
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import programs
from test_races import symmetric_rings
from test_races_class_run import all_to_alls

from semcheck.checker.properties.checking import check_program
from semcheck.checker.properties.confined import invocation_confined
from semcheck.checker.properties.confined_order import confined_on_period
from semcheck.model.symmetry import Rotation
from semcheck.model.launch import Scratch, launch
from semcheck.model.ops import BARRIER, DmaStart, GetBarrierSem, Program, SemRef, Signal, Topology, Wait
from semcheck.model.symmetric import Symmetric

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "z3"))

from z3_strategies import symmetric_programs  # noqa: E402

SINGLE_CALLS = sorted(
    str(p.relative_to(ROOT)) for d in ("examples", "examples/buggy", "bench/kernels") for p in (ROOT / d).glob("*.py"))
RINGS = ("examples/ring_allreduce.py", "examples/ring_allgather.py", "examples/ring_permute.py",
         "examples/bidirectional_reduce_scatter.py")


def _lower(paths: list[str], devices: int) -> dict[str, list]:
    from semcheck.checker.frontend import load, provision_devices

    if devices <= 64:  # a real mesh; the large counts trace on an abstract one
        provision_devices(devices)
    os.chdir(ROOT)
    return {p: [k.program for k in load(p, devices=devices)] for p in paths}


_CACHE: dict[int, dict[str, list]] = {}


def _load(path: str, devices: int, also: tuple[str, ...] = ()) -> list:
    """The programs of `path` at `devices`, lowered in a fresh process (jax's device count is fixed per
    process), with `also` lowered in the same one."""
    import concurrent.futures
    import multiprocessing

    got = _CACHE.setdefault(devices, {})
    missing = [p for p in (path, *also) if p not in got]
    if missing:
        with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            got.update(pool.submit(_lower, missing, devices).result())
    return got[path]


def _whole(p):
    return p.materialise() if isinstance(p, Symmetric) else p


def _sound(program) -> str | None:
    """The period's verdict ('proved' or None), failing the test when it proves what the held runs do not."""
    v = confined_on_period(program, "hardware")
    if v is None:
        return None
    assert v.verdict == "proved"
    ref = invocation_confined(_whole(program), "hardware")
    assert ref.verdict == "proved", (v.reason, ref)
    return "proved"


@pytest.mark.rule("PRG-164", "PRG-113")
@pytest.mark.parametrize("devices", [2, 4, pytest.param(8, marks=pytest.mark.slow)])  # 8: 15 s, long run
def test_a_proof_on_the_period_is_a_proof_on_the_whole_program(devices):
    """Every single-call example: a proof on the period is a proof of the held runs (and how often)."""
    seen: Counter = Counter()
    for path in SINGLE_CALLS:
        for p in _load(path, devices, tuple(SINGLE_CALLS)):
            sym = _symmetric(p)  # as a Symmetric too (PRG-165): the same program (RUN-20)
            got = [confined_on_period(q, "hardware") for q in (p, sym) if q is p or isinstance(q, Symmetric)]
            if any(v is not None for v in got):
                assert all(v is None or v.verdict == "proved" for v in got)
                assert invocation_confined(p, "hardware").verdict == "proved", (path, got)
            seen["proved" if got[0] is not None else None] += 1
            seen["symmetric proved"] += len(got) > 1 and got[1] is not None
    assert seen["proved"] >= len(RINGS)  # the rings at least (the test below says which)
    assert seen["symmetric proved"] >= len(RINGS)


def _symmetric(program: Program):
    """The program as a Symmetric of its DR-5 period, when it repeats (as the front end gives it)."""
    rot = Rotation.observe(program, shifted=True)
    k, shifts = rot.devices, dict(rot.shifts)
    if k >= program.topology.num_devices:
        return program
    try:
        return Symmetric.of(program, k, shifts)
    except ValueError:
        return program


TALLY: Counter = Counter()


@pytest.mark.rule("PRG-164", "PRG-166")
@settings(max_examples=int(os.environ.get("SEMCHECK_CONFINED_EXAMPLES", "120")), deadline=None,
          suppress_health_check=list(HealthCheck))
@given(st.one_of(programs(max_devices=3, max_ops=4), symmetric_rings(), all_to_alls(),
                 symmetric_programs(max_cores=6, max_ops=4).map(lambda pair: pair[0])), st.booleans())
def test_generated_programs_proved_on_the_period_are_proved_by_the_held_runs(program, as_symmetric):
    p = _symmetric(program) if as_symmetric else program
    TALLY[_sound(p)] += 1


@pytest.mark.rule("PRG-164")
@pytest.mark.parametrize("path", RINGS)
def test_the_rings_are_proved_on_their_period(path):
    for devices in (2, 8):
        (p,) = _load(path, devices, RINGS)
        v = confined_on_period(p, "hardware")
        assert v is not None and v.verdict == "proved", (path, devices)
        assert "PRG-164" in v.reason and "('site'" not in v.reason
        assert confined_on_period(p, "eager") is None  # the interpreter's modes are PRG-110's


def _kernel(body, n: int, collective_id: int | None = 0):
    return launch(Topology(n), [body(d, n) for d in range(n)], collective_id=collective_id,
                  scratch=[Scratch("s"), Scratch("r")])


def _early(d, n):  # copy to the right neighbour with no handshake first: it can land before it entered
    return [DmaStart(SemRef("r"), 8, src_sem=SemRef("s"), device=(d + 1) % n), Wait(SemRef("s"), 8, "dma"),
            Wait(SemRef("r"), 8, "dma")]


def _shaken(d, n):  # the same after a barrier handshake with both neighbours
    return [GetBarrierSem(), Signal(SemRef(BARRIER), 1, device=(d + 1) % n),
            Signal(SemRef(BARRIER), 1, device=(d - 1) % n), Wait(SemRef(BARRIER), 2)] + _early(d, n)


def _late(d, n):  # signal the right neighbour after the handshake, which nobody waits for: it may have left
    return _shaken(d, n)[:4] + [Signal(SemRef("s"), 1, device=(d + 1) % n)]


@pytest.mark.rule("PRG-164", "PRG-111", "PRG-112")
def test_kernels_that_land_outside_the_call_are_not_proved():
    for n in (2, 4, 8):
        early, late, shaken = _kernel(_early, n), _kernel(_late, n), _kernel(_shaken, n)
        assert invocation_confined(early, "hardware").verdict == "violated"
        assert confined_on_period(early, "hardware") is None
        assert confined_on_period(_symmetric(early), "hardware") is None
        assert invocation_confined(late, "hardware").verdict == "violated"
        assert confined_on_period(late, "hardware") is None
        assert _sound(shaken) == "proved" and _sound(_symmetric(shaken)) == "proved"
        # without a collective id the start barrier orders the copy after every device entered
        assert _sound(_kernel(_early, n, collective_id=None)) == "proved"
    for path in ("examples/buggy/wrong_neighbour_deadlock.py", "examples/buggy/exit_leak_extra_signal.py"):
        (p,) = _load(path, 8)
        assert invocation_confined(_whole(p), "hardware").verdict == "violated"
        assert confined_on_period(p, "hardware") is None


@pytest.mark.rule("PRG-164")
def test_the_ring_all_reduce_at_8960_devices_is_proved_without_the_whole_program():
    (p,) = _load("examples/ring_allreduce.py", 8960)
    assert isinstance(p, Symmetric) and p.materialise_refusal() is not None
    t = time.process_time()
    v = confined_on_period(p, "hardware")
    spent = time.process_time() - t
    assert v is not None and v.verdict == "proved"
    (checked,) = check_program(p, "hardware", ("invocation-confined",))  # as verify asks it (RUN-21 first refuses)
    assert checked.verdict == "proved" and "PRG-164" in checked.reason
    assert spent < 12.0, spent  # measured about 2.2 s of CPU on one core (PRG-164); building it is refused


def _held(path: str, devices: int):
    """(program, the held runs' verdict on the built program) of a single call at `devices`."""
    (p,) = _load(path, devices, RINGS)
    return p, invocation_confined(_whole(p), "hardware")


@pytest.mark.rule("PRG-165", "PRG-164")
def test_a_symmetric_is_confined_on_its_period_before_it_is_built(monkeypatch):
    """Below RUN-21's bound a Symmetric's proof comes from its period, with nothing built; where the
    period shows nothing the held runs decide, as they do on the program, word for word."""
    built = {path: _held(path, 8) for path in (*RINGS, "examples/buggy/exit_leak_extra_signal.py")}
    symmetric = {path: _symmetric(p) for path, (p, _) in built.items()}
    assert all(isinstance(s, Symmetric) and s.materialise_refusal() is None for s in symmetric.values())
    with monkeypatch.context() as m:
        m.setattr(Symmetric, "materialise", lambda self: pytest.fail("built for a proof on the period"))
        for path in RINGS:
            (v,) = check_program(symmetric[path], "hardware", ("invocation-confined",))
            assert v.verdict == "proved" == built[path][1].verdict and "PRG-164" in v.reason, (path, v)
    path = "examples/buggy/exit_leak_extra_signal.py"  # lands after its target left: no proof on the period
    (v,) = check_program(symmetric[path], "hardware", ("invocation-confined",))
    (w,) = check_program(built[path][0], "hardware", ("invocation-confined",))
    assert v.verdict == "violated" and (v.verdict, v.reason, v.witness) == (w.verdict, w.reason, w.witness)


EXAMPLES = sorted(str(p.relative_to(ROOT)) for d in ("examples", "examples/buggy") for p in (ROOT / d).glob("*.py"))
SLOW_HELD = ("examples/ring_allreduce.py", "examples/ring_allgather.py", "examples/bidirectional_reduce_scatter.py",
             "examples/buggy/recv_before_send_deadlock.py")
"""Their held runs at 260 devices take seconds to minutes (the bidirectional ring's and the deadlocking
ring's about 100 s)."""


def _proofs_at_260(paths, also: tuple[str, ...] = tuple(EXAMPLES)) -> Counter:
    seen: Counter = Counter()
    for path in paths:
        for p in _load(path, 260, also):
            if isinstance(p, Symmetric):
                seen[_sound(p)] += 1
    return seen


@pytest.mark.rule("PRG-165", "PRG-164", "PRG-113")
def test_a_proof_on_the_period_at_260_devices_is_a_proof_of_the_held_runs():
    """The default run's sibling of the next test (which takes minutes): a ring proved on its period,
    and an exit leak whose signal lands after its target left, which has no proof there."""
    two = ("examples/ring_permute.py", "examples/buggy/exit_leak_extra_signal.py")
    seen = _proofs_at_260(two, also=two)
    assert seen["proved"] >= 1 and seen[None] >= 1, seen


@pytest.mark.slow
@pytest.mark.rule("PRG-165", "PRG-164", "PRG-113")
def test_proofs_on_the_period_at_260_devices_are_proofs_of_the_held_runs():
    """Every example lowered by one period at 260 devices (RUN-22) that PRG-164 proves, held runs cheap."""
    seen = _proofs_at_260([p for p in EXAMPLES if p not in SLOW_HELD])
    assert seen["proved"] >= 20 and seen[None] >= 5, seen  # most are proved; the landers and stuck runs not


@pytest.mark.slow
@pytest.mark.rule("PRG-165", "PRG-164", "PRG-113")
def test_the_rings_proved_on_the_period_at_260_devices_are_proved_by_the_held_runs():
    seen = _proofs_at_260(("examples/ring_allreduce.py", "examples/ring_allgather.py",
                           "examples/buggy/recv_before_send_deadlock.py"))
    assert seen["proved"] == 3, seen


class _AtEvents:
    """The early side read where the old pass read it: at each landing's own event (PRG-164)."""

    def __init__(self, rec, landings, per: int) -> None:
        self.rec, self.per = rec, per
        self.targets = {(c, pc): t for c, pc, _, t in landings}
        self.seen: dict = {}
        self.wait, self.barrier, self.arrive, self.access = rec.wait, rec.barrier, rec.arrive, rec.access

    def _look(self, core: int, pc: int) -> None:
        t = self.targets.get((core, pc))
        if t is not None and (core, pc) not in self.seen:
            t0 = t - t % self.per
            self.seen[(core, pc)] = t >= 0 and (t0 == core or bool(self.rec.o.clock[core][t0] > 0))

    def signal(self, counter, inc, source) -> None:
        if type(source[1]) is not str:
            self._look(*source)
        self.rec.signal(counter, inc, source)

    def start(self, core, pc, ident) -> None:
        self._look(core, pc)
        self.rec.start(core, pc, ident)


@pytest.mark.rule("PRG-164")
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.one_of(programs(max_devices=3, max_ops=4), symmetric_rings(), all_to_alls()))
def test_the_early_side_read_at_waits_is_the_one_read_at_each_landing(program):
    """A core's clock grows only at its waits and barriers (DR-6), so the first position knowing a
    target decides every later landing of the core as reading the clock at the landing does."""
    from semcheck.checker.properties import confined_order as co
    from semcheck.model.fast import fast_run
    from semcheck.model.hb_observers import Observer

    per = program.topology.cores_per_device
    landings = co._landings(program, program.topology.num_cores)
    exits = {c: co._exit_of(program.cores[c]) for c in range(0, program.topology.num_cores, per)}
    rec = co._Recorder(Observer(program, (), "completion"), exits, landings, per)
    events = _AtEvents(rec, landings, per)
    fast_run(program, "hardware", record=False, observer=events)
    for (c, pc), known in events.seen.items():
        assert rec.entered(c, pc, events.targets[(c, pc)], per) == known, (c, pc)


DEADLOCKS = ("examples/buggy/recv_before_send_deadlock.py", "examples/buggy/cyclic_wait_deadlock.py",
             "examples/buggy/wait_too_large_deadlock.py", "examples/buggy/missing_signal_deadlock.py")


def _stuck_after(body, who):
    """`body`, with the devices `who(d, n)` picks waiting before their exit for what nobody sends."""
    return lambda d, n: body(d, n) + ([Wait(SemRef("r"), 1)] if who(d, n) else [])


@pytest.mark.rule("PRG-166", "PRG-164", "PRG-112")
def test_a_period_that_stops_early_is_proved_as_the_held_runs_prove_it():
    for path in DEADLOCKS:
        (p,) = _load(path, 8, DEADLOCKS)
        for q in (p, _symmetric(p)):
            assert _sound(q) == "proved", path
            assert "PRG-166" in confined_on_period(q, "hardware").reason, path
    for n in (2, 4, 8):
        # every device stops before its exit: a signal nobody waits for cannot land after its target left
        everyone = _kernel(_stuck_after(_late, lambda d, n: True), n)
        assert _sound(everyone) == "proved" and _sound(_symmetric(everyone)) == "proved"
        # only device 0 stops: the others leave, and the signals into them may land after that
        one = _kernel(_stuck_after(_late, lambda d, n: d == 0), n)
        assert invocation_confined(one, "hardware").verdict == "violated"
        assert confined_on_period(one, "hardware") is None
        # a copy issued before the handshake still lands before its target entered, stuck or not
        early = _kernel(_stuck_after(_early, lambda d, n: True), n)
        assert confined_on_period(early, "hardware") is None
