"""jax's shared-memory manager at the level of its API (SEM-*, DMA-1 .. DMA-4, BUF-*, RACE-1).

The kernel-level model (`semcheck.model.step`) runs whole programs; this
module is the manager a program's callbacks talk to, one method per rule,
as pure functions over an immutable `Manager`. The conformance vectors
(`specs/conformance/`) hold it and jax's own manager to the same answers.
Every function delegates to the rule the kernel level uses (`semaphore`,
`dma`, `buffer`, `kernel_buffer`, `clocks`).

A function returns the new manager (and its result), or a `Violation` the
manager raises (and then changes nothing).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from semcheck.model import buffer as buf
from semcheck.model import clocks
from semcheck.model import dma as dma_rules
from semcheck.model import kernel_buffer as kbuf
from semcheck.model import semaphore as sem
from semcheck.model.errors import Violation
from semcheck.model.fmap import FMap
from semcheck.model.ops import NO_LOC
from semcheck.model.semaphore import SemKey, SemTables, Task
from semcheck.model.state import Dma


@dataclasses.dataclass(frozen=True)
class Config:
    """How the interpreter built the manager (the vectors' `config`)."""

    num_devices: int = 1
    cores_per_device: int = 1
    dma_execution_mode: str = "on_wait"  # "eager" | "on_wait"
    detect_races: bool = False
    out_of_bounds_reads: str = "raise"  # BUF-10
    uninitialized_memory: str = "nan"  # BUF-8a

    @property
    def num_cores(self) -> int:
        return self.num_devices * self.cores_per_device

    def cores_of_device(self, device: int) -> range:
        return range(device * self.cores_per_device, (device + 1) * self.cores_per_device)


@dataclasses.dataclass(frozen=True)
class Manager:
    """The manager's state: semaphore tables, counts, task queues, DMAs, buffers.

    `signals` records the counters a plain signal reached; with the DMA
    halves that ran it tells RACE-1 which counters hold a clock.
    """

    tables: SemTables = SemTables()
    counts: FMap = FMap()  # (SemKey, core) -> count
    queues: FMap = FMap()  # (SemKey, core) -> tasks
    dmas: tuple[Dma, ...] = ()
    buffers: buf.BufferStore = buf.BufferStore()
    signals: frozenset = frozenset()  # (SemKey, core)


# --- semaphores -------------------------------------------------------------------------


def allocate_semaphores(m: Manager, key: int, n: int) -> tuple[Manager, int]:
    """SEM-1 `allocate_semaphores`: `key`'s next `n` ids join the internal table; the base id."""
    tables, bases = sem.allocate(m.tables, (key,), n)
    return dataclasses.replace(m, tables=tables), bases[key]


def guarantee_fixed_id(m: Manager, sem_id: int) -> Manager:
    """SEM-2 `guarantee_semaphore_with_fixed_id`."""
    return dataclasses.replace(m, tables=sem.guarantee_fixed(m.tables, sem_id))


def lookup(m: Manager, ids: Sequence[int | None]) -> tuple[SemKey | None, ...] | Violation:
    """SEM-3 `get_semaphores_and_increment_clock`: look every id up, in order (None stays None)."""
    out = []
    for sem_id in ids:
        key = None if sem_id is None else sem.lookup(m.tables, sem_id)
        if isinstance(key, Violation):
            return key
        out.append(key)
    return tuple(out)


def signal(m: Manager, key: SemKey, core: int, inc: int) -> Manager:
    """SEM-4: add `inc` to `key`'s count on `core` (and, RACE-1, leave a clock there)."""
    return dataclasses.replace(
        m, counts=sem.signal(m.counts, key, core, inc), signals=m.signals | {(key, core)}
    )


def read(m: Manager, key: SemKey, core: int) -> int:
    """SEM-6: `key`'s count on `core`."""
    return sem.count(m.counts, key, core)


def holds_clock(m: Manager, key: SemKey, core: int) -> bool:
    """RACE-1: whether a signal ever reached `key` on `core`: a plain one, or a DMA half that ran."""
    return clocks.reached(m.signals, ((d.phase, d) for d in m.dmas), key, core)


def wait(cfg: Config, m: Manager, key: SemKey, core: int, value: int) -> tuple[Manager, Violation | None] | None:
    """SEM-5 with SEM-7 / DMA-4, then RACE-1: wait for `value` on `key` on `core`; None when it blocks.

    While the count is short the waiter runs queued tasks, last first. With
    race detection the wait, having consumed, takes the counter's clock: on
    a counter no signal ever reached there is none, and the wait fails an
    assertion (RACE-1).
    """
    while True:
        out = dma_rules.wait_once(m, key, core, value)
        if out is None:
            return None
        m, done, _ = out  # the manager's copies carry no views (ACC-11 is the kernel's)
        if done:
            return m, clocks.finished_wait(cfg.detect_races, key, core, lambda: holds_clock(m, key, core))


def dma_start(
    cfg: Config, m: Manager, src_core: int, dst_core: int, nbytes: int, src_id: int | None, dst_id: int
) -> tuple[Manager, int] | Violation:
    """DMA-1 .. DMA-3: look both ids up (send first), then start the DMA per mode; its index."""
    keys = lookup(m, (src_id, dst_id))
    if isinstance(keys, Violation):
        return keys
    src_key, dst_key = keys
    ident = len(m.dmas)
    d = Dma(ident, src_core, dst_core, nbytes, src_key, dst_key, NO_LOC, nbytes, nbytes)  # the manager knows no types (D20)
    return dma_rules.start(m, d, cfg.dma_execution_mode), ident


def enqueue_task(m: Manager, key: SemKey, core: int, task: Task) -> Manager:
    """SEM-7 `enqueue_task`, on a semaphore already looked up."""
    return dataclasses.replace(m, queues=sem.enqueue_task(m.queues, key, core, task))


def append_semaphore_task(m: Manager, sem_id: int, core: int, task: Task) -> Manager | Violation:
    """SEM-3 then SEM-7: `append_semaphore_task` looks the id up, then queues the task."""
    key = sem.lookup(m.tables, sem_id)
    if isinstance(key, Violation):
        return key
    return enqueue_task(m, key, core, task)


def nonzero(cfg: Config, m: Manager, device: int) -> tuple[tuple[SemKey, int, int], ...]:
    """SEM-8 `get_sempahores_with_nonzero_count`: (key, core, count) on the device's cores."""
    return sem.nonzero(m.counts, cfg.cores_of_device(device))


# --- buffers: the manager's methods (BUF-1 .. BUF-7) --------------------------------------


def _with(m: Manager, out):
    """Apply a buffer rule's outcome: a new store (with a result), or a Violation as it is."""
    if isinstance(out, Violation):
        return out
    if isinstance(out, tuple):
        store, result = out
        return dataclasses.replace(m, buffers=store), result
    return dataclasses.replace(m, buffers=out)


def next_buffer_id(m: Manager, device: int, core: int) -> tuple[Manager, int]:
    """BUF-1 `get_next_buffer_id`."""
    return _with(m, buf.next_buffer_id(m.buffers, (device, core)))


def allocate_buffer(m: Manager, key: tuple, ref_count: int, value: np.ndarray, logical_shape=None) -> Manager | Violation:
    """BUF-2 `allocate_buffer`."""
    return _with(m, buf.allocate(m.buffers, key, ref_count, value, logical_shape))


def deallocate_buffer(m: Manager, key: tuple) -> Manager | Violation:
    """BUF-3 `deallocate_buffer`."""
    return _with(m, buf.deallocate(m.buffers, key))


def get_buffer_content(m: Manager, key: tuple, rnge: tuple) -> buf.Access | Violation:
    """BUF-4 `get_buffer_content`."""
    return buf.get(m.buffers, key, rnge)


def store_buffer_content(m: Manager, key: tuple, rnge: tuple, value: np.ndarray):
    """BUF-5 `store_buffer_content`: (manager, access) or a Violation."""
    return _with(m, buf.store_(m.buffers, key, rnge, value))


def swap_buffer_content(m: Manager, key: tuple, rnge: tuple, value: np.ndarray, mask=None):
    """BUF-6 / BUF-7 `swap_buffer_content`: (manager, access) or a Violation."""
    return _with(m, buf.swap(m.buffers, key, rnge, value, mask))


# --- buffers: the interpreter's callbacks (BUF-8 .. BUF-12) ----------------------------------


def kernel_allocate_buffer(cfg: Config, m: Manager, device: int, core: int | None, memory_space: str,
                           value: np.ndarray, padded_shape=None) -> tuple[Manager, int | Violation]:
    """BUF-8: a kernel allocation; the id handed to the kernel, or its failure (the allocations stay)."""
    store, handed = kbuf.allocate_for_kernel(m.buffers, device, core, memory_space, value, cfg.cores_per_device,
                                             padded_shape, cfg.uninitialized_memory)
    return dataclasses.replace(m, buffers=store), handed


def kernel_deallocate_buffer(m: Manager, device: int, core: int, memory_space: str, buffer_id: int) -> Manager | Violation:
    """BUF-9: a kernel deallocation."""
    return _with(m, kbuf.deallocate_for_kernel(m.buffers, device, core, memory_space, buffer_id))


def kernel_get(cfg: Config, m: Manager, device: int, core: int, memory_space: str, buffer_id: int,
               rnge: tuple) -> np.ndarray | Violation:
    """BUF-10: a kernel read."""
    return kbuf.kernel_get(m.buffers, device, core, memory_space, buffer_id, rnge,
                           cfg.out_of_bounds_reads, cfg.uninitialized_memory)


def kernel_store(m: Manager, device: int, core: int, memory_space: str, buffer_id: int, rnge: tuple,
                 value: np.ndarray) -> Manager | Violation:
    """BUF-11: a kernel store."""
    return _with(m, kbuf.kernel_store(m.buffers, device, core, memory_space, buffer_id, rnge, value))


def kernel_swap(m: Manager, device: int, core: int, memory_space: str, buffer_id: int, rnge: tuple,
                value: np.ndarray, mask=None):
    """BUF-12: a kernel swap: (manager, old data) or a Violation."""
    return _with(m, kbuf.kernel_swap(m.buffers, device, core, memory_space, buffer_id, rnge, value, mask))
