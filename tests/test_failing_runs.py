"""ERR-9 in the checker: when every interpreter run raises at an access through a view the interpreter
cannot index, every property is decided (checker/failing_runs.py, spec ACC-6, ERR-9)."""

from __future__ import annotations

import pytest

from semcheck.checker.properties import BY_ID
from semcheck import check_program
from semcheck.model import (
    Access,
    DmaStart,
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
    got = {prop: BY_ID[prop].check(p, mode) for prop in BY_ID}
    dl = got.pop("deadlock-free")
    assert dl.verdict == "violated" and dl.witness.locs == (LOAD.loc,)
    assert dl.witness.details["rule"] == "ERR-9" and VIEW.message in dl.witness.message
    replayed = run(p, mode, dl.witness.schedule)  # the witness is a run of the model that fails there
    assert replayed.kind == "error" and replayed.failure.violation == VIEW
    assert {prop: v.verdict for prop, v in got.items()} == {prop: "proved" for prop in got}
    assert "no run reaches a kernel exit" in got["exit-balance"].reason
    assert all(BY_ID[prop].check(p, "hardware").verdict == "proved" for prop in BY_ID)


@pytest.mark.rule("ERR-9", "ACC-6")
def test_a_fold_does_not_prove_what_the_failing_access_breaks():
    # eight identical devices fold; the fold reads the skeleton, which has no accesses
    p = _ring(8)
    verdicts = {v.property: v.verdict for v in check_program(p, "eager", fold=True)}
    assert verdicts["deadlock-free"] == "violated"
    assert {v.property: v.verdict for v in check_program(p, "hardware", fold=True)}["deadlock-free"] == "proved"


@pytest.mark.rule("ERR-9", "PROP-7")
def test_a_race_before_the_failure_is_still_reported():
    # device 0 writes x while its copy into x is in flight, then raises: the race happens first
    loc = Loc("k.py", 3)
    copy = DmaStart(SemRef("d"), 32, loc=loc, src_buf="y", src_region=Region(((0, 8),)), dst_buf="x",
                    dst_region=Region(((0, 8),)))
    write = Access("x", Region(((0, 8),)), True, Loc("k.py", 4))
    from semcheck.model import AllocBuffer

    body = [AllocBuffer("x"), AllocBuffer("y"), copy, write, LOAD, Wait(SemRef("d"), 32, kind="dma")]
    p = launch(Topology(1), [body], scratch=[Scratch("d")])
    v = BY_ID["race-free"].check(p, "hardware")
    assert v.verdict == "violated"
    assert BY_ID["deadlock-free"].check(p, "on_wait").verdict == "violated"
    assert BY_ID["race-free"].check(p, "on_wait").verdict == "violated"


@pytest.mark.rule("ERR-9", "PROP-6")
def test_bytes_never_waited_for_before_the_failure_are_not_left_at_an_exit():
    # the copy's wait comes after the failing load: no run waits for it, and no run reaches an exit
    copy = DmaStart(SemRef("d"), 32, loc=Loc("k.py", 3))
    p = launch(Topology(1), [[copy, LOAD, Wait(SemRef("d"), 32, kind="dma")]], scratch=[Scratch("d")])
    for mode in ("eager", "on_wait"):
        assert BY_ID["dma-bytes"].check(p, mode).verdict == "proved"
        assert BY_ID["exit-balance"].check(p, mode).verdict == "proved"
    short = launch(Topology(1), [[copy, Wait(SemRef("d"), 64, kind="dma"), LOAD]], scratch=[Scratch("d")])
    # a wait that can never be met keeps its core from the failing load: not every run fails, the usual check
    assert BY_ID["dma-bytes"].check(short, "eager").verdict == "violated"


@pytest.mark.rule("ERR-9")
@pytest.mark.parametrize("fold", [True, False], ids=["folded", "no-fold"])
def test_the_modes_differ_note_names_the_view_of_a_program_that_folds(fold):
    # the skeleton's fold has no accesses: the note is read off the program's views
    from semcheck.checker.analysis import Analysis
    from semcheck.checker.checking import exposures_of

    p = _ring(8)
    assert Analysis(p).fold is not None
    d22 = [e for e in exposures_of(p, fold) if e.code == "D22"]
    assert [e.locs for e in d22] == [(LOAD.loc,)]
