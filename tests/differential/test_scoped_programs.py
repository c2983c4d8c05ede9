"""run_scoped lifetimes on jax's real manager (BUF-13, BUF-14): generated scope programs, one thread per core.

Each device runs one to three scopes of a `run_scoped` buffer in a loop: a local write-back of the buffer
waited inside the scope, after it or never, or (two devices) a copy into the neighbour's scoped buffer
with its receipt waited inside or after, with a handshake on the barrier semaphore before the scope,
inside it or none. jax's manager, driven as the interpreter drives it, must show an outcome the model's
explorer allows, a `KeyError(('vmem', id, device, core))` included (the model raises where jax does);
and where the run raised there, the checker's prediction (BUF-14's `interpreter_failure`) must have
said a run can.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from semcheck.model.launch import Scratch, launch
from semcheck.model.ops import (
    BARRIER,
    AllocBuffer,
    DmaStart,
    FreeBuffer,
    GetBarrierSem,
    Program,
    SemRef,
    Signal,
    Topology,
    Wait,
)

from ._support import LONG
from .threaded import check_against_model, run_on_jax

pytestmark = pytest.mark.jax

OUT, IN, TOKEN = SemRef("out"), SemRef("in"), SemRef(BARRIER)
SIZE = 8  # bytes: the scoped buffer's and every copy's, so the harness's buffers match the copies


def _buf(k: int) -> str:
    return f"buf@gen.py:1#0/{k}"


@st.composite
def scope_programs(draw) -> Program:
    devices = draw(st.integers(1, 2))
    remote = devices == 2 and draw(st.booleans())
    shake = draw(st.sampled_from(["none", "before", "inside"])) if remote else "none"
    steps = draw(st.integers(1, 3 if devices == 1 else 2))
    bodies, words = [], []
    for d in range(devices):
        ops: list = [GetBarrierSem()] if shake != "none" else []
        owed: list = []  # waits left for after the scope
        for k in range(1, steps + 1):
            handshake = [Signal(TOKEN, 1, device=1 - d), Wait(TOKEN, 1)] if shake != "none" else []
            ops += handshake if shake == "before" else []
            ops.append(AllocBuffer(_buf(k), SIZE, "vmem", "core"))
            ops += handshake if shake == "inside" else []
            if remote:
                ops += [DmaStart(IN, SIZE, src_sem=OUT, device=1 - d, src_buf="hbm0", dst_buf=_buf(k)),
                        Wait(OUT, SIZE, "dma")]
                where = draw(st.sampled_from(["inside", "after"]))
                wait = Wait(IN, SIZE, "dma")
            else:
                ops.append(DmaStart(OUT, SIZE, src_buf=_buf(k), dst_buf="hbm1"))
                where = draw(st.sampled_from(["inside", "after", "never"]))
                wait = Wait(OUT, SIZE, "dma")
            words.append(f"d{d} scope {k}: {'remote' if remote else 'local'} copy waited {where}")
            ops += [wait] if where == "inside" else []
            ops.append(FreeBuffer(_buf(k)))
            ops += owed
            owed = [wait] if where == "after" else []
        bodies.append(ops + owed)
    name = f"{devices} device(s), handshake {shake}: " + "; ".join(words)
    # the launch's HBM operands hbm0, hbm1, its scratch semaphores, its exit check and clean-up barrier
    return launch(Topology(devices), bodies, collective_id=0 if shake != "none" else None, hbm_buffers=2,
                  scratch=[Scratch("out"), Scratch("in")], name=name)


def _agree(program: Program, mode: str) -> str:
    from semcheck.checker.properties.confined_scopes import interpreter_failure, scope_verdict

    real = run_on_jax(program, mode)
    ok, why = check_against_model(program, mode, real)
    assert ok, f"{program.name} ({mode}):\n{why}"
    got = real.observation
    if got.kind == "error" and got.error[0] == "KeyError":
        assert got.error[1].startswith("('vmem', ")
        assert interpreter_failure(scope_verdict(program, mode), mode) is not None, program.name
    return got.kind


_SETTINGS = settings(max_examples=200 if LONG else 12, deadline=None, derandomize=not LONG,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.mark.rule("BUF-14")
@_SETTINGS
@given(program=scope_programs(), mode=st.sampled_from(["eager", "on_wait"]))
def test_generated_scope_programs_raise_on_jax_as_the_model_says(program, mode):
    note(program.name)
    _agree(program, mode)


@pytest.mark.slow
@pytest.mark.rule("BUF-14")
@settings(_SETTINGS, max_examples=300, derandomize=False)
@given(program=scope_programs(), mode=st.sampled_from(["eager", "on_wait"]))
def test_many_generated_scope_programs_raise_on_jax_as_the_model_says(program, mode):
    note(program.name)
    _agree(program, mode)


@pytest.mark.rule("SEM-9")
@pytest.mark.parametrize("mode", ["eager", "on_wait"])
def test_scoped_semaphores_outside_their_scope_on_jax(mode):
    """SEM-9 on jax's manager: a signal that lands before the target entered its scope is counted on the id
    the target then allocates (the run completes); a count left by one execution of a scope site is not
    the next execution's (fresh ids, D6): its wait hangs, where a TPU's one semaphore per site passes."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from test_scope_semaphores import early_signal, stray_count

    assert _agree(early_signal(), mode) == "completed"
    assert _agree(stray_count(), mode) == "deadlock"
