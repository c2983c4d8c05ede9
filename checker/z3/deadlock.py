"""The certificate of `deadlock-free` (PROP-4): one Z3 query, is there a stuck vector other than the end?

The verdict is the least stuck vector's (`semcheck.checker.properties.deadlock`, RUN-3); this query asks the
same question another way and so certifies it. Encoding (the least-stuck-vector argument, spec
RUN-3). Integer variables `q[c]`, the number of operations core c has executed. For a vector q,

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
`checker.static.lowering`). The query is `stuck(q) and q != L`:

* unsat: no terminal state has an unfinished core: S' must end completed;
* sat: some stuck q != L exists; the terminal state p* of every maximal run
  is the least stuck vector (p* <= q), so S' must end in a deadlock at p* <= q.

Anything else is `EncodingBug`; a solver that gives up (a timeout) certifies nothing and leaves
the verdict as it is.

The query is rendered in order encoding (`OrderEncoding`): q[c] as
`x[c][k] <=> q[c] >= P_c[k]` over c's blocking positions, where "at P_c[k]
implies blocked" becomes the Horn clause `x[c][k] and (others far enough) ->
x[c][k+1]` (counters fed by several cores count through a merging network),
which unit propagation refutes. The integer renderings of the same query
(`plain`, `compact`) are the bench's (bench/integer_encodings.py; their cost
against this one is in bench/README.md).

When a rotation of the device index maps the lowering onto itself
(`symmetry.find_rotation`, RUN-6), the order encoding asks only for vectors
the rotation leaves invariant: the least stuck vector is one of them, so the
answer is the same, with one device's variables instead of every core's.

The soundness conditions (a static lowering, no reachable failure) are the verdict's
(`semcheck.checker.properties.deadlock`): the certificate is asked only where they hold.
"""

from __future__ import annotations

import bisect
import itertools
import time
from collections import defaultdict
from typing import NamedTuple

import z3
from semcheck.checker.properties import deadlock as decision
from semcheck.checker.properties.analysis import ModeAnalysis, analysis_of, family
from semcheck.checker.properties.verdict import Verdict
from semcheck.checker.static.system import EncodingBug, Lowered
from semcheck.checker.static.least_stuck import SPrimeEnd
from semcheck.checker.static.symmetry import find_rotation
from semcheck.model.symmetry import Rotation
from semcheck.model.barrier import awaited
from semcheck.model.ops import DmaMode, Program
from semcheck.model.semaphore import shortfall


# --- what blocks a core at one position -------------------------------------------------


class BlockCondition(NamedTuple):
    """When core `core` is blocked at position `pos`, given the positions q of the others.

    kind "always" / "never"; "below": blocked iff q[owner] <= pos_of (one feeding core,
    the threshold folded); "sum": blocked iff sum of amounts a with q[o] > p over
    `terms` (o, p, a) is < `need`; "barrier": blocked iff q[p] < pos for some (p, pos)
    in `terms`.
    """

    core: int
    pos: int
    kind: str
    owner: int = -1
    pos_of: int = -1
    terms: tuple = ()
    need: int = 0


class Conditions:
    """The blocking condition at every position where a core can be stuck (shared by all encodings).

    Waits and barriers that can never block (a wait its own core has already
    paid for, a barrier with no other participant) are left out: a stuck
    vector never stops there.
    """

    def __init__(self, low: Lowered, drop: frozenset[str] = frozenset(), cores: range | None = None) -> None:
        """`cores`: compute the conditions of these cores only (the orbit representatives of a symmetry)."""
        self.low = low
        self.drop = drop
        self.at: dict[int, list[BlockCondition]] = {}
        cores = range(low.program.topology.num_cores) if cores is None else cores
        found: dict[int, list[BlockCondition]] = defaultdict(list)
        for counter, ws in low.waits_by_counter.items():
            if counter[1] in cores:
                found[counter[1]].extend(self._waits_of(counter, ws))
        for c, i in low.barriers:
            if c in cores:
                found[c].append(self.barrier(c, i))
        for c in cores:
            cap = low.held_at(c)
            # no stuck vector stops where a core cannot block: not a position of q[c]
            self.at[c] = sorted((b for b in found.get(c, ()) if b.pos < cap and b.kind != "never"),
                                key=lambda b: b.pos)

    def contributions(self, counter) -> list:
        out = []
        for x in self.low.by_counter.get(counter, ()):
            if "dma" in self.drop and x.kind != "signal":
                continue
            if "signal" in self.drop and x.kind == "signal":
                continue
            out.append(x)
        return out

    def _counter(self, counter):
        """Per counter (its waiter is counter[1]): own contributions with prefix sums, the foreign feed."""
        c = counter[1]
        xs = self.contributions(counter)
        own = sorted((x.pos, x.amount) for x in xs if x.owner == c)
        foreign = sorted((x.owner, x.pos, x.amount) for x in xs if x.owner != c)
        return ([p for p, _ in own], list(itertools.accumulate(a for _, a in own)),
                foreign, {o for o, _, _ in foreign}, list(itertools.accumulate(a for _, _, a in foreign)))

    def _waits_of(self, counter, ws) -> list[BlockCondition]:
        """The blocking conditions of the waits `ws` on `counter` (sorted by position), in one pass."""
        own_pos, own_acc, foreign, owners, foreign_acc = self._counter(counter)
        c = counter[1]
        count_waits = "own_waits" not in self.drop
        out = []
        terms = None
        k = 0  # own contributions before the current wait
        waited = 0  # what the core's earlier waits on the counter consumed
        for w in ws:
            i = w.pos
            while k < len(own_pos) and own_pos[k] < i:
                k += 1
            own = own_acc[k - 1] if k else 0
            need = shortfall(own - waited, w.value)  # blocked iff what the other cores contributed < need
            if count_waits:
                waited += w.value
            if need <= 0:
                out.append(BlockCondition(c, i, "never"))
            elif not foreign or foreign_acc[-1] < need:
                out.append(BlockCondition(c, i, "always"))
            elif len(owners) == 1:
                j = bisect.bisect_left(foreign_acc, need)  # enough arrived iff the owner executed foreign[j]
                out.append(BlockCondition(c, i, "below", owner=foreign[j][0], pos_of=foreign[j][1]))
            else:
                if terms is None:  # the counter's whole foreign feed: one tuple shared by its waits
                    merged: dict = defaultdict(int)
                    for o, p, a in foreign:
                        merged[(o, p)] += a
                    terms = tuple((o, p, a) for (o, p), a in sorted(merged.items()) if a)
                out.append(BlockCondition(c, i, "sum", terms=terms, need=need))
        return out

    def barrier(self, c: int, i: int) -> BlockCondition:
        if "barrier" in self.drop:
            return BlockCondition(c, i, "never")
        b = self.low.barriers[(c, i)]
        # BAR-1 over positions: blocked while some other participant is short of its own k-th
        where = awaited(sorted(b.participants), lambda p: self.low.barrier_pos.get((p, b.name, b.k)))
        if where is None:
            return BlockCondition(c, i, "always")
        terms = tuple((p, pos) for p, pos in where.items() if p != c)
        return BlockCondition(c, i, "barrier", terms=terms) if terms else BlockCondition(c, i, "never")


# --- the order encoding: the same query as Horn clauses ----------------------------------------


class OrderEncoding:
    """The stuck-vector query with q[c] in order encoding: x[c][k] <=> q[c] >= P_c[k].

    P_c lists core c's blocking positions below its cap, then the cap (L[c],
    or the failing op). A stuck vector puts every core at some P_c[k] where it
    is blocked, so q[c] is a value of P_c, and "q[c] = P_c[k] implies blocked
    there" is equivalent to the clause

        x[c][k] and not blocked(c, P_c[k])  ->  x[c][k+1].

    "not blocked" says that other cores have gone *far enough* (q[o] > p for a
    feeding contribution, q[p] >= pos for a barrier participant), a
    conjunction of positive literals -- so the clauses are Horn wherever a
    counter has one feeding core; with two, "not blocked" is a disjunction of
    such conjunctions (`_two_feeders`: one Horn clause each); with more, a
    pseudo-Boolean sum. The
    query adds "some core has not finished" (one negative clause). With the
    chain clauses below it has the same models as `Encoding` up to the
    representation of q; the Horn part is refuted by unit propagation, which
    is the least-stuck-vector induction itself.
    The clauses `x[c][k+1] -> x[c][k]` that make x an order encoding are left
    out (half the clauses): every rule is "monotone premise -> one positive
    literal" and the goal is one negative clause, so the formula is
    satisfiable iff its least model satisfies the goal, and that least model
    -- the atoms unit propagation derives -- is prefix-closed: it is the
    order encoding of the least stuck vector, chains or not. A model's q is
    read off as each core's longest true prefix, which is >= the least stuck
    vector (`deadlock_free` checks that against the fast run).
    The formula is handed to Z3 as text (z3py object construction is the
    bottleneck at hundreds of thousands of clauses): DIMACS for Z3's
    finite-domain (SAT) solver when it is all clauses, SMT-LIB for the SMT
    core when a pseudo-Boolean sum is needed (`deadlock_free` picks the solver).
    """

    def __init__(self, low: Lowered, *, drop: frozenset[str] = frozenset(), rotation: Rotation | None = None) -> None:
        """`rotation`: an automorphism of `low` (`symmetry.find_rotation`); the query then asks only
        for vectors it leaves invariant, with the variables of each orbit's representative (RUN-6)."""
        self.low = low
        self.rotation = rotation
        n = low.program.topology.num_cores
        cores = rotation.reps if rotation is not None else range(n)
        self.cond = Conditions(low, drop, cores)
        rep = [rotation.rep(c) for c in range(n)] if rotation is not None else range(n)
        own_P = {c: [b.pos for b in self.cond.at[c]] + [low.held_at(c)] for c in cores}
        # the core whose variables stand for x[c][.]: itself, or its orbit's representative
        self.P = [own_P[rep[c]] for c in range(n)]
        # variable of x[c][k] (k >= 1; x[c][0] is true) is base[c] + k
        own_base = dict(zip(cores, itertools.accumulate((len(own_P[c]) - 1 for c in cores), initial=0)))
        self.base = [own_base[rep[c]] for c in range(n)]
        self.num_vars = sum(len(own_P[c]) - 1 for c in cores)
        self.pb = 0
        self._feeds: dict[int, tuple] = {}  # id of a counter's feed (BlockCondition.terms) -> (it, what it gives)
        self._aux_clauses: list[list[int]] = []
        # Horn clauses as DIMACS literals; pb_rules as (premise literals, (need, [(lit, amount)]), head)
        clauses: list[list[int]] = []
        pb_rules: list[tuple[list[int], tuple[int, list[tuple[int, int]]], int]] = []
        for c in cores:
            for k, b in enumerate(self.cond.at[c]):
                unblocked = self._unblocked(b)
                if unblocked is False:
                    continue
                pre = [] if k == 0 else [self._var(c, k)]
                head = self._var(c, k + 1)
                if isinstance(unblocked, tuple) and unblocked[0] == "any":
                    for conj in unblocked[1]:  # unblocked iff one of these conjunctions holds
                        clauses.append([-x for x in pre] + [-x for x in conj] + [head])
                elif isinstance(unblocked, tuple):
                    pb_rules.append((pre, unblocked, head))
                else:
                    clauses.append([-x for x in pre] + [-x for x in unblocked] + [head])
        clauses.extend(self._aux_clauses)
        # counting networks can be millions of clauses: hold them only until the text is built
        self._aux_clauses, self._feeds = [], {}
        goal = []
        if all(low.held_at(c) == low.lengths[c] for c in range(n)):  # otherwise q != L holds anyway
            goal = [-self._var(c, len(self.P[c]) - 1) for c in cores if len(self.P[c]) > 1]
            if not goal:  # every core ends without a stoppable position: only q = L is stuck
                self.num_vars += 1
                clauses += [[self.num_vars], [-self.num_vars]]
            else:
                clauses.append(goal)
        self.clauses = len(clauses) + len(pb_rules)
        self.pb = len(pb_rules)
        self.format = "smt2" if pb_rules else "dimacs"
        self.text = self._smt2(clauses, pb_rules) if pb_rules else self._dimacs(clauses)

    def _fresh(self) -> int:
        self.num_vars += 1
        return self.num_vars

    def _var(self, c: int, k: int) -> int:
        return self.base[c] + k

    def _gt(self, o: int, pos: int) -> int | bool:
        """The literal for q[o] > pos (True / False when constant)."""
        m = bisect.bisect_right(self.P[o], pos)
        if m >= len(self.P[o]):
            return False
        return True if m == 0 else self._var(o, m)

    def _unblocked(self, b: BlockCondition):
        """False; a list of literals (their conjunction; [] is true); ("any", [conjunction, ...]);
        or a PB sum (need, [(lit, amount)])."""
        if b.kind == "always":
            return False
        if b.kind == "never":
            return []
        if b.kind == "below":
            x = self._gt(b.owner, b.pos_of)
            return [] if x is True else False if x is False else [x]
        if b.kind == "barrier":
            lits = [self._gt(p, pos - 1) for p, pos in b.terms]
            if any(x is False for x in lits):
                return False
            return [x for x in lits if x is not True]
        # What depends on the counter's feed alone is computed once per counter: its waits
        # share one `terms` tuple (by identity; hashing it per wait costs as much as the rest).
        feed = self._feeds.get(id(b.terms))
        if feed is None or feed[0] is not b.terms:
            per: dict[int, list[tuple[int, int]]] = {}  # feeding core -> (literal, amount), in position order
            sure = 0
            for o, p, a in b.terms:  # sorted by (core, position)
                x = self._gt(o, p)
                if x is True:
                    sure += a
                elif x is not False:
                    per.setdefault(o, []).append((x, a))
            units = sum(a for xs in per.values() for _, a in xs)
            outputs = None
            if units <= MAX_NETWORK_UNITS:
                outputs, extra = unary_sum_network(list(per.values()), self._fresh)
                self._aux_clauses.extend(extra)
            feed = self._feeds[id(b.terms)] = (b.terms, per, sure, units, outputs)
        _, per, sure, units, outputs = feed
        need = b.need - sure
        if need <= 0:
            return []
        if units < need:
            return False
        if outputs is not None:
            x = outputs[need - 1]
            return [] if x is True else False if x is False else [x]
        if len(per) <= 2:
            alternatives = _two_feeders(need, *per.values())
            if alternatives is not None:
                return ("any", alternatives)
        return (need, [xa for xs in per.values() for xa in xs])

    def _dimacs(self, clauses: list[list[int]]) -> str:
        body = "\n".join(" ".join(map(str, cl)) + " 0" for cl in clauses)
        return f"p cnf {self.num_vars} {len(clauses)}\n{body}\n"

    def _smt2(self, clauses: list[list[int]], pb_rules: list) -> str:
        def lit(x: int) -> str:
            return f"x{x}" if x > 0 else f"(not x{-x})"

        lines = [f"(declare-const x{v} Bool)" for v in range(1, self.num_vars + 1)]
        lines += [f"(assert (or {' '.join(map(lit, cl))}))" if len(cl) > 1 else f"(assert {lit(cl[0])})"
                  for cl in clauses]
        for pre, (need, terms), head in pb_rules:
            pb = f"((_ pbge {need} {' '.join(str(a) for _, a in terms)}) {' '.join(lit(x) for x, _ in terms)})"
            body = " ".join([lit(x) for x in pre] + [pb])
            lines.append(f"(assert (=> (and {body}) {lit(head)}))")
        return "\n".join(lines)

    def add_to(self, solver) -> None:
        solver.from_string(self.text)

    def vector(self, model) -> list[int]:
        # by the declarations' names: DIMACS variables are fresh constants printed k!<n>,
        # which a new z3.Bool("k!<n>") does not denote
        name = "k!{}" if self.format == "dimacs" else "x{}"
        true = {d.name() for d in model.decls() if z3.is_true(model[d])}
        out = []
        for c, P in enumerate(self.P):
            k = 0
            while k + 1 < len(P) and name.format(self._var(c, k + 1)) in true:
                k += 1
            out.append(P[k])
        return out

    def stats(self) -> dict:
        out = {"encoding": "order", "format": self.format, "vars": self.num_vars, "clauses": self.clauses,
               "pb_constraints": self.pb, "text_bytes": len(self.text)}
        if self.rotation is not None:
            out["symmetry"] = {"rotate_devices": self.rotation.devices, "orbits": len(self.rotation.reps)}
        return out


# A counter whose feeds total at most this many units gets a merging network.
MAX_NETWORK_UNITS = 4096


def unary_sum_network(feeds: list[list[tuple[int, int]]], fresh) -> tuple[list, list[list[int]]]:
    """Horn clauses whose least model counts: output t-1 holds iff the feeds' true units reach t.

    Each feed lists (literal, amount) in position order; its unary sequence
    repeats a literal `amount` times and is sorted (true units first) in the
    least model, where a core's literals are prefix-closed. Batcher's
    odd-even merges combine the sorted feeds; a comparator's outputs are
    "u or v" (two clauses) and "u and v" (one), both Horn upward, so the
    least model evaluates the network exactly. `fresh()` returns a new
    variable. Returns (outputs, clauses); outputs may be the constants
    True/False. O(T log^2 T) clauses for T units, against O(T^2) for
    staircases -- what a ring that signals both neighbours needs at 256 devices.
    """
    clauses: list[list[int]] = []

    def comparator(u, v):
        if u is False or v is True:
            return v, u
        if v is False or u is True:
            return u, v
        if u == v:
            return u, u
        hi, lo = fresh(), fresh()
        clauses.extend(([-u, hi], [-v, hi], [-u, -v, lo]))
        return hi, lo

    def merge(a: list, b: list) -> list:  # sorted, equal power-of-two lengths
        if len(a) == 1:
            return list(comparator(a[0], b[0]))
        c, d = merge(a[0::2], b[0::2]), merge(a[1::2], b[1::2])
        out = [c[0]]
        for i in range(1, len(c)):
            out.extend(comparator(c[i], d[i - 1]))
        out.append(d[-1])
        return out

    def padded(seq: list, size: int) -> list:
        return seq + [False] * (size - len(seq))

    seqs = [[x for x, a in feed for _ in range(a)] for feed in feeds]
    seqs = [q for q in seqs if q] or [[]]
    total = sum(len(q) for q in seqs)
    while len(seqs) > 1:
        nxt = []
        for i in range(0, len(seqs) - 1, 2):
            size = 1
            while size < max(len(seqs[i]), len(seqs[i + 1])):
                size *= 2
            merged = merge(padded(seqs[i], size), padded(seqs[i + 1], size))
            nxt.append(merged[: len(seqs[i]) + len(seqs[i + 1])])
        if len(seqs) % 2:
            nxt.append(seqs[-1])
        seqs = nxt
    return seqs[0][:total], clauses


# Past this many alternatives for one wait, a pseudo-Boolean sum is smaller.
MAX_ALTERNATIVES = 256


def _two_feeders(need: int, *feeds: list[tuple[int, int]]) -> list[list[int]] | None:
    """`sum >= need` over one or two feeding cores as a disjunction of literal conjunctions.

    Each feed lists (literal "the core got past contribution i", amount) in
    position order, so a feed's total reaches v exactly when the literal of
    its first prefix summing to v holds. With two feeds, the sum reaches
    `need` iff for some level v of the first, the second reaches need - v:
    one Horn clause per minimal pair (a staircase), instead of a
    pseudo-Boolean constraint, which Z3 propagates far more slowly. None when
    the staircase has more than MAX_ALTERNATIVES steps.
    """
    levels = []
    for feed in feeds:
        lv: list[tuple[int, int | None]] = [(0, None)]
        for x, a in feed:
            total = lv[-1][0] + a
            if lv[-1][1] == x:
                lv[-1] = (total, x)  # contributions behind the same literal add up
            else:
                lv.append((total, x))
        levels.append(lv)
    if len(levels) == 1:
        levels.append([(0, None)])
    first, second = levels
    second_totals = [v for v, _ in second]
    out: list[list[int]] = []
    for v, x in first:
        rest = need - v
        if rest <= 0:
            out.append([x] if x is not None else [])
            break
        j = bisect.bisect_left(second_totals, rest)
        if j < len(second):
            out.append([y for y in (x, second[j][1]) if y is not None])
        if len(out) > MAX_ALTERNATIVES:
            return None
    return out


# style -> (lowering, drop) -> encoding: the order encoding; the bench adds its integer renderings
# (bench/integer_encodings.py) to measure them against it
ENCODINGS: dict = {}


def make_encoding(low: Lowered, style: str, drop: frozenset[str] = frozenset(), *, symmetry: bool = True):
    """The stuck-vector query in `style`; the order encoding uses a device rotation when there is one."""
    if style == "order":
        return OrderEncoding(low, drop=drop, rotation=find_rotation(low) if symmetry else None)
    if style not in ENCODINGS:
        raise ValueError(f"unknown encoding {style!r}: the integer renderings are bench/integer_encodings.py's")
    return ENCODINGS[style](low, drop)


def deadlock_free(
    program: Program,
    mode: DmaMode,
    *,
    timeout_ms: int = 30_000,
    encoding: str = "order",
    fallback_states: int = 0,
    replay: bool = True,
    symmetry: bool = True,
    _drop: frozenset[str] = frozenset(),
    facts: ModeAnalysis | None = None,
) -> Verdict:
    """`deadlock-free` as `semcheck.checker.properties.deadlock` decides it, certified by the Z3 query (`certify`).

    `encoding` is the query's rendering, `timeout_ms` its budget; `symmetry=False` keeps the order
    encoding from restricting the query to rotation-invariant vectors (RUN-6). `_drop` mutates the
    encoding (tests only). The other arguments are the verdict's.
    """
    facts = analysis_of(program, mode, facts)

    def certificate(low: Lowered, end: SPrimeEnd) -> dict:
        return certify(program, low, end, encoding=encoding, timeout_ms=timeout_ms, symmetry=symmetry, drop=_drop,
                       facts=facts)

    return decision.deadlock_free(program, mode, fallback_states=fallback_states, replay=replay,
                                  certificate=certificate, facts=facts)


def certify(program: Program, low: Lowered, end: SPrimeEnd, *, encoding: str = "order", timeout_ms: int = 30_000,
            symmetry: bool = True, drop: frozenset[str] = frozenset(), facts: ModeAnalysis | None = None) -> dict:
    """Check S''s end (`static.least_stuck.s_prime_end`) against the stuck-vector query; its statistics.

    unsat must come with a completed end, sat with a deadlock at or below the stuck vector found;
    otherwise `EncodingBug`. When z3 gives up the statistics say so (`certificate`) and nothing is
    checked. The query reads only the lowering, which eager and on_wait share: with the program's
    analysis (`facts`) it is solved once for both.
    """
    qkey = ("stuck-query", family(low.mode), encoding, symmetry, drop)
    query = facts.whole.known(qkey) if facts is not None else None
    if query is None:
        query = _solve_stuck_query(low, encoding, drop, timeout_ms, symmetry)
        if query["z3"] != "unknown" and facts is not None:
            facts.whole.keep(qkey, query)
    else:
        query = dict(query, shared_with_other_mode=True)
    stats = {k: v for k, v in query.items() if k not in ("vector", "reason")}
    res = query["z3"]
    if res == "unknown":
        stats["certificate"] = f"z3 gave up: {query['reason']}"
        return stats
    if res == "unsat":
        if end.kind != "completed":
            raise EncodingBug(f"z3 proved deadlock freedom but S' ends in {end.kind} at {end.pcs}")
        return stats
    q = query["vector"]
    if end.kind != "deadlock":
        raise EncodingBug(f"z3 found a stuck vector {q} but S' ends in {end.kind}")
    if any(a > b for a, b in zip(end.pcs, q)):
        raise EncodingBug(f"S''s end {end.pcs} is not below the stuck vector {q}")
    stats["stuck_vector"] = q
    return stats


def _solve_stuck_query(low: Lowered, encoding: str, drop: frozenset[str], timeout_ms: int,
                       symmetry: bool = True) -> dict:
    """Build and solve the stuck-vector query: z3's answer, the stuck vector if sat, and statistics."""
    t2 = time.perf_counter()
    enc = make_encoding(low, encoding, drop, symmetry=symmetry)
    # Clauses only: QF_FD goes straight to the SAT core (bench/README.md, costs).
    if encoding != "order":
        solver = z3.SolverFor("QF_LIA")
    elif enc.format == "dimacs":
        solver = z3.SolverFor("QF_FD")
    else:  # pseudo-Boolean sums: the SMT core's PB theory (bench/README.md: QF_FD bit-blasts them)
        solver = z3.Solver()
    solver.set("timeout", int(timeout_ms))
    enc.add_to(solver)
    out: dict = {"encode_s": round(time.perf_counter() - t2, 4), **enc.stats()}
    t3 = time.perf_counter()
    res = solver.check()
    out["solve_s"] = round(time.perf_counter() - t3, 4)
    out["z3"] = str(res)
    if res == z3.unknown:
        out["reason"] = solver.reason_unknown()
    elif res == z3.sat:
        out["vector"] = enc.vector(solver.model())
    return out
