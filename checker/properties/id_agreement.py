"""`id-agreement` (PROP-3): a remote signal or copy names, on the target core, the allocation it
names on the sender. Decided on the allocations where S' ends (exact when the lowering is static)
or of one real run (a disagreement there is real; otherwise unknown); no solver.
"""

from __future__ import annotations

import dataclasses
import time

from semcheck.checker.properties.analysis import ModeAnalysis, analysis_of
from semcheck.checker.properties.failing_prefixes import agreement_on_prefixes
from semcheck.checker.properties.explored_states import explored_verdict, states_explored
from semcheck.checker.properties.id_uses import disagreement_message, uses_judged
from semcheck.checker.properties.replay import replay_until
from semcheck.checker.properties.verdict import Verdict, Witness
from semcheck.checker.static.system import Lowered
from semcheck.model.ops import DmaMode, Program, Signal


def _stats(low: Lowered, **more) -> dict:
    return dict(low.size(), **more)


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
    hw = mode == "hardware"
    checked = 0
    for c, i, op, ref, answer in uses_judged(program, mode, low, allocs, pcs):
        checked += 1
        if answer == "agree":
            continue
        dst, _, theirs, sid = answer
        msg = disagreement_message(c, op, ref, answer)
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
        why = "the lowering is not static (" + "; ".join(low.unsupported[:2]) + ")"
        decided = agreement_on_prefixes(program, mode, why)  # ERR-64: by bounds on progress, no schedule walked
        if decided is not None:
            return decided
        decided = explored_verdict(prop, program, mode, states_explored(facts), why)  # ERR-45
        if decided is not None:
            return decided
        return Verdict(prop, "unknown", reason=f"no disagreement in one run, but {why}", stats=stats)
    verdict = Verdict(prop, "proved", reason=f"{checked} remote semaphore uses agree", stats=stats)
    if family is not None:
        facts.whole.keep(family, verdict)
    return verdict
