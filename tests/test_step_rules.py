"""Kernel-level rules: LAUNCH-1, SIG-1, HW-1, DMA-*, BAR-1, EXIT-1, ERR-7, SEM-5/6 at kernel level."""

from __future__ import annotations

import pytest

from semcheck.model import (
    BARRIER,
    AllocSem,
    Barrier,
    DmaStart,
    ExitCheck,
    GetBarrierSem,
    IdCollision,
    Int16Overflow,
    NoCollectiveId,
    Program,
    Read,
    Scratch,
    SemRef,
    Signal,
    Topology,
    Wait,
    explore,
    fast_run,
    launch,
    run,
)
from semcheck.model.step import enabled, step

S = SemRef("s")
R = SemRef("r")


def prog(bodies, topo=None, cid=None, scratch=("s", "r")):
    topo = topo or Topology(len(bodies))
    return launch(topo, bodies, collective_id=cid, scratch=[Scratch(x) for x in scratch])


@pytest.mark.rule("IR-1")
def test_program_needs_one_op_tuple_per_core():
    with pytest.raises(ValueError):
        Program(Topology(2), ((),))


@pytest.mark.rule("LAUNCH-1")
def test_launch_wraps_bodies_like_the_interpreter():
    p = launch(Topology(2, 2), [[], [], [], []], scratch=[Scratch("s", 2)])
    first = p.cores[0]
    assert isinstance(first[0], AllocSem) and first[0].scope == "device"
    assert [type(o).__name__ for o in first[1:]] == ["Barrier", "Barrier", "Barrier", "ExitCheck", "Barrier"]
    assert [o.name for o in first if isinstance(o, Barrier)] == ["start", "fork0", "join0", "cleanup"]
    assert [o.name for o in p.cores[1] if isinstance(o, Barrier)] == ["fork0", "join0"]
    with_cid = launch(Topology(2), [[], []], collective_id=0)
    assert not any(isinstance(o, Barrier) and o.name == "start" for o in with_cid.cores[0])


@pytest.mark.rule("SEM-5", "RUN-2")
def test_wait_consumes_only_own_core_count():
    p = prog([[Signal(S, 1, device=1), Wait(S, 1)], [Wait(S, 1)]])
    out = fast_run(p, "eager")
    assert out.kind == "deadlock"
    assert out.blocked[0].core == 0 and out.blocked[0].reason.startswith("waits")
    assert out.blocked[1].core == 1 and "cleanup" in out.blocked[1].reason  # core 1's wait passed


@pytest.mark.rule("SEM-6")
def test_read_records_own_count():
    p = prog([[Signal(S, 2), Read(S)]])
    out = fast_run(p, "eager")
    assert out.state.reads == ((0, 3, 2),)  # (core, pc after two scratch allocations, value)


@pytest.mark.rule("SIG-1")
def test_signal_without_core_index_targets_core_0_in_interpreter():
    p = prog([[], [Signal(S, 1)]], topo=Topology(1, 2))
    out = fast_run(p, "eager")
    key = ("internal", 2000)
    assert out.state.counts.get((key, 0)) == 1


@pytest.mark.rule("SIG-1", "HW-1")
def test_signal_without_core_index_targets_own_core_on_hardware():
    p = prog([[], [Signal(S, 1)]], topo=Topology(1, 2))
    out = fast_run(p, "hardware")
    assert out.state.counts.get((("site", "s", 0), 1)) == 1


@pytest.mark.rule("SIG-1", "ERR-4")
def test_signal_to_missing_device_fails():
    out = fast_run(prog([[Signal(S, 1, device=5)]]), "eager")
    assert out.kind == "error"
    assert out.failure.violation.message == "index 5 is out of bounds for axis 0 with size 1"
    hw = fast_run(prog([[Signal(S, 1, device=5)]]), "hardware")
    assert hw.failure.violation.code == "BadTarget"


@pytest.mark.rule("SIG-1")
def test_interpreter_signal_with_core_index_past_the_device_lands_on_the_next_device():
    p = prog([[Signal(S, 1, device=0, core=2)], [], [], []], topo=Topology(2, 2))
    out = fast_run(p, "eager")
    assert out.state.counts.get((("internal", 2000), 2)) == 1  # device 1, core 0


@pytest.mark.rule("HW-1", "SEM-1")
def test_hardware_keys_semaphores_by_site():
    body = [AllocSem("a1", 1, site="loop"), Signal(SemRef("a1")), Wait(SemRef("a1")),
            AllocSem("a2", 1, site="loop"), Signal(SemRef("a2")), Wait(SemRef("a2"))]
    hw = fast_run(prog([body]), "hardware")
    ip = fast_run(prog([body]), "eager")
    assert hw.kind == ip.kind == "completed"
    assert ip.state.allocs[(0, "a2")].ids == (2003,)  # fresh ids after the two scratch ids
    assert hw.state.allocs[(0, "a2")].site == "loop"


@pytest.mark.rule("DMA-1")
def test_dma_signals_send_on_source_and_receive_on_destination():
    p = prog([[DmaStart(R, 64, src_sem=S, device=1)], []])
    out = fast_run(p, "eager")
    c = out.state.counts
    assert c[(("internal", 2000), 0)] == 64 and c[(("internal", 2001), 1)] == 64


@pytest.mark.rule("DMA-2")
def test_eager_dma_completes_at_start():
    p = prog([[DmaStart(R, 8)]])
    st = run(p, "eager", [("core", 0), ("core", 0)], finish=False)  # alloc s, alloc r
    st = step(p, "eager", st, ("core", 0))
    assert st.dmas[0].phase == 2


@pytest.mark.rule("DMA-3")
def test_on_wait_dma_runs_only_when_waited_on():
    p = prog([[DmaStart(R, 8, device=1)], []])
    out = fast_run(p, "on_wait")
    assert out.kind == "completed"
    assert [d.phase for d in out.state.dmas] == [0]
    waited = prog([[DmaStart(R, 8, device=1)], [Wait(R, 8, kind="dma")]])
    assert fast_run(waited, "on_wait").kind == "completed"


@pytest.mark.rule("DMA-4")
def test_each_dma_half_runs_once():
    p = prog([[DmaStart(R, 8, src_sem=S, device=1), Wait(S, 8, kind="dma")], [Wait(R, 8, kind="dma")]])
    for o in explore(p, "on_wait").outcomes:
        assert o.kind == "completed"
        assert not o.state.counts  # nothing signalled twice
        assert o.state.dmas[0].phase == 2


@pytest.mark.rule("DMA-5", "RUN-1")
def test_hardware_dma_halves_are_separate_steps():
    p = prog([[DmaStart(R, 8)]])
    st = run(p, "hardware", [("core", 0)] * 3, finish=False)
    assert st.dmas[0].phase == 0
    assert ("dma_read", 0) in enabled(p, "hardware", st)
    assert ("dma_write", 0) not in enabled(p, "hardware", st)


@pytest.mark.rule("DMA-6")
def test_a_dma_adds_one_to_a_regular_semaphore_on_hardware_and_bytes_in_the_interpreter():
    copy = DmaStart(R, 4096, src_sem=S, device=1, src_sem_type="regular", dst_sem_type="regular")
    counting = prog([[copy, Wait(S, 1)], [Wait(R, 1)]])  # a TPU v6+ kernel: one per copy
    hw = fast_run(counting, "hardware")
    assert hw.kind == "completed" and not hw.state.counts  # every count back to zero
    replayed = run(counting, "hardware", hw.schedule, finish=False)  # the step relation agrees
    assert replayed == hw.state
    for mode in ("eager", "on_wait"):  # the interpreter adds the bytes (D20): 4095 left on each
        out = fast_run(counting, mode)
        assert out.kind == "completed"
        assert sorted(out.state.counts.values()) == [4095, 4095]
    # a DMA semaphore counts bytes in every mode, and a receive half of its own type
    mixed = prog([[DmaStart(R, 64, src_sem=S, device=1, dst_sem_type="regular"), Wait(S, 64)], [Wait(R, 1)]])
    assert not fast_run(mixed, "hardware").state.counts


@pytest.mark.rule("BAR-1", "RUN-2")
def test_barrier_waits_for_every_participant():
    everyone = frozenset({0, 1})
    p = prog([[Barrier("b", everyone)], []])
    out = fast_run(p, "eager")
    assert out.kind == "deadlock" and "barrier" in out.blocked[0].reason
    ok = prog([[Barrier("b", everyone)], [Barrier("b", everyone)]])
    assert fast_run(ok, "eager").kind == "completed"


@pytest.mark.rule("EXIT-1")
def test_exit_check_records_nonzero_counts():
    out = fast_run(prog([[Signal(S, 2)]]), "eager")
    assert out.kind == "completed"
    (w,) = out.state.warnings
    assert w.lines() == ("Semaphore 2000 has non-zero count for 0 (global core 0) at kernel exit: 2",)


@pytest.mark.rule("SEM-2", "ERR-6")
def test_barrier_semaphore_without_collective_id_fails():
    out = fast_run(prog([[GetBarrierSem()]]), "eager")
    assert out.failure.violation == NoCollectiveId()


@pytest.mark.rule("SEM-3", "ERR-1")
def test_collision_depends_on_schedule():
    # device 1 allocates 2000..2001 (scratch); device 0 looks the barrier semaphore up.
    topo = Topology(2)
    p = launch(topo, [[GetBarrierSem(), Signal(SemRef(BARRIER))], [AllocSem("x", 3, site="x")]],
               collective_id=2001, scratch=[])
    kinds = {(o.kind, o.failure and o.failure.violation) for o in explore(p, "eager").outcomes}
    assert ("error", IdCollision(2001)) in kinds
    assert any(k == "completed" for k, _ in kinds)


@pytest.mark.rule("ERR-7", "ERR-3")
def test_failure_in_allocation_stops_everyone():
    body0 = [AllocSem("big", 30766, site="big"), AllocSem("over", 2, site="over")]  # base 32768
    p = prog([body0, [Wait(S, 1)]], cid=0)
    out = fast_run(p, "eager")
    assert out.kind == "error" and isinstance(out.failure.violation, Int16Overflow)
    assert all(b.reason == "halted by failure" for b in out.blocked)


@pytest.mark.rule("ERR-7", "IDS-2")
def test_barrier_id_overflow_stops_only_its_device():
    p = prog([[GetBarrierSem()], [Wait(S, 1)]], cid=40000)
    out = fast_run(p, "eager")
    assert out.failure.violation == Int16Overflow(40000) and out.failure.core == 0
    # device 1 waits on: core 1 was blocked at its wait when device 0 failed
    assert any(b.core == 1 and b.reason.startswith("waits") for b in out.blocked)


@pytest.mark.rule("ERR-7", "ERR-1")
def test_failure_in_signal_stops_everyone():
    p = prog([[GetBarrierSem(), Signal(SemRef(BARRIER))], [Wait(S, 1)]], cid=2000)
    out = fast_run(p, "eager")
    assert out.failure.violation == IdCollision(2000)
    assert all(b.reason == "halted by failure" for b in out.blocked)


@pytest.mark.rule("BUF-1", "BUF-8", "BUF-9")
def test_each_cores_buffer_label_denotes_its_manager_key():
    """A device's HBM buffer is one key for its cores; a VMEM buffer one key per core; ids count per core."""
    from semcheck.model import AllocBuffer

    topo = Topology(2, 2)
    p = launch(
        topo,
        [[], [AllocBuffer("tmp", 8, "vmem")], [], []],
        scratch=[Scratch("acc", kind="buffer", nbytes=8, memory_space="vmem")],
        hbm_buffers=1,
    )
    for mode in ("eager", "hardware"):
        for state in (fast_run(p, mode).state, run(p, mode).state):
            keys = state.buffer_keys
            assert keys[(0, "hbm0")] == keys[(1, "hbm0")] == ("hbm", 100, 0, 0)
            assert keys[(2, "hbm0")] == ("hbm", 100, 1, 0)
            assert keys[(0, "acc")] == ("vmem", 101, 0, 0) and keys[(1, "acc")] == ("vmem", 101, 0, 1)
            assert keys[(1, "tmp")] == ("vmem", 102, 0, 1)
            assert state.buffers.next_id[(0, 1)] == 103 and state.buffers.next_id[(0, 0)] == 102


@pytest.mark.rule("BUF-8")
def test_a_device_allocation_after_one_core_ran_ahead_fails_the_interpreters_assertion():
    from semcheck.model import AllocBuffer

    p = Program(Topology(1, 2), ((Barrier("b", frozenset({0, 1})), AllocBuffer("x", scope="device")),
                                 (AllocBuffer("t"), Barrier("b", frozenset({0, 1})))))
    out = fast_run(p, "eager")
    assert out.kind == "error" and out.failure.violation.python_type == "AssertionError"
    assert out.state.buffer_keys[(0, "x")] == ("vmem", 100, 0, 0)
    assert out.state.buffer_keys[(1, "x")] == ("vmem", 101, 0, 1)
    assert fast_run(p, "hardware").kind == "completed"
