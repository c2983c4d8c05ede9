"""ACC-71: a lowering in which some followed reads take given values (a racy read's case).

Where a followed read races a write of its element, the value it reads in every run of an interpreter mode may be
another than the one the lowering took (RUN-61: the write that lands last before it is fixed by the mode). The
checker then lowers the kernel again with that value given to the read: `KernelInputs.pins` maps the read's lane and
position in the lane's body to its line, its values (per element, in the read's order) and which of them are the
contents before any write (`initial`), and, for one case of ACC-77's lowering by cases, a fourth item, True (the
read's `pinned` then says so too: the value is one of several a run may read, each decided). Those are the interpreter's fill of uninitialised memory
(`get_uninitialized_value` of jax's interpreter: an integer type's maximum, True, NaN; 0 with
`uninitialized_memory="zero"`), given only to a scratch or `run_scoped` buffer (elsewhere the lowering is refused,
`Unsupported`, and the case stays unknown).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from semcheck.checker.frontend.errors import Unsupported


def fill_value(dtype: Any, uninitialized: str) -> Any:
    """What jax's interpreter puts in memory it allocates uninitialised (`uninitialized_memory`)."""
    dt = np.dtype(dtype)
    if uninitialized == "zero":
        return dt.type(0)
    if dt.kind == "b":
        return True
    if dt.kind in "iu":
        return np.iinfo(dt).max
    return dt.type(np.nan)


def pinned_values(pins: Any, lane: int, pos: int, loc: Any, flat: np.ndarray, memory: Any, label: str,
                  uninitialized: str) -> tuple[np.ndarray, np.ndarray] | None:
    """The values the pin at (`lane`, `pos`) gives the read of elements `flat` of `label`, which are the initial
    contents, and True where it is one case of ACC-77's; None when no pin is there."""
    got = pins.get((lane, pos, loc.file, loc.line)) or pins.get((lane, pos))  # (ACC-80 names the line too)
    if got is None:
        return None
    where, values, initial = got[:3]
    if (where.file, where.line) != (loc.file, loc.line) or len(values) != flat.size:
        return None  # an earlier lowering's read, which this one reaches elsewhere: the checker asks again (ACC-71)
    dtype = memory.refs[label].dtype
    out = np.asarray(values).astype(dtype, copy=True)
    initial = np.asarray(initial, dtype=bool)
    if initial.any():
        if label not in memory.uninitialised:
            raise Unsupported("racy read", f"the read at {loc} may read its buffer's contents before any write, "
                              "which semcheck knows only of uninitialised memory (ACC-71)", loc)
        out[initial] = fill_value(dtype, uninitialized)
    return (out, initial, True) if len(got) > 3 and got[3] else (out, initial)


def with_pins(out: Any, pinned: dict[int, np.ndarray], lanes: list[int], num_lanes: int, shape: tuple) -> Any:
    """The load's lane array `out` with each pinned lane's value replaced; `out` unchanged where a running lane has
    no pin and `out` is not a lane array (its value stays unknown)."""
    if not pinned:
        return out
    if type(out) is np.ndarray:
        arr = np.broadcast_to(out, (num_lanes, *shape)).copy()
    elif all(lane in pinned for lane in lanes):
        arr = np.zeros((num_lanes, *shape), dtype=next(iter(pinned.values())).dtype)
        arr[:] = next(iter(pinned.values())).reshape(shape)  # (lanes that do not run the load: any value)
    else:
        return out
    for lane, v in pinned.items():
        arr[lane] = v.reshape(shape)
    return arr


__all__ = ["fill_value", "pinned_values", "with_pins"]
