"""Ground truth for the Z3 checks, read off the exhaustive explorer's outcomes.

The explorer keeps one outcome per *visible* result (RUN-4). For completed and
deadlocked outcomes the positions are visible, and tables, allocations and
buffers are functions of the positions, so nothing we look at is lost. Error
outcomes hide the positions of the other cores, so two error runs with
different tables may be merged: checks that depend on it are one-sided when
an error outcome exists (`has_error`).
"""

from __future__ import annotations

from hypothesis import reject

from semcheck.model import BARRIER, DmaStart, ExitCheck, Program, SemRef, Signal, explore
from semcheck.model.errors import IdCollision, Int16Overflow
from semcheck.model.explore import ExplorationLimit
from semcheck.model.ids import INT16_MAX
from semcheck.model.step import target_core

MAX_STATES = 6000


def uses_barrier_semaphore(program: Program) -> bool:
    return program.collective_id is not None and any(
        getattr(op, "sem", None) == SemRef(BARRIER) or getattr(op, "dst_sem", None) == SemRef(BARRIER)
        or getattr(op, "src_sem", None) == SemRef(BARRIER)
        for ops in program.cores for op in ops
    )


def explored(program: Program, mode: str, max_states: int = MAX_STATES):
    """The exploration, or a hypothesis rejection when it is too big or empty.

    Programs that use the barrier semaphore are explored without reduction:
    get_barrier_semaphore races with other cores' lookups of the collective
    id (unknown before, fixed after), which the reduction once missed; the
    ground truth should not depend on the reduction for that race.
    """
    try:
        ex = explore(program, mode, max_states=max_states, reduce=not uses_barrier_semaphore(program))
    except ExplorationLimit:
        reject()
    if not ex.outcomes:
        reject()
    return ex


def failures(state) -> tuple:
    fs = getattr(state, "failures", None)
    if fs is not None:
        return tuple(fs)
    return (state.failure,) if state.failure is not None else ()


def has_error(ex) -> bool:
    return any(o.kind == "error" for o in ex.outcomes)


def both_tables(ex, cid) -> bool:
    return cid is not None and any(cid in o.state.tables.fixed and cid in o.state.tables.internal for o in ex.outcomes)


def collision_raised(ex) -> bool:
    return any(isinstance(f.violation, IdCollision) for o in ex.outcomes for f in failures(o.state))


def collision_first_everywhere(ex) -> bool:
    return all(failures(o.state) and isinstance(failures(o.state)[0].violation, IdCollision) for o in ex.outcomes)


def int16_bad(ex) -> bool:
    for o in ex.outcomes:
        st = o.state
        if any(isinstance(f.violation, Int16Overflow) for f in failures(st)):
            return True
        if any(a.ids and any(x != a.ids[0] + k for k, x in enumerate(a.ids)) for a in st.allocs.values()):
            return True
        if any(key[1] > INT16_MAX for key in st.buffer_keys.values()):
            return True
    return False


def agreement_bad(program: Program, mode: str, ex) -> bool:
    """Some explored run executes a remote signal/DMA whose semaphore the target never holds.

    "Holds" is over every explored run: the count a signal leaves on an id waits
    for the target to allocate it, so a run cut short by a failure before the
    target allocates is no disagreement.
    """
    hw = mode == "hardware"
    held: dict = {}
    for o in ex.outcomes:
        for (c, label), a in o.state.allocs.items():
            held.setdefault(c, []).append(a)
    for o in ex.outcomes:
        if o.kind == "error":
            continue  # positions of error outcomes are not kept by the explorer (see module doc)
        st = o.state
        for c, ops in enumerate(program.cores):
            for op in ops[: st.pcs[c]]:
                if isinstance(op, Signal):
                    ref, dst = op.sem, target_core(program, mode, c, op.device, op.core, dma=False)
                elif isinstance(op, DmaStart):
                    ref, dst = op.dst_sem, target_core(program, mode, c, op.device, op.core, dma=True)
                else:
                    continue
                if ref.label == BARRIER or not isinstance(dst, int) or dst == c:
                    continue
                mine = st.allocs.get((c, ref.label))
                if mine is None or not 0 <= ref.index < mine.count:
                    continue
                theirs = [a for a in held.get(dst, []) if a.site == mine.site and ref.index < a.count]
                if hw:
                    ok = bool(theirs)
                else:
                    ok = any(a.ids and a.ids[ref.index] == mine.ids[ref.index] for a in theirs)
                if not ok:
                    return True
    return False


def exit_devices(program: Program) -> set[int]:
    return {op.device for ops in program.cores for op in ops if isinstance(op, ExitCheck)}


def warned(outcome, device: int) -> bool:
    return any(w.device == device and w.nonzero for w in outcome.state.warnings)


def unbalanced_at_end(outcome, cores: set[int] | None = None) -> bool:
    """A non-zero count or a pending copy at the end; with `cores` (those of the devices that exit while
    others hang), a non-zero count of theirs or a pending copy into them or whose read half signals them."""
    if cores is None:
        return bool(dict(outcome.state.counts)) or bool(outcome.pending_dmas)
    return any(v and k[1] in cores for k, v in dict(outcome.state.counts).items()) or \
        any(d.dst_core in cores or (d.phase == 0 and d.src_key is not None and d.src_core in cores)
            for d in outcome.pending_dmas)


def exited_cores(program: Program, outcome) -> set[int]:
    """The cores of the devices past their exit check at the end of `outcome`."""
    topo = program.topology
    out: set[int] = set()
    for c, ops in enumerate(program.cores):
        for i, op in enumerate(ops):
            if isinstance(op, ExitCheck) and outcome.state.pcs[c] > i:
                out.update(topo.cores_of_device(op.device))
    return out
