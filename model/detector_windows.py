"""When jax's race detector takes two windows of one buffer to meet (rule ERR-27, specs/semantics/buffers.md).

semcheck decides races on elements (ACC-2): a window of size 0 touches none. jax's detector compares
the windows' starts instead, so a zero-size window whose start lies inside another window meets it,
and with `detect_races` two such accesses that nothing orders make the interpreter raise
`RuntimeError: RACE DETECTED` where semcheck sees no race (measured: the skipped slot of
tests/frontend/kernels/empty_copy_regular.py under eager). This module states the detector's test;
race-free does not use it yet (ERR-27's Status).
"""

from __future__ import annotations

from collections.abc import Sequence

# one dimension of a window: (start, stop), half-open, or None for the whole dimension (an unsliced axis)
Dim = tuple[int, int] | None


def _dims_meet(a: Dim, b: Dim) -> bool:
    """ERR-27, one dimension: a whole dimension meets a window with elements (and, as measured, not another whole
    dimension); two windows meet when one's start lies in the other's [start, stop), whatever the other's size."""
    if a is None and b is None:
        return False
    if a is None or b is None:
        lo, hi = b if a is None else a
        return lo < hi
    return a[0] <= b[0] < a[1] or b[0] <= a[0] < b[1]


def detector_windows_meet(a: Sequence[Dim], b: Sequence[Dim]) -> bool:
    """ERR-27: whether jax's race detector takes windows `a` and `b` of one buffer to meet: every dimension meets
    (a window with fewer dimensions covers the rest whole)."""
    rank = max(len(a), len(b))
    pad = lambda w: tuple(w) + (None,) * (rank - len(w))  # noqa: E731 - the detector's own padding
    return all(_dims_meet(x, y) for x, y in zip(pad(a), pad(b)))

