"""Errors, in two kinds kept apart (spec section ERR).

* `Violation`s are what a kernel did wrong. They are values: the model returns
  them inside outcomes, and each has a stable message (the spec lists them;
  where the interpreter raises, the message is the interpreter's own).
  The buffer rules' errors (BUF-*, specs/semantics/buffers.md) are here too.
* `ModelBug` is what cannot happen in a correct model or a well-formed
  program: it is raised, loudly, never reported as a verdict.
"""

from __future__ import annotations

import dataclasses
from typing import Any


class ModelBug(AssertionError):
    """An internal invariant failed: a bug in semcheck or a malformed program IR."""


@dataclasses.dataclass(frozen=True)
class Violation:
    """Base class of everything a kernel can do wrong. `message` is stable."""

    @property
    def code(self) -> str:
        return type(self).__name__

    @property
    def message(self) -> str:  # pragma: no cover - every subclass overrides
        raise NotImplementedError


@dataclasses.dataclass(frozen=True)
class IdCollision(Violation):
    """ERR-1: a lookup met an id present in both the fixed and the internal table."""

    sem_id: int

    @property
    def message(self) -> str:
        return f"Semaphore {self.sem_id} occurs as both fixed-id and internal."

    @property
    def python_type(self) -> str:
        return "ValueError"


@dataclasses.dataclass(frozen=True)
class UnknownSemaphore(Violation):
    """ERR-2: a lookup of an id in neither table (the interpreter's KeyError)."""

    sem_id: int

    @property
    def message(self) -> str:
        return f"{self.sem_id}"

    @property
    def python_type(self) -> str:
        return "KeyError"


@dataclasses.dataclass(frozen=True)
class Int16Overflow(Violation):
    """ERR-3: numpy refused to convert an id to int16 (the interpreter's OverflowError)."""

    value: int

    @property
    def message(self) -> str:
        return f"Python integer {self.value} out of bounds for int16"

    @property
    def python_type(self) -> str:
        return "OverflowError"


@dataclasses.dataclass(frozen=True)
class BadTarget(Violation):
    """ERR-4: a signal or DMA names a device or core that does not exist."""

    device: int
    core: int

    @property
    def message(self) -> str:
        return f"target device {self.device} core {self.core} does not exist"

    @property
    def python_type(self) -> str:
        return "IndexError"


@dataclasses.dataclass(frozen=True)
class CoreIndexOutOfBounds(Violation):
    """ERR-4 (interpreter): a signal's unchecked global core index fell outside the count array."""

    index: int
    size: int

    @property
    def message(self) -> str:
        return f"index {self.index} is out of bounds for axis 0 with size {self.size}"

    @property
    def python_type(self) -> str:
        return "IndexError"


@dataclasses.dataclass(frozen=True)
class SemIndexOutOfBounds(Violation):
    """ERR-5: a semaphore array was indexed outside its allocation."""

    label: str
    index: int
    count: int

    @property
    def message(self) -> str:
        return f"semaphore index {self.index} out of bounds for allocation {self.label!r} of {self.count}"

    @property
    def python_type(self) -> str:
        return "IndexError"


@dataclasses.dataclass(frozen=True)
class NoCollectiveId(Violation):
    """ERR-6: the barrier semaphore was requested by a kernel without a collective_id."""

    @property
    def message(self) -> str:
        return "barrier semaphore requested but the kernel has no collective_id"

    @property
    def python_type(self) -> str:
        return "TypeError"


@dataclasses.dataclass(frozen=True)
class SemaphoreOutput(Violation):
    """ERR-8: the interpreter cannot make the uninitialised value of a semaphore output (LAUNCH-2).

    `uninitialized_memory` is the `InterpretParams` setting, which picks the error; `dtype` is the
    output's semaphore dtype as jax prints it (`semaphore`, `dma_sem`, `barrier_semaphore`), which
    the "nan" error names.
    """

    output: str
    uninitialized_memory: str = "nan"
    dtype: str = "semaphore"
    loc: Any = dataclasses.field(default=None, compare=False)  # PRG-223: the failing call's line, if it runs no op

    @property
    def message(self) -> str:
        if self.uninitialized_memory == "zero":
            return "type object 'AbstractSemaphoreTyRules' has no attribute 'full'"
        return f"{self.uninitialized_memory} + {self.dtype}"

    @property
    def python_type(self) -> str:
        return "AttributeError" if self.uninitialized_memory == "zero" else "NotImplementedError"


@dataclasses.dataclass(frozen=True)
class TypedOperand(Violation):
    """ERR-36: the interpreter refuses a launch argument typed with a memory space other than ANY and HBM.

    Before anything of the call runs, the interpreter strips the memory space of every argument (its
    dynamic grid bounds, index operands and inputs); a `ShapedArray` typed with SMEM, VMEM or any other space
    of pallas's makes that raise `NotImplementedError`. `operand` names the argument, `space` is
    the space as jax prints it (`smem`, `vmem`).
    """

    operand: str
    space: str
    loc: Any = dataclasses.field(default=None, compare=False)  # PRG-223: the failing call's line, if it runs no op

    @property
    def message(self) -> str:
        return f"Unsupported memory space: {self.space}"

    @property
    def python_type(self) -> str:
        return "NotImplementedError"


@dataclasses.dataclass(frozen=True)
class EarlierFailure(Violation):
    """PRG-11 (specs/semantics/calls.md): an interpreted call that never starts because an earlier call failed.

    The failed computation's ordered-effect token holds the error, so the next computation with an
    interpreted call raises it at its dispatch (and the calls after the failing one in its own
    computation never start). `error_type` and `error` are the earlier failure's, `after` names the call.
    """

    error_type: str
    error: str
    after: str

    @property
    def message(self) -> str:
        return self.error

    @property
    def python_type(self) -> str:
        return self.error_type


@dataclasses.dataclass(frozen=True)
class TpuLoweringFailure(Violation):
    """LAUNCH-7 (specs/semantics/kernels.md): jax's TPU lowering refuses the call's computation, so nothing of it runs on a
    TPU. `error` is jax's ValueError text; `after` names the refused call when it is another call of the same
    (or an earlier) computation, "" when it is this one."""

    error: str
    after: str = ""

    @property
    def message(self) -> str:
        return self.error

    @property
    def python_type(self) -> str:
        return "ValueError"


@dataclasses.dataclass(frozen=True)
class InterpreterView(Violation):
    """ERR-9: a kernel load, store or copy through a ref view jax's TPU interpreter cannot index (ACC-6, D22).

    The interpreter turns a load's or store's transforms into an index range by reading each
    one's `indices`: a reshape, bitcast, transpose or memory-space view has none, and the
    callback raises when a core reaches the access. `transform` is the view's class name, `where`
    the first such access's line (`file:line`), `accesses` how many kernel lines do it.
    """

    transform: str
    access: str  # "load" | "store" | "copy" (a DMA's source or destination view)
    where: str = ""
    accesses: int = 1
    side: str = ""  # a copy's: "source" or "destination", the first of its views that raises (ACC-11)

    @property
    def copies_only(self) -> bool:
        """Only copies go through such views: under on_wait a copy runs (and raises) only when a
        waiter runs its task, which may never happen."""
        return self.access == "copy"

    @property
    def message(self) -> str:
        return f"'{self.transform}' object has no attribute 'indices'"

    @property
    def python_type(self) -> str:
        return "AttributeError"


@dataclasses.dataclass(frozen=True)
class WindowOutOfBounds(Violation):
    """ERR-20: a kernel load, store or copy whose window jax's interpreter refuses (ACC-10, BUF-10 .. BUF-12).

    `kind` is what the interpreter does with the window: "read" (a load, a copy's source; BUF-10) is
    refused when the buffer does not hold the window whole, a zero-size window starting at a
    dimension's end included (`IndexError`); "write" (a copy's destination; BUF-11) when an element
    lies past an end (`ValueError`); "swap" (a kernel store, `ref[...] = x`, which jax binds as a swap;
    BUF-12) as a read is (`ValueError`). `buffer` names the buffer as the report does (the interpreter
    prints its device, core, memory space and id there), `rnge` is the interpreter's range (`to_range`
    of the view), `access` the kernel's words ("load", "store", "copy"), `where` its line. `asserted`: a
    write (a copy's destination, or a store whose read passed) at a negative index or start, which fails
    the manager's assertion of non-negative ranges instead (`AssertionError`, no message; BUF-5a).
    """

    access: str  # "load" | "store" | "copy"
    kind: str  # "read" | "write" | "swap"
    buffer: str
    rnge: tuple
    shape: tuple
    where: str = ""
    asserted: bool = False  # a write at a negative index or start: the manager's bare assertion (BUF-5a)

    @property
    def message(self) -> str:
        if self.asserted:
            return ""
        verb = {"read": "reading", "write": "writing", "swap": "swapping"}[self.kind]
        end = "." if self.kind == "read" else " ."
        return (f"Out-of-bounds {self.kind} of {self.buffer}: {verb} [{self.rnge!r}] but buffer has shape "
                f"{self.shape}{end}")

    @property
    def python_type(self) -> str:
        if self.asserted:
            return "AssertionError"
        return "IndexError" if self.kind == "read" else "ValueError"


@dataclasses.dataclass(frozen=True)
class Untranslatable(Violation):
    """ERR-10: jax's interpreter cannot turn a kernel equation into its CPU program (LAUNCH-3, D12).

    The interpreter traces the kernel into a CPU program and compiles it before any device starts:
    a primitive it binds as it is fails there in every run, either when bound on the integer id the
    interpreter holds for a ref (`addupdate`: a `ValueError` while tracing) or when the CPU compiler
    has no rule for it (`pl.semaphore_read`: a `NotImplementedError`). `primitive` is its name,
    `file`, `line` and `text` its kernel line (line 0: unknown), `stage` which of the two raises
    it; `error_type` and `error` are what is raised.
    """

    primitive: str
    error_type: str
    error: str
    stage: str = "compile"  # "trace" (the interpreter's trace of the kernel) | "compile" (the CPU compile)
    file: str = ""
    line: int = 0
    text: str = ""

    @property
    def message(self) -> str:
        return self.error

    @property
    def python_type(self) -> str:
        return self.error_type

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}" if self.line else ""


@dataclasses.dataclass(frozen=True)
class RevisitedBlock(Violation):
    """ERR-11: a grid step's output block was visited before, and the grid has left it since (GRID-3, D24).

    jax's interpreter remembers, per (device, core), the block of every non-aliased VMEM output of
    each grid step it ran (`_check_for_revisiting`); after a step whose block differs from the
    previous step's and equals an earlier one it raises, which ends the run. `block` and the
    iterations are printed as the interpreter prints them (Python tuples of slices and loop indices).
    """

    output_index: int
    block: str  # e.g. "(slice(0, 8, 1), slice(0, 128, 1))"
    iteration: str  # the loop index tuple, e.g. "(2,)"
    first: str
    last: str
    operand: str = ""  # the kernel argument's name, for the report
    where: str = ""  # the pallas_call's `file:line`

    @property
    def message(self) -> str:
        return (f"Revisited block {self.block} of output {self.output_index} in iteration {self.iteration}. "
                f"The block was previously visited in iterations {self.first} through {self.last} .")

    @property
    def python_type(self) -> str:
        return "RuntimeError"


# --- the manager's buffer errors (specs/semantics/buffers.md) ---------------------------------------



@dataclasses.dataclass(frozen=True)
class UnknownBuffer(Violation):
    """BUF-3/4/5/6: an access or deallocation of a key that holds no buffer (KeyError)."""

    key: tuple  # BufferKey

    @property
    def message(self) -> str:
        return repr(self.key)

    @property
    def python_type(self) -> str:
        return "KeyError"


@dataclasses.dataclass(frozen=True)
class LogicalShapeTooBig(Violation):
    """BUF-2: a new buffer whose logical shape exceeds its content in some dimension."""

    logical_shape: tuple
    content_shape: tuple

    @property
    def message(self) -> str:
        return (
            f"Logical shape {self.logical_shape} cannot be bigger than content"
            f" shape {self.content_shape}."
        )

    @property
    def python_type(self) -> str:
        return "ValueError"


@dataclasses.dataclass(frozen=True)
class RangeOutOfBounds(Violation):
    """BUF-6: an unmasked swap whose write half is partly outside the padded shape (IndexError)."""

    rnge: tuple  # a Range
    shape: tuple

    @property
    def message(self) -> str:
        return f"Range {self.rnge!r} is (at least partially) out of bounds for allocation shape {self.shape}."

    @property
    def python_type(self) -> str:
        return "IndexError"


@dataclasses.dataclass(frozen=True)
class Raised(Violation):
    """A Python error the manager lets escape unchanged (zip length checks, numpy, assertions)."""

    kind: str
    text: str

    @property
    def message(self) -> str:
        return self.text

    @property
    def python_type(self) -> str:
        return self.kind


def zip_mismatch(first_len: int, second_len: int) -> Raised:
    """The error `zip(a, b, strict=True)` raises for lengths `first_len` != `second_len`."""
    side = "shorter" if second_len < first_len else "longer"
    return Raised("ValueError", f"zip() argument 2 is {side} than argument 1")


DTYPE_MISMATCH = Raised("AssertionError", "")


def _loc(device: int, core: int, memory_space: str, buffer_id: int) -> str:
    return f"({device} {core} {memory_space} {buffer_id})"


@dataclasses.dataclass(frozen=True)
class OutOfBoundsRead(Violation):
    """BUF-10: a kernel read that is not wholly inside the buffer (out_of_bounds_reads="raise")."""

    device: int
    core: int
    memory_space: str
    buffer_id: int
    rnge: tuple  # a Range
    shape: tuple

    @property
    def message(self) -> str:
        where = _loc(self.device, self.core, self.memory_space, self.buffer_id)
        return f"Out-of-bounds read of {where}: reading [{self.rnge!r}] but buffer has shape {self.shape}."

    @property
    def python_type(self) -> str:
        return "IndexError"


@dataclasses.dataclass(frozen=True)
class OutOfBoundsWrite(Violation):
    """BUF-11: a kernel store that is partly outside the buffer."""

    device: int
    core: int
    memory_space: str
    buffer_id: int
    rnge: tuple  # a Range
    shape: tuple

    @property
    def message(self) -> str:
        where = _loc(self.device, self.core, self.memory_space, self.buffer_id)
        return f"Out-of-bounds write of {where}: writing [{self.rnge!r}] but buffer has shape {self.shape} ."

    @property
    def python_type(self) -> str:
        return "ValueError"


@dataclasses.dataclass(frozen=True)
class OutOfBoundsSwap(Violation):
    """BUF-12: a kernel swap (masked or not) that the manager refused."""

    device: int
    core: int
    memory_space: str
    buffer_id: int
    rnge: tuple  # a Range
    shape: tuple
    masked: bool

    @property
    def message(self) -> str:
        where = _loc(self.device, self.core, self.memory_space, self.buffer_id)
        if self.masked:
            return (
                f"Out-of-bounds masked swap of {where}: swapping [{self.rnge!r}]"
                f" but buffer has shape {self.shape} . "
            )
        return f"Out-of-bounds swap of {where}: swapping [{self.rnge!r}] but buffer has shape {self.shape} ."

    @property
    def python_type(self) -> str:
        return "ValueError"


@dataclasses.dataclass(frozen=True)
class UnclockedWait(Violation):
    """RACE-1: with race detection, a wait finished on a counter no signal ever reached, which has no
    clock to take: the manager's bare `assert` (AssertionError, empty message)."""

    key: tuple  # SemKey
    core: int

    @property
    def message(self) -> str:
        return ""

    @property
    def python_type(self) -> str:
        return "AssertionError"
