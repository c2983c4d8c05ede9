"""DMA halves and waits that run queued tasks (rules DMA-2 .. DMA-5, SEM-5, SEM-7).

Each function works on any frozen state with the fields `counts`, `queues`
and `dmas`: the kernel-level `State` (through `semcheck.model.step`) and the
manager's own state (`semcheck.model.manager`), so both levels run DMAs by
the same rules.
"""

from __future__ import annotations

import dataclasses
from typing import TypeVar

from semcheck.model import semaphore as sem
from semcheck.model.errors import ModelBug
from semcheck.model.ops import DmaMode, DmaStart, SemType
from semcheck.model.semaphore import SemKey, Task
from semcheck.model.state import Dma

S = TypeVar("S")  # a state with counts, queues and dmas


def _set_dma(state: S, dma: Dma) -> S:
    dmas = list(state.dmas)
    dmas[dma.ident] = dma
    return dataclasses.replace(state, dmas=tuple(dmas))


def half_amount(nbytes: int, sem_type: SemType, mode: DmaMode) -> int:
    """DMA-6: what one half of an `nbytes` copy adds to a semaphore of type `sem_type`.

    The interpreter adds the byte count whatever the type (D20). On hardware
    a DMA semaphore counts bytes and any other (REGULAR, barrier) counts the
    completed copy: 1.
    """
    return nbytes if counts_bytes(sem_type, mode) else 1


def counts_bytes(sem_type: SemType, mode: DmaMode) -> bool:
    """DMA-6: whether a DMA half adds its byte count to a semaphore of this type under `mode`."""
    return mode != "hardware" or sem_type == "dma"


def amounts(op: DmaStart, mode: DmaMode) -> tuple[int, int]:
    """DMA-6: what the read half adds to the send semaphore and the write half to the receive one."""
    return half_amount(op.nbytes, op.src_sem_type, mode), half_amount(op.nbytes, op.dst_sem_type, mode)


def dma_read(state: S, ident: int) -> S:
    """DMA-2 read half: signal the send semaphore on the source core with its amount (DMA-6)."""
    dma = state.dmas[ident]
    if dma.phase != 0:
        return state  # already read through another task
    counts = state.counts
    if dma.src_key is not None:
        counts = sem.signal(counts, dma.src_key, dma.src_core, dma.src_amount)
    return _set_dma(dataclasses.replace(state, counts=counts), dataclasses.replace(dma, phase=1))


def dma_write(state: S, ident: int) -> S:
    """DMA-2 write half: signal the receive semaphore on the destination core with its amount (DMA-6)."""
    dma = state.dmas[ident]
    if dma.phase == 0:
        raise ModelBug(f"DMA {ident} written before read")
    if dma.phase == 2:
        return state
    counts = sem.signal(state.counts, dma.dst_key, dma.dst_core, dma.dst_amount)
    return _set_dma(dataclasses.replace(state, counts=counts), dataclasses.replace(dma, phase=2))


def run_task(state: S, task: tuple) -> S:
    """DMA-4: a waiter runs a popped task: the read half, or read-then-write (each half at most once)."""
    ident, kind = task
    state = dma_read(state, ident)
    if kind == "read_write":
        state = dma_write(state, ident)
    return state


def tasks(dma: Dma) -> tuple[tuple[SemKey, int, Task], ...]:
    """DMA-3: the tasks an on_wait start queues, as (semaphore, core, task): a read task on
    (send semaphore, source core) if there is one, then a read-then-write task on
    (receive semaphore, destination core)."""
    read_write = (dma.dst_key, dma.dst_core, (dma.ident, "read_write"))
    if dma.src_key is None:
        return (read_write,)
    return ((dma.src_key, dma.src_core, (dma.ident, "read")), read_write)


def start(state: S, dma: Dma, mode: DmaMode) -> S:
    """DMA-2 / DMA-3 / DMA-5: start `dma` (its semaphores already looked up, DMA-1) per mode.

    eager: both halves run now, read then write. on_wait: a read task is
    queued on (send semaphore, source core) if there is one, and a
    read-then-write task on (receive semaphore, destination core). hardware:
    the halves are actors of their own.
    """
    state = dataclasses.replace(state, dmas=state.dmas + (dma,))
    if mode == "eager":
        return run_task(state, (dma.ident, "read_write"))
    if mode == "on_wait":
        queues = state.queues
        for key, core, task in tasks(dma):
            queues = sem.enqueue_task(queues, key, core, task)
        return dataclasses.replace(state, queues=queues)
    return state


def wait_once(state: S, key: SemKey, core: int, value: int) -> tuple[S, bool] | None:
    """SEM-5 + SEM-7 / DMA-4: one step of `core`'s wait for `value` on `key` (already looked up).

    The count suffices: it is consumed and the wait is done (True). Else the
    last queued task on (key, core) runs and the wait goes on (False). Else
    the wait is blocked (None).
    """
    counts = sem.try_wait(state.counts, key, core, value)
    if counts is not None:
        return dataclasses.replace(state, counts=counts), True
    queues, task = sem.pop_task(state.queues, key, core)
    if task is None:
        return None
    return run_task(dataclasses.replace(state, queues=queues), task), False
