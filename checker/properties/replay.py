"""Witness replay: every violation is replayed on the reference model before it is reported.

A witness schedule that does not replay is a semcheck bug and raises
`ModelBug`; one that does gets a per-device timeline for the report.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable

from semcheck.checker.properties.timeline import timeline
from semcheck.checker.properties.verdict import Verdict
from semcheck.model.errors import ModelBug
from semcheck.model.ops import Program
from semcheck.model.run import REPLAY_LIMIT, run
from semcheck.model.state import State
from semcheck.model.step import step
from semcheck.model.ops import DmaMode

Check = Callable[..., Verdict]



def with_replay(check: Check) -> Check:
    """`check`, with each violation's schedule replayed and a timeline added to its witness.

    The program's analysis (`facts`) is handed on to a check that takes it; a check that does not
    computes what it needs itself."""
    takes_facts = "facts" in inspect.signature(check).parameters

    def checked(program: Program, mode: str, *, timeout_ms: int = 30_000, facts=None) -> Verdict:
        if takes_facts:
            v = check(program, mode, timeout_ms=timeout_ms, facts=facts)
        else:
            v = check(program, mode, timeout_ms=timeout_ms)
        if v.verdict != "violated" or v.witness is None or not v.witness.schedule:
            return v
        if v.stats.get("replayed") and "terminal_pcs" in v.witness.details:
            pcs = v.witness.details["terminal_pcs"]  # deadlock-free replayed its witness to these (PROP-4)
        elif len(v.witness.schedule) <= REPLAY_LIMIT:
            try:
                pcs = run(program, mode, v.witness.schedule, finish=False).pcs
            except ModelBug as e:
                raise ModelBug(f"{v.property} witness does not replay on the model: {e}") from e
        else:
            pcs = [len(ops) for ops in program.cores]
            for core, pc, _ in v.witness.blocked:
                pcs[core] = pc
        if "timeline" in v.witness.details:
            return v
        devices = sorted({program.topology.device_of(c) for c, _, _ in v.witness.blocked}) or None
        details = {**v.witness.details, "timeline": _timeline(program, pcs, devices, facts)}
        return dataclasses.replace(v, witness=dataclasses.replace(v.witness, details=details))

    checked.__name__ = check.__name__
    return checked


def _timeline(program: Program, pcs, devices, facts) -> list[dict]:
    """The witness's timeline (`timeline.timeline`), made once per program, positions and devices: the modes
    whose witnesses end at the same positions (a deadlock's, an exit-balance run's) share it (RUN-47)."""
    if facts is None or facts.program is not program:
        return timeline(program, pcs, devices)
    key = ("timeline", tuple(pcs), None if devices is None else tuple(devices))
    return facts.whole.shared(key, lambda: timeline(program, pcs, devices))


def replay_until(program: Program, mode: DmaMode, schedule, done: Callable[[State], bool]) -> tuple[State, tuple]:
    """Apply `schedule` on the step relation until `done(state)` or a failure: the state and the steps taken.

    A witness cut at the step where its violation shows (the id checks' witnesses)."""
    state = State.initial(program)
    taken = []
    if done(state):
        return state, ()
    for actor in schedule:
        state = step(program, mode, state, tuple(actor))
        taken.append(tuple(actor))
        if done(state) or state.failure is not None:
            break
    return state, tuple(taken)
