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
