"""ACC-61: whether one run of a lowered program is a run of the kernel, where the race pass cannot say that
every run is (spec ACC-9 (a) fails).

The lowering (`checker/frontend/scalar_state.py`) took each followed value from one write (`model.followed`). A
run of the lowered program under an interpreter mode is a run of the kernel when each followed read it executes
reads, in that run, the element's last write as the mode lands it: the lowering's. Then, read by read, the kernel
run in that schedule reads the values the lowering read, takes the same branches and sizes, and so makes the same
steps: whatever the run shows (a deadlock, a leak at exit, a failure) the kernel shows in that schedule.

Unlike ACC-9 (b), a copy's write half is placed where the mode lands it, not at its start: eager runs both
halves at the start (DMA-2), on_wait in the waiter that runs its task (DMA-3, DMA-4); without (a) a read may
fall between the start and the landing. The rule is not applied under `hardware` (copies land in parts, DR-9,
which the lowered program's copies do not model), nor when some op of the program writes a followed buffer
without the lowering recording that write (a masked store, an access or copy it could not tie to the kernel's):
such a write may land between a recorded write and a read in a run, and nothing here would see it.
"""

from __future__ import annotations

from semcheck.model.errors import ModelBug
from semcheck.model.followed import ValueFacts, followed_labels, misread_in
from semcheck.model.ops import Access, DmaStart, Program
from semcheck.model.run import REPLAY_LIMIT, run
from semcheck.model.scope import stack_slot
from semcheck.model.state import State
from semcheck.model.step import step
from semcheck.model.transient import freeze, thaw

INTERPRETER = ("eager", "on_wait")


def run_is_kernels(program: Program, facts: ValueFacts, mode: str, schedule) -> str | None:
    """ACC-61: None when the run that follows `schedule` from the initial state (and then the lowest enabled
    actor to its end, RUN-1) reads every followed value it reaches from the write the lowering took it from,
    each write placed where `mode` lands it; else why that is not shown."""
    if mode not in INTERPRETER:
        return f"under {mode} copies land in parts the lowered program does not model (DR-9)"
    untied = untied_write(program, facts)
    if untied is not None:
        return untied
    try:
        full = run(program, mode, schedule)  # type: ignore[arg-type]
    except ModelBug as e:  # not a schedule of this program
        return f"the run does not replay on the program ({e})"
    if len(full.schedule) > REPLAY_LIMIT:
        return f"the run is longer than {REPLAY_LIMIT} steps"
    when, landed = _positions(program, mode, full.schedule)
    bad = misread_in(facts, when, full.kind != "completed", landed, same_values=True)
    if bad is None or not bad.reached:  # a read the run never reaches decides nothing the run did
        return None
    return f"in that run the value read at {bad.read} is another than the lowering's ({bad.why}, the write at {bad.write})"


def untied_write(program: Program, facts: ValueFacts) -> str | None:
    """An op of `program` that may write a followed buffer and is none of the writes the lowering recorded
    (a copy whose destination the model does not name counts), as a reason; None when there is none."""
    slots = {stack_slot(label) for label in followed_labels(facts)}
    recorded = {w.event for w in facts.writes if len(w.elements)}  # (an access whose elements were not named: none)
    for core, ops in enumerate(program.cores):
        for pc, op in enumerate(ops):
            if type(op) is Access:
                hits = op.write and stack_slot(op.buf) in slots
            elif type(op) is DmaStart:
                hits = op.dst_buf is None or stack_slot(op.dst_buf) in slots
            else:
                continue
            if hits and (core, pc) not in recorded:
                return f"the {op.describe()} at {op.loc} writes a followed ref and the lowering did not record it"
    return None


def _positions(program: Program, mode: str, schedule) -> tuple[dict, dict]:
    """Per event `(core, pc)` of the run `schedule`: the step at which it executes (an access; a copy's read
    half, not its start), and the step at which it lands (an access; a copy's write half). A step runs one op of one core
    and at most one copy's task (DMA-2: an eager start runs both halves; DMA-4: a waiter one task per step)."""
    state = thaw(State.initial(program))
    when: dict[tuple[int, int], int] = {}
    landed: dict[tuple[int, int], int] = {}
    started: dict[int, tuple[int, int]] = {}  # DMA ident -> its DmaStart's (core, pc)
    pending: set[int] = set()
    try:
        for t, actor in enumerate(schedule):
            kind, core = actor
            pc = state.pcs[core] if kind == "core" else None
            n = len(state.dmas)
            state = step(program, mode, state, tuple(actor))  # type: ignore[arg-type]
            if pc is not None and state.pcs[core] != pc and type(program.cores[core][pc]) is Access:
                when.setdefault((core, pc), t)
                landed.setdefault((core, pc), t)
            for ident in range(n, len(state.dmas)):
                started[ident] = (core, pc)  # type: ignore[assignment]
                pending.add(ident)
            for ident in list(pending):
                phase = state.dmas[ident].phase
                if phase >= 1:
                    when.setdefault(started[ident], t)
                if phase == 2:
                    landed[started[ident]] = t
                    pending.discard(ident)
    finally:
        freeze(state)
    return when, landed
