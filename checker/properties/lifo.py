"""ERR-33: which of a core's own copies a wait can run before it pops a failing copy's task (SEM-7, LIFO).

Under `on_wait` a start appends its tasks to the queues of its semaphores (DMA-3), and a waiter whose count is
short pops the *last* task of its own (semaphore, core) queue, runs it and looks at its count again (jax's
`Semaphore.wait`; only that core's waits pop that queue). So a task its own core queued before a failing copy's
task, with no wait on that queue in between, is still queued, under the failing task, whenever a run that has not
failed begins a later wait there: popping the failing task first would have raised. The receive amount of such a
*buried* copy cannot reach the semaphore before the wait raises (its write half runs only from that queue).
"""

from __future__ import annotations

from semcheck.model.dma import amounts
from semcheck.model.ops import DmaMode, DmaStart, Program, Wait
from semcheck.model.step import deferred_view_failures


def _queued_here(program: Program, core: int, op: DmaStart, key: tuple) -> tuple[bool, bool]:
    """Whether `core`'s start `op` queues its read task (send semaphore, issuing core) and its read-then-write task
    (receive semaphore, destination core) on `core`'s queue of the semaphore `key` (device, label, element)."""
    topo = program.topology
    own = topo.device_of(core)
    dev = own if op.device is None else op.device
    dst_core = topo.global_core(dev, topo.local_core_of(core) if op.core is None else op.core)
    recv = dst_core == core and (dev, op.dst_sem.label, op.dst_sem.index) == key
    send = op.src_sem is not None and (own, op.src_sem.label, op.src_sem.index) == key
    return send, recv


def buried(program: Program, core: int, pc: int, wait: Wait, mode: DmaMode) -> tuple[DmaStart | None, int]:
    """The failing copy whose task is the last one `core` queued on the queue the wait at (`core`, `pc`) pops (the
    first failing task that wait can pop: every other failing one lies under it), and the receive bytes of the
    copies buried under it (queued by `core` after its last wait on that queue before it, and not failing); (None,
    0) when `core` queued no failing task there."""
    key = (program.topology.device_of(core), wait.sem.label, wait.sem.index)
    entries: list[tuple[int, bool, int]] = []  # (position, the task raises, what its write half adds here)
    waits: list[int] = []
    for p, op in enumerate(program.cores[core][:pc]):
        if type(op) is Wait and (key[0], op.sem.label, op.sem.index) == key:
            waits.append(p)  # a wait on this queue may pop every task queued on it so far
        elif type(op) is DmaStart:
            send, recv = _queued_here(program, core, op, key)
            read_err, write_err = deferred_view_failures(op, mode)
            if send:
                entries.append((p, read_err is not None, 0))
            if recv:
                raises = read_err is not None or write_err is not None
                entries.append((p, raises, 0 if raises else max(amounts(op, mode)[1], 0)))
    failing = [p for p, raises, _ in entries if raises]
    if not failing:
        return None, 0
    top = failing[-1]
    since = max((w for w in waits if w < top), default=-1)
    return program.cores[core][top], sum(a for p, raises, a in entries if since < p < top and not raises)
