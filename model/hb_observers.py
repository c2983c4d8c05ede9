"""The observers of the happens-before pass (spec DR-6..DR-8, DR-37): the vector clocks one run
computes, the counters whose arrivals a wait must consume, and the chains of accesses checked as the
run reaches them; `happens_before` drives them."""

from __future__ import annotations

import copy
from collections import defaultdict
from collections.abc import Iterable
from typing import Literal

import numpy as np

from semcheck.model.barrier import instance
from semcheck.model.clock_rows import Sparse, join, join_all, join_every_rotation, within
from semcheck.model.access import AccessEvent
from semcheck.model.access_index import AccessIndex, Pos, Chain
from semcheck.model.errors import ModelBug
from semcheck.model.hb_counters import Counter, Signal, bare, merge
from semcheck.model.quotient import Quotient
from semcheck.model.ops import Barrier, DmaMode, DmaStart, Program
from semcheck.model.step import target_core

Pair = tuple[AccessEvent, AccessEvent]
Arrival = Literal["start", "completion"]


class Observer:
    """Vector clocks over one fast run (DR-6) and the checks of each access as the run reaches it."""

    def __init__(self, program: Program, events: Iterable[AccessEvent] | AccessIndex, arrival: Arrival,
                 totals: dict[tuple, int] | None = None, rows: int | None = None) -> None:
        self.program = program
        self.arrival = arrival
        # counters decided against everything that ever arrives on them rather than the run's order
        # (DR-6: their arrivals came in an order no certificate covers); their totals, from an earlier run
        self.totals = totals or {}
        self.broken_counters: set[tuple] = set()
        n = self.n = program.topology.num_cores
        # row c: what core c knows (its own entry is stale); `rows`: only the first cores' (DR-8), kept
        # dense (a fold's rows are read rotated, DR-43); else each row sparse until it is not (DR-45)
        self.clock: np.ndarray | list[Sparse | np.ndarray] = (
            [Sparse() for _ in range(n)] if rows is None else np.zeros((rows, n), dtype=np.int32))
        self.counters: dict[tuple, Counter] = {}
        self.dma_pos: dict[int, Pos] = {}  # DMA ident -> its start
        self.dma_clock: dict[int, np.ndarray] = {}
        self.done: dict[tuple[Pos, str], list[Pos]] = {}  # (start, half) -> waits known to follow the half
        self.arrivals: dict[tuple[int, str, int], np.ndarray] = {}
        # (name, k, participants) -> their arrivals, joined (a name's barriers may differ in participants)
        self.joined: dict[tuple[str, int, frozenset[int]], np.ndarray] = {}
        self.broken = ""
        self.candidates: list[Pair] = []
        # a list is indexed with the interpreter's conflicts: a hardware list (`in_mode`) holds no access of no
        # element, the only ones for which they differ from the hardware's (ERR-27)
        index = events if isinstance(events, AccessIndex) else AccessIndex(events, "eager")
        self.events = index.events
        self.at, self.chain_of, self.partners = index.at, index.chain, index.partners
        self.entries, self.entry = index.entries, index.entry
        self.chains = [Chain() for _ in range(index.chains)]
        self.seen: set[int] = set()
        self.shared: set[int] = set()  # cores whose row is a barrier's join, shared with its other passers (DR-49)
        self.rotates = False  # whether `_done` and `_record_done` rotate (DR-8): else the hot paths inline them

    def resumed(self, totals: dict[tuple, int]) -> Observer:
        """A copy of this observer as it stands, to go on with `totals` (DR-38): what the rest of the
        run changes is copied, what it only reads (the program, the accesses, their index) is shared."""
        o = copy.copy(self)
        o.totals = totals
        o.broken_counters = set(self.broken_counters)
        if type(self.clock) is np.ndarray:
            o.clock = self.clock.copy()
        else:  # a row shared by the cores that passed a barrier (DR-49) is copied once, and stays shared
            copies: dict[int, Sparse | np.ndarray] = {}
            o.clock = [copies[id(r)] if id(r) in copies else copies.setdefault(id(r), r.copy()) for r in self.clock]
        o.shared = set(self.shared)
        o.counters = {k: c.copied() for k, c in self.counters.items()}
        # a copy's clock and an arrival's snapshot are never changed once made: the arrays are shared
        o.dma_pos, o.dma_clock, o.arrivals = dict(self.dma_pos), dict(self.dma_clock), dict(self.arrivals)
        o.joined = dict(self.joined)
        o.done = {k: list(v) for k, v in self.done.items()}
        o.candidates = list(self.candidates)
        o.chains = [c.copied() for c in self.chains]
        o.seen = set(self.seen)
        return o

    # --- clocks ---------------------------------------------------------------

    def _snapshot(self, core: int, executed: int) -> np.ndarray:
        row = self.clock[core].copy()
        row[core] = executed
        return row

    def _knows(self, core: int, pc: int, what: Pos) -> bool:
        """Whether `core`, about to run `pc`, knows that operation `what` has happened."""
        c, q = what
        return q < pc if c == core else bool(self.clock[core][c] > q)

    def _knows_done(self, core: int, pc: int, start: Pos, half: str) -> bool:
        return any(self._knows(core, pc, w) for w in self._done(start, half))

    def _done(self, start: Pos, half: str) -> list[Pos]:
        """The waits known to follow the half of the copy started at `start`."""
        return self.done.get((start, half), [])

    def _record_done(self, start: Pos, half: str, waiter: Pos) -> None:
        self.done.setdefault((start, half), []).append(waiter)

    def waits_after(self, start: Pos, half: str) -> list[Pos]:
        """A query (PRG-164): the waits E-after the half of the copy started at `start`."""
        return self._done(start, half)

    def _after(self, later: Signal, earlier: Signal) -> bool:
        """Whether the relation orders `later`'s arrival after `earlier`'s."""
        clock, sh = later.clock, later.shift
        if earlier.pos is not None:
            return bool(clock[earlier.pos[0] - sh] > earlier.pos[1])
        if later.dma == earlier.dma and earlier.half == "read" and later.half == "write":
            return True
        return any(clock[c - sh] > q for c, q in self._done(earlier.dma, earlier.half))

    # --- the observer protocol (model/fast.py) -------------------------------

    def signal(self, counter: tuple, inc: int, source: tuple) -> None:
        ctr = self.counters.get(counter)
        if ctr is None:
            ctr = self.counters[counter] = Counter(counter[1], self.n)
        if self.rotates:
            s = self._arrival(counter, inc, source)
        elif type(source[1]) is str:  # `_arrival`, inlined (one call per signal and half)
            ident, half = source
            start = self.dma_pos[ident]
            # the write half is a copy's last arrival: its clock is not kept past it (DR-42)
            clock = self.dma_clock.pop(ident) if half == "write" else self.dma_clock[ident]
            s = Signal(inc, clock, 0, start[0], start if self.arrival == "start" else None, start, half)
        else:
            core, pc = source
            row = self.clock[core].copy()
            row[core] = pc + 1
            s = Signal(inc, row, 0, core, source, None, None)
        clock, sh = s.clock, s.shift
        if (ctr.last_wait is not None and counter not in self.totals and counter not in self.broken_counters
                and not clock[ctr.core - sh] > ctr.last_wait):
            self._late(ctr, counter, s)
        ctr.arrived += inc
        if ctr.with_pos and not ctr.chained and ctr.knows_of_pending(clock, sh):
            # (a pending copy half known to follow another is not looked for: treating the two as
            # unordered only orders fewer waits, DR-6)
            ctr.chained = True
        ctr.add(s)

    def _late(self, ctr: Counter, counter: tuple, t: Signal) -> None:
        """DR-6: arrival `t` came after waits of the counter it is not ordered after; in another
        schedule it may come before them, so each arrival such a wait was ordered after must still be
        one it cannot pass without (unless `t` itself needs that arrival first)."""
        for pc, entries in reversed(ctr.forced):
            if t.clock[ctr.core - t.shift] > pc:
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

    def _arrival(self, counter: tuple, inc: int, source: tuple) -> Signal:
        if type(source[1]) is str:  # a DMA half
            ident, half = source
            start = self.dma_pos[ident]
            clock = self.dma_clock.pop(ident) if half == "write" else self.dma_clock[ident]
            return Signal(inc, clock, 0, start[0], start if self.arrival == "start" else None, start, half)
        core, pc = source
        return Signal(inc, self._snapshot(core, pc + 1), 0, core, (core, pc), None, None)

    def wait(self, core: int, pc: int, counter: tuple, value: int) -> None:
        ctr = self.counters.get(counter)
        if ctr is None:  # a wait for nothing (value 0)
            ctr = self.counters[counter] = Counter(core, self.n)
        need = ctr.consumed + value
        ctr.consumed = need
        ctr.last_wait = pc
        pending = ctr.pending
        if not pending:
            return
        arrived = self.totals.get(counter, ctr.arrived)
        if not ctr.chained and arrived - need >= ctr.max_inc and (
                self.arrival != "start" or not ctr.with_pos or not ctr.known_by(self.clock[core], core, pc)):
            # no arrival is needed yet (none follows another, and the surplus covers any one); under `eager` one
            # whose start the waiter knows has signalled already, and is taken below (DR-7)
            return
        if len(pending) == 1:  # the common case: one arrival, known already or needed now
            s = pending[0]
            p = s.pos
            if p is not None:  # `_known`, inlined
                c, q = p
                k = q < pc if c == core else self.clock[core][c] > q
            else:
                k = self._knows_done(core, pc, s.dma, s.half)
            if k:
                known, forced = pending, ()
                ctr.reset([])
            elif arrived - s.inc < need:
                known, forced = (), pending
                ctr.reset([])
                ctr.forced.append((pc, [[bare(s), need - arrived + s.inc]]))
            else:
                return
        else:
            known, cands = [], []
            row = self.clock[core]
            done = self._done if self.rotates else None
            done_get = self.done.get
            for s in pending:  # `_known`, inlined: a wait may have hundreds pending
                p = s.pos
                if p is not None:
                    c, q = p
                    k = q < pc if c == core else row[c] > q
                else:
                    k = False
                    for c, q in (done(s.dma, s.half) if done is not None else done_get((s.dma, s.half), ())):
                        if (q < pc if c == core else row[c] > q):
                            k = True
                            break
                (known if k else cands).append(s)
            forced, entries = [], []
            for s in cands:
                # how far the arrivals that could come without s fall short of the wait (DR-6)
                short = need - (arrived - s.inc)
                if short <= 0 and ctr.chained:
                    short += sum(t.inc for t in cands if t is not s and self._after(t, s))
                if short > 0:
                    forced.append(s)
                    entries.append([bare(s), short])
            if entries:
                ctr.forced.append((pc, entries))
            if known or forced:
                gone = {id(f) for f in forced}
                ctr.reset([s for s in cands if id(s) not in gone] if forced else cands)
        if forced:
            row = kept = self._own(core) if self.shared else self.clock[core]
            n = self.n
            for s in forced:  # a known arrival's past is already in the core's clock
                row = merge(row, s, core, n)
            if row is not kept:  # a sparse row that became dense (DR-45)
                self.clock[core] = row
        waiter = (core, pc)
        record = self._record_done if self.rotates else None
        setdefault = self.done.setdefault
        for group in (known, forced):
            for s in group:
                if s.dma is not None:
                    # the wait follows the half in every schedule (DR-6); under `eager` it takes the
                    # copy's clock too, as the interpreter's detector does (DR-7)
                    if record is not None:
                        record(s.dma, s.half, waiter)
                        if s.half == "write":
                            record(s.dma, "read", waiter)
                    else:
                        setdefault((s.dma, s.half), []).append(waiter)
                        if s.half == "write":
                            setdefault((s.dma, "read"), []).append(waiter)

    def start(self, core: int, pc: int, ident: int) -> None:
        self.dma_pos[ident] = (core, pc)
        self.dma_clock[ident] = self._snapshot(core, pc + 1)
        self._reach(core, pc)

    def arrive(self, core: int, pc: int, name: str, k: int) -> None:
        key = (core, name, k)
        if key not in self.arrivals:
            self.arrivals[key] = self._snapshot(core, pc)

    def barrier(self, core: int, pc: int, name: str, k: int, participants: tuple[int, ...]) -> None:
        # A participant's snapshot does not change once it stands at the barrier (its row changes only
        # when it runs, and its arrival is kept), and a barrier passes only once all stand there: the
        # join is the same for every core that passes it, and is made once.
        key = instance(name, k, participants)
        joined = self.joined.get(key)
        if joined is None:
            snaps = []
            for p in participants:
                snap = self.arrivals.get((p, name, k))
                if snap is None:  # p stands at the barrier and has not run since it got there
                    snap = self._snapshot(p, self._barrier_position(p, name, k))
                snaps.append(snap)
            if not snaps:
                return
            joined = self.joined[key] = join_all(snaps, self.n)
        row = self.clock[core]
        if within(row, joined):  # DR-49: the join is `joined` itself, kept once for every core that passes
            self.clock[core] = joined
            self.shared.add(core)
            return
        new = join(self._own(core), joined, self.n)
        if new is not row:
            self.clock[core] = new

    def _own(self, core: int) -> Sparse | np.ndarray:
        """Core `core`'s row, to be changed in place: a row it shares with a barrier's join (DR-49) is
        copied first (the join is every other passer's row too)."""
        row = self.clock[core]
        if core in self.shared:
            self.shared.discard(core)
            row = self.clock[core] = row.copy()
        return row

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

    def _ordered(self, core: int, pc: int, y: AccessEvent, row: np.ndarray | None = None, shift: int = 0) -> bool:
        """Whether access `y` (reached earlier in the run) is ordered before what `core` does at `pc`
        (`row`, read rotated by `shift` (DR-43): the core's clock, when it is not one this observer keeps)."""
        yc, yq = y.core, y.pc
        if yc == core and yq == pc:
            return True  # the two halves of one DMA (ACC-2)
        if row is None:
            row = self.clock[core]
        if y.half is None:
            return yq < pc if yc == core else bool(row[yc - shift] > yq)
        for c, q in self._done((yc, yq), y.half):
            if (q < pc) if c == core else (row[c - shift] > q):
                return True
        return False

    def _flag(self, y: AccessEvent, x: AccessEvent) -> None:
        self.candidates.append((y, x))

    def _reach(self, core: int, pc: int, row: np.ndarray | None = None,
               entries: Iterable[tuple[AccessEvent, int, list[AccessEvent]]] | None = None, shift: int = 0) -> None:
        """Check the accesses `core` makes at `pc` (`entries`: `AccessIndex.entry` of each, when they are not
        the index's at that position) against those reached before them (DR-6's chains and partners)."""
        if entries is None:
            entries = self.entries.get((core, pc))
            if not entries:
                return
        ordered = self._ordered
        if row is None:
            row = self.clock[core]
        for x, c, partners in entries:
            chain = self.chains[c]
            w = chain.write
            if w is not None:
                # `_ordered`, inlined for a kernel access (the two halves of one copy are ordered, ACC-2)
                if w.half is None:
                    k = w.pc <= pc if w.core == core else row[w.core - shift] > w.pc
                else:
                    k = ordered(core, pc, w, row, shift)
                if not k:
                    self._flag(w, x)
            if x.write:
                for r in chain.reads:
                    if not ordered(core, pc, r, row, shift):
                        self._flag(r, x)
                chain.write, chain.reads = x, []
            else:
                # a read the new one follows adds nothing: what follows the new one follows it
                reads = chain.reads
                if reads:
                    chain.reads = [r for r in reads if not ordered(core, pc, r, row, shift)]
                    chain.reads.append(x)
                else:
                    reads.append(x)
            if partners:  # (partners are mutual: only an access with some is looked for in `seen`)
                seen = self.seen
                for y in partners:
                    if id(y) in seen and not ordered(core, pc, y, row, shift):
                        self._flag(y, x)
                seen.add(id(x))


class SymmetricObserver(Observer):
    """DR-8: the happens-before pass over the run of a fold of the whole program.

    The fold's run is a run of the program in which each class of devices moves in step (RUN-7), so
    every event's clock is its class representative's, rotated: the observer keeps the clocks of the
    representatives (the fold's cores) with a component per core of the program, gives an arrival
    from another class member the rotated clock of the fold core that sent it, and reads what it
    knows of copies whose semaphores live on other members by rotating them to the member that is a
    representative.
    """

    def __init__(self, program: Program, fold: Quotient, events: Iterable[AccessEvent] | AccessIndex, arrival: Arrival,
                 run_mode: DmaMode, totals: dict[tuple, int] | None = None,
                 targets: dict[int, int] | None = None) -> None:
        topo = program.topology
        super().__init__(program, events, arrival, totals, rows=fold.devices * topo.cores_per_device)
        self.fold = fold
        self.run_mode = run_mode
        self.rotates = True
        self.n = topo.num_cores
        self.reps = fold.devices * topo.cores_per_device
        # `pc * reps + rep` -> the target of the fold core's operation: a function of the program and the
        # run mode alone, so the observers of one run may share it (`targets`)
        self.targets: dict[int, int] = {} if targets is None else targets
        self.class_at: dict[Pos, list[AccessEvent]] = defaultdict(list)
        for e in self.events:  # a copy's halves are reached at its start, by every member of its class
            if e.half is not None and e.core >= self.reps:
                self.class_at[(e.core % self.reps, e.pc)].append(e)
        self.class_entries = {pos: [self.entry(e) for e in es] for pos, es in self.class_at.items()}

    def _target(self, core: int, pc: int) -> int:
        """The core of the program that the signal or copy at (core, pc) of the program lands on.

        DR-42: read off the fold core of its class and rotated (the rotation moves every named device
        by the class's offset, and the fold's targets are in range, RUN-7 (a)): no other core is read."""
        reps = self.reps
        rep = core % reps
        t = self.targets.get(pc * reps + rep)
        if t is None:
            op = self.program.cores[rep][pc]
            t = target_core(self.program, self.run_mode, rep, op.device, op.core, dma=type(op) is DmaStart)
            self.targets[pc * reps + rep] = t = t if isinstance(t, int) else -1
        return t if t < 0 or rep == core else (t + core - rep) % self.n

    def target_of(self, core: int, pc: int) -> int:
        """A query (PRG-164): `_target`, the program's core the operation lands on (-1: none)."""
        return self._target(core, pc)

    def _roll(self, row: np.ndarray, shift: int) -> np.ndarray:
        """`np.roll(row, shift)` (a new array only when it moves), in two slice copies."""
        shift %= self.n
        if not shift:
            return row
        out = np.empty_like(row)
        out[shift:] = row[:-shift]
        out[:shift] = row[-shift:]
        return out

    def _done(self, start: Pos, half: str) -> list[Pos]:
        c, q = start
        # the cores the copy moves back by for its half's semaphore to be a representative's
        where = c if half == "read" else self._target(c, q)
        sh = where - where % self.reps
        if not sh:
            return self.done.get((start, half), [])
        n = self.n
        got = self.done.get((((c - sh) % n, q), half))
        return [((w + sh) % n, p) for w, p in got] if got else []

    def _record_done(self, start: Pos, half: str, waiter: Pos) -> None:
        c, q = start
        where = c if half == "read" else self._target(c, q)
        sh = where - where % self.reps
        if not sh:
            self.done.setdefault((start, half), []).append(waiter)
            return
        n = self.n
        self.done.setdefault((((c - sh) % n, q), half), []).append(((waiter[0] - sh) % n, waiter[1]))

    def _arrival(self, counter: tuple, inc: int, source: tuple) -> Signal:
        rep = counter[1]
        if type(source[1]) is str:
            ident, half = source
            c, q = self.dma_pos[ident]
            shift = (rep - (c if half == "read" else self._target(c, q))) % self.n
            start = ((c + shift) % self.n, q)
            clock = self.dma_clock.pop(ident) if half == "write" else self.dma_clock[ident]
            return Signal(inc, clock, shift, c, start if self.arrival == "start" else None, start, half)
        c, q = source
        shift = (rep - self._target(c, q)) % self.n
        # the sender's own entry is set: the signal has happened; read rotated, it is the sender's (DR-43)
        return Signal(inc, self._snapshot(c, q + 1), shift, c, ((c + shift) % self.n, q), None, None)

    def start(self, core: int, pc: int, ident: int) -> None:
        super().start(core, pc, ident)
        members = self.class_entries.get((core, pc))
        if members:
            row = self.clock[core]
            for e in members:  # the same copy started by another member of the class, rotated (DR-43)
                self._reach(e[0].core, pc, row, (e,), (e[0].core - core) % self.n)

    def barrier(self, core: int, pc: int, name: str, k: int, participants: tuple[int, ...]) -> None:
        row = self.clock[core]
        op = self.program.cores[core][pc]
        assert isinstance(op, Barrier)
        n, reps = self.n, self.reps
        shifts: dict[int, list[int]] = defaultdict(list)
        for p in op.participants:  # the program's participants, each its representative rotated
            rep = p % reps
            shifts[rep].append(p - rep)
        for rep, by in shifts.items():
            snap = self.arrivals.get((rep, name, k))
            if snap is None:
                snap = self._snapshot(rep, self._barrier_position(rep, name, k))
            if len(by) == n // reps:  # every member of the class takes part
                join_every_rotation(row, snap, reps)
            else:
                for sh in by:
                    np.maximum(row, self._roll(snap, sh), out=row)
