"""Exploring devices that meet only at barriers of every device, one device at a time (spec RUN-57).

When no copy or signal of a device reaches another device, the devices meet only at barriers that one
core of every device takes part in (the launch's start and cleanup barriers, BAR-1), and every lookup
is stable (RUN-5), a step of one device reads and changes only that device's part of the state: the
devices' runs are independent between those barriers, and only a failure, which ends every device
(ERR-7), stops the others. `explore_by_device` walks each device alone with those barriers passable
(RUN-4, RUN-5's reduction), numbering its *rounds* (the barriers its meeting core has passed), and
composes what the walks found: a failure of device d in round r is an outcome when every other device's
walk reaches its r-th barrier; a terminal state is one resting state of each device in one round (each
core done or blocked, or the meeting core at the next barrier), not every device at the barrier. The
cost is the sum of the devices' states instead of their product. It keeps every outcome that does not
fail (RUN-4's visible outcome) and every failure (which operation of which core raises what); an error
outcome's exit warnings of other devices are not kept (no reader of the failing runs reads them).
"""

from __future__ import annotations

import dataclasses
import itertools

from semcheck.model.errors import ModelBug
from semcheck.model.explore import (Exploration, ExplorationLimit, StateCheck, explore, racy_collective_id, visible,
                                   walk)
from semcheck.model.ops import Barrier, DmaMode, DmaStart, ExitCheck, Program, Signal
from semcheck.model.run import classify, run
from semcheck.model.state import Actor, Outcome, State
from semcheck.model.step import enabled, is_global, step, target_core

Path = tuple[Actor, ...]


def meeting_cores(program: Program, mode: DmaMode) -> dict[int, int] | None:
    """RUN-57: each device's core that meets the others (device -> core; empty: they never meet), or None
    when a copy or signal reaches another device, a barrier with another device is not one of every
    device's meeting cores, or a lookup is not stable (RUN-5). Interpreter modes only (no DMA actors)."""
    topo = program.topology
    if mode == "hardware" or topo.num_devices < 2 or racy_collective_id(program):
        return None
    parties: frozenset[int] | None = None
    for core, ops in enumerate(program.cores):
        device = topo.device_of(core)
        for op in ops:
            t = type(op)
            if t is DmaStart or t is Signal:
                to = target_core(program, mode, core, op.device, op.core, dma=t is DmaStart)
                if isinstance(to, int) and topo.device_of(to) != device:
                    return None  # a target out of range fails on the issuing device (ERR-4): its own step
            elif t is Barrier and any(topo.device_of(p) != device for p in op.participants):
                if parties is not None and op.participants != parties:
                    return None
                parties = op.participants
            elif t is ExitCheck and op.device != device:
                return None
    if parties is None:
        return {}
    meet = {topo.device_of(p): p for p in parties}
    if len(meet) != len(parties) or len(meet) != topo.num_devices:
        return None
    if len({sum(_meets(op, parties) for op in program.cores[p]) for p in parties}) != 1:
        return None  # devices that meet unequally often: one waits for ever (a deadlock the walk need not find)
    return meet


def _meets(op, parties: frozenset[int]) -> bool:
    return type(op) is Barrier and op.participants == parties


def _apart(program: Program, parties: frozenset[int]) -> Program:
    """The program with every barrier of all devices passable by its one core alone."""
    return dataclasses.replace(program, cores=tuple(
        tuple(Barrier(f"{op.name}@{core}", frozenset({core}), op.loc) if _meets(op, parties) else op for op in ops)
        for core, ops in enumerate(program.cores)))


@dataclasses.dataclass
class _Walk:
    """One device's own runs: its failures (outcome key -> (round, path)), where it reaches each barrier
    (round -> path), and its resting states (round -> rest key -> (at the barrier, path))."""

    failures: dict[tuple, tuple[int, Path]] = dataclasses.field(default_factory=dict)
    arrivals: dict[int, Path] = dataclasses.field(default_factory=dict)
    rests: dict[int, dict[tuple, tuple[bool, Path]]] = dataclasses.field(default_factory=dict)
    local_failure: bool = False
    states: int = 0


def _walk_device(program: Program, apart: Program, mode: DmaMode, device: int, meet: int | None,
                 max_states: int) -> _Walk:
    cores = program.topology.cores_of_device(device)
    ops = program.cores[meet] if meet is not None else ()
    parties = _parties(program, meet)
    out = _Walk()

    def visit(state: State, path, actors: list[Actor]) -> None:
        pc = state.pcs[meet] if meet is not None else 0
        rnd = sum(_meets(op, parties) for op in ops[:pc])
        if state.failures:
            out.local_failure |= not all(is_global(program, f) for f in state.failures)
            key = tuple((f.violation, f.core, f.pc) for f in state.failures)
            out.failures.setdefault(key, (rnd, path()))
            return
        at = meet is not None and pc < len(ops) and _meets(ops[pc], parties)
        if at:
            out.arrivals.setdefault(rnd + 1, path())
        if actors and not (at and actors == [("core", meet)]):
            return
        key = (tuple(state.pcs[c] for c in cores), tuple(sorted(w.nonzero for w in state.warnings)))
        out.rests.setdefault(rnd, {}).setdefault(key, (at, path()))

    out.states = walk(apart, mode, visit, max_states=max_states, movers=cores)
    return out


def _parties(program: Program, meet: int | None) -> frozenset[int]:
    """The meeting cores of all devices, as `meet`'s barriers with other devices name them (none: empty)."""
    if meet is None:
        return frozenset()
    device = program.topology.device_of(meet)
    return next((op.participants for op in program.cores[meet] if type(op) is Barrier
                 and any(program.topology.device_of(p) != device for p in op.participants)), frozenset())


def _rounds(program: Program, apart: Program, mode: DmaMode, meet: int | None, path: Path) -> list[list[Actor]]:
    """`path` cut before each step that passes a barrier of all devices: its steps round by round."""
    parts: list[list[Actor]] = [[]]
    parties = _parties(program, meet)
    state = run(apart, mode, (), finish=False)
    for actor in path:
        if actor == ("core", meet) and _meets(program.cores[meet][state.pcs[meet]], parties):
            parts.append([])
        parts[-1].append(actor)
        state = step(apart, mode, state, actor)
    return parts


def _compose(program: Program, apart: Program, mode: DmaMode, meet: dict[int, int], paths: list[Path]) -> Path:
    """The devices' paths, round by round: every device reaches a barrier before any passes it."""
    parts = [_rounds(program, apart, mode, meet.get(d), p) for d, p in enumerate(paths)]
    out: list[Actor] = []
    for r in range(max(map(len, parts))):
        for p in parts:
            out += p[r] if r < len(p) else ()
    return tuple(out)


def explore_by_device(program: Program, mode: DmaMode, *, max_states: int) -> Exploration | None:
    """RUN-57: the outcomes of a program whose devices meet only at barriers of every device (`meeting_cores`),
    each device walked alone within `max_states` states in all (ExplorationLimit past them); None when they
    meet otherwise or a failure ends only its device (RUN-10)."""
    meet = meeting_cores(program, mode)
    if meet is None:
        return None
    parties = frozenset(meet.values())
    apart = _apart(program, parties)
    walks: list[_Walk] = []
    for device in range(program.topology.num_devices):
        w = _walk_device(program, apart, mode, device, meet.get(device), max_states - sum(x.states for x in walks))
        if w.local_failure:
            return None
        walks.append(w)
    states = sum(w.states for w in walks)
    tried: list[Path] = []
    for d, w in enumerate(walks):
        for rnd, path in w.failures.values():
            others = [x.arrivals.get(rnd) if e != d and rnd else () for e, x in enumerate(walks)]
            if all(p is not None for p in others):
                tried.append(_compose(program, apart, mode, meet, [path if e == d else p for e, p in enumerate(others)]))
    rounds = sorted(set().union(*(w.rests for w in walks)))
    combos = sum(_product(len(w.rests.get(rnd, {})) for w in walks) for rnd in rounds)
    if states + len(tried) + combos > max_states:
        raise ExplorationLimit(max_states)
    for rnd in rounds:
        for combo in itertools.product(*(list(w.rests.get(rnd, {}).values()) for w in walks)):
            if not all(at for at, _ in combo):
                tried.append(_compose(program, apart, mode, meet, [p for _, p in combo]))
    outcomes: dict[tuple, Outcome] = {}
    for schedule in tried:
        state = run(program, mode, schedule, finish=False)
        if not state.failures and enabled(program, mode, state):
            raise ModelBug("devices walked alone: their resting states together are not a terminal state")
        outcome = classify(program, mode, state, schedule)
        outcomes.setdefault(visible(outcome), outcome)
    return Exploration(tuple(outcomes.values()), states + len(tried), walked_alone=True)


def device_states_violate(program: Program, mode: DmaMode, checks: dict[str, StateCheck], *,
                          max_states: int) -> tuple[dict[str, bool], int] | None:
    """RUN-60 on RUN-57's walk: whether some state of some device walked alone (without RUN-5's reduction)
    violates each check, and the states visited; None when the devices meet otherwise, ExplorationLimit past
    `max_states`. Every reachable state's part on a device's cores is a state of that device's walk (RUN-57), so
    a check that reads only one device's part (its cores' allocations and ids) and finds nothing on any walk
    holds of every reachable state; a finding is no witness (its path is one of the program with the devices
    apart)."""
    meet = meeting_cores(program, mode)
    if meet is None:
        return None
    apart = _apart(program, frozenset(meet.values()))
    found = dict.fromkeys(checks, False)
    states = 0

    def visit(state: State, path, actors: list[Actor]) -> None:
        for name, check in checks.items():
            if not found[name] and check(state, not actors) is not None:
                found[name] = True

    for device in range(program.topology.num_devices):
        states += walk(apart, mode, visit, max_states=max_states - states, reduce=False,
                       movers=program.topology.cores_of_device(device))
    return found, states


def _product(sizes) -> int:
    n = 1
    for s in sizes:
        n *= s
    return n


def failures_one_run_per_device(program: Program, mode: DmaMode) -> frozenset | None:
    """ERR-47: the failures (violations) the runs of `program` end in, when every run ends in one, read off one run
    of each device alone: where each device has one core and the devices meet only at barriers of every device
    (`meeting_cores`), a device's steps are its core's operations in order (under `eager` and `on_wait` a copy's
    halves run inside its start or a wait, which pops its queue in a fixed order: SEM-7), so it has one run, the
    greedy run (RUN-3) of that core with the barriers of all devices passable alone. When every device's run ends
    in a failure that ends every device (ERR-7), every run of the program ends in the failure of a device whose
    run fails in the fewest rounds (barriers of all devices passed), and each such failure ends some run. None
    otherwise (a device whose run completes or blocks, a failure that ends only its device, devices of several
    cores or that meet otherwise: RUN-57's walk decides those)."""
    from semcheck.model.fast import fast_run

    topo = program.topology
    if topo.cores_per_device != 1:
        return None
    meet = meeting_cores(program, mode)
    if meet is None:
        return None
    parties = frozenset(meet.values())
    apart = _apart(program, parties)
    ends = []
    for core in range(topo.num_cores):
        f = fast_run(apart, mode, hold={c: 0 for c in range(topo.num_cores) if c != core}, record=False).failure
        if f is None or f.core != core or not is_global(program, f):
            return None
        ends.append((sum(_meets(op, parties) for op in program.cores[core][:f.pc]), f.violation))
    first = min(r for r, _ in ends)
    return frozenset(v for r, v in ends if r == first)


def explore_outcomes(program: Program, mode: DmaMode, *, max_states: int) -> Exploration:
    """RUN-4 within `max_states` states, else RUN-57's walk of one device at a time (same budget) where the
    devices meet only at barriers of every device; ExplorationLimit when neither fits."""
    try:
        return explore(program, mode, max_states=max_states)
    except ExplorationLimit:
        apart = explore_by_device(program, mode, max_states=max_states)
        if apart is None:
            raise
        return apart
