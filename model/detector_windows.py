"""When jax's race detector takes two windows of one buffer to meet (rule ERR-27, specs/semantics/buffers.md).

semcheck decides races on elements (ACC-2): a window of size 0 touches none. jax's detector compares
the windows' starts instead, so a zero-size window whose start lies inside another window meets it,
and with `detect_races` two such accesses that nothing orders make the interpreter raise
`RuntimeError: RACE DETECTED` where no element is shared (measured: the skipped slot of
tests/frontend/kernels/empty_copy_regular.py under eager). `model/access.py`'s `regions_meet` adds this
test to ACC-2's in the interpreter modes (DR-1), and the every-N argument (PAR-14) states its first
dimension with `starts_meet`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

# one dimension of a window: (start, stop), half-open, or None for the whole dimension (an unsliced axis)
Dim = tuple[int, int] | None


def _or(x: bool, y: bool) -> bool:
    return x or y


def _and(x: bool, y: bool) -> bool:
    return x and y


def starts_meet(a_lo: Any, a_hi: Any, b_lo: Any, b_hi: Any, *, either: Callable = _or, both: Callable = _and) -> Any:
    """ERR-27, one sliced dimension: `[a_lo, a_hi)` and `[b_lo, b_hi)` meet when one's start lies in the other,
    whatever the other's size. Written once for numbers and for solver terms (`either`/`both`: the solver's
    Or/And), so the every-N argument states the detector's test as this function does."""
    return either(both(a_lo <= b_lo, b_lo < a_hi), both(b_lo <= a_lo, a_lo < b_hi))


def _dims_meet(a: Dim, b: Dim) -> bool:
    """ERR-27, one dimension: a whole dimension meets a window with elements (and, as measured, not another whole
    dimension); two windows meet when one's start lies in the other's [start, stop), whatever the other's size."""
    if a is None and b is None:
        return False
    if a is None or b is None:
        lo, hi = b if a is None else a
        return lo < hi
    return starts_meet(a[0], a[1], b[0], b[1])


def detector_windows_meet(a: Sequence[Dim], b: Sequence[Dim]) -> bool:
    """ERR-27: whether jax's race detector takes windows `a` and `b` of one buffer to meet: every dimension meets
    (a window with fewer dimensions covers the rest whole)."""
    rank = max(len(a), len(b))
    pad = lambda w: tuple(w) + (None,) * (rank - len(w))  # noqa: E731 - the detector's own padding
    return all(_dims_meet(x, y) for x, y in zip(pad(a), pad(b)))
