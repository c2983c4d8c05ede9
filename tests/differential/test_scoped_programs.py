"""run_scoped lifetimes on jax's real manager (BUF-13, BUF-14): generated scope programs, one thread per core.

The programs are `tests/strategies.py`'s `scope_programs`. jax's manager, driven as the interpreter drives it, must show an outcome the model's
explorer allows, a `KeyError(('vmem', id, device, core))` included (the model raises where jax does);
and where the run raised there, the checker's prediction (BUF-14's `interpreter_failure`) must have
said a run can.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from semcheck.model.ops import Program
from strategies import scope_programs

from ._support import LONG
from .threaded import check_against_model, run_on_jax

pytestmark = pytest.mark.jax

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
