"""Proofs on the fold (spec RUN-7): decide a repeating program on a few of its devices.

The fold of a program is found once per program (`Analysis.fold`) and
checked like any program. Only its *proved* answers are carried over, with
the fold named in the reason: a violation found on the fold is witnessed on
the full program (the checker decides the full program again, so the
witness names real devices), and an unknown is retried there too.
"""

from __future__ import annotations

import dataclasses

from semcheck.checker.properties.verdict import Verdict
from semcheck.checker.properties.analysis import Analysis
from semcheck.checker.static.least_stuck import failure_reached
from semcheck.model.access import skeleton
from semcheck.model.fold import find_fold
from semcheck.model.quotient import Quotient, class_quotient


def skeleton_fold(analysis: Analysis) -> Quotient | None:
    """The fold (RUN-7) of the program's synchronisation skeleton (`Analysis.fold` keeps it).

    The properties that fold (all but race-free) read only the skeleton, and a ring's accesses name
    device-dependent chunks that would keep it from repeating. It is read off the program's own
    symmetry (DR-5) when that is the same thing: a program that rotates onto itself by one device,
    moving its regions, has a skeleton that rotates by one device too (stripping accesses and regions
    keeps every other field's equality, and one is the smallest period there is), and whether a fold
    at that period is faithful reads only the skeleton's fields. The race check needs the program's
    symmetry anyway, so the skeleton is then never built at full size.
    """
    period, fold = analysis.symmetry
    if period != 1:
        if analysis.symmetric:  # RUN-20: its skeleton repeats with its period, read off one period
            fold = find_fold(analysis.program.skeleton(), within=analysis.program.period)
        else:
            fold = find_fold(skeleton(analysis.program))
        return fold if fold is not None else _class_skeleton(analysis.program, period)
    if fold is None:
        return _class_skeleton(analysis.program, period)
    return dataclasses.replace(fold, program=skeleton(fold.program))


def _class_skeleton(program, period: int) -> Quotient | None:
    """RUN-31: without a faithful fold, the skeleton of DR-41's class fold onto the fewest devices, two at
    least, that the program repeats every (RUN-7 (b) not asked), or None."""
    n = program.topology.num_devices
    m = next((m for m in range(period, n, period) if m >= 2 and n % m == 0), None)
    fold = None if m is None else class_quotient(program, m)
    return None if fold is None else dataclasses.replace(fold, program=skeleton(fold.program), period=period)


def proved_on_fold(fold: Quotient, prop: str, mode: str, *, timeout_ms: int, analysis: Analysis | None = None
                   ) -> Verdict | None:
    """The verdict of `prop` on the fold if it is proved there (and therefore on the program), else None.

    `analysis`: the fold program's (`Analysis.fold_analysis`), shared by every property and mode."""
    from semcheck.checker.properties.decide import decide
    from semcheck.checker.properties.registry import BY_ID

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
