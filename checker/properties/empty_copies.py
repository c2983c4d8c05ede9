"""ACC-24: under `hardware`, a program with empty copies on non-DMA semaphores has two readings.

DMA-6 says a completed copy adds 1 to a REGULAR or barrier semaphore on a TPU; whether a copy of 0
bytes adds that 1 is documented nowhere (a shipped kernel counts only its non-empty copies). Each
property is decided on both readings: the same verdict on both stands; where they differ the
property is `unknown`, naming both outcomes and the first such copy. Never proved on one reading
alone."""

from __future__ import annotations

import dataclasses

from semcheck.checker.properties.verdict import Verdict
from semcheck.model.dma import empty_copies_signal_nothing
from semcheck.model.ops import DmaStart, core_field

MODE = "hardware"


def first_empty_copy(program) -> DmaStart | None:
    """The first copy (core by core) whose reading differs: 0 bytes on a non-DMA semaphore."""
    other = empty_copies_signal_nothing(program)
    if other is None:
        return None
    field = core_field(program)
    for ops, alt in zip(getattr(program, field), getattr(other, field)):
        for op, op2 in zip(ops, alt):
            if op is not op2:
                return op
    return None


def both_readings(program, done: dict, req, deadline: float, check_modes) -> dict:
    """`done` (mode -> (verdicts, seconds)) with its hardware verdicts settled over both readings."""
    if MODE not in done:
        return done
    other = empty_copies_signal_nothing(program)
    if other is None:
        return done
    where = first_empty_copy(program)
    alt_verdicts, alt_seconds = check_modes(other, dataclasses.replace(req, modes=(MODE,)), deadline)[MODE]
    by_prop = {v.property: v for v in alt_verdicts}
    verdicts, seconds = done[MODE]
    settled = [settle(v, by_prop.get(v.property), where) for v in verdicts]
    return {**done, MODE: (settled, seconds + alt_seconds)}


def settle(one: Verdict, none: Verdict | None, where: DmaStart | None) -> Verdict:
    """ACC-24: `one` (an empty copy adds 1, DMA-6) if `none` (it adds nothing) agrees, else unknown."""
    if none is None or none.verdict == one.verdict:
        return one
    at = f" (the copy at {where.loc})" if where is not None and where.loc.line else ""
    return Verdict(one.property, "unknown", stats={"rule": "ACC-24"}, reason=(
        f"the TPU's outcome depends on whether an empty copy{at} signals its {where.dst_sem_type if where else 'REGULAR'} "
        f"semaphore, which no document of Pallas TPU says (ACC-24): if it adds 1, as a completed copy does (DMA-6), "
        f"{one.property} is {one.verdict}; if it adds nothing, {none.verdict}"))
