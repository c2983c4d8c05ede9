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
        landing between two devices, False for the others, computed on whole columns (RUN-55: the
        counters' sums in one array). None without a complete lowering (or unsound totals), or where RUN-55's
        keys would not fit in 64 bits: then every landing is asked on its own."""
        low = self._lowered
        if low is None:
            return None
        sums = _CounterSums.of(low, counters, self.program.topology.num_cores, core)
        if sums is None:
            return None
        per = self.program.topology.cores_per_device
        # PRG-141 by the sender's waits: each landing with each counter its sender's core waits on
        j, c = sums.waited_by(core)
        t = target[j]
        from_on = sums.contributed(c, t, entry[j], t + 1, 0)  # what the target's core 0 adds from its entry on
        held = sums.positive[c] & (sums.waited_before(c, pc[j]) - (sums.total[c] - from_on) > 0)  # shortfall > 0
        early = np.zeros(len(core), dtype=bool)
        early[j[held]] = True
        early &= core // per != target // per
        # PRG-140: the landing's semaphore is on the target's core 0 and waited there in full before its exit
        c = np.fromiter(map(sums.ids.__getitem__, counters), np.int64, len(counters))[counter]
        total = sums.total[c]
        late = (sums.positive[c] & (total > 0) & (target == sums.owner[c])
                & (sums.waited_before(c, exit_at) >= total))
        return early & late


class _CounterSums:
    """RUN-55: PRG-140's and PRG-141's numbers of the counters of a complete lowering laid end to end: the
    contributions ordered by (counter, issuer, position) with the prefix sums of their amounts, the waits by
    (counter, position) with those of their values, each position a key `counter * stride + place` so that
    one binary search over all counters answers each landing's question on its own counter."""

    def __init__(self, ids: dict, total: np.ndarray, positive: np.ndarray, owner: np.ndarray, x_keys: np.ndarray,
                 x_upto: np.ndarray, w_keys: np.ndarray, w_upto: np.ndarray, span: int, x_stride: int,
                 waited_on: tuple[np.ndarray, np.ndarray]) -> None:
        self.ids, self.total, self.positive, self.owner = ids, total, positive, owner
        self.x_keys, self.x_upto, self.w_keys, self.w_upto = x_keys, x_upto, w_keys, w_upto
        self.span, self.x_stride = span, x_stride
        self._waited_on = waited_on  # (where each core's waited counters start, those counters by core)

    @classmethod
    def of(cls, low: Any, counters: list, num_cores: int, senders: np.ndarray) -> _CounterSums | None:
        """The sums of the counters the landings ask about: each landing's own (`counters`) and those its
        sender's core waits on (`senders`: the landings' cores), so that a few landings read a few counters."""
        asking = set(np.unique(senders).tolist())
        needed = dict.fromkeys((*(k for k in low.waits_by_counter if k[1] in asking), *counters))
        by_counter = {k: low.by_counter[k] for k in needed if k in low.by_counter}
        waits_by_counter = {k: low.waits_by_counter[k] for k in needed if k in low.waits_by_counter}
        ids: dict = {}
        for key in (*by_counter, *waits_by_counter, *counters):
            ids.setdefault(key, len(ids))
        n = len(ids)
        span = max(low.lengths, default=0) + 1  # every position, entry and exit is below it
        x_stride = num_cores * span  # (issuer, position) as issuer * span + position, below the stride
        if (n + 1) * max(x_stride, span) >= 1 << 62:
            return None
        keys = list(ids)
        owner = np.fromiter((k[1] for k in keys), np.int64, n)
        xs = [x for group in by_counter.values() for x in group]
        x_cid = np.repeat(np.fromiter(map(ids.__getitem__, by_counter), np.int64, len(by_counter)),
                          np.fromiter(map(len, by_counter.values()), np.int64, len(by_counter)))
        amount = np.fromiter(map(_AMOUNT, xs), np.int64, len(xs))
        x_keys = x_cid * x_stride + np.fromiter(map(_OWNER, xs), np.int64, len(xs)) * span
        x_keys += np.fromiter(map(_POS, xs), np.int64, len(xs))
        order = np.argsort(x_keys, kind="stable")
        ws = [w for group in waits_by_counter.values() for w in group]
        w_cid = np.repeat(np.fromiter(map(ids.__getitem__, waits_by_counter), np.int64, len(waits_by_counter)),
                          np.fromiter(map(len, waits_by_counter.values()), np.int64, len(waits_by_counter)))
        value = np.fromiter(map(_VALUE, ws), np.int64, len(ws))
        w_keys = w_cid * span + np.fromiter(map(_POS, ws), np.int64, len(ws))
        w_order = np.argsort(w_keys, kind="stable")
        total = np.zeros(n, np.int64)
        np.add.at(total, x_cid, amount)
        # positive: every contribution adds more than zero and every wait takes zero or more
        positive = ~(np.bincount(x_cid[amount <= 0], minlength=n).astype(bool)
                     | np.bincount(w_cid[value < 0], minlength=n).astype(bool))
        waiting = np.fromiter(map(ids.__getitem__, waits_by_counter), np.int64, len(waits_by_counter))
        by_core = np.argsort(owner[waiting], kind="stable")
        cores = owner[waiting][by_core]
        return cls(ids=ids, total=total, positive=positive, owner=owner, x_keys=x_keys[order],
                   x_upto=np.concatenate(([0], np.cumsum(amount[order]))), w_keys=w_keys[w_order],
                   w_upto=np.concatenate(([0], np.cumsum(value[w_order]))), span=span, x_stride=x_stride,
                   waited_on=(np.searchsorted(cores, np.arange(num_cores + 1)), waiting[by_core]))

    def waited_before(self, c: np.ndarray, pc: np.ndarray) -> np.ndarray:
        """The amount counter `c`'s core waits for on it at positions before `pc` (elementwise)."""
        base = c * self.span
        return self.w_upto[np.searchsorted(self.w_keys, base + pc)] - self.w_upto[np.searchsorted(self.w_keys, base)]

    def contributed(self, c: np.ndarray, core: np.ndarray, pc: np.ndarray, core_end: np.ndarray,
                    pc_end: int) -> np.ndarray:
        """What lands on counter `c` from (`core`, `pc`) up to before (`core_end`, `pc_end`), in the order of
        (issuer, position) (elementwise)."""
        base = c * self.x_stride
        hi = np.searchsorted(self.x_keys, base + core_end * self.span + pc_end)
        return self.x_upto[hi] - self.x_upto[np.searchsorted(self.x_keys, base + core * self.span + pc)]

    def waited_by(self, core: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(landing, counter) for each landing (by its sender's core) and each counter that core waits on."""
        start, counters = self._waited_on
        lo, hi = start[core], start[core + 1]
        lens = hi - lo
        j = np.repeat(np.arange(len(core)), lens)
        first = np.repeat(lo - (np.cumsum(lens) - lens), lens)
        return j, counters[first + np.arange(len(j))]


_OWNER, _POS, _AMOUNT = itemgetter(0), itemgetter(1), itemgetter(2)  # Contribution's; a WaitOp's pos is 1 too
_VALUE = itemgetter(3)  # WaitOp.value


def complete(low: Any) -> bool:
    """PRG-147: whether a lowering holds every operation of its program under `hardware`: it is static, no
    core fails, and barriers let every core reach its end (`Lowered.hb.reach`)."""
    return (low is not None and low.mode == MODE and low.ok and not low.failing
            and all(low.hb.reach(c) == n for c, n in enumerate(low.lengths)))


__all__ = ["Totals", "complete"]
