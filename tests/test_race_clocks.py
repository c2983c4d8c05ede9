"""RACE-1 at the kernel level (specs/semantics/buffers.md RACE-1; specs/deciding/failing.md ERR-21).

* over drawn programs, every wait the step relation finishes is decided as the manager-level RACE-1
  (`model/manager.py`) decides the same wait from the same state, and the fast run is a run of the step
  relation with clocks kept;
* semcheck's verdict on each kernel of tests/kernels/clock_cases.py matches what jax's interpreter
  did with it (recorded there; the slow sibling runs jax again).
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from semcheck.model import manager as mgr
from semcheck.model.errors import UnclockedWait
from semcheck.model.fast import fast_run
from semcheck.model.ops import DmaStart, Signal, Wait
from semcheck.model.run import run
from semcheck.model.state import State
from semcheck.model.step import enabled, resolve, step
from strategies import programs

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "kernels"))
import clock_cases as cc  # noqa: E402


@st.composite
def _racy_programs(draw):
    """A drawn program with race detection on, some of its waits for 0 or -1 (which raises the count: a later
    wait for more than 0 may then finish with no signal) and some of its copies of 0 bytes."""
    p = draw(programs(max_devices=2, max_ops=5))
    zero = st.integers(0, 2).map(lambda k: k == 0)
    cores = tuple(tuple(dataclasses.replace(op, value=draw(st.sampled_from([0, -1]))) if type(op) is Wait and draw(zero)
                        else dataclasses.replace(op, nbytes=0) if type(op) is DmaStart and draw(zero) else op
                        for op in ops) for ops in p.cores)
    return dataclasses.replace(p, cores=cores, detect_races=True)


@pytest.mark.rule("RACE-1", "RACE-2")
@settings(max_examples=150, deadline=None)
@given(_racy_programs(), st.sampled_from(["eager", "on_wait"]), st.data())
def test_every_finished_wait_is_decided_as_the_manager_decides_it(program, mode, data):
    cfg = mgr.Config(num_devices=program.topology.num_devices, cores_per_device=program.topology.cores_per_device,
                     dma_execution_mode=mode, detect_races=True)
    state, met = State.initial(program), 0
    for _ in range(80):
        actors = enabled(program, mode, state)
        if not actors:
            break
        actor = data.draw(st.sampled_from(actors))
        after = step(program, mode, state, actor)
        core = actor[1]
        pc = state.pcs[core]
        op = program.cores[core][pc]
        finished = after.pcs[core] > pc or (len(after.failures) > len(state.failures)
                                           and isinstance(after.failures[-1].violation, UnclockedWait))
        if type(op) is Wait and finished:
            key = state.looked_up.get(core) or resolve(program, mode, state, core, op.sem)
            m = mgr.Manager(tables=state.tables, counts=state.counts, queues=state.queues, dmas=state.dmas,
                            signals=state.signals)
            m2, err = mgr.wait(cfg, m, key, core, op.value)
            assert (err is not None) == (after.pcs[core] == pc), (op, err)
            assert m2.counts == after.counts
            met += err is not None
        state = after
    # the fast run is a run of the step relation, clocks and all
    fast = fast_run(program, mode)
    assert run(program, mode, fast.schedule).summary() == fast.summary()


@pytest.mark.rule("RACE-2")
def test_without_race_detection_or_on_hardware_no_wait_fails_for_its_clock():
    from semcheck.model.clocks import finished_wait, keeps_clocks

    assert keeps_clocks(True, "on_wait") and keeps_clocks(True, "eager")
    assert not keeps_clocks(False, "on_wait") and not keeps_clocks(True, "hardware")
    assert finished_wait(True, ("internal", 2000), 0, lambda: False) == UnclockedWait(("internal", 2000), 0)
    assert finished_wait(True, ("internal", 2000), 0, lambda: True) is None
    assert finished_wait(False, ("internal", 2000), 0, lambda: False) is None


def _verdict(name: str, mode: str, races: bool):
    from semcheck.checker.frontend.lower import lower_kernel
    from semcheck.checker.frontend.trace import trace_kernels
    from semcheck.checker.properties.decide import decide

    (call,) = trace_kernels(*cc.build_case(name, dma_mode=mode, detect_races=races))
    return decide("deadlock-free", lower_kernel(call), mode)


@pytest.mark.jax
@pytest.mark.rule("RACE-1", "ERR-21")
@pytest.mark.parametrize("case", sorted(cc.RECORDED), ids=lambda c: f"{c[0]}-{c[1]}-{'races' if c[2] else 'quiet'}")
def test_semcheck_predicts_what_the_interpreter_did(case):
    name, mode, races = case
    v = _verdict(name, mode, races)
    if cc.RECORDED[case] == "ok":
        assert v.holds, v
        return
    assert v.verdict == "violated", v
    d = v.witness.details
    assert (d["error_type"], d["error_message"], d["rule"]) == ("AssertionError", "", "RACE-1")
    assert d["wait_line"] and "clock" in v.witness.message
    if name.startswith("copy"):  # the copy that never ran is named, with the wait
        assert d["copy_lines"] and len(v.witness.locs) == len(d["copy_lines"]) + 1


@pytest.mark.jax
@pytest.mark.slow
@pytest.mark.rule("RACE-1")
@pytest.mark.parametrize("case", sorted(cc.RECORDED), ids=lambda c: f"{c[0]}-{c[1]}-{'races' if c[2] else 'quiet'}")
def test_the_recorded_outcomes_are_the_interpreters(case):
    assert cc.run_case(*case) == cc.RECORDED[case]


@pytest.mark.rule("RACE-1", "RACE-2")
def test_a_wait_for_less_than_0_fails_and_leaves_a_count_no_signal_raised():
    # jax's manager consumes first: wait(-1) raises the count to 1 and fails; a later wait(1) (the manager's
    # API goes on after a failure, a kernel's run does not) finishes on it and fails too
    from semcheck.model import Scratch, SemRef, Topology, launch

    program = launch(Topology(1, 1), [(Wait(SemRef("s"), -1), Wait(SemRef("s"), 1))], scratch=[Scratch("s", 1)])
    program = dataclasses.replace(program, detect_races=True)
    for mode in ("eager", "on_wait"):
        for out in (run(program, mode), fast_run(program, mode)):
            assert out.kind == "error" and isinstance(out.failure.violation, UnclockedWait)
            assert program.cores[0][out.failure.pc].value == -1
            assert out.state.counts.get((out.failure.violation.key, 0)) == 1
        assert fast_run(program, "hardware").kind == "completed"
    cfg = mgr.Config(detect_races=True)
    m, base = mgr.allocate_semaphores(mgr.Manager(), 0, 1)
    m, err = mgr.wait(cfg, m, ("internal", base), 0, -1)
    assert err is not None and mgr.read(m, ("internal", base), 0) == 1
    assert mgr.wait(cfg, m, ("internal", base), 0, 1)[1] is not None


@pytest.mark.rule("RACE-2")
def test_the_explorer_keeps_the_order_of_a_signal_and_a_wait_for_0_on_another_core():
    # core 0 signals core 1's counter by 0; core 1 waits for 0 on it: it fails only when it comes first
    from semcheck.model import Scratch, SemRef, Topology, explore, launch

    program = launch(Topology(1, 2), [(Signal(SemRef("s"), 0, core=1),), (Wait(SemRef("s"), 0),)],
                     scratch=[Scratch("s", 1)])
    racy = dataclasses.replace(program, detect_races=True)
    for mode in ("eager", "on_wait"):
        assert explore(racy, mode).kinds() == {"completed", "error"}
        assert explore(program, mode).kinds() == {"completed"}
