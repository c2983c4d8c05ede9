"""The abstract values the kernel evaluator computes with.

A known integer (or small float) is a numpy array whose leading axis is the
device ("lane") axis; everything else is one of the classes here. Shared by
every rule module, so it depends on nothing but the IR's `Loc`.
"""

from __future__ import annotations

import dataclasses

from semcheck.model.ops import NO_LOC, Loc, SemType

# Integer arrays with more elements than this per device are not evaluated
# (they are vector data, not scalar control values).
MAX_EVAL_ELEMENTS = 1024

# Integer and boolean refs the front end tracks (control tables: counts, routings, offsets) may be
# larger than the values it evaluates (ACC-31): a table is held flat per device and an access costs
# what its view names, so a scalar load of a table of this size is as cheap as one of a small one.
MAX_TABLE_ELEMENTS = 1 << 16


class Unknown:
    """An opaque value (data, float compute, a semaphore read, ...)."""

    __slots__ = ("why", "loc")

    def __init__(self, why: str, loc: Loc = NO_LOC) -> None:
        self.why = why
        self.loc = loc

    def __repr__(self) -> str:
        return f"Unknown({self.why!r} at {self.loc})"


@dataclasses.dataclass(frozen=True, eq=False)
class SemArray:
    """A semaphore ref: the allocation `label` with array shape `shape`, of type `sem_type` (DMA-6)."""

    label: str
    shape: tuple[int, ...]
    sem_type: SemType = "dma"


@dataclasses.dataclass(frozen=True, eq=False)
class BufRef:
    """A non-semaphore ref (its contents are never tracked)."""

    name: str
