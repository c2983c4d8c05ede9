"""Program IR: what one core of one device does, in order (spec section IR).

A kernel becomes a `Program`: one straight-line tuple of operations per global
core. Operations are frozen dataclasses; each carries the kernel source
location it came from, so every verdict can point at a line.

Semaphores are referenced by *allocation*, not by id: `SemRef(label, index)`
names element `index` of the allocation `label` made by the executing core
(or, for `BARRIER`, the kernel's barrier semaphore). The model turns a
reference into an id exactly as the interpreter does (rule SEM-1), so the
front end never has to predict ids, and the hardware semantics can key
semaphores by allocation site instead (rule HW-1).
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Literal, Union

from semcheck.model.errors import Violation

DmaMode = Literal["eager", "on_wait", "hardware"]
DMA_MODES: tuple[DmaMode, ...] = ("eager", "on_wait", "hardware")
INTERPRETER_MODES: tuple[DmaMode, ...] = ("eager", "on_wait")
SemType = Literal["dma", "regular", "barrier"]
"""A semaphore allocation's `pltpu.SemaphoreType` (the barrier semaphore is "barrier")."""


@dataclasses.dataclass(frozen=True)
class Loc:
    """A kernel source location: file, line and the line's text."""

    file: str
    line: int
    text: str = ""

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


NO_LOC = Loc("<unknown>", 0)

BARRIER = "barrier"
"""The label of the kernel's barrier semaphore (`pltpu.get_barrier_semaphore`)."""


@dataclasses.dataclass(frozen=True)
class SemRef:
    """Element `index` of semaphore allocation `label` (or of `BARRIER`)."""

    label: str
    index: int = 0

    def __str__(self) -> str:
        return f"{self.label}[{self.index}]"


@dataclasses.dataclass(frozen=True)
class Region:
    """The part of a buffer an access or a DMA half touches (ACC-1).

    `box` holds, per dimension, the half-open element range `[start, stop)`.
    `exact` is False when the front end widened the region to what the access
    may touch (a mask, a stride or an index it cannot pin down); `why` then
    says why, for the report. An empty `box` is a scalar buffer (rank 0).
    `parts`, when not empty, are boxes inside `box` whose union is exactly the
    region (ACC-2, ACC-16); `box` is then their bounding box. An inexact region
    with parts holds at least the elements touched (a narrowing bitcast's part
    of an element), so parts that meet no box of another still decide "no
    overlap".
    `window`, when not None, is the region jax's race detector takes the access to touch where it differs
    from the elements (ERR-28: a masked store's indexed window, of which the elements are the mask's true
    ones); `in_mode` reads it under `eager` and `on_wait`.
    `whole`: the access names its buffer with no index at all (`ref[...]`, a copy of an unsliced ref), a
    window jax's race detector reads as whole in every dimension, which no window of no element meets
    (ERR-27); a race resting on such a meeting is not believed (DR-48).
    """

    box: tuple[tuple[int, int], ...]
    exact: bool = True
    why: str = ""
    parts: tuple[tuple[tuple[int, int], ...], ...] = ()
    window: Region | None = None
    whole: bool = False

    def overlaps(self, other: Region) -> bool:
        """ACC-2: whether the two regions share an element (regions of one buffer); an exact region of no
        element shares none, whatever its start (ERR-27's windows are `regions_meet`'s)."""
        if (self.exact and self.empty) or (other.exact and other.empty):
            return False
        if len(self.box) != len(other.box):
            return True  # different views of one buffer: assume they may overlap
        if not _boxes_meet(self.box, other.box):
            return False
        if not self.parts and not other.parts:
            return True
        return _unions_meet(self.parts or (self.box,), other.parts or (other.box,))

    @property
    def empty(self) -> bool:
        return any(lo >= hi for lo, hi in self.box)

    def __str__(self) -> str:
        inner = ", ".join(f"{lo}:{hi}" for lo, hi in self.box)
        parts = f" ({len(self.parts)} boxes)" if self.parts else ""
        return f"[{inner}]" + parts + ("" if self.exact else " (widened)")


def _boxes_meet(a: tuple[tuple[int, int], ...], b: tuple[tuple[int, int], ...]) -> bool:
    """Whether two boxes of one rank share an element."""
    return all(a0 < b1 and b0 < a1 for (a0, a1), (b0, b1) in zip(a, b))


def _unions_meet(ps: tuple[tuple[tuple[int, int], ...], ...], qs: tuple[tuple[tuple[int, int], ...], ...]) -> bool:
    """Whether some box of `ps` meets some box of `qs` (ACC-2; a region has up to thousands, ACC-16)."""
    if len(ps) * len(qs) <= 64:
        return any(_boxes_meet(p, q) for p in ps for q in qs)
    import numpy as np  # here, not at the top: the command-line process imports this module, never numpy

    a, b = np.asarray(ps, dtype=np.int64), np.asarray(qs, dtype=np.int64)  # (n, rank, 2)
    chunk = max(1, (1 << 20) // max(1, b.shape[0] * b.shape[1]))
    for i in range(0, a.shape[0], chunk):
        x = a[i:i + chunk, None]
        if ((x[..., 0] < b[None, :, :, 1]) & (b[None, :, :, 0] < x[..., 1])).all(axis=2).any():
            return True
    return False


@dataclasses.dataclass(frozen=True)
class Topology:
    """Devices and cores. Global core id = device * cores_per_device + core."""

    num_devices: int
    cores_per_device: int = 1

    @property
    def num_cores(self) -> int:
        return self.num_devices * self.cores_per_device

    def global_core(self, device: int, core: int) -> int:
        return device * self.cores_per_device + core

    def device_of(self, global_core: int) -> int:
        return global_core // self.cores_per_device

    def local_core_of(self, global_core: int) -> int:
        return global_core % self.cores_per_device

    def cores_of_device(self, device: int) -> tuple[int, ...]:
        first = device * self.cores_per_device  # global_core(device, 0); asked per allocation of every run
        return tuple(range(first, first + self.cores_per_device))


# --- operations --------------------------------------------------------------
#
# Each operation declares what the engines outside the step relation ask of it: its words
# (`describe`), whether it hands out semaphore ids or fetches the barrier semaphore, and whether
# its failure propagates. A driver reads these instead of testing for the class, so a new
# operation states them here once.


class _OpBase:
    hands_out_ids: ClassVar[bool] = False
    """It changes the semaphore id tables (SEM-1, SEM-2): it may move the collective id."""
    fetches_barrier: ClassVar[bool] = False
    """It is `get_barrier_semaphore` (SEM-2): a barrier reference before it races with other cores."""
    propagates_failure: ClassVar[bool] = True
    """Its interpreter callback carries the failure-propagation decorator (ERR-7)."""

    def describe(self) -> str:
        """A short description in the program's labels (reports put them in the kernel's words)."""
        return type(self).__name__


@dataclasses.dataclass(frozen=True)
class AllocSem(_OpBase):
    """Allocate `count` semaphores (SEM-1).

    `scope="device"` is the pallas_call's scratch allocation: the device
    allocates the same ids on every one of its cores (and every core of the
    device may then refer to `label`). `scope="core"` is a `run_scoped`
    allocation by the executing core alone. `label` is unique per allocation
    instance (a `run_scoped` inside a loop gets a fresh label per iteration);
    `site` names the static allocation site, identical across iterations and
    cores, which is what a real TPU allocates (HW-1).
    """

    label: str
    count: int
    site: str
    scope: Literal["device", "core"] = "core"
    loc: Loc = NO_LOC

    hands_out_ids: ClassVar[bool] = True

    def describe(self) -> str:
        return f"allocate {self.count} semaphore(s) {self.label!r} ({self.scope})"


@dataclasses.dataclass(frozen=True)
class GetBarrierSem(_OpBase):
    """`pltpu.get_barrier_semaphore()`: ensure the fixed-id semaphore exists (SEM-2)."""

    loc: Loc = NO_LOC

    hands_out_ids: ClassVar[bool] = True
    fetches_barrier: ClassVar[bool] = True
    propagates_failure: ClassVar[bool] = False  # the one unwrapped callback in jax 0.12

    def describe(self) -> str:
        return f"get barrier semaphore ({BARRIER})"


@dataclasses.dataclass(frozen=True)
class Signal(_OpBase):
    """`pl.semaphore_signal(sem, inc, device_id=..., core_index=...)` (SEM-4).

    `device` is the logical target device (None: the signalling device);
    `core` is the target local core (None: no `core_index` was given, which
    the interpreter resolves to core 0 and hardware to the signalling core).
    """

    sem: SemRef
    inc: int = 1
    device: int | None = None
    core: int | None = None
    loc: Loc = NO_LOC

    def describe(self) -> str:
        where = "" if self.device is None else f" -> device {self.device}"
        if self.core is not None:  # a core of the target device: of the signalling one when none is named
            where += f" core {self.core}" if self.device is not None else f" -> core {self.core} of this device"
        return f"signal {self.sem} +{self.inc}{where}"


@dataclasses.dataclass(frozen=True)
class Wait(_OpBase):
    """`pl.semaphore_wait(sem, value)` or a DMA wait for `value` bytes (SEM-5)."""

    sem: SemRef
    value: int = 1
    kind: Literal["semaphore", "dma"] = "semaphore"
    loc: Loc = NO_LOC

    def describe(self) -> str:
        return f"{'dma wait' if self.kind == 'dma' else 'wait'} {self.sem} for {self.value}"


@dataclasses.dataclass(frozen=True)
class Read(_OpBase):
    """`pl.semaphore_read(sem)`: the executing core's own count (SEM-6)."""

    sem: SemRef
    loc: Loc = NO_LOC

    def describe(self) -> str:
        return f"read {self.sem}"


@dataclasses.dataclass(frozen=True)
class DmaStart(_OpBase):
    """Start a DMA of `nbytes` from the executing core (DMA-1).

    `device`/`core` name the destination (None: the source device / the same
    local core index as the source). `src_sem` is the send semaphore of a
    remote copy (or the read semaphore of a local copy), `dst_sem` the
    receive semaphore. `src_sem_type`/`dst_sem_type` are the types of their
    allocations: what a half adds to a non-DMA semaphore differs on hardware
    (DMA-6); "dma" keeps a hand-built program meaning what the interpreter does.
    """

    dst_sem: SemRef
    nbytes: int
    src_sem: SemRef | None = None
    device: int | None = None
    core: int | None = None
    loc: Loc = NO_LOC
    # ACC-3: the buffers and regions the copy reads (on the issuing core) and
    # writes (on the destination core); None when the front end did not record them.
    src_buf: str | None = None
    src_region: Region | None = None
    dst_buf: str | None = None
    dst_region: Region | None = None
    src_sem_type: SemType = "dma"
    dst_sem_type: SemType = "dma"
    # ERR-9 (ACC-6): what jax's interpreter raises when this copy runs, its source or destination
    # being a view it cannot index (`errors.InterpreterView`); None when it can. A TPU runs it (D22).
    view_error: Violation | None = None

    def describe(self) -> str:
        where = "local" if self.device is None else f"-> device {self.device}"
        send = f" send={self.src_sem}" if self.src_sem is not None else ""
        return f"dma start {self.nbytes}B {where}{send} recv={self.dst_sem}"


@dataclasses.dataclass(frozen=True)
class Barrier(_OpBase):
    """Rendezvous of `participants` (global core ids) (BAR-1).

    The interpreter's device barrier (`threading.Barrier(num_devices)`, waited
    on by each device's first core) and the implicit join of a device's cores
    are both barriers; the k-th `Barrier` named `name` of each participant
    meet.
    """

    name: str
    participants: frozenset[int]
    loc: Loc = NO_LOC

    def describe(self) -> str:
        return f"barrier {self.name!r}"


@dataclasses.dataclass(frozen=True)
class AllocBuffer(_OpBase):
    """Allocate a buffer; records the id the interpreter hands out (BUF-1, BUF-8)."""

    label: str
    nbytes: int = 0
    memory_space: str = "vmem"
    scope: Literal["device", "core"] = "core"
    loc: Loc = NO_LOC

    def describe(self) -> str:
        return f"allocate buffer {self.label!r}"


@dataclasses.dataclass(frozen=True)
class FreeBuffer(_OpBase):
    """The end of a `run_scoped` allocation's scope: deallocate the buffer `label` (BUF-9). For a scoped
    semaphore's label it only marks where the scope ends (SEM-10): the interpreter frees no semaphore (D6)."""

    label: str
    loc: Loc = NO_LOC

    def describe(self) -> str:
        return f"free {self.label!r}" if self.label.startswith("scoped@") else f"free buffer {self.label!r}"


@dataclasses.dataclass(frozen=True)
class Access(_OpBase):
    """A kernel load (`write=False`) or store of `region` of buffer `buf` (ACC-1).

    `buf` is the label of an `AllocBuffer` of the executing core (or of its
    device, for a device-scoped allocation). A `swap` is a write; an access
    that reads and writes (a read-modify-write) is recorded as a write.
    """

    buf: str
    region: Region
    write: bool = False
    loc: Loc = NO_LOC
    # ERR-9 (ACC-6): what jax's interpreter raises when a core reaches this access, made through a
    # view it cannot index (`errors.InterpreterView`); None when it can. A TPU runs it (D22).
    view_error: Violation | None = None

    def describe(self) -> str:
        what = getattr(self.loc, "what", "")  # a grid copy (GRID-1)
        return f"{'store' if self.write else 'load'} {self.buf}{self.region}" + (f" ({what})" if what else "")


@dataclasses.dataclass(frozen=True)
class ExitCheck(_OpBase):
    """The interpreter's check at kernel exit of the device's counts (EXIT-1)."""

    device: int
    loc: Loc = NO_LOC

    def describe(self) -> str:
        return "exit check"


Op = Union[
    AllocSem,
    GetBarrierSem,
    Signal,
    Wait,
    Read,
    DmaStart,
    Barrier,
    AllocBuffer,
    FreeBuffer,
    Access,
    ExitCheck,
]

LOOKUP_OPS = (Signal, Wait, Read, DmaStart)


@dataclasses.dataclass(frozen=True)
class Program:
    """A whole kernel launch: one op tuple per global core.

    `collective_id` is the id of the fixed-id barrier semaphore (None when the
    kernel has no `collective_id`). `launch_failure` is what the interpreter
    raises before any core runs (LAUNCH-2); None when it launches. (A failure
    inside the kernel is an operation's: `Access.view_error`, ERR-9.) `names`:
    (label, name) pairs, how reports name a label the lowering made up (the
    launch's `hbm{k}` buffers by the kernel's parameter); no part of the semantics.
    """

    topology: Topology
    cores: tuple[tuple[Op, ...], ...]
    collective_id: int | None = None
    name: str = "program"
    launch_failure: Violation | None = None
    names: tuple[tuple[str, str], ...] = dataclasses.field(default=(), compare=False)
    tpu_failure: Violation | None = None  # LAUNCH-7: jax's TPU lowering refuses the call (hardware only)
    # ACC-9: what the lowering read from refs that copies write (`model.followed.ValueFacts`); None: nothing
    followed: Any = dataclasses.field(default=None, compare=False)
    detect_races: bool = False  # RACE-1: the call's `InterpretParams(detect_races=...)` (interpreter modes)
    # BUF-14: the manager holds run_scoped keys a copy's half may miss; False only in ERR-49's relaxed program,
    # whose halves never miss one (every run of the program is, up to its failure, one of that program)
    scoped_keys: bool = True

    def __post_init__(self) -> None:
        """IR-1 well-formedness: one op tuple per core; a barrier name has one participant set."""
        if len(self.cores) != self.topology.num_cores:
            raise ValueError(
                f"program has {len(self.cores)} core programs for "
                f"{self.topology.num_cores} cores"
            )
        parties: dict[str, frozenset[int]] = {}
        for core, ops in enumerate(self.cores):
            if Barrier not in set(map(type, ops)):  # the op classes are final; most cores have no barrier
                continue
            for op in ops:
                if type(op) is Barrier:
                    known = parties.setdefault(op.name, op.participants)
                    # a set compares element by element even with itself: the identity first, as a
                    # launch's barriers share one set (N comparisons of N cores each, at N devices)
                    if known is not op.participants and known != op.participants:
                        raise ValueError(f"barrier {op.name!r} has two different participant sets")
                    if core not in op.participants:
                        raise ValueError(f"core {core} waits at barrier {op.name!r} without taking part")

    @property
    def num_ops(self) -> int:
        return sum(len(c) for c in self.cores)


def core_field(program: Any) -> str:
    """RUN-20: the field of `program` whose cores answer for every core: a program given by one period keeps
    its representatives (every other core is one of them rotated, which moves devices and rows, never an
    op's kind, size, semaphore types or a region's exactness), else a `Program` its cores."""
    return "representatives" if getattr(program, "representatives", None) is not None else "cores"
