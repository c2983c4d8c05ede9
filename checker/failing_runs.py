"""Verdicts when every interpreter run raises ERR-9 or ERR-11 (spec ACC-6, GRID-3, ERR-7; D22, D24).

A load or store through a reshape, bitcast, transpose or memory-space view,
or an `eager` copy through one, raises in jax's interpreter when a core runs
it (`model.step.view_failure`), and so does the interpreter's check after a
grid step that comes back to an output block the grid had left (ERR-11,
lowered as an access of no element carrying the failure); the failure ends
the run (ERR-7). Such an operation is a static failure of the lowering (`counters`: the core's cap),
so S' (the program with failing operations blocking) says whether every run
fails: a real run is an S' run up to its first failure, S' is persistent, so
when S' ends with a core at its failing access every maximal run fails there
or at another such access, and none completes. Then, under that mode:

* `deadlock-free` is violated (PROP-4: every terminal state has unfinished
  cores), witnessed by the model's fast run, which ends in the failure;
* `exit-balance` is proved when S' ends before every device's exit check: no
  run reaches an exit, so no count is left and no copy is pending at one
  (the interpreter prints no exit warning: checked in interpret mode);
* every other property is decided on S' itself: a real run's states before
  its failure are exactly S''s reachable states (S' only refuses the failing
  step, and the failing access does not happen), and nothing runs after it;
  `dma-bytes` judges the waits that run, not bytes left at an exit no run
  reaches.

An `on_wait` copy through such a view raises only when a waiter runs its task
(which waiter, if any, depends on the schedule): the model does not raise
there, the lowering refuses it, and every property is unknown in that mode.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

from semcheck.checker.replay import REPLAY_LIMIT
from semcheck.checker.verdict import Verdict, Witness
from semcheck.checker.z3.counters import EncodingBug, Lowered, failure_reached, lower, maximal_run, s_prime_run, truncate
from semcheck.checker.z3.memo import MEMO
from semcheck.model.errors import InterpreterView, RevisitedBlock
from semcheck.model.ops import Access, DmaMode, DmaStart, ExitCheck, Op, Program
from semcheck.model.run import run
from semcheck.model.state import Outcome

REVISIT_HINT = ("order the grid so that the steps using one output block are consecutive (the index map of "
                "the innermost axes), or make the axis that revisits it the innermost; --dma-mode hardware "
                "checks the kernel as a TPU runs it")

# The failures an operation raises whatever the schedule (a static failure of the lowering, like ERR-4's).
STATIC_FAILURES = (InterpreterView, RevisitedBlock)

HINT = ("jax's TPU interpreter indexes loads, stores and copies only through indexers (ref.at[...], slices): "
        "read or write the whole ref and reshape or bitcast the value instead to test it in interpret mode; "
        "--dma-mode hardware checks the kernel as a TPU runs it")


def view_ops(program: Program) -> tuple[Op, ...]:
    """The distinct operations that go through a view the interpreter cannot index (ERR-9), in program order."""

    def scan() -> tuple[Op, ...]:
        seen: dict[int, Op] = {}
        for ops in program.cores:
            for op in ops:
                t = type(op)
                if (t is Access or t is DmaStart) and op.view_error is not None:
                    seen.setdefault(id(op), op)
        return tuple(seen.values())

    return MEMO.get(program, ("view ops",), scan)


def fold_unsafe(program: Program, mode: str) -> bool:
    """Whether a fold's proof must not stand for `program` under `mode`: the fold reads the program's
    skeleton, which drops accesses and with them the failures ERR-9 gives them in the interpreter."""
    return mode != "hardware" and bool(view_ops(program))


class Ending(NamedTuple):
    """How every run of the mode ends: S' (its run and its program) and the fast run that fails."""

    low: Lowered
    s_prime: Outcome
    s_prime_program: Program
    real: Outcome


def every_run_fails(program: Program, mode: DmaMode) -> Ending | None:
    """The ending shared by all runs when each one raises ERR-9 (see the module docstring), else None."""

    def compute() -> Ending | None:
        low = lower(program, mode)
        if not low.ok:
            return None
        sp = MEMO.get(program, ("s_prime_run", mode), lambda: s_prime_run(low))
        fails = failure_reached(low, sp.state.pcs)
        if not fails or not all(isinstance(v, STATIC_FAILURES) for _, _, v in fails):
            return None  # no failure, or one of ERR-1..ERR-6: their own treatment
        real = maximal_run(program, mode)
        if real.kind != "error" or not isinstance(real.failure.violation, STATIC_FAILURES):
            raise EncodingBug(f"S' ends at a failing access but the fast run ends in {real.kind}")
        stops = {c: pos for c, (pos, _) in low.caps.items()}
        return Ending(low, sp, truncate(program, stops), real)

    return MEMO.get(program, ("every run fails", mode), compute)


def failing_run_verdict(prop: str, program: Program, mode: DmaMode, *, timeout_ms: int = 30_000) -> Verdict | None:
    """ERR-9 / ERR-11 under an interpreter mode: the verdict on `prop`, or None when the usual check decides it."""
    if mode == "hardware":
        return None
    views = view_ops(program)
    if not views:
        return None
    if mode == "on_wait":
        copy = next((op for op in views if type(op) is DmaStart), None)
        if copy is not None:
            return Verdict(prop, "unknown", reason=f"{_raised(copy.view_error)}, when the copy at {copy.loc} runs: "
                           "under on_wait only if a waiter runs its task, which semcheck does not decide")
    end = every_run_fails(program, mode)
    if end is None:
        return None
    failure = end.real.failure
    raised = _raised(failure.violation)
    where = _where(failure.violation, failure.loc)
    if prop == "deadlock-free":
        return Verdict(prop, "violated", witness=_witness(program, mode, end, f"{raised} {where}"))
    if prop == "exit-balance":
        exits = [(c, i) for c, ops in enumerate(program.cores) for i, op in enumerate(ops) if type(op) is ExitCheck]
        if any(end.s_prime.state.pcs[c] > i for c, i in exits):
            return None  # some device reaches its exit check before the failure: the usual check
        return Verdict(prop, "proved", reason=f"no run reaches a kernel exit: every run raises {raised} {where} "
                       "or at another such access first, which ends the run (ERR-7): no count is left and no "
                       "copy is pending at an exit, and the interpreter prints no exit warning")
    if prop == "dma-bytes":  # the waits that run are judged; no bytes are left at an exit that never comes
        from semcheck.checker.z3.balance import dma_bytes

        v = dma_bytes(end.s_prime_program, mode, timeout_ms=timeout_ms, exits=False)
    else:
        from semcheck.checker.properties import BY_ID  # lazy: the registry imports this module's callers

        v = BY_ID[prop].check(end.s_prime_program, mode, timeout_ms=timeout_ms)
    prefix = (f"on every run up to its failure (every run raises {raised} {where} or at another such "
              "access, which ends it, ERR-7)")
    if v.verdict == "violated":
        return dataclasses.replace(v, witness=dataclasses.replace(
            v.witness, message=f"{v.witness.message} ({prefix})"))
    return dataclasses.replace(v, reason=f"{prefix}: {v.reason}" if v.reason else prefix)


def _raised(err: InterpreterView | RevisitedBlock) -> str:
    return f"{err.python_type}: {err.message}"


def _where(err: InterpreterView | RevisitedBlock, loc: object) -> str:
    if isinstance(err, RevisitedBlock):
        return f"after the grid step that comes back to a block of output {err.operand!r} (the pallas_call at {loc})"
    return f"at the {err.access} at {loc}"


def _witness(program: Program, mode: DmaMode, end: Ending, text: str) -> Witness:
    """The fast run that fails, replayed on the step relation (up to `REPLAY_LIMIT` steps)."""
    real = end.real
    failure = real.failure
    if len(real.schedule) <= REPLAY_LIMIT:
        again = run(program, mode, real.schedule)
        if again.kind != "error" or again.failure != failure:
            raise EncodingBug(f"the failing run replays to {again.kind} ({again.failure}), not {failure}")
    others = sorted({str(op.loc) for op in view_ops(program) if op.loc.line and op.loc != failure.loc})
    err = failure.violation
    details = {"error_type": err.python_type, "error_message": err.message, "core": failure.core,
               "pc": failure.pc, "other_lines": others[:8]}
    if isinstance(err, RevisitedBlock):
        details.update(rule="ERR-11", output=err.operand, block=err.block, iteration=err.iteration)
        why = ("jax's TPU interpreter refuses a grid step whose output block the grid visited before and has "
               "left since (specs/divergences.md D24)")
        hint = REVISIT_HINT
    else:
        details.update(rule="ERR-9", transform=err.transform, access=err.access)
        why = (f"jax's TPU interpreter indexes loads, stores and copies only through indexers, not a "
               f"{err.transform} view (specs/divergences.md D22)")
        hint = HINT
    return Witness(
        message=f"interpret mode raises {text}: {why}; the failure ends the run (ERR-7), so no run completes",
        schedule=tuple(real.schedule),
        blocked=tuple((b.core, b.pc, b.reason) for b in real.blocked),
        locs=(failure.loc,) if failure.loc.line else (),
        details=details,
        hint=hint,
    )
