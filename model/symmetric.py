"""A program given by one period of its devices (spec RUN-20).

A program that repeats every `k` devices (RUN-7), its buffers' chunks shifted per label (DR-5), is
known once the cores of devices `0 .. k-1` are: device `d + j k` runs device `d`'s operations with
every device it names moved by `j k` (modulo N), every barrier name and participant set rotated
with it, and each label's regions shifted by `j` times that label's shift. `Symmetric` holds those
cores and (N, k, shifts) and produces any other core on demand; the checks read the cores they
need (the fold's, RUN-7; one period's, DR-31..36) and materialise the whole program only where a
property needs it (RUN-21), up to `MAX_MATERIALISED_OPS`.

Barrier names rotate as the launch names them (`model/launch.py`, LAUNCH-1): a barrier whose
participants rotate onto themselves keeps its name (the device barriers `start`, `cleanup`); one of
device `d`'s cores only ends in `d` (`fork{d}`, `join{d}`) and the image ends in the image device.
A barrier named otherwise has no derivable image, and `Symmetric.of` refuses it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping

from semcheck.model.ops import Access, Barrier, DmaStart, ExitCheck, Op, Program, Region, Signal, Topology, Violation
from semcheck.model.symmetry import Rotation

MAX_CACHED_OPS = 4_000_000
"""RUN-23: the operations of rotated cores a `Symmetric` keeps, oldest dropped first (8 bytes each: the
rotated operations themselves are kept per rotation anyway, so that rotations share them)."""

MAX_MATERIALISED_OPS = 6_000_000
"""RUN-21: the operations `Symmetric.materialise` builds at most. What bounds it is what the checks keep of
each operation, not the operation itself (about 110 bytes): with every property in the three modes, the
all-to-all kept 1.15 KB an operation (4.2 million at 1,024 devices, 5.0 GB peak), the ring all-reduce
0.53 KB (983,296 at 256, 731 MB). At 6 million the all-to-all's cost stays under 7 GB."""

Shifts = Mapping[str, tuple[int, int]]

_ROTATED = frozenset({Signal, DmaStart, ExitCheck, Barrier, Access})
"""The operations `_rotate` can change (RUN-20); every other one is its own image."""


class TooLarge(Exception):
    """RUN-21: the whole program has more operations than `MAX_MATERIALISED_OPS`; str(e) says so."""


def materialise_refusal(num_ops: int, num_devices: int) -> str | None:
    """RUN-21: why a program of `num_ops` operations over `num_devices` devices is not built, or None."""
    if num_ops <= MAX_MATERIALISED_OPS:
        return None
    return (f"the program's {num_ops:,} operations over {num_devices:,} devices exceed the "
            f"{MAX_MATERIALISED_OPS:,} semcheck builds to decide a property its fold does not prove (RUN-21)")


def replaced(op: Op, **changes) -> Op:
    """`dataclasses.replace(op, **changes)` without `__init__` (the fields are checked once, on the
    representative; bench/README.md, "Costs the code relies on")."""
    new = object.__new__(type(op))
    new.__dict__.update(op.__dict__)
    new.__dict__.update(changes)
    return new


class WholeProgramNeeded(TypeError):
    """RUN-22: a check asked for every core of a Symmetric (it iterated over them); its caller decides the
    property on the built program instead (RUN-21). Not a kernel's violation: a check without a path
    through one period."""


class _Made:
    """RUN-23: rotated cores by index, the oldest dropped once they hold more than `MAX_CACHED_OPS` operations."""

    def __init__(self) -> None:
        self.cores: dict[int, tuple[Op, ...]] = {}
        self.ops = 0

    def keep(self, c: int, ops: tuple[Op, ...]) -> None:
        self.cores[c] = ops
        self.ops += len(ops)
        while self.ops > MAX_CACHED_OPS and len(self.cores) > 1:
            self.ops -= len(self.cores.pop(next(iter(self.cores))))


class _Cores:
    """The cores of a `Symmetric`, by index (negative ones wrap), each produced on demand.

    Iterating over every core would build the whole program core by core: it is refused, and
    `Symmetric.materialise` is the one way to all of them."""

    def __init__(self, sym: Symmetric) -> None:
        self._sym = sym

    def __len__(self) -> int:
        return self._sym.topology.num_cores

    def __getitem__(self, i):
        n = len(self)
        if isinstance(i, slice):
            return tuple(self._sym.core(c) for c in range(*i.indices(n)))
        if not -n <= i < n:
            raise IndexError(i)
        return self._sym.core(i % n)

    def __iter__(self) -> Iterator[tuple[Op, ...]]:
        raise WholeProgramNeeded("iterating over every core of a Symmetric program builds it: use materialise() "
                                 "(RUN-21)")


@dataclasses.dataclass(frozen=True, eq=False)
class Symmetric:
    """RUN-20: the program of `topology` whose device `d + j period` runs device `d`'s operations rotated.

    `representatives`: the cores of devices `0 .. period-1` (launch applied); `shifts`: label ->
    (rows one rotation by `period` moves its regions by, modulus), as `Rotation.observe(shifted=True)` gives them.
    Duck-types `Program` where the checks read one: `topology`, `num_ops`, `cores[c]` (by index)."""

    topology: Topology
    period: int
    shifts: Mapping[str, tuple[int, int]]
    representatives: tuple[tuple[Op, ...], ...]
    collective_id: int | None = None
    name: str = "program"
    launch_failure: Violation | None = None
    names: tuple[tuple[str, str], ...] = ()
    tpu_failure: Violation | None = None
    followed: None = None  # ACC-9 follows values only where every device is lowered: never a Symmetric's
    detect_races: bool = False  # RACE-1, as `Program.detect_races`
    scoped_keys: bool = True  # BUF-14, as `Program.scoped_keys` (ERR-49 relaxes a built program, never a Symmetric)

    def __post_init__(self) -> None:
        topo = self.topology
        if self.period < 1 or topo.num_devices % self.period:
            raise ValueError(f"period {self.period} does not divide the {topo.num_devices} devices")
        if len(self.representatives) != self.period * topo.cores_per_device:
            raise ValueError(f"{len(self.representatives)} representative cores for a period of {self.period} devices")
        object.__setattr__(self, "shifts", dict(self.shifts))
        object.__setattr__(self, "rotation", Rotation(topo, self.period, self.shifts))  # RUN-36
        object.__setattr__(self, "_memo", {})
        object.__setattr__(self, "_made", _Made())  # RUN-23: the rotated cores last asked for
        # a barrier whose image cannot be named is refused here, not when some check first rotates it
        for ops in self.representatives:
            for op in ops:
                if type(op) is Barrier and not self._invariant(op):
                    self.rotation.barrier_name(op.name, op.participants)

    @property
    def cores(self) -> _Cores:
        return _Cores(self)

    @property
    def num_ops(self) -> int:
        """The whole program's operation count, without building it."""
        return sum(map(len, self.representatives)) * (self.topology.num_devices // self.period)

    def core(self, c: int) -> tuple[Op, ...]:
        """Core `c` of the whole program: its representative rotated by the whole periods before it.

        RUN-23: the last cores asked for are kept (up to `MAX_CACHED_OPS` operations): the symmetry, the
        folds and the race pass ask for the same few cores again and again."""
        made = self._made
        got = made.cores.get(c)
        if got is None:
            got = self._built(c)
            if c >= self.period * self.topology.cores_per_device:
                made.keep(c, got)
        return got

    def _built(self, c: int) -> tuple[Op, ...]:
        """Core `c` rotated out of its representative, not kept (`materialise` builds every core once)."""
        topo = self.topology
        span = self.period * topo.cores_per_device
        j, r = divmod(c, span)
        if not 0 <= c < topo.num_cores:
            raise IndexError(c)
        if j == 0:
            return self.representatives[r]
        memo = self._memo.get(j)
        if memo is None:
            memo = self._memo[j] = {}
        rotate, get = self._rotate, memo.get
        # most operations name no device and stay as they are: only the others are looked up
        return tuple([op if type(op) not in _ROTATED else got[1] if (got := get(id(op))) is not None else rotate(op, j)
                      for op in self.representatives[r]])

    def rotated(self, op: Op, j: int) -> Op:
        """`op`, an operation of a representative, as the device `j * period` further on runs it (RUN-20)."""
        return self._rotate(op, j)

    def rotated_region(self, r: Region | None, label: str | None, j: int) -> Region | None:
        """Region `r` of buffer `label` of a representative's operation rotated by `j` periods (DR-5)."""
        return self._region(r, label, j)

    def _rotate(self, op: Op, j: int) -> Op:
        """`op` as the device `j * period` further on runs it (RUN-7, DR-5); shared objects stay shared."""
        t = type(op)
        if t not in (Signal, DmaStart, ExitCheck, Barrier, Access):
            return op
        memo = self._memo.get(j)
        if memo is None:
            memo = self._memo[j] = {}
        got = memo.get(id(op))
        if got is not None:
            return got[1]
        topo = self.topology
        s = j * self.period
        if t is Barrier:
            by = s * topo.cores_per_device
            if self._invariant(op):  # a rotation by one period keeps it: so does every rotation by periods
                new: Op = op
            else:
                new = dataclasses.replace(op, name=self.rotation.barrier_name(op.name, op.participants, j),
                                          participants=frozenset((p + by) % topo.num_cores for p in op.participants))
        elif t is Access:
            region = self._region(op.region, op.buf, j)
            new = op if region is op.region else replaced(op, region=region)
        else:
            changes: dict = {}
            if op.device is not None:
                changes["device"] = (op.device + s) % topo.num_devices
            if t is DmaStart and op.dst_buf is not None:
                changes["src_region"] = self._region(op.src_region, op.src_buf, j)
                changes["dst_region"] = self._region(op.dst_region, op.dst_buf, j)
            new = replaced(op, **changes) if changes else op
        memo[id(op)] = (op, new)  # the original is kept so that its id is not reused
        return new

    def _region(self, r: Region | None, label: str | None, j: int) -> Region | None:
        """`Rotation.region` of `r`, one object per (region, label, rotation): the front end shares regions, and so
        do the rotated cores (the rotation checks compare regions by object first)."""
        by = self.shifts.get(label) if label is not None else None
        if r is None or by is None or by[0] == 0:
            return r
        memo = self._memo.get(j)
        if memo is None:
            memo = self._memo[j] = {}
        key = (id(r), label)
        got = memo.get(key)
        if got is None:
            new = self.rotation.region(r, label, j)
            new = self._memo.setdefault(("region", new), new)  # equal regions of other rotations: one object
            got = memo[key] = (r, new)
        return got[1]

    def _invariant(self, op: Barrier) -> bool:
        """Whether the rotation by one period maps `op`'s participants onto themselves (decided once per name)."""
        key = ("invariant", op.name)
        got = self._memo.get(key)
        if got is None:
            got = self._memo[key] = self.rotation.keeps(op.participants)
        return got

    def skeleton(self) -> Symmetric:
        """`access.skeleton` of the whole program, as a Symmetric: the skeleton names no regions, so the
        skeleton of a rotated core is the rotated skeleton of its representative (RUN-20)."""
        from semcheck.model.access import skeleton

        topo = self.topology
        reps = skeleton(Program(Topology(self.period, topo.cores_per_device), self.representatives)).cores
        return dataclasses.replace(self, shifts={}, representatives=reps)

    def materialise_refusal(self) -> str | None:
        """Why `materialise` refuses (RUN-21), or None."""
        return materialise_refusal(self.num_ops, self.topology.num_devices)

    def materialise(self) -> Program:
        """The whole program (RUN-20); raises `TooLarge` past `MAX_MATERIALISED_OPS` (RUN-21)."""
        why = self.materialise_refusal()
        if why is not None:
            raise TooLarge(why)
        cores = tuple(self._built(c) for c in range(self.topology.num_cores))
        for j in range(1, self.topology.num_devices // self.period):
            self._memo.pop(j, None)
        return Program(self.topology, cores, collective_id=self.collective_id, name=self.name,
                       launch_failure=self.launch_failure, names=self.names, tpu_failure=self.tpu_failure,
                       detect_races=self.detect_races)

    @staticmethod
    def of(program: Program, period: int, shifts: Shifts) -> Symmetric:
        """The Symmetric of a materialised `program` that repeats every `period` devices with `shifts`
        (DR-5's `Rotation.observe(shifted=True)`): its first period's cores. Raises ValueError when it does not repeat so."""
        topo = program.topology
        sym = Symmetric(topo, period, shifts, tuple(program.cores[: period * topo.cores_per_device]),
                        collective_id=program.collective_id, name=program.name,
                        launch_failure=program.launch_failure, names=program.names,
                        tpu_failure=program.tpu_failure, detect_races=program.detect_races)
        for c in range(topo.num_cores):
            if sym._built(c) != program.cores[c]:
                raise ValueError(f"the program does not repeat every {period} devices with these shifts (core {c})")
        for j in range(1, topo.num_devices // period):
            sym._memo.pop(j, None)
        return sym


def class_cores(program: Program | Symmetric) -> tuple[tuple[Op, ...], ...]:
    """RUN-20: cores of which every core of `program` is a rotation: a Symmetric's representatives, a
    Program's every core. A question about which kinds of operation a program holds, asked of these, is
    asked of the whole program (a rotation changes only devices, barrier names and regions)."""
    return program.representatives if isinstance(program, Symmetric) else program.cores


def with_cores(program: Program | Symmetric, cores: tuple[tuple[Op, ...], ...]) -> Program:
    """The Program of `program`'s topology and launch facts with these cores (the checks that read a few
    cores of a program, the others left empty: DR-34, DR-35), whether `program` is built or a Symmetric."""
    return Program(program.topology, cores, collective_id=program.collective_id, name=program.name,
                   launch_failure=program.launch_failure, names=program.names, tpu_failure=program.tpu_failure,
                   detect_races=program.detect_races, scoped_keys=getattr(program, "scoped_keys", True))
