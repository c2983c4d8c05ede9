"""Buffers of the shared-memory manager (rules BUF-1 .. BUF-12; spec: specs/buffers.md).

Pure functions over an immutable `BufferStore`. A buffer is named by a *key*
`(memory_space, buffer_id, device, local_core)`. The manager-level rules
(BUF-1 .. BUF-7) describe what the manager's own methods do: hand out ids,
allocate unless the key exists, count references, read, write and swap with
its bounds rules. The interpreter-level rules (BUF-8 .. BUF-12) describe how
the interpreter uses those methods: which keys and reference counts a kernel
allocation creates, how HBM buffers are shared by a device's cores, and which
errors a kernel access raises.

Contents are numpy arrays held read-only inside frozen dataclasses; every
update builds a new array, so old states stay valid and states compare by
value (`Buffer.__eq__` compares contents, NaN equal to NaN).

Ranges are tuples of `int` and `slice` with integer start and stop (step may
be None), as the interpreter produces them; see BUF-4.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

import numpy as np

from semcheck.model.errors import Int16Overflow, ModelBug, Violation
from semcheck.model.fmap import FMap
from semcheck.model.ids import FIRST_BUFFER_ID, scalar_int16

BufferKey = tuple  # (memory_space: str, buffer_id: int, device: int, local_core: int)
Thread = tuple  # (device, local_core)
Range = tuple  # of int | slice

SHARED_SPACES = ("any", "hbm")
"""BUF-8: memory spaces whose buffers one device's cores share."""

GC_THRESHOLD = 100_000_000
"""BUF-3: freed bytes after which the manager resets its counter (and collects garbage)."""


# --- errors ----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class UnknownBuffer(Violation):
    """BUF-3/4/5/6: an access or deallocation of a key that holds no buffer (KeyError)."""

    key: BufferKey

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

    rnge: Range
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


def _zip_mismatch(first_len: int, second_len: int) -> Raised:
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
    rnge: Range
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
    rnge: Range
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
    rnge: Range
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


# --- values ------------------------------------------------------------------------


def frozen_array(value: np.ndarray) -> np.ndarray:
    """A read-only copy of `value`."""
    out = np.array(value, copy=True)
    out.setflags(write=False)
    return out


def same_array(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    """Equal dtype, shape and elements (NaN equals NaN); None equals only None."""
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

    def next_for(self, thread: Thread) -> int:
        return self.next_id.get(thread, FIRST_BUFFER_ID)


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


def next_buffer_id(store: BufferStore, thread: Thread) -> tuple[BufferStore, int]:
    """BUF-1: the next id of `thread`'s own counter (from 100, +1 per call, never reused).

    Each (device, local core) pair counts on its own, so two cores of a device
    get the same ids only if they allocate in lockstep.
    """
    i = store.next_for(thread)
    return dataclasses.replace(store, next_id=store.next_id.set(thread, i + 1)), i


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
    content = np.asarray(value)
    logical = tuple(content.shape) if logical_shape is None else tuple(logical_shape)
    for dim, ldim in zip(content.shape, logical):
        if ldim > dim:
            return LogicalShapeTooBig(logical, tuple(content.shape))
    if len(logical) != content.ndim:
        return _zip_mismatch(content.ndim, len(logical))
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
        return _zip_mismatch(len(rnge), len(shape))
    return tuple(out)


def read(buf: Buffer, rnge: Range) -> np.ndarray | None | Raised:
    """BUF-4: the part of the *padded* content `rnge` selects, or None when it is wholly outside.

    Reads are bounded by the content (padding included), not the logical
    shape; a read that is only partly outside returns the part inside. An
    IndexError from numpy itself (a negative index past the start) also
    reads as a miss.
    """
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
        return _zip_mismatch(len(shape), len(rnge))
    return False


def write_logical(buf: Buffer, rnge: Range, value: np.ndarray) -> Buffer | Raised:
    """BUF-5b: write the part of `rnge` inside the *logical* shape; the rest is dropped.

    `rnge` must already be normalized. The range is clipped to the logical
    shape (BUF-4b); when it misses, nothing is written. Otherwise the leading
    part of `value` of the clipped target's shape is written there. numpy's
    errors for a value of the wrong rank or shape escape as they are.
    """
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


# --- BUF-8 .. BUF-12: how the interpreter uses the manager ------------------------------


def uninitialized_value(dtype: np.dtype, uninitialized_memory: str):
    """BUF-8a: the fill of fresh memory: NaN / the integer maximum / True, or 0 under "zero"."""
    dtype = np.dtype(dtype)
    if uninitialized_memory == "nan":
        if dtype.kind == "f":
            return np.nan
        if dtype.kind in "iu":
            return np.iinfo(dtype).max
        if dtype.kind == "b":
            return True
    if uninitialized_memory == "zero":
        return 0
    raise ModelBug(f"no uninitialized value for {uninitialized_memory} and {dtype}")


def padding_applies(memory_space: str, buffer_bounds: str) -> bool:
    """BUF-8b: the interpreter pads a new buffer only under buffer_bounds="padded", never in SMEM."""
    return buffer_bounds == "padded" and memory_space != "smem"


def padded(value: np.ndarray, padded_shape: tuple[int, ...], uninitialized_memory: str) -> np.ndarray:
    """BUF-8c: `value` in the leading corner of a `padded_shape` array of uninitialized memory."""
    value = np.asarray(value)
    out = np.full(padded_shape, uninitialized_value(value.dtype, uninitialized_memory), value.dtype)
    out[tuple(slice(0, d) for d in value.shape)] = value
    return out


def buffer_core(memory_space: str, local_core: int) -> int:
    """BUF-9: the core slot of a buffer key: 0 for shared (HBM/ANY) buffers, else the core."""
    return 0 if memory_space in SHARED_SPACES else local_core


def buffer_key(memory_space: str, buffer_id: int, device: int, local_core: int) -> BufferKey:
    """BUF-9: the key a kernel access or deallocation by (device, local_core) uses."""
    return (memory_space, buffer_id, device, buffer_core(memory_space, local_core))


def allocate_for_kernel(
    store: BufferStore,
    device: int,
    local_core: int | None,
    memory_space: str,
    value: np.ndarray,
    cores_per_device: int,
    padded_shape: tuple[int, ...] | None = None,
    uninitialized_memory: str = "nan",
) -> tuple[BufferStore, int | Int16Overflow | Raised]:
    """BUF-8: a kernel allocation; returns the new store and the id handed to the kernel.

    `local_core` None allocates for every core of the device (pallas_call
    operands and scratch), else for that core alone (`run_scoped`). Every core
    in scope draws the next id of its own counter (BUF-1). For HBM/ANY, the
    buffer is keyed under core 0 with reference count `cores_per_device`, so
    the device's cores share it and the first allocation of a key wins
    (BUF-2); for other spaces each core gets its own buffer with reference
    count 1. HBM/ANY allocations are not copied per core: when the cores'
    counters disagree, the call creates one buffer per distinct key and all
    of them share one content array, so a write through one key shows
    through the others (`BufferStore.shared`). With `padded_shape`, the content is padded with uninitialized
    memory (BUF-8c) and the logical shape is the value's.

    The handed id is the id of `local_core` (core 0 when None) converted to
    int16 (IDS-2). If the cores' counters disagree, the interpreter's
    consistency assertion fails (AssertionError) after all allocations.
    """
    value = np.array(value, copy=True)
    logical = tuple(value.shape)
    content = value if padded_shape is None else padded(value, padded_shape, uninitialized_memory)
    cores: Iterable[int] = range(cores_per_device) if local_core is None else (local_core,)
    ids: dict[int, int] = {}
    created: set = set()
    for c in cores:
        store, i = next_buffer_id(store, (device, c))
        if memory_space in SHARED_SPACES:
            key, refs = (memory_space, i, device, 0), cores_per_device
        else:
            key, refs = (memory_space, i, device, c), 1
        if key not in store.mem:
            created.add(key)
        new = allocate(store, key, refs, content, logical)
        if isinstance(new, Violation):  # pragma: no cover - a padded shape never undercuts the value
            raise ModelBug(f"interpreter allocation failed: {new.message}")
        store = new
        ids[c] = i
    if memory_space in SHARED_SPACES and len(created) > 1:
        group = frozenset(created)
        store = dataclasses.replace(store, shared=store.shared.update({k: group for k in group}))
    mine = ids[0 if local_core is None else local_core]
    if any(i != mine for i in ids.values()):
        return store, Raised("AssertionError", "")
    return store, scalar_int16(mine)


def deallocate_for_kernel(
    store: BufferStore, device: int, local_core: int, memory_space: str, buffer_id: int
) -> BufferStore | Violation:
    """BUF-9: a kernel deallocation (end of `run_scoped`): BUF-3 on the BUF-9 key."""
    return deallocate(store, buffer_key(memory_space, buffer_id, device, local_core))


def full_read_shape(rnge: Range, logical_shape: tuple[int, ...]) -> tuple[int, ...] | Raised:
    """BUF-10a: the shape a kernel read expects: logical extents for missing dimensions,
    nothing for an index, (stop - start) // step for a slice. A range longer than
    the logical rank fails an assertion."""
    if len(rnge) > len(logical_shape):
        return Raised("AssertionError", "")
    out: list[int] = []
    for i, dim in enumerate(logical_shape):
        if i >= len(rnge):
            out.append(dim)
            continue
        r = rnge[i]
        if isinstance(r, slice):
            if r.step is None:
                raise ModelBug("kernel ranges always carry a step")
            out.append((r.stop - r.start) // r.step)
    return tuple(out)


def kernel_get(
    store: BufferStore,
    device: int,
    local_core: int,
    memory_space: str,
    buffer_id: int,
    rnge: Range,
    out_of_bounds_reads: str = "raise",
    uninitialized_memory: str = "nan",
) -> np.ndarray | Violation:
    """BUF-10: a kernel read. Whatever is not fully there is an error, or uninitialized.

    The manager's read (BUF-4, padded bounds) must return exactly the
    expected shape (BUF-10a, from the logical shape). Otherwise, under
    out_of_bounds_reads="raise" it is an OutOfBoundsRead; under
    "uninitialized" the missing part reads as uninitialized memory.
    So a read of the padding beyond the logical shape is *not* an error.
    """
    got = get(store, buffer_key(memory_space, buffer_id, device, local_core), rnge)
    if isinstance(got, Violation):
        return got
    want = full_read_shape(rnge, got.shape)
    if isinstance(want, Raised):
        return want
    if got.value is not None and got.value.shape == want:
        return got.value
    if out_of_bounds_reads == "raise":
        return OutOfBoundsRead(device, local_core, memory_space, buffer_id, tuple(rnge), got.shape)
    out = np.full(want, uninitialized_value(got.dtype, uninitialized_memory), got.dtype)
    if got.value is not None:
        out[tuple(slice(0, n) for n in got.value.shape)] = got.value
    return out


def kernel_store(
    store: BufferStore, device: int, local_core: int, memory_space: str, buffer_id: int, rnge: Range, value: np.ndarray
) -> BufferStore | Violation:
    """BUF-11: a kernel store: BUF-5, and a refused write is an OutOfBoundsWrite."""
    out = store_(store, buffer_key(memory_space, buffer_id, device, local_core), rnge, value)
    if isinstance(out, Violation):
        return out
    new, acc = out
    if not acc.in_bounds:
        return OutOfBoundsWrite(device, local_core, memory_space, buffer_id, tuple(rnge), acc.shape)
    return new


def kernel_swap(
    store: BufferStore,
    device: int,
    local_core: int,
    memory_space: str,
    buffer_id: int,
    rnge: Range,
    value: np.ndarray,
    mask: np.ndarray | None = None,
) -> tuple[BufferStore, np.ndarray] | Violation:
    """BUF-12: a kernel swap: BUF-6/BUF-7, and a refused swap is an OutOfBoundsSwap."""
    out = swap(store, buffer_key(memory_space, buffer_id, device, local_core), rnge, value, mask)
    if isinstance(out, Violation):
        return out
    new, acc = out
    if acc.value is None:
        return OutOfBoundsSwap(device, local_core, memory_space, buffer_id, tuple(rnge), acc.shape, mask is not None)
    return new, acc.value
