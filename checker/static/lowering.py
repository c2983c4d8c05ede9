"""The lowering: which counter every operation of a program touches, statically (the system S').

The checks reason about a `Program` without running it, so they need,
for every operation, the semaphore it denotes and the core it lands on --
statically. This module computes that, and says when it cannot:

* **Counters.** A counter is `(key, core)`: one semaphore's count on one core.
  Keys are those of `semcheck.model.semaphore`: `("internal", id)` and
  `("fixed", id)` under the interpreter semantics, `("site", site, i)` and
  `("barrier",)` under the hardware semantics (HW-1).

* **Ids are static when allocation order is.** Each core's id counter
  (SEM-1) is advanced by the core's own `run_scoped` allocations and by every
  device-scope allocation of its device. When those allocations are ordered
  by happens-before (program order plus barriers), every core receives the
  same ids in every schedule; otherwise the lowering refuses
  (`Lowered.unsupported`).

* **Lookups of the collective id.** Only the collective id can be in both
  tables, so only its lookups can resolve differently in different schedules
  (SEM-3). For each such lookup we classify "fixed table holds it" and
  "internal table holds it" as *always* (an insertion happens before the
  lookup), *never* (every insertion happens after it, or none exists) or
  *maybe*. always/never combinations give a static key or a static failure
  (ERR-1, ERR-2); any *maybe* makes the lowering refuse.

* **Static failures.** Everything else that can fail (ERR-2 for wrapped ids,
  ERR-3, ERR-4, ERR-5, ERR-6, and ERR-9: an access or eager copy through a
  view the interpreter cannot index) depends only on the operation, so each core has
  a first failing position `failing[c]` (or none), where S' holds it; what S''s end
  decides is RUN-9's.

Happens-before is computed from program order and barriers only (a
sound under-approximation): a "maybe" verdict may be conservative, never
wrong.

The ids each allocation hands out are `id_handout.py`'s, the key of each reference
`lookup.py`'s; this module scans the barriers and lowers every operation.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from operator import itemgetter

from semcheck.model.errors import (
    NoCollectiveId,
    Violation,
)
from semcheck.model.dma import amounts as dma_amounts
from semcheck.model.ids import scalar_int16
from semcheck.model.semaphore import raised
from semcheck.model.ops import (
    AllocBuffer,
    AllocSem,
    Barrier,
    DmaMode,
    DmaStart,
    ExitCheck,
    FreeBuffer,
    Access,
    GetBarrierSem,
    Op,
    Program,
    Read,
    SemRef,
    Signal,
    Wait,
)
from semcheck.model.step import target_core, view_failure

from semcheck.checker.static.id_handout import alloc_events, allocs_by_label, handed_out
from semcheck.checker.static.lookup import Fail, Unsupported, resolver
from semcheck.checker.static.system import (
    BarrierOp,
    Contribution,
    DmaOp,
    HappensBefore,
    Key,
    Lowered,
    WaitOp,
)



def lower(program: Program, mode: DmaMode, *, hb: HappensBefore | None = None) -> Lowered:
    """Compute the static counters, waits, barriers, DMAs and failures of `program` under `mode`.

    Every check starts from it: `analysis.ModeAnalysis.lowering` computes it once per program
    (and once for the interpreter's two modes, which it does not tell apart). `hb`: the program's
    happens-before from another mode's lowering (RUN-29: it reads program order and barriers only).
    """
    return _lower(program, mode, hb)


def _lower(program: Program, mode: DmaMode, shared_hb: HappensBefore | None = None) -> Lowered:
    """`lower`, in its steps: the barriers and happens-before, the ids each allocation hands out, the
    lookups, then every operation's record (`_lower_cores`)."""
    hw = mode == "hardware"
    topo = program.topology
    unsupported: list[str] = []
    barrier_at, alloc_at, get_at = _scan(program)
    barriers, barrier_pos = _barriers(program, barrier_at, unsupported)
    if shared_hb is not None and shared_hb.program is program and shared_hb.barriers == barriers:
        hb = shared_hb  # RUN-29: the same barriers, so the same clocks and reach
    else:
        hb = HappensBefore(program, barrier_pos, barriers)
    sem_by_core, buf_by_core = alloc_events(program, hb, alloc_at)
    racy_counters: set = set()
    sem_events = handed_out(sem_by_core, "semaphore", hb, hw, racy_counters, unsupported)
    buffer_events = handed_out(buf_by_core, "buffer", hb, hw, racy_counters, unsupported)
    sem_allocs = allocs_by_label(topo, sem_events, hw, unsupported)
    buffer_ids = {}
    for (a, i), ev in buffer_events.items():
        scope = topo.cores_of_device(topo.device_of(a)) if ev.op.scope == "device" else (a,)
        for t in scope:
            if t in ev.bases:
                buffer_ids[(t, ev.op.label)] = ev.bases[t]
    gets = [(c, i) for c in range(topo.num_cores) for i in get_at[c] if hb.reached(c, i)]
    resolve, stable = resolver(program, mode, hb, sem_allocs, sem_events, gets)
    failing, contributions, waits, dmas = _lower_cores(program, mode, hb, resolve, stable, sem_allocs, sem_events,
                                                       buffer_ids, unsupported)
    by_counter: dict = defaultdict(list)
    for x in contributions:
        by_counter[x.counter].append(x)
    waits_by_counter: dict = defaultdict(list)
    for w in waits.values():
        waits_by_counter[w.counter].append(w)
    by_pos = itemgetter(1)  # WaitOp.pos, read in C
    for ws in waits_by_counter.values():
        ws.sort(key=by_pos)
    return Lowered(
        program=program,
        mode=mode,
        lengths=tuple(len(ops) for ops in program.cores),
        failing=failing,
        contributions=contributions,
        by_counter=dict(by_counter),
        waits=waits,
        waits_by_counter=dict(waits_by_counter),
        barriers=barriers,
        barrier_pos=barrier_pos,
        dmas=dmas,
        sem_allocs=sem_allocs,
        sem_events=list(sem_events.values()),
        buffer_events=list(buffer_events.values()),
        buffer_ids=buffer_ids,
        gets=gets,
        unsupported=unsupported,
        hb=hb,
        sem_counter_events=dict(sem_by_core),
        buf_counter_events=dict(buf_by_core),
        racy_counters=racy_counters,
    )


def _scan(program: Program) -> tuple[list[list[int]], list[list[int]], list[list[int]]]:
    """One scan for the operations the passes start from: each core's barriers, allocations and
    get_barrier_semaphore positions."""
    n = program.topology.num_cores
    barrier_at: list[list[int]] = [[] for _ in range(n)]
    alloc_at: list[list[int]] = [[] for _ in range(n)]
    get_at: list[list[int]] = [[] for _ in range(n)]
    for c, ops in enumerate(program.cores):
        for i, op in enumerate(ops):
            t = type(op)
            if t is Barrier:
                barrier_at[c].append(i)
            elif t is AllocSem or t is AllocBuffer:
                alloc_at[c].append(i)
            elif t is GetBarrierSem:
                get_at[c].append(i)
    return barrier_at, alloc_at, get_at


def _barriers(program: Program, barrier_at: list[list[int]], unsupported: list[str]) -> tuple[dict, dict]:
    """Every barrier (BAR-1) as a `BarrierOp` by position, and the position of each core's k-th barrier of a
    name; a barrier naming a core outside the topology is unsupported."""
    n = program.topology.num_cores
    barriers: dict = {}
    barrier_pos: dict = {}
    # the participant sets found inside the topology, by identity: every core's barriers of a launch
    # share one set object, so the check costs a set once rather than once per core (O(N^2) at N cores)
    inside: dict[int, frozenset[int]] = {}
    for c, ops in enumerate(program.cores):
        seen: dict[str, int] = defaultdict(int)
        for i in barrier_at[c]:
            op = ops[i]
            seen[op.name] += 1
            k = seen[op.name]
            if inside.get(id(op.participants)) is op.participants:
                pass
            elif any(not 0 <= p < n for p in op.participants):
                unsupported.append(f"core {c} op {i}: barrier {op.name!r} names a core outside the topology")
            else:
                inside[id(op.participants)] = op.participants
            barriers[(c, i)] = BarrierOp(c, i, op.name, k, frozenset(op.participants), op.loc)
            barrier_pos[(c, op.name, k)] = i
    return barriers, barrier_pos


def _lower_cores(program: Program, mode: DmaMode, hb: HappensBefore, resolve: Callable[[int, int, SemRef], Key],
                 stable: dict, sem_allocs: dict, sem_events: dict, buffer_ids: dict, unsupported: list[str]
                 ) -> tuple[dict[int, tuple[int, Violation]], list[Contribution], dict, list[DmaOp]]:
    """Every reached operation's record, core by core: (failing positions, contributions, waits, DMAs).

    One case per operation, as `_lower_op` does them: the common ones are lowered inline (a call per
    operation was a third of a large lowering); the rest go through `_lower_op`."""
    hw = mode == "hardware"
    cid = program.collective_id

    def target(c: int, device, local, *, dma: bool) -> int:
        # not cached here: the loop below keeps each core's targets by the (device, core) they name
        t = target_core(program, mode, c, device, local, dma=dma)
        if isinstance(t, Violation):
            raise Fail(t)
        return t

    failing: dict[int, tuple[int, Violation]] = {}
    contributions: list[Contribution] = []
    waits: dict = {}
    dmas: list[DmaOp] = []
    get_fail: Violation | None = None  # what every get_barrier_semaphore raises (GetBarrierSem below)
    if cid is None:
        get_fail = NoCollectiveId()
    elif not hw:
        handed = scalar_int16(cid)
        get_fail = handed if isinstance(handed, Violation) else None
    amounts: dict[tuple, tuple[int, int]] = {}  # DMA-6 depends on the size, the two types and the mode
    add_contribution = contributions.append
    # the records built straight from their fields: a NamedTuple's own __new__ is a Python call
    record = tuple.__new__
    for c, ops in enumerate(program.cores):
        # per core: a reference's key once `resolve` has found it stable, by the reference's
        # identity (the program holds every reference; equal ones under two ids resolve twice)
        stable_by_id: dict[int, Key] = {}
        wait_tails: dict[int, tuple] = {}
        # a copy's references are objects of their own: its stable keys are kept by value
        stable_by_value: dict[tuple[str, int], Key] = {}
        # where this core's signals and copies land, by the (device, core) they name (SIG-1)
        signal_targets: dict[tuple, int] = {}
        copy_targets: dict[tuple, int] = {}

        def key_of(i: int, ref: SemRef, c: int = c, stable_by_id: dict = stable_by_id) -> Key:
            key = stable_by_id.get(id(ref))
            if key is None:
                key = resolve(c, i, ref)
                if (c, ref.label, ref.index) in stable:
                    stable_by_id[id(ref)] = key
            return key

        def copy_key_of(i: int, ref: SemRef, c: int = c, stable_by_value: dict = stable_by_value) -> Key:
            key = resolve(c, i, ref)
            if (c, ref.label, ref.index) in stable:
                stable_by_value[(ref.label, ref.index)] = key
            return key

        i = 0
        try:
            for i, op in enumerate(ops[:hb.reach(c)]):  # what lies beyond never executes in any run
                t = type(op)
                if t is Wait:
                    # the front end shares a wait among the steps and devices that do the same one:
                    # its record's fields after the position, once its key is stable, are kept by identity
                    tail = wait_tails.get(id(op))
                    if tail is None:
                        key = stable_by_id.get(id(op.sem)) or key_of(i, op.sem)
                        tail = ((key, c), max(op.value, 0), op.kind, op.loc)
                        if id(op.sem) in stable_by_id:
                            wait_tails[id(op)] = tail
                    waits[(c, i)] = record(WaitOp, (c, i, *tail))
                    if op.value < 0:  # ACC-76: it passes at once and raises its own count (the interpreter's)
                        if mode == "hardware":
                            raise Unsupported(f"core {c} op {i} waits for a negative amount {op.value}")
                        add_contribution(record(Contribution, (c, i, raised(op.value), tail[0], "signal", None)))
                elif t is Access:
                    if op.view_error is not None:
                        _view(op, mode)
                elif t is Barrier or t is ExitCheck or t is FreeBuffer:
                    pass
                elif t is Signal:
                    key = stable_by_id.get(id(op.sem)) or key_of(i, op.sem)
                    where = (op.device, op.core)
                    tgt = signal_targets.get(where)
                    if tgt is None:
                        tgt = signal_targets[where] = target(c, op.device, op.core, dma=False)
                    if op.inc < 0:
                        raise Unsupported(f"core {c} op {i} signals a negative amount {op.inc}")
                    add_contribution(record(Contribution, (c, i, op.inc, (key, tgt), "signal", None)))
                elif t is DmaStart:
                    ref = op.src_sem
                    src_key = None if ref is None else (stable_by_value.get((ref.label, ref.index))
                                                        or copy_key_of(i, ref))
                    ref = op.dst_sem
                    dst_key = stable_by_value.get((ref.label, ref.index)) or copy_key_of(i, ref)
                    where = (op.device, op.core)
                    dst = copy_targets.get(where)
                    if dst is None:
                        dst = copy_targets[where] = target(c, op.device, op.core, dma=True)
                    if op.view_error is not None:
                        _view(op, mode)
                    if op.nbytes < 0:
                        raise Unsupported(f"core {c} op {i} starts a DMA of {op.nbytes} bytes")
                    ident = len(dmas)
                    src_counter = (src_key, c) if src_key is not None else None
                    size = (op.nbytes, op.src_sem_type, op.dst_sem_type)
                    amount = amounts.get(size)
                    if amount is None:
                        amount = amounts[size] = dma_amounts(op, mode)  # the model's DMA-6
                    src_amount, dst_amount = amount
                    dst_counter = (dst_key, dst)
                    dmas.append(record(DmaOp, (ident, c, i, dst, op.nbytes, src_counter, dst_counter, op.loc,
                                               src_amount, dst_amount)))
                    if src_counter is not None:
                        add_contribution(record(Contribution, (c, i, src_amount, src_counter, "dma_read", ident)))
                    add_contribution(record(Contribution, (c, i, dst_amount, dst_counter, "dma_write", ident)))
                elif t is GetBarrierSem:
                    if get_fail is not None:
                        raise Fail(get_fail)
                else:
                    _lower_op(program, mode, c, i, op, resolve, target, sem_allocs, sem_events, buffer_ids,
                              contributions, waits, dmas)
        except Fail as f:
            failing[c] = (i, f.violation)
        except Unsupported as u:
            unsupported.append(str(u))
    return failing, contributions, waits, dmas


def _lower_op(program, mode, c, i, op: Op, resolve, target, sem_allocs, sem_events, buffer_ids,
              contributions, waits, dmas) -> None:
    hw = mode == "hardware"
    t = type(op)  # the op classes are final: dispatch on identity, the common ops first
    if t is Wait:
        key = resolve(c, i, op.sem)
        waits[(c, i)] = WaitOp(c, i, (key, c), max(op.value, 0), op.kind, op.loc)
        if op.value < 0:  # ACC-76: it passes at once and raises its own count (the interpreter's)
            if mode == "hardware":
                raise Unsupported(f"core {c} op {i} waits for a negative amount {op.value}")
            contributions.append(Contribution(c, i, raised(op.value), (key, c), "signal"))
    elif t is Signal:
        key = resolve(c, i, op.sem)
        tgt = target(c, op.device, op.core, dma=False)
        if op.inc < 0:
            raise Unsupported(f"core {c} op {i} signals a negative amount {op.inc}")
        contributions.append(Contribution(c, i, op.inc, (key, tgt), "signal"))
    elif t is DmaStart:
        src_key = resolve(c, i, op.src_sem) if op.src_sem is not None else None
        dst_key = resolve(c, i, op.dst_sem)
        dst = target(c, op.device, op.core, dma=True)
        if op.view_error is not None:
            _view(op, mode)
        if op.nbytes < 0:
            raise Unsupported(f"core {c} op {i} starts a DMA of {op.nbytes} bytes")
        ident = len(dmas)
        src_counter = (src_key, c) if src_key is not None else None
        src_amount, dst_amount = dma_amounts(op, mode)  # the model's DMA-6
        dmas.append(DmaOp(ident, c, i, dst, op.nbytes, src_counter, (dst_key, dst), op.loc, src_amount, dst_amount))
        if src_counter is not None:
            contributions.append(Contribution(c, i, src_amount, src_counter, "dma_read", ident))
        contributions.append(Contribution(c, i, dst_amount, (dst_key, dst), "dma_write", ident))
    elif t is GetBarrierSem:
        if program.collective_id is None:
            raise Fail(NoCollectiveId())
        if not hw:
            handed = scalar_int16(program.collective_id)
            if isinstance(handed, Violation):
                raise Fail(handed)
    elif t is AllocSem or t is AllocBuffer:
        sem = t is AllocSem
        table = sem_allocs if sem else buffer_ids
        if (c, op.label) not in table:
            what = f"the ids of allocation {op.label!r} are" if sem else f"the id of buffer {op.label!r} is"
            raise Unsupported(f"core {c} op {i}: {what} not static")
        if not hw:  # what the interpreter hands the kernel must fit int16 (IDS-1)
            handed = table[(c, op.label)].ids if sem else scalar_int16(table[(c, op.label)])
            if isinstance(handed, Violation):
                raise Fail(handed)
    elif t is Read:
        resolve(c, i, op.sem)  # a read names a semaphore: its lookup may fail (SEM-3)
    elif t is Access:
        if op.view_error is not None:
            _view(op, mode)
    elif t not in (Barrier, FreeBuffer, ExitCheck):
        raise Unsupported(f"core {c} op {i}: unknown operation {type(op).__name__}")


def _view(op: Access | DmaStart, mode: DmaMode) -> None:
    """ERR-9, ERR-20: the access (or eager copy) raises, a static failure like ERR-4's (`step.view_failure`).

    An `on_wait` copy through such a view raises only when a waiter runs its task, which depends
    on the schedule (ACC-11): the lowering refuses it, in the words `failing_runs.DEFERRED_VIEW` reads."""
    err = view_failure(op, mode)
    if err is not None:
        raise Fail(err)
    if mode == "on_wait" and type(op) is DmaStart:
        raise Unsupported(f"the copy at {op.loc} raises in jax's interpreter when it runs "
                           f"({op.view_error.message}): under on_wait it raises when a waiter runs its task, "
                           "which depends on the schedule")


def totals(low: Lowered) -> dict:
    """counter -> (contributed T, waited W): a function of the lowering alone."""
    out: dict = defaultdict(lambda: [0, 0])
    for x in low.contributions:
        out[x.counter][0] += x.amount
    for w in low.waits.values():
        out[w.counter][1] += w.value
    return {k: tuple(v) for k, v in out.items()}

