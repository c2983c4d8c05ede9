"""Violations a long loop's window finds, decided for the whole loop (spec PRG-143).

PRG-130 checks a loop of more iterations than the walk unrolls over a window of `WINDOW` iterations
followed by the program's calls after the loop. A violation there may need the program to end right
after the window's last iteration, which the whole loop does not do. The *cut* program keeps, on every
core, only the operations before the window's last iteration (the calls before the loop and the first
`WINDOW - 1` iterations): every program of `T > WINDOW` iterations has exactly those operations first,
so a run of the cut program in which no core ends at its cut is a run of the whole loop. A violation
found on the cut program whose witness is such a run (and that replays on the window program) is a
violation of the loop for every trip count.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from semcheck.checker.properties.verdict import Verdict
from semcheck.model.ops import ExitCheck, Program

DECIDED = frozenset({"deadlock-free", "race-free", "invocation-confined"})
"""PRG-143: the properties whose violation is a run, so a run of the loop's first iterations shows it."""


@dataclasses.dataclass(frozen=True)
class Cut:
    """The window program's operations before the loop's last window iteration, per core."""

    program: Program
    calls: tuple[tuple[int, ...], ...]
    at: tuple[int, ...]  # per core, where it is cut (its first operation that is not kept)
    iterations: int  # the loop iterations the cut keeps


def cut(composed: Any) -> Cut:
    """PRG-143: the cut of a composed window program."""
    from semcheck.checker.frontend.call_boundary import is_boundary
    from semcheck.checker.frontend.program_ir import WINDOW

    # the calls kept: those before the last window iteration of the first loop (later loops' windows and the
    # calls between loops follow it, and they are linked to its last iteration)
    threshold = min(first + (WINDOW - 1) * per for _, _, first, per in composed.ir.windows)
    program = composed.program
    at = []
    for ops, ks in zip(program.cores, composed.calls):
        j = 0
        # the uses of the program's result and the exit checks are at its end, whatever call they follow
        while j < len(ks) and ks[j] < threshold and type(ops[j]) is not ExitCheck \
                and not (is_boundary(ops[j]) and getattr(ops[j].loc, "kind", "") == "result"):
            j += 1
        at.append(j)
    cores = tuple(ops[:j] for ops, j in zip(program.cores, at))
    calls = tuple(ks[:j] for ks, j in zip(composed.calls, at))
    return Cut(dataclasses.replace(program, cores=cores), calls, tuple(at), WINDOW - 1)


def lag_in_some_loop(composed: Any) -> str | None:
    """PRG-144: PRG-7's condition for each windowed loop of the program (`confined.lag_two` on that loop's
    window, the other loops' windows in place around it): None when it holds for every loop, else why not."""
    from semcheck.checker.properties.confined import lag_two

    windows = composed.ir.windows
    for w in windows:
        one = composed if len(windows) == 1 else dataclasses.replace(
            composed, ir=dataclasses.replace(composed.ir, windows=(w,)))
        why = lag_two(one)
        if why is not None:
            return why + (f" (in the loop at {w[0]})" if len(windows) > 1 else "")
    return None


def loop_violation(composed: Any, v: Verdict, req: Any, deadline: float, memo: dict) -> Verdict | None:
    """PRG-143: `v` (a violation in the window) as a violation of the whole loop, from a run of the cut
    program, or None when the cut program shows none that every trip count has."""
    if v.verdict != "violated" or v.property not in DECIDED:
        return None
    if "cut" not in memo:
        memo["cut"] = cut(composed)
    c = memo["cut"]
    key = ("verdict", v.property)
    if key not in memo:
        memo[key] = _check_cut(composed, c, v.property, req, deadline)
    got = memo[key]
    if got is None or got.verdict != "violated" or got.witness is None or not got.witness.schedule:
        return None
    why = _whole_loop_run(composed, c, got)
    if why is not None:
        return None
    loops = ", ".join(f"the loop of {trips} iterations at {loc}" for loc, trips, _, _ in composed.ir.windows[:1])
    said = (f" (a run of the first {c.iterations} iterations of {loops}, which every trip count runs first, "
            "programs.md PRG-143)")
    return dataclasses.replace(got, witness=dataclasses.replace(got.witness, message=got.witness.message + said))


def _check_cut(composed: Any, c: Cut, prop: str, req: Any, deadline: float) -> Verdict | None:
    """One property of the cut program under hardware, its witness replayed on the model and named."""
    from semcheck.checker.properties.replay import with_replay
    from semcheck.checker.properties.timeline import naming

    if prop == "invocation-confined":
        from semcheck.checker.properties.confined import composed_landings, decide

        invs = composed.ir.invocations
        # the window program's landings whose sender is kept: the cut keeps every position before it, so a
        # landing's window is where the window program has it (one past the cut is never reached)
        landings = [la for la in composed_landings(composed) if la.pc < c.at[la.core]]
        from semcheck.checker.properties.confined_scopes import combine, scope_verdict

        got = with_replay(lambda program, mode, timeout_ms=0: combine(decide(
            program, landings, where=lambda k: invs[k].describe(), calls=c.calls,
            reading=composed.reading), scope_verdict(program, "hardware")))(c.program, "hardware")
        return naming(got, c.program)
    from semcheck.checker.properties.checking import check_modes

    sub = dataclasses.replace(req, modes=("hardware",), properties=(prop,))
    done = check_modes(c.program, sub, deadline)
    return done["hardware"][0][0] if "hardware" in done else None


def _whole_loop_run(composed: Any, c: Cut, v: Verdict) -> str | None:
    """None when `v`'s witness is a run of the whole loop: it replays on the window program (whose operations
    before the cut are the cut's), a deadlock leaves every core stuck before its cut (a core at its cut would
    go on into the next iteration), and a deadlock's or race's run lands every remote signal and copy inside
    its call (PRG-128; invocation-confined itself is about such a landing)."""
    from semcheck.checker.properties.confined import faithful
    from semcheck.model.errors import ModelBug
    from semcheck.model.run import run
    from semcheck.model.step import enabled

    program = composed.program
    try:
        state = run(program, "hardware", v.witness.schedule, finish=False)
    except ModelBug as e:
        return f"its run does not replay on the window program ({e})"
    if any(pc > at for pc, at in zip(state.pcs, c.at)):
        return "its run goes past the cut"
    if v.property == "invocation-confined":
        return None
    if v.property == "deadlock-free" and state.failure is None:
        # a core whose window program ends before its cut has no operation in any later iteration either
        if any(pc >= at and at < len(ops) for pc, at, ops in zip(state.pcs, c.at, program.cores)) \
                or enabled(program, "hardware", state):
            return "its deadlock has a core at the cut, which the loop's next iteration may release"
    return faithful(composed, v.witness.schedule)


__all__ = ["Cut", "DECIDED", "cut", "lag_in_some_loop", "loop_violation"]
