"""PRG-169: verdicts that rest on an earlier kernel call's outputs, kept only where those outputs are facts.

`frontend/kernel_outputs.py` runs a kernel whose outputs a later call's scalar inputs are computed from, once,
by jax's interpreter. Its outputs are those of every schedule of a mode when the kernel is race-free under that
mode (every read of its data is ordered after the write it reads, so each read returns the same write's value
in every schedule; what nothing writes was ruled out by the two runs). Where the race check does not hold,
every verdict that rests on the values is unknown, with the kernel call and the race verdict.
"""

from __future__ import annotations

from semcheck.checker.properties.verdict import Verdict

RACE = "race-free"


def why_not_facts(computed_by: str, mode: str, race: Verdict, *, whose: str, of: str = "this program",
                  unwritten: str = "") -> str | None:
    """Why the outputs of `computed_by` (the kernel calls run) are not facts under `mode`, given the race-free
    verdict of `whose` (the program or call that holds them); `of`: what reads them. None when they are.
    `unwritten` (PRG-200): those calls that may read memory nothing writes, and why, which `hardware` does not
    fill as the runs did."""
    if race.holds and mode == "hardware" and unwritten:
        return (f"the scalar inputs of {of} are computed from the outputs of {computed_by}, which semcheck ran in "
                f"interpret mode with memory nothing writes filled two ways; on a TPU that memory holds what was "
                f"there, and {unwritten} may read it (specs/deciding/programs.md PRG-200)")
    if race.holds:
        return None
    said = race.witness.message.splitlines()[0] if race.witness is not None else race.reason
    return (f"the scalar inputs of {of} are computed from the outputs of {computed_by}, which semcheck "
            f"ran once in interpret mode; race-free of {whose} is {race.verdict} under {mode} ({said}), so those "
            "outputs may differ between schedules (specs/deciding/programs.md PRG-169)")


def settle(verdicts: list[Verdict], reason: str | None, *, keep_race: bool) -> list[Verdict]:
    """`verdicts`, each unknown with `reason` when there is one (`keep_race`: but race-free's own, which a
    composed program decides over the producing call too)."""
    if reason is None:
        return verdicts
    return [v if keep_race and v.property == RACE else Verdict(v.property, "unknown", reason=reason, stats=v.stats)
            for v in verdicts]


__all__ = ["settle", "why_not_facts"]
