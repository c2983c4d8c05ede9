"""Why the calls after a call are not decided under an interpreter mode (ERR-53, ERR-55), read by
`programs.interpreter.after_failures` (handed in from the front end, which keeps the import graph acyclic)."""

from __future__ import annotations

from semcheck.checker.properties.clock_waits import clock_risk
from semcheck.checker.properties.confined_scopes import interpreter_failure, scope_verdict
from semcheck.checker.properties.followed_values import not_facts
from semcheck.model.ops import Program


def undecided_after(program: Program, mode: str) -> str | None:
    """Why some run of `program` under the interpreter `mode` may fail on some devices though no failure was
    found in its greedy run (which `after_failures` reads itself): the values its lowering followed are not facts
    (ACC-9, ERR-53), or a run may raise at a run_scoped buffer (BUF-14) or at a wait's clock (RACE-1), failures
    that depend on the schedule (ERR-55); None when neither."""
    said = not_facts(program, mode)
    if said is not None:
        return said
    why = interpreter_failure(scope_verdict(program, mode), mode) or clock_risk(program, mode)
    return None if why is None else f"some run of it may raise though its greedy run completes: {why} (ERR-55)"
