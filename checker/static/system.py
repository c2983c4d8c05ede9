"""The static system S': what every operation of a program contributes to, waits on, or fails at.

A counter is `(key, core)`: one semaphore's count on one core. Keys are those of
`semcheck.model.semaphore`: `("internal", id)` and `("fixed", id)` under the interpreter's
semantics, `("site", site, i)` and `("barrier",)` on hardware (HW-1). `Lowered` is the system
`lowering.lower` computes (spec RUN-3); `ProgramOrder` is happens-before from program order and
barriers alone, a sound under-approximation.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import numpy as np

from semcheck.model.errors import Violation
from semcheck.model.barrier import Counted, awaited, instance, opens_at
from semcheck.model.ops import AllocSem, DmaMode, Loc, Program
from semcheck.model.schedule import ParkAndWake

Key = tuple
Counter = tuple  # (Key, core)



class EncodingBug(AssertionError):
    """The lowering or an encoding disagrees with the reference model: a bug in semcheck."""


class Contribution(NamedTuple):
    """`amount` added to `counter` by the op at (`owner`, `pos`) once it has started.

    (NamedTuples for the per-operation records: a frozen dataclass's
    construction is a tenth of a large lowering.)
    """

    owner: int
    pos: int
    amount: int
    counter: Counter
    kind: str  # "signal" | "dma_read" | "dma_write"
    dma: int | None = None  # index into Lowered.dmas


class WaitOp(NamedTuple):
    core: int
    pos: int
    counter: Counter
    value: int
    kind: str
    loc: Loc


@dataclasses.dataclass(frozen=True)
class BarrierOp:
    core: int
    pos: int
    name: str
    k: int  # this is the core's k-th barrier named `name` (from 1)
    participants: frozenset[int]
    loc: Loc


class DmaOp(NamedTuple):
    ident: int  # static index, in (core, pos) order
    core: int
    pos: int
    dst_core: int
    nbytes: int
    src_counter: Counter | None
    dst_counter: Counter
    loc: Loc
    src_amount: int  # what each half adds to its counter (DMA-6)
    dst_amount: int


@dataclasses.dataclass(frozen=True)
class SemAlloc:
    """What core `core` holds for allocation `label` (SEM-1 / HW-1)."""

    label: str
    site: str
    count: int
    issuer: int  # the core that executes the AllocSem
    pos: int  # its position there
    base: int | None  # this core's base id (interpreter), None on hardware
    ids: tuple[int, ...] | Violation | None  # the ids the kernel holds (the issuer's arange)
    op: AllocSem


@dataclasses.dataclass(frozen=True)
class AllocEvent:
    """One executed AllocSem / AllocBuffer and the per-core bases it hands out."""

    issuer: int
    pos: int
    op: Any
    bases: dict  # core -> base id (its own counter)


@dataclasses.dataclass
class Lowered:
    program: Program
    mode: DmaMode
    lengths: tuple[int, ...]
    failing: dict[int, tuple[int, Violation]]  # core -> (first failing position, violation)
    contributions: list[Contribution]
    by_counter: dict[Counter, list[Contribution]]
    waits: dict[tuple[int, int], WaitOp]
    waits_by_counter: dict[Counter, list[WaitOp]]
    barriers: dict[tuple[int, int], BarrierOp]
    barrier_pos: dict[tuple[int, str, int], int]
    dmas: list[DmaOp]
    sem_allocs: dict[tuple[int, str], SemAlloc]
    sem_events: list[AllocEvent]
    buffer_events: list[AllocEvent]
    buffer_ids: dict[tuple[int, str], int]
    gets: list[tuple[int, int]]  # GetBarrierSem positions
    unsupported: list[str]
    hb: HappensBefore
    # per core: every (issuer, pos, op) that advances its semaphore / buffer counter (any order)
    sem_counter_events: dict[int, list] = dataclasses.field(default_factory=dict)
    buf_counter_events: dict[int, list] = dataclasses.field(default_factory=dict)
    racy_counters: set[tuple[str, int]] = dataclasses.field(default_factory=set)  # ("semaphore"|"buffer", core)
    _sem_by_core: dict | None = dataclasses.field(default=None, init=False, repr=False, compare=False)
    _size: dict | None = dataclasses.field(default=None, init=False, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return not self.unsupported

    def held_at(self, core: int) -> int:
        """Positions >= cap are never executed in S' (the core blocks at a failing op)."""
        c = self.failing.get(core)
        return self.lengths[core] if c is None else c[0]

    def sem_allocation(self, core: int, sem_id: int) -> tuple[AllocEvent, int] | None:
        """The first allocation (in `sem_events` order) that handed interpreter id `sem_id` to `core`,
        with the id's index in it; None when none did.

        Indexed by core once: a report names every counter it judges, and a scan of every event per
        name was quadratic in the devices (4,096 devices: 33k names x 12k events).
        """
        if self._sem_by_core is None:
            index: dict[int, list[AllocEvent]] = {}
            for ev in self.sem_events:
                for c in ev.bases:
                    index.setdefault(c, []).append(ev)
            self._sem_by_core = index
        for ev in self._sem_by_core.get(core, ()):
            base = ev.bases[core]
            if base is not None and base <= sem_id < base + ev.op.count:
                return ev, sem_id - base
        return None

    def size(self) -> dict[str, int]:
        """The lowering's sizes, for the statistics of each property that reads it: counted once (the
        counters are a set of every counter, which at 8,960 devices five properties built each)."""
        if self._size is None:
            self._size = {
                "ops": sum(self.lengths),
                "contributions": len(self.contributions),
                "waits": len(self.waits),
                "barriers": len(self.barriers),
                "counters": len(self.by_counter.keys() | self.waits_by_counter.keys()),
            }
        return dict(self._size)


# --- happens-before from program order and barriers ----------------------------------


class HappensBefore:
    """Vector clocks over program order and barrier synchronisation, computed lazily.

    A barrier-only simulation: every core runs freely except at barriers,
    which open when every participant has reached its matching barrier
    (BAR-1). Operations the simulation never passes are never executed in
    any real run (real runs are more constrained), so `reached` is an
    over-approximation of the executed operations and `before` a sound
    under-approximation of happens-before.
    """

    def __init__(self, program: Program, barrier_pos: dict, barriers: dict) -> None:
        self.program = program
        self.barrier_pos = barrier_pos
        self.barriers = barriers
        self._segs: list[list[tuple[int, np.ndarray]]] | None = None
        self._frontier: list[int] | None = None

    def _compute(self) -> None:
        prog = self.program
        n = prog.topology.num_cores
        zero = np.zeros(n, dtype=np.int64)
        # per core, (barrier position, clock after passing it): the clocks are joins, read only
        segs: list[list[tuple[int, np.ndarray]]] = [[(-1, zero)] for _ in range(n)]
        frontier = [0] * n
        bpos_by_core: list[list[int]] = [[] for _ in range(n)]
        for core, pos in sorted(self.barriers):
            bpos_by_core[core].append(pos)
        nxt = [0] * n  # index into bpos_by_core
        arrived = [-1] * n  # the index into bpos_by_core each core last arrived at

        def seg_before(core: int, pos: int) -> np.ndarray:
            # the clock of `core` after its last barrier before `pos`, its own entry not yet raised
            for bpos, vc in reversed(segs[core]):
                if bpos < pos:
                    return vc
            raise AssertionError("unreachable")

        def vc_at(core: int, pos: int) -> np.ndarray:
            # clock of the moment before (core, pos) executes
            v = seg_before(core, pos).copy()
            v[core] = max(v[core], pos)
            return v

        def join(core: int, i: int, where: dict[int, int]) -> np.ndarray:
            # the clocks before (core, i) and before each participant's own barrier, joined
            joined = seg_before(core, i).copy()
            for p, pp in where.items():
                np.maximum(joined, seg_before(p, pp), out=joined)
            joined[core] = max(joined[core], i)
            for p, pp in where.items():
                if joined[p] < pp:
                    joined[p] = pp
            return joined

        self._vc_at = vc_at
        # RUN-33: one barrier's clock once for all its participants, keyed by its instance
        joins: dict[tuple, np.ndarray] = {}
        # BAR-1 counted (RUN-34): each core runs to its next barrier and parks there until the
        # barrier's count of arrivals is full, so a barrier costs its participants once, not once per
        # participant per pass; a name reached with two participant sets is decided on positions
        counted = Counted()
        sched = ParkAndWake(n)
        while (core := sched.next()) is not None:
            mine = bpos_by_core[core]
            while nxt[core] < len(mine):
                i = mine[nxt[core]]
                arrives = arrived[core] != nxt[core]  # first time here, not woken to look again
                arrived[core] = nxt[core]
                frontier[core] = i
                b = self.barriers[(core, i)]
                counted.reach(core, b.name, b.k, b.participants)
                now = counted.opens(b.name, b.k, b.participants)
                where = None
                if now is None:
                    where = self._awaited(b)
                    now = opens_at(b.k, where, frontier)
                    if not now and arrives:  # the answer of a core parked at this (name, k) may have changed
                        sched.opened(b.name, b.k)
                if not now:
                    sched.park_at(b.name, b.k, core)
                    break
                sched.opened(b.name, b.k)
                key = instance(b.name, b.k, b.participants)
                own = core in b.participants
                joined = joins.get(key) if own else None
                if joined is None:
                    joined = join(core, i, self._awaited(b) if where is None else where)
                    if own:
                        joins[key] = joined
                segs[core].append((i, joined))
                nxt[core] += 1
                frontier[core] = i + 1
            else:
                frontier[core] = len(prog.cores[core])
        self._segs, self._frontier = segs, frontier

    def _awaited(self, b: BarrierOp) -> dict[int, int] | None:
        return awaited(b.participants, lambda p: self.barrier_pos.get((p, b.name, b.k)))

    def reach(self, core: int) -> int:
        """The first position of `core` that never executes (its length if all may)."""
        if self._frontier is None:
            if not self.barriers:
                return len(self.program.cores[core])
            self._compute()
        return self._frontier[core]

    def reached(self, core: int, pos: int) -> bool:
        """Whether (core, pos) may execute (False: never, in any run)."""
        if self._frontier is None:
            if not self.barriers:
                return pos < len(self.program.cores[core])
            self._compute()
        return pos < self._frontier[core]

    def before(self, a: int, i: int, b: int, j: int) -> bool:
        """Whether (a, i) happens before (b, j) in every run that executes (b, j)."""
        if a == b:
            return i < j
        if not self.barriers:
            return False
        if self._segs is None:
            self._compute()
        return int(self._vc_at(b, j)[a]) > i

