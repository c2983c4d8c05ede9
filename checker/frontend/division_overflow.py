"""Integer divisions whose value is the implementation's (spec ACC-34).

jax's `lax.div` and `lax.rem` document that "integer division overflow (division by zero or signed division of
INT_SMIN with -1) produces an implementation defined value"; Mosaic lowers both to `arith.divsi` / `arith.remsi`
(`_div_lowering_rule`, `_rem_lowering_rule` of `pallas/mosaic/lowering.py`), whose overflow MLIR leaves undefined.
XLA on the CPU, which computes them in jax's interpreter modes before and inside the kernel, gives -1 for a
division by zero, the dividend for a remainder by zero, and the least value for the least value divided by -1,
as semcheck's evaluation does; a TPU need not.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

DIVISIONS = frozenset({"div", "rem"})


def division_overflow(name: str, invals: Sequence[Any]) -> str | None:
    """ACC-34: why an integer `div` or `rem` on (lane) arrays `invals` has an implementation-defined value, or None."""
    if name not in DIVISIONS or len(invals) != 2:
        return None
    a, b = (np.asarray(x) for x in invals)
    if a.dtype.kind not in "iu" or b.dtype.kind not in "iu":
        return None
    overflow = b == 0
    if a.dtype.kind == "i":
        overflow = overflow | ((a == np.iinfo(a.dtype).min) & (b == -1))
    if not np.any(overflow):
        return None
    what = "division" if name == "div" else "remainder"
    return f"an integer {what} by zero or of the least value by -1, whose value is the implementation's"


__all__ = ["DIVISIONS", "division_overflow"]
