"""Runs of the step relation: follow a schedule, classify terminal states (RUN-1, RUN-2)."""

from __future__ import annotations

from collections.abc import Iterable

from semcheck.model.errors import ModelBug
from semcheck.model.ops import Barrier, DmaMode, Program, Wait
from semcheck.model.state import Actor, Blocked, Outcome, State
from semcheck.model.step import enabled, halted, step
from semcheck.model.transient import freeze, thaw

REPLAY_LIMIT = 100_000
"""Longest witness schedule replayed on the step relation, by every check (one limit). The step relation
copied its state per step, so a replay was quadratic in its length (RUN-35 now replays in place): past
this many steps a witness is not replayed (the checker's timeline is then read off the witness's blocked positions, and an on_wait
race that needs its replay to be believed stays unconfirmed, DR-2). The cost is in bench/README.md."""


def blocked_cores(
    program: Program, mode: DmaMode, state: State, held: frozenset[int] = frozenset()
) -> tuple[Blocked, ...]:
    """The unfinished cores of a terminal state, each with the op it is stuck at.

    `held` cores were stopped on purpose (`fast_run(hold=...)`).
    """
    out = []
    for core, pc in enumerate(state.pcs):
        ops = program.cores[core]
        if pc >= len(ops):
            continue
        op = ops[pc]
        if core in held:
            reason = "held"
        elif halted(program, state, core):
            reason = "halted by failure"
        elif isinstance(op, Wait):
            reason = f"waits for {op.value} on {op.sem}"
        elif isinstance(op, Barrier):
            reason = f"at barrier {op.name!r}"
        else:  # pragma: no cover - every other op is always enabled
            raise ModelBug(f"core {core} stuck at non-blocking op {op}")
        out.append(Blocked(core, pc, op, reason))
    return tuple(out)


def classify(
    program: Program,
    mode: DmaMode,
    state: State,
    schedule: tuple[Actor, ...] = (),
    held: frozenset[int] = frozenset(),
) -> Outcome:
    """RUN-2: name a terminal state: error (a failure), deadlock (an unfinished core), or completed."""
    blocked = blocked_cores(program, mode, state, held)
    if state.failure is not None:
        kind = "error"
    elif blocked:
        kind = "deadlock"
    else:
        kind = "completed"
    return Outcome(kind, state, mode, schedule, blocked)


def run(program: Program, mode: DmaMode, schedule: Iterable[Actor] = (), *, finish: bool = True,
        in_place: bool = True) -> Outcome | State:
    """RUN-1: apply `schedule` step by step from the initial state.

    With `finish`, continue with the lowest enabled actor until no step is
    enabled and return the classified `Outcome`; otherwise return the state
    the schedule reaches. A schedule step that is not enabled raises ModelBug.
    `in_place` (RUN-35): the schedule's steps apply the step relation's rules to one transient state
    rather than making a State per step (linear in the schedule's length, not quadratic); without it,
    the step relation as it is, the reference the transient replay is held to.
    """
    state = State.initial(program)
    if in_place:
        state = thaw(state)
    taken: list[Actor] = []
    try:
        for actor in schedule:
            if type(actor) is not tuple:
                actor = tuple(actor)
            state = step(program, mode, state, actor)
            taken.append(actor)
    finally:
        state = freeze(state)  # a step that raised leaves nothing transient behind
    if not finish:
        return state
    while True:
        actors = enabled(program, mode, state)
        if not actors:
            return classify(program, mode, state, tuple(taken))
        state = step(program, mode, state, actors[0])
        taken.append(actors[0])
