"""Proofs on the fold (spec RUN-7): decide a repeating program on a few of its devices.

The fold of a program is found once per program (`semcheck.model.fold`) and
checked like any program. Only its *proved* answers are carried over, with
the fold named in the reason: a violation found on the fold is witnessed on
the full program (the checker decides the full program again, so the
witness names real devices), and an unknown is retried there too.
"""

from __future__ import annotations

import dataclasses

from semcheck.checker.verdict import Verdict
from semcheck.checker.z3.memo import MEMO
from semcheck.model.access import skeleton
from semcheck.model.fold import Fold, find_fold, race_symmetry
from semcheck.model.ops import Program


def program_symmetry(program: Program) -> tuple[int, Fold | None]:
    """`race_symmetry` (DR-5, DR-8) of the program with its accesses, computed once per program."""
    return MEMO.get(program, ("symmetry",), lambda: race_symmetry(program))


def program_fold(program: Program) -> Fold | None:
    """The fold (RUN-7) of the program's synchronisation skeleton, computed once per program.

    The properties that fold (all but race-free) read only the skeleton, and a
    ring's accesses name device-dependent chunks that would keep it from repeating.
    """
    return MEMO.get(program, ("fold",), lambda: _skeleton_fold(program))


def _skeleton_fold(program: Program) -> Fold | None:
    """`find_fold(skeleton(program))`, read off the program's own symmetry when that is the same thing.

    A program that rotates onto itself by one device, moving its regions (DR-5), has a skeleton that
    rotates by one device too: stripping accesses and regions keeps every other field's equality, and
    one is the smallest period there is. Whether a fold at that period is faithful reads only the
    skeleton's fields, so the skeleton's fold is the program's fold stripped. The race check needs the
    program's symmetry anyway, so the skeleton is then never built at full size.
    """
    period, fold = program_symmetry(program)
    if period != 1:
        return find_fold(skeleton(program))
    if fold is None:
        return None
    return dataclasses.replace(fold, program=skeleton(fold.program))


def proved_on_fold(fold: Fold, prop: str, mode: str, *, timeout_ms: int) -> Verdict | None:
    """The verdict of `prop` on the fold if it is proved there (and therefore on the program), else None."""
    from semcheck.checker.properties import BY_ID
    from semcheck.checker.z3.counters import lower

    if not BY_ID[prop].folds:
        return None
    if not lower(fold.program, mode).ok:
        # RUN-7 is argued for static lowerings (RUN-3 holds for them); the program decides the rest
        return None
    v = BY_ID[prop].check(fold.program, mode, timeout_ms=timeout_ms)
    if v.verdict != "proved":
        return None
    reason = f"{fold.describe()}: {v.reason}" if v.reason else fold.describe()
    stats = dict(v.stats, fold={"devices": fold.devices, "of_devices": fold.of_devices, "period": fold.period,
                                "ops": fold.program.num_ops})
    return dataclasses.replace(v, reason=reason, stats=stats)
