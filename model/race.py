"""Data races over every schedule, decided with restricted maximal runs (spec DR-1 .. DR-4).

A race is a reachable state in which two conflicting accesses (ACC-2) are
both pending (DR-1). Each question "can these two be pending together?" is
answered by one greedy run of a *restricted* system: the program with some DMA
halves suppressed and some cores held before a position (DR-2, why one run
decides); one run answers every access of a core against one DMA half (DR-3).
Under `on_wait` the restriction over-approximates; a race it finds is replayed
on the step relation before it is believed (DR-4).
"""

from __future__ import annotations

import dataclasses
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator

from semcheck.model.access import AccessEvent, Unrecorded, accesses, conflicting_pairs, in_mode
from semcheck.model.errors import ModelBug
from semcheck.model.fast import fast_run
from semcheck.model.fold import race_symmetry
from semcheck.model.happens_before import Ordering, order_modes
from semcheck.model.local_cores import schedule_free
from semcheck.model.quotient import Quotient, class_quotient
from semcheck.model.ops import DmaMode, DmaStart, Program
from semcheck.model.run import REPLAY_LIMIT, run
from semcheck.model.state import Outcome, State
from semcheck.model.step import enabled, step
from semcheck.model.symmetry import Rotation

Holds = tuple[tuple[int, int], ...]  # sorted (core, position) pairs
Suppressed = frozenset[tuple[int, int, str]]  # (core, pc, half) of DMA halves


@dataclasses.dataclass(frozen=True)
class Race:
    """Two conflicting accesses that can be pending at once, and the run that gets there (DR-1)."""

    first: AccessEvent
    second: AccessEvent
    outcome: Outcome  # the restricted run's terminal state: both accesses pending
    exact: bool  # both regions exact (else the overlap may be an artefact of widening)
    confirmed: bool  # replayed on the step relation (always, except on_wait races that did not replay)
    doubt: str = ""  # why a race that replayed is still not believed (ERR-34), for the report


@dataclasses.dataclass(frozen=True)
class RaceReport:
    """What the race property found: races (confirmed and exact first), and what kept it from deciding."""

    races: tuple[Race, ...]
    unrecorded: tuple[Unrecorded, ...]
    pairs: int  # conflicting pairs examined
    runs: int  # restricted runs made
    complete: bool = True  # False when the deadline passed before every pair was decided
    estimate: int = 0  # operations the restricted runs would execute (DR-3: two runs per DMA half)
    over_budget: bool = False  # the estimate exceeded `max_work`: nothing was decided
    accesses: int = 0  # accesses the happens-before pass checked (DR-6); 0 when it had no certificate
    uncertified: str = ""  # why the happens-before pass could not decide (then every pair got restricted runs)
    unperformed: int = 0  # pending pairs ACC-51 cleared: one is a copy half that no run performs


class _Runs:
    """Restricted maximal runs, memoised by restriction (DR-2)."""

    def __init__(self, program: Program, mode: DmaMode) -> None:
        self.program = program
        self.mode = mode
        self.memo: dict[tuple[Holds, Suppressed], Outcome] = {}

    def __call__(self, holds: dict[int, int] | None = None, suppress: Iterable[tuple[int, int, str]] = ()) -> Outcome:
        key = (tuple(sorted((holds or {}).items())), frozenset(suppress))
        out = self.memo.get(key)
        if out is None:
            out = self.memo[key] = fast_run(self.program, self.mode, hold=dict(key[0]), suppress=key[1])
        return out


def _half(e: AccessEvent) -> tuple[int, int, str]:
    assert e.half is not None
    return (e.core, e.pc, e.half)


def _pending_dma(pcs: tuple[int, ...], e: AccessEvent) -> bool:
    """Whether DMA half `e` is pending at positions `pcs` of its restricted run: started, and
    (being suppressed) not yet happened (DR-1)."""
    return pcs[e.core] > e.pc


def _restriction(a: AccessEvent, b: AccessEvent, mode: DmaMode) -> tuple[dict[int, int], list[tuple[int, int, str]]] | None:
    """DR-2: the restricted system whose terminal state answers the pair; None when no run can race them."""
    holds: dict[int, int] = {}
    suppress: list[tuple[int, int, str]] = []
    for e in (a, b):
        if not e.is_dma:
            if holds.get(e.core, e.pc) != e.pc:
                return None  # one core at two positions at once: program order orders them
            holds[e.core] = e.pc
        else:
            suppress.append(_half(e))
    return holds, suppress


def _both_pending(pcs: tuple[int, ...], a: AccessEvent, b: AccessEvent) -> bool:
    def pending(e: AccessEvent) -> bool:
        return _pending_dma(pcs, e) if e.is_dma else pcs[e.core] == e.pc

    return pending(a) and pending(b)


def _halted(outcome: Outcome) -> bool:
    return outcome.state.failure is not None


def _confirm(program: Program, mode: DmaMode, outcome: Outcome, a: AccessEvent, b: AccessEvent) -> Outcome | None:
    """DR-4: replay the restricted run's schedule on the step relation; the first state of the replay
    with both accesses pending is a race state the program reaches (DR-1), returned with its prefix.

    Under `on_wait` the restriction removes the copy's tasks from the queues,
    so a waiter may pop a task the real system would not have reached: the
    replay may stop being a run of the program (ModelBug) or run a suppressed
    half at a later step. Every state before that is reachable as it is, so
    the replay checks each one (DR-44). The step relation copies its state on
    every step, so a schedule past `REPLAY_LIMIT` steps is not replayed and
    the race stays unconfirmed.
    """
    if len(outcome.schedule) > REPLAY_LIMIT:
        return None

    # DR-52: each event's rank among its core's starts, counted once, not at every step of the replay
    ranks = {e: start_rank(program, e.core, e.pc) for e in (a, b) if e.half is not None}

    def pending(state: State, e: AccessEvent) -> bool:
        return event_pending(program, state, e.core, e.pc, e.half, ranks.get(e))

    state = State.initial(program)
    first: Outcome | None = None  # the first race state on the way (kept when the end does not replay)
    for i, actor in enumerate(outcome.schedule):
        if first is None and pending(state, a) and pending(state, b):
            first = dataclasses.replace(outcome, state=state, schedule=outcome.schedule[:i], blocked=())
        try:
            state = step(program, mode, state, tuple(actor))
        except ModelBug:
            return first
    return outcome if pending(state, a) and pending(state, b) else first


def start_rank(program: Program, core: int, pc: int) -> int:
    """How many DMA starts `core` runs before position `pc`: the issuer's k-th start is its k-th DMA in a state
    (starts do not fail in a replay that got past them)."""
    return sum(type(op) is DmaStart for op in program.cores[core][:pc])


def event_pending(program: Program, state: State, core: int, pc: int, half: str | None, rank: int | None = None) -> bool:
    """DR-1: whether the access at `core`/`pc` (a copy's `half`, or the core's own when None) is next in
    `state`: the core's next op, or a half of a started copy that has not run. `rank`: `start_rank` of the
    access, when the caller has it (DR-52)."""
    if half is None:
        return state.pcs[core] == pc
    if state.pcs[core] <= pc:
        return False
    k = start_rank(program, core, pc) if rank is None else rank
    mine = [d for d in state.dmas if d.src_core == core]
    return k < len(mine) and mine[k].phase < (1 if half == "read" else 2)


def whole_against_empty(a: AccessEvent, b: AccessEvent) -> bool:
    """ERR-27 (DR-48): whether the pair meets only as a window of no element against an access that names its
    buffer with no index, a window jax's race detector reads as whole, which no window of no element meets
    (semcheck's conflict test reads it as its full slices, so the race is not the detector's)."""
    x, y = a.region, b.region
    return (x.empty and y.whole or y.empty and x.whole) and not x.overlaps(y)


def performed_later(program: Program, mode: DmaMode, schedule: tuple, a: AccessEvent, b: AccessEvent) -> bool:
    """ERR-34 (DR-4 under `on_wait`): whether some run through the race state `schedule` reaches on the step
    relation (both accesses pending, DR-1) performs both accesses. jax's
    race detector sees an access only once it is performed, and a copy of no element whose wait for 0 passed
    without running it stays queued: a race of windows with it is one only if a later wait runs its task. The
    run tried performs each pending kernel access first, then steps the lowest enabled actor (a maximal run,
    RUN-1): both performed there is a run of the program in which the detector meets both."""
    ranks = {e: start_rank(program, e.core, e.pc) for e in (a, b) if e.half is not None}
    try:
        state = run(program, mode, schedule, finish=False)
    except ModelBug:
        return False

    def ran(st: State, e: AccessEvent) -> bool:
        if e.half is None:
            return st.pcs[e.core] > e.pc
        mine = [d for d in st.dmas if d.src_core == e.core]
        k = ranks[e]
        return st.pcs[e.core] > e.pc and k < len(mine) and mine[k].phase >= (1 if e.half == "read" else 2)

    for e in (a, b):
        if e.half is None and state.pcs[e.core] == e.pc and ("core", e.core) in enabled(program, mode, state):
            state = step(program, mode, state, ("core", e.core))
    for _ in range(REPLAY_LIMIT):
        if ran(state, a) and ran(state, b):
            return True
        actors = enabled(program, mode, state)
        if not actors:
            return False
        state = step(program, mode, state, actors[0])
    return False


def event_ran(program: Program, state: State, core: int, pc: int, half: str | None) -> bool:
    """Whether the access at `core`/`pc` (a copy's `half`, or the core's own when None) has run in `state`:
    the core is past it, or the half of that started copy has happened (ERR-31 keeps these)."""
    if half is None:
        return state.pcs[core] > pc
    if state.pcs[core] <= pc:
        return False
    k = sum(type(op) is DmaStart for op in program.cores[core][:pc])
    mine = [d for d in state.dmas if d.src_core == core]
    return k < len(mine) and mine[k].phase >= (1 if half == "read" else 2)


def _kernel_against_dma_groups(
    pairs: list[tuple[AccessEvent, AccessEvent]],
) -> tuple[dict[tuple[tuple[int, int, str], int], list[tuple[AccessEvent, AccessEvent]]], list[tuple[AccessEvent, AccessEvent]]]:
    """Split pairs into (DMA half, accessing core) groups of kernel-vs-DMA pairs (DR-3) and the rest."""
    groups: dict = defaultdict(list)
    rest = []
    for a, b in pairs:
        if a.is_dma != b.is_dma:
            h, k = (a, b) if a.is_dma else (b, a)
            groups[(_half(h), k.core)].append((h, k))
        else:
            rest.append((a, b))
    return groups, rest



MAX_WORK = 10_000_000
"""Operations the restricted runs of one program may execute (estimated) before semcheck gives up at
once: two runs per DMA half over the whole program (DR-3) grows as the cube of a ring's device
count (the cost per operation is in bench/README.md)."""


def work_estimate(program: Program, period: int | None = None) -> int:
    """Operations the restricted runs would execute at most: two runs per DMA half over the whole
    program (DR-3), one orbit of halves under a rotation by `period` (DR-5; found when not given)."""
    k = Rotation.observe(program, shifted=True).devices if period is None else period
    dmas = sum(type(op) is DmaStart and op.dst_buf is not None for ops in program.cores for op in ops)
    return 2 * 2 * dmas * k // program.topology.num_devices * program.num_ops


@dataclasses.dataclass(frozen=True)
class Ordered:
    """The happens-before pass of a program under a mode (DR-6), before any restricted run."""

    period: int  # DR-5: the rotation the accesses were chosen by
    events: tuple[AccessEvent, ...]  # the accesses checked (the buffers of devices 0 .. period-1)
    unrecorded: tuple[Unrecorded, ...]
    ordering: Ordering


def ordered(program: Program, mode: DmaMode) -> Ordered:
    """DR-5, DR-6: the accesses one orbit needs, and what one happens-before run says of them."""
    return ordered_modes(program, (mode,))[mode]


def ordered_modes(
    program: Program, modes: Iterable[DmaMode], *, symmetry: tuple[int, Quotient | None] | None = None,
    listed: Callable[[int | None], tuple[list[AccessEvent], list[Unrecorded]]] | None = None,
    runs: Callable[[DmaMode], tuple] | None = None,
) -> dict[DmaMode, Ordered]:
    """`ordered` for several modes; the interpreter's modes share one run (DR-7). `symmetry` is
    `race_symmetry(program)` when the caller has it already; `listed(near)` is `accesses(program, mode,
    near=near)` when the caller can list them without reading the whole program (DR-32); `runs`: the program's
    own traced runs, when the caller keeps them (`happens_before.order_modes`, DR-46)."""
    # DR-5; DR-8: a fold's run is a run of the program, accesses included
    k, fold = race_symmetry(program) if symmetry is None else symmetry
    near = k if k < program.topology.num_devices else None
    modes = tuple(modes)
    # the accesses are the same in every mode: a copy lands where SIG-1 says whatever the mode
    if modes:
        found = dict.fromkeys(modes, listed(near) if listed is not None else accesses(program, None, near=near))
    else:
        found = {}
    # DR-41: the run of one period with every class in step, where it proves; else DR-8's fold or the whole run
    one = class_quotient(program, k) if near is not None else None
    if one is not None and fold is not None and one.devices >= fold.devices:
        one = None
    found = {m: (in_mode(evs, m), un) for m, (evs, un) in found.items()}  # BUF-15: a TPU's stack slots
    orderings = order_modes(program, {m: evs for m, (evs, _) in found.items() if evs}, one or fold,
                            proof_only=one is not None, otherwise=fold, runs=runs)
    return {m: Ordered(k, tuple(evs), tuple(un), orderings.get(m, Ordering(True, "", ())))
            for m, (evs, un) in found.items()}


def find_races(
    program: Program, mode: DmaMode, *, first: int = 1, deadline: float | None = None,
    max_work: int | None = None, pre: Ordered | None = None, keep: Callable[[AccessEvent], bool] | None = None,
) -> RaceReport:
    """DR-1 .. DR-7: the races of `program` under `mode`.

    Stop once `first` exact, confirmed races are found (1, the default: a
    violation needs one witness; more give ERR-29 other races to try); with
    0 (False) return every race found (one per group).
    `deadline` is a `time.perf_counter()` value past which the search stops
    (the report then says it is incomplete). `pre` is `ordered(program, mode)`
    when the caller has it. `keep`: only pairs whose two events it keeps are
    tried (ERR-31: the events a run performs before any failing wait).

    The happens-before pass (DR-6, DR-7) orders most pairs in one run; only
    the pairs it leaves unordered get restricted runs (DR-2), as many as
    `max_work` operations pay for. Without its certificate every pair is
    decided by restricted runs, and a program whose runs would exceed the
    budget is given up at once.
    """
    budget = MAX_WORK if max_work is None else max_work
    pre = pre or ordered(program, mode)
    k, ordering, unrecorded = pre.period, pre.ordering, list(pre.unrecorded)
    estimate = 0
    if ordering.certified:
        pairs = ordering.candidates
        if not pairs:
            return RaceReport((), tuple(unrecorded), 0, 0, True, 0, accesses=len(pre.events))
    else:
        estimate = work_estimate(program, k)
        if estimate > budget:
            return RaceReport((), (), 0, 0, False, estimate, True, uncertified=ordering.why)
        events, unrecorded = accesses(program, mode)
        pairs = Rotation(program.topology, k).representative_pairs(conflicting_pairs(events, mode))
    if keep is not None:
        pairs = [(a, b) for a, b in pairs if keep(a) and keep(b)]
    runs = _Runs(program, mode)
    found: list[Race] = []

    every: dict[tuple[int, int, str | None], AccessEvent] = {}
    own = _OwnRun(program, mode)
    cleared: list[tuple[AccessEvent, AccessEvent]] = []

    def consider(a: AccessEvent, b: AccessEvent, outcome: Outcome) -> bool:
        exact = a.region.exact and b.region.exact
        confirmed = True
        if mode == "on_wait":
            replayed = _confirm(program, mode, outcome, a, b)
            confirmed = replayed is not None
            outcome = replayed or outcome
        if not confirmed and k < program.topology.num_devices and len(outcome.schedule) <= REPLAY_LIMIT:
            # (a schedule too long to replay has images as long: they are not tried)
            # DR-5 keeps one pair per orbit, but the greedy schedule is not symmetric: under on_wait
            # another member of the orbit may replay where this one did not (DR-4)
            if not every:
                every.update(((e.core, e.pc, e.half), e) for e in accesses(program, mode)[0])
            for x, y in Rotation(program.topology, k).pair_images(a, b, every):
                r = _restriction(x, y, mode)
                out = runs(*r) if r is not None else None
                if out is not None and not _halted(out) and _both_pending(out.state.pcs, x, y):
                    replayed = _confirm(program, mode, out, x, y)
                    if replayed is not None:
                        a, b, outcome, confirmed = x, y, replayed, True
                        break
        if not confirmed and a.core == b.core and own.ready() is not None:
            # ACC-49: the core's steps are one sequence in every run; the program's own run decides the pair
            replayed = _confirm(program, mode, own.ready(), a, b)
            if replayed is None:
                return False  # no run has both pending: not a race
            outcome, confirmed = replayed, True
        doubt = ""
        if confirmed and mode != "hardware" and whole_against_empty(a, b):
            confirmed, doubt = False, "ERR-27"
        elif (confirmed and mode == "on_wait" and (a.region.empty or b.region.empty)
                and not performed_later(program, mode, outcome.schedule, a, b)):
            if own.never_performs(a, b):
                cleared.append((a, b))
                return False  # ACC-51: no run performs both, so the detector never meets them
            confirmed, doubt = False, "ERR-34"
        if mode == "eager" and (a.is_dma or b.is_dma):
            outcome = _unsuppressed(program, mode, outcome)
        found.append(Race(a, b, outcome, exact, confirmed, doubt))
        return bool(first) and sum(r.exact and r.confirmed for r in found) >= first

    complete = True
    for a, b in _ordered(program, mode, pairs, runs):
        if deadline is not None and time.perf_counter() > deadline:
            complete = False
            break
        if len(runs.memo) * program.num_ops > budget and ordering.certified:
            # DR-6 left more pairs unordered than the budget's restricted runs can decide
            estimate = len(runs.memo) * program.num_ops
            complete = False
            break
        r = _restriction(a, b, mode)
        if r is None:
            continue
        outcome = runs(*r)
        if _halted(outcome):
            continue  # a failure stops the run: that property reports it, not this one
        if _both_pending(outcome.state.pcs, a, b):
            if a.is_dma != b.is_dma and a.region.exact and b.region.exact:
                a, b, outcome = _earliest(program, mode, pairs, runs, a, b, outcome)
            if consider(a, b, outcome):
                break
    found.sort(key=lambda r: (not (r.exact and r.confirmed), not r.exact))
    over = not complete and estimate > 0 and ordering.certified
    return RaceReport(tuple(found), tuple(unrecorded), len(pairs), len(runs.memo), complete, estimate, over,
                      len(pre.events) if ordering.certified else 0, ordering.why, len(cleared))


class _OwnRun:
    """ACC-49: the program's one maximal `on_wait` run, made on first use, when it decides every pair of one core:
    each core's steps are the same in every run (`schedule_free`) and the run fails nowhere, so it performs every
    core's whole sequence; None otherwise (or when it is too long to replay)."""

    def __init__(self, program: Program, mode: DmaMode):
        self.program, self.mode, self.outcome, self.made = program, mode, None, False

    def ready(self) -> Outcome | None:
        if not self.made:
            self.made = True
            if self.mode == "on_wait" and schedule_free(self.program) is None:
                out = fast_run(self.program, self.mode)
                if out.failure is None and len(out.schedule) <= REPLAY_LIMIT:
                    self.outcome = out
        return self.outcome

    def never_performs(self, a: AccessEvent, b: AccessEvent) -> bool:
        """ACC-51: whether one of the two is a copy half the program's own run never performs. Each core's
        steps, its waits' pops of queued tasks included (SEM-7), are one sequence in every run (ACC-49), and the
        own run performs all of it: a half it leaves queued no run performs, so jax's detector never meets it."""
        out = self.ready()
        return out is not None and any(e.half is not None and not event_ran(self.program, out.state, e.core, e.pc,
                                                                           e.half) for e in (a, b))


def _unsuppressed(program: Program, mode: DmaMode, outcome: Outcome) -> Outcome:
    """DR-4 under `eager`: the same positions reached by the step relation's own halves.

    An eager start runs both halves of its copy in the start (DMA-2), so a run that holds a half back
    (DR-2) is not a run of the step relation: where the held half's signal is missing, a wait takes
    a lookup step of its own (SEM-5) that the step relation does not take. The witness is the
    maximal run of the program with every core stopped at the restricted run's position instead:
    landings only add to counts, so it reaches every one of those positions (RUN-3)."""
    holds = dict(enumerate(outcome.state.pcs))
    full = fast_run(program, mode, hold=holds)
    if full.state.pcs != outcome.state.pcs or full.state.failure is not None:
        raise ModelBug("the eager run without held halves does not reach the restricted run's positions")
    return full


def _earliest(
    program: Program, mode: DmaMode, pairs: list[tuple[AccessEvent, AccessEvent]], runs: _Runs,
    a: AccessEvent, b: AccessEvent, outcome: Outcome,
) -> tuple[AccessEvent, AccessEvent, Outcome]:
    """The first access of the core that races the same DMA half, by binary search over the core's
    exact candidates (DR-3); it makes the clearest witness."""
    h, k = (a, b) if a.is_dma else (b, a)
    cands = sorted(
        {(y.pc, y): (x, y) for x, y in ((p if p[0].is_dma else (p[1], p[0])) for p in pairs)
         if x == h and y.core == k.core and y.pc <= k.pc and x.region.exact and y.region.exact}.values(),
        key=lambda p: p[1].pc,
    )
    best = (h, k, outcome)
    lo, hi = 0, len(cands) - 1
    while lo <= hi:
        mid = (lo + hi) // 2
        x, y = cands[mid]
        r = _restriction(x, y, mode)
        out = runs(*r) if r is not None else None
        if out is not None and not _halted(out) and _both_pending(out.state.pcs, x, y):
            best, hi = (x, y, out), mid - 1
        else:
            lo = mid + 1
    return best


def _ordered(
    program: Program, mode: DmaMode, pairs: list[tuple[AccessEvent, AccessEvent]], runs: _Runs
) -> Iterator[tuple[AccessEvent, AccessEvent]]:
    """The pairs worth a run, cheapest first: per DMA half and core, only the last access within
    the core's reach with the half suppressed (DR-3); exact pairs before widened ones, so an exact
    race is found when there is one.
    """
    groups, rest = _kernel_against_dma_groups(pairs)

    def reach(h: AccessEvent) -> Outcome:
        """Where every core gets with `h` suppressed."""
        return runs(None, (_half(h),))

    for (half, core), members in groups.items():
        h = members[0][0]
        reach_h = reach(h)
        if _halted(reach_h):
            yield members[0]
            continue
        limit = reach_h.state.pcs[core]
        for exact in (True, False):
            within = [(x, k) for x, k in members if k.pc <= limit and (x.region.exact and k.region.exact) == exact]
            if within:
                yield max(within, key=lambda p: p[1].pc)
    for a, b in rest:
        if a.is_dma and b.is_dma:
            # DR-3 for two halves: each issuer's progress to its start cannot need its own half, so
            # the pair races iff each issuer gets past its start with the other's half suppressed:
            # two runs shared by every pair
            ra, rb = reach(a), reach(b)
            if not (_halted(ra) or _halted(rb)):
                if not (_pending_dma(rb.state.pcs, a) and _pending_dma(ra.state.pcs, b)):
                    continue
        yield a, b
