"""`deadlock-free` as a naive bounded encoding with one timestamp per event (the SMT baseline).

This is the encoding one writes first, and the one the stuck-vector query
(`semcheck.checker.z3.deadlock`) is measured against; bench/encodings.py runs both. It guesses a schedule: every operation
(c, i) gets an integer timestamp `t[c][i]`, and is executed iff `i < q[c]`.

* program order: `t[c][i] < t[c][i+1]`;
* DMA halves: under `eager` both halves happen at the start's timestamp;
  under `hardware` they get their own timestamps, start < read < write.
  Under `on_wait` they are treated like `hardware` (free halves): that is a
  superset of the on_wait runs, and deadlock is still decided exactly,
  because the terminal positions of both are the least stuck vector of the
  same counters (RUN-3);
* an executed wait (c, i) saw enough: the contributions executed strictly
  before `t[c][i]` minus c's own earlier waits on the counter reach the value;
* an executed barrier passed: every participant had executed everything
  before its matching barrier, strictly before;
* the end state is stuck and not finished (as in `deadlock.py`).

A model orders the executed events by timestamp (waits and barriers first
among equal timestamps), which is a real schedule to the same positions. The
wait constraints sum over every contribution to the counter, so the formula
has (waits x contributions) terms: cubic in the device count for a ring.
Same preconditions and verdict rules as `semcheck.checker.properties.deadlock`.

Only the bench's baseline (and its tests) use it: no property is decided with
it (exit-balance's warnings once asked it "can A arrive before B?", which took
minutes at 8 devices; they now use restricted fast runs, spec PROP-5).
"""

from __future__ import annotations

import time

import z3

from semcheck.checker.properties.verdict import Verdict
from semcheck.checker.properties.deadlock import PROPERTY
from semcheck.checker.properties.deadlock_explanation import deadlock_witness
from integer_encodings import Encoding  # bench/, this module's directory
from semcheck.checker.static.system import EncodingBug, Lowered
from semcheck.checker.static.least_stuck import maximal_run, failure_reached, s_prime_run
from semcheck.checker.static.lowering import lower
from semcheck.model.ops import DmaMode, Program
from semcheck.model.semaphore import shortfall


class Timestamped:
    """Reachability constraints over timestamps, plus the terminal stuck condition."""

    def __init__(self, low: Lowered, *, terminal: bool = True) -> None:
        """`terminal=False`: only the reachability constraints (any reachable configuration), for experiments."""
        self.low = low
        prog = low.program
        n = prog.topology.num_cores
        self.stuck = Encoding(low, style="plain")
        self.q = self.stuck.q
        self.t = [[z3.Int(f"t{c}_{i}") for i in range(low.held_at(c))] for c in range(n)]
        self.terms = 0
        eager = low.mode == "eager"
        self.half_time = {}
        parts = []
        for d in low.dmas:
            start = self.t[d.core][d.pos]
            if eager:
                self.half_time[(d.ident, "dma_read")] = start
                self.half_time[(d.ident, "dma_write")] = start
            else:
                tr, tw = z3.Int(f"r{d.ident}"), z3.Int(f"w{d.ident}")
                self.half_time[(d.ident, "dma_read")] = tr
                self.half_time[(d.ident, "dma_write")] = tw
                parts += [start < tr, tr < tw]
        for c in range(n):
            for i in range(low.held_at(c) - 1):
                parts.append(self.t[c][i] < self.t[c][i + 1])
        for c in range(n):
            parts += [self.q[c] >= 0, self.q[c] <= low.held_at(c)]
        for (c, i), w in low.waits.items():
            waited = sum(m.value for m in low.waits_by_counter[w.counter] if m.pos < i)
            have = self.arrived_before(w.counter, self.t[c][i])
            parts.append(z3.Implies(self.q[c] > i, shortfall(have - waited, w.value) <= 0))  # SEM-5
        for (c, i), b in low.barriers.items():
            if i >= low.held_at(c):
                continue
            now = self.t[c][i]
            conds = []
            for p in sorted(b.participants):
                if p == c:
                    continue
                pos = low.barrier_pos.get((p, b.name, b.k))
                if pos is None or pos > low.held_at(p):
                    conds = [z3.BoolVal(False)]
                    break
                conds.append(self.q[p] >= pos)
                if pos > 0:
                    conds.append(self.t[p][pos - 1] < now)
            parts.append(z3.Implies(self.q[c] > i, z3.And(conds)))
        if terminal:
            parts.append(self.stuck.formula)
        self.formula = z3.And(parts)

    def when(self, x):
        """The timestamp of contribution x."""
        return self.t[x.owner][x.pos] if x.kind == "signal" else self.half_time[(x.dma, x.kind)]

    def arrived_before(self, counter, now):
        """Everything executed strictly before `now` contributes to `counter`."""
        terms = [z3.If(z3.And(self.q[x.owner] > x.pos, self.when(x) < now), x.amount, 0)
                 for x in self.low.by_counter.get(counter, ())]
        self.terms += len(terms)
        return z3.Sum(terms) if terms else z3.IntVal(0)

    def waited_before(self, counter, now):
        terms = [z3.If(z3.And(self.q[w.core] > w.pos, self.t[w.core][w.pos] < now), w.value, 0)
                 for w in self.low.waits_by_counter.get(counter, ())]
        self.terms += len(terms)
        return z3.Sum(terms) if terms else z3.IntVal(0)

    def stats(self) -> dict:
        return {
            "encoding": "timestamped",
            "vars": len(self.q) + sum(len(x) for x in self.t) + len(self.half_time) // 1,
            "ite_terms": self.terms + self.stuck.ite_terms,
            "disjuncts": self.stuck.disjuncts,
        }


def deadlock_free_timestamped(program: Program, mode: DmaMode, *, timeout_ms: int = 30_000) -> Verdict:
    """`deadlock-free` decided by the timestamped encoding (same verdict rules as `deadlock_free`)."""
    stats: dict = {"mode": mode}
    low = lower(program, mode)
    stats.update(low.size())
    if not low.ok:
        return Verdict(PROPERTY, "unknown", reason="the program is outside the encoding: " + "; ".join(low.unsupported[:3]),
                       stats=stats)
    sp = s_prime_run(low)
    fails = failure_reached(low, sp.state.pcs)
    if fails:
        c, pos, v = fails[0]
        return Verdict(PROPERTY, "unknown", reason=f"the program can fail ({v.message} at core {c} op {pos})", stats=stats)
    t0 = time.perf_counter()
    enc = Timestamped(low)
    solver = z3.SolverFor("QF_LIA")
    solver.set("timeout", int(timeout_ms))
    solver.add(enc.formula)
    stats["encode_s"] = round(time.perf_counter() - t0, 4)
    stats.update(enc.stats())
    t1 = time.perf_counter()
    res = solver.check()
    stats["solve_s"] = round(time.perf_counter() - t1, 4)
    stats["z3"] = str(res)
    if res == z3.unknown:
        return Verdict(PROPERTY, "unknown", reason=f"z3 gave up: {solver.reason_unknown()}", stats=stats)
    real = maximal_run(program, mode)
    if res == z3.unsat:
        if real.kind != "completed":
            raise EncodingBug(f"timestamped encoding proved deadlock freedom but the fast run ends in {real.kind}")
        return Verdict(PROPERTY, "proved", stats=stats)
    if real.kind != "deadlock":
        raise EncodingBug(f"timestamped encoding found a deadlock but the fast run ends in {real.kind}")
    return Verdict(PROPERTY, "violated", witness=deadlock_witness(program, mode, real, low), stats=stats)
