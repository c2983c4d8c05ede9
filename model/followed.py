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
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from semcheck.model.fast import fast_run
from semcheck.model.ops import DmaMode, Loc, Program
from semcheck.model.scope import stack_slot

Element = tuple[int, str, int]  # (device, buffer label, flat index)


class Flat:
    """ACC-53: an immutable sequence of ints held as one read-only int64 array (a read's writers, per element):
    iterates, compares and hashes as the tuple of its ints, and costs one array, not an object per int."""

    __slots__ = ("array",)

    def __init__(self, values: Any) -> None:
        a = np.array(values, dtype=np.int64).reshape(-1)
        a.flags.writeable = False
        self.array = a

    def __len__(self) -> int:
        return int(self.array.size)

    def __iter__(self) -> Iterator[int]:
        return iter(self.array.tolist())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Flat):
            return bool(np.array_equal(self.array, other.array))
        if isinstance(other, tuple):
            return tuple(self) == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"Flat({self.array.tolist()!r})"


class Elements:
    """ACC-53: elements of one buffer on one device, `(device, label, i)` for each flat index `i` of `flat` (a
    `Flat`, in the access's order): what `FollowedRead.elements` and `FollowedWrite.elements` hold, one array
    however many elements a copy moves. Iterates as the `Element` tuples; equal to another `Elements` of the same
    buffer, device and indices in the same order (a write's are sorted and distinct: `Elements.of_set`)."""

    __slots__ = ("device", "label", "flat")

    def __init__(self, device: int, label: str, flat: Any) -> None:
        self.device, self.label, self.flat = int(device), label, flat if isinstance(flat, Flat) else Flat(flat)

    @classmethod
    def of_set(cls, device: int, label: str, flat: Any) -> Elements:
        """The set of those elements: sorted, each once (a write's elements compare as a set)."""
        return cls(device, label, np.unique(np.asarray(flat, dtype=np.int64)))

    def __len__(self) -> int:
        return len(self.flat)

    def __iter__(self) -> Iterator[Element]:
        return ((self.device, self.label, i) for i in self.flat)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Elements):
            return (self.device, self.label) == (other.device, other.label) and self.flat == other.flat
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.device, self.label, self.flat))

    def __repr__(self) -> str:
        return f"Elements({self.device}, {self.label!r}, {self.flat.array.tolist()!r})"


def _groups(elements: Iterable[Element]) -> list[tuple[tuple[int, str], np.ndarray, np.ndarray]]:
    """`elements` by buffer: per (device, label), the flat indices and where each is among `elements`."""
    if isinstance(elements, Elements):
        flat = elements.flat.array
        return [((elements.device, elements.label), flat, np.arange(flat.size))] if flat.size else []
    by: dict[tuple[int, str], tuple[list[int], list[int]]] = {}
    for at, (device, label, i) in enumerate(elements):
        got = by.setdefault((int(device), label), ([], []))
        got[0].append(int(i))
        got[1].append(at)
    return [(key, np.asarray(flat, dtype=np.int64), np.asarray(at, dtype=np.int64)) for key, (flat, at) in by.items()]


@dataclasses.dataclass(frozen=True)
class FollowedRead:
    """A load whose value the lowering followed: its `Access` and, per element, where it came from."""

    read: tuple[int, int]  # (core, pc) of the load's `Access`
    loc: Loc
    elements: Iterable[Element]  # an `Elements` (ACC-53), or a tuple of `Element`s
    writers: Any  # per element: an index into `ValueFacts.writes`, or -1 (the launch's contents); a `Flat` or a tuple
    # ACC-71: in a lowering by a racy read's case, the values this read was given, per element, and which of them
    # are the interpreter's fill of uninitialised memory: (values, initial); None: the lowering's own values
    pinned: Any = dataclasses.field(default=None, compare=False)


@dataclasses.dataclass(frozen=True)
class FollowedWrite:
    """A write of followed elements: a store's `Access` or a copy's `DmaStart` (its write half)."""

    event: tuple[int, int]  # (core, pc)
    loc: Loc
    elements: Iterable[Element]  # an `Elements` (ACC-53: `Elements.of_set`), or a frozenset of `Element`s
    # ACC-62: what the write left in its elements (aligned with an `Elements`); None: not recorded
    values: WrittenValues | None = dataclasses.field(default=None, compare=False)


class WrittenValues:
    """ACC-62: the values a write left in its elements, in its `Elements`' order, and which of them the lowering
    knows (`known`); two writes agree on an element when both know it and hold the same value there."""

    __slots__ = ("values", "known")

    def __init__(self, values: np.ndarray, known: np.ndarray) -> None:
        self.values, self.known = values, np.asarray(known, dtype=bool)

    def at(self, elements: Elements, flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The values at flat indices `flat` (each one of `elements`') and whether each is known."""
        pos = np.searchsorted(elements.flat.array, flat)
        return self.values[pos], self.known[pos]


@dataclasses.dataclass(frozen=True)
class ValueFacts:
    """ACC-9: what the lowering of a kernel read from refs that copies write."""

    reads: tuple[FollowedRead, ...]
    writes: tuple[FollowedWrite, ...]
    offsets: tuple[int, ...] = ()  # ACC-71: per core, where the kernel's body starts in its launched program


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


def misread(program: Program, facts: ValueFacts, mode: DmaMode, skip: frozenset[int] = frozenset()) -> Misread | None:
    """ACC-9 (b): the first followed read whose last write in the greedy run of `mode` is not the one the
    lowering read from (else the first the run does not reach, `reached` False); None when the run reaches
    every one and each agrees.

    A copy's write half is placed at its start: in a race-free program a read conflicting with the half
    is ordered after the half exactly when it is ordered after the start (nothing but the start orders
    a half), so this order agrees with the halves' own on every pair the rule asks about. `skip`: the reads (by
    index) whose value every run of the mode gives otherwise (ACC-71, RUN-61).
    """
    order = _Order()
    outcome = fast_run(program, mode, record=False, observer=order)  # type: ignore[arg-type]
    if skip:
        facts = dataclasses.replace(facts, reads=tuple(r for j, r in enumerate(facts.reads) if j not in skip))
    return misread_in(facts, order.when, outcome.kind != "completed")


def misread_in(facts: ValueFacts, when: dict[tuple[int, int], int], stuck: bool,
               landed: dict[tuple[int, int], int] | None = None, same_values: bool = False) -> Misread | None:
    """`misread` of a run given by `when`, the position in the run of each event it executes (`stuck`: the run
    ended with a core unfinished). `landed` (ACC-61): where each write lands in the run, when that is not
    its event's position in `when` (a copy's write half, which its mode lands at the start or later). With
    `same_values` (ACC-62), a read whose last write is another than the lowering's but left the value the
    lowering's left (both known) agrees."""
    last, unreached = _last_writes(facts, when, when if landed is None else landed)
    for j, r in enumerate(facts.reads):
        if j not in last:
            continue
        took = np.asarray(r.writers.array if isinstance(r.writers, Flat) else list(r.writers), dtype=np.int64)
        n = min(took.size, last[j].size)  # (element and writer paired, as `zip` pairs them)
        off = np.flatnonzero(last[j][:n] != took[:n])
        if off.size and same_values:
            off = off[~_same_values(facts, r, off, last[j][off], took[off])]
        if off.size:
            got, lowered = int(last[j][off[0]]), int(took[off[0]])
            w = facts.writes[got if got >= 0 else lowered]
            if got < 0:
                why = "the write the lowering read from comes after this read in a run"
            else:
                why = ("in a run, this read comes after another write of the element than the one the lowering "
                       "read from")
            return Misread(r.loc, w.loc, why, True, stuck)
    if not unreached:
        return None
    first = unreached[0]
    return Misread(first.loc, first.loc, "the run ends before this read", False, stuck, tuple(unreached))


def _same_values(facts: ValueFacts, r: FollowedRead, at: np.ndarray, got: np.ndarray, took: np.ndarray) -> np.ndarray:
    """ACC-62: per position `at` of read `r`'s elements, whether write `got` left there the value write `took` (the
    lowering's) left, both known (False where either is the launch's contents or not recorded so)."""
    same = np.zeros(at.size, dtype=bool)
    if not isinstance(r.elements, Elements):
        return same
    flat = r.elements.flat.array[at]
    for i in range(at.size):
        g, t = int(got[i]), int(took[i])
        if g < 0 or t < 0:
            continue
        wg, wt = facts.writes[g], facts.writes[t]
        if wg.values is None or wt.values is None or not isinstance(wg.elements, Elements) \
                or not isinstance(wt.elements, Elements):
            continue
        key = (r.elements.device, r.elements.label)
        if (wg.elements.device, wg.elements.label) != key or (wt.elements.device, wt.elements.label) != key:
            continue
        vg, kg = wg.values.at(wg.elements, flat[i:i + 1])
        vt, kt = wt.values.at(wt.elements, flat[i:i + 1])
        same[i] = bool(kg[0] and kt[0] and vg[0] == vt[0])
    return same


def _last_writes(facts: ValueFacts, when: dict[tuple[int, int], int], landed: dict[tuple[int, int], int]
                 ) -> tuple[dict[int, np.ndarray], list[FollowedRead]]:
    """RUN-56: per read the run reaches (by its index in `facts.reads`), per element the write whose event is the
    last before the read's in the run (`when`), or -1 (none: the launch's contents); and the reads it does not
    reach. One sweep per buffer over its writes and reads in the run's order, an array of its elements' last
    writes updated by slices, so it costs what the facts hold, not an object per element. A write at the read's
    own event (a copy's read and write halves, a `+=`) is not before it; of two writes at one position (none
    in a lowering: each write is its own event), the first listed is the last, as a `max` over them keeps it."""
    events: dict[tuple[int, str], list[tuple[tuple[int, int, int], np.ndarray, np.ndarray | None, int]]] = {}
    for k, w in enumerate(facts.writes):
        t = landed.get(w.event)
        if t is None:  # never before any read of the run
            continue
        for key, flat, _ in _groups(w.elements):
            events.setdefault(key, []).append(((t, 1, -k), flat, None, k))
    last: dict[int, np.ndarray] = {}
    unreached: list[FollowedRead] = []
    for j, r in enumerate(facts.reads):
        t = when.get(r.read)
        if t is None:
            unreached.append(r)
            continue
        groups = _groups(r.elements)
        last[j] = np.full(sum(int(f.size) for _, f, _ in groups), -1, dtype=np.int64)
        for key, flat, at in groups:
            events.setdefault(key, []).append(((t, 0, j), flat, at, j))
    for group in events.values():
        group.sort(key=lambda e: e[0])
        now = np.full(1 + max(int(f.max()) for _, f, _, _ in group if f.size), -1, dtype=np.int64)
        for _, flat, at, k in group:
            if at is None:
                now[flat] = k
            else:
                last[k][at] = now[flat]
    return last, unreached


def reachable_read(reads: tuple[FollowedRead, ...], ends: tuple[int, ...]) -> FollowedRead | None:
    """ACC-19: the first of `reads` that some run may execute, given `ends`, the positions at which every
    maximal run of the program stops (S''s end, RUN-3 and RUN-9); None when no run executes any of them.

    A core at position p has executed its operations before p only, and no run takes a core past its
    position in `ends`, so a read at (core, pc) runs in some run only if pc < ends[core].
    """
    return next((r for r in reads if r.read[1] < ends[r.read[0]]), None)


def followed_labels(facts: ValueFacts) -> frozenset[str]:
    """The buffers whose elements the lowering followed (read or wrote)."""
    return frozenset(key[1] for x in (*facts.reads, *facts.writes) for key, _, _ in _groups(x.elements))


def unordered_on_followed(pairs, labels: frozenset[str]):
    """ACC-20: the first of `pairs` (conflicting accesses, `model.access.AccessEvent`s, that the semaphores may
    leave unordered) of which an access touches a followed buffer; None when none does.

    ACC-9's proof needs only the pairs on the elements it follows: a race on other data changes no value
    the lowering followed (those values come only from followed refs, copies into them and the launch).

    ACC-44: a `run_scoped` buffer is matched by its site (BUF-15): under `hardware` an access names the site's
    stack slot, not the execution, and every execution of a site with a followed execution counts as followed."""
    return next(unordered_pairs_on_followed(pairs, labels), None)


def unordered_pairs_on_followed(pairs, labels: frozenset[str]) -> Iterator:
    """ACC-20, ACC-71: every one of `pairs` of which an access touches a followed buffer (by site, ACC-44)."""
    slots = {stack_slot(label) for label in labels}
    return (pair for pair in pairs if any(stack_slot(e.buffer[2]) in slots for e in pair))
