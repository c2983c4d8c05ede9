"""Programs whose every core runs one and the same sequence of steps in every `on_wait` run (ACC-49).

Under `on_wait` a copy runs only inside a wait on one of its semaphores (DMA-3), popped last in, first
out from that semaphore's queue on the waiting core (SEM-7). When a device has one core and nothing
reaches across devices (every copy and every signal targets its own core, no core fetches the barrier
semaphore), each (semaphore, core)'s queue is filled, popped and counted by that core alone, and the ids
a core takes come from its own counter (SEM-1): what a core does next is a function of what it did so
far. The other cores only make it wait at a barrier, or stop it by failing. So every run performs, on
each core, a prefix of one sequence of steps, the same in every run, and a run with no failure
performs all of it.
"""

from __future__ import annotations

from semcheck.model.ops import DmaStart, Program, Signal


def schedule_free(program: Program) -> str | None:
    """ACC-49: None when every core of `program` runs the same steps in every `on_wait` run, else why not."""
    topo = program.topology
    if topo.cores_per_device != 1:
        return "a device has several cores"
    for g, ops in enumerate(program.cores):
        own = topo.device_of(g)
        for op in ops:
            if op.fetches_barrier:
                return f"a core fetches the barrier semaphore (line {op.loc.line})"
            if type(op) in (DmaStart, Signal) and (op.device not in (None, own) or op.core not in (None, 0)):
                return f"a {'copy' if type(op) is DmaStart else 'signal'} targets another device (line {op.loc.line})"
    return None


__all__ = ["schedule_free"]
