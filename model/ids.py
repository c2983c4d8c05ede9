"""How the interpreter hands ids to kernels as int16 (rules IDS-1, IDS-2).

The interpreter returns semaphore ids as `np.arange(base, base + n, dtype=int16)`
and single ids (buffers, the barrier semaphore) as `np.int16(x)`. NumPy 2
converts the *first two* values of an arange to int16 with a range check and
fills the rest by int16 addition, so a range can raise OverflowError or
silently wrap. `tests/test_ids.py` pins these rules against numpy itself.
"""

from __future__ import annotations

from semcheck.model.errors import Int16Overflow

INT16_MIN = -(2**15)
INT16_MAX = 2**15 - 1
FIRST_SEMAPHORE_ID = 2000
FIRST_BUFFER_ID = 100


def wrap_int16(x: int) -> int:
    """Two's-complement wrap of `x` into int16."""
    return (x - INT16_MIN) % 2**16 + INT16_MIN


def arange_int16(base: int, n: int) -> tuple[int, ...] | Int16Overflow:
    """IDS-1: the ids `np.arange(base, base + n, dtype=np.int16)` yields, or its OverflowError.

    `base` must fit int16, and so must `base + 1` when `n >= 2`; the later
    values wrap.
    """
    if n <= 0:
        return ()
    if not INT16_MIN <= base <= INT16_MAX:
        return Int16Overflow(base)
    if n >= 2 and not INT16_MIN <= base + 1 <= INT16_MAX:
        return Int16Overflow(base + 1)
    return tuple(wrap_int16(base + i) for i in range(n))


def scalar_int16(x: int) -> int | Int16Overflow:
    """IDS-2: `np.int16(x)`: x itself, or OverflowError when it does not fit."""
    if not INT16_MIN <= x <= INT16_MAX:
        return Int16Overflow(x)
    return x
