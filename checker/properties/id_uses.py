"""What `id-agreement` (PROP-3) asks of one run's end: each remote signal or copy executed before the cores'
positions, judged against the allocations held there (its own check reads S''s end or one run's end; the
explorer reads every run's end, RUN-60)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from semcheck.checker.static.must_pass import must_have_passed
from semcheck.checker.static.system import Lowered
from semcheck.model.ops import BARRIER, DmaMode, DmaStart, Program, Signal
from semcheck.model.step import target_core


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


def _remote_uses(program: Program, mode: DmaMode, low: Lowered | None, pcs) -> Iterator[tuple]:
    """(core, pc, op, reference, target) of every executed signal and copy, in program order per core.

    With a static lowering (`low` given and ok) the targets are the lowering's (SIG-1, `static.lowering`): its contributions
    hold every signal and copy before each core's end in S' (a core is held at its first failure, and
    nothing past `reach` executes), with the core they land on, so nothing is resolved twice (RUN-27)."""
    if low is not None and low.ok and all(pcs[c] <= low.hb.reach(c) for c in range(len(pcs))):
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


def uses_judged(program: Program, mode: DmaMode, low: Lowered | None, allocs, pcs) -> Iterator[tuple]:
    """(core, pc, op, reference, answer) of every remote use of an allocated semaphore before `pcs`, judged
    against the allocations `allocs` ((core, label) -> Allocation) holds: "agree" or `_decide`'s disagreement."""
    held: dict[int, dict] = {}
    for (c, label), alloc in allocs.items():
        held.setdefault(c, {})[label] = alloc
    hw = mode == "hardware"
    decided: dict[tuple, object] = {}
    for c, i, op, ref, dst in _remote_uses(program, mode, low, pcs):
        answer = _agreement(held, c, dst, ref, hw, decided)
        if answer != "skip":
            yield c, i, op, ref, answer


def disagreement(program: Program, mode: DmaMode, allocs, pcs) -> tuple | None:
    """PROP-3 at the end of one run (its allocations and positions, RUN-60): (core, pc, op, message) of its first
    remote use that disagrees, or None."""
    for c, i, op, ref, answer in uses_judged(program, mode, None, allocs, pcs):
        if answer != "agree":
            return c, i, op, disagreement_message(c, op, ref, answer)
    return None


def disagreement_message(c: int, op, ref, answer: tuple) -> str:
    """What a disagreeing remote use does: the id (or site) it names and what its target holds."""
    dst, mine_desc, theirs, _ = answer
    their_desc = (", ".join(f"{a.ids[ref.index] if a.ids else '-'}" for a in theirs) or "none")
    return (f"core {c} {'signals' if isinstance(op, Signal) else 'DMAs into'} {ref} = {mine_desc} on core {dst}, "
            f"but core {dst} holds no such semaphore (its ids for that site and index: {their_desc})")


def agreement_by_bounds(program: Program, mode: DmaMode, lowered: Callable[[], Lowered | None]) -> int | None:
    """ERR-64: PROP-3 in every reachable state of the program `lowered()` lowers (the relaxed program, whose states
    hold the allocations and positions of every state of `program`, ERR-49): the number of remote uses, each shown
    to agree wherever it has run, or None when some use is not.

    A use of core c at i, with its target d, is judged only once c has passed it; every state where c is past i
    has d's allocations' issuers at least as far as the lower bound on their progress once c passed i
    (`must_pass.must_have_passed`), so the target holds every allocation issued before that bound, and an
    allocation once held stays (a label is allocated once per core: the lowering refuses a second). The use
    agrees in every such state when one of those names the id the sender holds (the sender's allocation of its
    label is one, the lowering's; before it is made the use is not judged)."""
    if mode == "hardware":
        return None
    lengths = [len(ops) for ops in program.cores]
    uses = [(c, i, ref, dst) for c, i, _, ref, dst in _remote_uses(program, mode, None, lengths)
            if ref.label != BARRIER and isinstance(dst, int) and dst != c]
    if not uses:
        return 0  # no remote use of an allocated semaphore: nothing is judged in any state
    low = lowered()
    if low is None or not low.ok or low.failing:
        return None
    bounds = must_have_passed(low, {(c, i): (c, i + 1) for c, i, _, _ in uses})
    if bounds is None:
        return None
    by_core: dict[int, list] = {}
    for (t, _), a in low.sem_allocs.items():
        if isinstance(a.ids, tuple):  # an allocation that fails (IDS-1) is never held
            by_core.setdefault(t, []).append(a)
    for c, i, ref, dst in uses:
        mine = low.sem_allocs.get((c, ref.label))
        if mine is None or not isinstance(mine.ids, tuple) or not 0 <= ref.index < mine.count:
            continue  # never held when the use runs, or a failing lookup: not judged (`_agreement`)
        m = bounds[(c, i)]
        held = {dst: {a.label: a for a in by_core.get(dst, ()) if m[a.issuer] > a.pos}}
        if _decide(held, dst, mine.site, ref.index, mine.ids[ref.index], False) != "agree":
            return None
    return len(uses)
