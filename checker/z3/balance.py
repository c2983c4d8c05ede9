"""`exit-balance` (PROP-5) and `dma-bytes` (PROP-6).

exit-balance
    For every counter (semaphore, core): T = everything the program
    contributes to it (signals, and both halves of every DMA) and W =
    everything the core waits for on it. In a program that completes (no
    deadlock, no failure: decided as in `deadlock.py`), every op runs, so
    the final count is `executed - W` with `W <= executed <= T`.

    * T == W for every counter  ->  **proved**: every count is zero at the end
      and at every exit check (at the check the device's cores have finished,
      so `W <= arrived <= T = W`), and no DMA is pending at the end (a pending
      write half would leave its counter below W).
    * some T > W  ->  **violated**, with the model's fast run as witness
      (replayed): its final counts, pending DMAs and printed warnings.
    * the program can deadlock or fail -> **unknown** (counts at exit are not
      defined for the devices that never exit).

    The witness details also give, per device, the interpreter's expected
    warning `Semaphore N has non-zero count for D (global core G) at kernel
    exit: C` (EXIT-1): "never", "may" or "must" (or "unknown"); with "may",
    `not_must` says whether a run without the warning is proved to exist.
    "may" is witnessed by a run in which the device's exit check sees a
    non-zero count: the other cores
    run as far as they can while the checking core is frozen just before its
    check (in eager and hardware mode this maximises every count, so "never"
    is exact when that run sees only zeros). "must" is proved by the
    timestamped encoding: no reachable configuration has the checking core
    at its check with all of the device's counts zero. Under `on_wait` the
    timestamped encoding admits more runs than the interpreter (DMA halves
    may run early), so "must" stays sound but a "may" without a witness is
    reported as "unknown".

dma-bytes
    For every counter (s, c) that a DMA half signals or a DMA-kind wait
    waits on, let D be the byte counts of the DMA halves signalling it, in
    the order their DMAs start, and V the values of c's DMA-kind waits on
    it, in program order. The property: D = V in every run, and the counter
    sees nothing else (no plain signal, no semaphore-kind wait). When all of
    the counter's DMAs start on one core, D's order is that core's program
    order and the check is exact. When they start on several cores the order
    depends on the schedule; we report violated if no order can match (the
    multisets differ), proved if every order matches (all sizes equal), and
    unknown otherwise.
"""

from __future__ import annotations

import time
from collections import Counter as Multiset
from collections import defaultdict

import z3

from semcheck.checker.verdict import Verdict, Witness
from semcheck.checker.z3.counters import (
    EncodingBug,
    Lowered,
    maximal_run,
    failure_reached,
    lower,
    s_prime_run,
    truncate,
)
from semcheck.checker.z3.memo import MEMO
from semcheck.checker.z3.timestamped import Timestamped
from semcheck.model.ops import DmaMode, ExitCheck, Program
from semcheck.model.run import run
from semcheck.model.step import is_hardware

WARNING = "Semaphore {} has non-zero count for {} (global core {}) at kernel exit: {}"


def _key_str(key) -> str:
    return f"{key[0]} {key[1]}" if key[0] in ("internal", "fixed") else repr(key)


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


def _precondition(prop: str, program: Program, mode: DmaMode, low: Lowered, stats: dict):
    if not low.ok:
        return Verdict(prop, "unknown", reason="the program is outside the encoding: " + "; ".join(low.unsupported[:3]),
                       stats=stats), None
    sp = s_prime_run(low)
    fails = failure_reached(low, sp.state.pcs)
    if fails:
        c, pos, v = fails[0]
        return Verdict(prop, "unknown", reason=f"the program can fail ({v.message} at core {c} op {pos})",
                       stats=stats), None
    if sp.kind != "completed":
        return Verdict(prop, "unknown", reason="the program deadlocks (see deadlock-free): the blocked devices never "
                       "reach their exit check", stats=stats), None
    return None, sp


def exit_balance(program: Program, mode: DmaMode, *, timeout_ms: int = 30_000, warnings: bool = True,
                 must_max_ops: int = 5_000) -> Verdict:
    """PROP-5 (see the module docstring).

    `warnings=False` skips the per-device warning analysis; the "must" query
    (timestamped, cubic for rings) is only attempted up to `must_max_ops` operations.
    """
    prop = "exit-balance"
    t0 = time.perf_counter()
    low = lower(program, mode)
    stats: dict = dict(low.size())
    bad, sp = _precondition(prop, program, mode, low, stats)
    if bad is not None:
        return bad
    tot = totals(low)
    excess = {k: t - w for k, (t, w) in tot.items() if t != w}
    if any(e < 0 for e in excess.values()):
        raise EncodingBug(f"a completed program waits for more than it receives: {excess}")
    stats["counters"] = len(tot)
    stats["solve_s"] = round(time.perf_counter() - t0, 4)
    if not excess:
        return Verdict(prop, "proved", reason=f"all {len(tot)} counters receive exactly what they wait for", stats=stats)

    real = maximal_run(program, mode)
    replay = run(program, mode, real.schedule)
    if replay.state.pcs != real.state.pcs or replay.state.counts != real.state.counts:
        raise EncodingBug("the exit-balance witness does not replay")
    final = {k: real.state.counts.get(k, 0) for k in excess}
    pending = [d for d in real.pending_dmas]
    counters = [
        {"semaphore": _key_str(k[0]), "core": k[1], "contributed": tot[k][0], "waited": tot[k][1], "excess": e,
         "final_count_in_witness": final[k]}
        for k, e in sorted(excess.items(), key=repr)
    ]
    device_warn = _warnings(program, mode, low, excess, timeout_ms, must_max_ops) if warnings else {}
    lines = [f"{c['semaphore']} on core {c['core']}: receives {c['contributed']}, waits for {c['waited']}"
             for c in counters]
    msg = "unbalanced at exit: " + "; ".join(lines[:4]) + (f" (+{len(lines) - 4} more)" if len(lines) > 4 else "")
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


def _exit_checks(program: Program) -> dict[int, tuple[int, int]]:
    out = {}
    for c, ops in enumerate(program.cores):
        for i, op in enumerate(ops):
            if isinstance(op, ExitCheck):
                out.setdefault(op.device, (c, i))
    return out


def _warnings(program: Program, mode: DmaMode, low: Lowered, excess: dict, timeout_ms: int, must_max_ops: int) -> dict:
    """Per device with unbalanced counters: 'never' | 'may' | 'must' | 'unknown' (+ an example line)."""
    topo = program.topology
    out = {}
    query = enc = None
    for d, (c0, x) in sorted(_exit_checks(program).items()):
        cores = set(topo.cores_of_device(d))
        mine = {k: e for k, e in excess.items() if k[1] in cores}
        if not mine:
            out[str(d)] = {"behaviour": "never"}
            continue
        # may: freeze the checking core just before its check, run the rest as far as possible
        frozen = s_prime_run(low, extra_stops={c0: x})
        counts = {k: frozen.state.counts.get(k, 0) for k in mine}
        nonzero = {k: v for k, v in counts.items() if v}
        entry: dict = {}
        if nonzero:
            k, v = sorted(nonzero.items(), key=repr)[0]
            entry["example"] = WARNING.format(k[0][1] if len(k[0]) > 1 else k[0][0], d, k[1], v)
            entry["may_print"] = [WARNING.format(kk[0][1] if len(kk[0]) > 1 else kk[0][0], d, kk[1], vv)
                                  for kk, vv in sorted(nonzero.items(), key=repr)]
            may = True
        else:
            may = False if mode != "on_wait" else None
        # must: no reachable configuration at the check with all of them zero (timestamped encoding)
        must = None
        if may is not False and program.num_ops > must_max_ops:
            entry["note"] = f"must not decided: {program.num_ops} operations exceed the timestamped query's limit"
        elif may is not False:
            try:
                if query is None:  # one encoding of the runs for every device's question
                    enc = Timestamped(low, terminal=False)
                    query = z3.SolverFor("QF_LIA")
                    query.set("timeout", int(timeout_ms))
                    query.add(enc.formula)
                s = query
                now = enc.t[c0][x]
                s.push()
                try:
                    s.add(enc.q[c0] > x)
                    for k in mine:
                        s.add(enc.arrived_before(k, now) - enc.waited_before(k, now) == 0)
                    res = s.check()
                    gave_up = s.reason_unknown() if res == z3.unknown else ""
                finally:
                    s.pop()
                if res == z3.unsat:
                    must = True
                elif res == z3.sat:
                    # eager/hardware: a real run with all zeros; on_wait: the encoding admits extra runs
                    must = False if mode != "on_wait" else None
                else:
                    entry["note"] = f"must undecided: z3 gave up ({gave_up})"
            except IndexError:  # the check is beyond a failing op (cannot happen after the precondition)
                must = None
        if must:
            entry["behaviour"] = "must"
        elif may:
            entry["behaviour"] = "may"
            entry["not_must"] = must is False  # some run prints nothing (decided, outside on_wait)
        elif may is False:
            entry["behaviour"] = "never"
        else:
            entry["behaviour"] = "unknown"
        out[str(d)] = entry
    return out


# --- dma-bytes ----------------------------------------------------------------------------


def dma_bytes(program: Program, mode: DmaMode, *, timeout_ms: int = 30_000) -> Verdict:
    """PROP-6 (see the module docstring).

    Decided on the lowering alone (no run), so the interpreter's two DMA modes, which share
    their lowering, share the verdict.
    """
    family = "hardware" if is_hardware(mode) else "interpreter"
    return MEMO.get(program, ("dma-bytes", family), lambda: _dma_bytes(program, mode))


def _dma_bytes(program: Program, mode: DmaMode) -> Verdict:
    prop = "dma-bytes"
    low = lower(program, mode)
    stats: dict = dict(low.size())
    if not low.ok:
        return Verdict(prop, "unknown", reason="the program is outside the encoding: " + "; ".join(low.unsupported[:3]),
                       stats=stats)
    counters = set()
    for x in low.contributions:
        if x.kind != "signal":
            counters.add(x.counter)
    for w in low.waits.values():
        if w.kind == "dma":
            counters.add(w.counter)
    undecided = []
    checked = 0
    for k in sorted(counters, key=repr):
        xs = low.by_counter.get(k, [])
        ws = low.waits_by_counter.get(k, [])
        dma_x = sorted((x for x in xs if x.kind != "signal"), key=lambda x: (x.owner, x.pos))
        sig_x = [x for x in xs if x.kind == "signal"]
        sem_w = [w for w in ws if w.kind != "dma"]
        dma_w = [w for w in ws if w.kind == "dma"]
        checked += 1
        where = f"{_key_str(k[0])} on core {k[1]}"
        if sig_x or sem_w:
            other = sig_x[0] if sig_x else sem_w[0]
            loc = program.cores[other.owner][other.pos].loc if sig_x else other.loc
            what = "a plain signal" if sig_x else "a semaphore wait"
            return _violated(prop, f"{where} is used by DMAs and by {what} ({loc})", [loc], stats,
                             {"semaphore": _key_str(k[0]), "core": k[1], "problem": "mixed"})
        sizes, values = [x.amount for x in dma_x], [w.value for w in dma_w]
        if Multiset(sizes) != Multiset(values):
            locs = [w.loc for w in dma_w[:1]] + [program.cores[x.owner][x.pos].loc for x in dma_x[:1]]
            return _violated(prop, f"{where}: DMAs deliver {sizes} bytes, DMA waits expect {values}", locs, stats,
                             {"semaphore": _key_str(k[0]), "core": k[1], "delivered": sizes, "waited": values,
                              "problem": "bytes"})
        owners = {x.owner for x in dma_x}
        if len(owners) <= 1:
            for n, (x, w) in enumerate(zip(dma_x, dma_w)):
                if x.amount != w.value:
                    locs = [w.loc, program.cores[x.owner][x.pos].loc]
                    return _violated(
                        prop, f"{where}: DMA wait #{n + 1} ({w.loc}) waits for {w.value} bytes but DMA #{n + 1} "
                        f"({locs[1]}) delivers {x.amount}", locs, stats,
                        {"semaphore": _key_str(k[0]), "core": k[1], "delivered": sizes, "waited": values,
                         "problem": "order"})
        elif len(set(sizes)) > 1:
            undecided.append(where)
    stats["counters"] = checked
    if undecided:
        return Verdict(prop, "unknown", reason="DMAs of different sizes from several cores signal "
                       + ", ".join(undecided[:3]) + ": which wait gets which DMA depends on the schedule", stats=stats)
    return Verdict(prop, "proved", reason=f"{checked} DMA semaphores: every DMA wait matches one DMA", stats=stats)


def _violated(prop: str, msg: str, locs, stats: dict, details: dict) -> Verdict:
    return Verdict(prop, "violated", witness=Witness(message=msg, locs=tuple(locs), details=details,
                                                      hint="wait on each copy's own descriptor for its own size"),
                   stats=stats)


__all__ = ["dma_bytes", "exit_balance", "totals", "truncate"]
