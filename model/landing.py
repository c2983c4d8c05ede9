"""RUN-61: the write every run of an interpreter mode gives a read, where the semaphores do not order them.

A followed read (spec ACC-9) that a write of its element may race reads, in a run, whichever write landed last
before it. In the interpreter's modes where a write lands is fixed by the program, not by the schedule, for the
writes this module accepts, each at a position of the reading core:

* a store lands where its core runs it (only the reading core stores into its own memory);
* under `eager` a copy lands inside its `dma_start` (DMA-2): at its position, when the reading core issues it;
* under `on_wait` a copy's write half runs only in a task that a wait on its receive semaphore, on its destination
  core, pops (DMA-3, DMA-4, SEM-7: `dma.wait_once` is the one place a task runs, and pops only its own semaphore's
  queue on its own core). With no such wait between the copy's start and the read, it lands after the read. Where
  the copy is the one op that may have added to that semaphore by then (no other copy's half names it, no signal
  does, on another core or earlier on the reading core), the first wait for a positive count on it after the copy's
  start (for another core's copy: the first on the reading core) finds the count short, pops the copy's task and
  lands it there.

The read then sees the write that lands last before it in the reading core's order, the same in every run:
`landed_writers` names it per element (-1: none, the contents before any write). Anything else is undecided, a
reason: another core's copy under `eager` (it lands when that core starts it), a wait that may or may not pop a
copy's task, and every write under `hardware` (DMA-5: a half lands at any later moment, in parts, DR-9).
"""

from __future__ import annotations

import numpy as np

from semcheck.model.followed import FollowedRead, ValueFacts
from semcheck.model.ops import Access, DmaStart, Program, Signal, Wait
from semcheck.model.step import target_core

MODES = ("eager", "on_wait")


def write_index(facts: ValueFacts) -> dict[tuple, list[int]]:
    """Per followed element, the indices in `facts.writes` of the writes of it, in order."""
    index: dict[tuple, list[int]] = {}
    for k, w in enumerate(facts.writes):
        for element in w.elements:
            index.setdefault(element, []).append(k)
    return index


def landed_writers(program: Program, facts: ValueFacts, read: FollowedRead, mode: str,
                   index: dict[tuple, list[int]] | None = None) -> np.ndarray | str:
    """RUN-61: per element of `read` (in its order), the index in `facts.writes` of the write every run of `mode`
    gives it (-1: none, the contents before any write); or why that is not one write (a str). `index`: the facts'
    `write_index`."""
    if mode not in MODES:
        return f"under {mode} a copy lands at any moment, in parts (DMA-5, DR-9)"
    if index is None:
        index = write_index(facts)
    core, at = read.read
    out = []
    for element in read.elements:
        last, last_at = -1, -1
        for k in index.get(element, ()):
            landed = _lands_at(program, facts.writes[k].event, core, at, mode)
            if isinstance(landed, str):
                return landed
            if landed is not None and landed > last_at:
                last, last_at = k, landed
        out.append(last)
    return np.asarray(out, dtype=np.int64)


def candidate_writers(program: Program, facts: ValueFacts, read: FollowedRead, mode: str,
                      index: dict[tuple, list[int]] | None = None) -> list[tuple[int, ...]] | str:
    """ACC-77: per element of `read` (in its order), writes (indices in `facts.writes`, -1: none) one of which every
    run of `eager` lands last before it: the last write RUN-61 places on the reading core before the read, and every
    other core's copy of the element (it lands inside its `dma_start`, on that core, before or after the read, or
    before or after that write); or why a write is neither (a str). A superset: it orders nothing by the semaphores."""
    if mode != "eager":
        return f"under {mode} only RUN-61's one write is taken"
    if index is None:
        index = write_index(facts)
    core, at = read.read
    out = []
    for element in read.elements:
        last, last_at, floating = -1, -1, set()
        for k in index.get(element, ()):
            wcore, wpc = facts.writes[k].event
            if wcore != core and type(program.cores[wcore][wpc]) is DmaStart:
                floating.add(k)
                continue
            landed = _lands_at(program, facts.writes[k].event, core, at, mode)
            if isinstance(landed, str):
                return landed
            if landed is not None and landed > last_at:
                last, last_at = k, landed
        out.append(tuple(sorted({last, *floating})))
    return out


def _lands_at(program: Program, event: tuple[int, int], core: int, at: int, mode: str) -> int | None | str:
    """Where on `core` the write `event` lands, when before position `at` (None: after it, or never); else why
    that is not one position."""
    wcore, wpc = event
    op = program.cores[wcore][wpc]
    if type(op) is Access and wcore == core:
        return wpc if wpc < at else None
    if type(op) is not DmaStart:
        return f"the {op.describe()} at {op.loc} writes the element from another core"
    if wcore == core and wpc >= at:
        return None  # started after the read (its own read half is at its start)
    if mode == "eager":
        if wcore != core:
            return f"the copy at {op.loc} is another core's: it lands when that core starts it, maybe after the read"
        return wpc
    ops = program.cores[core]
    start = wpc + 1 if wcore == core else 0
    waits = [pc for pc in range(start, at) if type(ops[pc]) is Wait and ops[pc].sem == op.dst_sem]
    if not waits:
        return None  # its task runs only in a later wait: after the read
    if ops[waits[0]].value > 0 and _sole_contributor(program, event, core, waits[0]):
        return waits[0]
    return f"a wait at {ops[waits[0]].loc} may land the copy at {op.loc} before the read (DMA-4), or not"


def _sole_contributor(program: Program, event: tuple[int, int], core: int, wait: int) -> bool:
    """Whether the copy at `event` is the one op that may have added to its receive semaphore on `core` by the time
    `core` reaches its wait at position `wait`: no other copy's half and no signal lands on that semaphore (by its
    name) of `core` (SIG-1's target), on another core or before the wait on `core`."""
    copy = program.cores[event[0]][event[1]]
    sem = copy.dst_sem
    if copy.src_sem == sem and event[0] == core:
        return False
    for c, ops in enumerate(program.cores):
        for pc, op in enumerate(ops[:wait] if c == core else ops):
            if (c, pc) == event:
                continue
            if type(op) is DmaStart and ((op.dst_sem == sem and _lands_on(program, c, op, True) == core)
                                         or (op.src_sem == sem and c == core)):
                return False
            if type(op) is Signal and op.sem == sem and _lands_on(program, c, op, False) == core:
                return False
    return True


def _lands_on(program: Program, core: int, op, dma: bool) -> int | None:
    """The core a copy's write half or a signal of `core` lands on (SIG-1); None where it names none."""
    got = target_core(program, "eager", core, op.device, op.core, dma=dma)
    return got if type(got) is int else None


__all__ = ["MODES", "candidate_writers", "landed_writers", "write_index"]
