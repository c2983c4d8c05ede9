"""Named regression tests: every disagreement the differential suite found, kept.

Fixed ones must keep passing. The ones marked `xfail(strict=True)` are
disagreements between jax 0.12 and the kernel-level model (`model/step.py`,
`model/semaphore.py`) that are still open: the day the model is fixed they
start passing, strict xfail turns that into a failure, and the mark must go.
"""

from __future__ import annotations

import numpy as np
import pytest

from semcheck.model import (
    AllocSem,
    GetBarrierSem,
    Scratch,
    SemRef,
    Signal,
    Topology,
    Wait,
    launch,
)

from ._support import load_runner
from .threaded import check_against_model, run_on_jax

pytestmark = pytest.mark.jax

runner = load_runner()
enc = runner.enc_array


def replay(config: dict, steps: list) -> tuple:
    """Apply `steps` to both implementations; assert every result and the final state agree."""
    model, real = runner.make_impl("model", config), runner.make_impl("jax", config)
    results = []
    for op, args in steps:
        want, got = model.apply(op, args), real.apply(op, args)
        assert got == want, f"{op}({args}): model {want}, jax {got}"
        results.append(want)
    assert real.snapshot() == model.snapshot()
    return results, model.snapshot()


# --- found and fixed ------------------------------------------------------------------------


@pytest.mark.rule("BUF-8", "BUF-2")
def test_out_of_step_hbm_allocation_shares_one_array_between_its_keys():
    """Found by the API state machine: the model gave each key its own copy.

    Core 1 allocated a buffer of its own first, so the device-wide HBM
    allocation draws id 100 for core 0 and 101 for core 1: two keys, one array
    (jax does not copy HBM values per core), and a store through one key shows
    through the other. The interpreter then fails its id-consistency assertion.
    """
    cfg = {"num_devices": 1, "cores_per_device": 2}
    steps = [
        ("kernel_allocate_buffer", {"device": 0, "core": 1, "memory_space": "vmem", "value": enc(np.zeros(1, np.int32))}),
        ("kernel_allocate_buffer", {"device": 0, "core": None, "memory_space": "hbm", "value": enc(np.zeros(2, np.int32))}),
        ("store_buffer_content", {"key": ["hbm", 101, 0, 0], "range": [0], "value": enc(np.array(7, np.int32)), "thread": [0, 1]}),
        ("get_buffer_content", {"key": ["hbm", 100, 0, 0], "range": [], "thread": [0, 0]}),
    ]
    results, _ = replay(cfg, steps)
    assert results[1] == {"error": {"type": "AssertionError", "message": ""}}
    assert results[3]["result"]["value"]["data"] == [7, 0]


def test_with_race_detection_a_wait_for_nothing_on_an_unsignalled_semaphore_asserts():
    """Found while writing the runner: jax looks for the vector clock of the last
    signal, finds none and fails an assertion, after having consumed."""
    cfg = {"detect_races": True}
    steps = [
        ("allocate_semaphores", {"key": 0, "n": 1}),
        ("wait", {"sem": ["internal", 2000], "core": 0, "value": -2}),
        ("read", {"sem": ["internal", 2000], "core": 0}),
    ]
    results, _ = replay(cfg, steps)
    assert results[1] == {"error": {"type": "AssertionError", "message": ""}}
    assert results[2] == {"result": 2}  # the wait consumed (-2) before failing


def test_without_race_detection_a_wait_for_nothing_returns():
    replay({"detect_races": False}, [("allocate_semaphores", {"key": 0, "n": 1}), ("wait", {"sem": ["internal", 2000], "core": 0, "value": 0})])


@pytest.mark.rule("ERR-3")
def test_a_slow_allocation_is_not_mistaken_for_a_hang():
    """The threaded harness once called a run hung after a quiet second while two
    devices were still allocating 30,769 semaphores each; busy threads now
    postpone the verdict. Both devices overflow int16 and fail alone."""
    program = launch(
        Topology(2, 1),
        [(Wait(SemRef("s"), 1),), (Wait(SemRef("s"), 1),)],
        scratch=[Scratch("big", 30767), Scratch("s", 2)],
        name="slow allocation",
    )
    real = run_on_jax(program, "eager")
    ok, why = check_against_model(program, "eager", real)
    assert ok, why
    assert real.observation.error == ("OverflowError", "Python integer 32768 out of bounds for int16")
    assert not real.observation.hangs


@pytest.mark.rule("ERR-7", "ERR-3")
def test_an_allocation_overflow_on_one_device_stops_the_others():
    """Found by the threaded harness; fixed in the model (4ed108b): ERR-7 treated
    allocation errors as unpropagated on single-core devices, but jax 0.12 wraps
    _allocate_semaphores and _allocate_buffer in its failure propagation, so the
    failure reaches the other devices and nothing hangs."""
    bodies = [
        (AllocSem("big", 30767, "big"), AllocSem("x", 2, "x"), Signal(SemRef("s"), 1, device=1)),
        (Wait(SemRef("s"), 1),),
    ]
    program = launch(Topology(2, 1), bodies, scratch=[Scratch("s", 1)], name="allocation overflow on one device")
    real = run_on_jax(program, "eager")
    assert not real.observation.hangs
    ok, why = check_against_model(program, "eager", real)
    assert ok, why


@pytest.mark.parametrize(
    "target",
    [{"device": 2}, {"core": 2}],
    ids=["device past the last: numpy IndexError", "core past the device: another device's core"],
)
@pytest.mark.rule("SIG-1", "ERR-4")
def test_a_signal_outside_the_topology_behaves_as_in_jax(target):
    """Found by a targeted threaded run; fixed in the model (2256f46): ERR-4 reported
    BadTarget where jax computes device * cores_per_device + core unchecked (past
    the last core numpy raises IndexError; a core index past cores_per_device
    lands on another device's core)."""
    topo = Topology(2, 2) if "core" in target else Topology(2, 1)
    bodies = [(Signal(SemRef("s"), 1, **target),)] + [()] * (topo.num_cores - 1)
    program = launch(topo, bodies, scratch=[Scratch("s", 1)], name=f"signal to {target}")
    ok, why = check_against_model(program, "eager", run_on_jax(program, "eager"))
    assert ok, why


# --- open: the kernel-level model disagrees with jax 0.12 --------------------------------


@pytest.mark.xfail(
    strict=True,
    reason="model ERR-7 treats any failure on a multi-core device as global; get_barrier_semaphore is not "
    "wrapped, and the interpreter's thread map reports a core's exception only after every core of the "
    "device ended, so a core waiting on the failed one hangs the run",
)
def test_an_unpropagated_failure_on_a_multicore_device_leaves_its_other_core_hanging():
    bodies = [(Wait(SemRef("s"), 1),), (GetBarrierSem(), Signal(SemRef("s"), 1, core=0))]
    program = launch(Topology(1, 2), bodies, collective_id=40000, scratch=[Scratch("s", 1)], name="barrier id overflow")
    real = run_on_jax(program, "eager")
    assert real.observation.hangs
    ok, why = check_against_model(program, "eager", real)
    assert ok, why


@pytest.mark.xfail(
    strict=True,
    reason="model SEM-4 counts with unbounded integers; jax keeps counts in int32 and wraps on overflow",
)
@pytest.mark.filterwarnings("ignore:overflow encountered")
def test_semaphore_counts_wrap_at_int32():
    replay(
        {},
        [
            ("allocate_semaphores", {"key": 0, "n": 1}),
            ("signal", {"sem": ["internal", 2000], "core": 0, "inc": 2**31 - 1}),
            ("signal", {"sem": ["internal", 2000], "core": 0, "inc": 2**31 - 1}),
            ("read", {"sem": ["internal", 2000], "core": 0}),
        ],
    )
