"""Programs whose interpreter runs all fail (checker/properties/failing_runs.py): ERR-9 views (ACC-6), and any
static failure that ends the whole run (RUN-9 .. RUN-11)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from semcheck.checker.properties.registry import BY_ID
from semcheck.checker.properties.decide import decide
from semcheck import check_program
from semcheck.model import (
    BARRIER,
    Access,
    DmaStart,
    GetBarrierSem,
    InterpreterView,
    Loc,
    Region,
    Scratch,
    SemRef,
    Signal,
    Topology,
    Wait,
    launch,
    run,
)

VIEW = InterpreterView("ReshapeTransform", "load", "k.py:9")
LOAD = Access("x", Region(((0, 8),)), False, Loc("k.py", 9), VIEW)


def _ring(n: int, *, before=(), after=()):
    """Each device sends to its right neighbour and waits for its left one, then loads through a view."""
    body = [*before, Signal(SemRef("s"), device=None), Wait(SemRef("s")), LOAD, *after]
    bodies = [[Signal(SemRef("s"), device=(d + 1) % n, loc=Loc("k.py", 5)), Wait(SemRef("s"), loc=Loc("k.py", 6)),
               *body[2:]] for d in range(n)]
    return launch(Topology(n), bodies, scratch=[Scratch("s")])


@pytest.mark.rule("ERR-9", "ACC-6")
@pytest.mark.parametrize("mode", ["eager", "on_wait"])
def test_every_property_is_decided_when_every_run_raises(mode):
    p = _ring(3)
    got = {prop: decide(prop, p, mode) for prop in BY_ID}
    dl = got.pop("deadlock-free")
    assert dl.verdict == "violated" and dl.witness.locs == (LOAD.loc,)
    assert dl.witness.details["rule"] == "ERR-9" and VIEW.message in dl.witness.message
    replayed = run(p, mode, dl.witness.schedule)  # the witness is a run of the model that fails there
    assert replayed.kind == "error" and replayed.failure.violation == VIEW
    assert {v.verdict for v in got.values()} <= {"proved", "vacuous"}, got  # each holds (REP-20)
    assert got["exit-balance"].verdict == "vacuous" and "no run reaches a kernel exit" in got["exit-balance"].reason
    assert all(decide(prop, p, "hardware").verdict == "proved" for prop in BY_ID)


@pytest.mark.rule("ERR-9", "ACC-6")
def test_a_fold_does_not_prove_what_the_failing_access_breaks():
    # eight identical devices fold; the fold reads the skeleton, which has no accesses
    p = _ring(8)
    verdicts = {v.property: v.verdict for v in check_program(p, "eager", fold=True)}
    assert verdicts["deadlock-free"] == "violated"
    assert {v.property: v.verdict for v in check_program(p, "hardware", fold=True)}["deadlock-free"] == "proved"


@pytest.mark.rule("ERR-9", "PROP-7", "ERR-18")
def test_a_race_before_the_failure_is_still_reported():
    # device 0 writes x while its copy into x is in flight, then raises: the race happens first
    loc = Loc("k.py", 3)
    copy = DmaStart(SemRef("d"), 32, loc=loc, src_buf="y", src_region=Region(((0, 8),)), dst_buf="x",
                    dst_region=Region(((0, 8),)))
    write = Access("x", Region(((0, 8),)), True, Loc("k.py", 4))
    from semcheck.model import AllocBuffer

    body = [AllocBuffer("x"), AllocBuffer("y"), copy, write, LOAD, Wait(SemRef("d"), 32, kind="dma")]
    p = launch(Topology(1), [body], scratch=[Scratch("d")])
    v = decide("race-free", p, "hardware")
    assert v.verdict == "violated"
    assert decide("deadlock-free", p, "on_wait").verdict == "violated"
    assert decide("race-free", p, "on_wait").verdict == "violated"


@pytest.mark.rule("ERR-9", "PROP-6")
def test_bytes_never_waited_for_before_the_failure_are_not_left_at_an_exit():
    # the copy's wait comes after the failing load: no run waits for it, and no run reaches an exit
    copy = DmaStart(SemRef("d"), 32, loc=Loc("k.py", 3))
    p = launch(Topology(1), [[copy, LOAD, Wait(SemRef("d"), 32, kind="dma")]], scratch=[Scratch("d")])
    for mode in ("eager", "on_wait"):
        assert decide("dma-bytes", p, mode).verdict == "proved"
        assert decide("exit-balance", p, mode).verdict == "vacuous"  # no run reaches an exit (REP-20)
    short = launch(Topology(1), [[copy, Wait(SemRef("d"), 64, kind="dma"), LOAD]], scratch=[Scratch("d")])
    # a wait that can never be met keeps its core from the failing load: not every run fails, the usual check
    assert decide("dma-bytes", short, "eager").verdict == "violated"


@pytest.mark.rule("ERR-9")
@pytest.mark.parametrize("fold", [True, False], ids=["folded", "no-fold"])
def test_the_modes_differ_note_names_the_view_of_a_program_that_folds(fold):
    # the skeleton's fold has no accesses: the note is read off the program's views
    from semcheck.checker.properties.analysis import Analysis
    from semcheck.checker.properties.checking import exposures_of

    p = _ring(8)
    assert Analysis(p).fold is not None
    d22 = [e for e in exposures_of(p, fold) if e.code == "D22"]
    assert [e.locs for e in d22] == [(LOAD.loc,)]


# --- RUN-9 .. RUN-11: any static failure that ends the whole run -----------------------------

GROUND_TRUTH = Path(__file__).resolve().parent / "kernels" / "ground_truth.json"
ROOT = Path(__file__).resolve().parent.parent


def _interpret_errors(devices: int) -> list[dict]:
    """The recorded interpret-mode runs of the examples (default arguments) that raised."""
    cases = json.loads(GROUND_TRUTH.read_text())["cases"]
    return [c for c in cases if c["devices"] == devices and not c.get("kwargs") and c["outcome"] == "error"
            and c["path"].startswith("examples/buggy/")]


def _fresh(fn) -> None:
    """Run `fn` in a fresh process with 2 host devices (jax fixes the count when it first starts,
    and another test of this process may have started it with one)."""
    import concurrent.futures
    import multiprocessing

    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        pool.submit(fn).result()


@pytest.mark.jax
@pytest.mark.rule("RUN-9", "RUN-11", "ERR-16", "ERR-17", "ERR-18")
def test_a_reachable_static_failure_fails_every_run_as_interpret_mode_does():
    """Every example semcheck decides by RUN-11 raised in interpret mode, with the message semcheck names,
    and printed no exit warning where semcheck says no run reaches an exit."""
    _fresh(_static_failures_agree_with_interpret_mode)


def _static_failures_agree_with_interpret_mode() -> None:
    from semcheck.checker.frontend import load, provision_devices

    provision_devices(2)
    decided = 0
    for case in _interpret_errors(2):
        program = load(str(ROOT / case["path"]), devices=2)[0].program
        got = {v.property: v for v in check_program(program, case["dma_mode"], fold=False)}
        dl = got["deadlock-free"]
        if dl.verdict != "violated" or dl.witness.details.get("rule") != "ERR-16":
            continue
        decided += 1
        assert dl.witness.details["error_type"] == case["error_type"], case["path"]
        assert case["error_message"] in dl.witness.details["error_message"], case["path"]
        replayed = run(program, case["dma_mode"], dl.witness.schedule)
        assert replayed.kind == "error" and replayed.failure.violation.message in dl.witness.message
        eb = got["exit-balance"]
        if eb.verdict == "vacuous" and "no run reaches a kernel exit" in eb.reason:
            assert not case["nonzero_count_warnings"], case["path"]
        assert got["race-free"].verdict != "unknown" and "up to its failure" in (
            got["race-free"].reason or got["race-free"].witness.message)
    assert decided >= 2  # fixed_id_collision and int16_overflow, in both interpreter modes


@pytest.mark.jax
@pytest.mark.rule("RUN-11")
def test_the_demo_kernel_has_no_unknown():
    _fresh(_demo_has_no_unknown)


def _demo_has_no_unknown() -> None:
    from semcheck.checker.frontend import load, provision_devices

    # the README's first demo (`make demo`): 2 devices (one process provisions one device count)
    provision_devices(2)
    program = load(str(ROOT / "examples/buggy/fixed_id_collision.py"), devices=2)[0].program
    for mode in ("eager", "on_wait", "hardware"):
        unknown = [v.property for v in check_program(program, mode) if v.verdict == "unknown"]
        assert not unknown, (mode, unknown)


@pytest.mark.rule("RUN-10", "RUN-11", "ERR-19")
def test_a_failure_that_ends_one_device_is_decided_by_every_schedule():
    # the barrier semaphore's lookup on a single-core device ends only that device (ERR-7): device 1
    # runs on, and what it does after the failure is not decided by RUN-11; the explorer decides
    # deadlock-free (device 0 never finishes, device 1 waits forever) and the rest name the limit
    p = launch(Topology(2), [[GetBarrierSem()], [Wait(SemRef("s"), 1, loc=Loc("k.py", 3))]],
               collective_id=40000, scratch=[Scratch("s")])
    for mode in ("eager", "on_wait"):
        v = decide("deadlock-free", p, mode)
        assert v.verdict == "violated" and "ERR-19" in v.reason
        replayed = run(p, mode, v.witness.schedule)
        assert replayed.kind == "error" and [b.core for b in replayed.blocked if b.reason != "halted by failure"] == [1]
        race = decide("race-free", p, mode)
        assert race.verdict != "unknown" or "ends only its device" in race.reason
        # device 0 fails, device 1 waits forever: no schedule reaches an exit
        balance = decide("exit-balance", p, mode)
        assert balance.verdict == "vacuous" and "no run reaches a kernel exit" in balance.reason
        # device 1 finishes and passes its exit check while device 0 fails: not proved that way
        exits = launch(Topology(2), [[GetBarrierSem()], [Signal(SemRef("s"), device=None)]],
                       collective_id=40000, scratch=[Scratch("s")])
        balance = decide("exit-balance", exits, mode)
        assert "no run reaches a kernel exit" not in balance.reason
        assert balance.verdict != "unknown" or "ERR-19" in balance.reason
    # the same failure on a device of two cores propagates to every core: every run fails
    two = launch(Topology(1, 2), [[GetBarrierSem()], [Wait(SemRef("s"), 1, loc=Loc("k.py", 3))]],
                 collective_id=40000, scratch=[Scratch("s")])
    v = decide("deadlock-free", two, "eager")
    assert v.verdict == "violated" and v.witness.details["rule"] == "ERR-16"


@pytest.mark.rule("RUN-11")
def test_a_fold_proves_nothing_of_runs_that_fail():
    # eight identical devices collide on the collective id: the fold would say no run reaches an exit
    bodies = [[GetBarrierSem(), Signal(SemRef(BARRIER), device=(d + 1) % 8), Wait(SemRef(BARRIER))] for d in range(8)]
    p = launch(Topology(8), bodies, collective_id=2000, scratch=[Scratch("s")])
    got = {v.property: v for v in check_program(p, "eager", fold=True)}
    assert got["deadlock-free"].verdict == "violated"
    assert "fold" not in (got["exit-balance"].reason or "")
