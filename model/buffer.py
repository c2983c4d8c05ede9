"""Buffers of the shared-memory manager (rules BUF-1 .. BUF-7; spec: specs/semantics/buffers.md).

Pure functions over an immutable `BufferStore`. A buffer is named by a *key*
`(memory_space, buffer_id, device, local_core)`. These rules describe what
the manager's own methods do: hand out ids, allocate unless the key exists,
count references, read, write and swap with its bounds rules. How the
interpreter uses them for a kernel's buffers (BUF-8 .. BUF-12, including the
id and key each core's buffer gets) is `semcheck.model.kernel_buffer`; the
errors are in `semcheck.model.errors`.

Contents are numpy arrays held read-only inside frozen dataclasses; every
update builds a new array, so old states stay valid and states compare by
value (`Buffer.__eq__` compares contents, NaN equal to NaN).

Ranges are tuples of `int` and `slice` with integer start and stop (step may
be None), as the interpreter produces them; see BUF-4.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from semcheck.model.errors import (
    LogicalShapeTooBig,
    ModelBug,
    Raised,
    RangeOutOfBounds,
    UnknownBuffer,
    Violation,
    zip_mismatch,
)
from semcheck.model.fmap import FMap
from semcheck.model.ids import FIRST_BUFFER_ID

if TYPE_CHECKING:  # annotations only: numpy is imported where it is used
    import numpy as np

BufferKey = tuple  # (memory_space: str, buffer_id: int, device: int, local_core: int)
Thread = tuple  # (device, local_core)
Range = tuple  # of int | slice

SHARED_SPACES = ("any", "hbm")
"""BUF-8: memory spaces whose buffers one device's cores share (see `kernel_buffer`)."""

GC_THRESHOLD = 100_000_000
"""BUF-3: freed bytes after which the manager resets its counter (and collects garbage)."""

DTYPE_MISMATCH = Raised("AssertionError", "")
"""BUF-5.1: the manager's dtype assertion."""


# --- values ------------------------------------------------------------------------


def frozen_array(value: np.ndarray) -> np.ndarray:
    """A read-only copy of `value`."""
    import numpy as np  # imported on first use: semcheck's command-line process never needs it
    out = np.array(value, copy=True)
    out.setflags(write=False)
    return out


def same_array(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    """Equal dtype, shape and elements (NaN equals NaN); None equals only None."""
    import numpy as np
    if a is None or b is None:
        return a is None and b is None
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    nan_ok = a.dtype.kind in "fc"
    return bool(np.array_equal(a, b, equal_nan=nan_ok))


@dataclasses.dataclass(frozen=True, eq=False)
class Buffer:
    """One allocation: its (possibly padded) content, reference count and logical shape."""

    content: np.ndarray
    ref_count: int
    logical_shape: tuple[int, ...]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.content.shape)

    @property
    def dtype(self) -> np.dtype:
        return self.content.dtype

    @property
    def size(self) -> int:
        """Bytes of the content, padding included (what deallocation counts, BUF-3)."""
        return int(self.content.itemsize * self.content.size)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Buffer):
            return NotImplemented
        return (
            self.ref_count == other.ref_count
            and self.logical_shape == other.logical_shape
            and same_array(self.content, other.content)
        )

    def __hash__(self) -> int:
        return hash((self.content.dtype.str, self.shape, self.ref_count, self.logical_shape))


@dataclasses.dataclass(frozen=True)
class BufferStore:
    """The manager's buffer state: allocations by key, id counters, freed-byte counter."""

    mem: FMap = FMap()  # FMap[BufferKey, Buffer]
    next_id: FMap = FMap()  # FMap[Thread, int]; absent means FIRST_BUFFER_ID
    deallocated_bytes: int = 0
    shared: FMap = FMap()  # FMap[BufferKey, frozenset[BufferKey]]: keys over one content array (BUF-8)


@dataclasses.dataclass(frozen=True, eq=False)
class Access:
    """What get/store/swap return besides the data: the buffer's logical shape and dtype."""

    value: np.ndarray | None  # get/swap: the data read (None: refused); store: unused
    in_bounds: bool  # store: whether the write was accepted; get/swap: value is not None
    shape: tuple[int, ...]  # the buffer's *logical* shape
    dtype: np.dtype

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Access):
            return NotImplemented
        return (
            self.in_bounds == other.in_bounds
            and self.shape == other.shape
            and self.dtype == other.dtype
            and same_array(self.value, other.value)
        )

    __hash__ = None  # type: ignore[assignment]


# --- BUF-1: ids ---------------------------------------------------------------------


def handout(next_id: Mapping[Thread, int], threads: Iterable[Thread]) -> dict[Thread, int]:
    """BUF-1, the decision: the id each thread gets next, its own counter's (from 100).

    Each (device, local core) pair counts on its own, so two cores of a device
    get the same ids only if they allocate in lockstep.
    """
    return {t: next_id.get(t, FIRST_BUFFER_ID) for t in threads}


def handout_one(next_id: Mapping[Thread, int], thread: Thread) -> int:
    """BUF-1 for one thread: `handout(next_id, (thread,))[thread]`, without the mapping (RUN-58)."""
    return next_id.get(thread, FIRST_BUFFER_ID)


def advanced(ids: Mapping[Thread, int]) -> dict[Thread, int]:
    """BUF-1, the counters: each thread's next id once it got the one `handout` gave: the one after."""
    return {t: i + 1 for t, i in ids.items()}


def take(store: BufferStore, ids: Mapping[Thread, int]) -> BufferStore:
    """BUF-1, the effect: each thread's counter moves past the id it got; ids are never reused."""
    if not ids:
        return store
    next_id = store.next_id.update(advanced(ids))
    if next_id is store.next_id:  # a replay's counters, moved in place (RUN-35): the store is itself already
        return store
    return dataclasses.replace(store, next_id=next_id)


def next_buffer_id(store: BufferStore, thread: Thread) -> tuple[BufferStore, int]:
    """BUF-1 `get_next_buffer_id`: the next id of `thread`'s own counter (from 100, +1 per call)."""
    ids = handout(store.next_id, (thread,))
    return take(store, ids), ids[thread]


def _put(store: BufferStore, key: BufferKey, buf: Buffer) -> BufferStore:
    """Store `buf` under `key`; keys sharing its content array (BUF-8) see the new content."""
    mem = store.mem.set(key, buf)
    for other in store.shared.get(key, frozenset()):
        if other != key and other in mem:
            o = mem[other]
            mem = mem.set(other, Buffer(buf.content, o.ref_count, o.logical_shape))
    return dataclasses.replace(store, mem=mem)


def _unshare(store: BufferStore, key: BufferKey) -> FMap:
    """The sharing map without `key` (its buffer is gone)."""
    group = store.shared.get(key)
    if group is None:
        return store.shared
    d = dict(store.shared)
    del d[key]
    for other in group - {key}:
        if other in d:
            d[other] = d[other] - {key}
    return FMap({k: v for k, v in d.items() if len(v) > 1})


# --- BUF-2 / BUF-3: allocation and reference counts ---------------------------------


def make_buffer(value: np.ndarray, ref_count: int, logical_shape: Sequence[int] | None) -> Buffer | Violation:
    """BUF-2 construction: check the logical shape against the content, dimension by dimension.

    Dimensions are compared in order; the first logical dimension larger than
    the content's is an error, and only after every common dimension passed is
    a rank difference reported (as the length check of a strict zip).
    """
    import numpy as np
    content = np.asarray(value)
    logical = tuple(content.shape) if logical_shape is None else tuple(logical_shape)
    for dim, ldim in zip(content.shape, logical):
        if ldim > dim:
            return LogicalShapeTooBig(logical, tuple(content.shape))
    if len(logical) != content.ndim:
        return zip_mismatch(content.ndim, len(logical))
    return Buffer(frozen_array(content), ref_count, logical)


def allocate(
    store: BufferStore,
    key: BufferKey,
    ref_count: int,
    value: np.ndarray,
    logical_shape: Sequence[int] | None = None,
) -> BufferStore | Violation:
    """BUF-2: allocate `key` unless it exists.

    An existing key is left exactly as it is: the new value, reference count
    and logical shape are ignored, and no error is raised. Nothing is checked
    about a key that exists.
    """
    if key in store.mem:
        return store
    buf = make_buffer(value, ref_count, logical_shape)
    if isinstance(buf, Violation):
        return buf
    return dataclasses.replace(store, mem=store.mem.set(key, buf))


def deallocate(store: BufferStore, key: BufferKey) -> BufferStore | Violation:
    """BUF-3: drop one reference; at zero the buffer goes and its bytes are counted as freed.

    The freed-byte counter restarts from zero once it exceeds GC_THRESHOLD.
    """
    buf = store.mem.get(key)
    if buf is None:
        return UnknownBuffer(key)
    if buf.ref_count <= 0:  # pragma: no cover - a buffer is removed when it reaches zero
        raise ModelBug(f"buffer {key} has reference count {buf.ref_count}")
    if buf.ref_count > 1:
        kept = Buffer(buf.content, buf.ref_count - 1, buf.logical_shape)
        return dataclasses.replace(store, mem=store.mem.set(key, kept))
    mem = dict(store.mem)
    del mem[key]
    freed = store.deallocated_bytes + buf.size
    if freed > GC_THRESHOLD:
        freed = 0
    return dataclasses.replace(store, mem=FMap(mem), deallocated_bytes=freed, shared=_unshare(store, key))


# --- BUF-4: ranges and reads ----------------------------------------------------------


def _check_range(rnge: Range) -> None:
    for r in rnge:
        if isinstance(r, slice):
            if not isinstance(r.start, int) or not isinstance(r.stop, int):
                raise ModelBug(f"slice {r} needs integer start and stop")
            if r.step is not None and (not isinstance(r.step, int) or r.step == 0):
                raise ModelBug(f"slice {r} needs a non-zero integer step or None")
        elif not isinstance(r, int):
            raise ModelBug(f"range element {r!r} is neither int nor slice")


def normalize(rnge: Range, logical_shape: tuple[int, ...]) -> Range:
    """BUF-4a: a range shorter than the buffer's rank covers the rest *logically*.

    Missing trailing dimensions become `slice(0, logical_dim)`, whatever the
    padded content shape is.
    """
    _check_range(rnge)
    return tuple(rnge) + tuple(slice(0, d) for d in logical_shape[len(rnge):])


def clip(rnge: Range, shape: tuple[int, ...]) -> Range | None | Raised:
    """BUF-4b: clip a range to `shape`; None when it misses the shape entirely.

    Dimension by dimension: an index at or past the end, or a slice *starting*
    at or past the end (even an empty one), misses; a slice's stop is cut to
    the end. Negative indices and starts are not checked (numpy then counts
    them from the end). A range longer than `shape` is an error, reported only
    if no earlier dimension missed.
    """
    out: list = []
    for r, dim in zip(rnge, shape):
        if isinstance(r, slice):
            if r.start >= dim:
                return None
            out.append(slice(r.start, min(r.stop, dim), r.step))
        else:
            if r >= dim:
                return None
            out.append(r)
    if len(rnge) != len(shape):
        return zip_mismatch(len(rnge), len(shape))
    return tuple(out)


def read(buf: Buffer, rnge: Range) -> np.ndarray | None | Raised:
    """BUF-4: the part of the *padded* content `rnge` selects, or None when it is wholly outside.

    Reads are bounded by the content (padding included), not the logical
    shape; a read that is only partly outside returns the part inside. An
    IndexError from numpy itself (a negative index past the start) also
    reads as a miss.
    """
    import numpy as np
    clipped = clip(normalize(rnge, buf.logical_shape), buf.shape)
    if clipped is None or isinstance(clipped, Raised):
        return clipped
    try:
        return np.array(buf.content[clipped], copy=True)
    except IndexError:  # numpy refused the (negative) index: read as a miss too
        return None


def get(store: BufferStore, key: BufferKey, rnge: Range) -> Access | Violation:
    """BUF-4 get: read `rnge` of `key`; value None when the range misses the buffer."""
    buf = store.mem.get(key)
    if buf is None:
        return UnknownBuffer(key)
    value = read(buf, rnge)
    if isinstance(value, Raised):
        return value
    return Access(value, value is not None, buf.logical_shape, buf.dtype)


# --- BUF-5: writes ---------------------------------------------------------------------


def out_of_bounds(rnge: Range, shape: tuple[int, ...]) -> bool | Raised:
    """BUF-5a: is any element `rnge` selects outside `shape`?

    An index is outside at or past the end. A slice without a step is outside
    when its stop passes the end; a slice with a step is outside when its last
    selected element is at or past the end (so an empty slice never is).
    Negative values are rejected by an assertion. A range longer than `shape`
    is an error, reported only if no earlier dimension was outside.
    """
    for dim, r in zip(shape, rnge):
        if isinstance(r, slice):
            if r.start < 0 or r.stop < 0:
                return Raised("AssertionError", "")
            if r.step is None:
                if r.stop > dim:
                    return True
            else:
                if r.step < 0:
                    return Raised("AssertionError", "")
                n = (r.stop - r.start + r.step - 1) // r.step
                if n > 0 and r.start + (n - 1) * r.step >= dim:
                    return True
        else:
            if r < 0:
                return Raised("AssertionError", "")
            if r >= dim:
                return True
    if len(rnge) != len(shape):
        return zip_mismatch(len(shape), len(rnge))
    return False


def write_logical(buf: Buffer, rnge: Range, value: np.ndarray) -> Buffer | Raised:
    """BUF-5b: write the part of `rnge` inside the *logical* shape; the rest is dropped.

    `rnge` must already be normalized. The range is clipped to the logical
    shape (BUF-4b); when it misses, nothing is written. Otherwise the leading
    part of `value` of the clipped target's shape is written there. numpy's
    errors for a value of the wrong rank or shape escape as they are.
    """
    import numpy as np
    clipped = clip(rnge, buf.logical_shape)
    if clipped is None:
        return buf
    if isinstance(clipped, Raised):
        return clipped
    content = np.array(buf.content, copy=True)
    try:
        target_shape = content[clipped].shape
        content[clipped] = np.asarray(value)[tuple(slice(0, s) for s in target_shape)]
    except (IndexError, ValueError) as e:
        return Raised(type(e).__name__, str(e))
    return Buffer(frozen_array(content), buf.ref_count, buf.logical_shape)


def _write_checked(buf: Buffer, rnge: Range, value: np.ndarray) -> Buffer | RangeOutOfBounds | Raised:
    """BUF-5: the manager's bounds-checked write: refuse any range partly outside the padded shape."""
    full = normalize(rnge, buf.logical_shape)
    oob = out_of_bounds(full, buf.shape)
    if isinstance(oob, Raised):
        return oob
    if oob:
        return RangeOutOfBounds(full, buf.shape)
    return write_logical(buf, full, value)


def store_(store: BufferStore, key: BufferKey, rnge: Range, value: np.ndarray) -> tuple[BufferStore, Access] | Violation:
    """BUF-5 store: write `value` at `rnge` of `key`; in_bounds False when refused.

    The value's dtype must be the buffer's (an assertion). A range partly
    outside the *padded* shape is refused whole (in_bounds False, nothing
    written). An accepted write lands only inside the *logical* shape: what
    falls in the padding is silently dropped, and in_bounds is still True.
    An IndexError while writing (e.g. a value of too low a rank) also reads
    as in_bounds False.
    """
    import numpy as np
    buf = store.mem.get(key)
    if buf is None:
        return UnknownBuffer(key)
    value = np.asarray(value)
    if value.dtype != buf.dtype:
        return DTYPE_MISMATCH
    new = _write_checked(buf, rnge, value)
    if isinstance(new, RangeOutOfBounds) or (isinstance(new, Raised) and new.kind == "IndexError"):
        return store, Access(None, False, buf.logical_shape, buf.dtype)
    if isinstance(new, Raised):
        return new
    return _put(store, key, new), Access(None, True, buf.logical_shape, buf.dtype)


# --- BUF-6 / BUF-7: swaps ----------------------------------------------------------------


def swap(
    store: BufferStore,
    key: BufferKey,
    rnge: Range,
    value: np.ndarray,
    mask: np.ndarray | None = None,
) -> tuple[BufferStore, Access] | Violation:
    """BUF-6 (unmasked) and BUF-7 (masked) swap: return the old data, write the new.

    Both first read as BUF-4 (value None and nothing written when the range
    misses the buffer).

    BUF-6, no mask: when the data read (clipped to the padded shape) has a
    different shape from `value`, the swap is refused (None, nothing written).
    Otherwise the value is written with the bounds-checked write of BUF-5,
    whose refusal here is *not* caught: a range partly outside the padded
    shape whose clipped read happens to have the value's shape raises
    IndexError.

    BUF-7, with a mask (same shape as `value`): the manager decides which
    mask positions are in bounds by cutting along the *first* axis only, at
    every extent of the data read: position p counts as in bounds iff
    p[0] < min(extents of the data read). Any masked-on position it counts
    as out of bounds refuses the swap (None). Otherwise, over the part of
    the value covered by the data read, masked-on positions take the new
    value and the result reports the old data there; elsewhere the buffer
    keeps its data and the result reports `value`. The write lands in the
    logical shape only (BUF-5b), without the padded bounds check.
    """
    import numpy as np
    buf = store.mem.get(key)
    if buf is None:
        return UnknownBuffer(key)
    value = np.asarray(value)
    if value.dtype != buf.dtype:
        return DTYPE_MISMATCH
    old = read(buf, rnge)
    if isinstance(old, Raised):
        return old
    refused = (store, Access(None, False, buf.logical_shape, buf.dtype))
    if old is None:
        return refused
    if mask is None:
        if old.shape != value.shape:
            return refused
        new = _write_checked(buf, rnge, value)
        if isinstance(new, Violation):
            return new
        return _put(store, key, new), Access(old, True, buf.logical_shape, buf.dtype)
    mask = np.asarray(mask, dtype=bool)
    if mask.shape != value.shape:
        raise ModelBug(f"mask shape {mask.shape} differs from value shape {value.shape}")
    counted_in = np.ones(mask.shape, dtype=bool)
    covered = tuple(slice(0, n) for n in old.shape)
    try:
        for extent in old.shape:  # each extent cuts the *first* axis
            counted_in[extent:] = False
        if np.any(mask & ~counted_in):
            return refused
        sub_mask, sub_value = mask[covered], value[covered]
        result = np.array(value, copy=True)
        result[covered] = np.where(sub_mask, old, sub_value)
        written = np.where(sub_mask, sub_value, old)
    except (IndexError, ValueError) as e:
        return Raised(type(e).__name__, str(e))
    new = write_logical(buf, normalize(rnge, buf.logical_shape), written)
    if isinstance(new, Violation):
        return new
    return _put(store, key, new), Access(result, True, buf.logical_shape, buf.dtype)
