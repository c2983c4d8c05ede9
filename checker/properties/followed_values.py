"""ACC-9: the verdicts of a program whose lowering read values that copies move, kept only where the
values are facts.

The lowering (`frontend/scalar_state.py`) follows a copy's data to its destination in one order of the
kernel's writes. Those values are the values of every schedule of a mode when the program is race-free
under it (DR-1: the race pass orders every conflicting pair, whatever the schedule) and one run of the
mode reads what the lowering read (`model.followed.misread`). Where either fails, every verdict of that
mode but race-free's own is unknown, with the read and the write: the program checked may not be the
kernel's. (A race is reported as it is: its two accesses come before anything the racy value decides.)
One exception: when the run agrees with every followed read it reaches and ends deadlocked or failed
before the others, it is a run of the kernel, so a deadlock-free violation stands.
"""

from __future__ import annotations

from collections.abc import Callable

from semcheck.checker.properties.verdict import Verdict
from semcheck.model.followed import Misread, misread
from semcheck.model.ops import Program

RACE = "race-free"


def settle(program: Program, mode: str, verdicts: dict[str, Verdict], race_free: Callable[[], Verdict]
           ) -> dict[str, Verdict]:
    """`verdicts` (property -> verdict of one mode), each unknown where ACC-9's values are not facts.

    `race_free()` gives the mode's race-free verdict (called only when `verdicts` lacks it)."""
    if getattr(program, "followed", None) is None:  # (a `Symmetric` has none: ACC-9 lowers every device)
        return verdicts
    race = verdicts.get(RACE) or race_free()
    reason, bad = _why_not(program, mode, race)
    if reason is None:
        return verdicts
    keep = {RACE}
    if (bad is not None and not bad.reached and bad.stuck and race.holds
            and verdicts.get("deadlock-free") is not None and verdicts["deadlock-free"].verdict == "violated"):
        # the run agrees with every read it reaches, so it is a run of the kernel, and it ends stuck or
        # failed: a deadlock-free violation is a fact whatever the reads it never reaches would give
        keep.add("deadlock-free")
    return {p: v if p in keep else Verdict(p, "unknown", reason=reason) for p, v in verdicts.items()}


def not_facts(program: Program, mode: str) -> str | None:
    """Why the values the lowering of `program` followed are not facts under `mode`; None when they are
    (or it followed none)."""
    if getattr(program, "followed", None) is None:  # (a `Symmetric` has none: ACC-9 lowers every device)
        return None
    from semcheck.checker.properties.races import race_free

    return _why_not(program, mode, race_free(program, mode))[0]  # type: ignore[arg-type]


def _why_not(program: Program, mode: str, race: Verdict) -> tuple[str | None, Misread | None]:
    facts = program.followed
    bad = misread(program, facts, mode)  # type: ignore[arg-type]
    if race.holds and bad is None:
        return None, None
    if race.holds:
        write = f" (the write at {bad.write})" if bad.reached else ""
        return (f"the value read at {bad.read} is not a fact: {bad.why}{write}; the program checked may not be "
                "the kernel's (specs/deciding/frontend.md ACC-9)"), bad
    said = race.witness.message.splitlines()[0] if race.witness is not None else race.reason
    return (f"values the kernel reads from refs that copies write decide this program (first read at "
            f"{facts.reads[0].loc}), and race-free is {race.verdict} under {mode} ({said}), so they may "
            "differ between schedules (specs/deciding/frontend.md ACC-9)"), bad
