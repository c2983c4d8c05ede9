"""How the interpreter uses the manager for a kernel's buffers (rules BUF-8 .. BUF-12; spec: specs/semantics/buffers.md).

Which keys and reference counts a kernel allocation creates, how HBM buffers
are shared by a device's cores, how fresh memory is filled, and which errors
a kernel access raises, all over the manager rules of `semcheck.model.buffer`.
The id and key each core's buffer gets (BUF-1 with BUF-8: `kernel_keys`,
`handed_id`) are also what the kernel-level state records (`State.buffer_keys`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING

from semcheck.model.buffer import (
    SHARED_SPACES,
    BufferKey,
    BufferStore,
    Range,
    Thread,
    allocate,
    clip,
    deallocate,
    get,
    handout,
    handout_one,
    normalize,
    out_of_bounds,
    store_,
    swap,
    take,
)
from semcheck.model.errors import (
    Int16Overflow,
    ModelBug,
    OutOfBoundsRead,
    OutOfBoundsSwap,
    OutOfBoundsWrite,
    Raised,
    Violation,
)
from semcheck.model.ids import scalar_int16

if TYPE_CHECKING:  # annotations only: numpy is imported where it is used
    import numpy as np


def uninitialized_value(dtype: np.dtype, uninitialized_memory: str):
    """BUF-8a: the fill of fresh memory: NaN / the integer maximum / True, or 0 under "zero"."""
    import numpy as np  # imported on first use: semcheck's command-line process never needs it
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
    import numpy as np
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


def kernel_keys(
    next_id: Mapping[Thread, int], device: int, local_core: int | None, memory_space: str, cores_per_device: int
) -> tuple[dict[Thread, int], dict[int, BufferKey]]:
    """BUF-8 with BUF-1: the ids a kernel allocation draws and the key of each core's buffer.

    `local_core` None allocates for every core of the device, else for that
    core alone. Every core in scope draws the next id of its own counter
    (`buffer.handout`; the caller applies `buffer.take`), and its buffer is keyed by BUF-9:
    HBM/ANY buffers under core 0, one per device while the cores' counters
    agree; other spaces one per core.
    """
    if local_core is not None or cores_per_device == 1:  # one core in scope (RUN-58)
        c = 0 if local_core is None else local_core
        thread, i, key = one_key(next_id, device, c, memory_space)
        return {thread: i}, {c: key}
    cores = range(cores_per_device)
    ids = handout(next_id, [(device, c) for c in cores])
    return ids, {c: buffer_key(memory_space, ids[(device, c)], device, c) for c in cores}


def one_key(next_id: Mapping[Thread, int], device: int, local_core: int, memory_space: str
            ) -> tuple[Thread, int, BufferKey]:
    """`kernel_keys` of an allocation with one core in scope (a `run_scoped` buffer, or any buffer of a
    device of one core), as (its thread, the id it draws, its key): RUN-58, without the mappings per scope."""
    thread = (device, local_core)
    i = handout_one(next_id, thread)
    return thread, i, buffer_key(memory_space, i, device, local_core)


def handed_id(keys: Mapping[int, BufferKey], local_core: int | None) -> int | Violation:
    """BUF-8: the id the kernel is handed: the named core's (core 0 for None) as int16 (IDS-2).

    If the cores' ids differ, the interpreter's consistency assertion fails
    (AssertionError, after all the allocations were made).
    """
    mine = keys[0 if local_core is None else local_core][1]
    if any(k[1] != mine for k in keys.values()):
        return Raised("AssertionError", "")
    return scalar_int16(mine)


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
    in scope draws the next id of its own counter (BUF-1, `kernel_keys`). For HBM/ANY, the
    buffer is keyed under core 0 with reference count `cores_per_device`, so
    the device's cores share it and the first allocation of a key wins
    (BUF-2); for other spaces each core gets its own buffer with reference
    count 1. HBM/ANY allocations are not copied per core: when the cores'
    counters disagree, the call creates one buffer per distinct key and all
    of them share one content array, so a write through one key shows
    through the others (`BufferStore.shared`). With `padded_shape`, the content is padded with uninitialized
    memory (BUF-8c) and the logical shape is the value's.

    The handed id is `buffer.handed_id`'s: the id of `local_core` (core 0 when
    None) as int16 (IDS-2), or the interpreter's consistency assertion when the
    cores' counters disagree (after all allocations).
    """
    import numpy as np
    value = np.array(value, copy=True)
    logical = tuple(value.shape)
    content = value if padded_shape is None else padded(value, padded_shape, uninitialized_memory)
    ids, keys = kernel_keys(store.next_id, device, local_core, memory_space, cores_per_device)
    store = take(store, ids)
    refs = cores_per_device if memory_space in SHARED_SPACES else 1
    created: set = set()
    for key in keys.values():
        if key not in store.mem:
            created.add(key)
        new = allocate(store, key, refs, content, logical)
        if isinstance(new, Violation):  # pragma: no cover - a padded shape never undercuts the value
            raise ModelBug(f"interpreter allocation failed: {new.message}")
        store = new
    if memory_space in SHARED_SPACES and len(created) > 1:
        group = frozenset(created)
        store = dataclasses.replace(store, shared=store.shared.update({k: group for k in group}))
    return store, handed_id(keys, local_core)


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


def read_refused(rnge: Range, shape: tuple[int, ...]) -> bool | Raised:
    """BUF-10 on shapes alone (content shape = logical shape: no padding, BUF-8b): whether a kernel read of
    `rnge` does not return the expected shape, so that it raises under out_of_bounds_reads="raise".

    The manager clips the normalized range (BUF-4b): a slice *starting* at or past a dimension's end,
    even an empty one, misses the buffer; a stop past the end is cut short. The read is refused when it
    misses or when what is left is smaller than BUF-10a's expected shape. A negative index or start is
    read as numpy reads it (BUF-4): counted from the end, an index before the start missing, and a slice
    `[-1, 0)` selecting nothing, so that it is refused as smaller than expected."""
    clipped = clip(normalize(rnge, shape), shape)
    if clipped is None or isinstance(clipped, Raised):
        return True if clipped is None else clipped
    if any(not isinstance(r, slice) and r < -d for r, d in zip(clipped, shape)):
        return True  # numpy's IndexError, which the manager reads as a miss
    want = full_read_shape(rnge, shape)
    if isinstance(want, Raised):
        return want
    got = tuple(len(range(*r.indices(d))) for r, d in zip(clipped, shape) if isinstance(r, slice))
    return got != want


def write_refused(rnge: Range, shape: tuple[int, ...]) -> bool | Raised:
    """BUF-11 on shapes alone (no padding): whether a kernel store of `rnge` is refused, an element it
    selects lying past a dimension's end (BUF-5a; an empty slice selects none, wherever it starts)."""
    return out_of_bounds(normalize(rnge, shape), shape)


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
    import numpy as np
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
