"""The fast maximal run (RUN-3): one run decides deadlock for persistent programs.

It runs each core as far as it can, parks it on the count or barrier it waits
for and wakes it when that changes: time linear in the program (the spec's
RUN-3 says why one run suffices). It is a driver over the step relation's
rule functions (`semaphore.shortfall`, `semaphore.next_task`, `barrier.opens` and its count `barrier.Counted`,
`step.named`, `semaphore.lookup_in`, `step.sem_allocation`,
`step.barrier_sem`, `step.buffer_allocation`, `step.exit_warning`,
`step.is_global`, `step.target_core`, `step.view_failure`, `step.deferred_view_failures`, `dma.tasks`,
`dma.amounts`, `dma.run_half_task`, `dma.deferred_failure`, `dma.first_failures`, `scope_keys.held_scoped`,
`scope_keys.copy_keys`, `scope_keys.freed_failures`); it keeps counts, task queues and DMA phases in mutable
working copies, because the step relation copies its state on every step. `tests/test_persistence.py` replays its schedules on the
step relation and compares whole states.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

from semcheck.model.barrier import Counted, opens, reached
from semcheck.model.dma import amounts as dma_amounts
from semcheck.model.dma import deferred_failure, first_failures, run_half_task
from semcheck.model.dma import tasks as dma_tasks
from semcheck.model.errors import ModelBug, Violation
from semcheck.model.fmap import FMap
from semcheck.model.buffer import BufferStore
from semcheck.model.buffer import advanced as buffer_advanced
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
from semcheck.model.clocks import finished_wait, keeps_clocks
from semcheck.model.clocks import reached as clock_reached
from semcheck.model.run import classify
from semcheck.model.schedule import ParkAndWake
from semcheck.model.scope_keys import copy_keys, freed_failures, held_scoped
from semcheck.model.semaphore import SemTables, count, lookup_in, next_task, shortfall
from semcheck.model.semaphore import advanced as sem_advanced
from semcheck.model.state import Dma, ExitWarning, Failure, Outcome, State
from semcheck.model.step import (
    barrier_sem,
    buffer_allocation,
    exit_warning,
    is_global,
    named,
    sem_allocation,
    deferred_view_failures,
    target_core,
    view_failure,
)


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


class _Row(NamedTuple):
    """A started DMA's fields as `Dma` names them, but its phase (kept apart, in `_Copies.phases`).

    Built once per copy, straight from its fields; the frozen `Dma` only when the run ends.
    """

    ident: int
    src_core: int
    dst_core: int
    nbytes: int
    src_key: tuple | None
    dst_key: tuple
    loc: object
    src_amount: int
    dst_amount: int


new_row = tuple.__new__


class _Copies:
    """The fast run's working copies of its DMAs, as the half rules read and change them (`dma.Halves`).

    `phase` and `fields` are the lists' own item getters, and `signalled` is the run's own `signal`
    (its observer, the counts, waking a waiter), which returns this object: an eager copy's halves
    cost the calls of the rules and the signals, nothing more.
    """

    __slots__ = ("rows", "phases", "phase", "fields", "signalled")

    def __init__(self) -> None:
        self.rows: list[_Row] = []
        self.phases: list[int] = []
        self.phase = self.phases.__getitem__
        self.fields = self.rows.__getitem__
        self.signalled = None  # set by the run: its `signal`

    def moved(self, ident: int, phase: int) -> _Copies:
        self.phases[ident] = phase
        return self


def fast_run(
    program: Program,
    mode: DmaMode,
    *,
    hold: dict[int, int] | None = None,
    lookup_errors: bool = True,
    record: bool = True,
    suppress: frozenset[tuple[int, int, str]] = frozenset(),
    observer: RunObserver | None = None,
) -> Outcome:
    """RUN-3: one maximal run, in time linear in the program.

    `hold[g] = i` holds core g before its op i (used to ask what the other
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
    cores = program.cores
    hw = mode == "hardware"
    on_wait = mode == "on_wait"
    n = topo.num_cores
    hold = hold or {}
    device = [topo.device_of(c) for c in range(n)]
    held_at = [min(len(ops), hold.get(c, len(ops))) for c, ops in enumerate(cores)]
    pcs = [0] * n
    counts: dict = {}
    counts_get = counts.get
    internal: set[int] = set()
    fixed: set[int] = set()
    next_id: dict[int, int] = {}
    next_buf: dict[tuple[int, int], int] = {}  # (device, local core) -> next buffer id (BUF-1)
    allocs: dict = {}
    buffer_keys: dict = {}
    scoped: dict = {}  # BUF-14: run_scoped key -> still held (interpreter modes)
    queues: dict = {}
    steps = [("core", c) for c in range(n)]  # schedule entries, shared rather than rebuilt per op
    passed: dict = {}
    reads: list = []
    warnings: list[ExitWarning] = []
    failure: list[Failure] = []
    dead_devices: set[int] = set()
    schedule: list = []
    schedule_append = schedule.append
    sched = ParkAndWake(n)  # RUN-3's schedule
    waiting = sched.on_counter  # (key, core) -> core parked on it, tested inline on every signal
    changed = sched.changed
    looked: list = [None] * n  # core -> the semaphore its unfinished wait looked up
    # Per core, what a reference resolves to while the tables and allocations stay as they are:
    # by (label, index), and for waits and signals also by the reference object's identity (their
    # ops recur, and the program holds every reference, so an id is not reused during the run).
    resolved: list[dict[tuple, tuple]] = [{} for _ in range(n)]
    resolved_id: list[dict[int, tuple]] = [{} for _ in range(n)]
    filled: list[int] = []  # the cores whose tables above have entries
    # Per core, where a signal or DMA lands (SIG-1 depends on the core, the op's device and core
    # and whether it is a DMA), and what a copy's halves add (DMA-6: its size, types and the mode).
    targets: list[dict[tuple, int]] = [{} for _ in range(n)]
    dma_targets: list[dict[tuple, int]] = [{} for _ in range(n)]
    amounts: dict[tuple, tuple[int, int]] = {}
    barrier_enters, barrier_err = barrier_sem(program, mode)  # SEM-2: the same at every get_barrier_semaphore
    # BAR-1 counted: a core is counted at a barrier once its position rests there unheld, which is
    # where the Barrier case below puts it, or at the start, for a core whose first op is a barrier
    at_barrier = Counted()
    for c, ops in enumerate(cores):
        if held_at[c] and type(ops[0]) is Barrier:
            at_barrier.reach(c, ops[0].name, 1, ops[0].participants)

    # the counters of each core, as they first get a count: an exit check reads its device's (SEM-8)
    by_core: dict[int, list] = {}

    def by_core_add(counter) -> None:
        by_core.setdefault(counter[1], []).append(counter)

    copies = _Copies()  # the started DMAs, as the half rules see them
    rows, phase = copies.rows, copies.phases
    deferred: dict[int, tuple] = {}  # ACC-11: on_wait copies whose views raise, by DMA ident
    touches: dict[int, tuple] = {}  # BUF-14: copies of run_scoped buffers, by DMA ident: the keys their halves look up
    clocked = keeps_clocks(program.detect_races, mode)  # RACE-1: the run keeps the race detector's clocks
    signals: set = set()  # RACE-1: the counters a plain signal reached (only when clocked)

    def signal(key, core: int, inc: int, source) -> _Copies:
        counter = (key, core)
        if observer is not None:
            observer.signal(counter, inc, source)
        have = counts_get(counter)
        if have is None:
            by_core_add(counter)
            have = 0
        counts[counter] = have + inc
        if counter in waiting:
            changed(counter)
        return copies

    copies.signalled = signal

    def do_fail(core: int, pc: int, violation: Violation) -> None:
        pcs[core] = pc
        op = cores[core][pc]
        f = Failure(violation, core, pc, op.loc)
        failure.append(f)
        if record:
            schedule_append(steps[core])  # the failing step
        if not is_global(program, f):
            dead_devices.add(device[core])
        raise _Halt

    def forget_resolved() -> None:
        for c in filled:
            resolved[c].clear()
            resolved_id[c].clear()
        filled.clear()

    def resolve(core: int, pc: int, ref: SemRef):
        # SEM-3/HW-1 through the step relation's own functions. A result stays
        # valid while the tables and the core's allocations do not change, so
        # it is remembered until the next allocation or fixed-id insertion.
        mine = resolved[core]
        value = (ref.label, ref.index)
        key = mine.get(value)
        if key is None:
            key = named(program, mode, allocs.get((core, ref.label)), core, ref)
            if type(key) is int:
                key = lookup_in(fixed, internal, key, collisions=lookup_errors)
            if type(key) is not tuple:
                do_fail(core, pc, key)
            if not mine:
                filled.append(core)
            mine[value] = key
        return key

    def resolve_id(core: int, pc: int, ref: SemRef):
        key = resolve(core, pc, ref)
        resolved_id[core][id(ref)] = key
        return key

    def target(core: int, pc: int, op, dma: bool) -> int:
        mine = dma_targets[core] if dma else targets[core]
        where = (op.device, op.core)
        t = mine.get(where)
        if t is None:
            t = target_core(program, mode, core, op.device, op.core, dma=dma)
            if isinstance(t, Violation):
                do_fail(core, pc, t)
            mine[where] = t
        return t

    def barrier_reached(p: int, name: str) -> int:
        ops = cores[p]
        pc = pcs[p]
        at_it = pc < len(ops) and isinstance(ops[pc], Barrier) and ops[pc].name == name and hold.get(p, len(ops) + 1) > pc
        return reached(passed.get((p, name), 0), at_it)

    # The executor: one case per operation, each calling its rule's home (the module docstring lists
    # them). It stays one loop over closures on the working copies above: a call per operation or a
    # class's attribute reads would cost the run that decides a pod (tests/test_function_size.py).
    def run_core(core: int) -> None:
        # failures and dead devices change only when a core fails, which ends its run_core
        if (failure and is_global(program, failure[-1])) or (dead_devices and device[core] in dead_devices):
            return
        ops = cores[core]
        stop = held_at[core]
        step_c = steps[core]
        mine = resolved_id[core]
        mine_values = resolved[core]
        mine_targets = targets[core]
        mine_dma_targets = dma_targets[core]
        pc = pcs[core]  # kept in a local; pcs[core] is brought up to date wherever it is read
        while pc < stop:
            op = ops[pc]
            t = type(op)
            if t is Wait:
                value = op.value
                key = looked[core]
                if key is None:
                    key = mine.get(id(op.sem)) or resolve_id(core, pc, op.sem)
                    counter = (key, core)
                    short = shortfall(counts_get(counter, 0), value)
                    if short > 0:  # the lookup is a step of its own (SEM-5)
                        looked[core] = key
                        if record:
                            schedule_append(step_c)
                else:
                    counter = (key, core)
                    short = shortfall(counts_get(counter, 0), value)
                while short > 0:
                    q = queues.get(counter) if on_wait else None
                    i = None if q is None else next_task(q)
                    if i is None:
                        sched.park_on(counter, core)
                        pcs[core] = pc
                        return
                    task = q.pop(i)
                    if (deferred and task[0] in deferred) or (touches and task[0] in touches):
                        # ACC-11 / BUF-14: the copy's view, or a run_scoped key now gone, raises in this waiter
                        fails = deferred.get(task[0], (None, None))
                        if task[0] in touches:
                            fails = first_failures(fails, freed_failures(scoped, touches[task[0]]))
                        err, read_first = deferred_failure(fails, phase[task[0]], task[1])
                        if err is not None:
                            if read_first:
                                run_half_task(copies, (task[0], "read"))
                            do_fail(core, pc, err)
                    if record:
                        schedule_append(step_c)
                    run_half_task(copies, task)
                    short = shortfall(counts_get(counter, 0), value)
                if counter not in counts:
                    by_core_add(counter)
                counts[counter] = -short
                looked[core] = None
                if clocked:
                    err = finished_wait(clocked, key, core, lambda: clock_reached(signals, zip(phase, rows), key, core))
                    if err is not None:  # RACE-1: the count is consumed, then the assertion fails
                        do_fail(core, pc, err)
                if observer is not None:
                    observer.wait(core, pc, counter, value)
            elif t is Access:
                if op.view_error is not None:
                    err = view_failure(op, mode)
                    if err is not None:  # ERR-9: the access does not happen
                        do_fail(core, pc, err)
                if observer is not None:
                    observer.access(core, pc)
            elif t is Signal:
                key = mine.get(id(op.sem)) or resolve_id(core, pc, op.sem)
                dst = mine_targets.get((op.device, op.core))
                if dst is None:
                    dst = target(core, pc, op, False)
                counter = (key, dst)
                if clocked:
                    signals.add(counter)
                if observer is not None:
                    observer.signal(counter, op.inc, (core, pc))
                have = counts_get(counter)
                if have is None:
                    by_core_add(counter)
                    have = 0
                counts[counter] = have + op.inc
                if counter in waiting:
                    changed(counter)
            elif t is DmaStart:
                # a copy's references are objects of its own: they are looked up by value
                ref = op.src_sem
                src_key = None if ref is None else mine_values.get((ref.label, ref.index)) or resolve(core, pc, ref)
                ref = op.dst_sem
                dst_key = mine_values.get((ref.label, ref.index)) or resolve(core, pc, ref)
                dst = mine_dma_targets.get((op.device, op.core))
                if dst is None:
                    dst = target(core, pc, op, True)
                if op.view_error is not None:
                    err = view_failure(op, mode)
                    if err is not None:  # ERR-9: an eager copy raises in its start
                        do_fail(core, pc, err)
                size = (op.nbytes, op.src_sem_type, op.dst_sem_type)
                amount = amounts.get(size)
                if amount is None:
                    amount = amounts[size] = dma_amounts(op, mode)
                ident = len(rows)
                if on_wait and op.view_error is not None:
                    deferred[ident] = deferred_view_failures(op, mode)
                row = new_row(_Row, (ident, core, dst, op.nbytes, src_key, dst_key, op.loc, amount[0], amount[1]))
                rows.append(row)
                phase.append(0)
                if observer is not None:
                    observer.start(core, pc, ident)
                if scoped and not hw:  # BUF-14: the run_scoped keys its halves look up
                    keys = copy_keys(scoped, buffer_keys, topo, core, dst, op)
                    if keys != (None, None):
                        touches[ident] = keys
                        if not on_wait:  # the eager start runs both halves now (observed started)
                            err, read_first = deferred_failure(freed_failures(scoped, keys), 0, "read_write")
                            if err is not None:
                                if read_first:
                                    run_half_task(copies, (ident, "read"))
                                do_fail(core, pc, err)
                no_read = no_write = False
                if suppress:
                    no_read = (core, pc, "read") in suppress
                    no_write = no_read or (core, pc, "write") in suppress
                if on_wait:
                    for key, c, task in dma_tasks(row):
                        if no_write if task[1] == "read_write" else no_read:
                            continue
                        counter = (key, c)
                        queues.setdefault(counter, []).append(task)
                        if counter in waiting:  # a core parked on this count can now run the task
                            changed(counter)
                else:
                    if record:
                        schedule_append(step_c)
                        if hw:
                            schedule.extend([("dma_read", ident), ("dma_write", ident)][: 2 - no_read - no_write])
                    pc += 1
                    if not no_read:  # DMA-2: the halves run now, as the task an eager start runs
                        run_half_task(copies, (ident, "read" if no_write else "read_write"))
                    continue
            elif t is GetBarrierSem:
                if barrier_enters is not None and barrier_enters not in fixed:  # semaphore.guarantee_fixed
                    fixed.add(barrier_enters)
                    forget_resolved()
                if barrier_err is not None:
                    do_fail(core, pc, barrier_err)
            elif t is Barrier:
                pcs[core] = pc  # barrier_reached reads this core's position too
                k = passed.get((core, op.name), 0) + 1
                if observer is not None:
                    observer.arrive(core, pc, op.name, k)
                at_barrier.reach(core, op.name, k, op.participants)
                now = at_barrier.opens(op.name, k, op.participants)
                if now is None:
                    now = opens(k, [barrier_reached(p, op.name) for p in op.participants])
                if now:
                    passed[(core, op.name)] = k
                    if observer is not None:
                        observer.barrier(core, pc, op.name, k, op.participants)
                    sched.opened(op.name, k)
                else:
                    sched.park_at(op.name, k, core)
                    return
            elif t is AllocSem:
                ranges, held = sem_allocation(program, mode, core, op, next_id)
                next_id.update(sem_advanced(ranges))  # semaphore.take, on the working copies
                internal.update(*ranges.values())
                forget_resolved()
                if isinstance(held, Violation):
                    do_fail(core, pc, held)
                for c, a in held.items():
                    allocs[(c, op.label)] = a
            elif t is Read:
                key = resolve(core, pc, op.sem)
                reads.append((core, pc, count(counts, key, core)))
            elif t is AllocBuffer:
                ids, bound, err = buffer_allocation(program, mode, core, op, next_buf)
                next_buf.update(buffer_advanced(ids))  # buffer.take, on the working copies
                for c, key in bound.items():
                    buffer_keys[(c, op.label)] = key
                if not hw and held_scoped(op.memory_space, op.scope, program.scoped_keys):  # BUF-14
                    scoped.update(dict.fromkeys(bound.values(), True))
                if err is not None:
                    do_fail(core, pc, err)
            elif t is ExitCheck:
                w = exit_warning(program, counts, op.device, by_core)
                if w is not None:
                    warnings.append(w)
            elif t is FreeBuffer:
                key = buffer_keys.get((core, op.label))
                if key in scoped:  # BUF-14: the manager no longer holds the key
                    scoped[key] = False
            else:
                raise ModelBug(f"unknown op {op!r}")
            if record:
                schedule_append(step_c)
            pc += 1
        pcs[core] = pc

    while (core := sched.next()) is not None:
        try:
            run_core(core)
        except _Halt:
            if is_global(program, failure[-1]):
                break

    state = _final_state(pcs, internal, fixed, next_id, counts, allocs, next_buf, buffer_keys, scoped,
                         (rows, phase, deferred, touches), queues, looked, passed, reads, warnings, failure, signals)
    held = frozenset(c for c, i in hold.items() if pcs[c] == i)
    return classify(program, mode, state, tuple(schedule), held)


def _final_state(pcs, internal, fixed, next_id, counts, allocs, next_buf, buffer_keys, scoped, copies, queues,
                 looked, passed, reads, warnings, failure, signals) -> State:
    """The run's working copies as the step relation's `State` (what `tests/test_persistence.py` compares
    with the replayed state): zero counts and empty queues dropped, each copy's row and phase a `Dma`."""
    rows, phase, deferred, touches = copies
    return State(
        pcs=tuple(pcs),
        tables=SemTables(frozenset(internal), frozenset(fixed), FMap(next_id)),
        counts=FMap({k: v for k, v in counts.items() if v}),
        allocs=FMap(allocs),
        buffers=BufferStore(next_id=FMap(next_buf)),
        buffer_keys=FMap(buffer_keys),
        scoped=FMap(scoped),
        dmas=tuple(Dma(*row, p, deferred.get(row.ident, (None, None)), touches.get(row.ident, (None, None)))
                   for row, p in zip(rows, phase)),
        queues=FMap({k: tuple(v) for k, v in queues.items() if v}),
        looked_up=FMap({c: k for c, k in enumerate(looked) if k is not None}),
        passed=FMap(passed),
        reads=tuple(reads),
        warnings=tuple(warnings),
        failures=tuple(failure),
        signals=frozenset(signals),
    )
