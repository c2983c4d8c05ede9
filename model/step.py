"""The kernel-level transition rules: one function per operation (spec sections OP, DMA, BAR).

`step(program, mode, state, actor)` applies one step of one actor: a core
executing (or trying) its next operation, or, under the hardware semantics,
one half of an in-flight DMA. Every rule is pure: State -> State, or None when
the step is not enabled.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from semcheck.model import barrier as barrier_rules
from semcheck.model import clocks
from semcheck.model import dma as dma_rules
from semcheck.model import scope_keys as scope_rules
from semcheck.model import semaphore as sem
from semcheck.model.errors import BadTarget, CoreIndexOutOfBounds, ModelBug, NoCollectiveId, SemIndexOutOfBounds, Violation
from semcheck.model.buffer import BufferKey, Thread, take
from semcheck.model.ids import arange_int16, scalar_int16
from semcheck.model.kernel_buffer import handed_id, kernel_keys, one_key
from semcheck.model.ops import (
    BARRIER,
    AllocBuffer,
    AllocSem,
    Barrier,
    DmaMode,
    DmaStart,
    ExitCheck,
    Access,
    FreeBuffer,
    GetBarrierSem,
    Op,
    Program,
    Read,
    SemRef,
    Signal,
    Wait,
)
from semcheck.model.semaphore import SemKey
from semcheck.model.state import Actor, Allocation, Dma, ExitWarning, Failure, State
from semcheck.model.transient import TransientState, appended, changed

def is_hardware(mode: DmaMode) -> bool:
    return mode == "hardware"


# --- resolving references (SEM-3, HW-1, SIG-1) ---------------------------------


def named(program: Program, mode: DmaMode, alloc: Allocation | None, core: int, ref: SemRef) -> SemKey | int | Violation:
    """What `ref` names on `core` before any lookup, given the core's allocation of its label.

    Interpreter semantics (SEM-1, SEM-2): the id the core holds, to be looked
    up (SEM-3). Hardware semantics (HW-1): the physical semaphore itself, the
    allocation site and index (or the barrier semaphore), the same on every
    core. A barrier reference without a collective id is ERR-6, an index
    outside the allocation ERR-5. A run_scoped semaphore is thus a fresh id per
    entry in the interpreter and one semaphore per site on hardware (SEM-9).
    """
    if ref.label == BARRIER:
        if program.collective_id is None:
            return NoCollectiveId()
        return ("barrier",) if is_hardware(mode) else program.collective_id
    if alloc is None:
        raise ModelBug(f"core {core} uses semaphore allocation {ref.label!r} before allocating it")
    if not 0 <= ref.index < alloc.count:
        return SemIndexOutOfBounds(ref.label, ref.index, alloc.count)
    if is_hardware(mode):
        return ("site", alloc.site, ref.index)
    return alloc.ids[ref.index]


def resolve(
    program: Program, mode: DmaMode, state: State, core: int, ref: SemRef, *, collisions: bool = True
) -> SemKey | Violation:
    """SEM-3 / HW-1: the semaphore that `ref` denotes when `core` uses it now.

    Interpreter semantics: the id the core holds for `ref` (`named`), looked
    up in the tables *now* (SEM-3). Hardware semantics: the physical
    semaphore `named` gives.
    """
    key = named(program, mode, state.allocs.get((core, ref.label)), core, ref)
    if type(key) is int:
        return sem.lookup(state.tables, key, collisions=collisions)
    return key


def target_core(
    program: Program, mode: DmaMode, core: int, device: int | None, local: int | None, *, dma: bool
) -> int | BadTarget:
    """SIG-1: the global core a signal or DMA lands on.

    No device: the issuing device. No core: for a DMA, the issuing core's
    local index; for a signal, core 0 in the interpreter (a quirk) and the
    issuing core's local index on hardware.
    """
    # Topology's arithmetic written out (`device_of`, `local_core_of`, `global_core`): every remote
    # operation of a pod-scale program asks this, so a method call each was most of its cost
    topo = program.topology
    per = topo.cores_per_device
    hw = is_hardware(mode)
    d = core // per if device is None else device
    if local is None:
        local = core % per if (dma or hw) else 0
    if not dma and not hw:
        # The interpreter computes device * cores + core unchecked and indexes a
        # numpy array with it: a core index past the device lands on another
        # device, a negative index counts from the end, past the end raises.
        g = d * per + local
        n = topo.num_devices * per
        if not -n <= g < n:
            return CoreIndexOutOfBounds(g, n)
        return g % n
    if not (0 <= d < topo.num_devices and 0 <= local < per):
        return BadTarget(d, local)
    return d * per + local


# --- failure --------------------------------------------------------------------


def fail(state: State, program: Program, core: int, violation: Violation) -> State:
    """ERR-7: record a failure. Later steps see it (see `halted`)."""
    pc = state.pcs[core]
    op = program.cores[core][pc]
    return changed(state, failures=state.failures + (Failure(violation, core, pc, op.loc),))


def is_global(program: Program, f: Failure) -> bool:
    """ERR-7: a failure stops every core, except an unpropagated one on a single-core device.

    A failure that is not global ends only its own device (`halted`).
    """
    op = program.cores[f.core][f.pc]
    return op.propagates_failure or program.topology.cores_per_device != 1


def failure_is_global(program: Program, state: State) -> bool:
    """Whether some recorded failure stops every core."""
    return any(is_global(program, f) for f in state.failures)


def halted(program: Program, state: State, core: int) -> bool:
    """Whether `core` can take no more steps because of a failure (its own device's, or a global one)."""
    if not state.failures:
        return False
    topo = program.topology
    return any(is_global(program, f) or topo.device_of(f.core) == topo.device_of(core) for f in state.failures)


def view_failure(op: Access | DmaStart, mode: DmaMode) -> Violation | None:
    """ERR-9 (ACC-6, D22): what running `op` raises under `mode` because of a view the interpreter cannot index.

    A load or store raises when a core reaches it, an `eager` copy inside its start (after its
    semaphores are looked up); a TPU lowers the view (None). An `on_wait` copy raises only when a
    waiter runs its task: None here, and the task raises in that waiter (`deferred_view_failures`, ACC-11).
    """
    err = op.view_error
    if err is None or mode == "hardware" or (mode == "on_wait" and type(op) is DmaStart):
        return None
    return err


def deferred_view_failures(op: DmaStart, mode: DmaMode) -> tuple[Violation | None, Violation | None]:
    """ACC-11: what an `on_wait` copy's (read, write) half raises when a waiter runs it, because of a view
    the interpreter cannot index: the source's fails the read half, else the destination's the write."""
    err = op.view_error
    if err is None or mode != "on_wait":
        return (None, None)
    # a view the interpreter cannot index names its side (ERR-9); a refused window its kind (ERR-20)
    side = getattr(err, "side", "") or ("destination" if getattr(err, "kind", "") == "write" else "source")
    return (None, err) if side == "destination" else (err, None)


# --- one rule per operation --------------------------------------------------------


def _advance(state: State, core: int, **changes) -> State:
    if type(state) is TransientState:  # a replay's (RUN-35): its positions are a list, moved in place
        state.pcs[core] += 1
        if changes:  # most steps move the position only (RUN-59)
            for name, value in changes.items():  # `changed` on a transient state, without a second call
                object.__setattr__(state, name, value)
        return state
    pcs = list(state.pcs)
    pcs[core] += 1
    return changed(state, pcs=tuple(pcs), **changes)


def allocation_cores(program: Program, core: int, scope: str) -> tuple[int, ...]:
    """SEM-1 / BUF-8 scope: a device's scratch allocation covers all its cores, a `run_scoped` one the executing core."""
    topo = program.topology
    return topo.cores_of_device(topo.device_of(core)) if scope == "device" else (core,)


def sem_allocation(
    program: Program, mode: DmaMode, core: int, op: AllocSem, next_id: Mapping[int, int]
) -> tuple[dict[int, range], dict[int, Allocation] | Violation]:
    """SEM-1 + IDS-1 (interpreter) / HW-1 (hardware): what `core`'s `AllocSem` hands out.

    Returns the ids each core in scope takes (`semaphore.handout`; none on
    hardware, where a reference names its site) and what each of them then
    holds for the label: the kernel receives the executing core's ids as
    int16 (IDS-1), or the allocation fails with ERR-3 after the ids were taken.
    """
    cores = allocation_cores(program, core, op.scope)
    if is_hardware(mode):
        return {}, {c: Allocation(op.site, op.count, None) for c in cores}
    ranges = sem.handout(next_id, cores, op.count)
    ids = arange_int16(ranges[core].start, op.count)
    if isinstance(ids, Violation):
        return ranges, ids
    return ranges, {c: Allocation(op.site, op.count, ranges[c].start, ids) for c in cores}


def barrier_sem(program: Program, mode: DmaMode) -> tuple[int | None, Violation | None]:
    """SEM-2 + IDS-2: what `get_barrier_semaphore` does: the id entering the fixed-id table, and its failure.

    No collective id: ERR-6 and nothing enters. Hardware: nothing enters (HW-1).
    Otherwise the collective id enters, then is handed out as int16, which
    may fail (ERR-3) with the id already in the table.
    """
    cid = program.collective_id
    if cid is None:
        return None, NoCollectiveId()
    if is_hardware(mode):
        return None, None
    handed = scalar_int16(cid)
    return cid, handed if isinstance(handed, Violation) else None


def exit_warning(program: Program, counts: Mapping, device: int, by_core: Mapping | None = None) -> ExitWarning | None:
    """EXIT-1: the warning `device`'s exit check gives over `counts` (SEM-8), or None when all are zero.

    `by_core`: the counters of each core, for a run that keeps them (`semaphore.nonzero`); a replay's
    counts keep them themselves (RUN-35)."""
    if by_core is None:
        by_core = getattr(counts, "by_core", None)
    nonzero = sem.nonzero(counts, program.topology.cores_of_device(device), by_core)
    return ExitWarning(device, nonzero) if nonzero else None


def rule_alloc_sem(program: Program, mode: DmaMode, state: State, core: int, op: AllocSem) -> State:
    """SEM-1 (interpreter) / HW-1 (hardware): allocate semaphores for the core or its device."""
    ranges, held = sem_allocation(program, mode, core, op, state.tables.next_id)
    state = changed(state, tables=sem.take(state.tables, ranges))
    if isinstance(held, Violation):
        return fail(state, program, core, held)
    return _advance(state, core, allocs=state.allocs.update({(c, op.label): a for c, a in held.items()}))


def rule_get_barrier_sem(program: Program, mode: DmaMode, state: State, core: int, op: GetBarrierSem) -> State:
    """SEM-2: the barrier semaphore enters the fixed-id table under `collective_id`."""
    enters, failure = barrier_sem(program, mode)
    if enters is not None:
        state = changed(state, tables=sem.guarantee_fixed(state.tables, enters))
    if failure is not None:
        return fail(state, program, core, failure)
    return _advance(state, core)


def rule_signal(program: Program, mode: DmaMode, state: State, core: int, op: Signal) -> State:
    """SEM-4 + SIG-1: look the semaphore up, then add `inc` to the target core's count."""
    key = resolve(program, mode, state, core, op.sem)
    if isinstance(key, Violation):
        return fail(state, program, core, key)
    target = target_core(program, mode, core, op.device, op.core, dma=False)
    if isinstance(target, Violation):  # ERR-4
        return fail(state, program, core, target)
    if clocks.keeps_clocks(program.detect_races, mode):  # RACE-1: the signal leaves a clock there
        state = changed(state, signals=state.signals | {(key, target)})
    return _advance(state, core, counts=sem.signal(state.counts, key, target, op.inc))


def wait_clock(program: Program, mode: DmaMode, state: State, core: int, key: SemKey) -> Violation | None:
    """RACE-1 at a wait that has just consumed its count: the assertion when the run keeps clocks and no
    signal ever reached (`key`, `core`)."""
    return clocks.finished_wait(clocks.keeps_clocks(program.detect_races, mode), key, core,
                                lambda: clocks.reached(state.signals, ((d.phase, d) for d in state.dmas), key, core))


def rule_wait(program: Program, mode: DmaMode, state: State, core: int, op: Wait) -> State | None:
    """SEM-5 (+ DMA-4 under on_wait): look up once, then consume own count, run a queued task, or block.

    The interpreter looks the semaphore up once when the wait begins and then
    waits on that object, so the lookup is its own step: a wait that cannot
    finish at once records what it looked up, and a later change of the id
    tables no longer affects it.
    """
    key = state.looked_up.get(core)
    if key is None:
        key = resolve(program, mode, state, core, op.sem)
        if isinstance(key, Violation):
            return fail(state, program, core, key)
        counts = sem.try_wait(state.counts, key, core, op.value)
        if counts is not None:
            err = wait_clock(program, mode, state, core, key)
            if err is not None:  # RACE-1: the count is consumed, then the assertion fails (ERR-7 ends the run)
                return fail(changed(state, counts=counts), program, core, err)
            return _advance(state, core, counts=counts)
        return changed(state, looked_up=state.looked_up.set(core, key))
    out = dma_rules.wait_once(state, key, core, op.value)
    if out is None:
        return None
    state, done, err = out
    if err is not None:  # ACC-11: the task this waiter ran raised, which ends the run (ERR-7)
        return fail(state, program, core, err)
    if done:
        err = wait_clock(program, mode, state, core, key)
        if err is not None:  # RACE-1, as above
            return fail(changed(state, looked_up=state.looked_up.set(core, None, drop=None)), program, core, err)
        return _advance(state, core, looked_up=state.looked_up.set(core, None, drop=None))
    return state


def rule_read(program: Program, mode: DmaMode, state: State, core: int, op: Read) -> State:
    """SEM-6: read own count; the value is recorded in the state."""
    key = resolve(program, mode, state, core, op.sem)
    if isinstance(key, Violation):
        return fail(state, program, core, key)
    value = sem.count(state.counts, key, core)
    return _advance(state, core, reads=appended(state.reads, (core, state.pcs[core], value)))


def rule_dma_start(program: Program, mode: DmaMode, state: State, core: int, op: DmaStart) -> State:
    """DMA-1: look up both semaphores (send first), then start the DMA per mode (DMA-2/3/5), its halves adding DMA-6's amounts."""
    src_key = None
    if op.src_sem is not None:
        src_key = resolve(program, mode, state, core, op.src_sem)
        if isinstance(src_key, Violation):
            return fail(state, program, core, src_key)
    dst_key = resolve(program, mode, state, core, op.dst_sem)
    if isinstance(dst_key, Violation):
        return fail(state, program, core, dst_key)
    dst = target_core(program, mode, core, op.device, op.core, dma=True)
    if isinstance(dst, Violation):
        return fail(state, program, core, dst)
    err = view_failure(op, mode)
    if err is not None:  # ERR-9: the eager copy raises as it runs, and the failure ends the run (ERR-7)
        return fail(state, program, core, err)
    keys = (None, None)
    if state.scoped and not is_hardware(mode):  # BUF-14: the run_scoped keys its halves look up
        keys = scope_rules.copy_keys(state.scoped, state.buffer_keys, program.topology, core, dst, op)
    started = Dma(len(state.dmas), core, dst, op.nbytes, src_key, dst_key, op.loc, *dma_rules.amounts(op, mode),
                  fails=deferred_view_failures(op, mode) if op.view_error is not None else (None, None), buffers=keys)
    if mode == "eager" and keys != (None, None):
        # BUF-14: the eager start runs both halves now, and a half at a key the manager lacks raises there
        err, read_first = dma_rules.deferred_failure(scope_rules.freed_failures(state.scoped, keys), 0, "read_write")
        if err is not None:
            state = changed(state, dmas=appended(state.dmas, started))
            return fail(dma_rules.dma_read(state, started.ident) if read_first else state, program, core, err)
    return dma_rules.start(_advance(state, core), started, mode)


def rule_barrier(program: Program, mode: DmaMode, state: State, core: int, op: Barrier) -> State | None:
    """BAR-1: the k-th barrier `name` opens once every participant has reached its k-th."""
    k = state.passed.get((core, op.name), 0) + 1

    def reached_by(p: int) -> int:
        pc = state.pcs[p]
        prog = program.cores[p]
        at_it = pc < len(prog) and isinstance(prog[pc], Barrier) and prog[pc].name == op.name
        return barrier_rules.reached(state.passed.get((p, op.name), 0), at_it)

    if type(state) is TransientState:  # a replay: an instance once open stays open (RUN-35)
        instance = barrier_rules.instance(op.name, k, op.participants)
        if instance not in state.opened:
            if not barrier_rules.opens(k, map(reached_by, op.participants)):
                return None
            state.opened.add(instance)
        return _advance(state, core, passed=state.passed.set((core, op.name), k))
    if not barrier_rules.opens(k, map(reached_by, op.participants)):
        return None
    return _advance(state, core, passed=state.passed.set((core, op.name), k))


def buffer_allocation(
    program: Program, mode: DmaMode, core: int, op: AllocBuffer, next_id: Mapping[Thread, int]
) -> tuple[dict[Thread, int], dict[int, BufferKey], Violation | None]:
    """BUF-1 + BUF-8 at kernel level: what `core`'s `AllocBuffer` hands out.

    Returns the id each (device, local core) in scope draws (`buffer.take`
    applies them), the buffer key the label then denotes on each global core
    of the scope (HBM/ANY: one key per device while the counters agree), and,
    under the interpreter semantics, the failure of handing the id to the
    kernel (ERR-3, or the assertion when the cores' ids differ). A real TPU
    has no ids to hand (HW-1), but the counters still show which allocation
    is which.
    """
    per = program.topology.cores_per_device  # Topology's arithmetic written out, as in `target_core`
    device, mine = divmod(core, per)  # device_of, local_core_of
    if per == 1 or op.scope != "device":
        # RUN-58: one core in scope, `core` itself: its id and key, and the id handed is its own (BUF-8:
        # no other core's to differ), as IDS-2 hands it
        thread, i, key = one_key(next_id, device, mine, op.memory_space)
        if is_hardware(mode):
            return {thread: i}, {core: key}, None
        handed = scalar_int16(i)
        return {thread: i}, {core: key}, handed if isinstance(handed, Violation) else None
    ids, keys = kernel_keys(next_id, device, None, op.memory_space, per)  # every core of the device
    first = device * per  # global_core(device, 0)
    bound = {first + c: key for c, key in keys.items()}
    if is_hardware(mode):
        return ids, bound, None
    handed = handed_id(keys, None)
    return ids, bound, handed if isinstance(handed, Violation) else None


def rule_alloc_buffer(program: Program, mode: DmaMode, state: State, core: int, op: AllocBuffer) -> State:
    """BUF-1, BUF-8: each core of the scope takes the next buffer id of its own counter (from 100)."""
    ids, bound, failure = buffer_allocation(program, mode, core, op, state.buffers.next_id)
    changes = {"buffers": take(state.buffers, ids),
               "buffer_keys": state.buffer_keys.update({(c, op.label): key for c, key in bound.items()})}
    if not is_hardware(mode) and scope_rules.held_scoped(op.memory_space, op.scope,
                                                                  program.scoped_keys):  # BUF-14
        changes["scoped"] = state.scoped.update(dict.fromkeys(bound.values(), True))
    state = changed(state, **changes)  # one change of the state, not one per field (RUN-59)
    if failure is not None:
        return fail(state, program, core, failure)
    return _advance(state, core)


def rule_free_buffer(program: Program, mode: DmaMode, state: State, core: int, op: FreeBuffer) -> State:
    """BUF-9: deallocation; buffer ids are never reused. The manager no longer holds a run_scoped key
    (BUF-14): a copy half that looks it up later raises."""
    key = state.buffer_keys.get((core, op.label))
    if key in state.scoped:
        return _advance(state, core, scoped=state.scoped.set(key, False))
    return _advance(state, core)


def rule_exit_check(program: Program, mode: DmaMode, state: State, core: int, op: ExitCheck) -> State:
    """EXIT-1: note every non-zero count on the device's cores at this moment."""
    warning = exit_warning(program, state.counts, op.device)
    return _advance(state, core, warnings=appended(state.warnings, warning) if warning else state.warnings)


def rule_access(program: Program, mode: DmaMode, state: State, core: int, op: Access) -> State:
    """ACC-1: a kernel load or store; it never blocks and changes no semaphore, only the pc moves.

    Its data effect is judged by the race property (PROP-7), not by the run. Through a view the
    interpreter cannot index it raises instead (ACC-6, ERR-9), and the failure ends the run (ERR-7).
    """
    if op.view_error is not None:  # `view_failure` is None without a view error: not asked per access
        err = view_failure(op, mode)
        if err is not None:
            return fail(state, program, core, err)
    return _advance(state, core)


_RULES = {
    AllocSem: rule_alloc_sem,
    GetBarrierSem: rule_get_barrier_sem,
    Signal: rule_signal,
    Wait: rule_wait,
    Read: rule_read,
    DmaStart: rule_dma_start,
    Barrier: rule_barrier,
    AllocBuffer: rule_alloc_buffer,
    FreeBuffer: rule_free_buffer,
    Access: rule_access,
    ExitCheck: rule_exit_check,
}


# --- the step relation -------------------------------------------------------------


def core_step(program: Program, mode: DmaMode, state: State, core: int) -> State | None:
    """Core `core` tries its next operation; None when it is done, halted or blocked."""
    pc = state.pcs[core]
    ops = program.cores[core]
    if pc >= len(ops) or (state.failures and halted(program, state, core)):
        return None
    op: Op = ops[pc]
    return _RULES[type(op)](program, mode, state, core, op)


def enabled(program: Program, mode: DmaMode, state: State) -> list[Actor]:
    """RUN-1: the actors that can take a step now."""
    if type(state) is TransientState:  # trying a step changes a transient state (RUN-35)
        raise ModelBug("enabled() asked of a replay's transient state")
    out: list[Actor] = []
    for core in range(program.topology.num_cores):
        if core_step(program, mode, state, core) is not None:
            out.append(("core", core))
    if is_hardware(mode) and not (state.failure and failure_is_global(program, state)):
        for d in state.dmas:
            if d.phase == 0:
                out.append(("dma_read", d.ident))
            elif d.phase == 1:
                out.append(("dma_write", d.ident))
    return out


def step(program: Program, mode: DmaMode, state: State, actor: Actor) -> State:
    """RUN-1: apply one enabled step. Raises ModelBug when the step is not enabled."""
    kind, ident = actor
    if kind == "core":
        nxt = core_step(program, mode, state, ident)
        if nxt is None:
            raise ModelBug(f"core {ident} is not enabled")
        return nxt
    if not is_hardware(mode):
        raise ModelBug(f"DMA actors exist only under the hardware semantics, not {mode}")
    d = state.dmas[ident]
    if kind == "dma_read" and d.phase == 0:
        return dma_rules.dma_read(state, ident)
    if kind == "dma_write" and d.phase == 1:
        return dma_rules.dma_write(state, ident)
    raise ModelBug(f"{actor} is not enabled")
