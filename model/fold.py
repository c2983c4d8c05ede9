"""Folding (spec RUN-7): an SPMD program whose devices repeat is decided on a few of them (its faithful
quotient, RUN-37).

When rotating the device index by `period` maps a program onto itself (every
device runs its predecessor's operations with every device it names shifted
by `period`), the devices `0 .. M-1`, for a suitable multiple `M` of the
period, with every named device taken modulo `M`, form the *fold*: a program
of `M` devices whose runs are the full program's runs in which each class
of devices `d, d+M, d+2M, ...` moves in step. Every step of the fold is a
round of steps of the full program (one per device of the class), so the
fold's maximal run lifts to a maximal run of the full program and, by RUN-3,
to *the* final state of every run of its lowered system. The properties'
"proved" answers depend only on that final state and on each core's
operations (spec RUN-7 gives the argument per property), so a proof on the
fold is a proof on the program. Anything else the fold says (a violation's
witness, an unknown) is not carried over: the checker then decides the full
program.

The fold exists only when it is faithful:

* every device a signal or DMA names is in range and every named local core
  is in range (so that no out-of-range target is hidden by the modulus);
* the device offsets the program uses (target minus issuer, modulo the
  device count; zero for "this device") stay distinct modulo `M`, so a remote
  target never folds onto its issuer and two neighbours never fold onto one;
* every barrier the fold keeps either has its name kept by the rotation (its
  participants are rotation-invariant: the device barriers) or has all its
  participants among the fold's cores (a device's fork and join).

Nothing is taken from the kernel's intent: the rotation is checked operation
by operation, and a single device out of step leaves the program unfolded.
"""

from __future__ import annotations

import dataclasses

from semcheck.model.access import skeleton
from semcheck.model.ops import Program
from semcheck.model.quotient import Quotient, class_quotient, faithful_quotient
from semcheck.model.symmetric import Symmetric
from semcheck.model.symmetry import Rotation


def find_fold(program: Program, *, min_devices: int = 2, shifted: bool = False, within: int | None = None
              ) -> Quotient | None:
    """RUN-7: the smallest faithful fold of `program`, or None when it has none smaller than itself.

    With `shifted`, the rotation may also move each buffer label's regions (DR-5): the fold then
    keeps every access, and its run is a run of the whole program (DR-8), not only of its skeleton.
    `within`: as `Rotation.observe`'s (a `Symmetric`'s period, RUN-20).
    """
    if program.topology.num_devices < 2 * min_devices:
        return None
    return faithful_quotient(program, Rotation.observe(program, shifted=shifted, within=within), min_devices)


def race_symmetry(program: Program, *, min_devices: int = 2, within: int | None = None) -> tuple[int, Quotient | None]:
    """DR-5 and DR-8 from one rotation: the period of `Rotation.observe(shifted=True)`, and the fold under
    it (`find_fold(shifted=True)`; `within`: as `find_fold`'s)."""
    rot = Rotation.observe(program, shifted=True, within=within)
    big = program.topology.num_devices >= 2 * min_devices
    return rot.devices, faithful_quotient(program, rot, min_devices) if big and not rot.trivial else None


def skeleton_fold(program: Program | Symmetric, symmetry: tuple[int, Quotient | None]) -> Quotient | None:
    """RUN-7: the fold of the program's synchronisation skeleton, given its `race_symmetry` (DR-5);
    RUN-31's class quotient of the skeleton where it has no faithful fold.

    The properties that fold (all but race-free) read only the skeleton, and a ring's accesses name
    device-dependent chunks that would keep it from repeating. It is read off the program's own
    symmetry when that is the same thing: a program that rotates onto itself by one device, moving
    its regions, has a skeleton that rotates by one device too (stripping accesses and regions keeps
    every other field's equality, and one is the smallest period there is), and whether a fold at
    that period is faithful reads only the skeleton's fields. The race check needs the program's
    symmetry anyway, so the skeleton is then never built at full size.
    """
    period, fold = symmetry
    if period != 1:
        if isinstance(program, Symmetric):  # RUN-20: its skeleton repeats with its period, read off one period
            fold = find_fold(program.skeleton(), within=program.period)
        else:
            fold = find_fold(skeleton(program))
        return fold if fold is not None else _class_skeleton(program, period)
    if fold is None:
        return _class_skeleton(program, period)
    return dataclasses.replace(fold, program=skeleton(fold.program))


def _class_skeleton(program: Program | Symmetric, period: int) -> Quotient | None:
    """RUN-31: without a faithful fold, the skeleton of DR-41's class quotient onto the fewest devices, two
    at least, that the program repeats every (RUN-7 (b) not asked), or None."""
    n = program.topology.num_devices
    m = next((m for m in range(period, n, period) if m >= 2 and n % m == 0), None)
    fold = None if m is None else class_quotient(program, m)
    return None if fold is None else dataclasses.replace(fold, program=skeleton(fold.program), period=period)
