"""ACC-9: the verdicts of a program whose lowering read values that copies move, kept only where the
values are facts.

The lowering (`frontend/scalar_state.py`) follows a copy's data to its destination in one order of the
kernel's writes. Those values are the values of every schedule of a mode when the program is race-free
under it (DR-1: the race pass orders every conflicting pair, whatever the schedule) and one run of the
mode reads what the lowering read (`model.followed.misread`). Where either fails, every verdict of that
mode is unknown, with the read and the write: the program checked may not be the kernel's. (A race is
reported as it is: its two accesses come before anything the racy value decides; a race-free proof is the
program checked's, PRG-232.) A race-free proof that holds only up to a failure is (a) only where the pass orders
every followed pair over every run (past the failure a copy lands unseen); else the greedy run must read as the
mode lands its copies (PRG-231).
When the run agrees with every followed read it reaches and ends deadlocked or failed before the others,
and no run of the program reaches those others (S''s end is before each, RUN-3: ACC-19), the program's runs
are the kernel's and every verdict stands. Where some run may reach one, a deadlock-free violation still
stands (the greedy run is a run of the kernel) and the rest is unknown. A mode whose launch fails reads no
value at all (every run raises before any core starts): its verdicts stand (ACC-56). Where the values are not
facts, a violation whose own witness run reads each followed value from the write the lowering took it from, as
the mode lands its copies, is the kernel's and stands (ACC-61, `model.followed_runs`). Under an interpreter mode a
read that races a write sees, in every run, the write RUN-61 lands last before it (`racy_reads`): where that is the
lowering's, the values are facts; where not, `case_pins` names the values a lowering must give those reads, and
`racy_cases` decides the mode on that lowering (ACC-71).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

from semcheck.checker.properties.racy_reads import pairs_on_followed, racy_values
from semcheck.checker.properties.verdict import UP_TO_FAILURE, Verdict
from semcheck.model.followed import Misread, misread, reachable_read
from semcheck.model.followed_runs import run_is_kernels
from semcheck.model.landing import MODES
from semcheck.model.launch import launch_failure
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
    keep = set() if race.holds else {RACE}  # a race found is the kernel's; a proof is the program checked's (PRG-232)
    if (bad is not None and not bad.reached and bad.stuck
            and verdicts.get("deadlock-free") is not None and verdicts["deadlock-free"].verdict == "violated"):
        # the run agrees with every read it reaches, so it is a run of the kernel, and it ends stuck or
        # failed: a deadlock-free violation is a fact whatever the reads it never reaches would give
        keep.add("deadlock-free")
    return {p: v if p in keep else _from_a_kernel_run(program, mode, v, reason) for p, v in verdicts.items()}


def _from_a_kernel_run(program: Program, mode: str, v: Verdict, reason: str) -> Verdict:
    """ACC-61: a violation whose witness run reads every followed value it reaches as the lowering did is a
    run of the kernel, and stands; any other verdict is unknown for `reason`."""
    if v.verdict == "violated" and v.witness is not None and v.witness.schedule:
        why = run_is_kernels(program, program.followed, mode, v.witness.schedule)  # type: ignore[arg-type]
        if why is None:
            said = ("the run reads every value the lowering followed from the write the lowering took it from, so "
                    "it is a run of the kernel (specs/deciding/frontend.md ACC-61)")
            return dataclasses.replace(v, witness=dataclasses.replace(
                v.witness, details={**v.witness.details, "kernel_run": said}))
        reason = f"{reason}; the violation found is not shown to be the kernel's: {why} (ACC-61)"
    elif v.property == RACE and v.holds:
        reason = f"race-free holds of the program checked, whose runs may not be the kernel's (PRG-232): {reason}"
    return Verdict(v.property, "unknown", reason=reason)


def not_facts(program: Program, mode: str, facts: ModeAnalysis | None = None) -> str | None:
    """Why the values the lowering of `program` followed are not facts under `mode`; None when they are
    (or it followed none)."""
    if getattr(program, "followed", None) is None:  # (a `Symmetric` has none: ACC-9 lowers every device)
        return None
    from semcheck.checker.properties.races import race_free

    return _why_not(program, mode, race_free(program, mode, facts=facts), facts)[0]  # type: ignore[arg-type]


def racy_pairs(program: Program, mode: str, facts: ModeAnalysis | None = None) -> list | None:
    """ACC-71: the unordered conflicting pairs on followed buffers whose reads `racy_reads.racy_values` asks under
    `mode` (empty when none); None where it asks nothing (no followed values, a mode that lands nothing, every run
    failing at the launch, or pairs not decided)."""
    if getattr(program, "followed", None) is None or mode not in MODES or launch_failure(program, mode) is not None:
        return None
    from semcheck.checker.properties.races import race_free

    if race_free(program, mode, facts=facts).holds:  # type: ignore[arg-type]
        return []
    why, pairs = _unordered_on_followed(program, mode, facts)
    return [] if why is None else pairs


def case_pins(program: Program, mode: str, facts: ModeAnalysis | None = None) -> dict | None:
    """ACC-71: the values a lowering must give the program's racy reads for its verdicts under `mode` to be the
    kernel's (`racy_reads.racy_values`' pins); None where no such lowering is asked for (the values are facts,
    or are not decided so)."""
    pairs = racy_pairs(program, mode, facts)
    given = pairs is not None and any(r.pinned is not None for r in program.followed.reads)  # type: ignore[union-attr]
    if pairs is None or not (pairs or given):
        return None
    why, pins, _ = racy_values(program, mode, program.followed, pairs)  # type: ignore[arg-type]
    return pins if why is None and pins else None


def _why_not(program: Program, mode: str, race: Verdict, facts: ModeAnalysis | None
             ) -> tuple[str | None, Misread | None]:
    """Why the followed values are not facts under `mode` (None: they are), and the misread of the greedy
    run when the accesses to them are ordered (ACC-9 (a) or ACC-20) but (b) fails."""
    if launch_failure(program, mode) is not None:  # ACC-56: every run raises before any core starts, so none
        return None, None                            # reads a value, and no verdict of the mode rests on one
    values = program.followed
    # ACC-9 (a), or ACC-20: only the pairs on followed elements need the semaphores' order
    unordered, pairs = (None, None) if race.holds else _unordered_on_followed(program, mode, facts)
    if unordered is None and race.stats.get(UP_TO_FAILURE):
        placed = _as_the_mode_lands(program, mode, facts)
        if placed is not None:
            return (f"the values the lowering followed are not shown to be the kernel's under {mode}: {placed} "
                    "(PRG-231); the program checked may not be the kernel's (specs/deciding/frontend.md ACC-9)"), None
    skip: frozenset[int] = frozenset()
    given = any(r.pinned is not None for r in values.reads)  # a case's lowering: each value given is checked
    if (unordered is not None and pairs) or (unordered is None and given):  # ACC-71: racy reads, read by RUN-61
        why, pins, skip = racy_values(program, mode, values, pairs or [])  # type: ignore[arg-type]
        if why is None and not pins:
            unordered = None
        elif why is None:
            unordered = (f"{unordered or 'a read was given a value'}, and in every {mode} run a read takes another "
                         "value than the lowering's (RUN-61), which a lowering with that value decides (ACC-71)")
        elif unordered is None:
            unordered = f"a read was given a value that is not shown to be every run's ({why}, ACC-71)"
    bad = misread(program, values, mode, skip)  # type: ignore[arg-type]
    if unordered is None and bad is None:
        return None, None
    if unordered is None:
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
            f"{values.reads[0].loc}), and race-free is {race.verdict} under {mode} ({said}); {unordered}, so they "
            "may differ between schedules (specs/deciding/frontend.md ACC-9, ACC-20)"), None


def _as_the_mode_lands(program: Program, mode: str, facts: ModeAnalysis | None) -> str | None:
    """PRG-231: why `misread`'s greedy run, which lands each copy at its start (ACC-9 (b)), is not shown to read as
    the mode's runs do where race-free holds only up to a failure (ACC-15, ACC-39, RUN-11: `UP_TO_FAILURE`); None when
    it is. Past that failure a copy that would land later goes unseen, and the failure may be one a followed value
    causes. The start stands for the landing where the pass orders every pair on followed elements over every run
    (ACC-9 (a)); else the greedy run, copies landing as the mode lands them (ACC-61), must read each followed value it
    reaches from the lowering's write."""
    every, _ = _unordered_on_followed(program, mode, facts)
    if every is None:
        return None
    why = run_is_kernels(program, program.followed, mode, ())  # type: ignore[arg-type]
    if why is None:
        return None
    return (f"race-free holds only up to a failure and the pass does not order every pair on followed elements over "
            f"every run ({every}), so it is not ACC-9 (a); with copies landing as {mode} lands them, {why}")


def _unordered_on_followed(program: Program, mode: str, facts: ModeAnalysis | None) -> tuple[str | None, list | None]:
    """ACC-20: why two conflicting accesses, one of them to a followed ref, may be unordered in some schedule
    under `mode`; None when the certified happens-before pass (DR-6) orders every such pair, which is what
    ACC-9's proof asks of race-free. With it, every such pair the certified pass lists (ACC-71), or None."""
    from semcheck.checker.properties.analysis import analysis_of

    facts = analysis_of(program, mode, facts)
    parts = None
    if mode == "hardware":  # the pass race-free reads under hardware: copies landing in parts (DR-9)
        parts, split = facts.whole.partial_arrivals
        if parts.mixed:
            return f"the copy at {parts.mixed[0].loc} may land in parts that semcheck does not model (DR-9)", None
        if facts.whole.grid_overlap is not None:  # GRID-4: the pass orders the grid's copies as the interpreter does
            return f"on a TPU {facts.whole.grid_overlap} (GRID-4)", None
        if parts.program is not program:
            facts = split.mode(mode)
    pre = facts.race_order
    if not pre.ordering.certified:
        return f"the happens-before pass cannot order the accesses alone ({pre.ordering.why})", None
    if pre.unrecorded:
        return f"semcheck could not tell which regions the copy at {pre.unrecorded[0].loc} touches", None
    pairs = pairs_on_followed(pre.ordering.candidates, program.followed)  # type: ignore[arg-type]
    if not pairs:
        return None, None
    if parts is not None and parts.program is not program:  # at the program's positions, not the split's (ACC-80)
        pairs = [tuple(e.at_pc(parts.origin(e.core, e.pc)) for e in pair) for pair in pairs]
    pair = pairs[0]
    return f"{pair[0].describe()} at {pair[0].loc} and {pair[1].describe()} at {pair[1].loc} may be unordered", pairs


def unordered_pairs(program: Program, mode: str, facts: ModeAnalysis | None = None) -> tuple[str | None, list | None]:
    """ACC-20's unordered pairs on followed elements under `mode`, as `_unordered_on_followed` gives them (ACC-80)."""
    return _unordered_on_followed(program, mode, facts)


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
