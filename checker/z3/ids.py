"""Id properties: `id-disjoint` (PROP-1), `id-int16` (PROP-2), `id-agreement` (PROP-3).

**Ids are linear in allocation counts.** Core c's k-th allocation event gets
the base `2000 + (sum of the counts of c's earlier allocation events)`
(SEM-1; buffers likewise from 100, one id each). `IdModel` states exactly
that in Z3, with one integer per allocation event (equal to its count for a
concrete program). When the order of a core's allocation events is not fixed
by happens-before, "earlier" becomes a free Boolean per pair: every order is
admitted, so an unsat answer is still a proof. The same equations accept
*symbolic* counts: `int16_bound` and `collision_bound` take a `run_scoped`
block repeated a symbolic number of times and return the smallest failing
trip count in a range, or a proof that none fails.

**Static possibility, then reachability.** Each check first asks Z3 whether
the bad situation is possible at all (some allocation range contains the
collective id; some handed-out id exceeds int16; ...). Unsat -> **proved**.
Otherwise whether it happens in a run is decided on S''s end (`checker.static`,
RUN-9) when the lowering is static: exactly (violated with a replayed witness, or
proved because the offending operation never executes). When the lowering is not static, a
real run (the model's fast run, `lookup_errors=False` where collisions are
concerned) can still witness a violation; otherwise **unknown**.

On hardware there are no ids (HW-1): id-disjoint and id-int16 hold
vacuously, and id-agreement asks that the site exists on the target core.
"""

from __future__ import annotations

import dataclasses
import time

import z3

from semcheck.checker.properties.analysis import ModeAnalysis, analysis_of
from semcheck.checker.properties.id_states import in_both_tables, int16_offence
from semcheck.checker.properties.replay import replay_until
from semcheck.checker.properties.sites import site, sites
from semcheck.checker.properties.verdict import Verdict, Witness
from semcheck.checker.static.must_pass import must_have_passed
from semcheck.checker.static.system import EncodingBug, Lowered
from semcheck.checker.static.least_stuck import maximal_run, failure_reached, truncate
from semcheck.model.errors import IdCollision, Int16Overflow
from semcheck.model.fast import fast_run
from semcheck.model.ids import FIRST_BUFFER_ID, FIRST_SEMAPHORE_ID, INT16_MAX, INT16_MIN
from semcheck.model.ops import (
    BARRIER,
    AllocSem,
    DmaMode,
    DmaStart,
    Loc,
    Program,
    Read,
    Signal,
    Wait,
)
from semcheck.model.state import Outcome, State

COLLISION_MESSAGE = "Semaphore {} occurs as both fixed-id and internal."


# --- the linear id model ------------------------------------------------------------


class IdModel:
    """Bases of every allocation event on every core it allocates for, as Z3 terms."""

    def __init__(self, low: Lowered, what: str = "semaphore") -> None:
        self.low = low
        self.what = what
        first = FIRST_SEMAPHORE_ID if what == "semaphore" else FIRST_BUFFER_ID
        per_core = low.sem_counter_events if what == "semaphore" else low.buf_counter_events
        self.n: dict[tuple[int, int], z3.ArithRef] = {}
        self.base: dict[tuple[int, int, int], z3.ArithRef] = {}  # (core, issuer, pos) -> base
        self.events: dict[tuple[int, int], object] = {}
        self.constraints = []
        self.free_orders = 0
        static = {(e.issuer, e.pos): e for e in (low.sem_events if what == "semaphore" else low.buffer_events)}
        for core, evs in per_core.items():
            for a, i, op in evs:
                if (a, i) not in self.n:
                    v = z3.Int(f"n_{what[0]}{a}_{i}")
                    self.n[(a, i)] = v
                    self.events[(a, i)] = op
                    self.constraints.append(v == (op.count if isinstance(op, AllocSem) else 1))
            if (what, core) in low.racy_counters:
                for a, i, op in evs:
                    terms = []
                    for b, j, _ in evs:
                        if (b, j) == (a, i):
                            continue
                        before = z3.Bool(f"ord_{what[0]}{core}_{b}_{j}_{a}_{i}")
                        self.free_orders += 1
                        terms.append(z3.If(before, self.n[(b, j)], 0))
                    self.base[(core, a, i)] = first + z3.Sum(terms) if terms else z3.IntVal(first)
            else:
                acc = []
                for a, i, op in sorted(evs, key=lambda e: static[(e[0], e[1])].bases[core]):
                    self.base[(core, a, i)] = first + z3.Sum(acc) if acc else z3.IntVal(first)
                    acc.append(self.n[(a, i)])

    def solver(self, timeout_ms: int) -> z3.Solver:
        s = z3.SolverFor("QF_LIA")
        s.set("timeout", int(timeout_ms))
        s.add(*self.constraints)
        return s

    def contains(self, sem_id: int) -> list[tuple[tuple[int, int, int], z3.BoolRef]]:
        """One condition per (core, event): the range the event gives the core holds `sem_id`."""
        return [
            (key, z3.And(b <= sem_id, sem_id < b + self.n[key[1:]]))
            for key, b in self.base.items()
        ]

    def handed_out_too_big(self) -> list[tuple[tuple[int, int], z3.BoolRef]]:
        """One condition per event: an id the issuer hands to the kernel exceeds int16 (IDS-1/2)."""
        out = []
        for (core, a, i), b in self.base.items():
            if core == a:
                out.append(((a, i), b + self.n[(a, i)] - 1 > INT16_MAX))
        return out


# --- symbolic sizes -------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Bound:
    """Answer of a symbolic-size query: `proved` for the whole range, or the smallest failing size."""

    proved: bool
    smallest_failing: int | None
    kind: str | None  # int16: "overflow" (OverflowError) or "wrap" (silent); collision: "collision"
    detail: str
    trip_range: tuple[int, int]
    unknown: str = ""


def _minimise(constraints, T, timeout_ms: int) -> int | None | str:
    opt = z3.Optimize()
    opt.set("timeout", int(timeout_ms))
    opt.add(*constraints)
    opt.minimize(T)
    res = opt.check()
    if res == z3.unsat:
        return None
    if res == z3.unknown:
        return f"z3 gave up: {opt.reason_unknown()}"
    return opt.model()[T].as_long()


def int16_bound(
    per_iteration_count: int,
    prefix_count: int,
    trip_range: tuple[int, int],
    *,
    first_id: int = FIRST_SEMAPHORE_ID,
    timeout_ms: int = 10_000,
) -> Bound:
    """Smallest trip count T in `trip_range` (inclusive) for which a core's ids leave int16.

    The core first allocates `prefix_count` ids, then runs T iterations of a
    block allocating `per_iteration_count` ids (a `run_scoped` in a loop: ids
    are never freed, SEM-1). Iteration k (from 0) gets base
    `b_k = first_id + prefix_count + k * per_iteration_count` and is handed
    `arange(b_k, b_k + per, dtype=int16)`: it fails (IDS-1) as soon as
    `b_k + per - 1 > 32767` -- with OverflowError when `b_k` or `b_k + 1`
    does not fit, by a silent wrap otherwise.
    """
    lo, hi = trip_range
    per, pre = per_iteration_count, prefix_count
    if per <= 0:
        return Bound(True, None, None, "the loop allocates nothing", trip_range)
    T, k = z3.Int("T"), z3.Int("k")
    base = first_id + pre + k * per
    res = _minimise([lo <= T, T <= hi, 0 <= k, k < T, base + per - 1 > INT16_MAX], T, timeout_ms)
    if isinstance(res, str):
        return Bound(False, None, None, "", trip_range, unknown=res)
    if res is None:
        last = first_id + pre + hi * per - 1
        return Bound(True, None, None, f"the largest id handed out for T={hi} is {last} <= {INT16_MAX}", trip_range)
    kk = res - 1  # the first failing iteration is the last one of the smallest failing T
    b = first_id + pre + kk * per
    overflow = b > INT16_MAX or (per >= 2 and b + 1 > INT16_MAX)
    kind = "overflow" if overflow else "wrap"
    what = (f"OverflowError: Python integer {b if b > INT16_MAX else b + 1} out of bounds for int16"
            if overflow else f"ids {b}..{b + per - 1} wrap to {b + per - 1 - 2**16} silently")
    return Bound(False, res, kind, f"iteration {kk} allocates ids from {b}: {what}", trip_range)


def collision_bound(
    collective_id: int,
    per_iteration_count: int,
    prefix_count: int,
    trip_range: tuple[int, int],
    *,
    first_id: int = FIRST_SEMAPHORE_ID,
    timeout_ms: int = 10_000,
) -> Bound:
    """Smallest trip count T in `trip_range` for which some allocation range holds `collective_id`.

    Same allocation shape as `int16_bound`. A kernel that also calls
    `get_barrier_semaphore` then has the id in both tables (PROP-1).
    """
    lo, hi = trip_range
    per, pre = per_iteration_count, prefix_count
    T, k, i = z3.Int("T"), z3.Int("k"), z3.Int("i")
    in_prefix = z3.And(first_id <= collective_id, collective_id < first_id + pre)
    in_loop = z3.And(0 <= k, k < T, 0 <= i, i < per, first_id + pre + k * per + i == collective_id)
    res = _minimise([lo <= T, T <= hi, z3.Or(in_prefix, in_loop)], T, timeout_ms)
    if isinstance(res, str):
        return Bound(False, None, None, "", trip_range, unknown=res)
    if res is None:
        return Bound(True, None, None, f"no allocation holds id {collective_id} for any T in {trip_range}", trip_range)
    if first_id <= collective_id < first_id + pre:
        detail = f"the prefix allocation holds id {collective_id}"
    else:
        kk = (collective_id - first_id - pre) // per
        detail = f"iteration {kk} allocates ids {first_id + pre + kk * per}..{first_id + pre + kk * per + per - 1}"
    return Bound(False, res, "collision", detail, trip_range)


# --- helpers ------------------------------------------------------------------------------


def _prefix_to(program: Program, mode: DmaMode, low: Lowered, core: int, pos: int) -> tuple | None:
    """A short schedule that brings `core` to `pos`: the other cores run only as far as every run that
    gets there must have run them (`static.must_pass.must_have_passed`), so the witness replays the few steps
    the violation needs, not the whole program. None if that restricted run does not get there."""
    bounds = must_have_passed(low, {0: (core, pos)})
    if bounds is None:
        return None
    out = fast_run(program, mode, hold={g: int(q) for g, q in enumerate(bounds[0])})
    if out.failure is not None or out.state.pcs[core] != pos:
        return None
    return tuple(out.schedule)


def _stats(low: Lowered, **more) -> dict:
    return dict(low.size(), **more)


# --- id-disjoint -------------------------------------------------------------------------


def id_disjoint(program: Program, mode: DmaMode, *, timeout_ms: int = 30_000,
                facts: ModeAnalysis | None = None) -> Verdict:
    """PROP-1: the collective id never sits in both id tables; and does ERR-1 fire?

    Verdict: proved when no allocation range can hold the collective id (Z3
    over the allocation counters), or no `get_barrier_semaphore` runs, or
    S' shows the two insertions never both happen; violated with a witness
    schedule that replays to a state where both tables hold it. The witness
    details say whether the interpreter's `Semaphore N occurs as both
    fixed-id and internal.` fires: "must" (every run raises it), "may" (some
    run does; witnessed and replayed), "no" (no run does), or "unknown".
    """
    prop = "id-disjoint"
    cid = program.collective_id
    if mode == "hardware":
        return Verdict(prop, "proved", reason="no ids on hardware: semaphores are allocation sites (HW-1)")
    if cid is None:
        return Verdict(prop, "proved", reason="no collective_id: the fixed-id table stays empty")
    facts = analysis_of(program, mode, facts)
    t0 = time.perf_counter()
    low = facts.lowering
    if not low.gets:
        return Verdict(prop, "proved", reason="get_barrier_semaphore never runs: the fixed-id table stays empty",
                       stats=_stats(low))
    events = {(ev.issuer, ev.pos): ev for ev in low.sem_events}
    if not low.racy_counters:
        free_orders = 0
        covering = fixed_order_covering(low, cid, events)
        res = z3.sat if covering else z3.unsat
    else:
        model = IdModel(low)
        s = model.solver(timeout_ms)
        conds = model.contains(cid)
        s.add(z3.Or([c for _, c in conds]) if conds else z3.BoolVal(False))
        res = s.check()
        free_orders = model.free_orders
        if res == z3.sat:
            covering = [(key[1], key[2]) for key, c in conds
                        if z3.is_true(s.model().eval(c, model_completion=True)) or _covers(events, key, cid)]
    stats = _stats(low, z3=str(res), solve_s=round(time.perf_counter() - t0, 4), free_orders=free_orders)
    if res == z3.unknown:
        return Verdict(prop, "unknown", reason=f"z3 gave up: {s.reason_unknown()}", stats=stats)
    if res == z3.unsat:
        return Verdict(prop, "proved", reason=f"no allocation range holds the collective id {cid}", stats=stats)

    both = lambda st: in_both_tables(st, cid)  # noqa: E731
    if low.ok:
        sp = facts.s_prime_run
        fails = failure_reached(low, sp.state.pcs)
        schedule = list(sp.schedule)
        st = sp.state
        ok = both(st)
        if not ok:
            # a failing G or AllocSem inserts before it raises (SEM-1, SEM-2): one more step
            for c, pos, v in fails:
                op = program.cores[c][pos]
                if op.fetches_barrier and cid in st.tables.internal or (
                    isinstance(op, AllocSem) and cid in st.tables.fixed and any((c, pos) == ev for ev in covering)
                ):
                    schedule.append(("core", c))
                    ok = True
                    break
        if not ok:
            return Verdict(prop, "proved", reason=(
                f"an allocation range could hold the collective id {cid}, but no run executes both it and "
                "get_barrier_semaphore"), stats=stats)
        fires = _fires_static(low, sp, cid)
    else:
        out = facts.maximal_run(lookup_errors=False)
        if not both(out.state):
            return Verdict(prop, "unknown", reason=(
                f"an allocation range may hold the collective id {cid}, and the lowering is not static ("
                + "; ".join(low.unsupported[:2]) + ")"), stats=stats)
        schedule = list(out.schedule)
        fires = None
    state, taken = replay_until(program, mode, schedule, both)
    if not both(state):
        raise EncodingBug(f"id-disjoint witness does not replay to a state with {cid} in both tables")
    if fires is None:
        fires = _fires_by_freezing(program, mode, low, cid)
    alloc_locs, g_locs = _insertion_sites(program, low, cid, state, covering)
    fire_word, fire_wit = fires
    holder = _holder(program, low, cid, state, covering)
    msg = (f"collective id {cid} is both a fixed id (get_barrier_semaphore at {g_locs[0] if g_locs else '?'}) and "
           f"{holder}; "
           f"the interpreter's '{COLLISION_MESSAGE.format(cid)}' {_fire_phrase(fire_word)}")
    details = {
        "collective_id": cid,
        "fires": fire_word,
        "message": COLLISION_MESSAGE.format(cid),
        "allocation_sites": [str(x) for x in alloc_locs],
        "get_barrier_semaphore_sites": [str(x) for x in g_locs],
        "sites": sites(site("barrier", g_locs[0] if g_locs else None,
                            f"get_barrier_semaphore fetches the barrier semaphore, fixed id {cid}"),
                       site("allocation", alloc_locs[0] if alloc_locs else None,
                            f"{holder.removeprefix('the internal id of ').split(' (')[0]} is handed internal id "
                            f"{cid} here" if holder.startswith("the internal id of ") else
                            f"internal id {cid} is handed out here")),
    }
    if fire_wit is not None:
        details["fire_schedule"] = [list(a) for a in fire_wit[0]]
        details["fire_at"] = {"core": fire_wit[1], "pc": fire_wit[2]}
    return Verdict(prop, "violated", witness=Witness(
        message=msg, schedule=taken, locs=tuple(alloc_locs[:1] + g_locs[:1]), details=details,
        hint="choose a collective_id below 2000 (internal ids start at 2000)"), stats=stats)


def _holder(program: Program, low: Lowered, cid: int, state: State, covering) -> str:
    """`the internal id of send_sem[0] (scratch semaphore, k.py:42)`: the semaphore the id was handed to, by
    the kernel's own name (a run_scoped label is named by the body's parameter and its line in the
    reports' naming pass, `timeline.humanize`)."""
    ran = [(a, i) for a, i in covering if i < state.pcs[a]] or list(covering)
    if not ran:
        return "an internal id"
    a, i = ran[0]
    op = program.cores[a][i]
    index = next((cid - ev.bases[c] for ev in low.sem_events if (ev.issuer, ev.pos) == (a, i)
                  for c in ev.bases if ev.bases[c] is not None and ev.bases[c] <= cid < ev.bases[c] + ev.op.count),
                 None)
    ref = op.label if index is None else f"{op.label}[{index}]"
    if getattr(op, "scope", "core") == "device":  # the pallas_call's scratch: its parameter name is the label
        return f"the internal id of {ref} (scratch semaphore, {op.loc})"
    return f"the internal id of {ref}"


def fixed_order_covering(low: Lowered, cid: int, events: dict | None = None) -> list[tuple[int, int]]:
    """RUN-28: with every core's allocation order fixed, IdModel's bases are numbers (the lowering's, SEM-1),
    so PROP-1's query is arithmetic: the (issuer, position) of each (core, event) whose range holds `cid`, in
    IdModel's order (per core, by base). Empty: no range holds it."""
    if low.racy_counters:
        raise ValueError("an unordered allocation has no fixed base: Z3 decides (IdModel)")
    if events is None:
        events = {(ev.issuer, ev.pos): ev for ev in low.sem_events}
    return [(a, i) for core, evs in low.sem_counter_events.items()
            for a, i, _ in sorted(evs, key=lambda e, core=core: events[(e[0], e[1])].bases[core])
            if _covers(events, (core, a, i), cid)]


def _covers(events: dict, key, cid: int) -> bool:
    """Whether the range allocation event `key[1:]` gives core `key[0]` holds `cid` (`events`: by position)."""
    core, a, i = key
    ev = events.get((a, i))
    if ev is not None and core in ev.bases:
        return ev.bases[core] <= cid < ev.bases[core] + ev.op.count
    return False


def _fire_phrase(word: str) -> str:
    return {
        "must": "is raised in every run",
        "may": "is raised in some runs",
        "no": "is never raised (no lookup of the id happens while both tables hold it)",
        "unknown": "may or may not be raised (not decided)",
    }[word]


def _insertion_sites(program: Program, low: Lowered, cid: int, state: State, covering) -> tuple[list[Loc], list[Loc]]:
    allocs = []
    for a, i in covering:
        if i < state.pcs[a] or (state.failure and (state.failure.core, state.failure.pc) == (a, i)):
            allocs.append(program.cores[a][i].loc)
    allocs = allocs or [program.cores[a][i].loc for a, i in covering]
    gs = [program.cores[c][i].loc for c, i in low.gets if i < state.pcs[c]] or [program.cores[c][i].loc for c, i in low.gets]
    return list(dict.fromkeys(allocs)), list(dict.fromkeys(gs))  # distinct source lines, in order


def _cid_lookups(program: Program, low: Lowered, cid: int) -> list[tuple[int, int]]:
    """Operations that look up the collective id (statically, using each core's held ids)."""
    out = []
    for c, ops in enumerate(program.cores):
        for i, op in enumerate(ops):
            refs = []
            if isinstance(op, (Signal, Wait, Read)):
                refs = [op.sem]
            elif isinstance(op, DmaStart):
                refs = [r for r in (op.src_sem, op.dst_sem) if r is not None]
            for r in refs:
                if r.label == BARRIER:
                    out.append((c, i))
                    break
                alloc = low.sem_allocs.get((c, r.label))
                if alloc is None or isinstance(alloc.ids, Int16Overflow) or not alloc.ids:
                    continue
                if 0 <= r.index < len(alloc.ids) and alloc.ids[r.index] == cid:
                    out.append((c, i))
                    break
    return out


def _fires_static(low: Lowered, sp: Outcome, cid: int):
    """With a static lowering, a collision is a static failing op; S' decides whether it is reached."""
    fails = failure_reached(low, sp.state.pcs)
    coll = [(c, pos) for c, pos, v in fails if isinstance(v, IdCollision)]
    if not coll:
        return "no", None
    c, pos = coll[0]
    schedule = tuple(sp.schedule) + (("core", c),)
    state, taken = replay_until(low.program, low.mode, schedule, lambda st: False)
    if not (state.failure and isinstance(state.failure.violation, IdCollision)):
        raise EncodingBug("a reached collision does not replay to ERR-1")
    return ("must" if len(coll) == len(fails) else "may"), (taken, c, pos)


def _fires_by_freezing(program: Program, mode: DmaMode, low: Lowered, cid: int):
    """RUN-3 / note section 4: hold each looking-up core before its lookup, run the others maximally."""
    for c, i in _cid_lookups(program, low, cid):
        held = truncate(program, {c: i})
        out = maximal_run(held, mode, lookup_errors=False)
        st = out.state
        if st.pcs[c] == i and cid in st.tables.fixed and cid in st.tables.internal:
            schedule = tuple(out.schedule) + (("core", c),)
            state, taken = replay_until(program, mode, schedule, lambda s: False)
            if state.failure and isinstance(state.failure.violation, IdCollision):
                return "may", (taken, state.failure.core, state.failure.pc)
    return "unknown", None


# --- id-int16 ------------------------------------------------------------------------------


def id_int16(program: Program, mode: DmaMode, *, timeout_ms: int = 30_000,
             facts: ModeAnalysis | None = None) -> Verdict:
    """PROP-2: every semaphore id, buffer id and the collective id handed out fits int16, unwrapped.

    Z3 asks whether any allocation event can hand out an id above 32767
    (semaphores from 2000, buffers from 100, in any admissible allocation
    order) or the collective id is outside int16 while get_barrier_semaphore
    runs (plain arithmetic on the lowering's bases when every core's
    allocation order is fixed). Unsat -> proved. Otherwise the offending operation is looked up in
    S': OverflowError operations are failing operations (reached iff S'
    stops there), silently wrapping allocations are executed iff S' passes
    them. The witness is a short prefix: the failing core, and the others only
    as far as every run reaching it must have run them.
    """
    prop = "id-int16"
    if mode == "hardware":
        return Verdict(prop, "proved", reason="no ids on hardware (HW-1)")
    facts = analysis_of(program, mode, facts)
    t0 = time.perf_counter()
    low = facts.lowering
    cid = program.collective_id
    cid_bad = cid is not None and low.gets and not INT16_MIN <= cid <= INT16_MAX
    if not low.racy_counters:
        # every core's allocation order is fixed, so IdModel's bases are numbers (the lowering's):
        # the query is arithmetic, and building it in Z3 is the cost on large programs (bench/README.md)
        too_big = cid_bad or any(
            ev.issuer in ev.bases and ev.bases[ev.issuer] + (ev.op.count if isinstance(ev.op, AllocSem) else 1) - 1
            > INT16_MAX for ev in (*low.sem_events, *low.buffer_events))
        res = z3.sat if too_big else z3.unsat
    else:
        sem, buf = IdModel(low, "semaphore"), IdModel(low, "buffer")
        s = z3.SolverFor("QF_LIA")
        s.set("timeout", int(timeout_ms))
        s.add(*sem.constraints, *buf.constraints)
        bad = [c for _, c in sem.handed_out_too_big()] + [c for _, c in buf.handed_out_too_big()]
        s.add(z3.Or(bad + [z3.BoolVal(bool(cid_bad))]))
        res = s.check()
        if res == z3.unknown:
            stats = _stats(low, z3=str(res), solve_s=round(time.perf_counter() - t0, 4))
            return Verdict(prop, "unknown", reason=f"z3 gave up: {s.reason_unknown()}", stats=stats)
    stats = _stats(low, z3=str(res), solve_s=round(time.perf_counter() - t0, 4))
    if res == z3.unsat:
        return Verdict(prop, "proved", reason="every id handed out fits int16", stats=stats)

    fine: dict = {}  # (core, label) -> an allocation already seen to fit (states share unchanged ones)

    def offending(state: State) -> str | None:
        return int16_offence(state, fine)

    if low.ok:
        sp = facts.s_prime_run
        schedule = tuple(sp.schedule)
        overflow = [(c, pos) for c, pos, v in failure_reached(low, sp.state.pcs) if isinstance(v, Int16Overflow)]
        if overflow:
            c, pos = overflow[0]
            schedule = (_prefix_to(program, mode, low, c, pos) or schedule) + (("core", c),)
        elif offending(sp.state) is None:
            return Verdict(prop, "proved", reason="the allocations that would leave int16 never execute", stats=stats)
        else:
            wraps = [(a.issuer, a.pos) for a in low.sem_allocs.values()
                     if a.ids and not isinstance(a.ids, Int16Overflow) and a.ids[-1] - a.ids[0] != len(a.ids) - 1
                     and a.pos < sp.state.pcs[a.issuer]]
            if wraps:
                c, pos = min(wraps)
                schedule = _prefix_to(program, mode, low, c, pos + 1) or schedule
    else:
        out = facts.maximal_run()
        if offending(out.state) is None:
            return Verdict(prop, "unknown", reason="some allocation order could leave int16 and the lowering is not "
                           "static (" + "; ".join(low.unsupported[:2]) + ")", stats=stats)
        schedule = tuple(out.schedule)
    state, taken = replay_until(program, mode, schedule, lambda st: offending(st) is not None)
    what = offending(state)
    if what is None:
        raise EncodingBug("id-int16 witness does not replay to an out-of-range id")
    loc = state.failure.loc if state.failure else program.cores[taken[-1][1]][state.pcs[taken[-1][1]] - 1].loc
    return Verdict(prop, "violated", witness=Witness(message=what, schedule=taken, locs=(loc,), details={"what": what},
                                                      hint="ids are never freed: allocate semaphores outside loops"),
                   stats=stats)


