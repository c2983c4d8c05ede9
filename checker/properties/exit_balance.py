"""`exit-balance` (PROP-5; the spec argues each answer).

For every counter (semaphore, core): T = everything the program contributes to it (signals, and
both halves of every DMA) and W = everything the core waits for on it.

* T == W for every counter -> **proved**; some T > W -> **violated**, with the model's fast run as
  witness (replayed up to `REPLAY_LIMIT` steps): its final counts, pending DMAs and warnings.
* the program hangs (S' ends in a deadlock, PROP-4): the same, on the counters of the devices past
  their exit check at the least stuck vector (RUN-3); no exiting device -> **proved**.
* the program can fail -> **unknown** (or RUN-11's decision, `failing_runs.py`).

The witness details also give, per device, the interpreter's expected warning at kernel exit
(EXIT-1): "never", "may" or "must" (or "unknown"); with "may", `not_must` says whether a run
without the warning is proved to exist. "may" is witnessed by the run that holds the checking
cores just before their checks; "never" and "must" compare that run's positions with
`must_have_passed`; `not_must` by a restricted run (DR-2) or, for small programs, an exhaustive
search over what can be held back past the check.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections import defaultdict
from collections.abc import Callable

from semcheck.checker.properties.analysis import ModeAnalysis, analysis_of
from semcheck.model.run import REPLAY_LIMIT, run
from semcheck.checker.properties.verdict import Verdict, Witness, vacuous
from semcheck.checker.properties.sites import site, sites
from semcheck.checker.static.system import EncodingBug, Lowered
from semcheck.checker.static.least_stuck import failure_reached
from semcheck.checker.static.must_pass import Feeds, must_have_passed
from semcheck.checker.static.symmetry import find_rotation
from semcheck.model.clocks import keeps_clocks
from semcheck.model.fast import fast_run
from semcheck.model.ops import AllocBuffer, Barrier, DmaMode, ExitCheck, Program
from semcheck.model.scope_keys import held_scoped
from semcheck.model.semaphore import nonzero as nonzero_counts
from semcheck.model.state import Outcome, State


WARNING = "Semaphore {} has non-zero count for {} (global core {}) at kernel exit: {}"


def semaphore_words(key, low: Lowered | None = None, core: int | None = None) -> str:
    """A semaphore key in a report's words (REP-24): the kernel's name for it in every mode, `recv_sem[0]`;
    under the interpreter with its id, `recv_sem[0] (id 2001)`, found from the allocation that handed the id
    to `core` in `low` (the interpreter's id alone when there is none); on hardware (HW-1) the allocation
    and index. The barrier semaphore is `the barrier semaphore`, with its id under the interpreter."""
    if key[0] == "internal":
        found = low.sem_allocation(core, key[1]) if low is not None and core is not None else None
        if found is not None:
            ev, index = found
            return f"{ev.op.label}[{index}] (id {key[1]})"
        return f"semaphore {key[1]}"
    if key[0] == "fixed":  # the fixed-id table holds only barrier semaphores, by collective id (SEM-2)
        return f"the barrier semaphore (id {key[1]})"
    if key[0] == "site":
        return f"{key[1]}[{key[2]}]"
    if key[0] == "barrier":
        return "the barrier semaphore"
    return " ".join(str(part) for part in key)



def _precondition(prop: str, facts: ModeAnalysis, stats: dict):
    low = facts.lowering
    if not low.ok:
        return Verdict(prop, "unknown", reason="the program is outside the encoding: " + "; ".join(low.unsupported[:3]),
                       stats=stats), None
    sp = facts.end  # its positions and kind alone: shared by eager and on_wait
    fails = failure_reached(low, sp.pcs)
    if fails and facts.mode != "hardware" and facts.every_run_fails is not None:
        return None, sp  # every run fails (RUN-9, RUN-11): S''s end stands for the stuck positions (ERR-17)
    if fails:
        c, pos, v = fails[0]
        return Verdict(prop, "unknown", reason=f"the program can fail ({v.message} at core {c} op {pos})",
                       stats=stats), None
    if sp.kind not in ("completed", "deadlock"):
        raise EncodingBug(f"S' ends in {sp.kind} although no failure is reached")
    return None, sp


def _hung(program: Program, low: Lowered, pcs: tuple[int, ...]) -> tuple[dict[int, tuple[int, int]], dict]:
    """PROP-5 for a program that hangs: the devices past their exit check at the stuck positions `pcs`
    (those that exit, in every run) and, for their counters, (T, W): what the operations before `pcs`
    contribute and wait for (see the module docstring)."""
    topo = program.topology
    exiting = {d: (c, i) for d, (c, i) in _exit_checks(program).items() if pcs[c] > i}
    cores = {c for d in exiting for c in topo.cores_of_device(d)}
    out: dict = defaultdict(lambda: [0, 0])
    for k, xs in low.by_counter.items():
        if k[1] in cores:
            out[k][0] = sum(x.amount for x in xs if x.pos < pcs[x.owner])
    for k, ws in low.waits_by_counter.items():
        if k[1] in cores:
            if any(w.pos >= pcs[w.core] for w in ws):
                raise EncodingBug(f"a core past its device's exit check has a wait on {k} it never passed")
            out[k][1] = sum(w.value for w in ws)
    return exiting, {k: tuple(v) for k, v in out.items()}


def exit_balance(program: Program, mode: DmaMode, *, timeout_ms: int = 30_000, warnings: bool = True,
                 facts: ModeAnalysis | None = None) -> Verdict:
    """PROP-5 (see the module docstring).

    `warnings=False` skips the per-device warning analysis (a few fast runs, linear in the program).
    `facts`: the program's analysis under `mode` (one is made when it is missing).
    """
    prop = "exit-balance"
    facts = analysis_of(program, mode, facts)
    t0 = time.perf_counter()
    low = facts.lowering
    stats: dict = dict(low.size())
    bad, sp = _precondition(prop, facts, stats)
    if bad is not None:
        return bad
    exiting = None
    failing = bool(low.failing) and bool(failure_reached(low, sp.pcs))  # ERR-17
    if sp.kind == "completed" and not failing:
        tot = facts.totals
    else:
        # RUN-48: a function of the lowering and the stuck positions, which eager and on_wait share (RUN-3)
        family = facts.mode if facts.deferred_views else facts.family
        exiting, tot = facts.whole.shared(("hung", family, tuple(sp.pcs)), lambda: _hung(program, low, sp.pcs))
        if not exiting:
            ends = "fails" if failing else "hangs"
            return vacuous(prop, f"no run reaches a kernel exit: every run {ends} before every device's "
                           "exit check (see deadlock-free), so no count is checked at an exit and the interpreter "
                           "prints no exit warning", stats=stats)
    excess = {k: t - w for k, (t, w) in tot.items() if t != w}
    if any(e < 0 for e in excess.values()):
        raise EncodingBug(f"a {sp.kind} program waits for more than it receives: {excess}")
    stats["counters"] = len(tot)
    stats["solve_s"] = round(time.perf_counter() - t0, 4)
    if not excess:
        if failing:
            return Verdict(prop, "proved", reason=f"every run fails (see deadlock-free; RUN-9): in the runs that "
                           f"get there, {_devices(exiting)} {'passes its' if len(exiting) == 1 else 'pass their'} "
                           f"exit check having received exactly what {'it waits' if len(exiting) == 1 else 'they wait'}"
                           f" for on all {len(tot)} of {'its' if len(exiting) == 1 else 'their'} counters; no other "
                           "device exits (ERR-17)", stats=stats)
        if exiting is not None:
            return Verdict(prop, "proved", reason=f"the program hangs (see deadlock-free); {_devices(exiting)} "
                           f"{'reaches its' if len(exiting) == 1 else 'reach their'} exit check in every run and "
                           f"{'receives' if len(exiting) == 1 else 'receive'} exactly what "
                           f"{'it waits' if len(exiting) == 1 else 'they wait'} for on all {len(tot)} of "
                           f"{'its' if len(exiting) == 1 else 'their'} counters; the other devices never exit",
                           stats=stats)
        return Verdict(prop, "proved", reason=f"all {len(tot)} counters receive exactly what they wait for", stats=stats)

    # a program whose runs fail: the run to S''s end, before the failing step (ERR-17)
    real = facts.s_prime_run if failing else facts.maximal_run()
    replayed_pcs = None
    if len(real.schedule) <= REPLAY_LIMIT:  # every check's one limit on a witness replay (model.run)
        replay = run(program, mode, real.schedule, finish=not failing)
        reached = replay if failing else replay.state
        if reached.pcs != real.state.pcs or reached.counts != real.state.counts:
            raise EncodingBug("the exit-balance witness does not replay")
        stats["replayed"] = True  # RUN-41: the report's timeline reads its positions, not a second replay
        replayed_pcs = list(reached.pcs)
    final = {k: real.state.counts.get(k, 0) for k in excess}
    pending = [d for d in real.pending_dmas]
    if exiting is not None:  # copies among the devices that hang are theirs, not an exit's
        mine = {c for d in exiting for c in program.topology.cores_of_device(d)}
        pending = [d for d in pending if d.src_core in mine or d.dst_core in mine]
    counters = [
        {"semaphore": semaphore_words(k[0], low, k[1]), "core": k[1], "contributed": tot[k][0], "waited": tot[k][1], "excess": e,
         "final_count_in_witness": final[k]}
        for k, e in sorted(excess.items(), key=repr)
    ]
    device_warn = _warnings(program, mode, low, excess, None if failing else real,
                            rotation=lambda: facts.rotation) if warnings else {}
    if exiting is not None:  # the devices that hang never check: only the exiting ones have warnings to predict
        device_warn = {d: w for d, w in device_warn.items() if int(d) in exiting}
    # the totals count what every copy would add; under on_wait copies left in flight add nothing, so the
    # count jax prints at exit is the witness run's, which can be far from the excess (PROP-5)
    lines = [f"{c['semaphore']} on core {c['core']}: receives {c['contributed']}, waits for {c['waited']}"
             + (f" ({c['final_count_in_witness']} left at exit in the witness run, copies in flight adding nothing)"
                if pending and c["final_count_in_witness"] != c["excess"] else "")
             for c in counters]
    msg = "unbalanced at exit: " + "; ".join(lines[:4]) + (f" (+{len(lines) - 4} more)" if len(lines) > 4 else "")
    if failing:
        msg = f"every run fails (see deadlock-free), and in the run to just before the failure devices that exit are {msg}"
    elif exiting is not None:
        msg = f"the program hangs (see deadlock-free), and devices that exit are {msg}"
    if pending:
        msg += f"; {len(pending)} DMA(s) never complete in the witness run"
    locs, marks = [], []
    for k in excess:
        xs = low.by_counter.get(k, [])
        if xs:
            locs.append(program.cores[xs[-1].owner][xs[-1].pos].loc)
            what = {"signal": "this signal", "dma_read": "this copy's send side"}.get(xs[-1].kind, "this copy")
            marks.append(site("unwaited", locs[-1], f"{what} adds to {semaphore_words(k[0], low, k[1])} on core {k[1]}, which "
                                                    f"receives {tot[k][0]} and waits for {tot[k][1]}: {excess[k]} is "
                                                    "left at exit; nothing waits for it"))
    details = {
        "counters": counters,
        "pending_dmas_in_witness": [{"src_core": d.src_core, "dst_core": d.dst_core, "nbytes": d.nbytes,
                                     "loc": str(d.loc)} for d in pending],
        "pending_dmas": "never" if mode != "on_wait" else ("may" if pending else "unknown"),
        "warnings": device_warn,
        "printed_in_witness": [WARNING.format(k[1] if len(k) > 1 else k[0], w.device, c, v)
                               for w in real.state.warnings for (k, c, v) in w.nonzero[:1]],
        "sites": sites(*marks[:8]),
    }
    if replayed_pcs is not None:
        details["terminal_pcs"] = replayed_pcs
    return Verdict(prop, "violated", witness=Witness(message=msg, schedule=tuple(real.schedule), locs=tuple(locs[:3]),
                                                      details=details,
                                                      hint="every signal and DMA needs a matching wait before exit"),
                   stats=stats)


def _devices(exiting: dict[int, tuple[int, int]]) -> str:
    ds = sorted(exiting)
    return ("device " if len(ds) == 1 else "devices ") + ", ".join(map(str, ds[:8])) + (" ..." if len(ds) > 8 else "")


def _exit_checks(program: Program) -> dict[int, tuple[int, int]]:
    out = {}
    for c, ops in enumerate(program.cores):
        for i, op in enumerate(ops):
            if isinstance(op, ExitCheck):
                out.setdefault(op.device, (c, i))
    return out


def _held_at_checks(program: Program, mode: DmaMode, checks: dict, whole: Outcome | None = None,
                    low: Lowered | None = None) -> State | None:
    """The final state of one run with every checking core held just before its check and the rest run as
    far as they can, when that is what each device's own held run reaches too (the next operation after
    each check is a barrier of all checking cores, or none: passing a check then changes nothing any other
    core sees); else None. `whole`: the program's maximal run (`low` its lowering), read instead of a new
    run where RUN-45 says so (its exit warnings and passed barriers are not the held run's: not read)."""
    cores = {c for c, _ in checks.values()}
    # the checking cores' barriers share a few participant sets: each is tested once (RUN-41), not
    # once per device (a test of N cores per device was quadratic)
    covers: dict[int, bool] = {}
    for c, x in checks.values():
        ops = program.cores[c]
        if x + 1 == len(ops):
            continue
        nxt = ops[x + 1]
        if not isinstance(nxt, Barrier):
            return None
        ok = covers.get(id(nxt.participants))
        if ok is None:
            ok = covers[id(nxt.participants)] = cores.issubset(nxt.participants)
        if not ok:
            return None
    if whole is not None and low is not None and mode != "on_wait" and whole.failure is None and _never_fails(program, mode, low):
        caps = tail_caps(program, checks)
        if caps is not None:
            return before_checks(whole.state, caps)
    return fast_run(program, mode, hold={c: x for c, x in checks.values()}, record=False).state


def _never_fails(program: Program, mode: DmaMode, low: Lowered) -> bool:
    """No run of `program`, held or not, fails: the static lowering finds no failing position, and neither
    RACE-1's clocks nor BUF-14's freed `run_scoped` keys (failures that depend on the schedule) apply."""
    if not low.ok or low.failing or keeps_clocks(program.detect_races, mode):
        return False
    return mode == "hardware" or not any(type(op) is AllocBuffer and held_scoped(op.memory_space, op.scope)
                                         for ops in program.cores for op in ops)


def tail_caps(program: Program, checks: dict) -> dict[int, int] | None:
    """RUN-45's tails: core -> where its tail starts, when every checking core ends with its check and at most
    one barrier after it, and that barrier is the last operation of each of its participants; else None."""
    cores = program.cores
    caps: dict[int, int] = {}
    tails: dict[tuple, Barrier] = {}  # each barrier's participants are read once (RUN-41: not per check)
    for c, x in checks.values():
        after = cores[c][x + 1:]
        if len(after) > 1 or (after and type(after[0]) is not Barrier):
            return None
        if after:
            tails.setdefault((after[0].name, id(after[0].participants)), after[0])
    for b in tails.values():
        for g in b.participants:
            last = cores[g][-1] if cores[g] else None
            if type(last) is not Barrier or last.name != b.name or (
                    last.participants is not b.participants and last.participants != b.participants):
                return None
            caps[g] = len(cores[g]) - 1
    caps.update((c, x) for c, x in checks.values())
    return caps


def before_checks(state: State, caps: dict[int, int]) -> State:
    """RUN-45: the held run's final state read off a maximal run's, `state`: every core where `state` has it
    but capped at the start of its tail (`tail_caps`)."""
    pcs = list(state.pcs)
    for c, q in caps.items():
        if pcs[c] > q:
            pcs[c] = q
    return dataclasses.replace(state, pcs=tuple(pcs))


def _orbit_rep(low: Lowered, checks: dict, rotation: Callable | None = None):
    """device -> the device whose answers it shares, under a rotation of the lowering that maps each
    device's check to its image's (RUN-6); the identity without one. `rotation`: gives the lowering's
    (`ModeAnalysis.rotation`, which the interpreter's modes share, RUN-48); else it is found here."""
    topo = low.program.topology
    ident = {d: d for d in checks}
    rot = rotation() if rotation is not None else find_rotation(low)
    if rot is None:
        return ident
    for d, (c0, x) in checks.items():
        img = rot.image(c0)
        if checks.get(topo.device_of(img)) != (img, x):
            return ident
    return {d: topo.device_of(rot.rep(c0)) for d, (c0, x) in checks.items()}


_SEARCH_EVENTS = 16  # delay candidates the exhaustive witness search accepts
_SEARCH_RUNS = 256  # restricted runs it may spend per device
SINGLETONS_FIRST = True
"""RUN-46: the sets of one that cover are tried before every run of one is made (False: the search as it was,
every set of one run first, which the test holds this to)."""


def _zero_at_check(program, mode, out, c0: int, x: int, cores) -> bool:
    st = out.state
    return out.failure is None and st.pcs[c0] == x and not nonzero_counts(st.counts, cores)


def _quiet_run(program: Program, mode: DmaMode, low: Lowered, feeds: Feeds, d: int, c0: int, x: int,
               m, exact: dict | None) -> bool | None:
    """True: a real run reaches device d's check with every count of d zero (no warning).
    False: proved that no run does (only by the exhaustive search). None: not decided.

    1. Every core held at its lower bound m (the least it must have done), c0 at its check;
       under hardware, then also the DMA halves that still over-fill a counter suppressed
       (halves in flight at the check), the latest first.
    2. Eager and hardware, with the device's waits at the check known exactly (`exact`: counter
       -> what has been waited for at the check): a run reaching the check with every count zero
       exists iff some set D of contributions to the device's counters, of at least each counter's
       surplus e(k) = total - waited, can all be held back past the check, i.e. the restricted run
       (signals and eager halves: their core held at them; hardware halves: suppressed) still
       brings c0 to its check (DR-2). Holding
       back more only makes that harder, so it suffices to try the covering sets of contributions
       that can each be held back alone, smallest first: an exhausted search proves "must".
       A restricted run is made once per set: the search's sets of one are the runs `alone` made; those
       that cover are tried first, latest contribution first (RUN-46).
    """
    topo = program.topology
    cores = topo.cores_of_device(d)
    hw = mode == "hardware"
    if m is not None:
        hold = {g: int(q) for g, q in enumerate(m)}
        hold[c0] = x
        out = fast_run(program, mode, hold=hold, record=False)
        if _zero_at_check(program, mode, out, c0, x, cores):
            return True
        if hw and out.state.pcs[c0] == x and out.failure is None:
            sup = set()
            for (key, g, v) in nonzero_counts(out.state.counts, cores):
                left = v
                halves = [y for y in low.by_counter.get((key, g), ()) if y.kind != "signal" and y.pos < out.state.pcs[y.owner]]
                for y in sorted(halves, key=lambda y: (y.pos, y.owner), reverse=True):
                    if 0 < y.amount <= left:
                        sup.add((y.owner, y.pos, "read" if y.kind == "dma_read" else "write"))
                        left -= y.amount
            if sup and _zero_at_check(program, mode, fast_run(program, mode, hold=hold, suppress=frozenset(sup),
                                                              record=False), c0, x, cores):
                return True
    if mode == "on_wait" or exact is None:
        return None
    surplus = {k: feeds.total.get(k, 0) - w for k, w in exact.items() if feeds.total.get(k, 0) > w}
    if not surplus:
        return None
    eager = mode == "eager"
    events = []
    for k in surplus:
        for y in low.by_counter.get(k, ()):
            if eager or y.kind == "signal":
                if m is None or y.pos >= m[y.owner]:
                    events.append(("hold", y.owner, y.pos))
            else:
                events.append(("sup", y.owner, y.pos, "read" if y.kind == "dma_read" else "write"))
    events = list(dict.fromkeys(events))
    if len(events) > _SEARCH_EVENTS:
        return None
    runs = 0

    def restricted(ds) -> tuple[dict, frozenset]:
        hold = {c0: x}
        sup = set()
        for e in ds:
            if e[0] == "hold":
                hold[e[1]] = min(e[2], hold.get(e[1], e[2]))
            else:
                sup.add(e[1:])
        return hold, frozenset(sup)

    def covers(hold, sup) -> bool:
        for k, e in surplus.items():
            held = 0
            for y in low.by_counter.get(k, ()):
                if y.pos >= hold.get(y.owner, y.pos + 1) or (y.kind != "signal" and not eager and (
                        (y.owner, y.pos, "read") in sup or (y.kind == "dma_write" and (y.owner, y.pos, "write") in sup))):
                    held += y.amount
            if held < e:
                return False
        return True

    made: dict[frozenset, object] = {}  # a restricted run is pure: each set's is made once
    asked: dict[tuple, bool] = {}  # event -> whether it can be held back alone (each asked once)

    def reaches(e) -> bool:
        nonlocal runs
        if e not in asked:
            runs += 1
            hold, sup = restricted((e,))
            out = fast_run(program, mode, hold=hold, suppress=sup, record=False)
            asked[e] = out.failure is None and out.state.pcs[c0] == x
            if asked[e]:
                made[frozenset((e,))] = out  # only a set that reaches alone is in the search
        return asked[e]

    if SINGLETONS_FIRST:
        # RUN-46: a set of one that decides True does so in any order (the budget cannot run out among sets
        # of one), so those that cover are tried first, the latest contributions first, each run made as asked
        for e in sorted(events, key=lambda e: -e[2]):
            if covers(*restricted((e,))) and reaches(e) and _zero_at_check(program, mode, made[frozenset((e,))],
                                                                            c0, x, cores):
                return True
    alone = [e for e in events if reaches(e)]
    failed: list[frozenset] = []
    for size in range(1, len(alone) + 1):
        for ds in itertools.combinations(alone, size):
            s = frozenset(ds)
            if any(f <= s for f in failed):
                continue
            hold, sup = restricted(ds)
            if not covers(hold, sup):
                continue
            if runs >= _SEARCH_RUNS:
                return None
            runs += 1
            out = made.get(s)
            if out is None:
                out = fast_run(program, mode, hold=hold, suppress=sup, record=False)
            if _zero_at_check(program, mode, out, c0, x, cores):
                return True
            if out.failure is None and out.state.pcs[c0] != x:
                failed.append(s)
    return False


def _drained_at_checks(low: Lowered, checks: dict) -> frozenset:
    """Under on_wait, the checking cores' counters that are zero at their check in every run (PROP-5).

    Such a counter receives only the write halves of copies, all of one size s, and its core's
    waits before the check each take a multiple of s. A write half lands only when the counter's
    own waiter runs the copy's task, and a waiter runs tasks only while its count is short; so the
    count, zero at the start, climbs by s to exactly what each wait takes, which leaves it zero:
    between its waits, and at the check, where the checking core has passed all of them.
    """
    at = {c0: x for c0, x in checks.values()}
    out = set()
    for k, xs in low.by_counter.items():
        x = at.get(k[1])
        if x is None or any(y.kind != "dma_write" for y in xs) or len({y.amount for y in xs}) != 1:
            continue
        size = xs[0].amount
        if size > 0 and all(w.value % size == 0 for w in low.waits_by_counter.get(k, ()) if w.pos < x):
            out.add(k)
    return frozenset(out)


def _warnings(program: Program, mode: DmaMode, low: Lowered, excess: dict, whole: Outcome | None = None, *,
              rotation: Callable | None = None) -> dict:
    """Per device: 'never' | 'may' | 'must' | 'unknown' (+ an example line); see PROP-5 in specs/deciding/properties.md.

    may: a run (all checking cores held before their checks, the rest as far as they can go)
    in which the check sees a non-zero count. never: even counting everything that can have
    arrived by then, less the least that must have been waited for, every count is zero. must: a
    lower bound on what must have arrived exceeds what can have been waited for. not_must: a
    run reaching the check with every count zero (restricted fast runs, `_quiet_run`).
    """
    topo = program.topology
    checks = _exit_checks(program)
    if not checks:
        return {}
    feeds = Feeds(low)
    counters: dict = defaultdict(list)
    for k in set(feeds.total) | set(feeds.waits):
        counters[topo.device_of(k[1])].append(k)
    held = _held_at_checks(program, mode, checks, whole, low)
    bounds = must_have_passed(low, checks, feeds)
    drained = _drained_at_checks(low, checks) if mode == "on_wait" else frozenset()
    rep = _orbit_rep(low, checks, rotation)
    quiet: dict = {}
    out = {}
    for d, (c0, x) in sorted(checks.items()):
        mine = sorted(counters.get(d, ()), key=repr)
        f = held if held is not None else fast_run(program, mode, hold={c0: x}, record=False).state
        if f.failure is not None or f.pcs[c0] != x:
            out[str(d)] = {"behaviour": "unknown", "note": "the held run does not reach the check"}
            continue
        pcs = f.pcs
        m = bounds.get(d) if bounds is not None else None
        hi = pcs  # read at the device's few counters' cores: no vector of every core per device (RUN-41)
        # waits done at the check: at least those before lo, at most those before hi (c0: exactly before x)
        w_lo = {k: feeds.need(k, int(m[k[1]]) if m is not None else (x if k[1] == c0 else 0)) for k in mine}
        w_hi = {k: feeds.need(k, x if k[1] == c0 else hi[k[1]]) for k in mine}
        exact = w_lo if w_lo == w_hi else None
        nonzero = {k: v for k in mine if (v := f.counts.get(k, 0))}
        may = bool(nonzero)
        never = all(feeds.arrived_at_most(k, hi) <= w_lo[k] or k in drained for k in mine)
        must = m is not None and any(feeds.arrived_at_least(k, m) > w_hi[k] for k in mine)
        if never and (may or must):
            raise EncodingBug(f"device {d}'s exit check: never warns, yet {'may' if may else 'must'}")
        entry: dict = {}
        if nonzero:
            k, v = sorted(nonzero.items(), key=repr)[0]
            entry["example"] = WARNING.format(k[0][1] if len(k[0]) > 1 else k[0][0], d, k[1], v)
            entry["may_print"] = [WARNING.format(kk[0][1] if len(kk[0]) > 1 else kk[0][0], d, kk[1], vv)
                                  for kk, vv in sorted(nonzero.items(), key=repr)]
        if must:
            entry["behaviour"] = "must"
        elif never:
            entry["behaviour"] = "never"
        else:
            r = rep.get(d, d)
            if r not in quiet:
                quiet[r] = _quiet_run(program, mode, low, feeds, d, c0, x, m, exact)
            q = quiet[r]
            if q is False:
                entry["behaviour"] = "must"
            elif may:
                entry["behaviour"] = "may"
                entry["not_must"] = q is True  # some run prints nothing
                if q is None:
                    entry["note"] = "must not decided: no quiet run found and the search was not exhaustive"
            else:
                entry["behaviour"] = "unknown"
        out[str(d)] = entry
    return out


