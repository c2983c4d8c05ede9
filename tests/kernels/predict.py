"""Test oracle: what jax's interpret mode will do with a kernel (complete, hang, raise, or warn).

The prediction comes from the reference model: the fast maximal run decides
hangs (RUN-3); errors that only some schedules reach (an id collision racing
with another device's allocation) are found by exploring the lookups that can
meet both id tables (PROP-1, RUN-3); the exit warning is judged by totals
(PROP-5), since whether the interpreter prints it is itself a race (EXIT-1).
"""

from __future__ import annotations

import dataclasses

from semcheck.model.fast import fast_run
from semcheck.model.launch import launch_failure
from semcheck.model.ops import LOOKUP_OPS, ExitCheck, Program
from semcheck.model.state import Outcome


@dataclasses.dataclass(frozen=True)
class Prediction:
    """`outcome` is "completed", "hang" or "error"; `may_error` lists errors some schedule raises."""

    outcome: str
    error_type: str | None
    error_message: str | None
    may_error: tuple[tuple[str, str], ...]
    leaks: tuple[tuple[int, int, int], ...]  # (semaphore id, global core, count) left at exit by totals
    outcome_detail: Outcome


def _racy_errors(program: Program, mode: str) -> list[tuple[str, str]]:
    """Collisions a lookup can meet in *some* schedule (hold the looker before it, run the rest)."""
    cid = program.collective_id
    if cid is None:
        return []
    base = fast_run(program, mode, lookup_errors=False, record=False)
    tables = base.state.tables
    if not (cid in tables.fixed and cid in tables.internal):
        return []
    out = []
    for core, ops in enumerate(program.cores):
        last = None
        for pc, op in enumerate(ops[: base.state.pcs[core] + 1]):
            if isinstance(op, LOOKUP_OPS):
                last = pc
        if last is None:
            continue
        frozen = fast_run(program, mode, hold={core: last}, lookup_errors=False, record=False)
        t = frozen.state.tables
        if cid in t.fixed and cid in t.internal:
            msg = f"Semaphore {cid} occurs as both fixed-id and internal."
            out.append(("ValueError", msg))
            break
    return out


def leaks_by_totals(program: Program, mode: str, outcome: Outcome) -> tuple[tuple[int, int, int], ...]:
    """Counts left at exit if every contribution arrives (hardware-style totals, PROP-5). Under on_wait a copy
    no waiter runs never signals: a counter the run leaves at zero prints nothing (which tasks run first is
    the schedule's, so the totals stay the count of the others)."""
    arrived = None
    if mode == "on_wait":
        arrived = {k for k, v in outcome.state.counts.items() if v}
        # totals: run the same program with every DMA completing (eager), the counts are the totals
        outcome = fast_run(program, "eager", record=False)
    out = []
    for (key, core), v in outcome.state.counts.items():
        if arrived is not None and (key, core) not in arrived:
            continue
        if v and key[0] in ("internal", "fixed"):
            out.append((key[1], core, v))
    return tuple(sorted(out))


def leaks_of_exited_devices(program: Program, outcome: Outcome) -> tuple[tuple[int, int, int], ...]:
    """In a hang, a device that got past its exit check (it waits at the clean-up barrier) has printed
    its non-zero counts (EXIT-1): judged by its counts in the terminal state, i.e. what has arrived by
    the time nothing can move (under on_wait a copy no waiter runs never arrives)."""
    exited = {op.device for core, ops in enumerate(program.cores)
              for op in ops[: outcome.state.pcs[core]] if isinstance(op, ExitCheck)}
    topo = program.topology
    out = [(key[1], core, v) for (key, core), v in outcome.state.counts.items()
           if v and key[0] in ("internal", "fixed") and topo.device_of(core) in exited]
    return tuple(sorted(out))


def _scope_error(program: Program, mode: str, out: Outcome) -> str | None:
    """BUF-14: the KeyError of the scope check's violation, when the interpreter raises there; its key names
    the owner's buffer as the run allocated it (the device that reports first varies between runs)."""
    from semcheck.checker.properties.confined_scopes import scope_verdict

    v = scope_verdict(program, mode)
    if v is None or v.verdict != "violated" or not v.witness.details.get("raises"):
        return None
    d = v.witness.details
    key = out.state.buffer_keys.get((d["owner"], d["label"]))
    return None if key is None else str(tuple(key))


def predict(program: Program, mode: str) -> Prediction:
    """Predict interpret mode (`eager` or `on_wait`) on `program`."""
    if mode not in ("eager", "on_wait"):
        raise ValueError("interpret-mode predictions are for the eager and on_wait modes")
    out = fast_run(program, mode)
    failed = launch_failure(program, mode)
    if failed is not None:  # LAUNCH-2, LAUNCH-3: the interpreter raises before any core runs
        return Prediction("error", failed.python_type, failed.message, ((failed.python_type, failed.message),),
                          (), out)
    racy = _racy_errors(program, mode)
    scoped = _scope_error(program, mode, out) if out.kind != "error" else None
    if scoped is not None:  # BUF-14: a copy's half meets a run_scoped buffer outside its scope
        return Prediction("error", "KeyError", scoped, (("KeyError", scoped),), (), out)
    if out.kind == "error":
        v = out.failure.violation
        return Prediction("error", v.python_type, v.message, ((v.python_type, v.message),), (), out)
    if racy:
        # some schedule raises, ours did not: report the error as possible
        return Prediction(out.kind if out.kind != "deadlock" else "hang", None, None, tuple(racy), (), out)
    if out.kind == "completed":
        leaks = leaks_by_totals(program, mode, out)
    else:
        leaks = leaks_of_exited_devices(program, out)
    return Prediction("hang" if out.kind == "deadlock" else "completed", None, None, (), leaks, out)
