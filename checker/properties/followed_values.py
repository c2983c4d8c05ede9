"""ACC-9: the verdicts of a program whose lowering read values that copies move, kept only where the
values are facts.

The lowering (`frontend/scalar_state.py`) follows a copy's data to its destination in one order of the
kernel's writes. Those values are the values of every schedule of a mode when the program is race-free
under it (DR-1: the race pass orders every conflicting pair, whatever the schedule) and one run of the
mode reads what the lowering read (`model.followed.misread`). Where either fails, every verdict of that
mode but race-free's own is unknown, with the read and the write: the program checked may not be the
kernel's. (A race is reported as it is: its two accesses come before anything the racy value decides.)
When the run agrees with every followed read it reaches and ends deadlocked or failed before the others,
and no run of the program reaches those others (S''s end is before each, RUN-3: ACC-19), the program's runs
are the kernel's and every verdict stands. Where some run may reach one, a deadlock-free violation still
stands (the greedy run is a run of the kernel) and the rest is unknown.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from semcheck.checker.properties.verdict import Verdict
from semcheck.model.followed import Misread, misread, reachable_read
from semcheck.model.ops import Program

if TYPE_CHECKING:
    from semcheck.checker.properties.analysis import ModeAnalysis

RACE = "race-free"


def settle(program: Program, mode: str, verdicts: dict[str, Verdict], race_free: Callable[[], Verdict],
           facts: ModeAnalysis | None = None) -> dict[str, Verdict]:
    """`verdicts` (property -> verdict of one mode), each unknown where ACC-9's values are not facts.

    `race_free()` gives the mode's race-free verdict (called only when `verdicts` lacks it); `facts`: the
    program's analysis under `mode` (one is made when ACC-19 needs it and it is missing)."""
    if getattr(program, "followed", None) is None:  # (a `Symmetric` has none: ACC-9 lowers every device)
        return verdicts
    race = verdicts.get(RACE) or race_free()
    reason, bad = _why_not(program, mode, race, facts)
    if reason is None:
        return verdicts
    keep = {RACE}
    if (bad is not None and not bad.reached and bad.stuck and race.holds
            and verdicts.get("deadlock-free") is not None and verdicts["deadlock-free"].verdict == "violated"):
        # the run agrees with every read it reaches, so it is a run of the kernel, and it ends stuck or
        # failed: a deadlock-free violation is a fact whatever the reads it never reaches would give
        keep.add("deadlock-free")
    return {p: v if p in keep else Verdict(p, "unknown", reason=reason) for p, v in verdicts.items()}


def not_facts(program: Program, mode: str, facts: ModeAnalysis | None = None) -> str | None:
    """Why the values the lowering of `program` followed are not facts under `mode`; None when they are
    (or it followed none)."""
    if getattr(program, "followed", None) is None:  # (a `Symmetric` has none: ACC-9 lowers every device)
        return None
    from semcheck.checker.properties.races import race_free

    return _why_not(program, mode, race_free(program, mode, facts=facts), facts)[0]  # type: ignore[arg-type]


def _why_not(program: Program, mode: str, race: Verdict, facts: ModeAnalysis | None
             ) -> tuple[str | None, Misread | None]:
    values = program.followed
    bad = misread(program, values, mode)  # type: ignore[arg-type]
    if race.holds and bad is None:
        return None, None
    if race.holds:
        if not bad.reached:
            why = _some_run_reaches(program, mode, bad, facts)
            if why is None:  # ACC-19: no run reaches a read the greedy run misses: the runs are the kernel's
                return None, None
            return (f"the value read at {bad.read} is not a fact: the run ends before this read, and {why}; the "
                    "program checked may not be the kernel's (specs/deciding/frontend.md ACC-9, ACC-19)"), bad
        return (f"the value read at {bad.read} is not a fact: {bad.why} (the write at {bad.write}); the program "
                "checked may not be the kernel's (specs/deciding/frontend.md ACC-9)"), bad
    said = race.witness.message.splitlines()[0] if race.witness is not None else race.reason
    return (f"values the kernel reads from refs that copies write decide this program (first read at "
            f"{values.reads[0].loc}), and race-free is {race.verdict} under {mode} ({said}), so they may "
            "differ between schedules (specs/deciding/frontend.md ACC-9)"), bad


def _some_run_reaches(program: Program, mode: str, bad: Misread, facts: ModeAnalysis | None) -> str | None:
    """ACC-19: why some run of `program` under `mode` may reach a followed read of `bad.unreached` (the
    reads the greedy run does not reach); None when every run stops before each (S''s end, RUN-3)."""
    from semcheck.checker.properties.analysis import analysis_of
    from semcheck.checker.properties.failing_facts import At
    from semcheck.checker.static.least_stuck import failure_reached
    from semcheck.model.step import is_global

    facts = analysis_of(program, mode, facts)
    low = facts.lowering
    if not low.ok:  # RUN-3 is argued for a static lowering only (schedule-dependent lookups are not)
        return f"the program is outside the static encoding ({list(dict.fromkeys(low.unsupported))[0]})"
    end = facts.end
    for c, pos, v in failure_reached(low, end.pcs):
        # RUN-9, RUN-10: a run stops at S''s end only when the failure there ends every device, and under
        # hardware a failure is not the interpreter's (ERR-19)
        op = program.cores[c][pos]
        if mode == "hardware" or not is_global(program, At(c, pos)):
            return f"a run may go on past the failure at {op.loc} ({v.message})"
    r = reachable_read(bad.unreached, end.pcs)
    if r is None:
        return None
    return (f"another schedule may reach the read at {r.loc} (the runs stop only at S''s end, after it, "
            "RUN-3)")
