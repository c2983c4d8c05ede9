"""ERR-64: id-agreement in every state of every run, failing runs included, from lower bounds on the progress of
the relaxed program's runs, where no S' stands for the program's runs (a scope failure, a clock failure, a
lookup of the collective id that depends on the schedule)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from strategies import programs, scope_programs

from semcheck.checker.frontend.api import load
from semcheck.checker.properties.analysis import Analysis
from semcheck.checker.properties.checking import check_program
from semcheck.checker.properties.failing_prefixes import agreement_on_prefixes, relaxed, renames
from semcheck.checker.properties.id_uses import agreement_by_bounds, disagreement
from semcheck.model import AllocSem, Scratch, SemRef, Signal, Topology, Wait, launch
from semcheck.model.explore import ExplorationLimit, walk

ROOT = Path(__file__).resolve().parent.parent
GROUND_TRUTH = ROOT / "tests" / "kernels" / "ground_truth.json"
MODES = ("eager", "on_wait")


def _bounds(program, mode):
    clean = relaxed(program, renames(program))
    return agreement_by_bounds(program, mode, lambda: Analysis(clean).mode(mode).lowering)


def _two_devices(ordered: bool):
    """Device 1 allocates a run_scoped semaphore of the site device 0 then signals it by: with `ordered`, device 1
    signals the scratch semaphore after its allocation and device 0 waits for that before its own allocation and
    its signal; else nothing orders device 1's allocation before the signal."""
    mine = SemRef("c0k0")
    d1 = [AllocSem("c1k0", 1, site="site0")] + ([Signal(SemRef("s0"), 1, device=0)] if ordered else [])
    d0 = ([Wait(SemRef("s0"), 1)] if ordered else []) + [AllocSem("c0k0", 1, site="site0"), Signal(mine, 1, device=1)]
    return launch(Topology(2, 1), [d0, d1], collective_id=None, scratch=[Scratch("s0", 1)])


def _recorded(path: str, devices: int, mode: str) -> list[dict]:
    cases = json.loads(GROUND_TRUTH.read_text())["cases"]
    return [c for c in cases if c["path"] == path and c["devices"] == devices and c["dma_mode"] == mode
            and not c.get("kwargs")]


@pytest.mark.rule("ERR-64")
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(_two_devices(False), "eager")
@example(_two_devices(True), "on_wait")
@given(programs(max_devices=3, max_ops=4, allow_multicore=True)
       | programs(max_devices=2, max_ops=4).map(lambda p: dataclasses.replace(p, detect_races=True))
       | scope_programs(), st.sampled_from(MODES))
def test_a_use_shown_to_agree_by_the_bounds_agrees_in_every_reachable_state(program, mode):
    """Where the bounds show every remote use agrees, no reachable state of the program (those of runs that then
    fail included, so every run's end) has a remote use, before its core's position, that names on its target an
    allocation the target does not hold there: what PROP-3 reads at a run's end, asked of every state."""
    n = _bounds(program, mode)
    if n is None or n == 0:
        return
    found = []

    def visit(state, path, actors):
        if not found and disagreement(program, mode, state.allocs, state.pcs) is not None:
            found.append(path())

    try:
        walk(program, mode, visit, max_states=4_000, reduce=False)
    except ExplorationLimit:
        return
    assert not found, found[0]


def _states_disagreeing(program, mode) -> int:
    bad = []
    walk(program, mode, lambda s, path, actors: bad.append(1) if disagreement(program, mode, s.allocs, s.pcs)
         else None, max_states=10_000, reduce=False)
    return len(bad)


@pytest.mark.rule("ERR-64")
def test_a_target_allocation_the_use_does_not_wait_for_proves_nothing():
    """The signal names id 2001 on device 1 in both programs; only where device 1 must have allocated it first is
    id-agreement proved. Without that order some state has the signal made and device 1's allocation not yet, and
    the bounds prove nothing there (a run that failed then would end with that disagreement, ERR-44)."""
    for mode in MODES:
        assert _bounds(_two_devices(True), mode) == 2  # the scratch signal and the scoped one
        assert _states_disagreeing(_two_devices(True), mode) == 0
        assert _bounds(_two_devices(False), mode) is None
        assert _states_disagreeing(_two_devices(False), mode) > 0
        assert agreement_on_prefixes(_two_devices(False), mode, "drawn") is None


# (example, modes) whose id-agreement was unknown at 4 and 8 devices: the explorer exceeded its budget (ERR-19)
CELLS = (("examples/buggy/fixed_id_collision_scoped.py", ("eager", "on_wait")),
         ("examples/buggy/scope_remote_copy_before_entry.py", ("eager",)))


@pytest.mark.jax
@pytest.mark.rule("ERR-64")
@pytest.mark.parametrize("path,modes", CELLS)
def test_the_schedule_dependent_failures_past_the_budget_agree_on_every_run(path, modes):
    """At 4 devices (past the explorer's budget) id-agreement is proved by the bounds, with no schedule walked;
    every recorded interpret-mode run at 4 and 8 devices raises the collision or the KeyError, never a semaphore
    that names another allocation on its target."""
    program = load(str(ROOT / path), devices=4)[0].program
    for mode in modes:
        (v,) = check_program(program, mode, ("id-agreement",))
        assert v.verdict == "proved" and v.stats.get("rule") == "ERR-64", v.reason
        for devices in (4, 8):
            (r,) = _recorded(path, devices, mode)
            assert r["outcome"] == "error" and r["error_type"] in ("ValueError", "KeyError")
