"""ERR-47: devices of one core that meet only at barriers of every device have one run each, so the failures
every run ends in are read off each device's greedy run, without exploring the schedules.

The programs: every device copies locally, some copies through a window the interpreter refuses (ACC-10), which
under `eager` raises in the copy's start and under `on_wait` in the wait that runs it (ACC-11), last in, first
out (SEM-7); signals stay on the device. Checked against every schedule (RUN-4).
"""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from semcheck.model import DmaStart, Loc, Scratch, SemRef, Signal, Topology, Wait, launch
from semcheck.model.errors import WindowOutOfBounds
from semcheck.model.explore import explore
from semcheck.model.explore_devices import failures_one_run_per_device

pytestmark = pytest.mark.rule("ERR-47")

FIRST = WindowOutOfBounds("copy", "read", "counts", (slice(0, 1024, 1),), (256,), "k.py:7")
SECOND = WindowOutOfBounds("copy", "read", "offsets", (slice(0, 1024, 1),), (256,), "k.py:8")
MODES = ("eager", "on_wait")


def _writebacks(n: int, *, waited: int = 3, fine_on: frozenset[int] = frozenset()):
    """Every device starts three write-backs on one semaphore (the first two past their tables, but on the devices
    of `fine_on`, the third a small header), then waits the first `waited` of them in their order."""
    def body(d):
        sizes = (4096, 4096, 16)
        errors = (None, None, None) if d in fine_on else (FIRST, SECOND, None)
        ops = [DmaStart(SemRef("r"), size, view_error=e, loc=Loc("k.py", 7 + i))
               for i, (size, e) in enumerate(zip(sizes, errors))]
        return ops + [Wait(SemRef("r"), size, "dma", Loc("k.py", 12 + i)) for i, size in enumerate(sizes[:waited])]
    return launch(Topology(n), [body(d) for d in range(n)], scratch=[Scratch("r")])


def test_each_mode_s_failure_is_read_off_one_run_per_device():
    """eager raises at the first start; on_wait's first wait pops the header, then the second copy, which
    raises: two failures, each the only one of its mode."""
    p = _writebacks(3)
    assert failures_one_run_per_device(p, "eager") == {FIRST}
    assert failures_one_run_per_device(p, "on_wait") == {SECOND}
    for mode, want in zip(MODES, (FIRST, SECOND)):
        ex = explore(p, mode)
        assert {o.kind for o in ex.outcomes} == {"error"}
        assert {o.failure.violation for o in ex.outcomes} == {want}


def test_a_device_whose_run_completes_decides_nothing():
    """With no wait under on_wait no copy runs: every run completes, and nothing is said; a device whose copies
    are fine completes too, so not every run fails."""
    assert failures_one_run_per_device(_writebacks(2, waited=0), "on_wait") is None
    assert failures_one_run_per_device(_writebacks(2, fine_on=frozenset({1})), "eager") is None


def test_devices_of_several_cores_are_left_to_the_walk():
    p = launch(Topology(2, 2), [[DmaStart(SemRef("r"), 16, view_error=FIRST, loc=Loc("k.py", 7))]] * 4,
               scratch=[Scratch("r")])
    assert failures_one_run_per_device(p, "eager") is None


_OP = st.sampled_from(["copy", "bad copy", "other bad copy", "wait", "wait s", "signal", "signal s"])


def _op(kind: str, line: int):
    loc = Loc("k.py", line)
    if kind.endswith("copy"):
        error = {"bad copy": FIRST, "other bad copy": SECOND}.get(kind)
        return DmaStart(SemRef("r"), 16, view_error=error, loc=loc)
    if kind.startswith("wait"):
        return Wait(SemRef("s" if kind.endswith(" s") else "r"), 16, "dma", loc)
    return Signal(SemRef("s" if kind.endswith(" s") else "r"), 16, loc=loc)


@example(bodies=[["bad copy", "other bad copy", "copy", "wait", "wait"]] * 2)
@example(bodies=[["other bad copy", "bad copy", "wait", "wait"], ["bad copy", "signal", "wait"]])
@given(bodies=st.lists(st.lists(_OP, max_size=5), min_size=2, max_size=3))
def test_one_run_per_device_agrees_with_every_schedule(bodies):
    """Where it says every run fails, every explored run of the mode fails, with exactly those failures."""
    p = launch(Topology(len(bodies)), [[_op(k, 10 + i) for i, k in enumerate(b)] for b in bodies],
               scratch=[Scratch("r"), Scratch("s")])
    for mode in MODES:
        said = failures_one_run_per_device(p, mode)
        if said is None:
            continue
        ex = explore(p, mode)
        assert {o.kind for o in ex.outcomes} == {"error"}, (mode, ex.kinds())
        assert {o.failure.violation for o in ex.outcomes} == said, mode


@pytest.mark.rule("ERR-47", "PRG-217")
def test_past_the_explorer_s_budget_each_mode_s_failure_is_still_shown(monkeypatch):
    """PRG-217's test of a call that raises in every run, per mode: under on_wait the copies fail in a waiter
    (outside S'), and every schedule is past a budget of 3 states; each device's one run still shows it."""
    from semcheck.checker.programs.interpreter import raised_in_every_run, raised_per_mode
    from semcheck.checker.properties import failing_facts

    monkeypatch.setattr(failing_facts, "FALLBACK_STATES", 3)
    p = _writebacks(4)
    assert raised_per_mode(p) == {"eager": FIRST, "on_wait": SECOND}
    assert raised_in_every_run(p) is None  # PRG-208's one failure in both modes: not this program's
