# The happens-before pass (model/happens_before.py) as it was before DR-37 and DR-38, kept unchanged but for
# DR-6's known starts under `eager` (a wait whose surplus covers every arrival still takes them), as the
# reference that tests/test_happens_before_reference.py holds the current pass to.
"""Happens-before over every schedule, from one run (spec DR-6, DR-7).

One greedy run (RUN-3) with an observer computes vector clocks: a core's
clock counts, per core, the operations known to have happened before its
current position. Program order, a DMA's start before its halves, a read
half before its write half and a barrier's participants before its pass are
orderings every schedule has. A wait is ordered after a signal it *must*
consume: one without which the signals that could have arrived cannot make up
the count (DR-6 says why this is sound, and which check of the run's arrival
order makes it so: `certified`). The relation may miss orderings; it never
invents one.

Accesses are checked as the run reaches them (a kernel access when its core
runs it, a DMA half at its start): accesses of one buffer with one region in a
chain, each against the last write and the reads since (the order being
transitive, a race in the chain shows as one of these pairs), and accesses
with different overlapping regions pair by pair. A conflicting pair the
relation does not order is a *candidate*, which the restricted runs of DR-2
then decide; when there is none the program is race-free without a single
restricted run.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable
from typing import Literal

import numpy as np

from semcheck.model.access import AccessEvent, box_sweep, conflicts
from semcheck.model.errors import ModelBug
from semcheck.model.fast import fast_run
from semcheck.model.quotient import Quotient
from semcheck.model.ops import Barrier, DmaMode, DmaStart, Program
from semcheck.model.step import target_core

Pair = tuple[AccessEvent, AccessEvent]
Pos = tuple[int, int]  # (core, pc) of an operation
Arrival = Literal["start", "completion"]


@dataclasses.dataclass(frozen=True)
class Ordering:
    """What the happens-before pass found (DR-6)."""

    certified: bool  # the relation is sound: every pair it orders is ordered in every schedule
    why: str  # when not certified: what broke the certificate
    candidates: tuple[Pair, ...]  # conflicting pairs the relation does not order (earlier access first)


class _Signal:
    """One arrival on a counter: its amount, the clock of what happened before it, and its source.

    `pos` is the operation whose happening implies the arrival: the `Signal`
    op, or (DR-7, `eager`) the DMA's start; None for a DMA half that arrives
    when it completes (`hardware`, and the async reading of `on_wait`).
    """

    __slots__ = ("inc", "clock", "pos", "dma", "half")

    def __init__(self, inc: int, clock: np.ndarray, pos: Pos | None, dma: Pos | None, half: str | None) -> None:
        self.inc, self.clock, self.pos, self.dma, self.half = inc, clock, pos, dma, half


_NEVER = np.iinfo(np.int32).max  # above every clock entry (clocks are int32: compared without a cast)


class _Counter:
    __slots__ = ("core", "arrived", "consumed", "last_wait", "pending", "forced", "chained", "first", "with_pos",
                 "max_inc", "num_cores")

    def __init__(self, core: int, num_cores: int) -> None:
        self.core = core
        self.num_cores = num_cores
        self.arrived = 0  # total amount that has arrived in the run
        self.consumed = 0  # total the passed waits took
        self.last_wait: int | None = None  # pc of the last passed wait on this counter
        self.pending: list[_Signal] = []  # arrivals not yet known to have preceded a wait of the counter
        # per passed wait that was ordered after some arrival it must consume: (pc, [[arrival, slack]]),
        # slack being how much more could arrive without that arrival before the wait still falls short
        self.forced: list[tuple[int, list[list]]] = []
        self.chained = False  # some pending arrival may be ordered after another (else none is)
        # of the pending arrivals that have an operation (`_Signal.pos`): how many, and per core the
        # earliest position (an arrival knows of some of them iff its clock passes one of these)
        self.with_pos = 0
        self.first: np.ndarray | None = None
        self.max_inc = 0  # the largest pending amount

    def add(self, s: _Signal) -> None:
        """Count `s` among the pending arrivals."""
        self.pending.append(s)
        if s.pos is not None:
            if self.first is None:
                self.first = np.full(self.num_cores, _NEVER, dtype=np.int32)
            c, q = s.pos
            first = self.first
            if q < first[c]:
                first[c] = q
            self.with_pos += 1
        if s.inc > self.max_inc:
            self.max_inc = s.inc

    def reset(self, pending: list[_Signal]) -> None:
        self.pending = []
        self.with_pos = 0
        self.max_inc = 0
        if self.first is not None:
            self.first.fill(_NEVER)
        for s in pending:
            self.add(s)
        if not pending:
            self.chained = False


class _Chain:
    """Accesses of one buffer region so far: the last write and the reads since it."""

    __slots__ = ("write", "reads")

    def __init__(self) -> None:
        self.write: AccessEvent | None = None
        self.reads: list[AccessEvent] = []


class _Observer:
    """Vector clocks over one fast run (DR-6) and the checks of each access as the run reaches it."""

    def __init__(self, program: Program, events: Iterable[AccessEvent], arrival: Arrival,
                 totals: dict[tuple, int] | None = None) -> None:
        self.program = program
        self.arrival = arrival
        # counters decided against everything that ever arrives on them rather than the run's order
        # (DR-6: their arrivals came in an order no certificate covers); their totals, from an earlier run
        self.totals = totals or {}
        self.broken_counters: set[tuple] = set()
        n = program.topology.num_cores
        self.clock = np.zeros((n, n), dtype=np.int32)  # row c: what core c knows (its own entry is stale)
        self.counters: dict[tuple, _Counter] = {}
        self.dma_pos: dict[int, Pos] = {}  # DMA ident -> its start
        self.dma_clock: dict[int, np.ndarray] = {}
        self.done: dict[tuple[Pos, str], list[Pos]] = {}  # (start, half) -> waits known to follow the half
        self.arrivals: dict[tuple[int, str, int], np.ndarray] = {}
        self.broken = ""
        self.candidates: list[Pair] = []
        self.at: dict[Pos, list[AccessEvent]] = defaultdict(list)
        self.chain_of: dict[int, _Chain] = {}
        self.partners: dict[int, list[AccessEvent]] = defaultdict(list)
        self.seen: set[int] = set()
        self.events = list(events)
        self._index(self.events)

    def _index(self, events: list[AccessEvent]) -> None:
        """Chains of accesses with one region; partners for overlapping different regions (ACC-2)."""
        by_buffer: dict = defaultdict(lambda: defaultdict(list))
        for e in events:
            by_buffer[e.buffer][(e.region.box, e.region.exact)].append(e)
        for regions in by_buffer.values():
            if not any(e.write for group in regions.values() for e in group):
                continue
            keys = list(regions)
            for key in keys:
                chain = _Chain()
                for e in regions[key]:
                    self.at[(e.core, e.pc)].append(e)
                    self.chain_of[id(e)] = chain
            # different regions: only those whose first dimensions overlap are compared
            for k1, k2 in box_sweep(keys, lambda k: k[0]):
                r1, r2 = regions[k1][0].region, regions[k2][0].region
                if not r1.overlaps(r2):
                    continue
                for a in regions[k1]:
                    for b in regions[k2]:
                        if conflicts(a, b, "hardware"):
                            self.partners[id(a)].append(b)
                            self.partners[id(b)].append(a)

    # --- clocks ---------------------------------------------------------------

    def _snapshot(self, core: int, executed: int) -> np.ndarray:
        row = self.clock[core].copy()
        row[core] = executed
        return row

    def _knows(self, core: int, pc: int, what: Pos) -> bool:
        """Whether `core`, about to run `pc`, knows that operation `what` has happened."""
        c, q = what
        return q < pc if c == core else bool(self.clock[core, c] > q)

    def _knows_done(self, core: int, pc: int, start: Pos, half: str) -> bool:
        return any(self._knows(core, pc, w) for w in self._done(start, half))

    def _done(self, start: Pos, half: str) -> list[Pos]:
        """The waits known to follow the half of the copy started at `start`."""
        return self.done.get((start, half), [])

    def _record_done(self, start: Pos, half: str, waiter: Pos) -> None:
        self.done.setdefault((start, half), []).append(waiter)

    def _after(self, later: _Signal, earlier: _Signal) -> bool:
        """Whether the relation orders `later`'s arrival after `earlier`'s."""
        if earlier.pos is not None:
            return bool(later.clock[earlier.pos[0]] > earlier.pos[1])
        if later.dma == earlier.dma and earlier.half == "read" and later.half == "write":
            return True
        return any(later.clock[c] > q for c, q in self._done(earlier.dma, earlier.half))

    def _known(self, core: int, pc: int, s: _Signal) -> bool:
        if s.pos is not None:
            return self._knows(core, pc, s.pos)
        return self._knows_done(core, pc, s.dma, s.half)

    # --- the observer protocol (model/fast.py) -------------------------------

    def signal(self, counter: tuple, inc: int, source: tuple) -> None:
        ctr = self.counters.get(counter)
        if ctr is None:
            ctr = self.counters[counter] = _Counter(counter[1], self.clock.shape[1])
        s = self._arrival(counter, inc, source)
        if (ctr.last_wait is not None and counter not in self.totals and counter not in self.broken_counters
                and not s.clock[ctr.core] > ctr.last_wait):
            self._late(ctr, counter, s)
        ctr.arrived += inc
        if ctr.with_pos and not ctr.chained and bool((s.clock > ctr.first).any()):
            # (a pending copy half known to follow another is not looked for: treating the two as
            # unordered only orders fewer waits, DR-6)
            ctr.chained = True
        ctr.add(s)

    def _late(self, ctr: _Counter, counter: tuple, t: _Signal) -> None:
        """DR-6: arrival `t` came after waits of the counter it is not ordered after; in another
        schedule it may come before them, so each arrival such a wait was ordered after must still be
        one it cannot pass without (unless `t` itself needs that arrival first)."""
        for pc, entries in reversed(ctr.forced):
            if t.clock[ctr.core] > pc:
                break  # t follows this wait, and so every earlier one
            for entry in entries:
                if not self._after(t, entry[0]):
                    entry[1] -= t.inc
                    if entry[1] <= 0:
                        self.broken_counters.add(counter)
                        if not self.broken:
                            self.broken = (f"an arrival on core {ctr.core}'s semaphore {counter[0]!r} is not "
                                           f"ordered after the wait at position {pc}, and could satisfy it in its "
                                           "stead")

    def _arrival(self, counter: tuple, inc: int, source: tuple) -> _Signal:
        if type(source[1]) is str:  # a DMA half
            ident, half = source
            start = self.dma_pos[ident]
            return _Signal(inc, self.dma_clock[ident], start if self.arrival == "start" else None, start, half)
        core, pc = source
        return _Signal(inc, self._snapshot(core, pc + 1), (core, pc), None, None)

    def wait(self, core: int, pc: int, counter: tuple, value: int) -> None:
        ctr = self.counters.get(counter)
        if ctr is None:  # a wait for nothing (value 0)
            ctr = self.counters[counter] = _Counter(core, self.clock.shape[1])
        need = ctr.consumed + value
        ctr.consumed = need
        ctr.last_wait = pc
        pending = ctr.pending
        if not pending:
            return
        arrived = self.totals.get(counter, ctr.arrived)
        if not ctr.chained and arrived - need >= ctr.max_inc and not (
                self.arrival == "start" and any(s.pos is not None and self._knows(core, pc, s.pos) for s in pending)):
            # no arrival is needed yet (none follows another, and the surplus covers any one); under `eager` one
            # whose start the waiter knows has signalled already and is taken below (DR-6, ERR-34)
            return
        if len(pending) == 1:  # the common case: one arrival, known already or needed now
            s = pending[0]
            if self._known(core, pc, s):
                known, forced = pending, ()
                ctr.reset([])
            elif arrived - s.inc < need:
                known, forced = (), pending
                ctr.reset([])
                ctr.forced.append((pc, [[s, need - arrived + s.inc]]))
            else:
                return
        else:
            known, cands = [], []
            for s in pending:
                (known if self._known(core, pc, s) else cands).append(s)
            forced, entries = [], []
            for s in cands:
                # how far the arrivals that could come without s fall short of the wait (DR-6)
                short = need - (arrived - s.inc)
                if short <= 0 and ctr.chained:
                    short += sum(t.inc for t in cands if t is not s and self._after(t, s))
                if short > 0:
                    forced.append(s)
                    entries.append([s, short])
            if entries:
                ctr.forced.append((pc, entries))
            if known or forced:
                gone = {id(f) for f in forced}
                ctr.reset([s for s in cands if id(s) not in gone] if forced else cands)
        row = self.clock[core]
        for s in forced:  # a known arrival's past is already in the core's clock
            np.maximum(row, s.clock, out=row)
        for group in (known, forced):
            for s in group:
                if s.dma is not None:
                    # the wait follows the half in every schedule (DR-6); under `eager` it takes the
                    # copy's clock too, as the interpreter's detector does (DR-7)
                    self._record_done(s.dma, s.half, (core, pc))
                    if s.half == "write":
                        self._record_done(s.dma, "read", (core, pc))

    def start(self, core: int, pc: int, ident: int) -> None:
        self.dma_pos[ident] = (core, pc)
        self.dma_clock[ident] = self._snapshot(core, pc + 1)
        self._reach(core, pc)

    def arrive(self, core: int, pc: int, name: str, k: int) -> None:
        key = (core, name, k)
        if key not in self.arrivals:
            self.arrivals[key] = self._snapshot(core, pc)

    def barrier(self, core: int, pc: int, name: str, k: int, participants: tuple[int, ...]) -> None:
        row = self.clock[core]
        for p in participants:
            snap = self.arrivals.get((p, name, k))
            if snap is None:  # p stands at the barrier and has not run since it got there
                snap = self._snapshot(p, self._barrier_position(p, name, k))
            np.maximum(row, snap, out=row)

    def _barrier_position(self, core: int, name: str, k: int) -> int:
        seen = 0
        for pc, op in enumerate(self.program.cores[core]):
            if type(op) is Barrier and op.name == name:
                seen += 1
                if seen == k:
                    return pc
        raise ModelBug(f"core {core} passed barrier {name!r} #{k} it does not have")

    def access(self, core: int, pc: int) -> None:
        self._reach(core, pc)

    # --- accesses ----------------------------------------------------------------

    def _ordered(self, core: int, pc: int, y: AccessEvent, row: np.ndarray | None = None) -> bool:
        """Whether access `y` (reached earlier in the run) is ordered before what `core` does at `pc`
        (`row`: the core's clock, when it is not one this observer keeps)."""
        if (y.core, y.pc) == (core, pc):
            return True  # the two halves of one DMA (ACC-2)
        if row is None:
            if y.half is None:
                return self._knows(core, pc, (y.core, y.pc))
            return self._knows_done(core, pc, (y.core, y.pc), y.half)
        whats = [(y.core, y.pc)] if y.half is None else self._done((y.core, y.pc), y.half)
        return any((q < pc) if c == core else bool(row[c] > q) for c, q in whats)

    def _flag(self, y: AccessEvent, x: AccessEvent) -> None:
        self.candidates.append((y, x))

    def _reach(self, core: int, pc: int, row: np.ndarray | None = None,
               events: Iterable[AccessEvent] | None = None) -> None:
        for x in (self.at.get((core, pc), ()) if events is None else events):
            chain = self.chain_of[id(x)]
            w = chain.write
            if w is not None and not self._ordered(core, pc, w, row):
                self._flag(w, x)
            if x.write:
                for r in chain.reads:
                    if not self._ordered(core, pc, r, row):
                        self._flag(r, x)
                chain.write, chain.reads = x, []
            else:
                # a read the new one follows adds nothing: what follows the new one follows it
                chain.reads = [r for r in chain.reads if not self._ordered(core, pc, r, row)]
                chain.reads.append(x)
            for y in self.partners.get(id(x), ()):
                if id(y) in self.seen and not self._ordered(core, pc, y, row):
                    self._flag(y, x)
            self.seen.add(id(x))


class _SymmetricObserver(_Observer):
    """DR-8: the happens-before pass over the run of a fold of the whole program.

    The fold's run is a run of the program in which each class of devices moves in step (RUN-7), so
    every event's clock is its class representative's, rotated: the observer keeps the clocks of the
    representatives (the fold's cores) with a component per core of the program, gives an arrival
    from another class member the rotated clock of the fold core that sent it, and reads what it
    knows of copies whose semaphores live on other members by rotating them to the member that is a
    representative.
    """

    def __init__(self, program: Program, fold: Quotient, events: Iterable[AccessEvent], arrival: Arrival,
                 run_mode: DmaMode, totals: dict[tuple, int] | None = None) -> None:
        super().__init__(program, events, arrival, totals)
        self.fold = fold
        self.run_mode = run_mode
        topo = program.topology
        self.n = topo.num_cores
        self.reps = fold.devices * topo.cores_per_device
        self.clock = np.zeros((self.reps, self.n), dtype=np.int32)
        self.targets: dict[Pos, int] = {}
        self.class_at: dict[Pos, list[AccessEvent]] = defaultdict(list)
        for e in self.events:  # a copy's halves are reached at its start, by every member of its class
            if e.half is not None and e.core >= self.reps:
                self.class_at[(e.core % self.reps, e.pc)].append(e)

    def _target(self, core: int, pc: int) -> int:
        """The core of the program that the signal or copy at (core, pc) of the program lands on."""
        t = self.targets.get((core, pc))
        if t is None:
            op = self.program.cores[core][pc]
            t = target_core(self.program, self.run_mode, core, op.device, op.core, dma=type(op) is DmaStart)
            self.targets[(core, pc)] = t = t if isinstance(t, int) else -1
        return t

    def _roll(self, row: np.ndarray, shift: int) -> np.ndarray:
        return np.roll(row, shift) if shift % self.n else row

    def _frame(self, start: Pos, half: str) -> int:
        """How many cores the copy must move back for its half's semaphore to be a representative's."""
        where = start[0] if half == "read" else self._target(*start)
        return where - where % self.reps

    def _done(self, start: Pos, half: str) -> list[Pos]:
        sh = self._frame(start, half)
        if not sh:
            return self.done.get((start, half), [])
        got = self.done.get((((start[0] - sh) % self.n, start[1]), half), ())
        return [((c + sh) % self.n, q) for c, q in got]

    def _record_done(self, start: Pos, half: str, waiter: Pos) -> None:
        sh = self._frame(start, half)
        key = (((start[0] - sh) % self.n, start[1]), half)
        self.done.setdefault(key, []).append(((waiter[0] - sh) % self.n, waiter[1]))

    def _arrival(self, counter: tuple, inc: int, source: tuple) -> _Signal:
        rep = counter[1]
        if type(source[1]) is str:
            ident, half = source
            c, q = self.dma_pos[ident]
            shift = (rep - (c if half == "read" else self._target(c, q))) % self.n
            start = ((c + shift) % self.n, q)
            return _Signal(inc, self._roll(self.dma_clock[ident], shift), start if self.arrival == "start" else None,
                           start, half)
        c, q = source
        shift = (rep - self._target(c, q)) % self.n
        return _Signal(inc, self._roll(self._snapshot(c, q + 1), shift), ((c + shift) % self.n, q), None, None)

    def start(self, core: int, pc: int, ident: int) -> None:
        super().start(core, pc, ident)
        members = self.class_at.get((core, pc))
        if members:
            row = self.clock[core]
            for e in members:  # the same copy started by another member of the class, rotated
                shifted = self._roll(row, e.core - core)
                self._reach(e.core, pc, shifted, (e,))

    def barrier(self, core: int, pc: int, name: str, k: int, participants: tuple[int, ...]) -> None:
        row = self.clock[core]
        op = self.program.cores[core][pc]
        assert isinstance(op, Barrier)
        for p in op.participants:  # the program's participants, each its representative rotated
            rep = p % self.reps
            snap = self.arrivals.get((rep, name, k))
            if snap is None:
                snap = self._snapshot(rep, self._barrier_position(rep, name, k))
            np.maximum(row, self._roll(snap, p - rep), out=row)


def reading(mode: DmaMode) -> tuple[DmaMode, Arrival]:
    """DR-7: the run and the arrival reading each mode's happens-before pass uses.

    `hardware`: its own run; a half arrives when it completes. `eager`: its
    own run; a half arrives at the copy's start, as the interpreter signals
    there. `on_wait`: every on_wait run is a run of the interpreter's naming
    with each half an actor of its own, so it is decided on `eager`'s run with
    halves arriving when they complete.
    """
    if mode == "hardware":
        return "hardware", "completion"
    if mode == "eager":
        return "eager", "start"
    return "eager", "completion"


def order(program: Program, mode: DmaMode, events: Iterable[AccessEvent]) -> Ordering:
    """DR-6: the conflicting pairs of `events` the happens-before relation under `mode` leaves unordered.

    The relation is certified only when the run meets no failure, no id is in
    both tables (so every lookup names one semaphore in every schedule), and
    every arrival on a counter follows the wait that came before it in the run.
    """
    return order_modes(program, {mode: events})[mode]


def order_modes(
    program: Program, events: dict[DmaMode, Iterable[AccessEvent]], fold: Quotient | None = None
) -> dict[DmaMode, Ordering]:
    """`order` for several modes, one run per run mode (DR-7: `eager` and `on_wait` share `eager`'s run).

    With `fold` (a fold of the whole program, accesses included: `find_fold(shifted=True)`), the run
    is the fold's and the events must lie on its representatives' buffers (DR-8).
    """
    out: dict[DmaMode, Ordering] = {}
    by_run: dict[DmaMode, dict[DmaMode, _Observer]] = defaultdict(dict)

    def observer(mode: DmaMode, evs: Iterable[AccessEvent], totals: dict[tuple, int] | None = None) -> _Observer:
        run_mode, arrival = reading(mode)
        if fold is None:
            return _Observer(program, evs, arrival, totals)
        return _SymmetricObserver(program, fold, evs, arrival, run_mode, totals)

    for mode, evs in events.items():
        by_run[reading(mode)[0]][mode] = observer(mode, evs)
    runs = fold.program if fold is not None else program
    for run_mode, observers in by_run.items():
        # each mode keeps its own pessimistic counters: one mode's failed certificate must not
        # cost another mode precision (DR-6)
        totals: dict[DmaMode, dict[tuple, int]] = {mode: {} for mode in observers}
        pending = dict(observers)
        for attempt in range(MAX_PASSES):
            obs = next(iter(pending.values())) if len(pending) == 1 else _Fanout(list(pending.values()))
            state = fast_run(runs, run_mode, record=False, observer=obs).state
            redo: dict[DmaMode, _Observer] = {}
            for mode, o in pending.items():
                if o.broken_counters and not state.failures and attempt + 1 < MAX_PASSES:
                    # DR-6: decide the counters whose certificate failed against all they ever receive
                    totals[mode].update({c: o.counters[c].arrived for c in o.broken_counters if c in o.counters})
                    redo[mode] = observer(mode, o.events, dict(totals[mode]))
                else:
                    out[mode] = _verdict(o, state)
            if not redo:
                break
            pending = redo
    return out


def _verdict(o: _Observer, state) -> Ordering:
    why = o.broken
    if state.failures:
        why = why or "the run fails"
    elif state.tables.internal & state.tables.fixed:
        why = why or "an id is in both tables, so a lookup may name different semaphores in different schedules"
    return Ordering(not why, why, tuple(o.candidates))


MAX_PASSES = 3
"""Runs of the happens-before pass per run mode: the first reads every counter in the run's order, the
next ones read the counters whose certificate failed against everything they receive (DR-6)."""


class _Fanout:
    """Tells several observers of one run (model/fast.py's observer protocol)."""

    def __init__(self, observers: list[_Observer]) -> None:
        self.observers = observers

    def signal(self, counter: tuple, inc: int, source: tuple) -> None:
        for o in self.observers:
            o.signal(counter, inc, source)

    def wait(self, core: int, pc: int, counter: tuple, value: int) -> None:
        for o in self.observers:
            o.wait(core, pc, counter, value)

    def start(self, core: int, pc: int, ident: int) -> None:
        for o in self.observers:
            o.start(core, pc, ident)

    def arrive(self, core: int, pc: int, name: str, k: int) -> None:
        for o in self.observers:
            o.arrive(core, pc, name, k)

    def barrier(self, core: int, pc: int, name: str, k: int, participants: tuple[int, ...]) -> None:
        for o in self.observers:
            o.barrier(core, pc, name, k, participants)

    def access(self, core: int, pc: int) -> None:
        for o in self.observers:
            o.access(core, pc)
