"""Witness replay: every violation is replayed on the reference model before it is reported.

A witness schedule that does not replay is a semcheck bug and raises
`ModelBug`; one that does gets a per-device timeline for the report.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from semcheck.checker.timeline import timeline
from semcheck.checker.verdict import Verdict
from semcheck.model.errors import ModelBug
from semcheck.model.ops import Program
from semcheck.model.run import run

Check = Callable[..., Verdict]

# The step relation copies its state on every step, so replaying is quadratic;
# past this many steps the decision procedure's own replay (deadlock_free and
# the id checks replay their witnesses) is the guard.
REPLAY_LIMIT = 20_000


def with_replay(check: Check) -> Check:
    """`check`, with each violation's schedule replayed and a timeline added to its witness."""

    def checked(program: Program, mode: str, *, timeout_ms: int = 30_000) -> Verdict:
        v = check(program, mode, timeout_ms=timeout_ms)
        if v.verdict != "violated" or v.witness is None or not v.witness.schedule:
            return v
        if len(v.witness.schedule) <= REPLAY_LIMIT:
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
        details = {**v.witness.details, "timeline": timeline(program, pcs, devices)}
        return dataclasses.replace(v, witness=dataclasses.replace(v.witness, details=details))

    checked.__name__ = check.__name__
    return checked
