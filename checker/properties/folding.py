"""Proofs on the fold (spec RUN-7): decide a repeating program on a few of its devices.

The fold of a program is found once per program (`Analysis.fold`, the model's
`fold.skeleton_fold`) and checked like any program. Only its *proved* answers are carried over, with
the fold named in the reason: a violation found on the fold is witnessed on
the full program (the checker decides the full program again, so the
witness names real devices), and an unknown is retried there too.
"""

from __future__ import annotations

import dataclasses

from semcheck.checker.properties.analysis import Analysis
from semcheck.checker.properties.decide import decide
from semcheck.checker.properties.registry import BY_ID
from semcheck.checker.properties.verdict import Verdict
from semcheck.checker.static.least_stuck import failure_reached
from semcheck.model.quotient import Quotient


def proved_on_fold(fold: Quotient, prop: str, mode: str, *, timeout_ms: int, analysis: Analysis | None = None
                   ) -> Verdict | None:
    """The verdict of `prop` on the fold if it is proved there (and therefore on the program), else None.

    `analysis`: the fold program's (`Analysis.fold_analysis`), shared by every property and mode."""
    if not BY_ID[prop].folds:
        return None
    facts = (analysis if analysis is not None else Analysis(fold.program)).mode(mode)
    if not facts.lowering.ok:
        # RUN-7 is argued for static lowerings (RUN-3 holds for them); the program decides the rest
        return None
    if facts.lowering.failing and failure_reached(facts.lowering, facts.end.pcs):
        return None  # nor for runs that fail (RUN-11): the program decides them on its own S'

    v = decide(prop, fold.program, mode, timeout_ms=timeout_ms, facts=facts)
    if v.verdict != "proved":
        return None
    reason = f"{fold.describe()}: {v.reason}" if v.reason else fold.describe()
    stats = dict(v.stats, fold={"devices": fold.devices, "of_devices": fold.of_devices, "period": fold.period,
                                "ops": fold.program.num_ops, "faithful": fold.faithful})
    return dataclasses.replace(v, reason=reason, stats=stats)
