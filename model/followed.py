"""Values the lowering computed from data a kernel moves, and when they are facts (spec ACC-9).

The front end evaluates a kernel for all devices at once, in program order, and moves a copy's data
to its destination where the copy starts (`checker/frontend/scalar_state.py`). A value read from a
ref that copies write is then what one order of the writes gave. It is the value of every schedule
when (a) the program is race-free under the mode (every conflicting pair of accesses is ordered by
the semaphores in every schedule, DR-1) and (b) in one run of the mode, the last write before each
followed read of each element is the write the lowering took its value from. `misread` checks (b)
on the greedy run (RUN-3); the caller asks the race pass for (a).
"""

from __future__ import annotations

import dataclasses

from semcheck.model.fast import fast_run
from semcheck.model.ops import DmaMode, Loc, Program
from semcheck.model.scope import stack_slot

Element = tuple[int, str, int]  # (device, buffer label, flat index)


@dataclasses.dataclass(frozen=True)
class FollowedRead:
    """A load whose value the lowering followed: its `Access` and, per element, where it came from."""

    read: tuple[int, int]  # (core, pc) of the load's `Access`
    loc: Loc
    elements: tuple[Element, ...]
    writers: tuple[int, ...]  # per element: an index into `ValueFacts.writes`, or -1 (the launch's contents)


@dataclasses.dataclass(frozen=True)
class FollowedWrite:
    """A write of followed elements: a store's `Access` or a copy's `DmaStart` (its write half)."""

    event: tuple[int, int]  # (core, pc)
    loc: Loc
    elements: frozenset[Element]


@dataclasses.dataclass(frozen=True)
class ValueFacts:
    """ACC-9: what the lowering of a kernel read from refs that copies write."""

    reads: tuple[FollowedRead, ...]
    writes: tuple[FollowedWrite, ...]


@dataclasses.dataclass(frozen=True)
class Misread:
    """A followed read whose value one run of the mode gives otherwise, or does not reach (ACC-9)."""

    read: Loc
    write: Loc  # the write the run reads from, or the one the lowering took (whichever is a write)
    why: str
    reached: bool = True  # False: the run does not reach the read (it ended before, `stuck`)
    stuck: bool = False  # the run ended with a core unfinished: deadlocked or failed
    unreached: tuple[FollowedRead, ...] = ()  # with `reached` False: every followed read the run does not reach


class _Order:
    """Run observer: the position of each access and DMA start in the run (a copy's halves at its start)."""

    def __init__(self) -> None:
        self.when: dict[tuple[int, int], int] = {}

    def signal(self, *_: object) -> None:
        pass

    def wait(self, *_: object) -> None:
        pass

    def arrive(self, *_: object) -> None:
        pass

    def barrier(self, *_: object) -> None:
        pass

    def start(self, core: int, pc: int, _ident: object) -> None:
        self.when.setdefault((core, pc), len(self.when))

    def access(self, core: int, pc: int) -> None:
        self.when.setdefault((core, pc), len(self.when))


def misread(program: Program, facts: ValueFacts, mode: DmaMode) -> Misread | None:
    """ACC-9 (b): the first followed read whose last write in the greedy run of `mode` is not the one the
    lowering read from (else the first the run does not reach, `reached` False); None when the run reaches
    every one and each agrees.

    A copy's write half is placed at its start: in a race-free program a read conflicting with the half
    is ordered after the half exactly when it is ordered after the start (nothing but the start orders
    a half), so this order agrees with the halves' own on every pair the rule asks about.
    """
    order = _Order()
    outcome = fast_run(program, mode, record=False, observer=order)  # type: ignore[arg-type]
    stuck = outcome.kind != "completed"
    when = order.when
    by_element: dict[Element, list[int]] = {}
    for k, w in enumerate(facts.writes):
        for e in w.elements:
            by_element.setdefault(e, []).append(k)
    unreached: list[FollowedRead] = []
    for r in facts.reads:
        at = when.get(r.read)
        if at is None:
            unreached.append(r)
            continue
        for e, took in zip(r.elements, r.writers):
            before = [k for k in by_element.get(e, ()) if when.get(facts.writes[k].event, at + 1) < at]
            last = max(before, key=lambda k: when[facts.writes[k].event]) if before else -1
            if last != took:
                w = facts.writes[last if last >= 0 else took]
                if last < 0:
                    why = "the write the lowering read from comes after this read in a run"
                else:
                    why = ("in a run, this read comes after another write of the element than the one the lowering "
                           "read from")
                return Misread(r.loc, w.loc, why, True, stuck)
    if not unreached:
        return None
    first = unreached[0]
    return Misread(first.loc, first.loc, "the run ends before this read", False, stuck, tuple(unreached))


def reachable_read(reads: tuple[FollowedRead, ...], ends: tuple[int, ...]) -> FollowedRead | None:
    """ACC-19: the first of `reads` that some run may execute, given `ends`, the positions at which every
    maximal run of the program stops (S''s end, RUN-3 and RUN-9); None when no run executes any of them.

    A core at position p has executed its operations before p only, and no run takes a core past its
    position in `ends`, so a read at (core, pc) runs in some run only if pc < ends[core].
    """
    return next((r for r in reads if r.read[1] < ends[r.read[0]]), None)


def followed_labels(facts: ValueFacts) -> frozenset[str]:
    """The buffers whose elements the lowering followed (read or wrote)."""
    return frozenset(e[1] for r in facts.reads for e in r.elements) | frozenset(
        e[1] for w in facts.writes for e in w.elements)


def unordered_on_followed(pairs, labels: frozenset[str]):
    """ACC-20: the first of `pairs` (conflicting accesses, `model.access.AccessEvent`s, that the semaphores may
    leave unordered) of which an access touches a followed buffer; None when none does.

    ACC-9's proof needs only the pairs on the elements it follows: a race on other data changes no value
    the lowering followed (those values come only from followed refs, copies into them and the launch).

    ACC-44: a `run_scoped` buffer is matched by its site (BUF-15): under `hardware` an access names the site's
    stack slot, not the execution, and every execution of a site with a followed execution counts as followed."""
    slots = {stack_slot(label) for label in labels}
    return next((pair for pair in pairs if any(stack_slot(e.buffer[2]) in slots for e in pair)), None)
