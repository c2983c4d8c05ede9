"""The quotient of a program under a rotation (spec RUN-37): its devices `0 .. m-1`, each class moving in step.

Under a `Rotation` by `k` (RUN-36), for a multiple `m` of `k` that divides N, the devices `0 .. m-1` with
every named device taken modulo `m` and every barrier's participants restricted to them form a program
of `m` devices whose runs are the program's runs in which each class of devices `d, d+m, d+2m, ...`
moves in step (a step of a quotient core is the round of that step by each core of its class). It is
read off the cores of devices `0 .. m-1` only (a `Symmetric`'s are rotated out of its representatives,
RUN-20): the whole program is never built. Two uses, each with its soundness clause stated once:

* faithful (`faithful_quotient`, RUN-7): the device offsets stay distinct modulo `m`, so every class
  member the step's target lies in gets exactly one contribution; the fold's maximal run lifts to the
  program's, and every property but race-free carries its proofs over (RUN-7 per property);
* classes (`class_quotient`, DR-41): offsets may collide (the all-to-all); the rotation being a
  bijection, a round still gives each member of the target's class one contribution, so its runs lift
  too, and what each property may carry over is RUN-31's (proofs on the skeleton) and DR-41's (the
  happens-before run of the race pass).

Both need every named device and local core in range (a modulus must not hide an out-of-range target)
and every barrier of the quotient kept by the rotation or within its devices (a device's fork and join).
Only proofs are carried over: anything else is decided on the program itself.
"""

from __future__ import annotations

import dataclasses

from semcheck.model.ops import Barrier, DmaStart, ExitCheck, Op, Program, Signal, Topology
from semcheck.model.symmetric import replaced
from semcheck.model.symmetry import NAMED_DEVICE, Rotation, divisors


@dataclasses.dataclass(frozen=True)
class Quotient:
    """RUN-37: the quotient of a program: `program` has `devices` of the original's `of_devices`, each class
    moving in step under the rotation by `period`; `faithful`: RUN-7's fold, else DR-41's class run."""

    program: Program
    devices: int
    of_devices: int
    period: int
    faithful: bool = True  # RUN-7 (b) holds; False: DR-41's class run, which proves less (RUN-31)

    def describe(self) -> str:
        """Where a proof on the fold was made, for verdict reasons."""
        every = "every device" if self.period == 1 else f"every {self.period} devices"
        if not self.faithful:
            return (f"proved on the run of {self.devices} of the {self.of_devices} devices, each class of devices "
                    f"moving in step (the program repeats {every}; RUN-31)")
        return f"proved on a fold onto {self.devices} of the {self.of_devices} devices (the program repeats {every}; RUN-7)"


def faithful_quotient(program: Program, rotation: Rotation, min_devices: int = 2) -> Quotient | None:
    """RUN-7: the smallest faithful quotient (fold) under `rotation` (None for the identity): a rotation by `k`
    implies one by each of its multiples, so only its multiples can fold, and the first faithful one is it."""
    if rotation.trivial:
        return None
    n, period, names = program.topology.num_devices, rotation.devices, rotation.names
    offsets = _offsets(program, period)
    if offsets is None:
        return None
    for m in divisors(n)[:-1]:
        if m % period or m < min_devices:
            continue
        if len({o % m for o in offsets}) != len(offsets):
            continue
        if not _barriers_fold(program, names, m):
            continue
        return Quotient(_folded(program, m), m, n, period)
    return None


def class_quotient(program: Program, period: int) -> Quotient | None:
    """DR-41: the devices `0 .. period-1` of a program that repeats every `period` devices (DR-5), every
    named device taken modulo `period`, as a quotient whose run is a run of the program in which every class
    `d, d + period, ...` moves in step; None when the period is the whole program, a named device or core
    is out of range, or a barrier of those devices is neither kept by the rotation nor within them.

    RUN-7's condition (b), distinct offsets, is not asked: it serves the properties a fold proves, not
    the lifting of its run (DR-41 says why)."""
    topo = program.topology
    n, per = topo.num_devices, topo.cores_per_device
    if period >= n or _offsets(program, period) is None:
        return None
    inside = period * per
    # a Symmetric's cores are its representatives rotated (RUN-20): the next period's has the same length
    # and keeps a barrier's name exactly when the rotation maps its participants onto themselves
    given = hasattr(program, "representatives") and period % program.period == 0
    for c in range(inside):
        ops = program.cores[c]
        if given:
            image = None
        else:
            image = program.cores[c + inside]
            if len(image) != len(ops):  # not the repetition it was claimed to be: no class run
                return None
        for pc, op in enumerate(ops):
            # a barrier the rotation keeps has the same name on the next period's devices (RUN-7 (c))
            if type(op) is not Barrier or max(op.participants) < inside:
                continue
            if image is None:
                if not Rotation(topo, period).keeps(op.participants):
                    return None
            elif type(image[pc]) is not Barrier or image[pc].name != op.name:
                return None
    return Quotient(_folded(program, period), period, n, period, faithful=False)


def _offsets(program: Program, period: int) -> set[int] | None:
    """Device offsets (target - issuer, mod the device count) of the first `period` devices' ops
    (the rest repeat them), with 0 for the issuer itself; None if a target is out of range."""
    topo = program.topology
    n, per = topo.num_devices, topo.cores_per_device
    out = {0}
    for c in range(period * per):
        me = topo.device_of(c)
        for op in program.cores[c]:
            t = type(op)
            if t is Signal or t is DmaStart:
                if op.core is not None and not 0 <= op.core < per:
                    return None
                if op.device is not None:
                    if not 0 <= op.device < n:
                        return None
                    out.add((op.device - me) % n)
            elif t is ExitCheck:
                if not 0 <= op.device < n:
                    return None
                out.add((op.device - me) % n)
    return out


def _barriers_fold(program: Program, names: dict[str, str], m: int) -> bool:
    """Every barrier of the first `m` devices is kept by the rotation or lies within them."""
    per = program.topology.cores_per_device
    inside = m * per
    if hasattr(program, "representatives"):
        # RUN-23: the barriers of core c are those of its representative rotated by c's periods (RUN-20)
        span = program.period * per
        for r, ops in enumerate(program.representatives):
            if Barrier not in set(map(type, ops)):
                continue
            bars = [op for op in ops if type(op) is Barrier]
            for c in range(r, inside, span):
                for op in (bars if c < span else [program.rotated(y, c // span) for y in bars]):
                    if names.get(op.name) != op.name and max(op.participants) >= inside:
                        return False
        return True
    for c in range(inside):
        for op in program.cores[c]:
            if type(op) is Barrier and names.get(op.name) != op.name and max(op.participants) >= inside:
                return False
    return True


def _folded(program: Program, m: int) -> Program:
    """Devices 0..m-1 of `program`, every named device taken modulo m."""
    topo = program.topology
    per = topo.cores_per_device
    inside = m * per
    memo: dict[int, tuple[Op, Op]] = {}
    get = memo.get
    named = frozenset(NAMED_DEVICE)

    def fold_op(op: Op) -> Op:
        # an operation the fold leaves as it is stays the program's object (most name a device below m)
        if type(op) is Barrier:
            kept = frozenset(p for p in op.participants if p < inside)
            new: Op = op if len(kept) == len(op.participants) else replaced(op, participants=kept)
        elif op.device is None or op.device % m == op.device:
            new = op
        else:
            new = replaced(op, device=op.device % m)
        memo[id(op)] = (op, new)  # the original is kept so that its id is not reused
        return new

    # most operations name no device: only the others are looked up
    cores = tuple(tuple([op if type(op) not in named else got[1] if (got := get(id(op))) is not None else fold_op(op)
                         for op in program.cores[c]]) for c in range(inside))
    return Program(Topology(m, per), cores, collective_id=program.collective_id, name=program.name,
                   launch_failure=program.launch_failure, tpu_failure=program.tpu_failure,
                   detect_races=program.detect_races, scoped_keys=getattr(program, "scoped_keys", True))
