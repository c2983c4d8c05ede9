"""Exhaustive exploration of all interleavings (RUN-4), with state hashing and
partial-order reduction.

This is the ground truth the fast run and the Z3 encodings are checked
against, and the fallback for programs where the persistence argument of
RUN-3 does not apply (semaphore reads, schedule-dependent lookups, exit checks
racing with late signals).

Reduction (RUN-5): when some actor's next step is *safe*, independent of
every step any other actor can ever take, only that step is explored from
the state. Safety is judged conservatively; every step not shown safe is
explored in every order. Visible outcomes (`Outcome.summary` plus exit
warnings) are preserved.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from semcheck.model import semaphore as sem
from semcheck.model.clocks import keeps_clocks
from semcheck.model.ops import BARRIER, AllocSem, Barrier, DmaMode, DmaStart, ExitCheck, Program, Signal, Wait
from semcheck.model.run import classify
from semcheck.model.state import Actor, Outcome, State
from semcheck.model.step import core_step, enabled, step, target_core


class ExplorationLimit(Exception):
    """The state space is larger than the caller allowed."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"more than {limit} states")
        self.limit = limit


@dataclasses.dataclass(frozen=True)
class Exploration:
    """Every distinct terminal outcome, each with a schedule that reaches it."""

    outcomes: tuple[Outcome, ...]
    states: int
    walked_alone: bool = False  # RUN-57: each device walked alone and the outcomes composed

    def how(self) -> str:
        """The states visited, as a verdict's reason says them."""
        return f"{self.states} states" + (", each device walked alone, RUN-57" if self.walked_alone else "")

    def kinds(self) -> set[str]:
        return {o.kind for o in self.outcomes}


def visible(outcome: Outcome) -> tuple:
    """RUN-4: what distinguishes two terminal outcomes for the user.

    An error outcome is its failure and, when the failure stops only its own
    device, where the others got stuck; the positions other cores had reached
    when a global failure struck are not visible.
    """
    s = outcome.state
    warn = tuple(sorted(w.nonzero for w in s.warnings))
    if outcome.kind == "error":
        fs = tuple((f.violation, f.core, f.pc) for f in s.failures)
        others = tuple(b.core for b in outcome.blocked if b.reason != "halted by failure")
        return ("error", fs, others, warn)
    return (outcome.kind, s.pcs, warn)


def _static_internal_ids(program: Program) -> frozenset[int]:
    """All internal ids any core ever allocates (ids per core are schedule-independent)."""
    topo = program.topology
    nxt: dict[int, int] = {}
    ids: set[int] = set()
    for core, ops in enumerate(program.cores):
        for op in ops:
            if isinstance(op, AllocSem):
                cores = topo.cores_of_device(topo.device_of(core)) if op.scope == "device" else (core,)
                ranges = sem.handout(nxt, cores, op.count)
                nxt.update(sem.advanced(ranges))
                ids.update(*ranges.values())
    return frozenset(ids)


def _queued_from_elsewhere(program: Program, mode: DmaMode) -> frozenset[int]:
    """The cores some other core's DMA start queues an `on_wait` task on (RUN-5)."""
    return frozenset(
        dst for core, ops in enumerate(program.cores) for op in ops if isinstance(op, DmaStart)
        if (dst := target_core(program, mode, core, op.device, op.core, dma=True)) != core)


def _safe(
    program: Program, mode: DmaMode, state: State, actor: Actor, nxt: State, racy_cid: bool, tasks: bool,
    shared_queues: frozenset[int] = frozenset(),
) -> bool:
    """RUN-5: is this step independent of every step of every other actor?"""
    if len(nxt.failures) > len(state.failures):
        return False  # which failure comes first is visible
    kind, ident = actor
    if kind != "core":  # a hardware DMA half: a signal to its target
        dma = state.dmas[ident]
        core = dma.src_core if kind == "dma_read" else dma.dst_core
        return _exit_checked(program, state, core)
    core = ident
    op = program.cores[core][state.pcs[core]]
    topo = program.topology
    # Only the collective id can move between "unknown", "internal only" and "both
    # tables"; every other id a core holds is internal since its own allocation.
    lookups_stable = mode == "hardware" or not racy_cid
    if isinstance(op, Barrier):
        return True
    if isinstance(op, ExitCheck):
        return False
    if op.hands_out_ids:
        return lookups_stable
    if keeps_clocks(program.detect_races, mode) and (isinstance(op, Signal) or (isinstance(op, DmaStart)
                                                                               and mode == "eager")):
        # RACE-1: a signal (an eager start's halves signal too) gives a counter its clock, and another core's
        # wait that finishes before it fails: the order is visible. A wait that finishes stays safe: a clock
        # once there stays
        return False
    if isinstance(op, Signal):
        if not lookups_stable:
            return False
        if tasks:
            # under on_wait a short waiter may run a queued DMA or be satisfied by this
            # signal instead: the signal decides which, so it is not independent
            return False
        t = target_core(program, mode, core, op.device, op.core, dma=False)
        return topo.device_of(t) == topo.device_of(core) or _exit_checked(program, state, t)
    if isinstance(op, Wait):
        if not lookups_stable:
            return False
        # popping a task is not independent of another core's enqueue (LIFO order)
        return nxt.queues == state.queues
    if isinstance(op, DmaStart):
        if not lookups_stable:
            return False
        dst = target_core(program, mode, core, op.device, op.core, dma=True)
        if mode == "on_wait":
            # a waiter pops the task queued last, so the order of two cores' starts into one queue is visible
            return dst == core and core not in shared_queues
        if mode == "hardware":
            return True  # the halves are separate actors
        if dst != core and len(nxt.dmas) > len(state.dmas) and nxt.dmas[-1].buffers[1] is not None:
            return False  # BUF-14: whether the write finds the target's run_scoped key depends on its scope
        return topo.device_of(dst) == topo.device_of(core) or _exit_checked(program, state, dst)
    return False  # Read and anything new: explore all orders


def _exit_checked(program: Program, state: State, core: int) -> bool:
    """Whether the exit check of `core`'s device has already run."""
    topo = program.topology
    first = topo.global_core(topo.device_of(core), 0)
    ops = program.cores[first]
    return not any(isinstance(op, ExitCheck) for op in ops[state.pcs[first]:])


def barrier_used_before_fetched(program: Program) -> bool:
    """Whether some core looks the barrier semaphore up before its own get_barrier_semaphore.

    Such a lookup races with other cores' insertions of the collective id
    (an unknown id, or not, depending on the schedule).
    """
    for ops in program.cores:
        for op in ops:
            if op.fetches_barrier:
                break
            refs = [getattr(op, "sem", None), getattr(op, "dst_sem", None), getattr(op, "src_sem", None)]
            if any(r is not None and r.label == BARRIER for r in refs):
                return True
    return False


def racy_collective_id(program: Program) -> bool:
    """RUN-5: whether a lookup may depend on other cores' steps: the collective id is an id some core
    allocates, or some core looks the barrier semaphore up before its own `get_barrier_semaphore`."""
    cid = program.collective_id
    return cid is not None and (cid in _static_internal_ids(program) or barrier_used_before_fetched(program))


def unallocated_id(program: Program) -> int:
    """ERR-49: the least id no core ever allocates (ids per core are schedule-independent), for a collective id
    whose lookups no allocation can meet."""
    taken = _static_internal_ids(program)
    return next(i for i in range(len(taken) + 1) if i not in taken)


def explore(program: Program, mode: DmaMode, *, max_states: int = 200_000, reduce: bool = True) -> Exploration:
    """RUN-4: all terminal outcomes of `program` under `mode`, each with a witness schedule."""
    outcomes: dict[tuple, Outcome] = {}

    def end(state: State, path: Callable[[], tuple[Actor, ...]], actors: list[Actor]) -> None:
        if actors:
            return
        outcome = classify(program, mode, state)
        key = visible(outcome)
        if key not in outcomes:  # the schedule of the first run per outcome only: a walk per end is quadratic
            outcomes[key] = dataclasses.replace(outcome, schedule=path())

    states = walk(program, mode, end, max_states=max_states, reduce=reduce)
    return Exploration(tuple(outcomes.values()), states)


# RUN-60: a property judged at one state (`terminal`: no actor can move there): what it violates there, or None
StateCheck = Callable[[State, bool], object]


@dataclasses.dataclass(frozen=True)
class StateFinding:
    """RUN-60: the first reached state a check found violating, and a schedule that reaches it."""

    found: object
    schedule: tuple[Actor, ...]


def explore_states(program: Program, mode: DmaMode, checks: dict[str, StateCheck], *,
                   max_states: int) -> tuple[dict[str, StateFinding | None], int]:
    """RUN-60: every state reachable under `mode`, without RUN-5's reduction (which keeps outcomes, not the
    states along a run), the states of runs that then fail included; each check's first violating state
    (None: no reached state violates it) and the states visited, or ExplorationLimit past `max_states`."""
    found: dict[str, StateFinding] = {}

    def visit(state: State, path: Callable[[], tuple[Actor, ...]], actors: list[Actor]) -> None:
        for name, check in checks.items():
            if name not in found and (what := check(state, not actors)) is not None:
                found[name] = StateFinding(what, path())

    states = walk(program, mode, visit, max_states=max_states, reduce=False)
    return {name: found.get(name) for name in checks}, states


def walk(program: Program, mode: DmaMode,
         visit: Callable[[State, Callable[[], tuple[Actor, ...]], list[Actor]], None], *,
         max_states: int, reduce: bool = True, movers: tuple[int, ...] | None = None) -> int:
    """RUN-4, RUN-5: visit every state reachable by the steps of `movers`' cores (None: every actor), calling
    `visit(state, path, actors)` at each (`path()`: a schedule that reaches it; `actors`: the enabled ones);
    the states visited, or ExplorationLimit past `max_states`."""
    racy_cid = racy_collective_id(program)
    tasks = mode == "on_wait" and any(isinstance(op, DmaStart) for ops in program.cores for op in ops)
    shared_queues = _queued_from_elsewhere(program, mode) if tasks else frozenset()
    init = State.initial(program)
    parent: dict[State, tuple[State, Actor] | None] = {init: None}
    stack = [init]
    while stack:
        state = stack.pop()
        if movers is None:
            actors = enabled(program, mode, state)
        else:
            actors = [("core", c) for c in movers if core_step(program, mode, state, c) is not None]
        visit(state, lambda s=state: _path(parent, s), actors)
        if not actors:
            continue
        succ = [(a, step(program, mode, state, a)) for a in actors]
        if reduce:
            for a, nxt in succ:
                if _safe(program, mode, state, a, nxt, racy_cid, tasks, shared_queues):
                    succ = [(a, nxt)]
                    break
        for a, nxt in succ:
            if nxt not in parent:
                parent[nxt] = (state, a)
                if len(parent) > max_states:
                    raise ExplorationLimit(max_states)
                stack.append(nxt)
    return len(parent)


def _path(parent: dict, state: State) -> tuple[Actor, ...]:
    out = []
    while (link := parent[state]) is not None:
        state, actor = link
        out.append(actor)
    return tuple(reversed(out))

