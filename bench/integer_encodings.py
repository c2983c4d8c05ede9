"""The integer renderings of the deadlock-free certificate's query: a measurement, not the product.

`plain` writes the stuck-vector query's sums literally over integer positions q[c]; `compact`
folds what is constant once q[c] is fixed and turns a counter fed by one other core into one
comparison. Both ask the question `semcheck.checker.z3.deadlock.OrderEncoding` asks; importing
this module makes them available as `deadlock_free(..., encoding="plain" | "compact")`.
"""

from __future__ import annotations

import z3

from semcheck.checker.static.system import Lowered
from semcheck.checker.z3.deadlock import ENCODINGS, BlockCondition, Conditions
from semcheck.model.semaphore import shortfall


class Encoding:
    """The stuck-vector formula over integer positions q[c] (styles "plain" and "compact")."""

    def __init__(self, low: Lowered, *, style: str = "compact", drop: frozenset[str] = frozenset()) -> None:
        """`drop` removes constraint families (mutation testing only): "dma", "signal", "barrier", "own_waits"."""
        if style not in ("compact", "plain"):
            raise ValueError(f"unknown encoding style {style!r}")
        self.low = low
        self.style = style
        self.drop = drop
        self.cond = Conditions(low, drop)
        n = low.program.topology.num_cores
        self.q = [z3.Int(f"q{c}") for c in range(n)]
        self.ite_terms = 0
        self.thresholds = 0
        self.disjuncts = 0
        self._sum_cache: dict = {}
        self.formula = self._build()

    def _plain_count(self, counter):
        key = ("plain", counter)
        if key not in self._sum_cache:
            terms = [z3.If(self.q[x.owner] > x.pos, x.amount, 0) for x in self.cond.contributions(counter)]
            if "own_waits" not in self.drop:
                terms += [z3.If(self.q[w.core] > w.pos, -w.value, 0) for w in self.low.waits_by_counter.get(counter, ())]
            self.ite_terms += len(terms)
            self._sum_cache[key] = z3.Sum(terms) if terms else z3.IntVal(0)
        return self._sum_cache[key]

    def _render(self, b: BlockCondition):
        if self.style == "plain" and (b.core, b.pos) in self.low.waits:
            w = self.low.waits[(b.core, b.pos)]
            return shortfall(self._plain_count(w.counter), w.value) > 0  # SEM-5 over the note's sums
        if b.kind == "always":
            return z3.BoolVal(True)
        if b.kind == "never":
            return z3.BoolVal(False)
        if b.kind == "below":
            self.thresholds += 1
            return self.q[b.owner] <= b.pos_of
        if b.kind == "barrier":
            return z3.Or([self.q[p] < pos for p, pos in b.terms])
        self.ite_terms += len(b.terms)
        return z3.Sum([z3.If(self.q[o] > p, a, 0) for o, p, a in b.terms]) < b.need

    def stuck_core(self, c: int):
        cap = self.low.held_at(c)
        q = self.q[c]
        alts = [q == cap]  # finished (cap = L) or blocked at the failing op
        for b in self.cond.at[c]:
            cond = self._render(b)
            if z3.is_false(cond):
                continue
            alts.append(z3.And(q == b.pos, cond))
        self.disjuncts += len(alts)
        return z3.Or(alts)

    def _build(self):
        low = self.low
        n = low.program.topology.num_cores
        parts = []
        for c in range(n):
            parts += [self.q[c] >= 0, self.q[c] <= low.held_at(c), self.stuck_core(c)]
        parts.append(z3.Or([self.q[c] < low.lengths[c] for c in range(n)]))
        return z3.And(parts)

    def add_to(self, solver) -> None:
        solver.add(self.formula)

    def vector(self, model) -> list[int]:
        return [model.eval(v, model_completion=True).as_long() for v in self.q]

    def stats(self) -> dict:
        return {"encoding": self.style, "vars": len(self.q), "ite_terms": self.ite_terms,
                "threshold_atoms": self.thresholds, "disjuncts": self.disjuncts}


ENCODINGS["plain"] = lambda low, drop: Encoding(low, style="plain", drop=drop)
ENCODINGS["compact"] = lambda low, drop: Encoding(low, style="compact", drop=drop)
