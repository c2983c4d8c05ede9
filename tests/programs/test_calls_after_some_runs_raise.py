"""ERR-57: the calls after a call are unknown in an interpreter mode where that call's own `deadlock-free` verdict
does not show that no run of it raises (`some_runs_raise.raised_in_some_run`, read by `after_failures` through
`undecided_after`); a violation by a hang alone keeps them. Model programs here; the jax-built target and jax's
runs of it are in test_per_mode_failures.py."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import example, given

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from strategies import programs  # noqa: E402

from semcheck.checker.programs.interpreter import after_failures  # noqa: E402
from semcheck.checker.properties.some_runs_raise import raised_in_some_run, undecided_after  # noqa: E402
from semcheck.model import BARRIER, AllocSem, GetBarrierSem, Scratch, SemRef, Signal, Topology, Wait, launch  # noqa: E402
from semcheck.model.explore import ExplorationLimit, explore  # noqa: E402
from kernel_stub import KernelStub  # noqa: E402

MODES = ("eager", "on_wait")
B = SemRef(BARRIER)


def _calls(*programs_: object) -> list[KernelStub]:
    return [KernelStub(p, SimpleNamespace(unit=i), f"k{i}") for i, p in enumerate(programs_)]


def _collides_in_some_runs():
    """The target's first call in the model: a barrier handshake on collective id 2000, then device 1 allocates a
    semaphore (internal id 2000) it never uses. Device 0's wait looks 2000 up when it begins: before the allocation
    (the greedy run: device 0 runs until it blocks) it keeps the barrier and the run completes; after it, the lookup
    meets 2000 in both tables and raises (SEM-3, ERR-1)."""
    return launch(Topology(2), [[GetBarrierSem(), Signal(B, 1, device=1), Wait(B, 1)],
                                [GetBarrierSem(), Signal(B, 1, device=0), Wait(B, 1), AllocSem("scoped", 1, site="x")]],
                  collective_id=2000)


def _hangs():
    """Device 0 waits for a signal nobody sends: every run hangs, none raises."""
    return launch(Topology(2), [[Wait(SemRef("s"), 1)], []], scratch=[Scratch("s")])


def _clean():
    return launch(Topology(2), [[Signal(SemRef("s"), 1), Wait(SemRef("s"), 1)]] * 2, scratch=[Scratch("s")])


def _kinds(program, mode):
    return {o.kind for o in explore(program, mode).outcomes}


@pytest.mark.rule("ERR-57")
def test_a_call_after_one_a_schedule_alone_makes_raise_is_unknown_naming_it():
    """Some schedule of the first call raises (the explorer), its greedy run completes and nothing ERR-53 or ERR-55
    reads says so; the call after it was left as it is (checked as if every device ran it) and is now unknown in
    both interpreter modes, naming the first call, its failure and ERR-57."""
    first = _collides_in_some_runs()
    for mode in MODES:
        assert _kinds(first, mode) == {"completed", "error"}, mode
    out = after_failures(_calls(first, _clean()), undecided_after)
    apart = dict(out[1].modes_apart)
    assert set(apart) == set(MODES), apart
    for mode, why in apart.items():
        assert "k0 at here" in why and "ERR-57" in why and "occurs as both fixed-id and internal" in why, why
        assert f"deadlock-free under {mode} is violated" in why, why
    assert out[0].modes_apart == ()


@pytest.mark.rule("ERR-57")
def test_a_call_that_only_hangs_keeps_the_calls_after_it():
    """A hang without a failure trips no clean-up barrier, so no device starts a later call in that run: the first
    call's deadlock-free is violated, but its check shows that no run raises, and the call after it keeps its
    verdicts. A call proved deadlock-free keeps them too."""
    for first in (_hangs(), _clean()):
        for mode in MODES:
            assert raised_in_some_run(first, mode) is None, mode
        out = after_failures(_calls(first, _clean()), undecided_after)
        assert [o.modes_apart for o in out] == [(), ()]
    assert _kinds(_hangs(), "eager") == {"deadlock"}


@pytest.mark.rule("ERR-57")
@given(programs())
@example(_collides_in_some_runs())
def test_where_no_run_is_read_to_raise_no_explored_run_raises(p):
    """Soundness of the reading on generated programs (collective ids that collide with internal ids included):
    where `raised_in_some_run` keeps the later calls, no schedule of the program raises (RUN-4)."""
    for mode in MODES:
        if raised_in_some_run(p, mode) is not None:
            continue
        try:
            kinds = _kinds(p, mode)
        except ExplorationLimit:
            continue
        assert "error" not in kinds, (mode, kinds)


@dataclasses.dataclass(frozen=True)
class _LoopKernel(KernelStub):  # a call in a loop whose iterations are lowered one by one (PRG-183)
    iterations: tuple = ()


@pytest.mark.rule("ERR-65")
def test_a_call_after_a_loop_whose_later_iteration_may_raise_is_unknown_naming_it():
    """A call in a loop whose first iteration is clean and whose second one raises in some schedules only: the
    calls after the loop were read off the first iteration's lowering alone and kept as if every device ran them
    (jax: one device raises in the second iteration, the other waits at the next call's start barrier). Now they
    are unknown in both interpreter modes, naming the iteration; a loop of clean iterations keeps them."""
    clean, collides = _clean(), _collides_in_some_runs()
    words = "iteration 1 (counted from 0, of 2) of the loop at here"
    loop = _LoopKernel(clean, SimpleNamespace(unit=0), "k0", iterations=(("iteration 0", clean), (words, collides)))
    out = after_failures([loop, KernelStub(_clean(), SimpleNamespace(unit=1), "k1")], undecided_after)
    apart = dict(out[1].modes_apart)
    assert set(apart) == set(MODES), apart
    for mode, why in apart.items():
        assert f"k0 at here in {words} (ERR-65)" in why and "ERR-57" in why, why
    again = _clean()
    kept = _LoopKernel(clean, SimpleNamespace(unit=0), "k0", iterations=(("iteration 0", clean), (words, again)))
    out = after_failures([kept, KernelStub(_clean(), SimpleNamespace(unit=1), "k1")], undecided_after)
    assert out[1].modes_apart == ()
