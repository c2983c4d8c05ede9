"""ERR-1 .. ERR-7: each violation a kernel run can meet, with the interpreter's type and message,
and which failure a run reports."""

from __future__ import annotations

import pytest

from semcheck.model import (
    BARRIER,
    AllocSem,
    BadTarget,
    CoreIndexOutOfBounds,
    DmaStart,
    GetBarrierSem,
    IdCollision,
    Int16Overflow,
    InterpreterView,
    NoCollectiveId,
    Scratch,
    SemIndexOutOfBounds,
    SemRef,
    Signal,
    Topology,
    UnknownSemaphore,
    Wait,
    explore,
    fast_run,
    launch,
)


@pytest.mark.rule("ERR-1", "ERR-2", "ERR-3", "ERR-4", "ERR-5", "ERR-6")
@pytest.mark.parametrize(
    "violation, python_type, message",
    [
        (IdCollision(2001), "ValueError", "Semaphore 2001 occurs as both fixed-id and internal."),
        (UnknownSemaphore(-32768), "KeyError", "-32768"),
        (Int16Overflow(32768), "OverflowError", "Python integer 32768 out of bounds for int16"),
        (CoreIndexOutOfBounds(4, 4), "IndexError", "index 4 is out of bounds for axis 0 with size 4"),
        (BadTarget(5, 0), "IndexError", "target device 5 core 0 does not exist"),
        (SemIndexOutOfBounds("s", 2, 2), "IndexError", "semaphore index 2 out of bounds for allocation 's' of 2"),
        (NoCollectiveId(), "TypeError", "barrier semaphore requested but the kernel has no collective_id"),
    ],
    ids=["ERR-1", "ERR-2", "ERR-3", "ERR-4-interpreter", "ERR-4-hardware", "ERR-5", "ERR-6"],
)
def test_each_violation_has_the_type_and_message_of_the_table(violation, python_type, message):
    assert violation.python_type == python_type
    assert violation.message == message


@pytest.mark.rule("ERR-2", "IDS-1")
def test_a_wrapped_semaphore_id_is_in_neither_table():
    # ids 2000..32765, then three more: 32766, 32767 and a silently wrapped -32768, which was never
    # entered in the internal table under that number
    body = [AllocSem("big", 30_766, site="big"), AllocSem("w", 3, site="w"), Signal(SemRef("w", 2)), Wait(SemRef("w", 2))]
    p = launch(Topology(1), [body])
    out = fast_run(p, "eager")
    assert out.kind == "error" and out.failure.violation == UnknownSemaphore(-32768)
    assert fast_run(p, "hardware").kind == "completed"  # a TPU names the semaphore, not a number


@pytest.mark.rule("ERR-4", "DMA-1")
def test_a_dma_to_a_missing_device_fails_in_every_mode():
    p = launch(Topology(2), [[DmaStart(SemRef("s"), 8, device=5)], []], scratch=[Scratch("s")])
    for mode in ("eager", "on_wait", "hardware"):
        out = fast_run(p, mode)
        assert out.kind == "error" and out.failure.violation == BadTarget(5, 0), mode


@pytest.mark.rule("ERR-5", "SEM-3", "HW-1")
@pytest.mark.parametrize("mode", ["eager", "on_wait", "hardware"])
def test_indexing_a_semaphore_array_past_its_allocation_fails_where_it_is_used(mode):
    p = launch(Topology(1), [[Signal(SemRef("s", 1)), Wait(SemRef("s", 1)), Signal(SemRef("s", 2))]], scratch=[Scratch("s", 2)])
    out = fast_run(p, mode)
    assert out.kind == "error"
    assert out.failure.violation == SemIndexOutOfBounds("s", 2, 2)
    assert out.failure.pc == next(i for i, op in enumerate(p.cores[0]) if isinstance(op, Signal) and op.sem.index == 2)
    ok = launch(Topology(1), [[Signal(SemRef("s", 1)), Wait(SemRef("s", 1))]], scratch=[Scratch("s", 2)])
    assert fast_run(ok, mode).kind == "completed"


@pytest.mark.rule("ERR-6", "SEM-2")
def test_the_barrier_semaphore_without_a_collective_id_fails_on_hardware_too():
    p = launch(Topology(1), [[Signal(SemRef(BARRIER))]])
    assert fast_run(p, "hardware").failure.violation == NoCollectiveId()


@pytest.mark.rule("ERR-7")
def test_when_devices_fail_alone_the_first_failure_recorded_is_the_one_reported():
    # get_barrier_semaphore is not wrapped: each device's overflow ends only that device, so both fail,
    # in either order, and the outcome reports whichever came first
    p = launch(Topology(2), [[GetBarrierSem()], [GetBarrierSem()]], collective_id=40_000)
    outcomes = explore(p, "eager", reduce=False).outcomes
    assert outcomes and all(o.kind == "error" for o in outcomes)
    for o in outcomes:
        assert len(o.state.failures) == 2
        assert o.failure == o.state.failures[0]
    assert {o.failure.core for o in outcomes} == {0, 1}


# --- ERR-9: views the interpreter cannot index (ACC-6, D22) -------------------------------------

VIEW = InterpreterView("ReshapeTransform", "load", "k.py:7")


def _view_program(copy: bool = False):
    """Core 1 goes through a reshape view (a load, or a copy), then signals core 0, which waits for it."""
    from semcheck.model import Access, Loc, Region

    loc = Loc("k.py", 7)
    if copy:
        through = DmaStart(SemRef("d"), 8, view_error=InterpreterView("ReshapeTransform", "copy", "k.py:7"), loc=loc)
    else:
        through = Access("x", Region(((0, 8),)), False, loc, VIEW)
    bodies = [[Wait(SemRef("s"))], [through, Signal(SemRef("s"), device=0)]]
    return launch(Topology(2), bodies, scratch=[Scratch("s"), Scratch("d")])


@pytest.mark.rule("ERR-9")
def test_err9_has_the_interpreters_type_and_message():
    assert (VIEW.python_type, VIEW.message) == ("AttributeError", "'ReshapeTransform' object has no attribute 'indices'")


@pytest.mark.rule("ERR-9", "ACC-6", "ERR-7")
@pytest.mark.parametrize("mode", ["eager", "on_wait"])
def test_a_core_reaching_an_access_through_a_view_raises_there_and_the_run_ends(mode):
    p = _view_program()
    at = next(i for i, op in enumerate(p.cores[1]) if getattr(op, "view_error", None) is not None)
    fast = fast_run(p, mode)
    assert fast.kind == "error" and (fast.failure.violation, fast.failure.core, fast.failure.pc) == (VIEW, 1, at)
    # the step relation raises at the same op, and the failure stops the waiting core too (ERR-7)
    from semcheck.model import run

    again = run(p, mode, fast.schedule)
    assert again.kind == "error" and again.failure == fast.failure
    assert {b.core: b.reason for b in again.blocked}[0] == "halted by failure"
    explored = explore(p, mode)
    assert explored.kinds() == {"error"}
    assert {o.failure.violation for o in explored.outcomes} == {VIEW}


@pytest.mark.rule("ERR-9", "ACC-6")
def test_a_tpu_runs_the_access_through_a_view():
    assert fast_run(_view_program(), "hardware").kind == "completed"
    assert explore(_view_program(), "hardware").kinds() == {"completed"}


@pytest.mark.rule("ERR-9", "ACC-6", "DMA-1")
def test_an_eager_copy_through_a_view_raises_in_its_start_after_its_lookups():
    p = _view_program(copy=True)
    for out in (fast_run(p, "eager"), explore(p, "eager").outcomes[0]):
        assert out.kind == "error" and out.failure.violation.access == "copy" and out.failure.core == 1
        assert not out.state.dmas  # nothing started: the copy raised inside its start
    # a copy with a semaphore index past its allocation fails its lookup first (ERR-5), as the interpreter does
    bad = launch(Topology(1), [[DmaStart(SemRef("d", 3), 8, view_error=VIEW)]], scratch=[Scratch("d")])
    assert fast_run(bad, "eager").failure.violation == SemIndexOutOfBounds("d", 3, 1)
    assert fast_run(p, "hardware").kind == "completed"
    # under on_wait the copy raises only in the waiter that runs its task (ACC-11): nothing waits on 'd' here
    assert fast_run(p, "on_wait").kind == "completed"


# --- ACC-11: an on_wait copy through such a view raises in the waiter that runs its task -----------------------


def _deferred(side: str, *, wait_send: bool, wait_recv: bool, decoy: bool = False):
    """Device 0 copies 8 bytes to device 1 (send semaphore 's', receive semaphore 'r') through a view the
    interpreter cannot index on `side`; device 0 may wait for the send, device 1 for the receipt. With
    `decoy`, a good copy of 8 bytes into 'r' is started after it: the waiter pops that one first (LIFO)."""
    from semcheck.model import Loc

    err = InterpreterView("ReshapeTransform", "copy", "k.py:7", side=side)
    copy = DmaStart(SemRef("r"), 8, src_sem=SemRef("s"), device=1, view_error=err, loc=Loc("k.py", 7))
    zero = [DmaStart(SemRef("r"), 8, device=1, loc=Loc("k.py", 8))] if decoy else []
    zero = [copy, *zero] + ([Wait(SemRef("s"), 8, "dma", Loc("k.py", 9))] if wait_send else [])
    one = [Wait(SemRef("r"), 8, "dma", Loc("k.py", 10))] if wait_recv else []
    return launch(Topology(2), [zero, one], scratch=[Scratch("s"), Scratch("r")]), err


@pytest.mark.rule("ACC-11", "DMA-4", "ERR-7")
@pytest.mark.parametrize("side", ["source", "destination"])
def test_an_on_wait_copy_through_a_view_raises_in_the_waiter_that_runs_it(side):
    """Recorded in interpret mode (ACC-11's experiments): the receipt's wait runs the copy's task and raises
    there, which ends every device's run; a copy whose destination alone is unindexable is read (and its send
    semaphore signalled) by the sender's wait without a failure."""
    from semcheck.model import run

    p, err = _deferred(side, wait_send=True, wait_recv=True)
    out = fast_run(p, "on_wait")
    again = run(p, "on_wait", out.schedule)
    assert again.kind == out.kind and again.failure == out.failure
    outcomes = explore(p, "on_wait").outcomes
    failures = {(o.failure.violation, o.failure.core) for o in outcomes if o.kind == "error"}
    if side == "source":  # whichever wait runs a task first raises: every run fails
        assert {o.kind for o in outcomes} == {"error"} and failures == {(err, 0), (err, 1)}
    else:  # the sender's wait only reads, which succeeds; the receipt's raises in the write
        assert {o.kind for o in outcomes} == {"error"} and failures == {(err, 1)}
    assert explore(p, "eager").kinds() == {"error"} and explore(p, "hardware").kinds() == {"completed"}


@pytest.mark.rule("ACC-11", "DMA-3", "SEM-7")
def test_an_on_wait_copy_through_a_view_that_no_waiter_runs_raises_nothing():
    p, _ = _deferred("destination", wait_send=True, wait_recv=False)
    assert explore(p, "on_wait").kinds() == {"completed"}  # the read half runs; the write half never
    p, _ = _deferred("source", wait_send=False, wait_recv=False)
    assert explore(p, "on_wait").kinds() == {"completed"}
    # whether the receipt's wait pops the good copy (queued last) or the bad one depends on the schedule
    p, _ = _deferred("source", wait_send=False, wait_recv=True, decoy=True)
    assert explore(p, "on_wait").kinds() == {"completed", "error"}
    # on one core the good copy, started last, is popped first (LIFO) and satisfies the wait
    from semcheck.model import Loc

    bad = DmaStart(SemRef("r"), 8, view_error=InterpreterView("ReshapeTransform", "copy", "k.py:7", side="source"))
    p = launch(Topology(1), [[bad, DmaStart(SemRef("r"), 8), Wait(SemRef("r"), 8, "dma", Loc("k.py", 9))]],
               scratch=[Scratch("r")])
    assert explore(p, "on_wait").kinds() == {"completed"} and fast_run(p, "on_wait").kind == "completed"
