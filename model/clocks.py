"""The race detector's clocks on semaphores (rules RACE-1, RACE-2, specs/semantics/buffers.md).

With `detect_races` the interpreter's manager keeps a vector clock per counter, left there by every
signal (a plain one, of any amount, or a half of a copy), and a wait that finishes takes it. A
counter no signal ever reached has none, and the wait fails the manager's assertion. Every engine
that runs waits asks these functions: the manager level (`manager.wait`), the step relation
(`step.rule_wait`) and the fast run (`fast.fast_run`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from semcheck.model.errors import UnclockedWait
from semcheck.model.semaphore import SemKey


def keeps_clocks(detect_races: bool, mode: str) -> bool:
    """RACE-2 (RACE-1's clocks): whether a run keeps the race detector's clocks: with `detect_races`, under an interpreter
    mode (a TPU has no clocks, D34)."""
    return detect_races and mode != "hardware"


def reached(signals: Iterable[tuple], copies: Iterable[tuple[int, Any]], key: SemKey, core: int) -> bool:
    """RACE-1: whether a signal ever reached counter (`key`, `core`): a plain one (`signals`, the
    counters plain signals reached) or a half of a copy that ran (`copies`: (phase, fields) of each
    started copy; its read half signals the send semaphore on the source core, its write half the
    receive semaphore on the destination core)."""
    if (key, core) in signals:
        return True
    return any((phase >= 1 and d.src_key == key and d.src_core == core)
               or (phase == 2 and d.dst_key == key and d.dst_core == core) for phase, d in copies)


def finished_wait(keeps: bool, key: SemKey, core: int, was_reached: Callable[[], bool]) -> UnclockedWait | None:
    """RACE-1: what a wait on (`key`, `core`) that has just consumed its count raises: the assertion when
    clocks are kept and no signal ever reached the counter (`was_reached`), else None.

    Any wait can: a wait for a negative value raises its count (SEM-5 subtracts it), so a later wait for
    more than 0 may finish on a counter no signal reached."""
    if not keeps or was_reached():
        return None
    return UnclockedWait(key, core)
