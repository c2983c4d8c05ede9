"""The intervals of PRG-202's analysis of a kernel's integer scalars: each value's least and greatest value, or
None for any value of its dtype; `Held` also keeps the elements of a ref the kernel only loads (PRG-230)."""

from __future__ import annotations

from typing import Any

import numpy as np

INT_MAX = 2**31 - 1

Interval = tuple[int, int] | None


class Held(tuple):
    """PRG-220, PRG-230: the interval of the values a ref the kernel never writes holds, with those values
    (`values`, the input's elements as the call was run on them; None where only the interval is kept)."""

    values: Any

    def __new__(cls, lo: int, hi: int, values: Any = None) -> Held:
        self = super().__new__(cls, (lo, hi))
        self.values = values
        return self


def dtype_range(x: Any) -> Interval:
    """Every value an integer (or bool) scalar's dtype holds; None for any other value."""
    dtype = getattr(getattr(x, "aval", None), "dtype", None)
    try:
        dt = np.dtype(dtype)
    except TypeError:
        return None
    if dt == np.bool_:
        return (0, 1)
    if np.issubdtype(dt, np.integer):
        info = np.iinfo(dt)
        return (int(info.min), int(info.max))
    return None


def within(got: Interval, x: Any) -> Interval:
    """`got` where the dtype of `x` holds all of it; else (an operation that wraps) every value of the dtype."""
    full = dtype_range(x)
    if got is None or full is None:
        return full
    return got if full[0] <= got[0] and got[1] <= full[1] else full


def join(a: Interval, b: Interval) -> Interval:
    return None if a is None or b is None else (min(a[0], b[0]), max(a[1], b[1]))


def inside(a: Interval, b: Interval) -> bool:
    """Whether every value of `a` is one of `b` (None: any value)."""
    return b is None or (a is not None and b[0] <= a[0] and a[1] <= b[1])


__all__ = ["INT_MAX", "Held", "Interval", "dtype_range", "inside", "join", "within"]
