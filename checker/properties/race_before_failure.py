"""ERR-24: a run that performs both events of a race before any failure, for a program whose runs fail
later: the race a witness of the indexable program names, or another the race pass found (ERR-29), or one
among the events a run performs before any wait that may pop a failing copy's task (ERR-31)."""

from __future__ import annotations

from collections.abc import Callable

from semcheck.checker.properties.verdict import Witness
from semcheck.checker.static.least_stuck import truncate
from semcheck.model.ops import DmaMode, DmaStart, Program, Wait
from semcheck.model.run import REPLAY_LIMIT
from semcheck.model.state import State
from semcheck.model.step import enabled, step, target_core


def both_run(program: Program, mode: DmaMode, w: Witness) -> tuple[tuple | None, dict | None]:
    """ERR-24: the schedule of a run of `program` that performs both events of a race of witness `w` (one a
    copy's half) before any failure, and the alternative race it shows (None: `w`'s own), or (None, None). It
    reaches a state where both events are next (none has run, no failure) by `w`'s schedule or, when that meets
    a failure first, by steps that bring the events' cores to them first (`_to_both_next`), trying `w`'s race
    and then the others the race pass found (`alternatives`); then it takes at each state the first enabled
    step that performs one of them, else the first that does not fail, until both have run, within
    REPLAY_LIMIT steps. jax's detector clocks a copy's halves with the clock its start took, whichever waiter
    runs them, and a core's next access with the core's clock now: two events next in one state are ordered
    neither way once both have run."""
    from semcheck.model.errors import ModelBug

    tries = [(w.details["halves"], None), *((a["halves"], a) for a in w.details.get("alternatives", ()))]
    for i, (events, alt) in enumerate(tries):
        if i == 0 and w.details.get("own_tried"):
            continue  # the caller tried the witness's own race already
        try:
            reached = (_follow(program, mode, w.schedule, events) if i == 0 else None) \
                or _to_both_next(program, mode, events)
            # the first step that does not fail, or one core's steps first (each core in turn, a few at most)
            firsts = (None, *range(min(program.topology.num_cores, 8)))
            done = reached and next((d for f in firsts if (d := _run_both(program, mode, events, *reached, f))), None)
        except ModelBug:
            done = None
        if done:
            return done, alt
    return None, None


def _run_both(program: Program, mode: DmaMode, events, state: State, steps: list, first: int | None) -> tuple | None:
    """ERR-24: continue from `state` (both `events` next) until both have run, never taking a failing step: a
    step that performs an event first, then one of core `first` (when given), else the first enabled."""
    from semcheck.model.race import event_pending

    def pending(s: State) -> int:
        return sum(event_pending(program, s, *e) for e in events)

    while (left := pending(state)):
        if len(steps) >= REPLAY_LIMIT:
            return None
        ok = [(a, s) for a in enabled(program, mode, state) if not (s := step(program, mode, state, a)).failures]
        if not ok:
            return None
        mine = [(a, s) for a, s in ok if a == ("core", first)]
        actor, state = next(((a, s) for a, s in ok if pending(s) < left), (mine or ok)[0])
        steps = [*steps, actor]
    return tuple(steps)


def _follow(program: Program, mode: DmaMode, schedule, events) -> tuple[State, list] | None:
    """ERR-24: the first state of `schedule` on `program` where both `events` are next, with its prefix, or
    None when a failure or the schedule's end comes first."""
    from semcheck.model.race import event_pending

    state, steps = State.initial(program), []
    for actor in (*schedule, None):
        if state.failures:
            return None
        if all(event_pending(program, state, *e) for e in events):
            return state, steps
        if actor is None:
            return None
        state = step(program, mode, state, tuple(actor))
        steps.append(tuple(actor))
    return None


def _to_both_next(program: Program, mode: DmaMode, events) -> tuple[State, list] | None:
    """ERR-24: a run of `program` to a state where both `events` are next: at each state the first enabled step
    that does not fail, a step of a core that has not reached its event first, else of a core without an event
    (an event's core is held there once it has reached it); None on a failure, a dead end or REPLAY_LIMIT."""
    from semcheck.model.race import event_pending

    at = {c: pc - (half is None) for c, pc, half in events}  # a copy's core steps its start; a core stops at its access
    state, steps = State.initial(program), []
    while not all(event_pending(program, state, *e) for e in events):
        if len(steps) >= REPLAY_LIMIT:
            return None
        ok = [(a, s) for a in enabled(program, mode, state) if not (s := step(program, mode, state, a)).failures]

        def rank(item) -> int:
            a = item[0]
            c = a[1] if a[0] == "core" else None
            if c in at and state.pcs[c] <= at[c]:  # not yet at its event
                return 0
            return 1 if c not in at else 2

        if not ok:
            return None
        actor, state = min(ok, key=rank)
        steps.append(actor)
    return state, steps


def before_failing_waits(program: Program, clean: Program, mode: DmaMode) -> tuple[Program, Callable] | None:
    """ERR-31: `clean` (the program with the views made indexable) cut before each core's first wait that may
    pop a task of a copy of `program` the interpreter refuses (its send semaphore on the issuing core after
    the start, its receive semaphore on the destination core, SEM-7, DMA-3), and whether an access event
    ran in that cut program's maximal run, which is a run of `program` that meets no failing task. None when
    nothing is cut."""
    from semcheck.model.fast import fast_run
    from semcheck.model.race import event_ran

    queues: dict[int, list] = {}  # core -> (semaphore, the first position whose wait may pop a failing task)
    for c, ops in enumerate(program.cores):
        for i, op in enumerate(ops):
            if type(op) is DmaStart and op.view_error is not None:
                if op.src_sem is not None:
                    queues.setdefault(c, []).append((op.src_sem, i))
                dst = target_core(program, mode, c, op.device, op.core, dma=True)
                if isinstance(dst, int):
                    queues.setdefault(dst, []).append((op.dst_sem, i if dst == c else -1))
    holds = {c: next((j for j, op in enumerate(program.cores[c])
                      if type(op) is Wait and any(op.sem == s and j > after for s, after in keys)),
                     len(program.cores[c])) for c, keys in queues.items()}
    cut = truncate(clean, holds)
    if cut is clean:
        return None
    from semcheck.model.errors import ModelBug

    try:
        state = fast_run(cut, mode).state
    except ModelBug:
        return None  # no run to read the events from: nothing more is tried
    return cut, lambda e: event_ran(cut, state, e.core, e.pc, e.half)
