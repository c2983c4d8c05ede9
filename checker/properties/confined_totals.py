"""`invocation-confined` by totals, without a run (spec PRG-140 .. PRG-142).

Under `hardware` the lowered program is a fixed list of operations per core with concrete amounts, so
the whole program's contributions to each semaphore of each core can be added up once. Counts start at
zero, rise only by contributions (a signal, a copy's half) and fall only by waits (SEM-5), so after a
core has passed waits on a semaphore for `W`, contributions of at least `W` have landed on it:

* **late** (PRG-140): when the target's core 0, before it leaves the object's window, waits on the
  landing's semaphore for at least everything the program ever contributes to it there, every
  contribution, the landing's among them, has landed before the target can leave;
* **early** (PRG-141): when the sender, before the operation, waits on one of its semaphores for more
  than everything that can land on it while the target has not entered (every contribution except
  those the target's core 0 makes from its entry on), or passes a barrier (BAR-1) that the target's
  core 0 reaches only from its entry on, the sender cannot get to the operation before the target entered.

Each answers only "cannot happen"; where a premise fails (a core other than core 0 holds the semaphore,
an amount that is not positive, a reference that fails) the caller's maximal runs decide (PRG-111, PRG-112).
"""

from __future__ import annotations

import bisect
import dataclasses
from operator import itemgetter
from typing import Any

import numpy as np

from semcheck.model.barrier import awaited, opens_at
from semcheck.model.dma import amounts
from semcheck.model.errors import Violation
from semcheck.model.ops import BARRIER, AllocSem, Barrier, DmaStart, Program, SemRef, Signal, Wait
from semcheck.model.semaphore import shortfall
from semcheck.model.state import Allocation
from semcheck.model.step import named, target_core

MODE = "hardware"


@dataclasses.dataclass
class _Counter:
    """One semaphore of one core: what lands on it, by whom, and the waits of its core."""

    total: int = 0
    positive: bool = True  # every contribution adds more than zero and every wait takes zero or more
    by_core: dict[int, Any] = dataclasses.field(default_factory=dict)  # issuer -> [(pc, amount)], then sums
    waits_at: list[int] = dataclasses.field(default_factory=list)  # the waiting core's positions, ascending
    waited: list[int] = dataclasses.field(default_factory=list)  # cumulative amounts waited up to each

    def waited_before(self, pc: int) -> int:
        """The amount the core waits for on this semaphore at positions before `pc`."""
        i = bisect.bisect_left(self.waits_at, pc)
        return self.waited[i - 1] if i else 0

    def from_on(self, core: int, pc: int) -> int:
        """What `core`'s operations at positions `pc` and later contribute."""
        mine = self.by_core.get(core)
        if not mine:
            return 0
        if type(mine) is list:  # first use: positions and the amounts from each on (issued in program order)
            at = [p for p, _ in mine]
            after = [0] * (len(mine) + 1)
            for j in range(len(mine) - 1, -1, -1):
                after[j] = after[j + 1] + mine[j][1]
            mine = self.by_core[core] = (at, after)
        at, after = mine
        return after[bisect.bisect_left(at, pc)]


class _Frozen:
    """Positions with one core at `pc` and every other past its end (as far as any run can take it)."""

    def __init__(self, core: int, pc: int) -> None:
        self.core, self.pc = core, pc

    def __getitem__(self, q: int) -> float:
        return self.pc if q == self.core else float("inf")


class Totals:
    """The static totals of one program under `hardware`; a False answer means "not by totals", not "it can"."""

    def __init__(self, program: Program, lowering: Any = None) -> None:
        self.program = program
        # (core, pc) -> (target core, physical semaphore) of each signal and copy, from the lowering (PRG-147)
        self._landings_: dict[tuple[int, int], tuple[int, Any]] | None = None
        self._waited: dict[int, list[_Counter]] = {}  # core -> the counters of `waits_of`
        self._counters: dict[tuple[Any, int], _Counter] = {}
        self.sound = True  # False: a label with two allocation sites, no answer at all
        self._waits_of: dict[int, set] = {}  # core -> the semaphore keys it waits on
        self._barriers: dict[int, dict[str, list[int]]] = {}  # core -> barrier name -> its positions
        allocs: dict[str, Allocation] = {}
        lowered = complete(lowering)
        # a complete lowering has run every allocation of the program (PRG-147)
        for op in ((ev.op for ev in lowering.sem_events) if lowered else
                   (op for ops in program.cores for op in ops if type(op) is AllocSem)):
            a = Allocation(op.site, op.count, None)
            if allocs.setdefault(op.label, a) != a:
                self.sound = False
        self._allocs = allocs
        # a complete lowering is indexed when a landing is first asked about one by one (RUN-32: `settled`
        # reads the lowering itself, and may leave no landing to ask about)
        self._lowered = lowering if self.sound and lowered else None
        self._indexed = not self.sound
        if self.sound and self._lowered is None:
            self._index()
            self._indexed = True

    def _ensure_index(self) -> None:
        if not self._indexed:
            self._indexed = True
            self._index_lowered(self._lowered)

    @property
    def counters(self) -> dict[tuple[Any, int], _Counter]:
        self._ensure_index()
        return self._counters

    @property
    def waits_of(self) -> dict[int, set]:
        self._ensure_index()
        return self._waits_of

    @property
    def barriers(self) -> dict[int, dict[str, list[int]]]:
        self._ensure_index()
        return self._barriers

    @property
    def _landings(self) -> dict[tuple[int, int], tuple[int, Any]] | None:
        self._ensure_index()
        return self._landings_

    def _key(self, core: int, ref: SemRef) -> Any:
        """HW-1: the physical semaphore `ref` names on `core` (None when the reference fails or is unknown)."""
        if ref.label not in self._allocs and ref.label != BARRIER:
            return None
        key = named(self.program, MODE, self._allocs.get(ref.label), core, ref)
        return None if isinstance(key, Violation) else key

    def _counter(self, key: Any, core: int) -> _Counter:
        c = self._counters.get((key, core))
        if c is None:
            c = self._counters[(key, core)] = _Counter()
        return c

    def _add(self, key: Any, core: int, issuer: int, pc: int, amount: int) -> None:
        if key is None:
            return  # the operation fails (ERR-5) and lands nothing
        c = self._counter(key, core)
        c.total += amount
        c.positive &= amount > 0
        c.by_core.setdefault(issuer, []).append((pc, amount))

    def _index(self) -> None:
        program = self.program
        for g, ops in enumerate(program.cores):
            for i, op in enumerate(ops):
                t = type(op)
                if t is Signal:
                    tg = target_core(program, MODE, g, op.device, op.core, dma=False)
                    if isinstance(tg, int):
                        self._add(self._key(g, op.sem), tg, g, i, op.inc)
                elif t is DmaStart:
                    tg = target_core(program, MODE, g, op.device, op.core, dma=True)
                    if not isinstance(tg, int):
                        continue  # ERR-4: no half runs
                    read, write = amounts(op, MODE)
                    if op.src_sem is not None:  # a start that fails lands nothing: counting it only asks more
                        self._add(self._key(g, op.src_sem), g, g, i, read)
                    self._add(self._key(g, op.dst_sem), tg, g, i, write)
                elif t is Wait:
                    key = self._key(g, op.sem)
                    if key is None:
                        continue  # the wait fails: its core stops there, which only keeps it in
                    c = self._counter(key, g)
                    c.positive &= op.value >= 0
                    c.waits_at.append(i)
                    c.waited.append((c.waited[-1] if c.waited else 0) + op.value)
                    self._waits_of.setdefault(g, set()).add(key)
                elif t is Barrier:
                    self._barriers.setdefault(g, {}).setdefault(op.name, []).append(i)

    def _index_lowered(self, low: Any) -> None:
        """`_index` read off a complete hardware lowering (PRG-147): its contributions and waits are every
        signal, copy half and wait of the program with the counter `_key` and `target_core` give them (one
        site per label, as `sound` asks), in program order per core."""
        # counter by counter (the lowering groups them, in program order): a counter's key is hashed once
        counters = self._counters
        for counter, xs in low.by_counter.items():
            c = counters[counter] = _Counter()
            by_core = c.by_core
            total, positive = 0, True
            for owner, pos, amount, _, _, _ in xs:
                total += amount
                positive &= amount > 0
                mine = by_core.get(owner)
                if mine is None:
                    by_core[owner] = [(pos, amount)]
                else:
                    mine.append((pos, amount))
            c.total, c.positive = total, positive
        for counter, ws in low.waits_by_counter.items():
            key, g = counter
            c = counters.get(counter)
            if c is None:
                c = counters[counter] = _Counter()
            acc = 0
            for w in ws:  # by position
                c.positive &= w.value >= 0
                c.waits_at.append(w.pos)
                acc += w.value
                c.waited.append(acc)
            self._waits_of.setdefault(g, set()).add(key)
        self._landings_ = {(x.owner, x.pos): (x.counter[1], x.counter[0]) for x in low.contributions
                           if x.kind != "dma_read"}
        for (g, i), b in low.barriers.items():
            self._barriers.setdefault(g, {}).setdefault(b.name, []).append(i)

    def _kth(self, core: int, name: str, k: int) -> int | None:
        mine = self.barriers.get(core, {}).get(name, [])
        return mine[k - 1] if len(mine) >= k else None

    def landed_before_exit(self, la: Any) -> bool:
        """PRG-140: every schedule lands `la` before its target's core 0 gets past `la.exit`."""
        if not self.sound:
            return False
        program = self.program
        op = program.cores[la.core][la.pc]
        if self._landings is not None:
            tg, key = self._landings.get((la.core, la.pc), (None, None))
        elif type(op) is Signal:
            tg = target_core(program, MODE, la.core, op.device, op.core, dma=False)
            key = self._key(la.core, op.sem)
        else:
            tg = target_core(program, MODE, la.core, op.device, op.core, dma=True)
            key = self._key(la.core, op.dst_sem)
        if tg != la.target or key is None:
            return False  # the semaphore is on another core of the device, whose waits do not hold core 0
        c = self.counters.get((key, tg))
        # SEM-5: the last of the waits passes only once what they take has landed, which is everything there is
        return c is not None and c.positive and c.total > 0 and c.waited_before(la.exit) >= c.total

    def reached_after_entry(self, la: Any) -> bool:
        """PRG-141: no schedule gets the sender past `la`'s operation while the target has not entered."""
        if not self.sound:
            return False
        topo = self.program.topology
        if topo.device_of(la.core) == topo.device_of(la.target):
            return False
        return self.waits_hold_back(la) or self._barrier_holds_back(la)

    def waits_hold_back(self, la: Any) -> bool:
        """PRG-141 by the sender's waits alone (sound, sender and target on two devices)."""
        waited = self._waited.get(la.core)
        if waited is None:  # the counters the sender waits on, found once per sender
            waited = self._waited[la.core] = [self.counters[(key, la.core)] for key in self.waits_of.get(la.core, ())]
        for c in waited:
            if not c.positive:
                continue
            # before the target's entry at most everything else can have landed (SEM-5: then the waits block)
            can_land = c.total - c.from_on(la.target, la.entry)
            if shortfall(can_land, c.waited_before(la.pc)) > 0:
                return True
        return False

    def _barrier_holds_back(self, la: Any) -> bool:
        """PRG-141 by a barrier the sender passes before the operation."""
        for name, positions in self.barriers.get(la.core, {}).items():
            for k in range(bisect.bisect_left(positions, la.pc), 0, -1):  # the nearest first
                parts = self.program.cores[la.core][positions[k - 1]].participants
                if la.target not in parts:
                    continue
                where = awaited(parts, lambda q, k=k, name=name: self._kth(q, name, k))
                # BAR-1: with the target's core 0 at its entry and every other core anywhere, it stays shut;
                # when the nearest one opens, so does every earlier one of the name (the target reached those first)
                if not opens_at(k, where, _Frozen(la.target, la.entry)):
                    return True
                break
        return False

    def settled(self, core: np.ndarray, pc: np.ndarray, target: np.ndarray, entry: np.ndarray,
                exit_at: np.ndarray, counter: np.ndarray, counters: list) -> np.ndarray | None:
        """RUN-32: for landings given as columns (each with the counter its operation lands on as the
        lowering resolved it, `counters[counter[j]]`), whether PRG-140 rules out its late landing and PRG-141
        by the sender's waits its early one: `landed_before_exit(la) and waits_hold_back(la)` for every
        landing between two devices, False for the others, computed per counter on whole columns. None
        without a complete lowering (or unsound totals): then every landing is asked on its own."""
        low = self._lowered
        if low is None:
            return None
        per = self.program.topology.cores_per_device
        span = max(low.lengths, default=0) + 1  # (issuer, pos) as one sortable number: issuer * span + pos
        facts: dict = {}

        def fact(c: Any) -> tuple:
            # `_Counter`'s numbers as arrays: total, positive, the waits' positions and the amounts waited up
            # to each (from 0), the contributions' (issuer, pos) numbers and the amounts up to each (from 0)
            f = facts.get(c)
            if f is None:
                xs, ws = low.by_counter.get(c, ()), low.waits_by_counter.get(c, ())
                amount = np.fromiter(map(_AMOUNT, xs), np.int64, len(xs))
                where = np.fromiter(map(_OWNER, xs), np.int64, len(xs)) * span
                where += np.fromiter(map(_POS, xs), np.int64, len(xs))
                order = np.argsort(where, kind="stable")
                value = np.fromiter(map(_VALUE, ws), np.int64, len(ws))
                f = facts[c] = (
                    int(amount.sum()), bool((amount > 0).all() and (value >= 0).all()),
                    np.fromiter(map(_POS, ws), np.int64, len(ws)), np.concatenate(([0], np.cumsum(value))),
                    where[order], np.concatenate(([0], np.cumsum(amount[order]))))
            return f

        early = np.zeros(len(core), dtype=bool)
        late = np.zeros(len(core), dtype=bool)
        waited_on: dict[int, list] = {}  # core -> the counters it waits on
        for c in low.waits_by_counter:
            waited_on.setdefault(c[1], []).append(c)
        for g, idx in _groups(core):
            for c in waited_on.get(g, ()):
                total, positive, waits_at, waited, where, upto = fact(c)
                if not positive:
                    continue
                before = waited[np.searchsorted(waits_at, pc[idx])]  # waited_before(pc)
                t = target[idx] * span
                from_on = upto[np.searchsorted(where, t + span)] - upto[np.searchsorted(where, t + entry[idx])]
                early[idx] |= before - (total - from_on) > 0  # shortfall(can_land, waited) > 0
        early &= core // per != target // per
        for j, idx in _groups(counter):
            c = counters[j]
            total, positive, waits_at, waited, _, _ = fact(c)
            if positive and total > 0:
                # landed_before_exit: the landing's semaphore is on the target's core 0 and waited there in full
                late[idx] = (target[idx] == c[1]) & (waited[np.searchsorted(waits_at, exit_at[idx])] >= total)
        return early & late


def _groups(keys: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """(key, the positions holding it) for each distinct key of an integer column."""
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    starts = np.flatnonzero(np.diff(ordered, prepend=ordered[:1] - 1)) if len(keys) else np.zeros(0, np.int64)
    return [(int(ordered[a]), order[a:b]) for a, b in zip(starts.tolist(), starts[1:].tolist() + [len(keys)])]


_OWNER, _POS, _AMOUNT = itemgetter(0), itemgetter(1), itemgetter(2)  # Contribution's; a WaitOp's pos is 1 too
_VALUE = itemgetter(3)  # WaitOp.value


def complete(low: Any) -> bool:
    """PRG-147: whether a lowering holds every operation of its program under `hardware`: it is static, no
    core fails, and barriers let every core reach its end (`Lowered.hb.reach`)."""
    return (low is not None and low.mode == MODE and low.ok and not low.failing
            and all(low.hb.reach(c) == n for c, n in enumerate(low.lengths)))


__all__ = ["Totals", "complete"]
