"""Concurrency-level differential test: whole programs on jax's manager, one thread per core.

Small multi-core programs in the model IR (see `programs.py`) run on jax's real
manager exactly as the interpreter drives it (see `threaded.py`), and what the
run shows must be one of the outcomes the model allows:

* a hang if and only if the model deadlocks (and then at the same operations,
  with the same counts),
* the same first error (type and message), and whether the other cores are
  left hanging behind it,
* the same final counts, semaphore reads and exit-check findings; exactly the
  fast run's under eager DMAs, one of the model's outcomes under on_wait
  (where which queued DMA a waiter runs depends on the schedule).
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, note
from hypothesis import strategies as st

from semcheck.model import (
    BARRIER,
    AllocSem,
    DmaStart,
    GetBarrierSem,
    Scratch,
    SemRef,
    Signal,
    Topology,
    Wait,
    explore,
    fast_run,
    launch,
)

from ._support import profile
from .programs import programs
from .threaded import check_against_model, model_observations, observe, run_on_jax

pytestmark = pytest.mark.jax

MODES = ("eager", "on_wait")


def agree(program, mode, *, detect_races=False):
    program = dataclasses.replace(program, detect_races=detect_races)  # RACE-1: the model keeps the clocks too
    real = run_on_jax(program, mode, detect_races=detect_races)
    ok, why = check_against_model(program, mode, real)
    assert ok, f"{program.name} ({mode}):\n{why}"
    return real.observation


@profile("threaded")
@given(program=programs(), mode=st.sampled_from(MODES), detect_races=st.booleans())
def test_generated_programs_run_on_jax_as_the_model_says(program, mode, detect_races):
    note(program.name)
    agree(program, mode, detect_races=detect_races)


# --- named programs -------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_two_cores_waiting_for_each_other_hang_and_the_model_deadlocks(mode):
    bodies = [
        (Wait(SemRef("s"), 1), Signal(SemRef("s"), 1, device=1)),
        (Wait(SemRef("s"), 1), Signal(SemRef("s"), 1, device=0)),
    ]
    program = launch(Topology(2, 1), bodies, scratch=[Scratch("s", 1)], name="wait-wait cycle")
    assert explore(program, mode).kinds() == {"deadlock"}
    obs = agree(program, mode)
    assert obs.kind == "deadlock"


@pytest.mark.parametrize("mode", MODES)
def test_a_remote_dma_whose_send_semaphore_is_never_signalled_hangs(mode):
    # core 0 waits for 16 bytes on a send semaphore of an 8-byte DMA
    bodies = [(DmaStart(SemRef("d", 0), 8, SemRef("d", 1), device=1), Wait(SemRef("d", 1), 16, kind="dma")), ()]
    program = launch(Topology(2, 1), bodies, scratch=[Scratch("d", 2)], name="short send")
    assert agree(program, mode).kind == "deadlock"


@pytest.mark.parametrize("mode", MODES)
def test_a_signal_without_core_index_hangs_in_the_interpreter_but_not_on_hardware(mode):
    # core 1 signals "its" semaphore without core_index: the interpreter delivers to core 0
    bodies = [(), (Signal(SemRef("s"), 1), Wait(SemRef("s"), 1))]
    program = launch(Topology(1, 2), bodies, scratch=[Scratch("s", 1)], name="no core_index, own wait")
    assert explore(program, "hardware").kinds() == {"completed"}
    assert explore(program, mode).kinds() == {"deadlock"}
    assert agree(program, mode).kind == "deadlock"


@pytest.mark.parametrize("mode", MODES)
def test_a_signal_without_core_index_completes_in_the_interpreter_but_hangs_on_hardware(mode):
    bodies = [(Wait(SemRef("s"), 1),), (Signal(SemRef("s"), 1),)]
    program = launch(Topology(1, 2), bodies, scratch=[Scratch("s", 1)], name="no core_index, core 0 waits")
    assert explore(program, "hardware").kinds() == {"deadlock"}
    assert agree(program, mode).kind == "completed"


def test_two_cores_copies_into_one_on_wait_queue_leave_what_the_model_says():
    """Shrunk from a generated 4-device program jax ran with 16 bytes left where the reduced explorer
    (RUN-5) allowed none: the waiter runs the copy queued last, so either copy may be the one that runs."""
    s, t = SemRef("s"), SemRef("t")
    bodies = [(DmaStart(s, 2), Wait(t, 1), Wait(s, 1)), (DmaStart(s, 1, device=0), Signal(t, 1, device=0))]
    program = launch(Topology(2, 1), bodies, scratch=[Scratch("s"), Scratch("t")], name="two queues into one")
    assert len({_exits(o) for o in explore(program, "on_wait").outcomes}) == 2
    agree(program, "on_wait")


def _exits(outcome):
    return tuple(sorted(w.nonzero for w in outcome.state.warnings))


@pytest.mark.parametrize("mode", MODES)
def test_run_scoped_in_a_loop_collides_with_the_collective_id_only_in_the_interpreter(mode):
    # every iteration gets fresh ids (2001, 2002, ...); the barrier semaphore is fixed id 2001
    body = [GetBarrierSem()]
    for i in range(2):
        body += [
            AllocSem(f"it{i}", 1, site="loop", scope="core"),
            Signal(SemRef(f"it{i}"), 1, core=0),
            Wait(SemRef(f"it{i}"), 1),
        ]
    program = launch(
        Topology(2, 1), [tuple(body)] * 2, collective_id=2001, scratch=[Scratch("s", 1)], name="scoped loop"
    )
    assert explore(program, "hardware").kinds() == {"completed"}
    obs = agree(program, mode)
    assert obs.kind == "error"
    assert obs.error == ("ValueError", "Semaphore 2001 occurs as both fixed-id and internal.")


@pytest.mark.parametrize("mode", MODES)
def test_barrier_semaphore_handshake_between_devices_completes(mode):
    bodies = [
        (GetBarrierSem(), Signal(SemRef(BARRIER), 1, device=1, core=0), Wait(SemRef(BARRIER), 1)),
        (GetBarrierSem(), Signal(SemRef(BARRIER), 1, device=0, core=0), Wait(SemRef(BARRIER), 1)),
    ]
    program = launch(Topology(2, 1), bodies, collective_id=7, scratch=[Scratch("s", 1)], name="handshake")
    assert agree(program, mode).kind == "completed"


def test_an_unwaited_dma_leaves_counts_under_eager_but_never_runs_under_on_wait():
    bodies = [(DmaStart(SemRef("d", 0), 16, device=1),), ()]
    program = launch(Topology(2, 1), bodies, scratch=[Scratch("d", 1)], name="unwaited DMA")
    eager, on_wait = agree(program, "eager"), agree(program, "on_wait")
    assert eager.counts == frozenset({(("internal", 2000), 1, 16)})
    assert on_wait.counts == frozenset()


def test_under_on_wait_the_last_queued_dma_is_the_one_a_waiter_runs():
    # one core: an 8-byte and then a 16-byte DMA to itself, then a wait for 8 bytes
    body = (DmaStart(SemRef("d", 0), 8), DmaStart(SemRef("d", 0), 16), Wait(SemRef("d", 0), 8, kind="dma"))
    program = launch(Topology(1, 1), [body], scratch=[Scratch("d", 1)], name="LIFO")
    on_wait = agree(program, "on_wait")
    eager = agree(program, "eager")
    assert on_wait.counts == frozenset({(("internal", 2000), 0, 8)})  # the 16-byte DMA ran, the 8-byte never
    assert eager.counts == frozenset({(("internal", 2000), 0, 16)})


def test_which_remote_dma_a_waiter_runs_depends_on_the_schedule():
    bodies = [
        (Wait(SemRef("d", 0), 8, kind="dma"),),
        (DmaStart(SemRef("d", 0), 8, device=0),),
        (DmaStart(SemRef("d", 0), 16, device=0),),
    ]
    program = launch(Topology(3, 1), bodies, scratch=[Scratch("d", 1)], name="racing DMAs")
    outcomes = model_observations(program, "on_wait")
    assert len({o.counts for o in outcomes}) >= 2
    for _ in range(3):
        agree(program, "on_wait")


def test_the_fast_run_and_the_real_run_agree_on_an_exit_warning():
    # device 1 is left with a count of 1, which its exit check reports
    bodies = [(Signal(SemRef("s"), 2, device=1),), (Wait(SemRef("s"), 1),)]
    program = launch(Topology(2, 1), bodies, scratch=[Scratch("s", 1)], name="leftover")
    obs = agree(program, "eager")
    assert obs.exits == observe(fast_run(program, "eager")).exits
    assert obs.exits == ((1, frozenset({(("internal", 2000), 1, 1)})),)


# --- run_scoped buffers (BUF-13, BUF-14) ------------------------------------------------------------


def _scoped_programs():
    """The scope-lifetime shapes of tests/test_scope_lifetime.py, with buffers of the copies' size."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import test_scope_lifetime as shapes

    return {"writeback waited late": shapes._streaming(False), "writeback waited inside": shapes._streaming(True),
            "fill before the late wait": shapes._streaming(False, input_first=True),
            "ring, handshake before the scope": shapes._ring(False),
            "ring, handshake inside the scope": shapes._ring(True)}


@pytest.mark.rule("BUF-14")
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(_scoped_programs()))
def test_copies_of_scoped_buffers_raise_on_jax_where_the_model_says(name, mode):
    """jax's manager, driven as the interpreter drives it, raises KeyError at a scoped buffer exactly in
    the programs where BUF-14 says a half can run outside its scope (and only then); where none can, the
    run is the model's."""
    from semcheck.checker.properties.confined_scopes import interpreter_failure, scope_verdict

    program = _scoped_programs()[name]
    may_raise = interpreter_failure(scope_verdict(program, mode), mode) is not None
    runs = [run_on_jax(program, mode) for _ in range(3)]
    raised = [r.observation.kind == "error" and r.observation.error[0] == "KeyError" for r in runs]
    if not may_raise:
        assert not any(raised)
        agree(program, mode)
    elif name.startswith("writeback") or name.startswith("fill"):  # one core: every run raises
        assert all(raised), [r.observation for r in runs]
        assert runs[0].observation.error[1].startswith("('vmem', ")
