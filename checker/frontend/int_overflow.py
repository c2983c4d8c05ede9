"""Integer divisions and shifts whose value is the implementation's (spec ACC-34).

jax's `lax.div` and `lax.rem` document that "integer division overflow (division by zero or signed division of
INT_SMIN with -1) produces an implementation defined value"; Mosaic lowers both to `arith.divsi` / `arith.remsi`
(`_div_lowering_rule`, `_rem_lowering_rule` of `pallas/mosaic/lowering.py`), whose overflow MLIR leaves undefined,
and the shifts to `arith.shli` / `arith.shrsi` / `arith.shrui`, which give poison for an amount at or past the
width. XLA on the CPU, which computes them in jax's interpreter modes before and inside the kernel, gives -1 for
a division by zero, the dividend for a remainder by zero, the least value for the least value divided by -1, and
0 (or the sign, shifted right arithmetically) for a shift at or past the width, as semcheck's evaluation does; a
TPU need not.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

OVERFLOWING = frozenset({"div", "rem", "shift_left", "shift_right_logical", "shift_right_arithmetic"})


def int_overflow(name: str, invals: Sequence[Any]) -> str | None:
    """ACC-34: why an integer division, remainder or shift on (lane) arrays `invals` has an implementation-defined
    value, or None."""
    if name not in OVERFLOWING or len(invals) != 2:
        return None
    a, b = (np.asarray(x) for x in invals)
    if a.dtype.kind not in "iu" or b.dtype.kind not in "iu":
        return None
    if name.startswith("shift"):
        amount = b.astype(np.int64)
        if not np.any((amount < 0) | (amount >= 8 * a.dtype.itemsize)):
            return None
        return f"a {name} by an amount outside [0, {8 * a.dtype.itemsize}), whose value is the implementation's"
    overflow = b == 0
    if a.dtype.kind == "i":
        overflow = overflow | ((a == np.iinfo(a.dtype).min) & (b == -1))
    if not np.any(overflow):
        return None
    what = "division" if name == "div" else "remainder"
    return f"an integer {what} by zero or of the least value by -1, whose value is the implementation's"


__all__ = ["OVERFLOWING", "int_overflow"]
