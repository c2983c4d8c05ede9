"""`exit-balance` (PROP-5) and `dma-bytes` (PROP-6).

exit-balance
    For every counter (semaphore, core): T = everything the program
    contributes to it (signals, and both halves of every DMA) and W =
    everything the core waits for on it. In a program that completes (no
    deadlock, no failure: decided as in `checker/deadlock.py`), every op runs, so
    the final count is `executed - W` with `W <= executed <= T`.

    * T == W for every counter  ->  **proved**: every count is zero at the end
      and at every exit check (at the check the device's cores have finished,
      so `W <= arrived <= T = W`), and no DMA is pending at the end (a pending
      write half would leave its counter below W).
    * some T > W  ->  **violated**, with the model's fast run as witness
      (replayed on the step relation up to `REPLAY_LIMIT` steps): its final
      counts, pending DMAs and printed warnings.
    * the program hangs (S' ends in a deadlock, PROP-4): every run stops at
      the least stuck vector (RUN-3), so the devices past their exit check
      there are exactly the devices that exit in any run; the others never
      exit and have nothing to check. T and W are then what the operations
      before the stuck positions contribute and wait for, on the counters of
      the exiting devices: their waits have all run, so the same argument
      decides them; no exiting device -> **proved** (no run reaches an exit).
    * the program can fail -> **unknown**.

    The witness details also give, per device, the interpreter's expected
    warning `Semaphore N has non-zero count for D (global core G) at kernel
    exit: C` (EXIT-1): "never", "may" or "must" (or "unknown"); with "may",
    `not_must` says whether a run without the warning is proved to exist.
    All from fast runs and one linear pass (spec PROP-5 argues each answer):
    "may" is witnessed by the run that freezes the checking cores just
    before their checks and runs the rest as far as they can; "never" and
    "must" compare an upper bound (that run's positions) and a lower bound
    (`must_have_passed`: what every run must have done to reach the check)
    on what can have arrived and been waited for; `not_must` is witnessed by
    a restricted run (cores capped at the lower bound, DMA halves in flight)
    that reaches the check with every count zero, or, for small programs,
    decided by an exhaustive search over what can be held back past the
    check. The per-event timestamp encoding (bench/timestamped.py) is only the
    bench's baseline now.

dma-bytes
    For every counter (s, c) that a DMA half signals in bytes (DMA-6: not a
    non-DMA semaphore on hardware, where a copy counts 1) or a DMA-kind wait
    waits on: nothing else uses it (no plain signal, no semaphore-kind
    wait); the bytes its DMA halves deliver add up to what c's DMA waits
    take (nothing left at exit, the last wait can be met); and for each DMA
    wait, with N the bytes the waits up to it take, the copies that can
    start before it completes (a fast run with c frozen at the wait, RUN-3)
    deliver at least N (else it can never be met) and some of them deliver
    exactly N (else it always takes part of a copy). A bulk wait (one wait
    for several copies) and copies of different sizes from several cores
    pass; which copy a wait stands for is the race property's question.
    When every copy of the counter has one size s the frozen runs are not
    needed: N must be a multiple of s.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import time
from bisect import bisect_left, bisect_right
from collections import Counter as Multiset
from collections import defaultdict, deque
from operator import itemgetter
from typing import get_args

from semcheck.checker.replay import REPLAY_LIMIT
from semcheck.checker.verdict import Verdict, Witness
from semcheck.checker.z3.counters import (
    EncodingBug,
    Lowered,
    maximal_run,
    failure_reached,
    lower,
    s_prime_end,
    s_prime_run,
    truncate,
)
from semcheck.checker.z3.memo import MEMO
from semcheck.checker.z3.symmetry import find_rotation
from semcheck.model.dma import counts_bytes
from semcheck.model.fast import fast_run
from semcheck.model.ops import Barrier, DmaMode, ExitCheck, Program, SemType
from semcheck.model.run import run
from semcheck.model.semaphore import nonzero as nonzero_counts
from semcheck.model.step import is_hardware

WARNING = "Semaphore {} has non-zero count for {} (global core {}) at kernel exit: {}"


def _key_str(key) -> str:
    """A semaphore key in a report's words: the interpreter's id, or (HW-1) the allocation and index."""
    if key[0] == "internal":
        return f"semaphore {key[1]}"
    if key[0] == "fixed":
        return f"barrier semaphore {key[1]}"
    if key[0] == "site":
        return f"{key[1]}[{key[2]}]"
    if key[0] == "barrier":
        return "the barrier semaphore"
    return " ".join(str(part) for part in key)


def totals(low: Lowered) -> dict:
    """counter -> (contributed T, waited W).

    A function of the lowering alone, which the interpreter's two DMA modes share: computed once for both.
    """
    family = "hardware" if is_hardware(low.mode) else "interpreter"
    return MEMO.get(low.program, ("totals", family), lambda: _totals(low))


def _totals(low: Lowered) -> dict:
    out: dict = defaultdict(lambda: [0, 0])
    for x in low.contributions:
        out[x.counter][0] += x.amount
    for w in low.waits.values():
        out[w.counter][1] += w.value
    return {k: tuple(v) for k, v in out.items()}


def shared_s_prime_run(low: Lowered):
    """`s_prime_run(low)`, once per program and mode: S' runs a truncated copy of the program, a new
    object each time, so the per-program memo of `maximal_run` misses it (a fast run per check).
    (`s_prime_end` shares it between the interpreter's two modes, where only its end is needed.)"""
    return MEMO.get(low.program, ("s_prime_run", low.mode), lambda: s_prime_run(low))


def _precondition(prop: str, program: Program, mode: DmaMode, low: Lowered, stats: dict):
    if not low.ok:
        return Verdict(prop, "unknown", reason="the program is outside the encoding: " + "; ".join(low.unsupported[:3]),
                       stats=stats), None
    sp = s_prime_end(low)  # its positions and kind alone: shared by eager and on_wait
    fails = failure_reached(low, sp.pcs)
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


def exit_balance(program: Program, mode: DmaMode, *, timeout_ms: int = 30_000, warnings: bool = True) -> Verdict:
    """PROP-5 (see the module docstring).

    `warnings=False` skips the per-device warning analysis (a few fast runs, linear in the program).
    """
    prop = "exit-balance"
    t0 = time.perf_counter()
    low = lower(program, mode)
    stats: dict = dict(low.size())
    bad, sp = _precondition(prop, program, mode, low, stats)
    if bad is not None:
        return bad
    exiting = None
    if sp.kind == "completed":
        tot = totals(low)
    else:
        exiting, tot = _hung(program, low, sp.pcs)
        if not exiting:
            return Verdict(prop, "proved", reason="no run reaches a kernel exit: every run hangs before every device's "
                           "exit check (see deadlock-free), so no count is checked at an exit and the interpreter "
                           "prints no exit warning", stats=stats)
    excess = {k: t - w for k, (t, w) in tot.items() if t != w}
    if any(e < 0 for e in excess.values()):
        raise EncodingBug(f"a {sp.kind} program waits for more than it receives: {excess}")
    stats["counters"] = len(tot)
    stats["solve_s"] = round(time.perf_counter() - t0, 4)
    if not excess:
        if exiting is not None:
            return Verdict(prop, "proved", reason=f"the program hangs (see deadlock-free); {_devices(exiting)} "
                           f"{'reaches its' if len(exiting) == 1 else 'reach their'} exit check in every run and "
                           f"{'receives' if len(exiting) == 1 else 'receive'} exactly what "
                           f"{'it waits' if len(exiting) == 1 else 'they wait'} for on all {len(tot)} of "
                           f"{'its' if len(exiting) == 1 else 'their'} counters; the other devices never exit",
                           stats=stats)
        return Verdict(prop, "proved", reason=f"all {len(tot)} counters receive exactly what they wait for", stats=stats)

    real = maximal_run(program, mode)
    if len(real.schedule) <= REPLAY_LIMIT:  # the step relation copies its state per step: quadratic beyond
        replay = run(program, mode, real.schedule)
        if replay.state.pcs != real.state.pcs or replay.state.counts != real.state.counts:
            raise EncodingBug("the exit-balance witness does not replay")
    final = {k: real.state.counts.get(k, 0) for k in excess}
    pending = [d for d in real.pending_dmas]
    if exiting is not None:  # copies among the devices that hang are theirs, not an exit's
        mine = {c for d in exiting for c in program.topology.cores_of_device(d)}
        pending = [d for d in pending if d.src_core in mine or d.dst_core in mine]
    counters = [
        {"semaphore": _key_str(k[0]), "core": k[1], "contributed": tot[k][0], "waited": tot[k][1], "excess": e,
         "final_count_in_witness": final[k]}
        for k, e in sorted(excess.items(), key=repr)
    ]
    device_warn = _warnings(program, mode, low, excess) if warnings else {}
    if exiting is not None:  # the devices that hang never check: only the exiting ones have warnings to predict
        device_warn = {d: w for d, w in device_warn.items() if int(d) in exiting}
    lines = [f"{c['semaphore']} on core {c['core']}: receives {c['contributed']}, waits for {c['waited']}"
             for c in counters]
    msg = "unbalanced at exit: " + "; ".join(lines[:4]) + (f" (+{len(lines) - 4} more)" if len(lines) > 4 else "")
    if exiting is not None:
        msg = f"the program hangs (see deadlock-free), and devices that exit are {msg}"
    if pending:
        msg += f"; {len(pending)} DMA(s) never complete in the witness run"
    locs = []
    for k in excess:
        xs = low.by_counter.get(k, [])
        if xs:
            locs.append(program.cores[xs[-1].owner][xs[-1].pos].loc)
    details = {
        "counters": counters,
        "pending_dmas_in_witness": [{"src_core": d.src_core, "dst_core": d.dst_core, "nbytes": d.nbytes,
                                     "loc": str(d.loc)} for d in pending],
        "pending_dmas": "never" if mode != "on_wait" else ("may" if pending else "unknown"),
        "warnings": device_warn,
        "printed_in_witness": [WARNING.format(k[1] if len(k) > 1 else k[0], w.device, c, v)
                               for w in real.state.warnings for (k, c, v) in w.nonzero[:1]],
    }
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


def _prefix(items: list[tuple[int, int]]) -> tuple[list[int], list[int]]:
    """(positions, running totals) of (position, amount) pairs sorted by position."""
    pos, acc, t = [], [], 0
    for p, a in items:
        t += a
        pos.append(p)
        acc.append(t)
    return pos, acc


def _upto(table: tuple[list[int], list[int]] | None, q: int) -> int:
    """The total of the entries at positions < q."""
    if table is None:
        return 0
    j = bisect_left(table[0], q)
    return table[1][j - 1] if j else 0


class _Feeds:
    """Per counter: its total, its feeds per contributing core in program order, and its waits.

    `own[k][h]`: every contribution core h makes to k (signals, and DMA halves at their start's
    position); `sig[k][h]`: those that happen with their operation (signals; every half under
    eager). `streams[(k, h)]`: the DMAs core h starts into k (their write halves), for the
    knock-on bound: a write half that must have happened forces its read half.
    """

    def __init__(self, low: Lowered) -> None:
        eager = low.mode == "eager"
        self.total: dict = defaultdict(int)
        own: dict = defaultdict(lambda: defaultdict(list))
        sig: dict = defaultdict(lambda: defaultdict(list))
        for x in low.contributions:
            self.total[x.counter] += x.amount
            own[x.counter][x.owner].append((x.pos, x.amount))
            if eager or x.kind == "signal":
                sig[x.counter][x.owner].append((x.pos, x.amount))
        self.own = {k: {h: _prefix(sorted(v)) for h, v in d.items()} for k, d in own.items()}
        self.half_sizes = {(k, h): [a for _, a in v] for k, d in own.items() for h, v in d.items()}
        self.sig = {k: {h: _prefix(sorted(v)) for h, v in d.items()} for k, d in sig.items()}
        self.waits = {k: _prefix(sorted((w.pos, w.value) for w in ws)) for k, ws in low.waits_by_counter.items()}
        self.reads_from: dict = defaultdict(set)  # src counter -> {(dst counter, issuer)}
        streams: dict = defaultdict(list)
        if not eager:
            for d in low.dmas:
                streams[(d.dst_counter, d.core)].append(d)
                if d.src_counter is not None:
                    self.reads_from[d.src_counter].add((d.dst_counter, d.core))
        self.streams = dict(streams)

    def need(self, k, q: int) -> int:
        """What k's core has waited for on k once it has passed its operations before q."""
        return _upto(self.waits.get(k), q)

    def arrived_at_most(self, k, pcs) -> int:
        """Everything that can have arrived at k while each core h is at or before pcs[h]."""
        return sum(_upto(t, pcs[h]) for h, t in self.own.get(k, {}).items())

    def arrived_at_least(self, k, m) -> int:
        """A lower bound on what has arrived at k once each core h has passed its operations before m[h].

        Per contributing core h (disjoint parts): what h's operations before m[h] add with the
        operation itself; at least what the waits on k before m need from h (need - what all
        others can give), rounded up to what h's DMA halves can give (they come whole); and, for
        k's own core, the read halves forced by the write halves its DMAs' targets must have
        received (a write half follows its read half).
        """
        need = self.need(k, int(m[k[1]]))
        total = self.total.get(k, 0)
        sig = self.sig.get(k, {})
        lb = 0
        for h, (pos, acc) in self.own.get(k, {}).items():
            s = _upto(sig.get(h), int(m[h]))
            if h == k[1]:
                s += self._forced_reads(k, m)
            r = need - (total - acc[-1])
            if r > 0 and h not in sig:  # only DMA halves: some of them, whole
                sizes = self.half_sizes[(k, h)]
                r = -(-r // sizes[0]) * sizes[0] if len(set(sizes)) == 1 else max(r, min(sizes))
            lb += max(s, r)
        return max(lb, need)

    def _forced_reads(self, k, m) -> int:
        a = 0
        for k2, h in self.reads_from.get(k, ()):
            dmas = self.streams[(k2, h)]
            feed = self.own[k2][h][1][-1]
            # k2 must hold need(k2); the most everyone else can give is total - feed, and h's
            # contributions other than these write halves count too
            r = self.need(k2, int(m[k2[1]])) - (self.total[k2] - feed) - (feed - sum(x.dst_amount for x in dmas))
            if r <= 0:
                continue
            j, got = 0, 0
            for b in sorted((x.dst_amount for x in dmas), reverse=True):  # the fewest write halves that can give r
                if got >= r:
                    break
                got += b
                j += 1
            mine = [x.src_amount for x in dmas if x.src_counter == k]
            forced = j - (len(dmas) - len(mine))
            if forced > 0:
                a += forced * min(mine)
        return a


_VC_CELLS = 40_000_000  # lower-bound vectors kept (cells); beyond, "must" is left undecided


def must_have_passed(low: Lowered, targets: dict, feeds: _Feeds | None = None) -> dict | None:
    """For each target (core c, position x): m, a vector with m[h] <= h's position in every reachable
    state in which c is at x, m[c] = x; None when not computed (too large, or the program cannot
    complete, which the callers' preconditions exclude).

    One pass over the program in an order that respects the bounds (each wait after the
    contributions it cannot do without, each barrier after its partners reach it), keeping per
    core the vector of positions every run must have passed (vector clocks of the "must happen
    before" relation): a wait of cumulative need N on k needs, from each contributing core h,
    the shortest program-order prefix of h's contributions that gives N - (what all others can
    give); a barrier needs every participant at it. Linear in operations times cores (numpy).
    """
    import numpy as np

    feeds = feeds if feeds is not None else _Feeds(low)
    n = low.program.topology.num_cores
    lengths = low.lengths
    deps_at: list[dict] = [dict() for _ in range(n)]
    seen: dict = defaultdict(int)
    for (g, i), w in sorted(low.waits.items()):
        k = w.counter
        seen[k] += w.value
        need, total = seen[k], feeds.total.get(k, 0)
        if need > total:
            deps_at[g][i] = [(g, i + 1)]  # never passes (it waits for itself): g stops here
            continue
        ds = []
        for h, (pos, acc) in feeds.own.get(k, {}).items():
            r = need - (total - acc[-1])
            if r > 0:
                ds.append((h, pos[bisect_left(acc, r)] + 1))
        if ds:
            deps_at[g][i] = ds
    for (g, i), b in low.barriers.items():
        ds = []
        for p in b.participants:
            if p != g:
                q = low.barrier_pos.get((p, b.name, b.k))
                if q is None:  # a partner that never gets there: g stops here
                    ds = [(g, i + 1)]
                    break
                ds.append((p, q))
        if ds:
            deps_at[g].setdefault(i, []).extend(ds)
    stops = [sorted(d) for d in deps_at]
    if sum(map(len, stops)) * n > _VC_CELLS:
        return None
    done = [0] * n
    cur = [np.zeros(n, dtype=np.int64) for _ in range(n)]
    pts_pos: list[list[int]] = [[] for _ in range(n)]
    pts_vec: list[list] = [[] for _ in range(n)]
    nxt = [0] * n
    parked: list[list] = [[] for _ in range(n)]
    ready = deque(range(n))
    pending: dict = {}  # core -> the furthest target position on it not reached yet
    for c0, x in targets.values():
        pending[c0] = max(x, pending.get(c0, 0))

    def advance(g: int, to: int) -> None:
        done[g] = to
        heap = parked[g]
        while heap and heap[0][0] <= to:
            ready.append(heapq.heappop(heap)[1])
        if pending.get(g, to + 1) <= to:
            del pending[g]

    while ready and pending:  # a vector, once computed, is final: stop when every target has its own
        g = ready.popleft()
        while True:
            if nxt[g] == len(stops[g]):
                if done[g] < lengths[g]:
                    advance(g, lengths[g])
                break
            i = stops[g][nxt[g]]
            if done[g] < i:
                advance(g, i)
            ds = deps_at[g][i]
            late = next(((h, q) for h, q in ds if done[h] < q), None)
            if late is not None:
                heapq.heappush(parked[late[0]], (late[1], g))
                break
            new = cur[g].copy()
            for h, q in ds:
                j = bisect_right(pts_pos[h], q) - 1
                if j >= 0:
                    np.maximum(new, pts_vec[h][j], out=new)
                if new[h] < q:
                    new[h] = q
            cur[g] = new
            pts_pos[g].append(i + 1)
            pts_vec[g].append(new)
            nxt[g] += 1
            advance(g, i + 1)
    out = {}
    for d, (c0, x) in targets.items():
        if done[c0] < x:
            return None  # the bounds are not consistent with a completing run: decide nothing from them
        j = bisect_right(pts_pos[c0], x) - 1
        m = pts_vec[c0][j].copy() if j >= 0 else np.zeros(n, dtype=np.int64)
        m[c0] = x
        out[d] = m
    return out


def _frozen_at_checks(program: Program, mode: DmaMode, checks: dict):
    """One run with every checking core frozen just before its check and the rest run as far as they can,
    when that is what each device's own frozen run reaches too (the next operation after each check is a
    barrier of all checking cores, or none: passing a check then changes nothing any other core sees);
    else None."""
    cores = {c for c, _ in checks.values()}
    for c, x in checks.values():
        ops = program.cores[c]
        if x + 1 < len(ops) and not (isinstance(ops[x + 1], Barrier) and cores <= set(ops[x + 1].participants)):
            return None
    return fast_run(program, mode, freeze={c: x for c, x in checks.values()}, record=False)


def _orbit_rep(low: Lowered, checks: dict):
    """device -> the device whose answers it shares, under a rotation of the lowering that maps each
    device's check to its image's (RUN-6); the identity without one."""
    topo = low.program.topology
    ident = {d: d for d in checks}
    rot = find_rotation(low)
    if rot is None:
        return ident
    for d, (c0, x) in checks.items():
        img = rot.image(c0)
        if checks.get(topo.device_of(img)) != (img, x):
            return ident
    return {d: topo.device_of(rot.rep(c0)) for d, (c0, x) in checks.items()}


_SEARCH_EVENTS = 16  # delay candidates the exhaustive witness search accepts
_SEARCH_RUNS = 256  # restricted runs it may spend per device


def _zero_at_check(program, mode, out, c0: int, x: int, cores) -> bool:
    st = out.state
    return out.failure is None and st.pcs[c0] == x and not nonzero_counts(st.counts, cores)


def _quiet_run(program: Program, mode: DmaMode, low: Lowered, feeds: _Feeds, d: int, c0: int, x: int,
               m, exact: dict | None) -> bool | None:
    """True: a real run reaches device d's check with every count of d zero (no warning).
    False: proved that no run does (only by the exhaustive search). None: not decided.

    1. Every core capped at its lower bound m (the least it must have done), c0 at its check;
       under hardware, then also the DMA halves that still over-fill a counter suppressed
       (halves in flight at the check), the latest first.
    2. Eager and hardware, with the device's waits at the check known exactly (`exact`: counter
       -> what has been waited for at the check): a run reaching the check with every count zero
       exists iff some set D of contributions to the device's counters, of at least each counter's
       surplus e(k) = total - waited, can all be held back past the check, i.e. the restricted run
       (signals and eager halves: their core capped at them; hardware halves: suppressed) still
       brings c0 to its check (DR-2: restricted runs are persistent, so one run decides). Holding
       back more only makes that harder, so it suffices to try the covering sets of contributions
       that can each be held back alone, smallest first: an exhausted search proves "must".
    """
    topo = program.topology
    cores = topo.cores_of_device(d)
    hw = mode == "hardware"
    if m is not None:
        freeze = {g: int(q) for g, q in enumerate(m)}
        freeze[c0] = x
        out = fast_run(program, mode, freeze=freeze, record=False)
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
            if sup and _zero_at_check(program, mode, fast_run(program, mode, freeze=freeze, suppress=frozenset(sup),
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
                    events.append(("cap", y.owner, y.pos))
            else:
                events.append(("sup", y.owner, y.pos, "read" if y.kind == "dma_read" else "write"))
    events = list(dict.fromkeys(events))
    if len(events) > _SEARCH_EVENTS:
        return None
    runs = 0

    def restricted(ds) -> tuple[dict, frozenset]:
        freeze = {c0: x}
        sup = set()
        for e in ds:
            if e[0] == "cap":
                freeze[e[1]] = min(e[2], freeze.get(e[1], e[2]))
            else:
                sup.add(e[1:])
        return freeze, frozenset(sup)

    def covers(freeze, sup) -> bool:
        for k, e in surplus.items():
            held = 0
            for y in low.by_counter.get(k, ()):
                if y.pos >= freeze.get(y.owner, y.pos + 1) or (y.kind != "signal" and not eager and (
                        (y.owner, y.pos, "read") in sup or (y.kind == "dma_write" and (y.owner, y.pos, "write") in sup))):
                    held += y.amount
            if held < e:
                return False
        return True

    def reaches(ds) -> bool:
        nonlocal runs
        runs += 1
        freeze, sup = restricted(ds)
        out = fast_run(program, mode, freeze=freeze, suppress=sup, record=False)
        return out.failure is None and out.state.pcs[c0] == x

    alone = [e for e in events if reaches((e,))]
    failed: list[frozenset] = []
    for size in range(1, len(alone) + 1):
        for ds in itertools.combinations(alone, size):
            s = frozenset(ds)
            if any(f <= s for f in failed):
                continue
            freeze, sup = restricted(ds)
            if not covers(freeze, sup):
                continue
            if runs >= _SEARCH_RUNS:
                return None
            runs += 1
            out = fast_run(program, mode, freeze=freeze, suppress=sup, record=False)
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


def _warnings(program: Program, mode: DmaMode, low: Lowered, excess: dict) -> dict:
    """Per device: 'never' | 'may' | 'must' | 'unknown' (+ an example line); see PROP-5 in specs/semantics.md.

    may: a run (all checking cores frozen before their checks, the rest as far as they can go)
    in which the check sees a non-zero count. never: even counting everything that can have
    arrived by then, less the least that must have been waited for, every count is zero. must: a
    lower bound on what must have arrived exceeds what can have been waited for. not_must: a
    run reaching the check with every count zero (restricted fast runs, `_quiet_run`).
    """
    topo = program.topology
    checks = _exit_checks(program)
    if not checks:
        return {}
    feeds = _Feeds(low)
    counters: dict = defaultdict(list)
    for k in set(feeds.total) | set(feeds.waits):
        counters[topo.device_of(k[1])].append(k)
    frozen = _frozen_at_checks(program, mode, checks)
    bounds = must_have_passed(low, checks, feeds)
    drained = _drained_at_checks(low, checks) if mode == "on_wait" else frozenset()
    rep = _orbit_rep(low, checks)
    quiet: dict = {}
    out = {}
    for d, (c0, x) in sorted(checks.items()):
        cores = set(topo.cores_of_device(d))
        mine = sorted(counters.get(d, ()), key=repr)
        f = frozen if frozen is not None else fast_run(program, mode, freeze={c0: x}, record=False)
        if f.failure is not None or f.state.pcs[c0] != x:
            out[str(d)] = {"behaviour": "unknown", "note": "the frozen run does not reach the check"}
            continue
        pcs = f.state.pcs
        m = bounds.get(d) if bounds is not None else None
        lo = m if m is not None else [x if g == c0 else 0 for g in range(topo.num_cores)]
        hi = list(pcs)
        # waits done at the check: at least those before lo, at most those before hi (c0: exactly before x)
        w_lo = {k: feeds.need(k, int(lo[k[1]])) for k in mine}
        w_hi = {k: feeds.need(k, x if k[1] == c0 else hi[k[1]]) for k in mine}
        exact = w_lo if w_lo == w_hi else None
        nonzero = {k: v for k in mine if (v := f.state.counts.get(k, 0))}
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


# --- dma-bytes ----------------------------------------------------------------------------


def dma_bytes(program: Program, mode: DmaMode, *, timeout_ms: int = 30_000, exits: bool = True) -> Verdict:
    """PROP-6 (see the module docstring).

    Decided on the lowering and, for a counter whose copies differ in size, one frozen run per
    DMA wait (which copies can have started before it completes); the frozen runs follow `mode`.
    `exits=False`: the program's runs never reach the kernel's exit (the prefix every run takes
    before an ERR-9 failure, `checker.failing_runs`), so bytes delivered and never waited for are
    not left at an exit: only the waits are judged.
    """
    return MEMO.get(program, ("dma-bytes", mode, exits), lambda: _dma_bytes_once(program, mode, exits))


def _dma_bytes_once(program: Program, mode: DmaMode, exits: bool) -> Verdict:
    # eager and on_wait share the lowering and add the same amounts (DMA-6); only the frozen runs
    # follow the mode. A verdict reached without one is both modes': it is decided once for both.
    shared = None if is_hardware(mode) else MEMO.table(program)
    hit = shared.get(("dma-bytes", "interpreter", exits)) if shared is not None else None
    if hit is not None:
        return dataclasses.replace(hit)
    verdict, runs = _dma_bytes(program, mode, exits)
    if shared is not None and runs == 0:
        shared[("dma-bytes", "interpreter", exits)] = verdict
    return verdict


# sort keys read in C from the NamedTuple records: a contribution's (owner, pos), a wait's pos
_OWNER_POS = itemgetter(0, 1)
_POS = itemgetter(1)

# Sub-multisets of the copies that may have arrived, per wait, beyond which the verdict is unknown.
DMA_BYTES_BUDGET = 20_000


def _dma_bytes(program: Program, mode: DmaMode, exits: bool = True) -> tuple[Verdict, int]:
    """The verdict, and how many frozen runs (which follow `mode`) it took."""
    prop = "dma-bytes"
    low = lower(program, mode)
    stats: dict = dict(low.size())
    if not low.ok:
        return Verdict(prop, "unknown", reason="the program is outside the encoding: " + "; ".join(low.unsupported[:3]),
                       stats=stats), 0
    # Whether a copy's half counts bytes (DMA-6) depends on its semaphore's type and the mode; one
    # counted as 1 is a plain count, like a signal. Asked only when some type counts 1 (hardware),
    # and decided once per pair of types.
    by_types: dict[tuple, tuple[bool, bool]] = {}

    def counted_in_bytes(x) -> bool:
        op = program.cores[x.owner][x.pos]
        types = (op.src_sem_type, op.dst_sem_type)
        h = by_types.get(types)
        if h is None:
            h = by_types[types] = (counts_bytes(types[0], mode), counts_bytes(types[1], mode))
        return h[x.kind == "dma_write"]

    every_half_in_bytes = all(counts_bytes(t, mode) for t in get_args(SemType))
    # each counter's contributions split once (in contribution order, as the messages below expect)
    byte_x: dict = {}
    plain_x: dict = {}
    for k, xs in low.by_counter.items():
        if every_half_in_bytes:
            copies = [x for x in xs if x.kind != "signal"]
        else:
            copies = [x for x in xs if x.kind != "signal" and counted_in_bytes(x)]
        if copies:
            byte_x[k] = copies
        if len(copies) != len(xs):
            plain_x[k] = [x for x in xs if x.kind == "signal" or not (every_half_in_bytes or counted_in_bytes(x))]
    counters = set(byte_x)
    counters.update(k for k, ws in low.waits_by_counter.items() if any(w.kind == "dma" for w in ws))
    undecided = []
    checked = 0
    runs = 0
    frozen: dict = {}  # (core, pos) -> positions of the run frozen there

    def positions(core: int, pos: int):
        nonlocal runs
        hit = frozen.get((core, pos))
        if hit is None:
            runs += 1
            out = fast_run(program, mode, freeze={core: pos}, record=False)
            hit = frozen[(core, pos)] = None if out.failure is not None else out.state.pcs
        return hit

    for k in sorted(counters, key=repr):
        ws = low.waits_by_counter.get(k, [])
        dma_x = sorted(byte_x.get(k, ()), key=_OWNER_POS)
        sig_x = plain_x.get(k, [])
        sem_w = [w for w in ws if w.kind != "dma"]
        dma_w = sorted((w for w in ws if w.kind == "dma"), key=_POS)
        checked += 1
        where = f"{_key_str(k[0])} on core {k[1]}"
        if sig_x or sem_w:
            other = sig_x[0] if sig_x else sem_w[0]
            loc = program.cores[other.owner][other.pos].loc if sig_x else other.loc
            what = ("a semaphore wait" if not sig_x else "a plain signal" if sig_x[0].kind == "signal"
                    else "a copy counted as 1 (a non-DMA semaphore on hardware, DMA-6)")
            return _violated(prop, f"{where} is used by DMAs and by {what} ({loc})", [loc], stats,
                             {"semaphore": _key_str(k[0]), "core": k[1], "problem": "mixed"}), runs
        sizes, values = [x.amount for x in dma_x], [w.value for w in dma_w]
        details = {"semaphore": _key_str(k[0]), "core": k[1], "delivered": sizes, "waited": values}
        if sum(sizes) < sum(values) or (exits and sum(sizes) > sum(values)):
            locs = [w.loc for w in dma_w[:1]] + [program.cores[x.owner][x.pos].loc for x in dma_x[:1]]
            what = ("bytes are left at exit" if sum(sizes) > sum(values)
                    else "the last DMA wait can never be met")
            return _violated(prop, f"{where}: DMAs deliver {sizes} bytes ({sum(sizes)} in all), DMA waits expect "
                             f"{values} ({sum(values)} in all): {what}", locs, stats,
                             {**details, "problem": "bytes"}), runs
        one_size = len(set(sizes)) == 1  # once per counter: per wait it was quadratic in the copies
        if not sizes:
            continue  # no copy and no wait reached (exits=False): nothing to judge
        if one_size and (sizes[0] == 0 or all(t % sizes[0] == 0 for t in itertools.accumulate(values))):
            # the loop below would pass every wait: they all take whole copies (copies of 0 bytes, a
            # size that is data, ACC-7: the sums above agree, so every wait is of 0 bytes too)
            continue
        need = 0
        for n, w in enumerate(dma_w):
            need += w.value
            if one_size:
                # one size s: the waits up to here take whole copies iff s divides what they take
                if need % sizes[0] == 0:
                    continue
                may = sizes
            else:
                pcs = positions(w.core, w.pos)
                if pcs is None:
                    undecided.append(f"{where} (a run frozen at wait #{n + 1} fails)")
                    break
                if pcs[w.core] < w.pos:
                    continue  # the core never reaches this wait: a deadlock, PROP-4's to report
                may = [x.amount for x in dma_x if pcs[x.owner] > x.pos]
            answer = _whole_copies(may, need)
            if answer == "ok":
                continue
            locs = [w.loc] + [program.cores[x.owner][x.pos].loc for x in dma_x[:1]]
            if answer == "short":
                return _violated(
                    prop, f"{where}: DMA wait #{n + 1} ({w.loc}) can never be met: the waits up to it need {need} "
                    f"bytes, the copies that can start before it completes deliver {sum(may)}", locs, stats,
                    {**details, "problem": "never-met", "wait": n + 1, "may_have_arrived": sorted(may)}), runs
            if answer == "never":
                return _violated(
                    prop, f"{where}: DMA wait #{n + 1} ({w.loc}) completes when the waits up to it have taken {need} "
                    f"bytes, which no set of the copies that can have arrived ({sorted(may)}) delivers: in every "
                    "run it takes part of a copy", locs, stats,
                    {**details, "problem": "partial", "wait": n + 1, "may_have_arrived": sorted(may)}), runs
            undecided.append(f"{where} (wait #{n + 1} at {w.loc}: too many copies to decide)")
            break
    stats["counters"] = checked
    stats["frozen_runs"] = runs
    if undecided:
        return Verdict(prop, "unknown", reason="undecided: " + ", ".join(undecided[:3]), stats=stats), runs
    return Verdict(prop, "proved", reason=f"{checked} DMA semaphores: every DMA wait can be met on whole copies "
                   "and every byte delivered is waited for", stats=stats), runs


def _whole_copies(may: list[int], need: int) -> str:
    """Whether some copies among `may` (sizes) sum to exactly `need`: "ok", "short" (all of them
    give less), "never" (no combination does) or "budget" (too large to decide)."""
    if sum(may) < need:
        return "short"
    g = 0
    for s in may:
        g = _gcd(g, s)
    if g == 0 or need % g:
        return "never" if need else "ok"
    target = need // g
    if target > DMA_BYTES_BUDGET * 500:
        return "budget"
    mask = (1 << (target + 1)) - 1
    reach = 1
    for s in may:
        reach = (reach | (reach << (s // g))) & mask
        if reach >> target & 1:
            return "ok"
    return "ok" if reach >> target & 1 else "never"


def _gcd(a: int, b: int) -> int:
    while b:
        a, b = b, a % b
    return a


def _violated(prop: str, msg: str, locs, stats: dict, details: dict) -> Verdict:
    return Verdict(prop, "violated", witness=Witness(message=msg, locs=tuple(locs), details=details,
                                                      hint="wait on each copy's own descriptor for its own size"),
                   stats=stats)


__all__ = ["dma_bytes", "exit_balance", "must_have_passed", "shared_s_prime_run", "totals", "truncate"]
