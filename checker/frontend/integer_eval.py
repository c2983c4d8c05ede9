"""REP-37: exact integer primitives before a kernel, evaluated with the front end's numeric table.

`concrete_inputs` binds each equation of the program around a call on concrete values; an XLA compile per
equation costs about 0.05 s of CPU. Integer and boolean equations whose result numpy computes exactly are
answered here instead; anything else (a division, a shift, a power, a float, a promotion) returns None and
jax binds it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

# REP-37: the integer primitives evaluated with the front end's numeric table instead of being compiled by XLA
# one by one (about 0.05 s of CPU each); exact on integers and booleans: wrapping arithmetic, comparisons,
# selection, shapes, clamped dynamic slices and integer sums, nothing that divides, shifts or raises to a power
INTEGER_EXACT = frozenset({"add", "sub", "mul", "max", "min", "and", "or", "xor", "eq", "ne", "lt", "le", "gt",
                            "ge", "neg", "not", "select_n", "clamp", "convert_element_type", "broadcast_in_dim",
                            "reshape", "squeeze", "transpose", "iota", "slice", "dynamic_slice", "concatenate",
                            "reduce_sum", "reduce_max", "reduce_min", "reduce_and", "reduce_or", "copy", "copy_p"})


def integer_numeric(eqn: Any, invals: Sequence[Any]) -> list[np.ndarray] | None:
    """REP-37: `eqn` on concrete integer or boolean values by `numeric.NUMERIC` (one lane), or None: another
    primitive or dtype, operands of another kind, or a result of another shape (then jax binds it)."""
    from semcheck.checker.frontend.numeric import NUMERIC

    name = eqn.primitive.name
    if name not in INTEGER_EXACT or eqn.primitive.multiple_results or len(eqn.outvars) != 1:
        return None
    if name in ("broadcast_in_dim", "reshape") and len(invals) != 1:
        return None  # dynamic shapes
    if any(type(x) is not np.ndarray or x.dtype.kind not in "iub" for x in invals):
        return None
    if name == "select_n" and invals[0].dtype != np.bool_:
        return None  # an integer case index out of range is jax's to define
    aval = eqn.outvars[0].aval
    dtype, shape = np.dtype(getattr(aval, "dtype", object)), tuple(getattr(aval, "shape", None) or ())
    if dtype.kind not in "iub" or getattr(aval, "shape", None) is None:
        return None
    try:
        with np.errstate(all="ignore"):
            out = np.asarray(NUMERIC[name](eqn, *(x[None] for x in invals)))
    except Exception:  # noqa: BLE001 - jax binds it instead
        return None
    if out.shape != (1, *shape) or out.dtype.kind not in "iub":
        return None  # numpy promoted to floating point (uint64 with a signed operand): jax binds it
    return [np.array(out[0], dtype=dtype)]


__all__ = ["INTEGER_EXACT", "integer_numeric"]
