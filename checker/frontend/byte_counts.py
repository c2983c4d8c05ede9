"""ACC-72, ACC-76: the byte count jax's interpreter gives a DMA whose source view is sized by data.

A wait's count is `math.prod(shape) * itemsize` of the traced view (`dma_wait_p` in jax's
`interpret_pallas_call.py`): where a size is data, the product is an int32 value and wraps (two's complement), so
the wait asks for the exact count modulo 2**32, read as a signed int32. A start's count is not computed that way:
its slice sizes are made Python integers (`jax.tree.map(int, src_transforms)`) and the count is the size of the data
it reads (`DMA.data_size`), exact. semcheck's model takes both as given, so the front end gives a wait the wrapped
count, and a start its exact one, only in a lowering for the interpreter's modes alone (the values XLA on the CPU
gives, ACC-28, where `hardware` is then lowered again; ACC-71's, whose racy reads were given values); a lowering
`hardware` reads keeps refusing a count past int32 (ACC-72).
"""

from __future__ import annotations

import math

INT32 = 2 ** 31


def wrapped_int32(n: int) -> int:
    """`n` modulo 2**32, read as a signed int32: what XLA's int32 arithmetic leaves of an exact product."""
    return (n + INT32) % (2 * INT32) - INT32


def interpreter_count(shape: tuple[int, ...], itemsize: int, base_elements: int, wait: bool) -> int | None:
    """ACC-76: the byte count jax's interpreter gives a DMA over a view of `shape` (sizes that are data among its
    dimensions) of a buffer of `base_elements` elements: a wait's wrapped, a start's exact; None where the product of
    the static sizes alone might pass int32 (jax's trace of the kernel then fails instead: not modelled)."""
    exact = math.prod(shape) * itemsize
    if base_elements >= INT32:  # (a view's static sizes are at most its buffer's, so within int32 below this)
        return None
    return wrapped_int32(exact) if wait else exact


__all__ = ["INT32", "interpreter_count", "wrapped_int32"]
