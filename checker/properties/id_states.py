"""What the id properties see in one state of a run (spec PROP-1, PROP-2, RUN-60).

The id checks (`checker/z3/ids.py`) replay their witnesses to a state these predicates name, and the
explorer's per-state checks (`explored_states`, RUN-60) judge every reached state with the same ones.
"""

from __future__ import annotations

from semcheck.model.errors import Int16Overflow
from semcheck.model.ids import INT16_MAX
from semcheck.model.state import State


def in_both_tables(state: State, cid: int) -> bool:
    """PROP-1: whether the collective id sits in both the fixed-id and the internal table in `state`."""
    return cid in state.tables.fixed and cid in state.tables.internal


def int16_offence(state: State, fine: dict | None = None) -> str | None:
    """PROP-2: an id `state`'s kernel holds that is not the one allocated (a semaphore allocation whose int16
    ids wrap, a buffer id past int16) or the OverflowError of handing one out; None when there is none.
    `fine` keeps the allocations already seen to fit ((core, label) -> allocation), which states share."""
    fine = {} if fine is None else fine
    for (c, label), alloc in state.allocs.items():
        if fine.get((c, label)) is alloc:
            continue
        ids = alloc.ids
        # IDS-1: ids are arange(base, base + n) in int16, so they wrap iff the last one does
        if ids and ids[-1] - ids[0] != len(ids) - 1:
            return f"allocation {label!r} of core {c}: ids wrap past 32767 ({ids[0]}.. -> {min(ids)})"
        fine[(c, label)] = alloc
    for (c, label), (_, i, _, _) in state.buffer_keys.items():
        if i > INT16_MAX:
            return f"buffer {label!r} of core {c} gets id {i}"
    f = state.failure
    if f is not None and isinstance(f.violation, Int16Overflow):
        return f.violation.message
    return None
