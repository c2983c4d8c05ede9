"""The counters of the happens-before pass (spec DR-6, DR-7, DR-42, DR-43): one arrival on a semaphore
(`Signal`, its clock read through a rotation) and a counter's arrivals not yet consumed (`Counter`);
`model/hb_observers.py` keeps one per semaphore and core."""

from __future__ import annotations

import copy

import numpy as np

from semcheck.model.access_index import Pos
from semcheck.model.clock_rows import Sparse, join

class Signal:
    """One arrival on a counter: its amount, the clock of what happened before it, and its source.

    The clock is read through a rotation (DR-43): its entry for core `x` is `clock[x - shift]` (numpy's
    negative indices wrap), `clock` being the snapshot of row `src` of the observer's clocks that the
    arrival's operation took. `pos` is the operation whose happening implies the arrival: the `Signal`
    op, or (DR-7, `eager`) the DMA's start; None for a DMA half that arrives
    when it completes (`hardware`, and the async reading of `on_wait`).
    """

    __slots__ = ("inc", "clock", "shift", "src", "pos", "dma", "half")

    def __init__(self, inc: int, clock: np.ndarray, shift: int, src: int, pos: Pos | None, dma: Pos | None,
                 half: str | None) -> None:
        self.inc, self.clock, self.shift, self.src = inc, clock, shift, src
        self.pos, self.dma, self.half = pos, dma, half


def bare(s: Signal) -> Signal:
    """`s` without its clock, as a forced entry keeps it: `_late` asks only where it came from (DR-42)."""
    return Signal(s.inc, None, 0, -1, s.pos, s.dma, s.half)  # type: ignore[arg-type]


def merge(row: Sparse | np.ndarray, s: Signal, core: int, n: int) -> Sparse | np.ndarray:
    """`row` (core `core`'s clock) joined with `s`'s clock, rotated (DR-43): skipped when the clock is a
    snapshot of this very row, which has only grown since, except in its own entry, which is stale and
    never read; rotated in two slices rather than a rolled copy (only a dense row is rotated: a fold's).
    Returns the row to keep (`join`)."""
    shift, clock = s.shift, s.clock
    if not shift:
        if s.src != core:
            return join(row, clock, n)
        return row
    head = row[shift:]
    np.maximum(head, clock[:-shift], out=head)
    tail = row[:shift]
    np.maximum(tail, clock[-shift:], out=tail)
    return row


NEVER = np.iinfo(np.int32).max  # above every clock entry (clocks are int32: compared without a cast)


MANY = 64
"""Cores named in a counter's `first` past which it is kept as a row too (`Counter.knows_of_pending`)."""


class Counter:
    __slots__ = ("core", "arrived", "consumed", "last_wait", "pending", "forced", "chained", "first", "with_pos",
                 "max_inc", "num_cores", "first_row")

    def __init__(self, core: int, num_cores: int) -> None:
        self.core = core
        self.num_cores = num_cores
        self.arrived = 0  # total amount that has arrived in the run
        self.consumed = 0  # total the passed waits took
        self.last_wait: int | None = None  # pc of the last passed wait on this counter
        self.pending: list[Signal] = []  # arrivals not yet known to have preceded a wait of the counter
        # per passed wait that was ordered after some arrival it must consume: (pc, [[arrival, slack]]),
        # slack being how much more could arrive without that arrival before the wait still falls short
        self.forced: list[tuple[int, list[list]]] = []
        self.chained = False  # some pending arrival may be ordered after another (else none is)
        # of the pending arrivals that have an operation (`Signal.pos`): how many, and per core the
        # earliest position (an arrival knows of some of them iff its clock passes one of these); kept
        # per core that has one, so that a signal reads a few entries of its clock, not all (DR-42)
        self.with_pos = 0
        self.first: dict[int, int] = {}
        # `first` as a row over every core (no position: past any clock), once it names many cores: an
        # all-to-all's counter hears from every core, and reading its entries one by one per arrival
        # was quadratic in the cores
        self.first_row: np.ndarray | None = None
        self.max_inc = 0  # the largest pending amount

    def add(self, s: Signal) -> None:
        """Count `s` among the pending arrivals."""
        self.pending.append(s)
        if s.pos is not None:
            c, q = s.pos
            first = self.first
            if q < first.get(c, NEVER):
                first[c] = q
                if self.first_row is not None:
                    self.first_row[c] = q
                elif len(first) > MANY:
                    row = self.first_row = np.full(self.num_cores, NEVER, dtype=np.int32)
                    row[list(first)] = list(first.values())
            self.with_pos += 1
        if s.inc > self.max_inc:
            self.max_inc = s.inc

    def knows_of_pending(self, clock: np.ndarray, sh: int) -> bool:
        """Whether an arrival of clock `clock` (read `sh` cores back) passes the earliest position of some
        core's pending arrival with an operation (DR-6's chain test)."""
        row = self.first_row
        if row is None:
            return any(clock[c - sh] > q for c, q in self.first.items())
        if type(clock) is Sparse:  # (a sparse clock is never rotated: sh is 0, DR-45)
            return any(v > row[c] for c, v in clock.items())
        # clock[c - sh] for every core c, as the entries above read it
        return bool((np.roll(clock, sh) > row).any())

    def known_by(self, row: Sparse | np.ndarray, core: int, pc: int) -> bool:
        """Whether a wait of `core` about to run `pc`, whose clock is `row` (its own entry stale), knows some
        pending arrival with an operation has happened (DR-6's known arrivals, read off `first`)."""
        first = self.first
        q = first.get(core)
        if q is not None and q < pc:
            return True
        if type(row) is Sparse:  # (a sparse row names few cores: read those)
            return any(c != core and v > first.get(c, NEVER) for c, v in row.items())
        if self.first_row is None:
            return any(c != core and row[c] > q for c, q in first.items())
        above = row > self.first_row
        above[core] = False
        return bool(above.any())

    def copied(self) -> Counter:
        """A copy whose changes leave this one as it is (DR-38): an arrival is never changed once made,
        a forced entry's slack is."""
        c = copy.copy(self)
        c.pending = list(self.pending)
        c.forced = [(pc, [list(e) for e in entries]) for pc, entries in self.forced]
        c.first = dict(self.first)
        c.first_row = None if self.first_row is None else self.first_row.copy()
        return c

    def reset(self, pending: list[Signal]) -> None:
        self.pending = []
        self.with_pos = 0
        self.max_inc = 0
        self.first = {}
        self.first_row = None
        for s in pending:
            self.add(s)
        if not pending:
            self.chained = False
