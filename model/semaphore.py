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
from collections.abc import Iterable

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

    def next_for(self, core: int) -> int:
        return self.next_id.get(core, FIRST_SEMAPHORE_ID)


def allocate(tables: SemTables, cores: Iterable[int], n: int) -> tuple[SemTables, dict[int, int]]:
    """SEM-1 allocate: each core in `cores` takes the next `n` ids of its own counter.

    The ids enter the one internal table shared by all cores (an id already
    there keeps its semaphore). Ids are never freed. Returns the new tables and
    each core's base id.
    """
    bases: dict[int, int] = {}
    internal = set(tables.internal)
    next_id = tables.next_id
    for core in cores:
        base = tables.next_for(core)
        bases[core] = base
        next_id = next_id.set(core, base + n)
        internal.update(range(base, base + n))
    return dataclasses.replace(tables, internal=frozenset(internal), next_id=next_id), bases


def guarantee_fixed(tables: SemTables, sem_id: int) -> SemTables:
    """SEM-2 fixed id: ensure the fixed-id table holds `sem_id` (idempotent)."""
    if sem_id in tables.fixed:
        return tables
    return dataclasses.replace(tables, fixed=tables.fixed | {sem_id})


def lookup(tables: SemTables, sem_id: int) -> SemKey | IdCollision | UnknownSemaphore:
    """SEM-3 lookup: the fixed table first; an id in both tables is an error.

    Every semaphore operation looks its id up (signal, wait, read, DMA start,
    DMA wait, task enqueue).
    """
    if sem_id in tables.fixed:
        if sem_id in tables.internal:
            return IdCollision(sem_id)
        return ("fixed", sem_id)
    if sem_id in tables.internal:
        return ("internal", sem_id)
    return UnknownSemaphore(sem_id)


def signal(counts: Counts, key: SemKey, core: int, inc: int) -> Counts:
    """SEM-4 signal: add `inc` to `key`'s count on `core`. Any core may signal any core."""
    return counts.set((key, core), counts.get((key, core), 0) + inc, drop=0)


def count(counts: Counts, key: SemKey, core: int) -> int:
    """SEM-6 read: `key`'s count on `core`."""
    return counts.get((key, core), 0)


def try_wait(counts: Counts, key: SemKey, core: int, value: int) -> Counts | None:
    """SEM-5 wait: when `core`'s own count reaches `value`, subtract it; else None (blocked).

    Only `core` itself ever waits on (and so decrements) its own count.
    """
    have = counts.get((key, core), 0)
    if have < value:
        return None
    return counts.set((key, core), have - value, drop=0)


def enqueue_task(queues: FMap, key: SemKey, core: int, task: Task) -> FMap:
    """SEM-7 enqueue: append a task that will signal `key` on `core`."""
    return queues.set((key, core), queues.get((key, core), ()) + (task,))


def pop_task(queues: FMap, key: SemKey, core: int) -> tuple[FMap, Task | None]:
    """SEM-7 pop: a waiter whose count is short takes the *last* queued task (LIFO)."""
    q = queues.get((key, core), ())
    if not q:
        return queues, None
    return queues.set((key, core), q[:-1], drop=()), q[-1]


def nonzero(counts: Counts, cores: Iterable[int]) -> tuple[tuple[SemKey, int, int], ...]:
    """SEM-8 exit query: (key, core, count) for every non-zero count on `cores`, sorted."""
    wanted = set(cores)
    return tuple(
        sorted(((k, c, v) for (k, c), v in counts.items() if c in wanted and v != 0), key=repr)
    )
