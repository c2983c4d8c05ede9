"""Why the calls after a call are not decided under an interpreter mode (ERR-53, ERR-55, ERR-57), read by
`programs.interpreter.after_failures` (handed in from the front end, which keeps the import graph acyclic)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from semcheck.checker.properties.clock_waits import clock_risk
from semcheck.checker.properties.confined_scopes import interpreter_failure, scope_verdict
from semcheck.checker.properties.followed_values import not_facts
from semcheck.checker.properties.verdict import NO_RUN_RAISES
from semcheck.model.ops import Program

if TYPE_CHECKING:
    from semcheck.checker.properties.analysis import Analysis

DEADLOCK = "deadlock-free"
TIMEOUT_MS = 30_000  # what a check takes by default (`checking.check_program`)


def undecided_after(program: Program, mode: str, analysis: Analysis | None = None) -> str | None:
    """Why some run of `program` under the interpreter `mode` may fail on some devices though no failure was
    found in its greedy run (which `after_failures` reads itself): the values its lowering followed are not facts
    (ACC-9, ERR-53), a run may raise at a run_scoped buffer (BUF-14) or at a wait's clock (RACE-1), failures
    that depend on the schedule (ERR-55), or the call's own `deadlock-free` verdict under `mode` does not show
    that no run raises (ERR-57); None when none. `analysis`: the program's, shared with its checks."""
    said = not_facts(program, mode)
    if said is not None:
        return said
    why = interpreter_failure(scope_verdict(program, mode), mode) or clock_risk(program, mode)
    if why is not None:
        return f"some run of it may raise though its greedy run completes: {why} (ERR-55)"
    return raised_in_some_run(program, mode, analysis)


def raised_in_some_run(program: Program, mode: str, analysis: Analysis | None = None) -> str | None:
    """ERR-57: why some run of `program` under the interpreter `mode` may raise, read off its own `deadlock-free`
    verdict there (the one its report gives): None where it is proved (no run raises or hangs, PROP-4) or violated
    by a hang alone (its check showed that no run raises, `NO_RUN_RAISES`); else the verdict and what it says."""
    from semcheck.checker.properties.analysis import Analysis
    from semcheck.checker.properties.reductions import on_program, reduced
    from semcheck.checker.properties.registry import BY_ID

    if analysis is None or analysis.program is not program:
        analysis = Analysis(program)
    # as `checking.check_program` decides it (the ACC-9 and BUF-14 steps it adds are ERR-53's and ERR-55's, above)
    v = (reduced(analysis, BY_ID[DEADLOCK].reductions, DEADLOCK, mode, lambda: TIMEOUT_MS, fold=True)
         or on_program(analysis, DEADLOCK, mode, TIMEOUT_MS))
    if v.verdict == "proved" or (v.verdict == "violated" and v.stats.get(NO_RUN_RAISES) is True):
        return None
    said = v.witness.message if v.witness is not None else v.reason
    said = said if len(said) <= 300 else said[:297] + "..."
    return (f"its {DEADLOCK} under {mode} is {v.verdict}, which does not show that no run of it raises "
            f"({said}) (ERR-57)")
