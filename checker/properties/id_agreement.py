"""`id-agreement` (PROP-3): a remote signal or copy names, on the target core, the allocation it
names on the sender. Decided on the allocations where S' ends (exact when the lowering is static)
or of one real run (a disagreement there is real; otherwise unknown); no solver.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator

from semcheck.checker.properties.analysis import ModeAnalysis, analysis_of
from semcheck.checker.properties.replay import replay_until
from semcheck.checker.properties.verdict import Verdict, Witness
from semcheck.checker.static.system import Lowered
from semcheck.model.ops import BARRIER, DmaMode, DmaStart, Program, Signal
from semcheck.model.step import target_core


def _stats(low: Lowered, **more) -> dict:
    return dict(low.size(), **more)


def _agreement(held: dict, c: int, dst, ref, hw: bool, decided: dict):
    """"skip" (not a remote use of an allocated semaphore), "agree", or (target, description, theirs, id).

    The answer depends on the use only through the target, the sender's allocation's site, the index and
    (interpreter) the id; allocations are final ones, so each of those is decided once for the whole program
    (RUN-27): at pod scale every core uses the same few sites towards every other core."""
    if ref.label == BARRIER or not isinstance(dst, int) or dst == c:
        return "skip"
    mine = held.get(c, {}).get(ref.label)
    if mine is None or not 0 <= ref.index < mine.count:
        return "skip"  # a failing lookup, reported elsewhere
    sid = None if hw else mine.ids[ref.index]
    key = (dst, mine.site, ref.index, sid)
    answer = decided.get(key)
    if answer is None:
        answer = decided[key] = _decide(held, dst, mine.site, ref.index, sid, hw)
    return answer


def _decide(held: dict, dst: int, site, index: int, sid, hw: bool):
    theirs = [a for a in held.get(dst, {}).values() if a.site == site and index < a.count]
    if hw:
        # a site is one allocation of one call (PRG-105 names it `kernel#call.label`), and a
        # carried semaphore keeps its producer's: agreeing sites are the same link (PRG-18)
        if theirs:
            return "agree"
        return dst, f"site {site!r} index {index}", theirs, None
    if any(a.ids and a.ids[index] == sid for a in theirs):
        return "agree"
    return dst, f"id {sid} (site {site!r} index {index})", theirs, sid


def _remote_uses(program: Program, mode: DmaMode, low: Lowered, pcs) -> Iterator[tuple]:
    """(core, pc, op, reference, target) of every executed signal and copy, in program order per core.

    With a static lowering the targets are the lowering's (SIG-1, `static.lowering`): its contributions
    hold every signal and copy before each core's end in S' (a core is held at its first failure, and
    nothing past `reach` executes), with the core they land on, so nothing is resolved twice (RUN-27)."""
    if low.ok and all(pcs[c] <= low.hb.reach(c) for c in range(len(pcs))):
        cores = program.cores
        for x in low.contributions:
            kind = x.kind
            if kind == "dma_read" or x.pos >= pcs[x.owner]:
                continue
            op = cores[x.owner][x.pos]
            yield x.owner, x.pos, op, (op.sem if kind == "signal" else op.dst_sem), x.counter[1]
        return
    for c, ops in enumerate(program.cores):
        # the answer depends on the op only through these: resolve each (reference, target) a core uses once
        targets: dict[tuple, object] = {}
        for i, op in enumerate(ops[: pcs[c]]):
            t = type(op)
            if t is Signal:
                ref, dma = op.sem, False
            elif t is DmaStart:
                ref, dma = op.dst_sem, True
            else:
                continue
            where = (op.device, op.core, dma)
            dst = targets.get(where)
            if dst is None:
                dst = targets[where] = target_core(program, mode, c, op.device, op.core, dma=dma)
            yield c, i, op, ref, dst


def id_agreement(program: Program, mode: DmaMode, *, timeout_ms: int = 30_000,
                 facts: ModeAnalysis | None = None) -> Verdict:
    """PROP-3: a remote signal/DMA names, on the target core, the allocation it names on the sender.

    For each executed Signal (target core != sender) and DmaStart (receive
    semaphore, destination core != source) with a non-barrier semaphore
    `label[i]`: interpreter semantics -- the id N the sender holds must be
    element i of some allocation of the same site that the target core holds;
    hardware -- the target core must hold an allocation of that site with at
    least i+1 semaphores. Decided on the allocations of S' (exact when the
    lowering is static) or of a real run (a violation there is real;
    otherwise unknown).
    """
    prop = "id-agreement"
    facts = analysis_of(program, mode, facts)
    t0 = time.perf_counter()
    low = facts.lowering
    # With a static lowering the answer reads only S''s end, which eager and on_wait share
    # (`ModeAnalysis.end`), and targets, which differ only on hardware (SIG-1): a proof is both modes'.
    family = ("id-agreement", "interpreter") if low.ok and mode != "hardware" else None
    hit = facts.whole.known(family) if family is not None else None
    if hit is not None:
        return dataclasses.replace(hit)
    if low.ok:
        end = facts.end
        allocs, pcs = end.allocs, end.pcs
    else:
        run_out = facts.maximal_run(lookup_errors=False)
        allocs, pcs = run_out.state.allocs, run_out.state.pcs
    held: dict[int, dict] = {}
    for (c, label), alloc in allocs.items():
        held.setdefault(c, {})[label] = alloc
    hw = mode == "hardware"
    checked = 0
    decided: dict[tuple, object] = {}
    for c, i, op, ref, dst in _remote_uses(program, mode, low, pcs):
        answer = _agreement(held, c, dst, ref, hw, decided)
        if answer == "skip":
            continue
        checked += 1
        if answer == "agree":
            continue
        dst, mine_desc, theirs, sid = answer
        their_desc = (", ".join(f"{a.ids[ref.index] if a.ids else '-'}" for a in theirs) or "none")
        msg = (f"core {c} {'signals' if isinstance(op, Signal) else 'DMAs into'} {ref} = {mine_desc} on core {dst}, "
               f"but core {dst} holds no such semaphore (its ids for that site and index: {their_desc})")
        if low.ok:
            run_out = facts.s_prime_run  # this mode's own run: its schedule replays under `mode`
        state, taken = replay_until(program, mode, run_out.schedule, lambda s, c=c, i=i: s.pcs[c] > i)
        return Verdict(prop, "violated", witness=Witness(
            message=msg, schedule=taken, locs=(op.loc,),
            details={"sender": c, "pc": i, "target": dst, "semaphore": str(ref), "sender_id": None if hw else sid,
                     "target_ids": [list(a.ids) if a.ids else [] for a in theirs]},
            hint="allocate run_scoped semaphores in the same order on every device"),
            stats=_stats(low, checked=checked, solve_s=round(time.perf_counter() - t0, 4)))
    stats = _stats(low, checked=checked, solve_s=round(time.perf_counter() - t0, 4))
    if not low.ok:
        return Verdict(prop, "unknown", reason="no disagreement in one run, but the lowering is not static ("
                       + "; ".join(low.unsupported[:2]) + ")", stats=stats)
    verdict = Verdict(prop, "proved", reason=f"{checked} remote semaphore uses agree", stats=stats)
    if family is not None:
        facts.whole.keep(family, verdict)
    return verdict
