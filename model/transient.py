"""A replay's working state: the step relation's rules applied in place (RUN-35).

The step relation (RUN-1) is pure: each rule returns a new `State`, copying the positions and every
map it changes. A replay follows one schedule and keeps no earlier state, so at pod scale that copy
per step made it quadratic in its length. A replay therefore runs the same rules on a *transient*
state (`thaw`): its positions are a list and its maps `TransientMap`s, which the rules' own updates
(`FMap.set`, `FMap.update`, `changed`) change in place and return; `freeze` gives the `State` it
stands for. Nothing but a replay holds a transient state, and nothing keeps one past its next step.

Its sequences that grow along a run (the started copies, the exit warnings, the reads) are
`TransientList`s: a rule's `appended` / `replaced` extend or change them in place, where the step
relation makes a new tuple (a copy's two halves each rewrote the whole tuple of copies: quadratic in
the copies a replay starts, RUN-40).

A transient state's counts are kept by core as well (`TransientCounts.by_core`), so that an exit
check reads the counts of its device's cores rather than every count (SEM-8, `semaphore.nonzero`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from semcheck.model.buffer import BufferStore
from semcheck.model.fmap import FMap
from semcheck.model.semaphore import SemTables
from semcheck.model.state import State


class TransientMap(FMap):
    """An `FMap` whose updates change it in place and return it (a replay's; never hashed)."""

    __slots__ = ("get",)

    def __init__(self, items=None) -> None:
        super().__init__(items)
        # RUN-59: the dict's own `get`, bound once: a replay asks its maps about a million times, and
        # `FMap.get` is a Python call around it (the map's dict is changed in place, never replaced)
        self.get = self._d.get

    def set(self, key, value, *, drop: object = ...) -> TransientMap:
        if drop is not ... and value == drop:
            self._d.pop(key, None)
        else:
            self._d[key] = value
        return self

    def update(self, items) -> TransientMap:
        self._d.update(items)
        return self

    def __hash__(self) -> int:
        raise TypeError("a replay's transient map is not a value")


class TransientCounts(TransientMap):
    """A replay's counts, `(key, core) -> count`, with the counters each core ever had (`by_core`)."""

    __slots__ = ("by_core",)

    def __init__(self, items=None) -> None:
        super().__init__(items)
        self.by_core: dict[int, set] = {}
        for counter in self._d:
            self.by_core.setdefault(counter[1], set()).add(counter)

    def set(self, key, value, *, drop: object = ...) -> TransientCounts:
        if drop is ... or value != drop:
            self.by_core.setdefault(key[1], set()).add(key)
        return super().set(key, value, drop=drop)

    def update(self, items) -> TransientCounts:
        for key in items:
            self.by_core.setdefault(key[1], set()).add(key)
        return super().update(items)


class TransientList(list):
    """A replay's growing sequence (a `State`'s tuple of copies, warnings or reads), changed in place."""

    __slots__ = ()

    def __hash__(self) -> int:
        raise TypeError("a replay's transient list is not a value")


def appended(seq, item):
    """RUN-40: `seq` with `item` at its end: a new tuple, or a replay's `TransientList` extended in place."""
    if type(seq) is TransientList:
        seq.append(item)
        return seq
    return seq + (item,)


def replaced(seq, i: int, item):
    """RUN-40: `seq` with `item` at index `i`: a new tuple, or a replay's `TransientList` changed in place."""
    if type(seq) is TransientList:
        seq[i] = item
        return seq
    out = list(seq)
    out[i] = item
    return tuple(out)


@dataclasses.dataclass(frozen=True, eq=False)
class TransientState(State):
    """A `State` a replay changes in place: `pcs` a list, its maps transient (`thaw`).

    `opened`: the barrier instances (`barrier.instance`) a core has passed in this replay. A
    participant's count of barriers reached only grows along a run, so an instance once open stays
    open (BAR-1): the rest of its participants pass it without asking every participant again.
    """

    opened: set = dataclasses.field(default_factory=set, compare=False)


def changed(state: State, **changes: Any) -> State:
    """`state` with `changes`: a new State (the step relation's rule), or a transient state changed in place."""
    if type(state) is TransientState:
        for name, value in changes.items():
            object.__setattr__(state, name, value)
        return state
    return dataclasses.replace(state, **changes)


def thaw(state: State) -> TransientState:
    """A transient state standing for `state` (which is left as it is)."""
    t, b = state.tables, state.buffers
    return TransientState(
        pcs=list(state.pcs),  # type: ignore[arg-type]
        tables=SemTables(t.internal, t.fixed, TransientMap(t.next_id)),
        counts=TransientCounts(state.counts),
        allocs=TransientMap(state.allocs),
        buffers=BufferStore(TransientMap(b.mem), TransientMap(b.next_id), b.deallocated_bytes, TransientMap(b.shared)),
        buffer_keys=TransientMap(state.buffer_keys),
        scoped=TransientMap(state.scoped),
        dmas=TransientList(state.dmas),
        queues=TransientMap(state.queues),
        looked_up=TransientMap(state.looked_up),
        passed=TransientMap(state.passed),
        reads=TransientList(state.reads),
        warnings=TransientList(state.warnings),
        failures=state.failures,
        signals=state.signals,
    )


def freeze(state: State) -> State:
    """The `State` a transient state stands for (a plain State is returned as it is)."""
    if type(state) is not TransientState:
        return state
    t, b = state.tables, state.buffers
    return State(
        pcs=tuple(state.pcs),
        tables=SemTables(t.internal, t.fixed, FMap(t.next_id)),
        counts=FMap(state.counts),
        allocs=FMap(state.allocs),
        buffers=BufferStore(FMap(b.mem), FMap(b.next_id), b.deallocated_bytes, FMap(b.shared)),
        buffer_keys=FMap(state.buffer_keys),
        scoped=FMap(state.scoped),
        dmas=tuple(state.dmas),
        queues=FMap(state.queues),
        looked_up=FMap(state.looked_up),
        passed=FMap(state.passed),
        reads=tuple(state.reads),
        warnings=tuple(state.warnings),
        failures=state.failures,
        signals=state.signals,
    )
