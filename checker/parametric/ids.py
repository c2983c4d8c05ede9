"""The id properties and dma-bytes for every N (specs/deciding/parametric.md PAR-9, PAR-10).

Without `run_scoped` a kernel allocates only what its launch allocates (LAUNCH-1): one buffer per
operand and scratch buffer, and one semaphore allocation per semaphore operand, whose count is the
product of the operand's shape, on every device alike. The shape's dimensions are numbers of the
template, affine in N (PAR-3), and so is the collective id, so the ids at every N are a few
polynomials in N: `id_reasons` asks Z3 whether any N breaks id-int16 or id-disjoint. `bytes_reason`
holds dma-bytes to a uniform ring's erased events (PAR-2): one copy size per semaphore, every wait a
multiple of it, and PAR-6's run completing at every N.
"""

from __future__ import annotations

import dataclasses

from semcheck.checker.parametric.template import N_MAX, Affine, NotTemplate, fit
from semcheck.model.ids import FIRST_BUFFER_ID, FIRST_SEMAPHORE_ID, INT16_MAX, INT16_MIN

ID_PROPS = ("id-disjoint", "id-int16", "id-agreement")
BYTES = "dma-bytes"


@dataclasses.dataclass(frozen=True)
class Allocations:
    """PAR-9: what the launch allocates at every N, as functions of N."""

    sems: tuple[tuple[str, tuple[Affine, ...]], ...]  # per semaphore operand: its name and shape
    buffers: int  # buffer allocations (one id each), the same number at every N
    collective: Affine | None  # the collective id; None: the kernel has none


def id_template(kernels: dict) -> Allocations:
    """PAR-9's premises, which are PAR-3's structure and the launch's allocations (not PAR-4 .. PAR-5's
    ring: where a kernel sends does not change what it allocates); raises NotTemplate when one fails."""
    from semcheck.checker.parametric.template import MIN_TRACED, has_run_scoped, align

    ns = sorted(kernels)
    if len(ns) < MIN_TRACED:
        raise NotTemplate(f"fewer than {MIN_TRACED} device counts traced")
    calls = {n: kernels[n].call for n in ns}
    if any(c is None for c in calls.values()):
        raise NotTemplate("a kernel call semcheck does not see whole")
    if any(c.cores_per_device != 1 for c in calls.values()):
        raise NotTemplate("a device has several cores")
    align({n: c.jaxpr for n, c in calls.items()})
    where = has_run_scoped(calls[ns[-1]].jaxpr)
    if where:
        raise NotTemplate(f"run_scoped allocates in the kernel's body ({where})")
    return allocations(kernels)


def allocations(kernels: dict) -> Allocations:
    """PAR-9's premises at every traced N; raises NotTemplate with the reason when one fails."""
    from semcheck.model.ops import AllocBuffer, AllocSem

    ns = sorted(kernels)
    shapes, buffers, cids = {}, set(), {}
    for n in ns:
        program, call = kernels[n].program, kernels[n].call
        lists = []
        for ops in program.cores:
            allocs = [op for op in ops if type(op) in (AllocSem, AllocBuffer)]
            if any(op.scope != "device" for op in allocs):
                raise NotTemplate(f"at N = {n} a core allocates on its own (run_scoped)")
            lists.append(tuple((type(op).__name__, getattr(op, "count", 1)) for op in allocs))
        if len(set(lists)) != 1:
            raise NotTemplate(f"at N = {n} the devices do not allocate alike")
        sem_ops = [op for op in call.operands if op.kind == "semaphore"]
        counts = [c for kind, c in lists[0] if kind == "AllocSem"]
        if counts != [op.count for op in sem_ops]:
            # the launch's allocations are not its semaphore operands': a lowering PAR-9 does not know
            raise NotTemplate(f"at N = {n} the semaphore allocations are not the kernel's semaphore operands")
        shapes[n] = [(op.name, tuple(op.shape)) for op in sem_ops]
        buffers.add(sum(1 for kind, _ in lists[0] if kind == "AllocBuffer"))
        cids[n] = program.collective_id
    if len(buffers) != 1:
        raise NotTemplate("the number of buffers the launch allocates changes with N")
    ref = shapes[ns[-1]]
    if any([(a, len(s)) for a, s in shapes[n]] != [(a, len(s)) for a, s in ref] for n in ns):
        raise NotTemplate("the semaphore operands differ between device counts")
    sems = []
    for k, (name, shape) in enumerate(ref):
        dims = []
        for d in range(len(shape)):
            f = fit([(n, shapes[n][k][1][d]) for n in ns])
            if f is None:
                raise NotTemplate(f"the size of the semaphore array {name!r} is not affine in N")
            dims.append(f)
        sems.append((name, tuple(dims)))
    if len({v is None for v in cids.values()}) != 1:
        raise NotTemplate("the kernel has a collective id at some device counts only")
    cid = None
    if cids[ns[-1]] is not None:
        cid = fit([(n, cids[n]) for n in ns])
        if cid is None:
            raise NotTemplate("the collective id is not affine in N")
    return Allocations(tuple(sems), buffers.pop(), cid)


def _term(z3, f: Affine, n):
    return z3.IntVal(f.a) * n + z3.IntVal(f.b)


def _first(z3, n, bad, timeout_ms: int = 5_000) -> tuple[int | None | str, bool]:
    """An N in [2, N_MAX] at which `bad` holds (None: none does; "unknown": Z3 gave up), and whether it
    is the least such N (bisection on the bound: a model is some N, not the first)."""
    def at_most(hi):
        s = z3.Solver()
        s.set("timeout", timeout_ms)
        s.add(n >= 2, n <= hi, bad)
        r = s.check()
        return s.model()[n].as_long() if r == z3.sat else (None if r == z3.unsat else "unknown")

    hit = at_most(N_MAX)
    if not isinstance(hit, int):
        return hit, True
    lo = 2
    while lo < hit:
        mid = (lo + hit) // 2
        got = at_most(mid)
        if got == "unknown":
            return hit, False
        if got is None:
            lo = mid + 1
        else:
            hit = got
    return hit, True


def _at(found: tuple) -> str:
    n, least = found
    return f"{'first ' if least else ''}at N = {n}"


def id_reasons(al: Allocations, mode: str) -> dict[str, str]:
    """PAR-9 for one mode: per id property, '' when it holds at every N >= 2, else why not."""
    if mode == "hardware":
        # HW-1: a TPU has no ids; a reference names its site, and every device has the launch's sites
        return {p: "" for p in ID_PROPS}
    import z3

    n = z3.Int("N")
    size = [z3.Product(*[_term(z3, d, n) for d in dims]) if dims else z3.IntVal(1) for _, dims in al.sems]
    total = z3.Sum(*size) if size else z3.IntVal(0)
    for name, dims in al.sems:
        for d in dims:
            at = _first(z3, n, _term(z3, d, n) < 0)
            if at[0] is not None:
                why = (f"the semaphore array {name!r} would have a negative size, {_at(at)} (PAR-9)"
                       if at[0] != "unknown" else "the solver gave up on the semaphore arrays' sizes (PAR-9)")
                return {p: why for p in ID_PROPS}
    last = FIRST_SEMAPHORE_ID + total - 1
    over = _first(z3, n, z3.And(total >= 1, last > INT16_MAX))
    if al.buffers and FIRST_BUFFER_ID + al.buffers - 1 > INT16_MAX:
        internal = f"{al.buffers} buffers: their ids pass int16 at every N (PAR-9)"
    elif over[0] == "unknown":
        internal = "the solver gave up on the largest semaphore id (PAR-9)"
    elif over[0] is not None:
        internal = (f"the semaphore ids reach {FIRST_SEMAPHORE_ID} + ({_words(al)}) - 1, past int16 "
                    f"({INT16_MAX}), {_at(over)} (PAR-9)")
    else:
        internal = ""
    fixed = clash = ""
    if al.collective is not None:
        cid = _term(z3, al.collective, n)
        at = _first(z3, n, z3.Or(cid > INT16_MAX, cid < INT16_MIN))
        if at[0] is not None:
            fixed = (f"the collective id ({al.collective}) does not fit int16, {_at(at)} (PAR-9)" if at[0] != "unknown"
                     else "the solver gave up on the collective id (PAR-9)")
        # a collision among ids that all fit int16 (past int16 the ids are id-int16's to report)
        at = _first(z3, n, z3.And(cid >= FIRST_SEMAPHORE_ID, cid <= last, last <= INT16_MAX))
        if at[0] == "unknown":
            clash = "the solver gave up on the collective id against the internal ids (PAR-9)"
        elif at[0] is not None:
            clash = (f"the collective id ({al.collective}) is one of the internal ids {FIRST_SEMAPHORE_ID} .. "
                     f"{FIRST_SEMAPHORE_ID} + ({_words(al)}) - 1, {_at(at)} (PAR-9)")
    # id-agreement reads the internal ids only: the barrier semaphore is the fixed one on every core (SEM-2)
    return {"id-disjoint": clash or internal or fixed, "id-int16": internal or fixed, "id-agreement": internal}


def _words(al: Allocations) -> str:
    """The number of semaphores the launch allocates, as a polynomial in N: `3 + 2N`."""
    parts = []
    for _, dims in al.sems:
        parts.append("\u00b7".join(f"({d})" if d.a and d.b else str(d) for d in dims) if dims else "1")
    return " + ".join(parts) or "0"


# --- PAR-10: dma-bytes --------------------------------------------------------------------------


def bytes_summary(low) -> dict | str:
    """PAR-10 (a), (b) on one uniform lowering: per DMA key (a semaphore a copy half signals or a DMA
    waits on, in core 0's events) the one size of its copies; a string saying why not when a key is
    also a plain semaphore, copies of several sizes signal it, or a DMA wait takes part of a copy."""
    halves: dict = {}
    plain: set = set()
    waits: dict = {}
    for x in low.contributions:
        if x.owner == 0:
            (halves.setdefault(x.counter[0], set()).add(x.amount) if x.kind != "signal"
             else plain.add(x.counter[0]))
    for w in low.waits.values():
        if w.core == 0:
            (waits.setdefault(w.counter[0], []).append(w.value) if w.kind == "dma" else plain.add(w.counter[0]))
    out = {}
    for key in sorted(set(halves) | set(waits), key=str):
        if key in plain:
            return "a semaphore that copies signal is also signalled or waited on as a plain semaphore"
        sizes = halves.get(key, set())
        if len(sizes) != 1:
            return "copies of several sizes signal one semaphore" if sizes else "a DMA wait on a semaphore no copy signals"
        (s,) = sizes
        if s <= 0:
            return "a copy of no bytes"
        if any(v % s for v in waits.get(key, ())):
            return "a DMA wait takes bytes that are not a whole number of the copies on its semaphore"
        out[key] = s
    return out


def bytes_reason(summaries: dict[int, dict | str], erased: dict, pumping: str, inner: list[int]) -> str:
    """PAR-10's conditions over the traced N; '' when dma-bytes holds at every N > K."""
    if pumping:
        return f"the run is not shown to complete at every N (PAR-6): {pumping}"
    for n, s in summaries.items():
        if isinstance(s, str):
            return f"at N = {n} {s} (PAR-10)"
        if any(erased[n].totals.get(key, 0) for key in s):
            return f"at N = {n} the copies deliver other bytes than the DMA waits take (PAR-10)"
    sizes: dict = {}
    for s in summaries.values():
        for key, size in s.items():
            if sizes.setdefault(key, size) != size:
                return "a copy's size changes with N (PAR-10)"
    if len({frozenset(summaries[n]) for n in inner}) > 1:
        return "the semaphores copies signal differ between device counts (PAR-10)"
    return ""
