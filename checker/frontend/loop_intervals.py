"""PRG-228, PRG-229: the intervals of the carries of a kernel's `while` (`fori_loop`) and `scan` loops, for
PRG-202's analysis (`index_signs`).

A loop is first walked trip by trip (PRG-228): its condition is walked on each state, and where its interval
decides the trip (a counter exactly below, or not below, its bound) only the states that exist are walked, so a
loop whose trip count follows from its inputs is walked as its runs go; the carries it exits with are the join of
the states the condition may stop at. A loop longer than `UNROLL_TRIPS` trips or `UNROLL_STEPS` equations is
summarised instead (PRG-229): the states a trip may start from are joined until they stop growing, and a carry
that still grows is widened: a counter below its bound, an accumulator the body adds a bounded amount to (over at
most the loop's trip count, where one follows from its counter), or any value.

`walk` is `index_signs`'s walk: `walk.body(jaxpr, ins, extra)` gives the first equation indexing at a position
not shown to be at least 0 (or None), the outputs' intervals and those of the variables `extra`; `walk.steps`
counts the equations walked, and `walk.unroll` says whether a loop may be walked trip by trip.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from semcheck.checker.frontend.intervals import Interval, dtype_range, inside, join
from semcheck.checker.frontend.scan_inputs import scan_split

UNROLL_TRIPS = 1_000  # trips a loop is walked one by one at most (PRG-228)
UNROLL_STEPS = 10_000  # equations one loop's trip-by-trip walk may take (its nested loops' included)
UNROLL_TOTAL = 30_000  # equations after which no loop is walked trip by trip any more
ROUNDS = 8  # rounds of joining the states a trip starts from before a growing carry is widened (PRG-229)


def walk_while(walk: Any, eqn: Any, vals: list[Interval]) -> tuple[Any | None, list[Interval]]:
    """PRG-228, PRG-229: a `while` loop's first equation indexing at a position not shown to be at least 0 (in
    its condition or body), or None, and the intervals of the carries it exits with."""
    p = eqn.params
    cn, bn = p["cond_nconsts"], p["body_nconsts"]
    loop = _While(walk, p["cond_jaxpr"].jaxpr, p["body_jaxpr"].jaxpr, vals[:cn], vals[cn:cn + bn])
    carry = list(vals[cn + bn:])
    if walk.unroll and walk.steps < UNROLL_TOTAL:
        done = loop.unrolled(carry)
        if done is not None:
            return done
    return loop.summary(carry)


def walk_scan(walk: Any, eqn: Any, vals: list[Interval]) -> tuple[Any | None, list[Interval]]:
    """PRG-228, PRG-229: a `scan`'s first equation indexing at a position not shown to be at least 0, or None,
    and the intervals of its outputs (its carries'; its stacked outputs may be anything)."""
    p = eqn.params
    body = p["jaxpr"].jaxpr
    nc, ncarry = scan_split(eqn)[:2]
    consts, carry, xs = vals[:nc], list(vals[nc:nc + ncarry]), [None] * (len(vals) - nc - ncarry)
    length, rest = int(p["length"]), [None] * (len(eqn.outvars) - ncarry)
    start = walk.steps
    if walk.unroll and walk.steps < UNROLL_TOTAL and length <= UNROLL_TRIPS:
        state = carry
        for _ in range(length):  # PRG-228: the scan's trips, each from the one before's carries
            if walk.steps - start > UNROLL_STEPS:
                break
            found, outs = walk.body(body, consts + state + xs)
            if found is not None:
                return found, []
            state = outs[:ncarry]
        else:
            return None, state + rest
    ins = [(consts, xs)]

    def trip(state: list[Interval], extra: list[Any]) -> tuple[Any | None, list[Interval], list[Interval]]:
        found, outs = walk.body(body, ins[0][0] + state + ins[0][1], extra)
        return found, outs[:ncarry], outs[len(body.outvars):]

    steps = [_step(body, body.invars[nc + k], body.outvars[k]) for k in range(ncarry)]
    found, after = _summary(walk, trip, carry, steps, lambda s: s, {}, length)
    return found, (after + rest if found is None else [])


class _While:
    """One `while` loop's condition and body, with its constants' intervals."""

    def __init__(self, walk: Any, cond: Any, body: Any, cconsts: list[Interval], bconsts: list[Interval]) -> None:
        self.walk, self.cond, self.body, self.cconsts, self.bconsts = walk, cond, body, cconsts, bconsts
        self.counted = _counted(cond, len(cconsts))
        self.steps = [_step(body, x, y) for x, y in zip(body.invars[len(bconsts):], body.outvars)]

    def bound(self, how: tuple[str, Any], state: list[Interval]) -> Interval:
        kind, at = how
        return state[at] if kind == "carry" else self.cconsts[at] if kind == "const" else (at, at)

    def refine(self, state: list[Interval]) -> list[Interval] | None:
        """`state` where the condition holds: a counter below its bound (None where it cannot be)."""
        out = list(state)
        for k, how in self.counted.items():
            y = self.bound(how, state)
            if out[k] is not None and y is not None:
                lo, hi = out[k][0], min(out[k][1], y[1] - 1)
                if lo > hi:
                    return None
                out[k] = (lo, hi)
        return out

    def unrolled(self, carry: list[Interval]) -> tuple[Any | None, list[Interval]] | None:
        """PRG-228: the loop walked trip by trip, while its condition may hold; None where it runs past the
        limits (the caller summarises it instead)."""
        walk, start, state, exits = self.walk, self.walk.steps, carry, None
        for trip in range(UNROLL_TRIPS + 1):
            found, pred = walk.body(self.cond, self.cconsts + state)
            if found is not None:
                return found, []
            may = pred[0] if pred and pred[0] is not None else (0, 1)
            entry = self.refine(state) if may[1] >= 1 else None
            if may[0] <= 0 or entry is None:  # the loop may stop here
                exits = state if exits is None else [join(a, b) for a, b in zip(exits, state)]
            if entry is None:
                return None, exits
            if trip == UNROLL_TRIPS or walk.steps - start > UNROLL_STEPS:
                return None
            found, outs = walk.body(self.body, self.bconsts + entry)
            if found is not None:
                return found, []
            state = outs
        return None

    def summary(self, carry: list[Interval]) -> tuple[Any | None, list[Interval]]:
        """PRG-229: the loop's states summarised (module docstring), its condition walked on all of them."""
        def trip(state: list[Interval], extra: list[Any]) -> tuple[Any | None, list[Interval], list[Interval]]:
            found, outs = self.walk.body(self.body, self.bconsts + state, extra)
            return found, outs[:len(self.body.outvars)], outs[len(self.body.outvars):]

        counters = {}
        for k, how in self.counted.items():
            y = self.bound(how, carry) if how[0] != "carry" or self.steps[how[1]] == ("kept",) else None
            if carry[k] is not None and y is not None:
                counters[k] = (carry[k][0], y[1] - 1)
        found, after = _summary(self.walk, trip, carry, self.steps, self.refine, counters, None)
        if found is not None:
            return found, []
        found, _ = self.walk.body(self.cond, self.cconsts + after)  # the condition runs on every state
        return found, ([] if found is not None else after)


def _summary(walk: Any, trip: Any, carry: list[Interval], steps: list[tuple], refine: Any,
             counters: dict[int, tuple[int, int]], length: int | None) -> tuple[Any | None, list[Interval]]:
    """PRG-229: the intervals of the carries a loop exits with (and the first equation of its body indexing at a
    position not shown to be at least 0), from `trip(state, extra)` (one trip's walk: found, the carries out, the
    intervals of `extra`), the carries' `steps` (`_step`), `refine` (a state where the trip runs, or None),
    `counters` (carry -> the interval a counter below its bound stays in) and the trip count (`length`, a scan's;
    else one follows from a counter that grows by at least 1 a trip)."""
    was, walk.unroll = walk.unroll, False
    try:
        return _summarise(trip, carry, steps, refine, counters, length)
    finally:
        walk.unroll = was


def _summarise(trip: Any, carry: list[Interval], steps: list[tuple], refine: Any,
               counters: dict[int, tuple[int, int]], length: int | None) -> tuple[Any | None, list[Interval]]:
    first = refine(carry)
    if first is None:  # no trip runs
        return None, carry
    entry, extra = list(first), _extra(steps)
    for _ in range(ROUNDS):
        found, outs, _ = trip(entry, extra)
        if found is not None:
            return found, []
        nxt = refine(outs)
        grown = [join(a, b) for a, b in zip(entry, nxt)] if nxt is not None else entry
        if grown == entry:
            return None, [join(c, o) for c, o in zip(carry, outs)]
        entry = grown
    found, outs, deltas = trip(entry, extra)
    if found is not None:
        return found, []
    trips = length if length is not None else _trips(counters, steps, _deltas(steps, deltas), carry)
    acc: dict[int, Interval] = {}
    nxt = refine(outs) or entry
    for k in range(len(entry)):
        if inside(nxt[k], entry[k]):
            continue
        d = _deltas(steps, deltas).get(k)
        if k in counters and outs[k] is not None and outs[k][0] >= counters[k][0]:
            entry[k] = counters[k]
        elif d is not None and trips is not None and carry[k] is not None:
            acc[k] = d
            entry[k] = _grown(carry[k], d, max(trips - 1, 0), steps[k][2])
        else:
            entry[k] = None
    return _verified(trip, carry, steps, refine, counters, length, entry, acc, extra)


def _verified(trip: Any, carry: list[Interval], steps: list[tuple], refine: Any,
              counters: dict[int, tuple[int, int]], length: int | None, entry: list[Interval],
              acc: dict[int, Interval], extra: list[Any]) -> tuple[Any | None, list[Interval]]:
    """PRG-229: the widened states checked: each carry's next value is in them (an accumulator's step within the
    one its bound assumed, the trip count's counter still growing); a carry that fails is widened to any value
    and the check is run again."""
    for _ in range(len(entry) + 2):
        found, outs, got = trip(entry, extra)
        if found is not None:
            return found, []
        deltas = _deltas(steps, got)
        trips = length if length is not None else _trips(counters, steps, deltas, carry)
        nxt = refine(outs) or entry
        bad = [k for k in range(len(entry)) if (k in acc and (trips is None or not inside(deltas.get(k), acc[k])))
               or (k not in acc and not inside(nxt[k], entry[k]))]
        if not bad:
            return None, [_grown(carry[k], acc[k], trips, steps[k][2]) if k in acc else join(carry[k], outs[k])
                          for k in range(len(entry))]
        for k in bad:
            entry[k] = None
            acc.pop(k, None)
    return None, [None] * len(entry)


def _grown(start: Interval, d: Interval, trips: int, full: Interval) -> Interval:
    """An accumulator's values after at most `trips` trips from `start`, each adding a value in `d`: the partial
    sums all lie in this interval, so where the carry's dtype (`full`) holds it none of them wrapped; else any
    value."""
    if start is None or d is None or full is None:
        return None
    lo, hi = start[0] + trips * min(d[0], 0), start[1] + trips * max(d[1], 0)
    return (lo, hi) if full[0] <= lo and hi <= full[1] else None


def _trips(counters: dict[int, tuple[int, int]], steps: list[tuple], deltas: dict[int, Interval],
           carry: list[Interval]) -> int | None:
    """The most trips a `while` loop runs: a counter from its start's lower end, below its bound's upper end and
    growing by at least 1 a trip, runs at most (bound - start) of them. PRG-233: only where its step cannot wrap
    (its bound's upper end plus the step's within the counter's dtype): a wrapped counter falls back below its
    bound and the loop runs on."""
    best = None
    for k, (lo, top) in counters.items():
        d = deltas.get(k)
        full = steps[k][2] if steps[k][0] == "add" else None
        if d is not None and d[0] >= 1 and full is not None and top + d[1] <= full[1]:
            n = max(0, top + 1 - lo)
            best = n if best is None else min(best, n)
    return best


def _deltas(steps: list[tuple], got: list[Interval]) -> dict[int, Interval]:
    """Per carry the body adds values to, their sum's interval (`got`: the intervals of every step's terms, in
    order, as `_extra` lists them); (0, 0) for a carry the body passes on."""
    out, i = {}, 0
    for k, s in enumerate(steps):
        if s[0] == "add":
            total: Interval = (0, 0)
            for sign, _ in s[1]:
                d = got[i] if i < len(got) else None
                i += 1
                total = None if total is None or d is None else (
                    (total[0] + d[0], total[1] + d[1]) if sign > 0 else (total[0] - d[1], total[1] - d[0]))
            out[k] = total
        elif s[0] == "kept":
            out[k] = (0, 0)
    return out


def _extra(steps: list[tuple]) -> list[Any]:
    """The variables whose intervals `_deltas` reads: every term of every step, in order."""
    return [e for s in steps if s[0] == "add" for _, e in s[1]]


def _step(body: Any, var: Any, out: Any) -> tuple:
    """How a loop body's output `out` follows from its carry `var`: ("kept",) where it is the carry itself;
    ("add", terms, every value of its dtype) where it is `var` plus the sum of `sign * e` over `terms` (a chain of
    `add` and `sub` in which `var` appears once); ("other",) otherwise."""
    if out is var:
        return ("kept",)
    terms = _terms(body, var, out, 0)
    return ("add", terms, dtype_range(out)) if terms else ("other",)


def _terms(body: Any, var: Any, out: Any, depth: int) -> list[tuple[int, Any]] | None:
    """The signed terms `out - var` is the sum of, where `out` is `var` added to or less them; else None."""
    if out is var:
        return []
    if depth > 16 or hasattr(out, "val"):
        return None
    eqn = next((e for e in body.eqns if out in e.outvars), None)
    if eqn is None or len(eqn.invars) != 2 or eqn.primitive.name not in ("add", "sub"):
        return None
    a, b = eqn.invars
    left = _terms(body, var, a, depth + 1)
    if left is not None and not _uses(body, b, var):
        return left + [(1 if eqn.primitive.name == "add" else -1, b)]
    right = _terms(body, var, b, depth + 1) if eqn.primitive.name == "add" else None
    if right is not None and not _uses(body, a, var):
        return right + [(1, a)]
    return None


def _uses(body: Any, x: Any, var: Any) -> bool:
    """Whether `x` is `var` or computed from it in `body` (its operands followed back)."""
    seen, todo = set(), [x]
    while todo:
        y = todo.pop()
        if y is var:
            return True
        if hasattr(y, "val") or id(y) in seen:
            continue
        seen.add(id(y))
        eqn = next((e for e in body.eqns if y in e.outvars), None)
        if eqn is not None:
            todo.extend(eqn.invars)
    return False


def _counted(cond: Any, nconsts: int) -> dict[int, tuple[str, Any]]:
    """The carry `k` whose `carry_k < y` is the condition's result (the body runs only with it below `y`), with
    what `y` is: ("carry", j), ("const", i) or ("literal", value)."""
    if len(cond.outvars) != 1:
        return {}
    out, carries = cond.outvars[0], list(cond.invars[nconsts:])
    for eqn in cond.eqns:
        if out in eqn.outvars and eqn.primitive.name == "lt" and eqn.invars[0] in carries:
            y = eqn.invars[1]
            if hasattr(y, "val"):
                return {carries.index(eqn.invars[0]): ("literal", int(np.asarray(y.val)))}
            if y in carries:
                return {carries.index(eqn.invars[0]): ("carry", carries.index(y))}
            if y in cond.invars[:nconsts]:
                return {carries.index(eqn.invars[0]): ("const", list(cond.invars[:nconsts]).index(y))}
    return {}


__all__ = ["UNROLL_STEPS", "UNROLL_TRIPS", "walk_scan", "walk_while"]
