"""The contents of a kernel's small integer refs, per device: the scalar state control flow reads (ACC-4).

Kernels keep control data in SMEM: scalar-prefetch tables (page tables,
lengths, per-peer counts), a buffer index carried across grid steps, a loop
bound. `ScalarMemory` holds, per device ("lane") and element, the value of
each *tracked* ref and whether it is known, so that a load of a known element
is a known lane array and the `while`/`cond` it decides can be unrolled.

Soundness first (a wrong concrete value would be a wrong program):

* only refs of an integer or boolean dtype with at most `MAX_TABLE_ELEMENTS` elements
  (ACC-31), or of a float dtype with at most `MAX_EVAL_ELEMENTS` (`MAX_FLOAT_ELEMENTS`, and HBM
  inputs, in a lowering that follows float copies: ACC-41, ACC-42), are tracked (`trackable`);
  larger (vector) data stays abstract, and
  a float value is known only where exact operations computed it (ACC-25,
  `float_exact`);
* a store of a known value at known, in-bounds indices updates exactly the
  elements it names; a store of an opaque value makes them unknown; a store
  whose indices (or view) cannot be pinned down makes the whole ref unknown;
* a load is known only if every element it reads is known on every lane that
  executes it; otherwise it is `Unknown`, carrying why the first unknown
  element is unknown (`AbstractInput` when the example arguments were shapes), or, for
  the evaluator's loads, a `SomeLanes` known on the lanes that read only known elements (ACC-60);
* anything else that may write a ref (a DMA into it, a primitive semcheck does
  not know) calls `clobber`.

This module knows nothing about jaxprs or rules (only jax's indexer types): `accesses` and `scalar_state`
call it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from jax._src.pallas.mosaic import core as mosaic_core
from jax._src.state import types as state_types
from jax._src.state.indexing import NDIndexer, Slice

from semcheck.checker.frontend.errors import Unsupported
from semcheck.checker.frontend.float_exact import is_float
from semcheck.checker.frontend.values import (
    MAX_EVAL_ELEMENTS,
    MAX_FLOAT_ELEMENTS,
    MAX_TABLE_ELEMENTS,
    MAX_TRACKED_LANE_ELEMENTS,
    SomeLanes,
    Unknown,
)
from semcheck.model.ops import Loc

# What a kernel is told when a value it branches on comes from arguments given as shapes.
CONCRETE_HINT = ("hint: give the target concrete example arguments (arrays, not jax.ShapeDtypeStruct) "
                 "so that semcheck can follow the kernel's data-dependent control flow and DMA sizes")


class AbstractInput(Unknown):
    """A value read from a launch operand whose contents the example arguments did not carry.

    A subclass of `Unknown`, so every rule treats it as opaque; the evaluator
    turns it into `NeedsConcreteInputs` where control flow or an operand needs it.
    """

    __slots__ = ()


class DivergedValue(Unknown):
    """Float data read, in a lowering of some devices only, from a ref whose contents may differ between
    the devices lowered and the others (`ScalarMemory.subset`): opaque as data, and what needs it refuses
    the subset (`Evaluator.known`), as a load of such an integer ref does at once (ACC-25 follows floats
    without making a kernel that only moves float data refuse a subset)."""

    __slots__ = ()


class CopiedFloat(Unknown):
    """Float data a local copy moved into a ref a lowering that follows float copies would follow (ACC-41): a
    subclass of `Unknown`; where control flow or an operand needs it, the evaluator raises `NeedsFloatCopies`."""

    __slots__ = ()


class NeedsFloatCopies(Unsupported):
    """`Unsupported` because a needed value is float data a local copy moved (`CopiedFloat`): `lower.lower_kernel`
    answers it by lowering the kernel again with those copies followed (ACC-41)."""


class UncomputedFloatInput(Unknown):
    """A float input's contents, in a lowering that follows float copies, where the example arguments' values were
    computed for the other lowerings only (`KernelInputs.floats` False); what needs it raises `NeedsFloatInputs`."""

    __slots__ = ()


class NeedsFloatInputs(Unsupported):
    """`Unsupported` because a needed value is an `UncomputedFloatInput`: `api.lower_target` answers it by computing
    the float inputs' values too (`concrete_inputs.kernel_inputs(floats=True)`) and lowering again (ACC-41)."""


class NeedsConcreteInputs(Unsupported):
    """`Unsupported` because a needed value comes from inputs given as shapes (see `CONCRETE_HINT`).

    `api.lower_target` answers it by building the target for real and lowering again.
    """


def trackable(shape: Sequence[int], dtype: Any, memory_space: str | None, *, hbm: bool = False,
              floats: bool = False) -> bool:
    """Whether a ref's contents are tracked: an integer or boolean table of at most `MAX_TABLE_ELEMENTS`
    (ACC-31), or float data of at most `MAX_EVAL_ELEMENTS` (ACC-25), in a core's own SMEM or VMEM.

    Not memory the cores of a device share (another core may write it at any time): HBM only where the
    caller says (`hbm`: integer inputs a kernel's local copies read, tracked where copies are followed,
    ACC-30). `floats`: in a lowering that follows float copies (ACC-41), float data of at most
    `MAX_FLOAT_ELEMENTS` (ACC-42), and float inputs in HBM where `hbm` says; every other lowering keeps the
    bounds above, so float data it never needs does not make its devices' lanes differ.
    """
    try:
        kind = np.dtype(dtype).kind
    except TypeError:
        return False
    if memory_space not in _CORE_MEMORY and not (hbm and memory_space == "hbm" and (kind in "iub" or floats)):
        return False
    size = math.prod(int(s) for s in shape)
    return (kind in "iub" and size <= MAX_TABLE_ELEMENTS) or (
        is_float(dtype) and size <= (MAX_FLOAT_ELEMENTS if floats else MAX_EVAL_ELEMENTS))


def past_bound(aval: Any) -> str | None:
    """ACC-54: what a load of an integer or boolean ref (its base `aval`) returns when the ref is not tracked for its
    size only (past `MAX_TABLE_ELEMENTS`), naming its shape and the bound; None for any other ref."""
    try:
        kind, shape = np.dtype(aval.dtype).kind, tuple(int(s) for s in aval.shape)
    except (TypeError, AttributeError):
        return None
    size = math.prod(shape)
    if kind not in "iub" or size <= MAX_TABLE_ELEMENTS:
        return None
    return (f"a value loaded from a table of shape {shape} ({size:,} elements), past the {MAX_TABLE_ELEMENTS:,} "
            "a table semcheck follows may hold (specs/deciding/frontend.md ACC-54)")


def _whose(why: str) -> str:
    """How an access names the position it could not compute: "whose index comes from ...", or "at an index
    computed from ..." (ACC-57's reason, which names the index itself)."""
    return f"at {why}" if why.startswith("an index") else f"whose {why}"


# Memory spaces (as `trace.memory_space_name` names them) each core has a copy of.
_CORE_MEMORY = frozenset({"smem", "vmem"})


class _Contents:
    """One tracked ref: values and causes, both (lanes, elements) flat; cause 0 means known."""

    __slots__ = ("shape", "dtype", "values", "cause", "writer", "space", "index")

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype, lanes: int, space: str | None = None) -> None:
        self.shape = shape
        self.dtype = dtype
        self.space = space  # the memory space's name (`trace.memory_space_name`), when the caller knows it
        size = math.prod(shape)
        self.values = np.zeros((lanes, size), dtype=dtype)
        self.cause = np.zeros((lanes, size), dtype=np.int32)
        # ACC-9: per element, the write the value came from (`ScalarMemory.writer_now`); -1: the launch's
        self.writer = np.full((lanes, size), -1, dtype=np.int64)
        # ACC-31: the flat position of each element, made once per ref (read-only): a view's positions are
        # a slice of it, so an access costs what the view names, not the table's size
        self.index = np.arange(size, dtype=np.int64).reshape(shape)
        self.index.flags.writeable = False


class ScalarMemory:
    """Per-lane contents of the tracked refs of one core (see the module docstring)."""

    def __init__(self, lanes: int) -> None:
        self.L = lanes
        self.refs: dict[str, _Contents] = {}  # by buffer label (truthy when anything is tracked)
        self._causes: list[Unknown] = []
        self._cause_ids: dict[tuple[Any, ...], int] = {}
        self._scopes: list[list[str]] = []
        # ACC-43: the run_scoped buffers of the open scopes, by label: (shape, dtype, memory space), tracked from
        # their first use (a load, a store or a copy's end), and forgotten with the scope that allocated them
        self._allocated: dict[str, tuple[tuple[int, ...], Any, str | None]] = {}
        # Labels known not to be tracked (launch operands of other kinds, large or float buffers).
        self.ignored: set[str] = set()
        # ACC-54: refs not tracked because the core's refs over every lane would pass the bound, and why
        self.too_large: dict[str, str] = {}
        # (shape, dtype) of refs a remote DMA may write: never tracked (another device's
        # copy can land at any point of this device's program).
        self.remote_signatures: set[tuple[tuple[int, ...], str]] = set()
        # When only some devices are lowered (`Evaluator.select_devices`): the refs whose contents may
        # differ, known here and unknown on another device, from the other devices' (a store or clobber
        # on some devices only, or at a per-device position); a load from one is refused (`refuse`), as
        # the whole lowering may find it unknown. `divergent` > 0: inside a branch only some devices take.
        self.subset = False
        self.divergent = 0
        self.diverged: set[str] = set()
        self.refuse: Any = None
        # ACC-9: while a write runs, per lane the id of the write (`scalar_state.ValueFacts`); None: not kept
        self.writer_now: np.ndarray | None = None
        # ACC-71: the labels whose contents before any write are uninitialised memory (scratch, run_scoped buffers)
        self.uninitialised: set[str] = set()

    # --- which refs ----------------------------------------------------------------

    def __contains__(self, label: str) -> bool:
        return label in self.refs

    def __bool__(self) -> bool:
        return bool(self.refs)

    def reset(self) -> None:
        """Forget every ref (a new core: its SMEM and VMEM are its own)."""
        self.refs.clear()
        self._scopes.clear()
        self._allocated.clear()

    def define(self, label: str, shape: Sequence[int], dtype: Any, init: np.ndarray | None,
               missing: Unknown, space: str | None = None, *, unknown: np.ndarray | None = None) -> bool:
        """Track `label` (if `trackable` says so) with lane array `init`, or every element `missing`; `unknown`
        (a boolean lane array of `init`'s shape): the elements of `init` that are `missing` nonetheless.

        Returns whether the ref is tracked.
        """
        shape = tuple(int(s) for s in shape)
        dt = np.dtype(dtype)
        if (shape, str(dt)) in self.remote_signatures:
            return False
        size = math.prod(shape)
        held = sum(int(c.values.size) for c in self.refs.values())
        if self.L * size + held > MAX_TRACKED_LANE_ELEMENTS:  # ACC-54: the bound over every lane
            self.too_large[label] = (
                f"a value loaded from a table of shape {shape} ({size:,} elements), which at {self.L:,} devices "
                f"passes the {MAX_TRACKED_LANE_ELEMENTS:,} elements semcheck follows over every device at once "
                "(specs/deciding/frontend.md ACC-54)")
            self.ignored.add(label)
            return False
        c = _Contents(shape, dt, self.L, space)
        if init is not None and type(init) is np.ndarray and init.shape[1:] == shape and init.shape[0] in (1, self.L):
            c.values[:] = np.broadcast_to(init.astype(dt), (self.L, *shape)).reshape(self.L, -1)
            if unknown is not None and unknown.shape == init.shape:
                c.cause[np.broadcast_to(unknown, (self.L, *shape)).reshape(self.L, -1)] = self._cause_id(missing)
            elif unknown is not None:  # a mask of another shape than the values': every element unknown
                c.cause[:] = self._cause_id(missing)
        else:
            c.cause[:] = self._cause_id(missing)
        self.refs[label] = c
        if self._scopes and label not in self._allocated:  # (an allocation is in its own scope's list)
            self._scopes[-1].append(label)
        return True

    def push_scope(self) -> None:
        """Refs defined from here to `pop_scope` die with the scope (a `run_scoped` body)."""
        self._scopes.append([])

    def pop_scope(self) -> None:
        for label in self._scopes.pop():
            self.refs.pop(label, None)
            self._allocated.pop(label, None)

    def allocate(self, label: str, shape: Sequence[int], dtype: Any, space: str | None) -> None:
        """A `run_scoped` buffer of the innermost open scope (ACC-43): tracked from its first use, in whichever
        nested scope that is, until its own scope ends."""
        self._allocated[label] = (tuple(int(s) for s in shape), dtype, space)
        if self._scopes:
            self._scopes[-1].append(label)

    def allocation(self, label: str) -> tuple[tuple[int, ...], Any, str | None] | None:
        """(shape, dtype, memory space) of `label` when it is a `run_scoped` buffer of an open scope."""
        return self._allocated.get(label)

    # --- accesses ----------------------------------------------------------------

    def load(self, label: str, transforms: Sequence[Any], lanes: Sequence[int], out_shape: tuple[int, ...],
             loc: Loc, *, some_lanes: bool = False) -> Any:
        """The value a load through `transforms` reads on `lanes`: a lane array, or `Unknown` (`some_lanes`: a
        `SomeLanes` where the elements read are unknown on some lanes only, for a reason of no subclass)."""
        c = self.refs[label]
        if self.subset and label in self.diverged:
            if is_float(c.dtype):
                return DivergedValue("float data that may differ between the devices lowered and the others", loc)
            self.refuse(loc)
        pos = self._positions(c, transforms, lanes)
        if isinstance(pos, Unknown):
            return type(pos)(f"a load from a ref {_whose(pos.why)}", loc)
        if pos.shape[1:] != out_shape:
            return Unknown("a load whose view semcheck cannot shape", loc)
        rows = np.asarray(lanes, dtype=np.int64)
        flat = pos.reshape(pos.shape[0], -1)
        idx = flat if flat.shape[0] == 1 else flat[rows]
        causes = c.cause[rows[:, None], idx]
        bad = np.flatnonzero(causes.reshape(-1))
        if bad.size:
            why = self._causes[int(causes.reshape(-1)[bad[0]]) - 1]
            if some_lanes and (lanes_out := self._some_lanes(c, flat, rows, causes, out_shape)) is not None:
                return SomeLanes(why.why, why.loc if why.loc.line else loc, *lanes_out)
            return type(why)(why.why, why.loc if why.loc.line else loc)
        if flat.shape[0] == 1:
            out = c.values[:, flat[0]].reshape((self.L, *out_shape))
        else:
            out = np.take_along_axis(c.values, flat, axis=1).reshape((self.L, *out_shape))
        if self.L > 1 and len(rows) < self.L:
            # lanes that do not run the load: any value will do (the evaluator ignores them),
            # a copy of the first running lane's lets uniform results stay uniform
            keep = np.zeros(self.L, dtype=bool)
            keep[rows] = True
            out = np.where(keep.reshape((self.L,) + (1,) * len(out_shape)), out, out[rows[0]][None])
        if out.shape[0] > 1 and not self.subset and bool((out == out[:1]).all()):
            out = out[:1]  # (not for a subset of devices: other devices may read other values)
        return out.copy()

    def _some_lanes(self, c: Any, flat: np.ndarray, rows: np.ndarray, causes: np.ndarray,
                    out_shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray] | None:
        """ACC-60: the values an integer load reads on every lane and which lanes know them, where some lane running
        it reads only known elements and every unknown one read is unknown for a plain reason; else None. A lane
        not running the load is known (the evaluator ignores it); an unknown lane holds a known lane's values."""
        per_lane = causes.reshape(len(rows), -1)
        bad_rows = per_lane.any(axis=1)
        plain = all(type(self._causes[int(k) - 1]) is Unknown for k in np.unique(per_lane[per_lane != 0]))
        if self.subset or is_float(c.dtype) or bad_rows.all() or not plain:
            return None
        full = np.broadcast_to(flat, (self.L, flat.shape[1]))
        out = np.take_along_axis(c.values, full, axis=1).reshape((self.L, *out_shape))
        read = np.zeros(self.L, dtype=bool)
        read[rows[~bad_rows]] = True
        out = np.where(read.reshape((self.L,) + (1,) * len(out_shape)), out, out[int(rows[~bad_rows][0])][None])
        known = np.ones(self.L, dtype=bool)
        known[rows[bad_rows]] = False
        return out.copy(), known

    def store(self, label: str, transforms: Sequence[Any], value: Any, lanes: Sequence[int], loc: Loc,
              *, add: bool = False) -> None:
        """Write `value` (a lane array or `Unknown`) through `transforms` on `lanes` (`add`: `+=`)."""
        c = self.refs[label]
        rows = np.asarray(lanes, dtype=np.int64)
        pos = self._positions(c, transforms, lanes)
        if self.subset and (self.divergent or len(rows) < self.L or type(value) is not np.ndarray
                            or isinstance(pos, Unknown) or pos.shape[0] > 1):
            self.diverged.add(label)
        if isinstance(pos, Unknown):
            self._mark(c, rows, None, type(pos)(f"a store to a ref {_whose(pos.why)}", loc))
            return
        flat = pos.reshape(pos.shape[0], -1)
        idx = np.broadcast_to(flat, (self.L, flat.shape[1]))[rows]
        if type(value) is not np.ndarray:
            why = value if isinstance(value, Unknown) else Unknown("a stored value that is not a number", loc)
            self._mark(c, rows, idx, why)
            return
        view = pos.shape[1:]
        try:
            v = np.broadcast_to(value, (value.shape[0], *view)) if value.ndim - 1 <= len(view) else None
        except ValueError:
            v = None
        if v is None or v.shape[0] not in (1, self.L):
            self._mark(c, rows, idx, Unknown("a store whose value semcheck cannot shape", loc))
            return
        v = np.broadcast_to(v, (self.L, *view)).reshape(self.L, -1)[rows]
        if add:
            old_causes = c.cause[rows[:, None], idx]
            v = (c.values[rows[:, None], idx] + v).astype(c.dtype)
            c.values[rows[:, None], idx] = v
            # an element unknown before stays unknown after `+=`
            c.cause[rows[:, None], idx] = old_causes
            self._wrote(c, rows, idx)
            return
        c.values[rows[:, None], idx] = v.astype(c.dtype)
        c.cause[rows[:, None], idx] = 0
        self._wrote(c, rows, idx)

    def clobber(self, label: str, lanes: Sequence[int], why: Unknown) -> None:
        """Every element of `label` unknown on `lanes` (something wrote it semcheck does not follow)."""
        c = self.refs.get(label)
        if c is not None:
            if self.subset and (self.divergent or len(lanes) < self.L):
                self.diverged.add(label)
            self._mark(c, np.asarray(lanes, dtype=np.int64), None, why)

    # --- helpers --------------------------------------------------------------------

    def _cause_id(self, why: Unknown) -> int:
        key = (type(why), why.why, why.loc)
        k = self._cause_ids.get(key)
        if k is None:
            self._causes.append(why)
            k = self._cause_ids[key] = len(self._causes)
        return k

    def _mark(self, c: _Contents, rows: np.ndarray, idx: np.ndarray | None, why: Unknown) -> None:
        k = self._cause_id(why)
        if idx is None:
            c.cause[rows] = k
        else:
            c.cause[rows[:, None], idx] = k
        self._wrote(c, rows, idx)

    def _wrote(self, c: _Contents, rows: np.ndarray, idx: np.ndarray | None) -> None:
        if self.writer_now is None:
            return
        if idx is None:
            c.writer[rows] = self.writer_now[rows][:, None]
        else:
            c.writer[rows[:, None], idx] = self.writer_now[rows][:, None]

    # --- ACC-9: values a copy moves -----------------------------------------------------

    def elements(self, label: str, transforms: Sequence[Any], lane: int) -> np.ndarray | Unknown:
        """The flat positions of `label` a view names on `lane` (its indices evaluated there)."""
        c = self.refs[label]
        pos = self._positions(c, transforms, [lane])
        if isinstance(pos, Unknown):
            return pos
        return pos[lane if pos.shape[0] > 1 else 0].reshape(-1)

    def writers(self, label: str, lane: int, flat: np.ndarray) -> np.ndarray:
        """The write each element at `flat` of `label` on `lane` holds the value of (-1: the launch's)."""
        return self.refs[label].writer[lane, flat].copy()

    def read_flat(self, label: str, lane: int, flat: np.ndarray, loc: Loc) -> np.ndarray | Unknown:
        """The values at `flat` of `label` on `lane`, or `Unknown` (why the first unknown one is)."""
        c = self.refs[label]
        causes = c.cause[lane, flat]
        bad = np.flatnonzero(causes)
        if bad.size:
            why = self._causes[int(causes[bad[0]]) - 1]
            return type(why)(why.why, why.loc if why.loc.line else loc)
        return c.values[lane, flat].copy()

    def write_flat(self, label: str, lane: int, flat: np.ndarray, value: np.ndarray | Unknown, writer: int) -> None:
        """Elements `flat` of `label` on `lane` take `value` (same length; `Unknown`: unknown), written by
        `writer`: a copy's write half landing on its target lane (ACC-9)."""
        c = self.refs[label]
        if self.subset or self.divergent:
            self.diverged.add(label)
        if isinstance(value, Unknown):
            c.cause[lane, flat] = self._cause_id(value)
        else:
            c.values[lane, flat] = value.astype(c.dtype)
            c.cause[lane, flat] = 0
        c.writer[lane, flat] = writer

    def move_flat(self, src: str, src_lane: int, sflat: np.ndarray, dst: str, dst_lane: int, dflat: np.ndarray,
                  writer: int) -> np.ndarray:
        """A copy's write half, element by element (ACC-43): elements `dflat` of `dst` on `dst_lane` take those at
        `sflat` (same length) of `src` on `src_lane`, each its value or, unknown there, its reason, written by
        `writer`. Returns which of them were known."""
        s, d = self.refs[src], self.refs[dst]
        if self.subset or self.divergent:
            self.diverged.add(dst)
        values, causes = s.values[src_lane, sflat].copy(), s.cause[src_lane, sflat].copy()
        d.values[dst_lane, dflat] = values.astype(d.dtype)
        d.cause[dst_lane, dflat] = causes
        d.writer[dst_lane, dflat] = writer
        return causes == 0

    def _positions(self, c: _Contents, transforms: Sequence[Any], lanes: Sequence[int]) -> Any:
        """Flat element positions a view selects: (1 or L, *view shape), or `Unknown` saying why not."""
        indexers = []
        for t in transforms:
            if t is None or isinstance(t, _IDENTITY):
                continue
            if not isinstance(t, NDIndexer):
                return Unknown(f"view goes through a {type(t).__name__}")
            indexers.append(t)
        base = c.index
        raw = [x for t in indexers for x in _index_leaves(t)]
        leaves = [_leaf_lanes(x) for x in raw]
        for x, lane_x in zip(raw, leaves):
            if lane_x is None:
                if isinstance(x, AbstractInput):
                    return AbstractInput(f"index comes from {x.why}", x.loc)
                if isinstance(x, Unknown):  # (its reason and line: what the index comes from; ACC-41: its mark)
                    return _marked(x)(f"an index computed from {x.why}", x.loc)
                return Unknown("index semcheck cannot compute")
        wide = any(x.shape[0] > 1 for x in leaves)  # type: ignore[union-attr]
        running = [int(x) for x in lanes] if wide else [0]
        if not running:
            return Unknown("view is not accessed on any device")
        found: dict[int, np.ndarray] = {}
        for lane in running:
            pos = base
            for t in indexers:
                pos = _apply(pos, t, lane)
                if isinstance(pos, Unknown):
                    return pos
            found[lane] = pos
        if not wide:
            return found[0][None]
        first = found[running[0]]
        if any(p.shape != first.shape for p in found.values()):
            return Unknown("view's shape differs between devices")
        # lanes that do not run the access have arbitrary indices: they get a running lane's view
        out = [found.get(d, first) for d in range(self.L)]
        return np.stack(out)


def _marked(x: Unknown) -> type[Unknown]:
    """ACC-57: the class of an unknown computed from `x`: `x`'s where it marks what a further lowering computes
    (ACC-41: `CopiedFloat`, `UncomputedFloatInput`; RUN-22: `DivergedValue`), so the value needing it asks for
    that lowering; else the plain `Unknown`."""
    return type(x) if type(x) in (CopiedFloat, UncomputedFloatInput, DivergedValue) else Unknown


def _leaf_lanes(x: Any) -> np.ndarray | None:
    if isinstance(x, (int, np.integer)):
        return np.array([int(x)])
    if type(x) is np.ndarray and x.dtype.kind in "iub":
        return x
    return None


def _index_leaves(t: Any) -> list[Any]:
    out = []
    for idx in t.indices:
        if isinstance(idx, Slice):
            out.append(idx.start)
            out.append(idx.size)
        else:
            out.append(idx)
    return out


def _at(x: Any, lane: int) -> Any:
    if isinstance(x, (int, np.integer)):
        return int(x)
    return x[lane if x.shape[0] > 1 else 0]


def _apply(pos: np.ndarray, t: Any, lane: int) -> Any:
    """`pos[t]` for one lane, with jax's indexer semantics; `Unknown` if not a plain in-bounds view."""
    if len(t.indices) != pos.ndim:
        return Unknown("indexer's rank differs from the view's")
    key: list[Any] = []
    for idx, dim in zip(t.indices, pos.shape):
        if isinstance(idx, Slice):
            start, size, stride = int(_at(idx.start, lane)), int(_at(idx.size, lane)), int(idx.stride)
            if size < 0 or stride < 1 or start < 0 or (size and start + (size - 1) * stride >= dim):
                return Unknown("index is out of bounds")
            key.append(slice(start, start + size * stride, stride))
        else:
            i = _at(idx, lane)
            if np.ndim(i) != 0:
                return Unknown("index is an array (a gather)")
            i = int(i)
            if not 0 <= i < dim:
                return Unknown("index is out of bounds")
            key.append(i)
    return pos[tuple(key)]


# Transforms that change nothing about which elements a view names.
_IDENTITY = (state_types.MemorySpaceCastTransform, mosaic_core.AccessAssumptionTransform)

__all__ = ["AbstractInput", "CONCRETE_HINT", "CopiedFloat", "DivergedValue", "NeedsConcreteInputs", "NeedsFloatCopies",
           "NeedsFloatInputs", "ScalarMemory", "UncomputedFloatInput", "past_bound", "trackable"]
