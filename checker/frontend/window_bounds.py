"""Windows jax's TPU interpreter refuses (ACC-10, ERR-20; divergence D33).

The interpreter's load, store and copy callbacks turn a view's indexers into one range of the
buffer (`to_range`: each `Slice(start, size, stride)` becomes `slice(start, start + size * stride,
stride)`, an integer index stays an index, and a later indexer is read in the coordinates of the
earlier one's result) and hand it to the manager: a read that does not return BUF-10a's shape
raises `IndexError`, a copy's write with an element past an end raises `ValueError`, and a kernel
store, which jax binds as a swap, raises `ValueError` when its read would (BUF-10 .. BUF-12, whose
shape-only forms are `model.kernel_buffer.read_refused` / `write_refused`). Nothing checks a start
that is data while the kernel is traced, so a window such as `pl.ds(n, 0)` with `n` a dimension's
size reaches the callback and is refused there on every run.

`interpreter_range` is that range for one lane's view, or None when it is not predicted here (a
transform that is not an indexer, an array index, a value not known at lowering time); `window_error`
is the failure the lowered operation carries (`Access.view_error`, `DmaStart.view_error`, as ERR-9's
views do). A negative index or start reaches the manager as it is: its read is numpy's, counting from
the end (an index before the start, or a slice `[-1, 0)` that selects nothing, is refused), and its
write, a copy's destination or a store's (after its read), fails the manager's assertion of
non-negative ranges (`AssertionError`, no message).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from semcheck.checker.frontend.region_transforms import jax_types, scalar_index, static_int
from semcheck.checker.frontend.scalar_memory import CONCRETE_HINT, AbstractInput, NeedsConcreteInputs
from semcheck.model.errors import Raised, WindowOutOfBounds
from semcheck.model.kernel_buffer import read_refused, write_refused
from semcheck.model.ops import Loc

Range = tuple[Any, ...]


def _one(x: Any) -> int | None:
    v = scalar_index(x)
    if type(v) is str or v.shape != (1,):
        return None
    return int(v[0])


def _compose(outer: Range, inner: Range) -> Range:
    """A range read in the coordinates of `outer`'s result, as one range of the buffer: an index of
    `outer` keeps its dimension out of the result; each slice of it takes the next entry of `inner`."""
    out: list[Any] = []
    j = 0
    for r in outer:
        if type(r) is int or j >= len(inner):
            out.append(r)
            continue
        e = inner[j]
        j += 1
        if type(e) is int:
            out.append(r.start + e * r.step)
        else:
            out.append(slice(r.start + e.start * r.step, r.start + e.stop * r.step, r.step * e.step))
    out.extend(inner[j:])
    return tuple(out)


def interpreter_range(chain: Sequence[Any]) -> Range | None:
    """The interpreter's range of one lane's view `chain`, or None where it is not predicted (module
    docstring)."""
    J = jax_types()
    rng: Range = ()
    for t in chain:
        if not isinstance(t, J.NDIndexer) or tuple(t.int_indexer_shape):
            return None
        entries: list[Any] = []
        for idx in t.indices:
            if isinstance(idx, J.Slice):
                start, size = _one(idx.start), static_int(idx.size)
                stride = idx.stride if isinstance(idx.stride, int) else None
                if start is None or size is None or size < 0 or stride is None or stride < 1:
                    return None
                entries.append(slice(start, start + size * stride, stride))
            else:
                v = _one(idx)
                if v is None:
                    return None
                entries.append(v)
        rng = _compose(rng, tuple(entries))
    return rng


def _lane_values(x: Any, lanes: int) -> np.ndarray | None:
    """`x` as every lane reads it (`lane_chain`'s cut, then `_one`): an int64 array of length 1 (one value for
    every lane) or `lanes`, or None where a lane's value is not a plain integer (then every lane is asked alone)."""
    if isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_)):
        return np.array([int(x)], dtype=np.int64)
    if type(x) is np.ndarray and x.dtype.kind in "iu" and (x.ndim == 0 or (x.ndim == 1 and x.shape[0] in (1, lanes))):
        return x.reshape(-1).astype(np.int64, copy=False)
    return None


def lanes_in_bounds(chain: Sequence[Any], shape: tuple[int, ...], lanes: int) -> np.ndarray | None:
    """Per lane of a batched view `chain` (as `lane_chain` cuts it), True where the interpreter's range of that
    lane (`interpreter_range`) is predicted and lies inside a buffer of `shape`: every index in `[0, dim)`,
    every slice `[start, stop)` with `0 <= start < stop <= dim` and a whole number of steps, no more
    dimensions than the buffer. Such a window is refused neither read, nor written, nor swapped
    (`window_error` is None), so only the other lanes need asking one by one. None: no lane is known here.
    Computed for every lane at once (ERR-20's cost at pod scale: one copy per grid step)."""
    J = jax_types()
    rng: list[tuple] = []  # per dimension: ("i", values) or ("s", starts, stops, step)
    ok = np.ones(lanes, dtype=bool)  # a negative size is not predicted (`interpreter_range`): not known here
    for t in chain:
        if not isinstance(t, J.NDIndexer) or tuple(t.int_indexer_shape):
            return None
        entries: list[tuple] = []
        for idx in t.indices:
            if isinstance(idx, J.Slice):
                start, size = _lane_values(idx.start, lanes), _lane_values(idx.size, lanes)
                if start is None or size is None or type(idx.stride) is not int or idx.stride < 1:
                    return None
                ok &= size >= 0  # a negative start is asked of the composed range below
                entries.append(("s", start, start + size * idx.stride, idx.stride))
            else:
                v = _lane_values(idx, lanes)
                if v is None:
                    return None
                entries.append(("i", v))
        out, j = [], 0
        for r in rng:  # `_compose`, on every lane's values at once
            if r[0] == "i" or j >= len(entries):
                out.append(r)
                continue
            e, j = entries[j], j + 1
            if e[0] == "i":
                out.append(("i", r[1] + e[1] * r[3]))
            else:
                out.append(("s", r[1] + e[1] * r[3], r[1] + e[2] * r[3], r[3] * e[3]))
        rng = out + entries[j:]
    if len(rng) > len(shape):
        return None
    for r, dim in zip(rng, shape):
        if r[0] == "i":
            ok &= (r[1] >= 0) & (r[1] < dim)
        else:
            start, stop, step = r[1], r[2], r[3]
            ok &= (start >= 0) & (start < stop) & (stop <= dim) & ((stop - start) % step == 0)
    return ok


def need_values(leaves: Sequence[Any], primitive: str, what: str, loc: Loc) -> None:
    """ACC-10 with ACC-4: a window whose index is read from arguments given as shapes (or not yet followed) is
    decided on the example's values: `NeedsConcreteInputs`, which `api.lower_target` answers by building the
    target for real (and which is unknown, with the hint, when the arguments are shapes)."""
    for v in leaves:
        if isinstance(v, AbstractInput):
            src = f"{v.why}" + (f" at {v.loc}" if getattr(v.loc, "line", 0) else "")
            raise NeedsConcreteInputs(primitive, f"whether jax's interpreter accepts the window of {what} depends "
                                      f"on {src} (ACC-10); {CONCRETE_HINT}", loc)


def predicted(params: Any, kind: str) -> bool:
    """Whether the interpreter's settings are the ones ACC-10 predicts: reads raise (the default
    `out_of_bounds_reads="raise"`; a swap reads first) and buffers are not padded (the default
    `buffer_bounds="logical"`)."""
    if kind != "write" and getattr(params, "out_of_bounds_reads", "raise") != "raise":
        return False
    return getattr(params, "buffer_bounds", "logical") == "logical"


def window_error(buffer: str, shape: tuple[int, ...], chain: Sequence[Any], kind: str, access: str,
                 loc: Loc) -> WindowOutOfBounds | None:
    """ERR-20: what the interpreter raises when it reads, writes or swaps (`kind`) the window `chain` of a
    buffer of `shape`, or None (in bounds, or not predicted). A swap of a value of the view's shape is
    refused exactly when the read is (BUF-12: the value must have the shape read, and a window read
    whole is stored whole)."""
    rng = interpreter_range(chain)
    if rng is None or len(rng) > len(shape):
        return None
    refused = write_refused(rng, shape) if kind == "write" else read_refused(rng, shape)
    where = f"{loc.file}:{loc.line}" if loc.line else ""
    if kind == "swap" and refused is False and _negative(rng):
        refused = write_refused(rng, shape)  # the read passed: the store's write asserts (module docstring)
    if isinstance(refused, Raised) and refused.python_type == "AssertionError" and _negative(rng):
        return WindowOutOfBounds(access, kind, buffer, rng, tuple(shape), where, asserted=True)
    if refused is not True:
        return None  # in bounds, or an assertion of the manager's that is not predicted here
    return WindowOutOfBounds(access, kind, buffer, rng, tuple(shape), where)


def window_predicted(chain: Sequence[Any], shape: tuple[int, ...]) -> bool:
    """ACC-10: whether `window_error` predicts the interpreter on this lane's view (a chain of indexers whose
    values are known); where it does not, a run of the interpreter may raise there, unseen (ERR-32)."""
    rng = interpreter_range(chain)
    return rng is not None and len(rng) <= len(shape)


def unpredicted_note(what: str, loc: Loc) -> str:
    """ERR-32's words for the first access whose window is not predicted."""
    where = f" at {loc.file}:{loc.line}" if getattr(loc, "line", 0) else ""
    return (f"whether jax's interpreter accepts the window of {what}{where} is not predicted (its view is not a "
            "chain of indexers semcheck follows, or an index is a value it does not know), and a run the interpreter "
            "refuses there raises (specs/semantics/accesses.md ACC-10, specs/deciding/failing.md ERR-32)")


def past_end_note(err: Any, loc: Loc) -> str:
    """ERR-62's words for the first load or store whose window its buffer does not hold (ERR-20's `err`)."""
    where = f" at {loc.file}:{loc.line}" if getattr(loc, "line", 0) else ""
    return (f"the {err.access}{where} indexes outside its buffer in some run ({err.message or err.python_type}); what "
            "a TPU does there is not documented (a bounds check that stops the kernel, or memory the ref does not "
            "own), so no verdict under hardware is argued (specs/deciding/failing.md ERR-62)")


def _negative(rng: Range) -> bool:
    """Whether an index, start or stop of the interpreter's range is negative."""
    return any(r < 0 if type(r) is int else (r.start < 0 or r.stop < 0) for r in rng)


__all__ = ["interpreter_range", "lanes_in_bounds", "need_values", "past_end_note", "predicted", "unpredicted_note", "window_error",
           "window_predicted"]
