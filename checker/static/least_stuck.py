"""Runs of S' and where S' ends: the least stuck vector (RUN-3), and the maximal run of a program.

By RUN-3 every maximal run of S' ends at its least stuck vector; `least_stuck_vector` computes it
on the static system with the fast run's schedule, `s_prime_run` by running the model's fast run
on the program cut at its failing operations.
"""

from __future__ import annotations

import dataclasses
from bisect import bisect_left, bisect_right
from operator import attrgetter, itemgetter
from typing import Any, NamedTuple


from semcheck.model.errors import Violation
from semcheck.model.barrier import Counted, opens
from semcheck.model.fast import fast_run
from semcheck.model.ops import DmaMode, Program
from semcheck.model.run import classify
from semcheck.model.schedule import ParkAndWake
from semcheck.model.state import Outcome
from semcheck.model.semaphore import shortfall
from semcheck.model.step import enabled, step

Key = tuple
Counter = tuple  # (Key, core)

from semcheck.checker.static.system import Contribution, EncodingBug, Lowered, WaitOp


# --- runs of S' and of truncated programs ---------------------------------------------


def truncate(program: Program, holds: dict[int, int]) -> Program:
    """The program whose core g is held before its op holds[g] (a held core, RUN-3)."""
    if not any(pos < len(program.cores[g]) for g, pos in holds.items()):
        return program  # nothing to cut: keep the program's identity (and its analysis)
    cores = tuple(ops[: holds[g]] if g in holds else ops for g, ops in enumerate(program.cores))
    return dataclasses.replace(program, cores=cores)


def s_prime_run(low: Lowered, *, extra_stops: dict[int, int] | None = None, lookup_errors: bool = True) -> Outcome:
    """The terminal outcome of S' (failing ops block), via the fast run on the truncated program.

    Raises EncodingBug if the truncated run fails: the lowering missed a failure.
    """
    holds = {c: pos for c, (pos, _) in low.failing.items()}
    for c, pos in (extra_stops or {}).items():
        holds[c] = min(pos, holds.get(c, pos))
    out = maximal_run(truncate(low.program, holds), low.mode, lookup_errors=lookup_errors)
    if out.failure is not None and lookup_errors:
        raise EncodingBug(f"S' run failed although the lowering found no failure there: {out.failure}")
    return out


class SPrimeEnd(NamedTuple):
    """Where S' ends: its kind, positions and allocations (not its counts, queues or schedule)."""

    kind: str
    pcs: tuple[int, ...]
    allocs: Any  # (core, label) -> what the core holds: an Allocation, or the lowering's SemAlloc


def s_prime_end(low: Lowered, run: Outcome | None = None) -> SPrimeEnd:
    """Where S' ends: its kind, positions and allocations.

    A static lowering (`low.ok`) has every counter, so the end is its least stuck vector (RUN-3),
    with the allocations that have run before it; it is the same for the interpreter's two modes,
    whose lowerings add the same amounts (DMA-6). Otherwise it is where S''s own run ends (`run`,
    or `s_prime_run(low)`). A witness needs its mode's own run, not this.
    """
    if low.ok:
        kind, pcs = least_stuck_vector(low)
        held = {(c, label): a for (c, label), a in low.sem_allocs.items() if pcs[a.issuer] > a.pos}
        return SPrimeEnd(kind, pcs, held)
    sp = run if run is not None else s_prime_run(low)
    return SPrimeEnd(sp.kind, sp.state.pcs, sp.state.allocs)


def least_stuck_vector(low: Lowered) -> tuple[str, tuple[int, ...]]:
    """RUN-3 on the lowered system S': its least stuck vector and whether it is S''s completion.

    The fast run's schedule (each core as far as it can go, parked on the counter or barrier it
    waits for) over the lowering's counters instead of the program's operations: a wait passes
    when its counter holds its value, a contribution (a signal, each half of a copy at its start)
    adds to its counter, and a core's k-th barrier named `b` opens when every participant has
    reached its own k-th barrier named `b` (BAR-1). A core stops at its failing position (S'
    blocks there) or where the barrier-only simulation stops (a barrier that never opens). Returns
    `("completed", pcs)` when every core ends at its last position or failing one, else
    `("deadlock", pcs)`. Requires `low.ok` (every counter is static).
    """
    if not low.ok:
        raise EncodingBug("least_stuck_vector needs a static lowering")
    n = len(low.lengths)
    holds = [low.held_at(c) if c in low.failing else low.hb.reach(c) for c in range(n)]
    # Each core's events in program order: the lowering lists contributions and waits core by core,
    # so a core's are a slice of each (found by bisection), merged with its barriers on positions
    # (a stable sort: a copy's read half stays before its write half).
    xs, ws = low.contributions, list(low.waits.values())
    x_owner, w_core = list(map(itemgetter(0), xs)), list(map(itemgetter(0), ws))
    barriers_of: list[list] = [[] for _ in range(n)]
    for b in low.barriers.values():
        if b.pos < holds[b.core]:
            barriers_of[b.core].append(b)
    by_pos = attrgetter("pos")
    events: list[list] = []
    for c in range(n):
        evs = xs[bisect_left(x_owner, c):bisect_right(x_owner, c)] + ws[bisect_left(w_core, c):bisect_right(w_core, c)]
        evs += barriers_of[c]
        evs.sort(key=by_pos)
        events.append(evs)
    counts: dict = {}
    counts_get = counts.get
    sched = ParkAndWake(n)  # the fast run's schedule (RUN-3)
    waiting = sched.on_counter  # tested inline on every contribution
    reached: dict[tuple[int, str], int] = {}  # (core, barrier name) -> barriers of that name reached
    counted = Counted()  # BAR-1 counted (RUN-34): a barrier's arrivals, not each participant per look
    at = [0] * n  # index into events
    while (core := sched.next()) is not None:
        evs = events[core]
        j, end = at[core], len(evs)
        while j < end:
            e = evs[j]
            t = type(e)
            if t is WaitOp:
                counter = e[2]
                short = shortfall(counts_get(counter, 0), e[3])
                if short > 0:
                    sched.park_on(counter, core)
                    break
                counts[counter] = -short
            elif t is Contribution:
                counter = e[3]
                counts[counter] = counts_get(counter, 0) + e[2]
                if counter in waiting:
                    sched.changed(counter)
            else:
                reached[(core, e.name)] = e.k  # at its k-th barrier of the name, it has reached k
                counted.reach(core, e.name, e.k, e.participants)
                now = counted.opens(e.name, e.k, e.participants)
                if now is None:  # a name reached with two participant sets: each participant asked
                    now = opens(e.k, [reached.get((p, e.name), 0) for p in e.participants])
                if not now:
                    sched.park_at(e.name, e.k, core)
                    break
                sched.opened(e.name, e.k)
            j += 1
        at[core] = j
    pcs = tuple(holds[c] if at[c] == len(events[c]) else events[c][at[c]].pos for c in range(n))
    done = all(pcs[c] == low.held_at(c) for c in range(n))
    return ("completed" if done else "deadlock"), pcs


def maximal_run(program: Program, mode: DmaMode, *, lookup_errors: bool = True) -> Outcome:
    """The fast run (RUN-3) continued to a terminal state (`complete`)."""
    return complete(program, mode, fast_run(program, mode, lookup_errors=lookup_errors))


def complete(program: Program, mode: DmaMode, out: Outcome) -> Outcome:
    """Continue a fast-run outcome with the step relation until no step is enabled.

    A guard: the step relation is the reference, and the verdicts rely on the
    fast run ending in a terminal state. It once did not (barriers whose
    participant sets differed, now refused by IR-1); checking costs one
    `enabled` call when it does.
    """
    if out.failure is not None:
        return out
    state, schedule = out.state, list(out.schedule)
    extra = 0
    while True:
        actors = enabled(program, mode, state)
        if not actors:
            break
        state = step(program, mode, state, actors[0])
        schedule.append(actors[0])
        extra += 1
    return out if extra == 0 else classify(program, mode, state, tuple(schedule))


def failure_reached(low: Lowered, pcs: tuple[int, ...]) -> list[tuple[int, int, Violation]]:
    """The cores of an S' terminal state that sit at their failing op: (core, pos, violation)."""
    return [(c, pos, v) for c, (pos, v) in sorted(low.failing.items()) if pcs[c] == pos]
