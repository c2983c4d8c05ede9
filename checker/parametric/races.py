"""Race freedom for every N (specs/deciding/parametric.md PAR-11 .. PAR-15): the template's accesses (PAR-11,
`race_template.py`), the orders its semaphores force on every instance (PAR-12, PAR-13), and a Z3
query per pair of accesses that no two of them, on any devices and grid steps of any N, overlap (or
meet as jax's race detector takes windows to, ERR-27) unordered with one a write (PAR-14). What is not proved says why, with Z3's smallest N."""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any

from semcheck.checker.parametric.race_template import Event, Region
from semcheck.checker.parametric.template import NotTemplate, Sym
from semcheck.model.detector_windows import starts_meet

RACE_N_MAX = 2 ** 20
"""PAR-14 proves for every N from 2 to 2^20 devices: a region's row index grows with N (`me * rows`),
and at 2^30 devices it would pass int32, where the kernel's buffers could not exist anyway."""
MAX_HOPS = 3
"""PAR-13: the chains of forced orders tried between two devices have at most this many hops."""
TIMEOUT_MS = 20_000


@dataclasses.dataclass(frozen=True)
class Arrival:
    """What one event adds to a counter (PAR-12): a signal, or a copy half (`read`: its send semaphore,
    on the issuer; `write`: its receive semaphore, on the target). The counter is on the device
    `c` to the right of the event's device."""

    pos: int
    kind: str
    sem: tuple
    c: int
    amount: int
    unit: str


@dataclasses.dataclass(frozen=True)
class Waiting:
    pos: int
    sem: tuple
    amount: int
    unit: str


@dataclasses.dataclass(frozen=True)
class Fact:
    """PAR-12: where wait `w` has passed on a device, arrival `a` of that step has happened."""

    w: Waiting
    a: Arrival


@dataclasses.dataclass(frozen=True)
class Touch:
    """One access of the template (PAR-11) seen from the memory it touches: the actor is `o` devices to
    the left of the memory's device; `phase` is `pro` (before step 0), `epi` (after the last step) or
    `step`."""

    event: int
    region: Region
    write: bool
    o: int
    half: str | None  # "read" / "write" for a copy's halves
    phase: str
    line: str


@dataclasses.dataclass(frozen=True)
class RaceArgument:
    proved: bool
    reason: str = ""
    at: dict | None = None  # Z3's counterexample (smallest N found): N, device, steps
    low: int = 0  # the argument is for N >= low (the traced N below it are decided per N)


def _bytes(item) -> int:
    _, shape, dtype = item
    import numpy as np

    return int(math.prod(shape)) * np.dtype(dtype).itemsize


def counters(evs: list[Event], dma_sems: set) -> tuple[list[Arrival], list[Waiting]]:
    """PAR-12: every arrival and wait of the template, from PAR-4's items. A copy's half on a semaphore
    that is not a DMA semaphore counts per mode (DMA-6): its unit is its own, which no wait shares."""
    arr, waits = [], []
    for e in evs:
        it = e.item
        if it is None:
            continue
        if it[0] == "signal":
            arr.append(Arrival(e.pos, "signal", it[1], it[3] or 0, it[2], "sig"))
        elif it[0] == "wait":
            waits.append(Waiting(e.pos, it[1], it[2], "sig"))
        elif it[0] == "dma":
            size = _bytes(it[4])
            if it[2] is not None:
                arr.append(Arrival(e.pos, "read", it[2], 0, size, "dma" if it[2] in dma_sems else "dma-6"))
            arr.append(Arrival(e.pos, "write", it[3], it[1] or 0, size, "dma" if it[3] in dma_sems else "dma-6"))
        elif it[0] == "dma_wait":
            waits.append(Waiting(e.pos, it[1], _bytes(it[3]), "dma"))
    return arr, waits


class _Ctx:
    """The Z3 vocabulary of PAR-12 .. PAR-14. Every device of a query is named by its offset `o` from
    one device `m`: the device `(m - o) mod N`; guards are read at a device and a step."""

    def __init__(self, sym: Sym, evs: list[Event], at_n: int | None = None):
        import z3

        self.z3, self.sym, self.evs = z3, sym, evs
        self.N = sym.N
        self.G = sym.grid
        self.m = z3.Int("m")
        self.memo: dict = {}  # the terms are kept alive with their ids (Z3 shares equal terms)
        self.low = sym.cut.as_long()  # PAR-4 reads every target as (my_id + c) mod N from here on
        n = z3.And(self.N >= self.low, self.N <= RACE_N_MAX) if at_n is None else self.N == at_n
        self.base = z3.And(n, self.G >= 1, self.m >= 0, self.m < self.N)

    def dev(self, o: int):
        """(m - o) mod N, exactly at every N >= 2 (as many wraps as |o| can need)."""
        out = self.memo.get(("dev", o))
        if out is None:
            z3 = self.z3
            x = self.m - o
            out = x
            for k in range(-abs(o) // 2 - 1, abs(o) // 2 + 2):
                out = z3.If(z3.And(x + k * self.N >= 0, x + k * self.N < self.N), x + k * self.N, out)
            self.memo[("dev", o)] = out
        return out

    def same(self, o: int, o2: int):
        """Devices o and o2 are one device: their offsets differ by a multiple of N (N >= 2); None if never."""
        z3, d = self.z3, o - o2
        if d == 0:
            return z3.BoolVal(True)
        ks = [k for k in range(1, abs(d) // 2 + 1) if abs(d) % k == 0]
        return z3.Or([self.N == abs(d) // k for k in ks]) if ks else None

    def at(self, pos: int, o: int, step):
        """Event `pos` runs on device `o` at grid step `step` (a step of the grid)."""
        key = ("at", pos, o, step.get_id())
        out = self.memo.get(key)
        if out is None:
            z3 = self.z3
            g = z3.substitute(self.evs[pos].guard, (self.sym.me, self.dev(o)), (self.sym.step, step))
            out = self.memo[key] = (step, z3.simplify(z3.And(step >= 0, step < self.G, g)))
        return out[1]

    def step(self, name: str):
        v = self.z3.Int(name)
        return v, self.z3.And(v >= 0, v < self.G)

    def holds(self, claim) -> tuple[bool, Any]:
        """Whether `claim` holds for every value of its variables (with `base`); else a model."""
        z3 = self.z3
        s = z3.Solver()
        s.set("timeout", TIMEOUT_MS)
        s.add(self.base, z3.Not(claim))
        r = s.check()
        if r == z3.unsat:
            return True, None
        return False, (s.model() if r == z3.sat else "the solver gave up")


def balanced(ctx: _Ctx, arr, waits, sem) -> bool:
    """PAR-12's premise for one counter: at every step of every N, what arrives on a device's counter
    equals what the device waits for on it, in one unit (a signal, or bytes of copies)."""
    z3 = ctx.z3
    ins = [a for a in arr if a.sem == sem]
    outs = [w for w in waits if w.sem == sem]
    if len({x.unit for x in ins + outs}) != 1:
        return False  # a copy on a plain semaphore counts differently per mode (DMA-6): outside PAR-12
    j, dj = ctx.step("j")
    got = z3.Sum([z3.If(ctx.at(a.pos, a.c, j), a.amount, 0) for a in ins] + [z3.IntVal(0)])
    took = z3.Sum([z3.If(ctx.at(w.pos, 0, j), w.amount, 0) for w in outs] + [z3.IntVal(0)])
    return ctx.holds(z3.Implies(dj, got == took))[0]


def known(ctx: _Ctx, facts, o_y: int, t, q: int, o_x: int, i, p: int):
    """PAR-13: the orders PAR-12's facts give: a Z3 formula saying that device `o_x` has done position
    `p` of step `i` by the time device `o_y` has done position `q` of step `t`: by program order, or by
    a chain of at most MAX_HOPS facts, each hop from a waiting device to the sender of an arrival it
    forced, in the same step or the step before."""
    z3 = ctx.z3
    remote = [f for f in facts if f.a.c != 0]
    widest = max((abs(f.a.c) for f in remote), default=0)
    out = []

    def walk(o, step, at_q, hops, conds):
        one = ctx.same(o, o_x)  # None: never one device
        if one is not None:
            out.append(z3.And(*conds, one, z3.Or(i < step, z3.And(i == step, p <= at_q))))
        if hops == MAX_HOPS:
            return
        for f in remote:
            nxt = o + f.a.c  # the sender of f's arrival, seen from the waiting device o
            if abs(nxt - o_x) > (MAX_HOPS - hops - 1) * widest:
                continue
            for lag in (0, 1):
                if lag == 0 and f.w.pos > at_q:
                    continue
                s_ = step - lag if lag else step
                walk(nxt, s_, f.a.pos, hops + 1, conds + [ctx.at(f.w.pos, o, s_), ctx.at(f.a.pos, nxt, s_)])

    walk(o_y, t, q, 0, [])
    return z3.Or(*out) if out else z3.BoolVal(False)


def forced(ctx: _Ctx, arr, waits, cands: set) -> set:
    """PAR-12: the greatest set of candidate facts each of which its own premises justify, every
    other fact of the set assumed (the first-break argument of DR-6: sound for the set as a whole)."""
    z3 = ctx.z3
    facts = set(cands)
    while True:
        drop = set()
        for f in facts:
            j, dj = ctx.step("j")
            here = z3.And(dj, ctx.at(f.w.pos, 0, j), ctx.at(f.a.pos, f.a.c, j))
            later = [w for w in waits if w.sem == f.w.sem and w.pos > f.w.pos]
            rest = z3.Sum([z3.If(ctx.at(w.pos, 0, j), w.amount, 0) for w in later] + [z3.IntVal(0)])
            # a TPU lands a copy in pieces (DR-9): a missing piece is one byte short, so after a DMA
            # wait no other wait of the step may take what a piece of another copy could have brought
            claims = [rest < f.a.amount if f.a.unit == "sig" else rest == 0]
            for b in (a for a in arr if a.sem == f.w.sem):
                # b's arrivals of later steps come after the wait: then at most this step's can have come
                claims.append(z3.Implies(j + 1 < ctx.G, known(ctx, facts, b.c, j + 1, b.pos, 0, j, f.w.pos)))
            if not ctx.holds(z3.Implies(here, z3.And(*claims)))[0]:
                drop.add(f)
        if not drop:
            return facts
        facts -= drop


def touches(evs: list[Event], arr: list[Arrival]) -> list[Touch]:
    """PAR-11: every access, from the memory's side; the launch's copy-in and write-back and the read of
    the results after the call are a write of each argument before step 0 and a read after the last."""
    out = []
    args = {}
    for e in evs:
        it = e.item
        c = (it[1] or 0) if it is not None and it[0] == "dma" else 0
        for r in e.reads:
            out.append(Touch(e.pos, r, False, 0, "read" if it is not None else None, "step", e.line))
            args.setdefault(r.arg, r.extent)
        for r in e.writes:
            dma = it is not None and it[0] == "dma"
            out.append(Touch(e.pos, r, True, c if dma else 0, "write" if dma else None, "step", e.line))
            args.setdefault(r.arg, r.extent)
    for a, ext in sorted(args.items()):
        whole = Region(a, None, ext, ext)
        out.append(Touch(-1, whole, True, 0, None, "pro", "the launch's copy-in"))
        out.append(Touch(len(evs), whole, False, 0, None, "epi", "the write-back and the read after the call"))
    return out


def _span(ctx, r: Region, o: int, step):
    z3, sym = ctx.z3, ctx.sym
    ext = sym.lit(r.extent)
    if r.start is None:
        return z3.IntVal(0), ext
    if hasattr(r.start, "a"):
        start = sym.lit(r.start)
    else:
        start = z3.substitute(r.start, (sym.me, ctx.dev(o)), (sym.step, step))
    return start, start + sym.lit(r.size)


def _observer(ctx, t: Touch, step):
    """Where the toucher stands when it touches: (step, the last position it has done)."""
    if t.phase == "pro":
        return ctx.z3.IntVal(-1), -1
    if t.phase == "epi":
        return ctx.G, -1
    return step, t.event if t.half else t.event - 1  # a copy's half comes after its start


def ordered(ctx, facts, a: Touch, ia, b: Touch, ib):
    """PAR-13: `a` (at step `ia`) happens before `b` (at step `ib`) in every run, both touching the
    memory of device `m`."""
    z3 = ctx.z3
    t, q = _observer(ctx, b, ib)
    if a.half is None:
        p = {"step": a.event, "pro": -1}.get(a.phase, len(ctx.evs))  # the write-back comes after all
        return known(ctx, facts, b.o, t, q, a.o, ia, p)
    out = []
    if b.half == "write" and a.half == "read" and a.event == b.event and a.o == b.o:
        out.append(ia == ib)  # a copy reads before it writes
    for f in facts:
        if f.a.pos != a.event or (a.half == "write" and f.a.kind != "write"):
            continue  # a read half is done once its send semaphore or its write half has arrived
        oz = a.o - f.a.c  # the device whose counter the arrival lands on
        out.append(z3.And(ctx.at(f.w.pos, oz, ia), known(ctx, facts, b.o, t, q, oz, ia, f.w.pos)))
    return z3.Or(*out) if out else z3.BoolVal(False)


def _steps(ctx, t: Touch, name: str):
    z3 = ctx.z3
    v = z3.Int(name)
    if t.phase == "pro":
        return v, v == -1
    if t.phase == "epi":
        return v, v == ctx.G
    return v, ctx.at(t.event, t.o, v)


def well_defined(ctx, t: Touch) -> str:
    """PAR-11: a region read symbolically is inside its argument at every N, device and step it runs
    at, with no int32 operation on the way wrapping; '' when proved, else why not. The start is a term
    in the id of the device that computes it (the issuer, for a copy's destination)."""
    from semcheck.checker.parametric.int32_terms import within_int32

    z3, sym = ctx.z3, ctx.sym
    r = t.region
    if r.start is None:
        return ""
    affine = hasattr(r.start, "a")
    start = sym.lit(r.start) if affine else r.start
    claim = z3.And(start >= 0, start + sym.lit(r.size) <= sym.lit(r.extent),
                   *([] if affine else within_int32(z3, r.start, sym.kernel)))
    guard = z3.And(sym.step >= 0, sym.step < ctx.G, sym.me >= 0, sym.me < ctx.N, ctx.evs[t.event].guard)
    ok, _ = ctx.holds(z3.Implies(guard, claim))
    return "" if ok else f"semcheck cannot prove the region at {t.line} inside its buffer at every N (PAR-11)"


def _smallest(ctx, s, model):
    """Z3's counterexample with the smallest N it finds below the first."""
    z3 = ctx.z3
    best = model
    for _ in range(12):
        n = best.eval(ctx.N, model_completion=True).as_long()
        s.push()
        s.add(ctx.N < n)
        r = s.check()
        if r != z3.sat:
            s.pop()
            break
        best = s.model()
        s.pop()
        s.add(ctx.N < n)
    return best


def guards_in_int32(ctx) -> str:
    """PAR-11: no int32 operation a branch condition reads wraps, at any N, device and step (Z3's
    integers then decide each event's branch as jax does); '' when proved, else where not."""
    from semcheck.checker.parametric.int32_terms import within_int32

    z3, sym = ctx.z3, ctx.sym
    seen = set()
    for e in ctx.evs:
        if e.guard.get_id() in seen:
            continue
        seen.add(e.guard.get_id())
        within = within_int32(z3, e.guard, sym.kernel)
        where = z3.And(sym.step >= 0, sym.step < ctx.G, sym.me >= 0, sym.me < ctx.N)
        if within and not ctx.holds(z3.Implies(where, z3.And(*within)))[0]:
            return f"a branch condition of {e.line} may wrap int32 (PAR-11)"
    return ""


def race_argument(sym: Sym, evs: list[Event], dma_sems: set, at_n: int | None = None,
                  budget_s: float = 600.0) -> RaceArgument:
    """PAR-14: no two accesses of the template on any devices and steps of any N >= the cutoff overlap
    unordered with one a write. `sym` is the walk whose terms `evs` holds; `dma_sems` the semaphores
    of DMA type; `at_n`: the argument at that one N only (what a test holds to the per-N check);
    past `budget_s` seconds nothing is claimed."""
    import time

    z3 = sym.z3
    deadline = time.monotonic() + budget_s
    arr, waits = counters(evs, dma_sems)
    ts = touches(evs, arr)
    ctx = _Ctx(sym, evs, at_n)
    why = guards_in_int32(ctx)
    if why:
        return RaceArgument(False, why)
    sems = {a.sem for a in arr} | {w.sem for w in waits}
    good = {s for s in sems if balanced(ctx, arr, waits, s)}
    cands = set()
    for w in waits:
        for a in arr:
            if a.sem == w.sem and w.sem in good:
                j, dj = ctx.step("j")
                if not ctx.holds(z3.Not(z3.And(dj, ctx.at(w.pos, 0, j), ctx.at(a.pos, a.c, j))))[0]:
                    cands.add(Fact(w, a))  # a wait and an arrival that some step has both of
    facts = forced(ctx, arr, waits, cands)
    for t in ts:
        why = well_defined(ctx, t) if t.phase == "step" else ""
        if why:
            return RaceArgument(False, why)
    for a, b in itertools.combinations_with_replacement(ts, 2):
        if a.region.arg != b.region.arg or not (a.write or b.write):
            continue
        if time.monotonic() > deadline:
            return RaceArgument(False, f"not decided within {budget_s:g}s (PAR-14)")
        i, gi = _steps(ctx, a, "i")
        j, gj = _steps(ctx, b, "j")
        sa, ea = _span(ctx, a.region, a.o, i)
        sb, eb = _span(ctx, b.region, b.o, j)
        one = a.event == b.event and a.half is None and b.half is None  # a swap's read and write: one op
        same = z3.And(i == j, z3.BoolVal(a is b or one))
        # ERR-27: jax's race detector's test, which holds of every pair that shares an element (ACC-2) and of
        # a window of no element that starts inside the other: one argument for every mode
        meet = starts_meet(sa, ea, sb, eb, either=z3.Or, both=z3.And)
        race = z3.And(gi, gj, meet, z3.Not(same),
                      z3.Not(ordered(ctx, facts, a, i, b, j)), z3.Not(ordered(ctx, facts, b, j, a, i)))
        s = z3.Solver()
        s.set("timeout", TIMEOUT_MS)
        s.add(ctx.base, race)
        r = s.check()
        if r == z3.unsat:
            continue
        if r != z3.sat:
            return RaceArgument(False, f"the solver gave up on {a.line} against {b.line} (PAR-14)")
        md = _smallest(ctx, s, s.model())
        at = {k: md.eval(v, model_completion=True).as_long()
              for k, v in (("N", ctx.N), ("device", ctx.m), ("i", i), ("j", j))}
        return RaceArgument(False, f"{_words(a)} at {a.line} and {_words(b)} at {b.line} touch device "
                            f"{at['device']}'s {_arg(a)} at grid steps {at['i']} and {at['j']} with no order "
                            f"the semaphores force (PAR-14), first at N = {at['N']}", at, ctx.low)
    return RaceArgument(True, low=ctx.low)


def _words(t: Touch) -> str:
    if t.phase != "step":
        return "the launch's copy-in" if t.phase == "pro" else "the write-back"
    if t.half:
        return f"a copy's {t.half} half"
    return "a store" if t.write else "a load"


def _arg(t: Touch) -> str:
    return f"argument {t.region.arg}"


def argue(jaxprs: dict, grid, axis, at_n: int | None = None, budget_s: float = 600.0) -> RaceArgument:
    """PAR-11 .. PAR-14 on the jaxprs traced at every N (which PAR-3 .. PAR-5 accepted)."""
    from semcheck.checker.parametric.race_template import events, record
    from semcheck.checker.parametric.template import align, low_cut

    ns = sorted(jaxprs)
    numbers = align(jaxprs)
    cut = low_cut(ns, grid)
    rows, sym = {}, None
    try:
        for n in ns:
            sym = Sym(numbers, grid, cut=cut)
            sym.axis = axis
            rows[n] = record(sym, jaxprs[n])
        evs = events(rows)
    except NotTemplate as e:
        return RaceArgument(False, f"{e} (PAR-11)")
    big = jaxprs[ns[-1]]
    dma_sems = {("arg", i) for i, v in enumerate(big.invars) if "dma_sem" in str(v.aval)}
    return race_argument(sym, evs, dma_sems, at_n, budget_s)
