"""Errors, in two kinds kept apart (spec section ERR).

* `Violation`s are what a kernel did wrong. They are values: the model returns
  them inside outcomes, and each has a stable message (the spec lists them;
  where the interpreter raises, the message is the interpreter's own).
* `ModelBug` is what cannot happen in a correct model or a well-formed
  program: it is raised, loudly, never reported as a verdict.
"""

from __future__ import annotations

import dataclasses


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
