"""Semaphores: id tables, counts and task queues (rules SEM-1 .. SEM-8).

These are the rules of jax's shared-memory manager, as pure functions over
immutable values. The kernel-level semantics (`semcheck.model.step`) and the
API-level differential tests both use them.

A semaphore *key* names one semaphore object:
  ("internal", id)  an id from the internal table (SEM-1),
  ("fixed", id)     an id from the fixed-id table (SEM-2),
  ("site", site, i) hardware semantics: element i of allocation site `site` (HW-1),
  ("barrier",)      hardware semantics: the barrier semaphore (HW-1).
Each semaphore keeps one count per global core.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Container, Iterable, Mapping, Sequence

from semcheck.model.errors import IdCollision, UnknownSemaphore
from semcheck.model.fmap import FMap
from semcheck.model.ids import FIRST_SEMAPHORE_ID

SemKey = tuple
Counts = FMap  # FMap[(SemKey, core), int]; zero counts are absent
Task = tuple  # (dma ident, "read" | "read_write")


@dataclasses.dataclass(frozen=True)
class SemTables:
    """The manager's two id tables and its per-core id counters."""

    internal: frozenset[int] = frozenset()
    fixed: frozenset[int] = frozenset()
    next_id: FMap = FMap()  # FMap[core, int]; absent means FIRST_SEMAPHORE_ID


def handout(next_id: Mapping[int, int], cores: Iterable[int], n: int) -> dict[int, range]:
    """SEM-1 allocate, the decision: the ids each core in `cores` takes, the next `n` of its own counter.

    `next_id` maps a core to its next id (absent: FIRST_SEMAPHORE_ID). The
    caller advances each core's counter to the end of its range and adds the
    range to the internal table (`take`; the fast run does so on its working
    copies, through `advanced`).
    """
    out: dict[int, range] = {}
    for core in cores:
        base = next_id.get(core, FIRST_SEMAPHORE_ID)
        out[core] = range(base, base + n)
    return out


def advanced(ranges: Mapping[int, range]) -> dict[int, int]:
    """SEM-1 allocate, the counters: each core's next id once it took its range (`handout`): past its end."""
    return {core: r.stop for core, r in ranges.items()}


def take(tables: SemTables, ranges: Mapping[int, range]) -> SemTables:
    """SEM-1 allocate, the effect: each core's counter moves past its range, whose ids enter the internal table.

    The internal table is shared by all cores (an id already there keeps its
    semaphore); ids are never freed.
    """
    if not ranges:
        return tables
    internal = tables.internal.union(*ranges.values())
    next_id = tables.next_id.update(advanced(ranges))
    return dataclasses.replace(tables, internal=internal, next_id=next_id)


def allocate(tables: SemTables, cores: Iterable[int], n: int) -> tuple[SemTables, dict[int, int]]:
    """SEM-1 allocate: each core in `cores` takes the next `n` ids of its own counter.

    Returns the new tables and each core's base id.
    """
    ranges = handout(tables.next_id, cores, n)
    return take(tables, ranges), {core: r.start for core, r in ranges.items()}


def guarantee_fixed(tables: SemTables, sem_id: int) -> SemTables:
    """SEM-2 fixed id: ensure the fixed-id table holds `sem_id` (idempotent)."""
    if sem_id in tables.fixed:
        return tables
    return dataclasses.replace(tables, fixed=tables.fixed | {sem_id})


def lookup_in(
    fixed: Container[int], internal: Container[int], sem_id: int, *, collisions: bool = True
) -> SemKey | IdCollision | UnknownSemaphore:
    """SEM-3 lookup over the two tables (any containers of ids): the fixed table first.

    An id in both tables is ERR-1, an id in neither ERR-2. With
    `collisions=False` an id in both resolves to its fixed-id semaphore: the
    error-free system the collision analysis reasons about.
    """
    if sem_id in fixed:
        if collisions and sem_id in internal:
            return IdCollision(sem_id)
        return ("fixed", sem_id)
    if sem_id in internal:
        return ("internal", sem_id)
    return UnknownSemaphore(sem_id)


def lookup(tables: SemTables, sem_id: int, *, collisions: bool = True) -> SemKey | IdCollision | UnknownSemaphore:
    """SEM-3 lookup in the manager's tables.

    Every semaphore operation looks its id up (signal, wait, read, DMA start,
    DMA wait, task enqueue).
    """
    return lookup_in(tables.fixed, tables.internal, sem_id, collisions=collisions)


def signal(counts: Counts, key: SemKey, core: int, inc: int) -> Counts:
    """SEM-4 signal: add `inc` to `key`'s count on `core`. Any core may signal any core."""
    return counts.set((key, core), counts.get((key, core), 0) + inc, drop=0)


def count(counts: Counts, key: SemKey, core: int) -> int:
    """SEM-6 read: `key`'s count on `core`."""
    return counts.get((key, core), 0)


def shortfall(have: int, value: int) -> int:
    """SEM-5 wait, the rule itself: what a count of `have` lacks for a wait for `value`.

    The wait blocks while this is positive; once it is not, the wait passes and the count becomes
    `-shortfall` (the value is consumed). Every engine decides a wait by this function, on a frozen
    state, on a working copy, or on the sums of the static system.
    """
    return value - have


def raised(value: int) -> int:
    """SEM-5 wait for `value` < 0: what it adds to its count. A count is never below 0 (only a wait lowers it, and
    only to what `shortfall` leaves), so such a wait passes at once, and consuming `value` raises the count."""
    return -shortfall(0, value)


def try_wait(counts: Counts, key: SemKey, core: int, value: int) -> Counts | None:
    """SEM-5 wait: when `core`'s own count reaches `value`, subtract it; else None (blocked).

    Only `core` itself ever waits on (and so decrements) its own count.
    """
    short = shortfall(counts.get((key, core), 0), value)
    if short > 0:
        return None
    return counts.set((key, core), -short, drop=0)


def enqueue_task(queues: FMap, key: SemKey, core: int, task: Task) -> FMap:
    """SEM-7 enqueue: append a task that will signal `key` on `core`."""
    return queues.set((key, core), queues.get((key, core), ()) + (task,))


def next_task(queue: Sequence[Task]) -> int | None:
    """SEM-7 pop, the rule itself: which queued task a waiter whose count is short runs.

    The *last* one (LIFO); None when the queue is empty. The caller removes it from its queue (a
    frozen tuple here, a working list in the fast run).
    """
    return len(queue) - 1 if queue else None


def pop_task(queues: FMap, key: SemKey, core: int) -> tuple[FMap, Task | None]:
    """SEM-7 pop: a waiter whose count is short takes the task `next_task` picks."""
    q = queues.get((key, core), ())
    i = next_task(q)
    if i is None:
        return queues, None
    return queues.set((key, core), q[:i] + q[i + 1:], drop=()), q[i]


def nonzero(
    counts: Counts, cores: Iterable[int], by_core: Mapping[int, Iterable[tuple[SemKey, int]]] | None = None
) -> tuple[tuple[SemKey, int, int], ...]:
    """SEM-8 exit query: (key, core, count) for every non-zero count on `cores`, sorted.

    `by_core`: the counters each core may have a count on, for a run that keeps them (every other
    count is zero); only those of `cores` are read, instead of every count of the program.
    """
    wanted = set(cores)
    if by_core is None:
        found = ((k, c, v) for (k, c), v in counts.items() if c in wanted and v != 0)
    else:
        found = ((k, c, v) for core in wanted for k, c in by_core.get(core, ()) if (v := counts.get((k, c), 0)) != 0)
    return tuple(sorted(found, key=repr))
