"""Waits that may fail the race detector's clock assertion (RACE-1, specs/semantics/buffers.md; ERR-21).

With `detect_races` a wait that finishes takes its counter's clock, and a counter no signal ever reached
has none. Without a wait for 0 or less every count is raised by signals alone, so a wait that finishes
has met one: a program with no such wait, or that does not keep clocks, has no RACE-1 failure and its
runs are those every engine follows. Otherwise the model's runs apply RACE-1 (the step relation and the fast run call it) and the
failing-runs machinery explores every schedule (`failing_runs.scope_failure_verdict`), as for BUF-14.
"""

from __future__ import annotations

from semcheck.model.clocks import keeps_clocks
from semcheck.model.errors import UnclockedWait
from semcheck.model.ops import DmaMode, Wait
from semcheck.model.state import Outcome
from semcheck.model.symmetric import class_cores

HINT = ("skip a copy or wait of 0 (pl.when on its size) or signal its semaphore first: with detect_races=True "
        "jax's interpreter fails an assertion at a wait on a semaphore no signal has reached; "
        "--dma-mode hardware checks the kernel as a TPU runs it")

WHY = ("with race detection (InterpretParams(detect_races=True)) jax's interpreter gives every semaphore a "
       "clock when a signal reaches it and a finished wait takes it: on a semaphore no signal has reached "
       "there is none, and the wait fails the manager's assertion (specs/semantics/buffers.md RACE-1, "
       "specs/semantics/divergences.md D34)")


def clock_risk(program, mode: DmaMode) -> str | None:
    """ERR-21: why a run of `program` under `mode` may fail RACE-1's assertion, naming the first wait for 0
    or less (it finishes without a signal, and one for less than 0 raises its count for a later wait);
    None when the mode keeps no clocks or no wait can finish without a signal."""
    if not keeps_clocks(getattr(program, "detect_races", False), mode):
        return None
    for ops in class_cores(program):
        for op in ops:
            if type(op) is Wait and op.value <= 0:
                return (f"with race detection the {op.describe()} at {op.loc} (or a wait after it) may finish on "
                        "a semaphore no signal has reached, where jax's interpreter fails an assertion (RACE-1)")
    return None


def unreached_copies(real: Outcome, err: UnclockedWait) -> tuple:
    """RACE-1: the started copies of the failing run that would have signalled the wait's counter, none of
    whose halves for it ran (an on_wait copy whose wait needed no task)."""
    at = (err.key, err.core)
    return tuple(d for d in real.state.dmas if (d.dst_key, d.dst_core) == at or (d.src_key, d.src_core) == at)
