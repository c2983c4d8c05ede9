"""`dma-bytes` (PROP-6).

For every counter (s, c) that a DMA half signals in bytes (DMA-6: not a
    non-DMA semaphore on hardware, where a copy counts 1) or a DMA-kind wait
    waits on: nothing else uses it (no plain signal, no semaphore-kind
    wait); the bytes its DMA halves deliver add up to what c's DMA waits
    take (nothing left at exit, the last wait can be met); and for each DMA
    wait, with N the bytes the waits up to it take, the copies that can
    start before it completes (a fast run with c held at the wait, RUN-3)
    deliver at least N (else it can never be met) and some of them deliver
    exactly N (else it always takes part of a copy). A bulk wait (one wait
    for several copies) and copies of different sizes from several cores
    pass; which copy a wait stands for is the race property's question.
    When every copy of the counter has one size s the held runs are not
    needed: N must be a multiple of s.
"""


from __future__ import annotations

import dataclasses
import itertools
from operator import itemgetter
from typing import get_args

from semcheck.checker.properties.sites import site, sites
from semcheck.checker.properties.verdict import Verdict, Witness
from semcheck.model.dma import counts_bytes
from semcheck.model.fast import fast_run
from semcheck.model.ops import DmaMode, Program, SemType, Wait
from semcheck.checker.properties.analysis import ModeAnalysis, analysis_of
from semcheck.checker.properties.exit_balance import semaphore_words


def dma_bytes(program: Program, mode: DmaMode, *, timeout_ms: int = 30_000, exits: bool = True,
              facts: ModeAnalysis | None = None) -> Verdict:
    """PROP-6 (see the module docstring).

    Decided on the lowering and, for a counter whose copies differ in size, one held run per
    DMA wait (which copies can have started before it completes); the held runs follow `mode`.
    `exits=False`: the program's runs never reach the kernel's exit (the prefix every run takes
    before an ERR-9 failure, `checker.properties.failing_runs`), so bytes delivered and never waited for are
    not left at an exit: only the waits are judged. `facts`: the program's analysis under `mode`.
    """
    facts = analysis_of(program, mode, facts)
    return facts.dma_bytes(exits, lambda: _dma_bytes_once(facts, exits))


def _dma_bytes_once(facts: ModeAnalysis, exits: bool) -> Verdict:
    # eager and on_wait share the lowering and add the same amounts (DMA-6); only the held runs
    # follow the mode. A verdict reached without one is both modes': it is decided once for both.
    key = ("dma-bytes", facts.family, exits)
    hit = facts.whole.known(key) if facts.family == "interpreter" else None
    if hit is not None:
        return dataclasses.replace(hit)
    verdict, runs = _dma_bytes(facts, exits)
    if facts.family == "interpreter" and runs == 0:
        facts.whole.keep(key, verdict)
    return verdict


# sort keys read in C from the NamedTuple records: a contribution's (owner, pos), a wait's pos
_OWNER_POS = itemgetter(0, 1)
_POS = itemgetter(1)

# Sub-multisets of the copies that may have arrived, per wait, beyond which the verdict is unknown.
DMA_BYTES_BUDGET = 20_000


def _dma_bytes(facts: ModeAnalysis, exits: bool = True) -> tuple[Verdict, int]:
    """The verdict, and how many held runs (which follow the mode) it took."""
    prop = "dma-bytes"
    program, mode = facts.program, facts.mode
    low = facts.lowering
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

    every_half_in_bytes = _every_half_in_bytes(program, low)
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
    held: dict = {}  # (core, pos) -> positions of the run held there

    def positions(core: int, pos: int):
        nonlocal runs
        hit = held.get((core, pos))
        if hit is None:
            runs += 1
            out = fast_run(program, mode, hold={core: pos}, record=False)
            hit = held[(core, pos)] = None if out.failure is not None else out.state.pcs
        return hit

    for k in sorted(counters, key=repr):
        ws = low.waits_by_counter.get(k, [])
        dma_x = sorted(byte_x.get(k, ()), key=_OWNER_POS)
        sig_x = plain_x.get(k, [])
        sem_w = [w for w in ws if w.kind != "dma"]
        dma_w = sorted((w for w in ws if w.kind == "dma"), key=_POS)
        checked += 1
        if sig_x or sem_w:
            where = _where(k, low)
            other = sig_x[0] if sig_x else sem_w[0]
            loc = program.cores[other.owner][other.pos].loc if sig_x else other.loc
            what = ("a semaphore wait" if not sig_x else _plain_words(program.cores[other.owner][other.pos])
                    if sig_x[0].kind == "signal" else "a copy counted as 1 (a non-DMA semaphore on hardware, DMA-6)")
            return _violated(prop, f"{where} is used by DMAs and by {what} ({loc})", [loc], stats,
                             {"semaphore": semaphore_words(k[0], low, k[1]), "core": k[1], "problem": "mixed",
                              "sites": sites(site("mixed-use", loc, f"{what} on {where}, which DMAs also signal in "
                                                                    "bytes: give it a semaphore of its own"))}), runs
        sizes, values = [x.amount for x in dma_x], [w.value for w in dma_w]
        if sum(sizes) < sum(values) or (exits and sum(sizes) > sum(values)):
            where, details = _where(k, low), _details(k, low, sizes, values)
            locs = [w.loc for w in dma_w[:1]] + [program.cores[x.owner][x.pos].loc for x in dma_x[:1]]
            what = ("bytes are left at exit" if sum(sizes) > sum(values)
                    else "the last DMA wait can never be met")
            return _violated(prop, f"{where}: DMAs deliver {sizes} bytes ({sum(sizes)} in all), DMA waits expect "
                             f"{values} ({sum(values)} in all): {what}", locs, stats,
                             {**details, "problem": "bytes", "sites": _sites(program, where, dma_w[:1], dma_x[:1], sizes,
                                                                             values)}), runs
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
                    undecided.append(f"{_where(k, low)} (a run held at wait #{n + 1} fails)")
                    break
                if pcs[w.core] < w.pos:
                    continue  # the core never reaches this wait: a deadlock, PROP-4's to report
                may = [x.amount for x in dma_x if pcs[x.owner] > x.pos]
            answer = _whole_copies(may, need)
            if answer == "ok":
                continue
            locs = [w.loc] + [program.cores[x.owner][x.pos].loc for x in dma_x[:1]]
            where, details = _where(k, low), _details(k, low, sizes, values)
            details["sites"] = _sites(program, where, [w], dma_x[:1], sizes, values)
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
            undecided.append(f"{where} (wait #{n + 1} at {w.loc}: too many copies to decide)")  # `where` made above
            break
    stats["counters"] = checked
    stats["frozen_runs"] = runs
    if undecided:
        return Verdict(prop, "unknown", reason="undecided: " + ", ".join(undecided[:3]), stats=stats), runs
    return Verdict(prop, "proved", reason=f"{checked} DMA semaphores: every DMA wait can be met on whole copies "
                   "and every byte delivered is waited for", stats=stats), runs


def _where(k, low) -> str:
    """A counter as the messages say it (REP-24's name, `recv_sem[0] (id 2001) on core 3`): made only for a counter
    a message is about (RUN-64: at 8,960 devices naming each of about 36,000 counters was most of the check)."""
    return f"{semaphore_words(k[0], low, k[1])} on core {k[1]}"


def _details(k, low, sizes: list, values: list) -> dict:
    """The details of a finding about counter `k`: its name, core, the bytes delivered and the waits' values."""
    return {"semaphore": semaphore_words(k[0], low, k[1]), "core": k[1], "delivered": sizes, "waited": values}


def _plain_words(op) -> str:
    """What a plain contribution is: a signal, or a wait for a negative amount, which raises its count (ACC-76)."""
    return f"a {op.describe()}, which raises its count (ACC-76)" if type(op) is Wait else "a plain signal"


def _every_half_in_bytes(program: Program, low) -> bool:
    """DMA-6: whether both halves of every copy of the lowering count bytes under its mode (then no half
    needs asking). Read off the semaphore types the program's copies use, once per copy."""
    mode = low.mode
    if all(counts_bytes(t, mode) for t in get_args(SemType)):
        return True
    cores = program.cores
    types = {(op.src_sem_type, op.dst_sem_type) for op in (cores[d.core][d.pos] for d in low.dmas)}
    return all(counts_bytes(a, mode) and counts_bytes(b, mode) for a, b in types)


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


def _sites(program: Program, where: str, ws, xs, sizes: list[int], values: list[int]) -> list[dict]:
    """REP-10: the wait whose size does not match, then the copy on its semaphore."""
    return sites(*(site("wait", w.loc, f"a DMA wait for {w.value} bytes on {where}, whose copies deliver "
                                       f"{sum(sizes)} bytes in all (its waits expect {sum(values)})") for w in ws),
                 *(site("copy", program.cores[x.owner][x.pos].loc, f"this copy delivers {x.amount} bytes to {where}")
                   for x in xs))


def _violated(prop: str, msg: str, locs, stats: dict, details: dict) -> Verdict:
    return Verdict(prop, "violated", witness=Witness(message=msg, locs=tuple(locs), details=details,
                                                      hint="wait on each copy's own descriptor for its own size"),
                   stats=stats)


