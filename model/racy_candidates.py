"""ACC-80: under `hardware`, the values a racy read of a followed element may take on a TPU.

A followed load that some write of its element may race (ACC-20) reads, on a TPU, whatever the element holds when
the load runs: the contents before any write, or what one of the element's writes left (DMA-5, DR-9: a copy lands
at any moment after its start, in pieces). **HW** semcheck assumes a piece is never finer than one 32-bit word of
the destination (ACC-80 argues it), so an element of at most 4 bytes holds, whenever it is read, the whole value
of one write or the contents before any; the elements of one read, and two reads of one element, are taken
independently. The candidates of an element are then the values every write of it the lowering recorded left, and
its contents before any write unless a store of the reading core comes before the load (a core sees its own
stores in program order: whatever it reads then is that store's value or a later write's). A candidate set that is
not known (a write whose value the lowering does not know, contents before any write, an element wider than 4
bytes, a write the lowering did not record) is a reason, and the read is not decided by cases.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from semcheck.model.followed import Elements, FollowedRead, ValueFacts
from semcheck.model.followed_runs import untied_write
from semcheck.model.landing import write_index
from semcheck.model.ops import Access, Loc, Program
from semcheck.model.scope import stack_slot


@dataclasses.dataclass(frozen=True)
class Site:
    """A racy load: its key in the lowering's pins `(lane, body position)`, its line, its index in
    `ValueFacts.reads`, and per element (in the load's order) the values a TPU may give it, the earliest write's
    first."""

    key: tuple[int, int]
    loc: Loc
    read: int
    choices: tuple[tuple[Any, ...], ...]

    def cases(self) -> int:
        n = 1
        for c in self.choices:
            n *= len(c)
        return n


def racy_sites(program: Program, facts: ValueFacts, pairs: list) -> list[Site] | str:
    """ACC-80: every followed load a pair of `pairs` (the unordered conflicting pairs on followed buffers, one of
    each orbit of the rotations, DR-5) makes racy, with its candidates; a load is racy where it is at a pair's
    load's position and line on any device (rotations keep positions), or reads a buffer two writes of a pair
    race on. Else why the candidates are not known (a str)."""
    why = untied_write(program, facts)
    if why is not None:
        return why
    at, written = set(), set()
    for pair in pairs:
        if all(e.write for e in pair):
            written.update(stack_slot(e.buffer[2]) for e in pair)
            continue
        reads = [e for e in pair if not e.write and e.half is None]
        if len(reads) != 1:
            a, b = pair
            return f"{a.describe()} at {a.loc} and {b.describe()} at {b.loc} are not a load and a write"
        at.add((reads[0].pc, reads[0].loc.file, reads[0].loc.line))
    index = write_index(facts)
    sites = []
    for j, r in enumerate(facts.reads):
        labels = {stack_slot(e[1]) for e in r.elements}
        if (r.read[1], r.loc.file, r.loc.line) not in at and not labels & written:
            continue
        if type(program.cores[r.read[0]][r.read[1]]) is not Access:
            if labels & written:
                return f"the copy at {r.loc} reads a buffer whose writes race"
            continue  # (a copy's read half at the position of another core's racy load is no load)
        got = site_of(program, facts, j, index)
        if isinstance(got, str):
            return got
        sites.append(got)
    return sites


def site_of(program: Program, facts: ValueFacts, j: int, index: dict | None = None) -> Site | str:
    """The candidates of read `j` of `facts` (ACC-80), or why they are not known."""
    r = facts.reads[j]
    if index is None:
        index = write_index(facts)
    core, pc = r.read
    offset = facts.offsets[core] if len(facts.offsets) > core else 0
    choices = []
    for device, label in {e[:2] for e in _elements(r)}:
        other = next((w for w in facts.writes if _of_slot(w, device, label)), None)
        if other is not None:  # BUF-15: on a TPU the executions of a run_scoped site share its stack slot
            return (f"the write at {other.loc} is of another execution of the run_scoped buffer {r.loc} reads, whose "
                    "stack slot it shares on a TPU (BUF-15, ACC-44)")
    for element in _elements(r):
        values, stored_before = {}, False  # (in the order of the writes: the earliest first)
        for k in index.get(element, ()):
            w = facts.writes[k]
            ours = w.event[0] == core and type(program.cores[core][w.event[1]]) is Access
            if ours and w.event[1] > pc:
                continue  # a later store of the reading core: the load ran before it
            stored_before |= ours
            v = _left(w, element)
            if v is None:
                return f"the write at {w.loc} leaves a value semcheck does not know where {r.loc} reads"
            if np.asarray(v).dtype.itemsize > 4:
                return f"the read at {r.loc} reads elements wider than the 32-bit word a DMA piece keeps whole"
            values.setdefault(v.item() if hasattr(v, "item") else v, None)
        if not stored_before:
            return (f"the read at {r.loc} may read {element[1]}'s contents before any write, which on a TPU are "
                    "whatever the memory held (uninitialised memory is not enumerable)")
        choices.append(tuple(values))
    return Site((core, pc - offset), r.loc, j, tuple(choices))


def _of_slot(w: Any, device: int, label: str) -> bool:
    """Whether write `w` writes, on `device`, another execution of `label`'s run_scoped site."""
    return any(d == device and other != label and stack_slot(other) == stack_slot(label)
               for d, other in {e[:2] for e in w.elements})


def _elements(r: FollowedRead) -> list[tuple]:
    return list(r.elements)


def _left(w: Any, element: tuple) -> Any:
    """The value write `w` left at `element`, when the lowering knows it (ACC-62)."""
    if w.values is None or not isinstance(w.elements, Elements) or \
            (w.elements.device, w.elements.label) != element[:2]:
        return None
    v, known = w.values.at(w.elements, np.asarray([element[2]], dtype=np.int64))
    return v[0] if known[0] else None


def given_values(program: Program, facts: ValueFacts, pairs: list) -> tuple[str | None, frozenset[int]]:
    """ACC-80: in a lowering of one case, whether every racy load was given values among its candidates: (why
    not, the indices of the racy loads in `facts.reads`, which ACC-9 (b) does not ask)."""
    sites = racy_sites(program, facts, pairs)
    if isinstance(sites, str):
        return sites, frozenset()
    for s in sites:
        r = facts.reads[s.read]
        if r.pinned is None:
            return f"the read at {r.loc} races a write and was given no value (ACC-80)", frozenset()
        given, initial = r.pinned
        if np.asarray(initial).any() or any(given[i] not in c for i, c in enumerate(s.choices)):
            return f"the read at {r.loc} was given a value no TPU run gives it (ACC-80)", frozenset()
    return None, frozenset(s.read for s in sites)


__all__ = ["Site", "given_values", "racy_sites", "site_of"]
