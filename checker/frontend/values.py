"""The abstract values the kernel evaluator computes with.

A known integer (or small float) is a numpy array whose leading axis is the
device ("lane") axis; everything else is one of the classes here. Shared by
every rule module, so it depends on nothing but the IR's `Loc`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from semcheck.model.ops import NO_LOC, Loc, SemType

# Integer arrays with more elements than this per device are not evaluated
# (they are vector data, not scalar control values).
MAX_EVAL_ELEMENTS = 1024

# Integer and boolean refs the front end tracks (control tables: counts, routings, offsets) may be
# larger than the values it evaluates (ACC-31): a table is held flat per device and an access costs
# what its view names, so a scalar load of a table of this size is as cheap as one of a small one; what a
# copy moves is recorded as one array per buffer (ACC-53). The bound is memory (ACC-54): 16 bytes per
# element and device for int32 (value, why unknown, last writer) plus 8 per element (the positions).
MAX_TABLE_ELEMENTS = 1 << 20

# What one core's tracked refs may hold over all lanes at once (ACC-54): a lane per device, so a table under
# `MAX_TABLE_ELEMENTS` at 2 devices would need gigabytes at pod scale; past this the ref is not tracked.
MAX_TRACKED_LANE_ELEMENTS = 1 << 26

# Float refs the front end tracks (ACC-42): a routing kernel double-buffers its gating block (2 x bt x 128
# logits) and fetches it from an HBM input of the tokens' logits; a float store is a vector of values, so the
# bound is lower than the tables' (the values the front end evaluates keep `MAX_EVAL_ELEMENTS`).
MAX_FLOAT_ELEMENTS = 1 << 13


class Unknown:
    """An opaque value (data, float compute, a semaphore read, ...)."""

    __slots__ = ("why", "loc")

    def __init__(self, why: str, loc: Loc = NO_LOC) -> None:
        self.why = why
        self.loc = loc

    def __repr__(self) -> str:
        return f"Unknown({self.why!r} at {self.loc})"


class Bounded(Unknown):
    """A float value known only within bounds (ACC-35): arithmetic that rounds computed it, and on every lane
    and element the value jax's interpreter computes lies in `[lo, hi]` (float64 lane arrays of the value's
    shape; `dtype` its own type). Only the numeric rules (`numeric`, `float_bounds`) read the bounds, and a
    call passes them through; to every other rule the evaluator hands it as the plain `Unknown` it also is
    (`opaque`), whose reason names the operation that rounded."""

    __slots__ = ("lo", "hi", "dtype")

    def __init__(self, why: str, loc: Loc, lo: Any, hi: Any, dtype: Any) -> None:
        super().__init__(why, loc)
        self.lo, self.hi, self.dtype = lo, hi, dtype

    def __repr__(self) -> str:
        return f"Bounded({self.why!r} at {self.loc}, {self.lo!r}, {self.hi!r})"


class SomeLanes(Unknown):
    """An integer value known on some lanes only (ACC-60): `values` is a lane array with every lane (meaningless
    where unknown), `known` a bool array, one entry per lane. A load reads it where the elements read are unknown
    on some devices only (uninitialised memory on a device whose step discards them); only the numeric rules
    read the lanes, lane-wise operations keep them and a `select_n` whose predicate picks it only on known lanes
    gives a known value (`numeric.unpicked_cases`). To every other rule it is the plain `Unknown` it also is
    (`opaque`), with the reason of its first unknown lane."""

    __slots__ = ("values", "known")

    def __init__(self, why: str, loc: Loc, values: Any, known: Any) -> None:
        super().__init__(why, loc)
        self.values, self.known = values, known

    def __repr__(self) -> str:
        return f"SomeLanes({self.why!r} at {self.loc}, known {self.known.tolist()})"


def opaque(x: Any) -> Any:
    """`x`, a `Bounded` or `SomeLanes` value as the plain `Unknown` it is to the rules that do not read bounds
    or lanes."""
    return Unknown(x.why, x.loc) if type(x) is Bounded or type(x) is SomeLanes else x


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
