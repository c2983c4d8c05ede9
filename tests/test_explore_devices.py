"""RUN-57: devices that meet only at barriers of every device, walked one at a time, against every schedule."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import programs, scope_programs

from semcheck.model import (DmaStart, ExplorationLimit, InterpreterView, Scratch, SemRef, Signal, Topology, Wait, explore,
                            launch, run,
                            visible)
from semcheck.model.explore_devices import explore_by_device, explore_outcomes, meeting_cores

MODES = ("eager", "on_wait")
ROOT = Path(__file__).resolve().parent.parent
GROUND_TRUTH = ROOT / "tests" / "kernels" / "ground_truth.json"


@st.composite
def apart_programs(draw):
    """`programs()` with every copy and signal kept on its own device (some copies through a view the interpreter
    cannot index, ACC-11; some calls detecting races, whose waits may fail RACE-1's clock assertion), so that
    the devices meet only at the launch's barriers."""
    program = draw(programs(max_devices=3, max_ops=3))
    cores = []
    for ops in program.cores:
        ops = list(ops)
        for i, op in enumerate(ops):
            if type(op) is Signal:
                ops[i] = dataclasses.replace(op, device=None, core=None)
            elif type(op) is DmaStart:
                err = None
                if draw(st.booleans()):
                    side = draw(st.sampled_from(["source", "destination"]))
                    err = InterpreterView("ReshapeTransform", "copy", "k.py:1", side=side)
                ops[i] = dataclasses.replace(op, device=None, view_error=err)
        cores.append(tuple(ops))
    return dataclasses.replace(program, cores=tuple(cores), detect_races=draw(st.booleans()))


def _failures(ex) -> set:
    return {(f.violation, f.core, f.pc) for o in ex.outcomes if o.kind == "error" for f in o.state.failures}


def _others(ex) -> set:
    return {visible(o) for o in ex.outcomes if o.kind != "error"}


def _agrees_with_every_schedule(program, mode) -> bool:
    """RUN-57's walk against RUN-4: the same outcomes that do not fail, the same failures, the same kinds, and
    each witness replays to its outcome; False when the walk is not taken."""
    apart = explore_by_device(program, mode, max_states=200_000)
    if apart is None:
        return False
    full = explore(program, mode, max_states=400_000)
    assert _others(apart) == _others(full)
    assert _failures(apart) == _failures(full)
    assert {o.kind for o in apart.outcomes} == {o.kind for o in full.outcomes}
    for o in apart.outcomes:
        assert visible(run(program, mode, o.schedule)) == visible(o)
    return True


@pytest.mark.parametrize("mode", MODES)
@settings(max_examples=settings().max_examples * 3)
@given(program=apart_programs())
@pytest.mark.rule("RUN-57")
def test_walking_one_device_at_a_time_keeps_every_outcome_and_every_failure(program, mode):
    """Every outcome that does not fail and every failure of every schedule (RUN-4), and each witness replays."""
    if not _agrees_with_every_schedule(program, mode):
        assert program.topology.num_devices == 1 or meeting_cores(program, mode) is None or any(
            f.violation is not None for o in explore(program, mode).outcomes for f in o.state.failures)


@pytest.mark.parametrize("mode", MODES)
@given(program=scope_programs())
@pytest.mark.rule("RUN-57", "BUF-14")
def test_walking_one_device_at_a_time_keeps_the_failures_of_freed_scoped_buffers(program, mode):
    """Write-backs of run_scoped buffers waited inside, after or never (BUF-14's KeyError): walked alone where
    the copies stay on their devices, as every schedule."""
    local = program.topology.num_devices == 2 and not any(
        type(op) is DmaStart and op.device is not None for ops in program.cores for op in ops)
    assert _agrees_with_every_schedule(program, mode) == local


@pytest.mark.rule("RUN-57")
def test_devices_that_meet_otherwise_are_not_walked_alone():
    """A signal to another device, or the hardware mode's copy halves, keep every schedule's explorer (RUN-4)."""
    s = SemRef("s")
    remote = launch(Topology(2), [[Signal(s, 1, device=1)], [Wait(s, 1)]], scratch=[Scratch("s")])
    assert meeting_cores(remote, "on_wait") is None
    assert explore_by_device(remote, "on_wait", max_states=1000) is None
    local = launch(Topology(2), [[Signal(s, 1), Wait(s, 1)], [Wait(s, 1)]], scratch=[Scratch("s")])
    assert meeting_cores(local, "on_wait") == {0: 0, 1: 1}
    assert meeting_cores(local, "hardware") is None
    assert {o.kind for o in explore_by_device(local, "on_wait", max_states=1000).outcomes} == {"deadlock"}


@pytest.mark.rule("RUN-57", "ERR-41")
def test_past_the_budget_the_devices_are_walked_alone_within_it():
    """Four devices, each copying and waiting three times, then one copy through a view the interpreter cannot
    index: more states than every schedule fits in, and every failure still found, one per device."""
    s = SemRef("s")
    bad = InterpreterView("ReshapeTransform", "copy", "k.py:1", side="source")
    body = [DmaStart(s, 1), Wait(s, 1)] * 3 + [DmaStart(s, 1, view_error=bad), Wait(s, 1)]
    p = launch(Topology(4), [body] * 4, scratch=[Scratch("s")])
    with pytest.raises(ExplorationLimit):
        explore(p, "on_wait", max_states=2000)
    ex = explore_outcomes(p, "on_wait", max_states=2000)
    assert {o.kind for o in ex.outcomes} == {"error"}
    assert {f.core for o in ex.outcomes for f in o.state.failures} == {0, 1, 2, 3}
    assert ex.states < 200


def _decided_at_four_devices() -> None:
    from semcheck import check_program
    from semcheck.checker.frontend import load, provision_devices

    provision_devices(4)
    cases = json.loads(GROUND_TRUTH.read_text())["cases"]
    for name, deadlock_free, exit_balance in (("scope_writeback_outlives_buffer", "violated", "vacuous"),
                                              ("copy_window_at_dimension_end", "proved", "proved")):
        path = f"examples/buggy/{name}.py"
        recorded = [c["outcome"] for c in cases if c["path"] == path and c["devices"] == 4
                    and c["dma_mode"] == "on_wait" and not c.get("kwargs")]
        assert recorded == ["error" if deadlock_free == "violated" else "completed"]
        program = load(str(ROOT / path), devices=4)[0].program
        got = {v.property: v for v in check_program(program, "on_wait")}
        assert got["deadlock-free"].verdict == deadlock_free, got["deadlock-free"].reason
        assert got["exit-balance"].verdict == exit_balance, got["exit-balance"].reason
        assert "some runs at least" not in got["deadlock-free"].reason


@pytest.mark.jax
@pytest.mark.rule("ERR-41", "RUN-57")
def test_failing_on_wait_runs_of_four_devices_are_decided_by_every_schedule():
    """ERR-19's explorer past its budget walks the devices one at a time (RUN-57): a write-back that lands in a
    freed run_scoped buffer raises in every run, and an empty copy at a dimension's end never runs, as jax's
    interpret mode does at 4 devices (`tests/kernels/ground_truth.json`)."""
    import concurrent.futures
    import multiprocessing

    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        pool.submit(_decided_at_four_devices).result()
