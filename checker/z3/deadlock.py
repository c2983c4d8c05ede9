"""`deadlock-free` (PROP-4) as one Z3 query: is there a stuck vector other than the end?

Encoding (the least-stuck-vector argument, spec RUN-3). Integer variables
`q[c]`, the number of operations core c has executed. For a vector q,

    cnt_q(s, t) = sum over contributions j to counter (s, t) of If(pos_j < q[owner_j], amount_j, 0)
                - sum over t's waits m on (s, t) of If(pos_m < q[t], value_m, 0)

where the contributions are signals and *both* halves of every DMA started in
the prefixes (in a terminal state every started DMA half has run: under
`hardware` no DMA is in flight; under `on_wait` a blocked waiter has emptied
its task queue, so every half towards its counter has run; under `eager`
halves run at the start). `stuck(q)` holds when every core c has
`q[c] = L[c]`, or sits at a wait with `cnt_q < value`, or at a barrier some
participant has not reached within q (the k-th barrier named n of p is at a
position <= q[p]), or at the operation where it would fail (S', see
`lowering`). The query is `stuck(q) and q != L`:

* unsat: no terminal state has an unfinished core -> **proved**;
* sat: some stuck q != L exists; the terminal state p* of every maximal run
  is the least stuck vector (p* <= q), so p* != L is a real deadlock. We take
  p* from the model's fast run, check it is a deadlock and p* <= q, replay its
  schedule on the step relation, and report it -> **violated**.

Two encodings of cnt_q are offered: `plain`, literally the sums above, and
`compact` (default), which is equivalent but folds what is constant once
`q[c] = i` is fixed (the waiter's own contributions and own earlier waits),
and turns a counter fed by one other core into a single comparison
`q[o] < threshold`.

Soundness conditions, checked before encoding (otherwise **unknown**): the
lowering must be static (`lowering.Lowered.unsupported` empty), and no
failure may be reachable (S' must not stop at a failing operation), because a
failure can end some runs before a deadlock that other runs reach.
"""

from __future__ import annotations

import time
from collections import defaultdict

import z3

from semcheck.checker.verdict import Verdict, Witness
from semcheck.checker.z3.lowering import (
    EncodingBug,
    Lowered,
    complete,
    describe_op,
    failure_reached,
    lower,
    s_prime_run,
)
from semcheck.model.explore import ExplorationLimit, explore
from semcheck.model.fast import fast_run
from semcheck.model.ops import DmaMode, Program, Wait
from semcheck.model.run import run
from semcheck.model.state import Outcome

PROPERTY = "deadlock-free"


class Encoding:
    """The stuck-vector formula of one lowered program."""

    def __init__(self, low: Lowered, *, style: str = "compact", drop: frozenset[str] = frozenset()) -> None:
        """`drop` removes constraint families (mutation testing only): "dma", "signal", "barrier", "own_waits"."""
        if style not in ("compact", "plain"):
            raise ValueError(f"unknown encoding style {style!r}")
        self.low = low
        self.style = style
        self.drop = drop
        n = low.program.topology.num_cores
        self.q = [z3.Int(f"q{c}") for c in range(n)]
        self.ite_terms = 0
        self.thresholds = 0
        self.disjuncts = 0
        self._sum_cache: dict = {}
        self.formula = self._build()

    # -- counts ------------------------------------------------------------------------

    def _contribs(self, counter) -> list:
        out = []
        for x in self.low.by_counter.get(counter, ()):
            if "dma" in self.drop and x.kind != "signal":
                continue
            if "signal" in self.drop and x.kind == "signal":
                continue
            out.append(x)
        return out

    def _owner_sum(self, counter, owner: int, contribs: list):
        key = (counter, owner)
        if key not in self._sum_cache:
            merged: dict[int, int] = defaultdict(int)
            for x in contribs:
                merged[x.pos] += x.amount
            terms = [z3.If(self.q[owner] > pos, amt, 0) for pos, amt in sorted(merged.items()) if amt]
            self.ite_terms += len(terms)
            self._sum_cache[key] = z3.Sum(terms) if terms else z3.IntVal(0)
        return self._sum_cache[key]

    def _plain_count(self, counter):
        key = ("plain", counter)
        if key not in self._sum_cache:
            terms = [z3.If(self.q[x.owner] > x.pos, x.amount, 0) for x in self._contribs(counter)]
            if "own_waits" not in self.drop:
                terms += [z3.If(self.q[w.core] > w.pos, -w.value, 0) for w in self.low.waits_by_counter.get(counter, ())]
            self.ite_terms += len(terms)
            self._sum_cache[key] = z3.Sum(terms) if terms else z3.IntVal(0)
        return self._sum_cache[key]

    def wait_blocked(self, c: int, i: int):
        """cnt_q(s, c) < value, given q[c] = i."""
        w = self.low.waits[(c, i)]
        if self.style == "plain":
            return self._plain_count(w.counter) < w.value
        contribs = self._contribs(w.counter)
        own = sum(x.amount for x in contribs if x.owner == c and x.pos < i)
        waited = 0 if "own_waits" in self.drop else sum(
            m.value for m in self.low.waits_by_counter[w.counter] if m.pos < i
        )
        need = w.value - own + waited  # blocked iff foreign contributions < need
        if need <= 0:
            return z3.BoolVal(False)
        by_owner: dict[int, list] = defaultdict(list)
        for x in contribs:
            if x.owner != c:
                by_owner[x.owner].append(x)
        if not by_owner:
            return z3.BoolVal(True)
        if len(by_owner) == 1:
            (o, xs), = by_owner.items()
            acc = 0
            for x in sorted(xs, key=lambda x: x.pos):
                acc += x.amount
                if acc >= need:
                    self.thresholds += 1
                    return self.q[o] <= x.pos  # fewer than need arrived iff o has not executed x.pos
            return z3.BoolVal(True)
        return z3.Sum([self._owner_sum(w.counter, o, xs) for o, xs in sorted(by_owner.items())]) < need

    def barrier_blocked(self, c: int, i: int):
        b = self.low.barriers[(c, i)]
        if "barrier" in self.drop:
            return z3.BoolVal(False)
        parts = []
        for p in sorted(b.participants):
            pos = self.low.barrier_pos.get((p, b.name, b.k))
            if pos is None:
                return z3.BoolVal(True)
            if p != c:
                parts.append(self.q[p] < pos)
        return z3.Or(parts) if parts else z3.BoolVal(False)

    # -- the query --------------------------------------------------------------------

    def stuck_core(self, c: int):
        low = self.low
        L = low.lengths[c]
        cap = low.cap(c)
        q = self.q[c]
        alts = [q == cap]  # finished (cap = L) or blocked at the failing op
        for i in range(cap):
            if (c, i) in low.waits:
                cond = self.wait_blocked(c, i)
            elif (c, i) in low.barriers:
                cond = self.barrier_blocked(c, i)
            else:
                continue
            if z3.is_false(cond):
                continue
            alts.append(z3.And(q == i, cond))
        self.disjuncts += len(alts)
        del L
        return z3.Or(alts)

    def _build(self):
        low = self.low
        n = low.program.topology.num_cores
        parts = []
        for c in range(n):
            parts.append(self.q[c] >= 0)
            parts.append(self.q[c] <= low.cap(c))
            parts.append(self.stuck_core(c))
        parts.append(z3.Or([self.q[c] < low.lengths[c] for c in range(n)]))
        return z3.And(parts)

    def stats(self) -> dict:
        return {
            "encoding": self.style,
            "vars": len(self.q),
            "ite_terms": self.ite_terms,
            "threshold_atoms": self.thresholds,
            "disjuncts": self.disjuncts,
        }

    def stuck_at(self, pcs) -> bool:
        """Evaluate stuck(q) at a concrete vector (ignoring `q != L`)."""
        s = z3.Solver()
        s.add(*[self.q[c] == v for c, v in enumerate(pcs)])
        parts = [self.stuck_core(c) for c in range(len(pcs))]
        s.add(z3.And(parts))
        return s.check() == z3.sat


def deadlock_free(
    program: Program,
    mode: DmaMode,
    *,
    timeout_ms: int = 30_000,
    encoding: str = "compact",
    fallback_states: int = 0,
    _drop: frozenset[str] = frozenset(),
) -> Verdict:
    """Decide `deadlock-free` for `program` under `mode` (see the module docstring).

    `fallback_states > 0` lets the exhaustive explorer decide programs the
    encoding must refuse (unsupported lowering, reachable failures), within
    that many states. `_drop` mutates the encoding (tests only).
    """
    stats: dict = {"mode": mode}
    t0 = time.perf_counter()
    low = lower(program, mode)
    stats["lower_s"] = round(time.perf_counter() - t0, 4)
    stats.update(low.size())
    if not low.ok:
        return _fallback(program, mode, "the program is outside the encoding: " + "; ".join(low.unsupported[:3]),
                         fallback_states, stats)
    t1 = time.perf_counter()
    sp = s_prime_run(low)
    stats["s_prime_s"] = round(time.perf_counter() - t1, 4)
    fails = failure_reached(low, sp.state.pcs)
    if fails:
        c, pos, v = fails[0]
        return _fallback(
            program, mode,
            f"the program can fail ({v.message} at core {c} op {pos}, {program.cores[c][pos].loc}); "
            "with failures, whether a run deadlocks depends on the schedule",
            fallback_states, stats,
        )

    t2 = time.perf_counter()
    enc = Encoding(low, style=encoding, drop=_drop)
    solver = z3.SolverFor("QF_LIA")
    solver.set("timeout", int(timeout_ms))
    solver.add(enc.formula)
    stats["encode_s"] = round(time.perf_counter() - t2, 4)
    stats.update(enc.stats())
    t3 = time.perf_counter()
    res = solver.check()
    stats["solve_s"] = round(time.perf_counter() - t3, 4)
    stats["z3"] = str(res)
    if res == z3.unknown:
        return Verdict(PROPERTY, "unknown", reason=f"z3 gave up: {solver.reason_unknown()}", stats=stats)

    real = complete(program, mode, fast_run(program, mode))
    if real.state.pcs != sp.state.pcs:
        raise EncodingBug(f"S' and the real fast run end at different positions: {sp.state.pcs} vs {real.state.pcs}")
    if res == z3.unsat:
        if real.kind != "completed":
            raise EncodingBug(f"z3 proved deadlock freedom but the fast run ends in {real.kind}: {real.blocked}")
        return Verdict(PROPERTY, "proved", stats=stats)

    m = solver.model()
    q = [m.eval(v, model_completion=True).as_long() for v in enc.q]
    if real.kind != "deadlock":
        raise EncodingBug(f"z3 found a stuck vector {q} but the fast run ends in {real.kind}")
    pstar = real.state.pcs
    if any(a > b for a, b in zip(pstar, q)):
        raise EncodingBug(f"the fast run's terminal {pstar} is not below the stuck vector {q}")
    stats["stuck_vector"] = q
    return Verdict(PROPERTY, "violated", witness=deadlock_witness(program, mode, real, low), stats=stats)


def deadlock_witness(program: Program, mode: DmaMode, out: Outcome, low: Lowered | None = None) -> Witness:
    """Replay `out.schedule` on the step relation and describe the blocked cores."""
    replay = run(program, mode, out.schedule)
    if replay.kind != "deadlock" or replay.state.pcs != out.state.pcs:
        raise EncodingBug(f"the witness schedule replays to {replay.kind} at {replay.state.pcs}, not {out.state.pcs}")
    blocked, details, lines = [], [], []
    for b in out.blocked:
        entry = {"core": b.core, "pc": b.pc, "op": describe_op(b.op), "loc": str(b.op.loc)}
        if isinstance(b.op, Wait) and low is not None and (b.core, b.pc) in low.waits:
            w = low.waits[(b.core, b.pc)]
            have = out.state.counts.get(w.counter, 0)
            entry.update(semaphore=repr(w.counter[0]), count=have, needs=w.value)
            lines.append(f"core {b.core} waits for {w.value} on {b.op.sem} ({w.counter[0]}), count {have} ({b.op.loc})")
        else:
            lines.append(f"core {b.core} {b.reason} ({b.op.loc})")
        blocked.append((b.core, b.pc, b.reason))
        details.append(entry)
    return Witness(
        message="deadlock: " + "; ".join(lines),
        schedule=tuple(out.schedule),
        blocked=tuple(blocked),
        locs=tuple(b.op.loc for b in out.blocked),
        details={"blocked": details, "terminal_pcs": list(out.state.pcs), "lengths": [len(c) for c in program.cores]},
    )


def _fallback(program: Program, mode: DmaMode, reason: str, states: int, stats: dict) -> Verdict:
    if states <= 0:
        return Verdict(PROPERTY, "unknown", reason=reason, stats=stats)
    try:
        ex = explore(program, mode, max_states=states)
    except ExplorationLimit:
        return Verdict(PROPERTY, "unknown", reason=f"{reason}; the explorer exceeded {states} states", stats=stats)
    stats = dict(stats, decided_by="explorer", states=ex.states)
    dead = [o for o in ex.outcomes if o.kind == "deadlock"]
    if not dead:
        return Verdict(PROPERTY, "proved", reason=f"decided by exhaustive exploration ({reason})", stats=stats)
    return Verdict(PROPERTY, "violated", reason=f"decided by exhaustive exploration ({reason})",
                   witness=deadlock_witness(program, mode, dead[0]), stats=stats)
