"""`race-free` (PROP-7): the semaphores order every conflicting pair of accesses.

The decision is the model's (`semcheck.model.race`, rules DR-1 .. DR-4); this
module turns its findings into a verdict a kernel author can act on: the two
accesses with their lines and regions, the semaphore the copy signals, the
waits the accessing core does before its access, and the usual fix.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from semcheck.checker.properties.analysis import ModeAnalysis, analysis_of
from semcheck.checker.frontend.call_boundary import BoundaryLoc
from semcheck.checker.frontend.grid_copies import split_dependent
from semcheck.checker.properties.timeline import timeline
from semcheck.checker.properties.sites import site, sites
from semcheck.checker.properties.verdict import Verdict, Witness, vacuous
from semcheck.checker.static.least_stuck import failure_reached
from semcheck.model.access import AccessEvent, Unrecorded, accesses
from semcheck.model.local_cores import schedule_free
from semcheck.model.ops import DmaMode, DmaStart, Loc, Op, Program, Wait
from semcheck.model.partial_arrivals import Split
from semcheck.model.race import Ordered, Race, find_races
from semcheck.model.run import REPLAY_LIMIT, run

PROP = "race-free"
ALTERNATIVES = 16  # races besides the witness's kept for ERR-24 (each costs one guided run when used)


def race_free(program: Program, mode: DmaMode, *, timeout_ms: int = 30_000,
              facts: ModeAnalysis | None = None) -> Verdict:
    """PROP-7: proved, violated with a replayable witness, or unknown with the reason and the line.

    Under `hardware` the pass runs on the program whose copies may land in parts (DR-9); a race that
    needs a copy to have landed in part has no schedule of the whole-copy model, and its witness says so.
    `facts`: the program's analysis under `mode` (one is made when it is missing)."""
    facts = analysis_of(program, mode, facts)
    if mode != "hardware":
        return _race_free(facts, timeout_ms=timeout_ms)
    parts, split_facts = facts.whole.partial_arrivals
    if parts.mixed:
        whole = _race_free(facts, timeout_ms=timeout_ms)
        if whole.verdict == "violated":
            return whole  # a race with whole copies is one with copies in parts
        op = parts.mixed[0]
        return Verdict(PROP, "unknown", reason=f"the copy at {op.loc} signals a DMA semaphore on one side and a "
                       "REGULAR one on the other: on a TPU it may land in parts, which one side counts and the other "
                       "does not, and semcheck does not model that (DR-9)")
    if parts.program is program:
        return _race_free(facts, timeout_ms=timeout_ms)
    v = _race_free(split_facts.mode(mode), timeout_ms=timeout_ms)
    if v.verdict != "violated":
        return v
    whole = _race_free(facts, timeout_ms=timeout_ms)
    return whole if whole.verdict == "violated" else _in_parts(program, parts, mode, v)


def _in_parts(program: Program, parts: Split, mode: DmaMode, v: Verdict) -> Verdict:
    """DR-9: a race of the split program only, told on the program: the copy may have landed in part. Its
    schedule replays on the split program (checked here), not on the whole-copy model, so it is not kept."""
    w = v.witness
    assert w is not None
    blocked = tuple((c, parts.origin(c, pc), what) for c, pc, what in w.blocked)
    if len(w.schedule) <= REPLAY_LIMIT:
        pcs = [parts.origin(c, pc) for c, pc in enumerate(run(parts.program, mode, w.schedule, finish=False).pcs)]
    else:
        pcs = [len(ops) for ops in program.cores]
        for c, pc, _ in blocked:
            pcs[c] = pc
    copy = next(program.cores[c][pc] for c, pc, _ in blocked if type(program.cores[c][pc]) is DmaStart)
    devices = sorted({program.topology.device_of(c) for c, _, _ in blocked}) or None
    msg = (f"{w.message}; on a TPU a copy lands in parts and its semaphore counts the bytes as they land, so "
           f"the waits before the access can pass before all {copy.nbytes} bytes of the copy at {copy.loc} have "
           "landed (they take fewer, or take another copy's bytes on the same semaphore: DR-9)")
    hint = (f"wait for all {copy.nbytes} bytes of the copy started at {copy.loc} (its own descriptor's .wait(), "
            "wait_recv or wait_send) before the access, with no other copy on that semaphore in flight meanwhile")
    details = {**w.details, "timeline": timeline(program, pcs, devices), "rule": "DR-9"}
    return dataclasses.replace(v, witness=dataclasses.replace(w, message=msg, schedule=(), blocked=blocked,
                                                              details=details, hint=hint))


# Why a pair that replayed is still not believed (`Race.doubt`), after "... can be pending together"
_DOUBTS = {
    "ERR-27": ", but one touches no element and the other names its buffer with no index: jax's race detector "
              "reads that window as whole, which no window of no element meets, so it does not report them, and "
              "they share no element (ERR-27); semcheck does not decide such a pair",
    "ERR-34": " (on_wait), but one touches no element, and no run semcheck tried performs both: jax's race "
              "detector sees an access only once it is performed, and a copy whose wait for 0 passed without "
              "running it stays queued, so the detector reports these windows only if a later wait runs that copy "
              "(ERR-34)",
}


def _race_free(facts: ModeAnalysis, *, timeout_ms: int) -> Verdict:
    program, mode = facts.program, facts.mode
    t0 = time.perf_counter()
    stats: dict = {}
    pre = facts.race_order
    if not pre.ordering.certified:
        # a certified pass met no failure and no id in both tables, so no schedule fails (DR-6)
        low = facts.lowering
        if not low.ok:
            return Verdict(PROP, "unknown", reason="the program is outside the encoding: " + "; ".join(low.unsupported[:3]))
        clocked = facts.clock_failure and facts.maximal_run().failure
        if clocked:  # RACE-1: the static system follows no clocks, so S' is not this run's (ACC-76's waits too)
            return Verdict(PROP, "unknown", reason=f"the program can fail ({clocked.violation.message} at "
                           f"{clocked.loc}, RACE-1); with failures, which accesses can meet depends on the schedule")
        fails = failure_reached(low, facts.s_prime_run.state.pcs)
        if fails:
            c, pos, v = fails[0]
            loc = program.cores[c][pos].loc
            if mode != "hardware":  # PRG-155: every run is the prefix before the barrier fetch
                from semcheck.checker.programs.interpreter import stopped_at_barrier_fetch

                stopped = stopped_at_barrier_fetch(program)
                if stopped is not None:
                    inner = _race_free(analysis_of(stopped, mode, None), timeout_ms=timeout_ms)
                    if inner.holds:
                        return dataclasses.replace(inner, reason=(
                            f"every run fails where each device reaches its get_barrier_semaphore ({v.message} at "
                            f"{loc}, PRG-155); before that: {inner.reason}"))
                    if inner.verdict == "violated":
                        return inner
            return Verdict(PROP, "unknown", reason=f"the program can fail ({v.message} at {loc}); with failures, "
                           "which accesses can meet depends on the schedule")
    report = find_races(program, mode, deadline=time.perf_counter() + timeout_ms / 1000, pre=pre)
    stats.update(pairs=report.pairs, runs=report.runs, accesses=report.accesses,
                 solve_s=round(time.perf_counter() - t0, 4))
    real = [r for r in report.races if r.exact and r.confirmed]
    if mode == "hardware" and real:  # GRID-4: a race may rest on the interpreter's split of parallel steps
        split = [split_dependent(program, r.first, r.second) for r in real]
        kept = [r for r, why in zip(real, split) if why is None]
        if not kept:
            return Verdict(PROP, "unknown", reason=f"{split[0]} (specs/semantics/accesses.md GRID-4)", stats=stats)
        real = kept
    if real:
        w = _witness(program, mode, real[0])
        # ERR-24: other races, for a program whose runs may fail before the first one's events (a few, cheaply told)
        w.details["alternatives"] = [_alternative(program, mode, r) for r in real[1:ALTERNATIVES + 1]]
        return Verdict(PROP, "violated", witness=w, stats=stats)
    if report.over_budget:
        n = program.topology.num_devices
        if report.runs == 0:
            return Verdict(PROP, "unknown", reason=f"at {n} devices the happens-before pass cannot decide alone "
                           f"({report.uncertified}), and restricted runs for every pair would execute about "
                           f"{report.estimate:,} operations (two runs over the whole program per copy), more than "
                           "semcheck spends; check race-free at fewer devices (it is decided exactly there)",
                           stats=stats)
        return Verdict(PROP, "unknown", reason=f"the happens-before pass left {report.pairs} pairs of accesses "
                       f"unordered; deciding them took {report.runs} restricted runs over the whole program "
                       f"at {n} devices before semcheck's budget ran out", stats=stats)
    if not report.complete:
        return Verdict(PROP, "unknown", reason=f"timed out after {report.runs} restricted runs "
                       f"({report.pairs} conflicting pairs)", stats=stats)
    if report.races:
        r = report.races[0]
        if not r.exact:
            why = "; ".join(e.region.why for e in (r.first, r.second) if not e.region.exact) or "a widened region"
            return Verdict(PROP, "unknown", reason=f"{_say(program, r.first)} and {_say(program, r.second)} may "
                           f"overlap: {why}; semcheck cannot tell whether they touch the same elements", stats=stats)
        if len(r.outcome.schedule) > REPLAY_LIMIT:
            return Verdict(PROP, "unknown", reason=f"{_say(program, r.first)} and {_say(program, r.second)}: under "
                           f"on_wait a race is believed only once its run replays on the model, and this one has "
                           f"{len(r.outcome.schedule):,} steps, more than semcheck replays ({REPLAY_LIMIT:,}); "
                           "check race-free at fewer devices", stats=stats)
        if r.doubt:
            return Verdict(PROP, "unknown", reason=f"{_say(program, r.first)} and {_say(program, r.second)} can be "
                           f"pending together{_DOUBTS[r.doubt]}", stats={**stats, "rule": r.doubt})
        why = schedule_free(program) or "its one run fails or is longer than semcheck replays"
        return Verdict(PROP, "unknown", reason=f"{_say(program, r.first)} and {_say(program, r.second)}: under "
                       "on_wait, whether the copy runs first depends on the order of its semaphore's task queue; "
                       "the restricted run that separates them does not replay, and the program's own run does not "
                       f"decide the pair (ACC-49: {why})", stats=stats)
    if report.unrecorded:
        u = report.unrecorded[0]
        return Verdict(PROP, "unknown", reason=f"the copy at {u.loc}: semcheck could not tell which regions it reads "
                       f"and writes ({len(report.unrecorded)} such copies)", stats=stats)
    overlap = facts.whole.grid_overlap if mode == "hardware" else None
    if overlap is not None:  # GRID-4: the pipeline's asynchronous copies may order it otherwise on a TPU
        return Verdict(PROP, "unknown", reason=f"ordered as jax's interpreter copies the grid's blocks (between the "
                       f"steps), but on a TPU {overlap}; semcheck does not model the pipeline's overlap of a step's "
                       "copies with the neighbouring steps (specs/semantics/accesses.md GRID-4)", stats=stats)
    if report.accesses and not report.pairs:
        return Verdict(PROP, "proved", reason=f"each of {report.accesses} accesses is ordered after every "
                       "conflicting access before it, in every schedule (happens-before over one run, DR-6)",
                       stats=stats)
    if not report.pairs and _no_access(program, mode, pre):  # REP-20: nothing to order is not a proof of order
        return vacuous(PROP, "no run makes an access or a copy, so there is no pair for the semaphores to order",
                       stats=stats)
    return Verdict(PROP, "proved", reason=f"{report.pairs} conflicting pairs, each ordered by the semaphores",
                   stats=stats)


def _alternative(program: Program, mode: DmaMode, r: Race) -> dict:
    """A race told for ERR-24's tries: its two events, its message and its lines."""
    return {"halves": [(e.core, e.pc, e.half) for e in (r.first, r.second)],
            "message": f"{_say(program, r.first)} and {_say(program, r.second)} can happen in either order ({mode})",
            "locs": [program.cores[e.core][e.pc].loc for e in (r.first, r.second)]}


def more_races(program: Program, mode: DmaMode, *, timeout_ms: int, keep=None) -> list[dict]:
    """ERR-29: up to 1 + ALTERNATIVES exact, confirmed races of `program` (the witness's first), told as ERR-24's
    alternatives; the race pass is asked for them only when the first race's events cannot both run before a
    failure (a second pass: the first stops at one race). `keep`: ERR-31's events (`find_races`)."""
    report = find_races(program, mode, first=1 + ALTERNATIVES, deadline=time.perf_counter() + timeout_ms / 1000,
                        keep=keep)
    # each told in full (its message names ERR-27's windows, say): one of them may become the witness
    told = [(r, _witness(program, mode, r)) for r in report.races if r.exact and r.confirmed]
    return [{**_alternative(program, mode, r), "message": w.message, "hint": w.hint} for r, w in told]


def _no_access(program: Program, mode: DmaMode, pre: Ordered) -> bool:
    """REP-20: whether no run makes any access (a load, a store, a copy's read or write): the happens-before
    pass's events when it is certified, else the accesses listed afresh (asked only when no pair conflicts)."""
    if pre.ordering.certified:
        return not pre.events and not pre.unrecorded
    events, unrecorded = accesses(program, mode)
    return not events and not unrecorded


def _who(program: Program, core: int) -> str:
    topo = program.topology
    d = f"device {topo.device_of(core)}"
    return d if topo.cores_per_device == 1 else f"{d} core {topo.local_core_of(core)}"


def _say(program: Program, e: AccessEvent) -> str:
    op = program.cores[e.core][e.pc]
    if e.is_dma:
        assert isinstance(op, DmaStart)
        to = "" if e.where == e.core else f" to {_who(program, e.where)}"
        return f"{e.describe()} (copy started by {_who(program, e.core)}{to} at {op.loc})"
    what = getattr(e.loc, "what", "")  # a grid copy (GRID-2) names its BlockSpec and grid step
    return f"{e.describe()} by {_who(program, e.core)}{f' ({what})' if what else ''} at {e.loc}"


def _waits_before(program: Program, core: int, start: int, end: int) -> list[tuple[int, Wait]]:
    ops = program.cores[core]
    return [(i, op) for i, op in enumerate(ops[start:end], start) if type(op) is Wait]


def _explain(program: Program, race: Race) -> tuple[str, str, list[Loc], list[dict]]:
    """What orders nothing here, the usual fix (DR-4), and the lines involved with their roles (REP-10)."""
    a, b = race.first, race.second
    dma, other = (a, b) if a.is_dma else (b, a)
    where = lambda e: program.cores[e.core][e.pc].loc  # noqa: E731 - a copy's start, or the access itself
    if not dma.is_dma:
        found = sites(site("wait-here", where(b), f"{b.describe()} by {_who(program, b.core)}: nothing orders it after "
                                                  f"{a.describe()} by {_who(program, a.core)} (line {where(a).line}); "
                                                  "a wait belongs before it"),
                      site("access", where(a), f"{a.describe()} by {_who(program, a.core)}, unordered with "
                                               f"{b.describe()} (line {where(b).line})"))
        if getattr(a.loc, "what", "") and getattr(b.loc, "what", ""):  # two grid copies (GRID-2)
            fix = ("give each grid step its own output block (the BlockSpec's index map), or mark the grid "
                   "dimension that shares it 'arbitrary' so that one core runs those steps")
        else:
            fix = ("order the two cores' accesses with a semaphore (signal after the first, wait before the "
                   "second) or give each core its own region")
        return (
            f"{_who(program, a.core)} and {_who(program, b.core)} both reach their accesses with nothing between them",
            fix,
            [],
            found,
        )
    op = program.cores[dma.core][dma.pc]
    assert isinstance(op, DmaStart)
    sem = op.dst_sem if dma.half == "write" else (op.src_sem or op.dst_sem)
    signals = f"the copy signals {sem} on {_who(program, dma.where if dma.half == 'write' else dma.core)} when its " \
              f"{'data has landed' if dma.half == 'write' else 'source has been read'}"
    copy = site("copy", op.loc, f"{dma.describe()} (started by {_who(program, dma.core)}); it signals {sem} when its "
                                f"{'data has landed' if dma.half == 'write' else 'source has been read'}")
    if other.is_dma:
        if other.core == dma.core:  # one core starts both: it can wait for the first itself
            other_op = program.cores[other.core][other.pc]
            return (
                f"{signals}; {_who(program, dma.core)} starts the other copy without waiting for it",
                f"wait for the first copy ({'.wait() / wait_recv' if dma.half == 'write' else 'wait_send'}, "
                f"on {sem}) before starting the copy at {other_op.loc}",
                [],
                _later_copy(program, dma, other, sem),
            )
        return (
            f"{signals}; nothing makes the second copy wait for that",
            "add a handshake: the receiver signals the sender when the slot is free, and the sender waits for it "
            "before starting the next copy into it",
            [],
            _consumer_copy(program, dma, other),
        )
    lo = dma.pc + 1 if other.core == dma.core else 0
    waits = _waits_before(program, other.core, lo, other.pc)
    locs = [w.loc for _, w in waits[-2:]]
    on_sem = [w for _, w in waits if w.sem == sem]
    same_alloc = [w for _, w in waits if w.sem.label == sem.label and w.sem != sem]
    verb = "load" if not other.write else "store"
    landed = "has landed" if dma.half == "write" else "has read its source"
    if on_sem:
        found = sites(site("late-wait", on_sem[-1].loc, f"waits on {sem}, but can return before the copy started at "
                                                        f"line {op.loc.line} {landed}, so it does not order the "
                                                        f"{verb} at line {other.loc.line}"),
                      copy, site("access", other.loc, f"{other.describe()} by {_who(program, other.core)}"))
    elif same_alloc:
        found = sites(site("wrong-wait", same_alloc[-1].loc, f"waits on {same_alloc[-1].sem}, not on {sem}, the "
                                                             f"semaphore of the copy started at line {op.loc.line}: "
                                                             f"wait on {sem} here"),
                      copy, site("access", other.loc, f"{other.describe()} by {_who(program, other.core)}"))
    elif isinstance(other.loc, BoundaryLoc):  # read after the call: no kernel line to wait before, the copy is the place
        found = sites(copy, site("access", other.loc, f"{other.describe()}: nothing waits for the copy started at "
                                                      f"line {op.loc.line} before the kernel returns"))
    else:
        found = sites(site("wait-here", other.loc, f"{other.describe()} by {_who(program, other.core)}: nothing waits "
                                                   f"on {sem} for the copy started at line {op.loc.line} before it; "
                                                   "the wait belongs just before this line"),
                      copy)
    if not waits:
        said = f"{_who(program, other.core)} does not wait on anything between the copy's start and its {verb}"
    else:
        last = waits[-1][1]
        said = f"before its {verb}, {_who(program, other.core)} waits on {last.sem} at {last.loc}"
        if same_alloc and not on_sem:
            said += f", not on {sem}: another copy signalling {same_alloc[-1].sem} can satisfy that wait"
    grid = getattr(other.loc, "what", "")  # the grid's own copy between steps (GRID-2)
    if isinstance(other.loc, BoundaryLoc):  # a use of a result after its call (PRG-120, PRG-121)
        fix = (f"wait for this copy ({'.wait() / wait_recv' if dma.half == 'write' else 'wait_send / .wait()'}, on "
               f"{sem}) before the kernel returns, or in a later call before {grid}")
    elif grid:
        fix = (f"wait for this copy ({'.wait() / wait_recv' if dma.half == 'write' else 'wait_send / .wait()'}, "
               f"on {sem}) inside the grid step, before {grid}, or copy a block the grid does not touch then")
    elif dma.half == "write":
        fix = f"wait for this copy (its descriptor's .wait() / wait_recv, on {sem}) before the {verb} at {other.loc}"
    else:
        fix = f"wait for this copy's send side (wait_send / .wait(), on {sem}) before overwriting its source at {other.loc}"
    return f"{signals}; {said}", fix, locs, found


def _later_copy(program: Program, a: AccessEvent, b: AccessEvent, sem) -> list[dict]:
    """REP-10, two copies of one core: the wait belongs before the one started later."""
    first, then = (a, b) if a.pc <= b.pc else (b, a)
    at = program.cores[first.core][first.pc].loc
    return sites(site("wait-here", program.cores[then.core][then.pc].loc,
                      f"starts {then.describe()} while the copy started at line {at.line} may still be in flight: "
                      f"wait for that copy before this start"),
                 site("copy", at, f"{first.describe()} (started by {_who(program, first.core)})"))


def _consumer_copy(program: Program, a: AccessEvent, b: AccessEvent) -> list[dict]:
    """REP-10, two copies of two cores: the handshake's wait belongs before the copy that reads what the other
    writes (data made, then used); when both write, before the second."""
    reader, writer = (a, b) if a.half == "read" and b.half != "read" else (b, a)
    at = program.cores[writer.core][writer.pc].loc
    return sites(site("wait-here", program.cores[reader.core][reader.pc].loc,
                      f"{_who(program, reader.core)} starts {reader.describe()} with nothing making it wait for "
                      f"{writer.describe()} (line {at.line}, {_who(program, writer.core)}): a handshake's wait "
                      "belongs before it"),
                 site("copy", at, f"{writer.describe()} (started by {_who(program, writer.core)})"))


def _window_text(program: Program, e: AccessEvent) -> str:
    """ERR-28: an access's elements, and its window where the detector reads one, with its line."""
    line = program.cores[e.core][e.pc].loc.line
    if e.elements is None:
        return f"{e.buffer[2]}{e.region} at line {line}"
    return f"the masked store's elements {e.buffer[2]}{e.elements} (window {e.region}) at line {line}"


def _witness(program: Program, mode: DmaMode, race: Race) -> Witness:
    a, b = race.first, race.second
    why, fix, extra, found = _explain(program, race)
    msg = f"{_say(program, a)} and {_say(program, b)} can happen in either order ({mode}): {why}"
    if mode == "on_wait" and any(e.is_dma for e in (a, b)) and any(isinstance(e.loc, BoundaryLoc) for e in (a, b)):
        # jax's own run shows no race here (D29); say what it does show, so the two reports don't look contradictory
        msg += ("; jax's interpreter runs an on_wait copy only inside a wait on its semaphore and drops one left "
                "in flight at the end of the call (D29), so there the read sees the copy's data or the result's "
                "old value, and its race detector, which records no access after the call, reports nothing for this pair")
    details: dict = {}
    if mode != "hardware" and (a.elements or b.elements) and not (a.elements or a.region).overlaps(b.elements or b.region):
        # DR-48: a race of a masked store's window (ERR-28), not of elements
        msg += (f"; jax's race detector takes a masked store to write its whole indexed window (ERR-28): "
                f"{_window_text(program, a)} and {_window_text(program, b)} share no element; on a TPU no data is shared")
        details["rule"] = "ERR-28"
    elif mode != "hardware" and not a.region.overlaps(b.region):  # DR-48: a race of windows (ERR-27), not of elements
        msg += (f"; jax's race detector reports these windows as meeting though they share no element (ERR-27): "
                f"{a.buffer[2]}{a.region} at line {program.cores[a.core][a.pc].loc.line} and {b.buffer[2]}{b.region} "
                f"at line {program.cores[b.core][b.pc].loc.line}; on a TPU no data is shared")
        details["rule"] = "ERR-27"
    blocked = tuple(
        (e.core, e.pc, f"{_who(program, e.core)}: {e.describe()} still in flight (the copy started at "
                       f"{program.cores[e.core][e.pc].loc})"
         if e.is_dma else f"{_who(program, e.core)}: next, {e.describe()} at {e.loc}")
        for e in (a, b)
    )
    return Witness(
        message=msg,
        schedule=race.outcome.schedule,
        blocked=blocked,
        locs=(program.cores[a.core][a.pc].loc, program.cores[b.core][b.pc].loc, *extra),
        details={
            "accesses": [
                {"what": e.describe(), "device": program.topology.device_of(e.core), "by": _who(program, e.core),
                 "line": str(program.cores[e.core][e.pc].loc),
                 "buffer": e.buffer[2], "region": [list(d) for d in e.region.box], "write": e.write}
                for e in (a, b)
            ],
            "sites": found,
            "halves": [(e.core, e.pc, e.half) for e in (a, b)],  # the two events, for a replay on another program
            **details,
        },
        hint=fix,
    )
