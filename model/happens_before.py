"""Happens-before over every schedule, from one run (spec DR-6, DR-7).

One greedy run (RUN-3) with an observer computes vector clocks: a core's
clock counts, per core, the operations known to have happened before its
current position. Program order, a DMA's start before its halves, a read
half before its write half and a barrier's participants before its pass are
orderings every schedule has. A wait is ordered after a signal it *must*
consume: one without which the signals that could have arrived cannot make up
the count (DR-6 says why this is sound, and which check of the run's arrival
order makes it so: `certified`). The relation may miss orderings; it never
invents one.

Accesses are checked as the run reaches them (a kernel access when its core
runs it, a DMA half at its start): accesses of one buffer with one region in a
chain, each against the last write and the reads since (the order being
transitive, a race in the chain shows as one of these pairs), and accesses
with different overlapping regions pair by pair. A conflicting pair the
relation does not order is a *candidate*, which the restricted runs of DR-2
then decide; when there is none the program is race-free without a single
restricted run.

A program that repeats under a rotation of its devices is run on one class of them (DR-8's fold, or
DR-41's run of one period), each class member's events read through the rotation.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import defaultdict
from collections.abc import Callable, Iterable

from semcheck.model.access import AccessEvent
from semcheck.model.fast import fast_run
from semcheck.model.access_index import AccessIndex
from semcheck.model.hb_observers import Arrival, Observer, Pair, SymmetricObserver
from semcheck.model.ops import DmaMode, Program
from semcheck.model.quotient import Quotient


@dataclasses.dataclass(frozen=True)
class Ordering:
    """What the happens-before pass found (DR-6)."""

    certified: bool  # the relation is sound: every pair it orders is ordered in every schedule
    why: str  # when not certified: what broke the certificate
    candidates: tuple[Pair, ...]  # conflicting pairs the relation does not order (earlier access first)


def reading(mode: DmaMode) -> tuple[DmaMode, Arrival]:
    """DR-7: the run and the arrival reading each mode's happens-before pass uses.

    `hardware`: its own run; a half arrives when it completes. `eager`: its
    own run; a half arrives at the copy's start, as the interpreter signals
    there. `on_wait`: every on_wait run is a run of the interpreter's naming
    with each half an actor of its own, so it is decided on `eager`'s run with
    halves arriving when they complete.
    """
    if mode == "hardware":
        return "hardware", "completion"
    if mode == "eager":
        return "eager", "start"
    return "eager", "completion"


def order(program: Program, mode: DmaMode, events: Iterable[AccessEvent]) -> Ordering:
    """DR-6: the conflicting pairs of `events` the happens-before relation under `mode` leaves unordered.

    The relation is certified only when the run meets no failure, no id is in
    both tables (so every lookup names one semaphore in every schedule), and
    every arrival on a counter follows the wait that came before it in the run.
    """
    return order_modes(program, {mode: events})[mode]


def order_modes(
    program: Program, events: dict[DmaMode, Iterable[AccessEvent]], fold: Quotient | None = None, *,
    proof_only: bool = False, otherwise: Quotient | None = None, runs: Callable[[DmaMode], Traced] | None = None,
) -> dict[DmaMode, Ordering]:
    """`order` for several modes, one run per run mode (DR-7: `eager` and `on_wait` share `eager`'s run).

    With `fold` (a fold of the whole program, accesses included: `find_fold(shifted=True)`, or the run
    of one class, `quotient.class_quotient`), the run is the fold's and the events must lie on its representatives'
    buffers (DR-8, DR-41). With `proof_only`, a mode the fold's run does not prove race-free is
    ordered again on the run of `otherwise` (DR-8's fold), or without one on the program's own run when
    that is at most `WHOLE_RUN_OPS` operations (DR-41). `runs(run_mode)`: the program's own traced run in that
    run mode (`traced_run`) when the caller keeps it (DR-46); read only where the program's own run is the one
    ordered (no fold).
    """
    lists: dict[int, list[AccessEvent]] = {}  # one list per list given: the modes of one share its index
    events = {m: evs if isinstance(evs, list) else lists.setdefault(id(evs), list(evs)) for m, evs in events.items()}
    out: dict[DmaMode, Ordering] = {}
    by_run: dict[DmaMode, dict[DmaMode, Observer]] = defaultdict(dict)
    # DR-42: the modes' observers of one list of accesses share its index (chains, partners)
    # (conflicts are the mode's, ACC-2 and ERR-27: the hardware's index is its own)
    indexes: dict[tuple[int, bool], AccessIndex] = {}
    for m, evs in events.items():
        if (id(evs), m == "hardware") not in indexes:
            indexes[(id(evs), m == "hardware")] = AccessIndex(evs, m)

    targets: dict[DmaMode, dict[int, int]] = defaultdict(dict)  # the observers of one run share its targets

    def observer(mode: DmaMode, evs: list[AccessEvent]) -> Observer:
        run_mode, arrival = reading(mode)
        index = indexes[(id(evs), mode == "hardware")]
        if fold is None:
            return Observer(program, index, arrival)
        return SymmetricObserver(program, fold, index, arrival, run_mode, targets=targets[run_mode])

    for mode, evs in events.items():
        by_run[reading(mode)[0]][mode] = observer(mode, evs)
    ran, given = (fold.program if fold is not None else program), runs
    for run_mode, observers in by_run.items():
        # one run per run mode, its events told to each observer of each pass (DR-37: a fast run does
        # not depend on what observes it, so every pass of the old scheme saw these same calls)
        if fold is None and given is not None:  # DR-46: the run the caller made already, with its calls
            state, trace = given(run_mode)
        else:
            trace = _Trace()
            state = fast_run(ran, run_mode, record=False, observer=trace).state
        # each mode keeps its own pessimistic counters: one mode's failed certificate must not
        # cost another mode precision (DR-6)
        totals: dict[DmaMode, dict[tuple, int]] = {mode: {} for mode in observers}
        # DR-38: no later pass differs from the first before `split`, so each resumes from there
        split = trace.first_late_wait()
        resume: dict[DmaMode, Observer] = {}
        pending = dict(observers)
        for attempt in range(MAX_PASSES):
            redo: dict[DmaMode, Observer] = {}
            for mode, o in pending.items():
                if attempt or split is None:
                    trace.tell(o, 0 if split is None else split)
                else:
                    trace.tell(o, 0, split)
                    resume[mode] = o.resumed({})
                    trace.tell(o, split)
                if o.broken_counters and not state.failures and attempt + 1 < MAX_PASSES:
                    # DR-6: decide the counters whose certificate failed against all they ever receive
                    totals[mode].update({c: o.counters[c].arrived for c in o.broken_counters if c in o.counters})
                    redo[mode] = resume[mode].resumed(dict(totals[mode]))
                else:
                    out[mode] = _verdict(o, state)
            if not redo:
                break
            pending = redo
    if fold is not None and proof_only:
        # DR-41: the class's run is kept where it proves (certified, nothing unordered); elsewhere DR-8's
        # fold or the whole program's run decides, as it would have without the class (a failure or an
        # id in both tables is the program's as much as the class's: RUN-7's lifting)
        again = {m: events[m] for m, o in out.items()
                 if o.candidates or (not o.certified and o.why not in (_FAILS, _BOTH_TABLES))}
        if again and (otherwise is not None or program.num_ops <= WHOLE_RUN_OPS):
            out.update(order_modes(program, again, otherwise, runs=runs if otherwise is None else None))
    return out


WHOLE_RUN_OPS = 20_000_000
"""The largest program whose own run is tried when the run of one class or fold leaves a mode
uncertified (DR-41): a run of that size takes seconds, not minutes."""


def _verdict(o: Observer, state) -> Ordering:
    why = o.broken
    if state.failures:
        why = why or _FAILS
    elif state.tables.internal & state.tables.fixed:
        why = why or _BOTH_TABLES
    return Ordering(not why, why, tuple(o.candidates))


_FAILS = "the run fails"
_BOTH_TABLES = "an id is in both tables, so a lookup may name different semaphores in different schedules"

MAX_PASSES = 3
"""Runs of the happens-before pass per run mode: the first reads every counter in the run's order, the
next ones read the counters whose certificate failed against everything they receive (DR-6)."""


Traced = tuple  # (the run's final State, its _Trace): what `traced_run` gives the pass


def traced_run(program: Program, mode: DmaMode, *, record: bool = True) -> tuple:
    """DR-46: the program's fast run (RUN-3) in `mode`, with its observer calls (DR-37); `record`: its schedule too.

    Returns (the run's outcome, the run's `_Trace`); `order_modes(runs=...)` takes (its state, its trace)."""
    trace = _Trace()
    return fast_run(program, mode, record=record, observer=trace), trace


class _Trace:
    """The observer calls of one fast run, kept to be told to each observer afterwards (DR-37).

    One tuple per call, its first item naming the method; `tell` replays them in the run's order."""

    __slots__ = ("calls",)

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def signal(self, counter: tuple, inc: int, source: tuple) -> None:
        self.calls.append((0, counter, inc, source))

    def wait(self, core: int, pc: int, counter: tuple, value: int) -> None:
        self.calls.append((1, core, pc, counter, value))

    def start(self, core: int, pc: int, ident: int) -> None:
        self.calls.append((2, core, pc, ident))

    def arrive(self, core: int, pc: int, name: str, k: int) -> None:
        self.calls.append((3, core, pc, name, k))

    def barrier(self, core: int, pc: int, name: str, k: int, participants: tuple[int, ...]) -> None:
        self.calls.append((4, core, pc, name, k, participants))

    def access(self, core: int, pc: int) -> None:
        self.calls.append((5, core, pc))

    def first_late_wait(self) -> int | None:
        """The index of the first call that is a counter's first wait, of the counters some arrival
        reaches after their first wait (DR-38); None when no counter has such an arrival."""
        first: dict[tuple, int] = {}
        split = None
        for i, c in enumerate(self.calls):
            k = c[0]
            if k == 1:
                first.setdefault(c[3], i)
            elif k == 0:
                w = first.get(c[1])
                if w is not None and (split is None or w < split):
                    split = w
        return split

    def tell(self, o: Observer, begin: int = 0, end: int | None = None) -> None:
        """Replay the run's calls `begin` .. `end` (to the last), in order, to `o`."""
        signal, wait, start, arrive, barrier, access = o.signal, o.wait, o.start, o.arrive, o.barrier, o.access
        for c in itertools.islice(self.calls, begin, end):
            k = c[0]
            if k == 0:
                signal(c[1], c[2], c[3])
            elif k == 1:
                wait(c[1], c[2], c[3], c[4])
            elif k == 2:
                start(c[1], c[2], c[3])
            elif k == 5:
                access(c[1], c[2])
            elif k == 3:
                arrive(c[1], c[2], c[3], c[4])
            else:
                barrier(c[1], c[2], c[3], c[4], c[5])
