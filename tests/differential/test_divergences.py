"""Pins of jax's current interpret-mode behaviour where it differs from a TPU or from clean semantics.

One test per entry of specs/semantics/divergences.md (the ids D1.. match). Each asserts
what jax 0.12 does today, so that a change in jax shows up here as a failing
test: then the entry, the model and the checker's assumptions need a look.
They call the interpreter's own callbacks (with a fresh SharedMemory made
current) or the manager's methods directly; only D12 runs a real kernel.
"""

from __future__ import annotations

from semcheck.checker.properties.decide import decide
import threading

import numpy as np
import pytest

from ._support import load_runner

pytestmark = pytest.mark.jax

runner = load_runner()
TOP = 42  # the interpreter's top-level token value


@pytest.fixture
def interp():
    """A factory of (SharedMemory, interpreter module) pairs with the manager made current."""
    stack = []

    def make(**config):
        sm = runner.new_shared_memory(config)
        ctx = runner.interpreter_bound(sm)
        ipc = ctx.__enter__()
        stack.append(ctx)
        return sm, ipc

    yield make
    for ctx in reversed(stack):
        ctx.__exit__(None, None, None)


def vmem():
    return runner.memory_space_index("vmem")


def hbm():
    return runner.memory_space_index("hbm")


def sem_ids(ipc, device, core, n):
    _, ids = ipc._allocate_semaphores(TOP, device, core, (n,))
    return [int(i) for i in np.asarray(ids).ravel()]


# --- semaphores --------------------------------------------------------------------------


@pytest.mark.rule("SIG-1")
def test_d1_a_signal_without_core_index_goes_to_core_0(interp):
    sm, ipc = interp(num_devices=1, cores_per_device=2)
    (sid,) = sem_ids(ipc, 0, None, 1)
    ipc.semaphore_signal(TOP, 0, 1, sid, 1, None, None)  # from core 1, no device, no core_index
    assert sm.sem[sid].count_by_core.tolist() == [1, 0]


@pytest.mark.rule("DMA-3")
def test_d2_an_on_wait_dma_reads_its_source_when_waited_on_not_when_started(interp):
    sm, ipc = interp(dma_execution_mode="on_wait")
    src, dst = 300, 301
    sm.allocate_buffer(("vmem", src, 0, 0), 1, np.array([1, 2], np.int32))
    sm.allocate_buffer(("vmem", dst, 0, 0), 1, np.zeros(2, np.int32))
    (sid,) = sem_ids(ipc, 0, 0, 1)
    ipc.dma_start(TOP, 0, 0, vmem(), src, (), vmem(), dst, (), sid, None, None, None)
    sm.store_buffer_content(("vmem", src, 0, 0), (), np.array([8, 9], np.int32), (0, 0))  # after the start
    assert sm.sem[sid].count_by_core.tolist() == [0]  # nothing happened yet
    ipc.dma_wait(TOP, 0, 0, sid, 8)
    np.testing.assert_array_equal(sm.mem[("vmem", dst, 0, 0)].content, [8, 9])


@pytest.mark.rule("DMA-3")
def test_d3_an_on_wait_dma_nobody_waits_for_never_runs(interp):
    sm, ipc = interp(dma_execution_mode="on_wait")
    sm.allocate_buffer(("vmem", 300, 0, 0), 1, np.array([1, 2], np.int32))
    sm.allocate_buffer(("vmem", 301, 0, 0), 1, np.zeros(2, np.int32))
    (sid,) = sem_ids(ipc, 0, 0, 1)
    ipc.dma_start(TOP, 0, 0, vmem(), 300, (), vmem(), 301, (), sid, None, None, None)
    np.testing.assert_array_equal(sm.mem[("vmem", 301, 0, 0)].content, [0, 0])
    assert len(sm.sem[sid].tasks[0]) == 1  # still queued: the kernel could exit now


@pytest.mark.rule("SEM-7", "DMA-4")
def test_d4_an_on_wait_waiter_runs_the_last_queued_dma_first(interp):
    sm, ipc = interp(dma_execution_mode="on_wait")
    for i, n in ((300, 2), (302, 4)):
        sm.allocate_buffer(("vmem", i, 0, 0), 1, np.ones(n, np.int32))
        sm.allocate_buffer(("vmem", i + 1, 0, 0), 1, np.zeros(n, np.int32))
    (sid,) = sem_ids(ipc, 0, 0, 1)
    ipc.dma_start(TOP, 0, 0, vmem(), 300, (), vmem(), 301, (), sid, None, None, None)  # 8 bytes
    ipc.dma_start(TOP, 0, 0, vmem(), 302, (), vmem(), 303, (), sid, None, None, None)  # 16 bytes
    ipc.dma_wait(TOP, 0, 0, sid, 8)  # waits for the first DMA's 8 bytes ...
    np.testing.assert_array_equal(sm.mem[("vmem", 303, 0, 0)].content, [1, 1, 1, 1])  # ... ran the second
    np.testing.assert_array_equal(sm.mem[("vmem", 301, 0, 0)].content, [0, 0])  # the first never ran
    assert int(sm.sem[sid].read(0)) == 8


@pytest.mark.rule("IDS-1")
def test_d5_semaphore_ids_are_int16_and_wrap_or_overflow_as_numpy_converts(interp):
    sm, ipc = interp()
    sm.next_semaphore_id[0] = 32766  # as if 30,766 semaphores had been allocated
    assert sem_ids(ipc, 0, 0, 4) == [32766, 32767, -32768, -32767]  # wraps silently
    with pytest.raises(KeyError):
        sm.get_semaphores_and_increment_clock([-32768], 0)  # the id the kernel holds is unknown
    sm.next_semaphore_id[0] = 32767
    with pytest.raises(OverflowError, match="Python integer 32768 out of bounds for int16"):
        sem_ids(ipc, 0, 0, 2)


@pytest.mark.rule("SEM-1")
def test_d6_semaphores_are_never_freed_and_run_scoped_gets_fresh_ids_each_time(interp):
    sm, ipc = interp()
    first = sem_ids(ipc, 0, 0, 2)  # a run_scoped allocation ...
    second = sem_ids(ipc, 0, 0, 2)  # ... and the same one in the next loop iteration
    assert (first, second) == ([2000, 2001], [2002, 2003])
    assert sorted(sm.sem) == [2000, 2001, 2002, 2003]
    assert not hasattr(ipc, "_deallocate_semaphores")


@pytest.mark.rule("SEM-3", "ERR-1")
def test_d7_an_id_in_both_tables_is_an_error_only_when_looked_up(interp):
    sm, ipc = interp()
    (sid,) = sem_ids(ipc, 0, 0, 1)
    (held,), _ = sm.get_semaphores_and_increment_clock([sid], 0)  # e.g. a wait that already began
    _, barrier = ipc.get_barrier_semaphore(TOP, 0, sid)  # no error here
    assert int(barrier) == sid
    with pytest.raises(ValueError, match=f"Semaphore {sid} occurs as both fixed-id and internal."):
        sm.get_semaphores_and_increment_clock([sid], 0)
    held.signal(1, 0, None)  # the object looked up before still works
    held.wait(1, 0)


@pytest.mark.rule("ERR-7")
def test_d8_only_get_barrier_semaphore_escapes_failure_propagation(interp):
    sm, ipc = interp()
    assert not hasattr(ipc.get_barrier_semaphore, "__wrapped__")
    for name in ("_allocate_semaphores", "_allocate_buffer", "semaphore_signal", "semaphore_wait", "dma_start"):
        assert hasattr(getattr(ipc, name), "__wrapped__"), name
    with pytest.raises(OverflowError):
        ipc.get_barrier_semaphore(TOP, 0, 40000)
    assert sm._failure is None  # nobody else learns of it
    assert 40000 in sm.fixed_id_sem  # and the semaphore was created before the error


@pytest.mark.rule("EXIT-1")
def test_d9_the_exit_check_prints_and_the_kernel_succeeds(interp, capsys):
    sm, ipc = interp()
    (sid,) = sem_ids(ipc, 0, 0, 1)
    sm.sem[sid].signal(3, 0, None)
    assert ipc._validate(TOP, 0) == TOP
    assert capsys.readouterr().out == f"Semaphore {sid} has non-zero count for 0 (global core 0) at kernel exit: 3\n"


@pytest.mark.filterwarnings("ignore:overflow encountered")
def test_d10_counts_are_int32_and_wrap(interp):
    sm, ipc = interp()
    (sid,) = sem_ids(ipc, 0, 0, 1)
    s = sm.sem[sid]
    s.signal(2**31 - 1, 0, None)
    s.signal(2, 0, None)
    assert int(s.read(0)) == -(2**31) + 1
    with pytest.raises(OverflowError, match="out of bounds for int32"):
        s.signal(2**31, 0, None)


@pytest.mark.rule("SIG-1")
def test_d11_signal_targets_are_not_checked(interp):
    sm, ipc = interp(num_devices=2, cores_per_device=2)
    (sid,) = sem_ids(ipc, 0, None, 1)
    sem_ids(ipc, 1, None, 1)
    ipc.semaphore_signal(TOP, 0, 0, sid, 1, None, 2)  # core_index 2 on a 2-core device
    ipc.semaphore_signal(TOP, 0, 0, sid, 1, -1, 1)  # device -1
    assert sm.sem[sid].count_by_core.tolist() == [0, 0, 1, 1]  # device 1 core 0, and the last core
    with pytest.raises(IndexError, match="index 4 is out of bounds for axis 0 with size 4"):
        ipc.semaphore_signal.__wrapped__(TOP, 0, 0, sid, 1, 2, 0)  # unwrapped: no clean-up barrier wait


@pytest.mark.rule("LAUNCH-3", "ERR-10")
def test_d12_semaphore_read_cannot_be_interpreted():
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def kernel(o_ref, sem):
        pl.semaphore_signal(sem, 1)
        @pl.when(pl.program_id(0) == 5)  # a branch no step takes is compiled too
        def _():
            o_ref[0] = pl.semaphore_read(sem)
        pl.semaphore_wait(sem, 1)

    f = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((1,), jnp.int32),
        grid=(2,),
        out_specs=pl.BlockSpec(memory_space=pltpu.SMEM),
        scratch_shapes=[pltpu.SemaphoreType.REGULAR],
        interpret=pltpu.InterpretParams(),
    )
    with pytest.raises(NotImplementedError, match="semaphore_read") as raised:
        f()

    # semcheck's side (LAUNCH-3): the program models the hardware read and carries the compile's failure,
    # which the interpreter modes report as it was just raised, at the read's line
    from semcheck.checker.frontend.lower import lower_kernel
    from semcheck.checker.frontend.trace import trace_kernels
    from semcheck.checker.properties.registry import BY_ID

    (call,) = trace_kernels(f, ())
    program = lower_kernel(call)
    failure = program.launch_failure
    assert (failure.python_type, failure.message) == ("NotImplementedError", str(raised.value))
    line = kernel.__code__.co_firstlineno + 4
    for mode in ("eager", "on_wait"):
        v = decide("deadlock-free", program, mode)  # the interpreter's limitation, not a deadlock (REP-21)
        assert v.verdict == "unrunnable" and str(raised.value) in v.reason
        assert v.stats["raises"].endswith(f":{line}"), v.stats  # the read's line
        race = decide("race-free", program, mode)  # nothing of it is decided in this mode (REP-21)
        assert race.verdict == "unrunnable" and "interpret mode cannot run this kernel" in race.reason
    assert all(decide(p, program, "hardware").verdict == "proved" for p in BY_ID)


@pytest.mark.rule("LAUNCH-3", "ERR-10")
def test_d12_a_masked_load_cannot_be_interpreted():
    """jax's interpreter refuses a load with a mask while it translates the kernel (a masked store it runs,
    ERR-28): interpret mode cannot run the kernel, which a TPU runs (the load reads the mask's elements)."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def kernel(x_ref, o_ref):
        mask = jnp.broadcast_to(jnp.arange(8)[:, None] < 4, (8, 128))
        o_ref[...] = pltpu.load(x_ref, mask=mask)

    f = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                       interpret=pltpu.InterpretParams())
    x = jnp.ones((8, 128), jnp.float32)
    with pytest.raises(NotImplementedError, match="masked load_p") as raised:
        f(x)

    from semcheck.checker.frontend.lower import lower_kernel
    from semcheck.checker.frontend.trace import trace_kernels
    from semcheck.checker.properties.registry import BY_ID

    (call,) = trace_kernels(f, (x,))
    program = lower_kernel(call)
    failure = program.launch_failure
    assert (failure.python_type, failure.message) == ("NotImplementedError", str(raised.value))
    line = kernel.__code__.co_firstlineno + 2
    for mode in ("eager", "on_wait"):
        v = decide("deadlock-free", program, mode)
        assert v.verdict == "unrunnable" and "refuses a load with a mask" in v.reason, v.reason
        assert v.stats["raises"].endswith(f":{line}"), v.stats
    assert all(decide(p, program, "hardware").verdict == "proved" for p in BY_ID)


@pytest.mark.rule("ERR-54", "LAUNCH-3", "ERR-56")
@pytest.mark.parametrize("access,space", [("load", "ANY"), ("store", "ANY"), ("load", "HBM")])
def test_d12_a_load_or_store_of_an_hbm_ref_cannot_be_interpreted(access, space):
    """jax's interpreter refuses a load or store of a ref in HBM or ANY while it translates the kernel, in a
    branch no core takes too: every interpreted run raises before any core starts (a false `proved` before).
    Under `hardware` every property is unknown, at the access's line (ERR-56: proved before)."""
    import dataclasses

    from semcheck.checker.frontend.api import load
    from semcheck.checker.properties.per_mode_values import split_modes
    from semcheck.checker.properties.registry import BY_ID

    from . import hbm_access

    target = f"{access}_{space.lower()}"
    f, (x,) = getattr(hbm_access, target)(1)
    with pytest.raises(ValueError, match="HBM or ANY cannot be referenced directly") as raised:
        f(x)

    (k,) = load(hbm_access.__file__, entry=target, devices=1)
    program = k.program
    failure = program.launch_failure
    assert failure is not None and (failure.python_type, failure.message) == ("ValueError", str(raised.value))
    line = hbm_access.kernel(access).__code__.co_firstlineno + (7 if access == "load" else 9)
    for mode in ("eager", "on_wait"):
        for prop in BY_ID:
            v = decide(prop, program, mode)
            assert v.verdict == "unrunnable" and "in HBM or ANY" in v.reason, (prop, v.reason)
        assert v.stats["raises"].endswith(f":{line}"), v.stats

    @dataclasses.dataclass
    class Request:
        modes: tuple
        properties: tuple

    def decided(p, req):
        return {m: ([decide(prop, p, m) for prop in req.properties], 0.0) for m in req.modes}

    done = split_modes(k, Request(("eager", "on_wait", "hardware"), tuple(BY_ID)), decided)
    assert {v.verdict for m in ("eager", "on_wait") for v in done[m][0]} == {"unrunnable"}
    assert len(done["hardware"][0]) == len(BY_ID)
    for v in done["hardware"][0]:
        assert v.verdict == "unknown" and v.stats["rule"] == "ERR-56", v
        assert f"hbm_access.py:{line}" in v.reason and "ERR-56" in v.reason and "VMEM" in v.reason, v.reason


@pytest.mark.rule("ERR-61", "LAUNCH-3")
@pytest.mark.parametrize("target", ["hbm_scratch", "any_scratch", "core_map_hbm_scratch"])
def test_a_scratch_operand_in_hbm_is_an_interpreter_launch_failure(target):
    """jax's interpreter allocates a kernel argument in HBM only for an input or an output: a scratch operand in HBM
    or ANY (of a pallas_call or a core_map) fails its assertion while the call is lowered, before any device runs,
    in both modes (every property was proved there before). `hardware` is decided as before (every property proved:
    the copies through the scratch buffer are waited for)."""
    from semcheck.checker.frontend.api import load
    from semcheck.checker.properties.registry import BY_ID

    from . import hbm_access

    for mode in ("eager", "on_wait"):
        f, (x,) = getattr(hbm_access, target)(1, dma_mode=mode)
        with pytest.raises(AssertionError):
            f(x)

    (k,) = load(hbm_access.__file__, entry=target, devices=1)
    failure = k.program.launch_failure
    assert failure is not None and (failure.python_type, failure.message) == ("AssertionError", "")
    for mode in ("eager", "on_wait"):
        for prop in BY_ID:
            v = decide(prop, k.program, mode)
            assert v.verdict == "unrunnable" and "ERR-61" in v.reason and "'staging'" in v.reason, (prop, v.reason)
            assert v.stats["rule"] == "ERR-61" and "AssertionError:" not in v.reason, v
    hardware = k.hardware if k.hardware is not None else k.program
    assert {decide(p, hardware, "hardware").verdict for p in BY_ID} == {"proved"}


@pytest.mark.rule("ERR-56")
def test_d12_a_program_whose_call_stores_to_an_hbm_ref_is_unknown_under_hardware():
    """Two calls that hand a copy's semaphore on are checked as one program; the second stores to its ANY input
    in a branch no core takes: under hardware every property is unknown at that line (proved before)."""
    import json
    import sys
    from pathlib import Path

    from . import hbm_access

    root = Path(__file__).resolve().parents[2]
    sys.path.insert(0, str(root / "tests"))
    from cli._support import semcheck

    run = semcheck("verify", "tests/differential/hbm_access.py", "--entry", "handed_on", "--devices", "1",
                   "--dma-mode", "hardware", "--format", "json", "--no-cache", "--no-config", cwd=root, timeout=900)
    rows = json.loads(run.stdout)["results"]
    line = hbm_access._done.__code__.co_firstlineno + 6
    assert len(rows) == 8, run.stderr[-2000:]
    for r in rows:
        assert r["verdict"] == "unknown" and r["stats"]["rule"] == "ERR-56", r
        assert f"hbm_access.py:{line}" in r["reason"], r["reason"]


@pytest.mark.rule("LAUNCH-3")
@pytest.mark.parametrize("target,never_run", [("jitted", [0, 1]), ("separate_read_first", [0, 1]),
                                              ("separate_read_last", [1])])
def test_d12_a_kernel_compiled_with_or_called_after_one_that_cannot_be_compiled_never_runs(target, never_run):
    import jax

    from semcheck.checker.frontend.api import load

    from . import compile_units

    fn, args = getattr(compile_units, target)(1)
    compile_units.RAN.clear()
    with pytest.raises(NotImplementedError, match="semaphore_read"):
        jax.block_until_ready(fn(*args))
    ran = [0] if compile_units.RAN else []  # only separate_read_last's first kernel records its output
    if ran:
        np.testing.assert_allclose(compile_units.RAN[0], np.asarray(args[0]) + 1.0)
    assert sorted(set(range(2)) - set(ran)) == never_run

    kernels = load(compile_units.__file__, entry=target, devices=1)
    failing = [k.index for k in kernels if k.program.launch_failure is not None]
    assert failing == never_run
    assert all("semaphore_read" in k.program.launch_failure.message for k in kernels if k.index in failing)


@pytest.mark.rule("LAUNCH-3")
def test_d12_only_a_read_pallas_drops_is_not_compiled():
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    from semcheck.checker.frontend.lower import lower_kernel
    from semcheck.checker.frontend.trace import trace_kernels

    def unused(o_ref, sem):
        pl.semaphore_signal(sem, 1)
        n = pl.semaphore_read(sem) + 1  # noqa: F841 (pallas drops it when it traces the kernel)
        o_ref[0] = 1
        pl.semaphore_wait(sem, 1)

    def delayed(o_ref, sem):
        pl.semaphore_signal(sem, 1)
        pl.delay(pl.semaphore_read(sem))  # the interpreter gives delay nothing, yet compiles the read
        o_ref[0] = 1
        pl.semaphore_wait(sem, 1)

    def call(kernel):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((1,), jnp.int32),
                              out_specs=pl.BlockSpec(memory_space=pltpu.SMEM),
                              scratch_shapes=[pltpu.SemaphoreType.REGULAR], interpret=pltpu.InterpretParams())

    f = call(unused)
    assert int(f()[0]) == 1
    (kc,) = trace_kernels(f, ())
    assert "semaphore_read" not in str(kc.jaxpr) and lower_kernel(kc).launch_failure is None
    f = call(delayed)
    with pytest.raises(NotImplementedError, match="semaphore_read") as raised:
        f()
    (kc,) = trace_kernels(f, ())
    assert lower_kernel(kc).launch_failure.message == str(raised.value)


def test_d13_with_race_detection_a_wait_for_nothing_on_an_unsignalled_semaphore_fails(interp):
    sm, ipc = interp(detect_races=True)
    (sid,) = sem_ids(ipc, 0, 0, 1)
    with pytest.raises(AssertionError):
        sm.sem[sid].wait(0, 0)


def test_d14_a_deadlocked_wait_polls_forever_until_the_run_is_failed(interp):
    sm, ipc = interp()
    (sid,) = sem_ids(ipc, 0, 0, 1)
    box = {}

    def waiter():
        try:
            sm.sem[sid].wait(1, 0)
        except RuntimeError as e:
            box["error"] = str(e)

    t = threading.Thread(target=waiter, daemon=True)
    t.start()
    t.join(0.3)
    assert t.is_alive()  # no timeout, no deadlock detection
    sm.set_failed(RuntimeError("stop"), top_level=False)
    t.join(2)
    assert not t.is_alive() and box["error"].startswith("Computation failed with exception:")


# --- buffers ------------------------------------------------------------------------------


@pytest.mark.rule("BUF-5b")
def test_d15_a_store_into_the_padding_is_accepted_and_dropped(interp):
    sm, ipc = interp(uninitialized_memory="nan")
    _, bid = ipc._allocate_buffer(TOP, 0, 0, vmem(), np.ones(3, np.float32), padded_shape=(8,))
    key = ("vmem", int(bid), 0, 0)
    ok, _, _ = sm.store_buffer_content(key, (slice(0, 8, 1),), np.zeros(8, np.float32), (0, 0))
    assert ok
    got, _, _ = sm.get_buffer_content(key, (slice(0, 8, 1),), (0, 0))
    np.testing.assert_array_equal(got[:3], [0, 0, 0])
    assert np.isnan(got[3:]).all()  # the padding kept its uninitialized value, and reading it is no error


@pytest.mark.rule("BUF-7")
def test_d16_a_masked_swap_checks_bounds_along_the_first_axis_only(interp):
    sm, ipc = interp()
    key = ("vmem", 300, 0, 0)
    sm.allocate_buffer(key, 1, np.arange(8, dtype=np.int32).reshape(2, 4))
    mask = np.zeros((2, 4), bool)
    mask[0, 3] = True  # column 5 of a 4-column buffer: out of bounds
    rng = (slice(0, 2, 1), slice(2, 6, 1))
    old, _, _ = sm.swap_buffer_content(key, rng, np.full((2, 4), -1, np.int32), mask, (0, 0))
    assert old is not None  # accepted; the masked-on element outside the buffer is dropped
    inside = np.zeros((4, 4), bool)
    inside[3, 0] = True  # row 3 column 0 of a 4x2 buffer: in bounds
    sm.allocate_buffer(("vmem", 301, 0, 0), 1, np.zeros((4, 2), np.int32))
    rng = (slice(0, 4, 1), slice(0, 4, 1))
    old, _, _ = sm.swap_buffer_content(("vmem", 301, 0, 0), rng, np.ones((4, 4), np.int32), inside, (0, 0))
    assert old is None  # refused


@pytest.mark.rule("BUF-9")
def test_d17_an_hbm_run_scoped_buffer_of_one_core_is_never_freed_and_is_reused_by_id(interp):
    sm, ipc = interp(num_devices=1, cores_per_device=2)
    _, bid = ipc._allocate_buffer(TOP, 0, 1, hbm(), np.full(2, 5, np.int32))  # core 1 only
    ipc._deallocate_buffer(TOP, 0, 1, hbm(), int(bid))
    key = ("hbm", int(bid), 0, 0)
    assert sm.mem[key].ref_count == 1  # still allocated after its scope ended
    _, again = ipc._allocate_buffer(TOP, 0, 0, hbm(), np.zeros(2, np.int32))  # core 0, same id
    assert int(again) == int(bid)
    np.testing.assert_array_equal(sm.mem[key].content, [5, 5])  # gets core 1's old buffer


@pytest.mark.rule("BUF-8", "IDS-2")
def test_d18_a_handed_buffer_id_past_int16_overflows(interp):
    sm, ipc = interp()
    sm.next_buffer_id[(0, 0)] = 2**15
    with pytest.raises(OverflowError, match="Python integer 32768 out of bounds for int16"):
        ipc._allocate_buffer(TOP, 0, 0, vmem(), np.zeros(1, np.int32))


@pytest.mark.rule("SEM-8")
def test_d19_the_exit_query_reports_fixed_and_internal_semaphores_by_bare_id(interp):
    sm, ipc = interp()
    (sid,) = sem_ids(ipc, 0, 0, 1)
    sm.guarantee_semaphore_with_fixed_id(sid)
    sm.sem[sid].signal(1, 0, None)
    sm.fixed_id_sem[sid].signal(2, 0, None)
    found = sm.get_sempahores_with_nonzero_count(0)
    assert sorted((s.id, int(s.count_by_core[c])) for s, c in found) == [(sid, 1), (sid, 2)]


# --- DMAs and semaphore types --------------------------------------------------------------------


@pytest.mark.rule("DMA-1", "DMA-6")
def test_d20_a_dma_signalling_a_regular_semaphore_adds_its_byte_count(capfd):
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def kernel(x_ref, o_ref, sem):
        pltpu.make_async_copy(x_ref, o_ref, sem).start()
        pl.semaphore_wait(sem, 1)  # what a TPU v6+ kernel waits for: one completed copy

    f = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.SemaphoreType.REGULAR],
        interpret=pltpu.InterpretParams(),
    )
    out = f(jnp.ones((8, 128), jnp.float32))
    assert float(out[0, 0]) == 1.0
    assert "non-zero count for 0 (global core 0) at kernel exit: 4095" in capfd.readouterr().out

    # semcheck's side (DMA-6): its front end keeps the REGULAR type, its interpreter modes add the
    # bytes as jax just did, and its hardware mode adds 1: the same kernel balances there
    from semcheck.checker.frontend.trace import trace_kernels
    from semcheck.checker.frontend.lower import lower_kernel
    from semcheck.model import DmaStart, fast_run

    (call,) = trace_kernels(f, (jax.ShapeDtypeStruct((8, 128), jnp.float32),))
    program = lower_kernel(call)
    (copy,) = [op for op in program.cores[0] if isinstance(op, DmaStart)]
    assert (copy.dst_sem_type, copy.nbytes) == ("regular", 4096)
    for mode in ("eager", "on_wait"):
        assert [w.nonzero[0][2] for w in fast_run(program, mode).state.warnings] == [4095]
    hw = fast_run(program, "hardware")
    assert hw.kind == "completed" and not hw.state.counts and not hw.state.warnings


@pytest.mark.rule("LAUNCH-2", "ERR-8")
def test_d21_semaphore_outputs_of_a_pallas_call_cannot_be_interpreted():
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def kernel(x_ref, o_ref, sem_out):
        o_ref[...] = x_ref[...]

    f = pl.pallas_call(
        kernel,
        out_shape=(jax.ShapeDtypeStruct((8, 128), jnp.float32), pltpu.SemaphoreType.REGULAR((2,))),
        in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
        out_specs=(pl.BlockSpec(memory_space=pltpu.VMEM), pl.BlockSpec(memory_space=pltpu.SEMAPHORE)),
        interpret=pltpu.InterpretParams(),
    )
    with pytest.raises(NotImplementedError, match="semaphore") as raised:
        f(jnp.ones((8, 128), jnp.float32))

    # semcheck's side (LAUNCH-2): the call is lowered for the hardware, which decides it as usual, and
    # carries the interpreter's failure, which the interpreter modes report as it was just raised
    from semcheck.checker.frontend.lower import lower_kernel
    from semcheck.checker.frontend.trace import trace_kernels
    from semcheck.checker.properties.registry import BY_ID

    (call,) = trace_kernels(f, (jax.ShapeDtypeStruct((8, 128), jnp.float32),))
    program = lower_kernel(call)
    failure = program.launch_failure
    assert (failure.python_type, failure.message) == ("NotImplementedError", str(raised.value))
    for mode in ("eager", "on_wait"):
        v = decide("deadlock-free", program, mode)  # the interpreter's limitation, not a deadlock (REP-21)
        assert v.verdict == "unrunnable" and str(raised.value) in v.reason
        balance = decide("exit-balance", program, mode)  # nothing of it is decided in this mode
        assert balance.verdict == "unrunnable" and "interpret mode cannot run this kernel" in balance.reason
    assert all(decide(p, program, "hardware").verdict == "proved" for p in BY_ID)


def _view_kernels():
    import jax.numpy as jnp

    def load_reshape(x_ref, o_ref):
        o_ref[0:4] = x_ref.reshape(2, 4, 128)[0]

    def store_reshape(x_ref, o_ref):
        o_ref.reshape(2, 4, 128)[...] = x_ref[...].reshape(2, 4, 128)

    def load_bitcast(x_ref, o_ref):
        o_ref[...] = x_ref.bitcast(jnp.int32)[...].astype(jnp.float32)

    return {"load_reshape": (load_reshape, "ReshapeTransform", "load"),
            "store_reshape": (store_reshape, "ReshapeTransform", "store"),
            "load_bitcast": (load_bitcast, "BitcastTransform", "load")}


@pytest.mark.rule("ACC-6", "ERR-9")
@pytest.mark.parametrize("name", ["load_reshape", "store_reshape", "load_bitcast"])
def test_d22_a_load_or_store_through_a_reshape_or_bitcast_view_raises(name):
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    kernel, transform, access = _view_kernels()[name]
    f = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        interpret=pltpu.InterpretParams(),
    )
    message = f"'{transform}' object has no attribute 'indices'"
    with pytest.raises(Exception, match=message) as raised:
        jax.block_until_ready(f(jnp.ones((8, 128), jnp.float32)))
    assert "AttributeError" in str(raised.value)

    # semcheck's side (ACC-6, ERR-9): the access is lowered as a TPU runs it (hardware proves every
    # property) and carries the interpreter's error, which the model raises where a core reaches it:
    # eager and on_wait report deadlock-free at its line and decide every other property
    from semcheck.checker.properties.failing_facts import view_ops
    from semcheck.checker.frontend.lower import lower_kernel
    from semcheck.checker.frontend.trace import trace_kernels
    from semcheck.checker.properties.registry import BY_ID

    (call,) = trace_kernels(f, (jax.ShapeDtypeStruct((8, 128), jnp.float32),))
    program = lower_kernel(call)
    assert program.launch_failure is None
    (op,) = view_ops(program)
    failure = op.view_error
    assert (failure.python_type, failure.message, failure.access) == ("AttributeError", message, access)
    for mode in ("eager", "on_wait"):
        v = decide("deadlock-free", program, mode)
        assert v.verdict == "violated" and message in v.witness.message
        assert v.witness.locs == (op.loc,) and op.loc.line > 0
        # no run reaches the exit (the interpreter prints no exit warning); the rest hold up to the failure
        got = {p: decide(p, program, mode).verdict for p in BY_ID if p != "deadlock-free"}
        assert set(got.values()) <= {"proved", "vacuous"} and got["exit-balance"] == "vacuous", got  # REP-20
    assert all(decide(p, program, "hardware").verdict == "proved" for p in BY_ID)


@pytest.mark.rule("ACC-6", "ERR-9", "ACC-11")
@pytest.mark.parametrize("waited", [True, False])
def test_d22_a_copy_through_a_reshape_view_raises_when_it_runs(waited):
    """A copy through a reshape view raises in the interpreter when the copy runs: under eager at its
    start (ERR-9 in the model's DmaStart rule: every property decided); under on_wait in the wait that
    runs its task (ACC-11: deadlock-free violated at the copy's and the wait's lines, no exit reached),
    and not at all when nothing waits for it (every property decided on the runs, which complete);
    hardware decided as a TPU runs it."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def kernel(x_ref, o_ref, buf, sem):
        copy = pltpu.make_async_copy(x_ref.reshape(2, 4, 128), buf, sem)
        copy.start()
        if waited:
            copy.wait()
        o_ref[...] = x_ref[...]

    def call(mode: str):
        return pl.pallas_call(
            kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
            in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)], out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
            scratch_shapes=[pltpu.VMEM((2, 4, 128), jnp.float32), pltpu.SemaphoreType.DMA],
            interpret=pltpu.InterpretParams(dma_execution_mode=mode))

    message = "'ReshapeTransform' object has no attribute 'indices'"
    for mode in ("eager", "on_wait") if waited else ("eager",):
        with pytest.raises(Exception, match=message):
            jax.block_until_ready(call(mode)(jnp.ones((8, 128), jnp.float32)))
    if not waited:  # under on_wait nothing runs the copy: the kernel completes
        jax.block_until_ready(call("on_wait")(jnp.ones((8, 128), jnp.float32)))

    from semcheck.checker.properties.failing_facts import view_ops
    from semcheck.checker.frontend.lower import lower_kernel
    from semcheck.checker.frontend.trace import trace_kernels
    from semcheck.checker.properties.registry import BY_ID

    (traced,) = trace_kernels(call("eager"), (jax.ShapeDtypeStruct((8, 128), jnp.float32),))
    program = lower_kernel(traced)
    (op,) = view_ops(program)
    assert op.view_error.access == "copy"
    v = decide("deadlock-free", program, "eager")
    assert v.verdict == "violated" and message in v.witness.message and v.witness.locs == (op.loc,)
    assert decide("exit-balance", program, "eager").verdict == "vacuous"  # no run reaches the exit (REP-20)
    on_wait = {p: decide(p, program, "on_wait") for p in BY_ID}
    if waited:  # the wait runs the copy's task, which raises there (the interpreter's run above)
        v = on_wait["deadlock-free"]
        assert v.verdict == "violated" and message in v.witness.message
        assert [loc.text for loc in v.witness.locs] == ["copy.start()", "copy.wait()"]
        assert v.witness.details["rule"] == "ACC-11" and v.witness.details["side"] == "source"
        assert on_wait["exit-balance"].verdict == "vacuous"  # no run reaches the exit (REP-20)
    else:  # no run runs it: the interpreter completes, and every property is decided on the runs
        assert on_wait["deadlock-free"].verdict == "proved"
        assert "unknown" not in {v.verdict for v in on_wait.values()}
    assert decide("deadlock-free", program, "hardware").verdict == "proved"


@pytest.mark.rule("DR-9")
def test_d23_a_read_after_waiting_for_part_of_a_copy_is_clean_in_the_interpreter():
    import importlib.util
    from pathlib import Path

    import jax
    from jax.experimental.pallas import tpu as pltpu

    from semcheck.checker.frontend.lower import lower_kernel
    from semcheck.checker.frontend.trace import trace_kernels
    from semcheck.checker.properties.registry import BY_ID

    path = Path(__file__).resolve().parents[2] / "examples" / "buggy" / "partial_arrival_read.py"
    spec = importlib.util.spec_from_file_location("d23_partial_arrival_read", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for mode in ("eager", "on_wait"):  # the detector raises on a race (on_race="raise")
        params = pltpu.InterpretParams(dma_execution_mode=mode, detect_races=True)
        fn, args = module.build(1, interpret=params)
        out = jax.block_until_ready(fn(*args))
        np.testing.assert_allclose(np.asarray(out), np.asarray(module.reference(*args, num_devices=1)))
    (call,) = trace_kernels(*module.build(1))
    program = lower_kernel(call)
    race = {m: decide("race-free", program, m).verdict for m in ("eager", "on_wait", "hardware")}
    assert race == {"eager": "proved", "on_wait": "proved", "hardware": "violated"}


@pytest.mark.rule("GRID-3", "ERR-11")
def test_d24_a_grid_that_comes_back_to_an_output_block_raises():
    """Output blocks 0, 1, 0 over a one-core grid: jax's interpreter raises after step 2 in both DMA
    modes (`_check_for_revisiting`); semcheck predicts the same error in both and lowers the kernel as
    a TPU runs it under hardware. Blocks 0, 1 (no return) run."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    from semcheck.checker.properties.failing_facts import view_ops
    from semcheck.checker.frontend.lower import lower_kernel
    from semcheck.checker.frontend.trace import trace_kernels
    from semcheck.checker.properties.registry import BY_ID

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1.0

    def call(mode: str, steps: int):
        return pl.pallas_call(
            kernel, out_shape=jax.ShapeDtypeStruct((16, 128), jnp.float32), grid=(steps,),
            in_specs=[pl.BlockSpec((8, 128), lambda i: (0, 0))],
            out_specs=pl.BlockSpec((8, 128), lambda i: (i % 2, 0)),
            interpret=pltpu.InterpretParams(dma_execution_mode=mode))

    x = jnp.ones((8, 128), jnp.float32)
    message = ("Revisited block (slice(0, 8, 1), slice(0, 128, 1)) of output 0 in iteration (2,). "
               "The block was previously visited in iterations (0,) through (0,) .")
    for mode in ("eager", "on_wait"):
        with pytest.raises(Exception) as raised:
            jax.block_until_ready(call(mode, 3)(x))
        assert "RuntimeError" in str(raised.value) and message in str(raised.value)
        jax.block_until_ready(call(mode, 2)(x))  # no block visited again: it runs

    (kernel_call,) = trace_kernels(call("eager", 3), (x,))
    program = lower_kernel(kernel_call)
    (op,) = view_ops(program)
    assert (op.view_error.python_type, op.view_error.message) == ("RuntimeError", message)
    for mode in ("eager", "on_wait"):
        v = decide("deadlock-free", program, mode)
        assert v.verdict == "violated" and message in v.witness.message
        assert decide("exit-balance", program, mode).verdict == "vacuous"  # no run reaches the exit (REP-20)
    assert {decide(p, program, "hardware").verdict for p in BY_ID} == {"proved"}
    (kernel_call,) = trace_kernels(call("eager", 2), (x,))
    assert not view_ops(lower_kernel(kernel_call))


# --- run_scoped buffers --------------------------------------------------------------------------


@pytest.mark.rule("BUF-13", "BUF-14")
@pytest.mark.parametrize("mode", ["eager", "on_wait"])
def test_d32_a_copy_left_in_flight_past_its_scope_raises_only_where_it_runs_late(interp, mode):
    """A write-back of a scoped buffer started in the scope and waited after it: on_wait runs the copy at
    the wait, after the buffer was deleted, and raises KeyError with its key; eager ran it at the start.
    The model's BUF-14 says the same of the same program, and BUF-13 reports it in both modes."""
    from semcheck.checker.properties.confined import invocation_confined
    from semcheck.model.ops import AllocBuffer, AllocSem, DmaStart, ExitCheck, FreeBuffer, Program, Region, SemRef
    from semcheck.model.ops import Topology, Wait
    from semcheck.model.scope import interpreter_raises, scope_touches

    sm, ipc = interp(dma_execution_mode=mode)
    sm.allocate_buffer(("hbm", 300, 0, 0), 1, np.zeros(2, np.int32))
    (sid,) = sem_ids(ipc, 0, 0, 1)
    _, bid = ipc._allocate_buffer(TOP, 0, 0, vmem(), np.array([3, 4], np.int32))  # the scope's entry
    ipc.dma_start(TOP, 0, 0, vmem(), int(bid), (), hbm(), 300, (), sid, None, None, None)
    ipc._deallocate_buffer(TOP, 0, 0, vmem(), int(bid))  # the scope's end
    raised = None
    try:
        ipc.dma_wait(TOP, 0, 0, sid, 8)
    except Exception as e:  # fail_on_exception re-raises the callback's error
        raised = e
    while raised is not None and not isinstance(raised, KeyError) and raised.__cause__ is not None:
        raised = raised.__cause__
    key = ("vmem", int(bid), 0, 0)
    if mode == "on_wait":
        assert isinstance(raised, KeyError) and raised.args == (key,)
    else:
        assert raised is None
        np.testing.assert_array_equal(sm.mem[("hbm", 300, 0, 0)].content, [3, 4])

    box = Region(((0, 2),))
    ops = (AllocBuffer("hbm0", 0, "hbm", "device"), AllocSem("s", 1, "s", "device"),
           AllocBuffer("buf@k.py:1#0/1", 8, "vmem", "core"),
           DmaStart(SemRef("s"), 8, src_buf="buf@k.py:1#0/1", src_region=box, dst_buf="hbm0", dst_region=box),
           FreeBuffer("buf@k.py:1#0/1"), Wait(SemRef("s"), 8, "dma"), ExitCheck(0))
    program = Program(Topology(1), (ops,))
    (touch,) = scope_touches(program)
    assert interpreter_raises(program, touch, mode) is (mode == "on_wait")
    assert invocation_confined(program, mode).verdict == "violated"
