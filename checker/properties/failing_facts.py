"""What the analysis knows of runs that fail (spec RUN-9, RUN-10, ERR-9, ERR-19, ACC-11, BUF-14).

These facts are computed from the lowering, S''s end and the explorer, and kept by `Analysis` /
`ModeAnalysis`; the verdicts that read them live in `failing_runs`. This module sits below both: it
imports neither the analysis nor any property (the analysis hands itself in), so the facts flow one
way, from the engines through the analysis to the properties.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from semcheck.checker.static.least_stuck import failure_reached, truncate
from semcheck.checker.static.system import EncodingBug, Lowered
from semcheck.model.errors import InterpreterView, RevisitedBlock, WindowOutOfBounds
from semcheck.model.explore import Exploration, ExplorationLimit
from semcheck.model.explore_devices import explore_outcomes
from semcheck.model.ops import Access, DmaMode, DmaStart, Op, Program
from semcheck.model.state import Outcome
from semcheck.model.step import is_global

if TYPE_CHECKING:
    from semcheck.checker.properties.analysis import Analysis, ModeAnalysis

# ERR-19: the states the explorer may visit to decide a program outside S' (about a second); read as
# `failing_facts.FALLBACK_STATES` when called, so that one budget holds for every reader. Past it, devices that
# meet only at the launch's barriers are walked one at a time within it (ERR-41, `explore_outcomes`)
FALLBACK_STATES = 20_000

# The failures of a view, a window or a grid step (ERR-9, ERR-20, ERR-11): when they are the only ones, every
# property is decided on S' (ACC-6, ACC-10); with any other static failure only the properties of RUN-11 are.
STATIC_FAILURES = (InterpreterView, RevisitedBlock, WindowOutOfBounds)


def view_ops(program: Program) -> tuple[Op, ...]:
    """The distinct operations that go through a view the interpreter cannot index (ERR-9), in program order
    (`Analysis.view_ops` keeps them)."""
    seen: dict[int, Op] = {}
    for ops in program.cores:
        for op in ops:
            t = type(op)
            if (t is Access or t is DmaStart) and op.view_error is not None:
                seen.setdefault(id(op), op)
    return tuple(seen.values())


class At(NamedTuple):
    """A failing position, as `model.step.is_global` reads a failure."""

    core: int
    pc: int


class Ending(NamedTuple):
    """How every run of the mode ends: S' (its run, its program and that program's analysis), the
    fast run that fails, and whether every failure is a view's or a grid step's (ERR-9, ERR-11)."""

    low: Lowered
    s_prime: Outcome
    s_prime_program: Program
    real: Outcome
    s_prime_analysis: Analysis
    views_only: bool


def every_run_fails(facts: ModeAnalysis, analysis: Callable[[Program], Analysis]) -> Ending | None:
    """The ending shared by all runs when each one fails and the failure ends the whole run (RUN-9,
    RUN-10), else None (`ModeAnalysis.every_run_fails` keeps it; `analysis` makes S''s program's)."""
    low = facts.lowering
    if not low.ok or not low.failing:
        return None
    fails = failure_reached(low, facts.end.pcs)  # S''s end: its run only when a failure is reached
    if not fails:
        return None
    views_only = all(isinstance(v, STATIC_FAILURES) for _, _, v in fails)
    program = facts.program
    if not views_only and not all(is_global(program, At(c, pos)) for c, pos, _ in fails):
        return None  # a failure that ends only its device (ERR-19): the others run on, undecided here
    real = facts.maximal_run()
    if real.kind != "error" or (views_only and not isinstance(real.failure.violation, STATIC_FAILURES)):
        raise EncodingBug(f"S' ends at a failing operation but the fast run ends in {real.kind}")
    sp = facts.s_prime_run
    holds = {c: pos for c, (pos, _) in low.failing.items()}
    cut = truncate(facts.program, holds)
    return Ending(low, sp, cut, real, analysis(cut), views_only)


def deferred_never_raise(program: Program, mode: DmaMode, states: int | None = None) -> bool | None:
    """ACC-11: whether no run runs a half of an on_wait copy whose view the interpreter cannot index, by
    every schedule (RUN-4; a failing step is never reduced away, RUN-5); None past `states` explored states
    (None: `FALLBACK_STATES`)."""
    errors = {op.view_error for op in view_ops(program) if type(op) is DmaStart}
    try:
        ex = explore_outcomes(program, mode, max_states=FALLBACK_STATES if states is None else states)
    except ExplorationLimit:
        return None
    return not any(f.violation in errors and type(program.cores[f.core][f.pc]) is not DmaStart
                   for o in ex.outcomes for f in o.state.failures)


def explored_outcomes(facts: ModeAnalysis, states: int | None = None) -> Exploration | None:
    """RUN-4 (`explore_outcomes`: RUN-5's reduced walk, else RUN-57's) of this mode's program within `states`
    (None: `FALLBACK_STATES`), computed once per mode and budget for every reader; None past it."""
    budget = FALLBACK_STATES if states is None else states

    def compute() -> Exploration | None:
        try:
            return explore_outcomes(facts.program, facts.mode, max_states=budget)
        except ExplorationLimit:
            return None

    return facts.whole.shared(("explored_outcomes", facts.mode, budget), compute)


def scope_exploration(facts: ModeAnalysis) -> tuple | None:
    """BUF-14: (every explored outcome, the states explored, how they were, `Exploration.how`) of a program
    whose runs may raise at a run_scoped buffer under this interpreter mode; None past `FALLBACK_STATES` states."""
    if not isinstance(facts.program, Program):  # a Symmetric asks its built program (`scope_failure_verdict`)
        return None
    ex = explored_outcomes(facts)
    return None if ex is None else (ex.outcomes, ex.states, ex.how())
