"""Kernels whose DMA sizes are data, on inputs a hypothesis strategy draws (ACC-7, RUN-8).

* `ragged_offsets` / `ragged_offsets_wrong_row` / `ragged_offsets_off_by_one`:
  examples/jax_ops/ragged_all_to_all_offsets.py (jax's ragged all-to-all) and
  its two seeded variants in examples/jax_ops/buggy/, on group-size tables
  laid out from a drawn list (repeated over the N x G table, so hypothesis
  shrinks a list, not a shape). The wrong-row bug hides on tables where every
  device receives as much as its neighbour (all zeros, a constant list);
  the off-by-one shows on any table with a non-empty group (its target is
  checked at 2 devices: at 4, a uniform table meets a witness that does
  not replay in model/race.py, see tests/test_data_sizes.py).
* `recv_count_pairs`: jax's race-detection kernel on drawn (source, destination)
  pairs.
* `dynamic_dma` / `dynamic_dma_short_wait`: examples/jax_ops/dynamic_dma_2nd_minor.py
  and its variant, on drawn (start row, size) pairs, one per device (cycled).
  The short wait is violated on every input (sizes 1..8): hypothesis shrinks
  it to one copy of one row from row 0.

Used by tests/test_data_sizes.py.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
from hypothesis import strategies as st

import semcheck

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "jax_ops"
CAP = 3  # ragged_all_to_all_offsets.CAP
GPD = 2

SIZES = st.lists(st.integers(0, CAP), min_size=1, max_size=8)
COPIES = st.lists(st.tuples(st.integers(0, 56), st.integers(0, 8)), min_size=1, max_size=4)
NONEMPTY_COPIES = st.lists(st.tuples(st.integers(0, 56), st.integers(1, 8)), min_size=1, max_size=4)
"""(start row, size) pairs; the short wait's descriptor of `size - 1` rows needs size >= 1 (a
negative size is another bug, unknown to semcheck: ACC-7)."""


def _example(relative: str):
    path = EXAMPLES / relative
    spec = importlib.util.spec_from_file_location(f"_data_sizes_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sizes_table(values, num_devices: int) -> np.ndarray:
    """sizes[d, g] = values[(d * G + g) mod len(values)]."""
    groups = num_devices * GPD
    flat = [values[k % len(values)] for k in range(num_devices * groups)]
    return np.asarray(flat, dtype=np.int32).reshape(num_devices, groups)


@semcheck.target(devices=(2, 4), inputs=SIZES)
def ragged_offsets(num_devices: int, values: list[int]):
    return _example("ragged_all_to_all_offsets.py").build(num_devices, sizes=sizes_table(values, num_devices))


@semcheck.target(devices=(2, 4), inputs=SIZES)
def ragged_offsets_wrong_row(num_devices: int, values: list[int]):
    bug = _example("buggy/deadlock_ragged_offsets_receive_count_wrong_row.py")
    return bug.build(num_devices, sizes=sizes_table(values, num_devices))


@semcheck.target(devices=(2, 4), inputs=SIZES)
def ragged_offsets_off_by_one(num_devices: int, values: list[int]):
    bug = _example("buggy/race_ragged_offsets_size_off_by_one.py")
    return bug.build(num_devices, sizes=sizes_table(values, num_devices))


def _copies(pairs, num_devices: int) -> tuple[np.ndarray, np.ndarray]:
    cycled = [pairs[d % len(pairs)] for d in range(num_devices)]
    return np.array([p[0] for p in cycled], np.int32), np.array([p[1] for p in cycled], np.int32)


@semcheck.target(devices=(2, 4), inputs=COPIES)
def dynamic_dma(num_devices: int, pairs: list[tuple[int, int]]):
    index, size = _copies(pairs, num_devices)
    return _example("dynamic_dma_2nd_minor.py").build(num_devices, index=index, size=size)


@semcheck.target(devices=(2, 4), inputs=NONEMPTY_COPIES)
def dynamic_dma_short_wait(num_devices: int, pairs: list[tuple[int, int]]):
    index, size = _copies(pairs, num_devices)
    bug = _example("buggy/dma_bytes_dynamic_dma_wait_one_row_short.py")
    return bug.build(num_devices, index=index, size=size)


PAIRS = st.lists(st.tuples(st.integers(0, 7), st.integers(0, 7)), min_size=1, max_size=6)
"""(source, destination) pairs for jax's race-detection kernel, taken mod N."""


@semcheck.target(devices=(2, 4), inputs=PAIRS)
def recv_count_pairs(num_devices: int, pairs: list[tuple[int, int]]):
    """examples/jax_ops/recv_count_race_detection.py on drawn tables: two pairs into one device race
    (the race jax's test seeds). hypothesis shrinks to [[0, 0], [0, 0]]: device 0 copies into its
    own output twice, waiting each copy's send only, so nothing orders the two writes (jax's
    detector reports it in both modes)."""
    table = np.array([[s % num_devices, d % num_devices] for s, d in pairs], np.int32)
    return _example("recv_count_race_detection.py").build(num_devices, pairs=table)
