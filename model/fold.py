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

from semcheck.model.ops import Program
from semcheck.model.quotient import Quotient, faithful_quotient
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
