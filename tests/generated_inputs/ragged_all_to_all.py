"""The ragged all-to-all of examples/jax_ops/ on send-count tables a hypothesis strategy draws (RUN-8).

examples/jax_ops/ragged_all_to_all.py reads its per-peer chunk counts from a
scalar-prefetch table (`counts[i, j]`: chunks device i sends to device j,
0..CAP); semcheck follows the table's values (ACC-4). Here the table is
generated: the strategy draws a list of counts and `table` lays it out over
the N x N table, repeating it (so one list serves every device count, and
hypothesis shrinks the list, not a shape).

* `ragged_all_to_all` (clean): proved for every generated table, in all three
  DMA modes, at 2 and 4 devices.
* `ragged_all_to_all_transposed_counts` (seeded bug,
  examples/jax_ops/buggy/deadlock_ragged_all_to_all_transposed_counts.py): the
  receiver waits `counts[me, s]` chunks from source s instead of
  `counts[s, me]`. Symmetric tables hide it (a list of one value gives one);
  semcheck finds an asymmetric one and shrinks it to `[0, 1]`, the table
  [[0, 1], [0, 1]] at 2 devices: device 0 waits for a chunk device 1 never
  sends (deadlock-free violated in every DMA mode).
* `fixed_symmetric_transposed_counts`: the buggy kernel on one fixed,
  symmetric table: every property proved, which is why a fixed example is
  not enough.

Used by tests/test_generated_inputs.py.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
from hypothesis import strategies as st

import semcheck

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "jax_ops"
CAP = 3  # the examples' largest count

COUNTS = st.lists(st.integers(0, CAP), min_size=1, max_size=16)
"""Chunk counts, laid out row by row over the table and repeated to fill it."""


def table(values, num_devices: int) -> np.ndarray:
    """counts[i, j] = values[(i * N + j) mod len(values)]."""
    flat = [values[k % len(values)] for k in range(num_devices * num_devices)]
    return np.asarray(flat, dtype=np.int32).reshape(num_devices, num_devices)


def _example(relative: str):
    path = EXAMPLES / relative
    spec = importlib.util.spec_from_file_location(f"_ragged_all_to_all_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@semcheck.target(devices=(2, 4), inputs=COUNTS)
def ragged_all_to_all(num_devices: int, values: list[int]):
    return _example("ragged_all_to_all.py").build(num_devices, counts=table(values, num_devices))


@semcheck.target(devices=(2, 4), inputs=COUNTS)
def ragged_all_to_all_transposed_counts(num_devices: int, values: list[int]):
    bug = _example("buggy/deadlock_ragged_all_to_all_transposed_counts.py")
    return bug.build(num_devices, counts=table(values, num_devices))


@semcheck.target(devices=(2, 4))
def fixed_symmetric_transposed_counts(num_devices: int):
    """The buggy kernel on a symmetric table (counts[i, j] = (i + j) mod (CAP + 1)): proved."""
    i, j = np.indices((num_devices, num_devices))
    bug = _example("buggy/deadlock_ragged_all_to_all_transposed_counts.py")
    return bug.build(num_devices, counts=(i + j) % (CAP + 1))
