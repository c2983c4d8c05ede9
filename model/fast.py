"""The fast maximal run (RUN-3): one run decides deadlock for persistent programs.

It runs each core as far as it can, parks it on the count or barrier it waits
for and wakes it when that changes: time linear in the program (the spec's
RUN-3 says why one run suffices). It is a driver over the step relation's
rule functions (`step.named`, `semaphore.lookup_in`, `step.sem_allocation`,
`step.barrier_sem`, `step.buffer_allocation`, `step.exit_warning`,
`step.is_global`, `step.target_core`, `dma.tasks`, `dma.amounts`); it keeps counts, task queues and DMA
phases in mutable working copies, because the step relation copies its
state on every step. `tests/test_persistence.py` replays its schedules on the
step relation and compares whole states.
"""

from __future__ import annotations

from collections import deque
from typing import Protocol

from semcheck.model.dma import amounts as dma_amounts
from semcheck.model.dma import tasks as dma_tasks
from semcheck.model.errors import ModelBug, Violation
from semcheck.model.fmap import FMap
from semcheck.model.buffer import BufferStore
from semcheck.model.ops import (
    AllocBuffer,
    AllocSem,
    Barrier,
    DmaMode,
    DmaStart,
    ExitCheck,
    Access,
    FreeBuffer,
    GetBarrierSem,
    Program,
    Read,
    SemRef,
    Signal,
    Wait,
)
from semcheck.model.run import classify
from semcheck.model.semaphore import SemTables, count, lookup_in
from semcheck.model.state import Dma, ExitWarning, Failure, Outcome, State
from semcheck.model.step import (
    barrier_sem,
    buffer_allocation,
    exit_warning,
    is_global,
    named,
    sem_allocation,
    target_core,
)


def _with_phase(d: Dma, phase: int) -> Dma:
    # dataclasses.replace costs a third of a DMA's handling on large programs
    return Dma(d.ident, d.src_core, d.dst_core, d.nbytes, d.src_key, d.dst_key, d.loc, d.src_amount, d.dst_amount, phase)


class RunObserver(Protocol):
    """What a fast run tells an observer, in the run's order (DR-6).

    A signal's `source` is `(core, pc)` for a `Signal` op and `(dma ident, half)` for a DMA half.
    """

    def signal(self, counter: tuple, inc: int, source: tuple) -> None: ...
    def wait(self, core: int, pc: int, counter: tuple, value: int) -> None: ...
    def start(self, core: int, pc: int, ident: int) -> None: ...
    def arrive(self, core: int, pc: int, name: str, k: int) -> None: ...
    def barrier(self, core: int, pc: int, name: str, k: int, participants: tuple[int, ...]) -> None: ...
    def access(self, core: int, pc: int) -> None: ...


class _Halt(Exception):
    """Internal control flow: the current core failed."""


def fast_run(
    program: Program,
    mode: DmaMode,
    *,
    freeze: dict[int, int] | None = None,
    lookup_errors: bool = True,
    record: bool = True,
    suppress: frozenset[tuple[int, int, str]] = frozenset(),
    observer: RunObserver | None = None,
) -> Outcome:
    """RUN-3: one maximal run, in time linear in the program.

    `freeze[g] = i` stops core g before its op i (used to ask what the other
    cores can do meanwhile). With `lookup_errors=False`, an id in both tables
    resolves to its fixed-id semaphore instead of failing (the error-free
    system the collision analysis reasons about). With `record`, the returned
    outcome carries the schedule, which `semcheck.model.run.run` replays.
    `suppress` holds `(core, pc, half)` of DMA halves that never happen (a
    suppressed read half suppresses its write too): the restricted systems
    of the race property (DR-2). An `observer` is told of every event that
    orders others (signals, passed waits and barriers, DMA starts, accesses):
    the happens-before pass of the race property (DR-6) rides on this run.
    """
    topo = program.topology
    hw = mode == "hardware"
    n = topo.num_cores
    freeze = freeze or {}
    pcs = [0] * n
    counts: dict = {}
    internal: set[int] = set()
    fixed: set[int] = set()
    next_id: dict[int, int] = {}
    next_buf: dict[tuple[int, int], int] = {}  # (device, local core) -> next buffer id (BUF-1)
    allocs: dict = {}
    buffer_keys: dict = {}
    queues: dict = {}
    dmas: list[Dma] = []  # as started (phase 0); phases live in `phase` until the end
    phase: list[int] = []
    steps = [("core", c) for c in range(n)]  # schedule entries, shared rather than rebuilt per op
    passed: dict = {}
    reads: list = []
    warnings: list[ExitWarning] = []
    failure: list[Failure] = []
    dead_devices: set[int] = set()
    schedule: list = []
    waiting: dict = {}  # (key, core) -> core parked on it
    looked: dict = {}  # core -> the semaphore its unfinished wait looked up
    resolved: dict = {}  # (core, label, index) -> what the reference resolves to while the tables stay as they are
    barrier_waiters: dict = {}  # (name, k) -> cores parked
    ready = deque(range(n))
    queued = [True] * n

    def wake(core: int) -> None:
        if not queued[core]:
            queued[core] = True
            ready.append(core)

    def signal(key, core: int, inc: int, source) -> None:
        counter = (key, core)
        if observer is not None:
            observer.signal(counter, inc, source)
        counts[counter] = counts.get(counter, 0) + inc
        if counter in waiting:
            wake(waiting.pop(counter))

    def do_fail(core: int, violation: Violation) -> None:
        pc = pcs[core]
        op = program.cores[core][pc]
        f = Failure(violation, core, pc, op.loc)
        failure.append(f)
        if record:
            schedule.append(steps[core])  # the failing step
        if not is_global(program, f):
            dead_devices.add(topo.device_of(core))
        raise _Halt

    def resolve(core: int, ref: SemRef):
        # SEM-3/HW-1 through the step relation's own functions. A result stays
        # valid while the tables and the core's allocations do not change, so
        # it is remembered until the next allocation or fixed-id insertion.
        ck = (core, ref.label, ref.index)
        key = resolved.get(ck)
        if key is None:
            key = named(program, mode, allocs.get((core, ref.label)), core, ref)
            if type(key) is int:
                key = lookup_in(fixed, internal, key, collisions=lookup_errors)
            if type(key) is not tuple:
                do_fail(core, key)
            resolved[ck] = key
        return key

    def dma_read(d: Dma) -> None:
        if phase[d.ident] == 0:
            if d.src_key is not None:
                signal(d.src_key, d.src_core, d.src_amount, (d.ident, "read"))
            phase[d.ident] = 1

    def dma_write(d: Dma) -> None:
        if phase[d.ident] == 1:
            signal(d.dst_key, d.dst_core, d.dst_amount, (d.ident, "write"))
            phase[d.ident] = 2

    def barrier_reached(p: int, name: str) -> int:
        r = passed.get((p, name), 0)
        ops = program.cores[p]
        pc = pcs[p]
        if pc < len(ops) and isinstance(ops[pc], Barrier) and ops[pc].name == name and freeze.get(p, len(ops) + 1) > pc:
            r += 1
        return r

    def run_core(core: int) -> None:
        ops = program.cores[core]
        stop = min(len(ops), freeze.get(core, len(ops)))
        # failures and dead devices change only when a core fails, which ends its run_core
        if (failure and is_global(program, failure[-1])) or topo.device_of(core) in dead_devices:
            return
        while pcs[core] < stop:
            op = ops[pcs[core]]
            t = type(op)
            if t is Wait:
                key = looked.get(core)
                if key is None:
                    key = resolve(core, op.sem)
                    if counts.get((key, core), 0) < op.value:  # the lookup is a step of its own (SEM-5)
                        looked[core] = key
                        if record:
                            schedule.append(steps[core])
                counter = (key, core)
                while True:
                    have = counts.get(counter, 0)
                    if have >= op.value:
                        counts[counter] = have - op.value
                        looked.pop(core, None)
                        if observer is not None:
                            observer.wait(core, pcs[core], counter, op.value)
                        break
                    q = queues.get(counter)
                    if q:
                        ident, kind = q.pop()
                        if record:
                            schedule.append(steps[core])
                        dma_read(dmas[ident])
                        if kind == "read_write":
                            dma_write(dmas[ident])
                        continue
                    waiting[counter] = core
                    return
            elif t is Signal:
                key = resolve(core, op.sem)
                target = target_core(program, mode, core, op.device, op.core, dma=False)
                if isinstance(target, Violation):
                    do_fail(core, target)
                signal(key, target, op.inc, (core, pcs[core]))
            elif t is DmaStart:
                src_key = resolve(core, op.src_sem) if op.src_sem is not None else None
                dst_key = resolve(core, op.dst_sem)
                dst = target_core(program, mode, core, op.device, op.core, dma=True)
                if isinstance(dst, Violation):
                    do_fail(core, dst)
                d = Dma(len(dmas), core, dst, op.nbytes, src_key, dst_key, op.loc, *dma_amounts(op, mode))
                dmas.append(d)
                phase.append(0)
                if observer is not None:
                    observer.start(core, pcs[core], d.ident)
                no_read = no_write = False
                if suppress:
                    no_read = (core, pcs[core], "read") in suppress
                    no_write = no_read or (core, pcs[core], "write") in suppress
                if mode == "on_wait":
                    for key, c, task in dma_tasks(d):
                        if no_write if task[1] == "read_write" else no_read:
                            continue
                        counter = (key, c)
                        queues.setdefault(counter, []).append(task)
                        if counter in waiting:  # a core parked on this count can now run the task
                            wake(waiting.pop(counter))
                else:
                    if record:
                        schedule.append(steps[core])
                        if hw:
                            schedule.extend([("dma_read", d.ident), ("dma_write", d.ident)][: 2 - no_read - no_write])
                    pcs[core] += 1
                    if not no_read:
                        dma_read(d)
                    if not no_write:
                        dma_write(d)
                    continue
            elif t is Barrier:
                k = passed.get((core, op.name), 0) + 1
                if observer is not None:
                    observer.arrive(core, pcs[core], op.name, k)
                if all(barrier_reached(p, op.name) >= k for p in op.participants):
                    passed[(core, op.name)] = k
                    if observer is not None:
                        observer.barrier(core, pcs[core], op.name, k, op.participants)
                    for p in barrier_waiters.pop((op.name, k), ()):
                        wake(p)
                else:
                    barrier_waiters.setdefault((op.name, k), []).append(core)
                    return
            elif t is AllocSem:
                ranges, held = sem_allocation(program, mode, core, op, next_id)
                for c, r in ranges.items():  # semaphore.take, on the working copies
                    next_id[c] = r.stop
                    internal.update(r)
                resolved.clear()
                if isinstance(held, Violation):
                    do_fail(core, held)
                for c, a in held.items():
                    allocs[(c, op.label)] = a
            elif t is GetBarrierSem:
                enters, err = barrier_sem(program, mode)
                if enters is not None and enters not in fixed:  # semaphore.guarantee_fixed
                    fixed.add(enters)
                    resolved.clear()
                if err is not None:
                    do_fail(core, err)
            elif t is Read:
                key = resolve(core, op.sem)
                reads.append((core, pcs[core], count(counts, key, core)))
            elif t is AllocBuffer:
                ids, bound, err = buffer_allocation(program, mode, core, op, next_buf)
                for thread, i in ids.items():  # buffer.take, on the working copies
                    next_buf[thread] = i + 1
                for c, key in bound.items():
                    buffer_keys[(c, op.label)] = key
                if err is not None:
                    do_fail(core, err)
            elif t is ExitCheck:
                w = exit_warning(program, counts, op.device)
                if w is not None:
                    warnings.append(w)
            elif t is Access:
                if observer is not None:
                    observer.access(core, pcs[core])
            elif t is not FreeBuffer:
                raise ModelBug(f"unknown op {op!r}")
            if record:
                schedule.append(steps[core])
            pcs[core] += 1

    while ready:
        core = ready.popleft()
        queued[core] = False
        try:
            run_core(core)
        except _Halt:
            if is_global(program, failure[-1]):
                break

    state = State(
        pcs=tuple(pcs),
        tables=SemTables(frozenset(internal), frozenset(fixed), FMap(next_id)),
        counts=FMap({k: v for k, v in counts.items() if v}),
        allocs=FMap(allocs),
        buffers=BufferStore(next_id=FMap(next_buf)),
        buffer_keys=FMap(buffer_keys),
        dmas=tuple(d if p == 0 else _with_phase(d, p) for d, p in zip(dmas, phase)),
        queues=FMap({k: tuple(v) for k, v in queues.items() if v}),
        looked_up=FMap(looked),
        passed=FMap(passed),
        reads=tuple(reads),
        warnings=tuple(warnings),
        failures=tuple(failure),
    )
    frozen = frozenset(c for c, i in freeze.items() if pcs[c] == i)
    return classify(program, mode, state, tuple(schedule), frozen)
