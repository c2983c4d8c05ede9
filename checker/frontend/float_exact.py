"""Which float values the front end follows (ACC-25): exact operations on the input floats, nothing else.

A kernel's routing is float data: it loads the router's logits, takes a top-k by
iterated max and argmax, masks what it chose with -inf, and counts. Those are
operations every IEEE implementation computes alike, so their results are the
same in semcheck's numpy, in jax's interpreter (XLA on the CPU) and on a TPU
(Mosaic's `arith.cmpf`, `arith.maximumf`, `tpu.reduce_index`). Arithmetic that
rounds (an `exp`, a division, a sum whose partial sums round, a narrowing
conversion) may differ in its last bits between the three; its value is never
followed: the evaluator makes it `Unknown` with the line, in every mode.

This module is the rule's one home: `numeric.NumericRules` (the kernel) and
`concrete_inputs` (the program around it) ask it. It imports only numpy.

* `refusal` (before an operation): why the operation's float operands decide
  nothing (a NaN, whose order differs, a subnormal, which a TPU may flush to zero,
  a tie an argmax or a top-k would break, an operation that rounds);
* `inexact` (after it, for `CHECKED` operations): why its result was rounded;
* `rounds_floats` (ACC-26, the program around a call): both, for one bound equation;
  with `interpreter=True` (ACC-27, ACC-28) what holds only where XLA on the CPU computes
  the program (jax's interpreter modes) is followed too: a division that did not round,
  a tie, a subnormal; `refusal(ties=True)` (ACC-28, inside a kernel lowered for those
  modes): a tie numpy breaks as XLA does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

# Operations that only move, select or compare values: no float result of theirs is ever rounded.
STRUCTURAL = frozenset({"broadcast_in_dim", "reshape", "squeeze", "transpose", "slice", "dynamic_slice",
                        "concatenate", "stack", "copy", "copy_p", "multiple_of", "optimization_barrier", "pvary",
                        "stop_gradient", "select_n", "iota", "device_put", "sharding_constraint", "reshard",
                        "gather", "pad", "rev", "expand_dims", "dynamic_update_slice", "scatter",
                        # ACC-26: the operand itself (its impl and its lowering return it); only where it lives
                        "with_memory_space_constraint"})
EXACT = STRUCTURAL | frozenset({"max", "min", "clamp", "eq", "ne", "lt", "le", "gt", "ge", "neg", "abs", "sign",
                                "floor", "ceil", "round", "reduce_max", "reduce_min", "argmax", "argmin", "top_k"})
# Operations exact on some operands: followed where no rounding happened (`inexact`).
CHECKED = frozenset({"add", "sub", "mul", "reduce_sum", "scatter-add", "convert_element_type"})
# ACC-27: operations exact on some operands only where they are correctly rounded, as XLA's CPU division is (and a
# TPU's is not documented to be): followed in the interpreter's modes where the exact quotient is representable.
CPU_CHECKED = frozenset({"div"})
# Comparisons only (jnp.searchsorted's primitive, which a histogram's bins use): exact, as `lt` is.
EXACT = EXACT | frozenset({"SearchSorted"})
# Operations that choose an index by order: a tie is broken as each implementation likes.
_BY_ORDER = frozenset({"argmax", "argmin", "top_k"})


def is_float(dtype: Any) -> bool:
    """Whether `dtype` is a floating type (numpy's, or one of jax's `ml_dtypes` such as bfloat16)."""
    try:
        dt = np.dtype(dtype)
    except TypeError:
        return False
    return dt.kind == "f" or (dt.kind == "V" and "float" in dt.name)


def _finfo(dtype: Any) -> Any:
    import ml_dtypes  # (a dependency of jax)

    return ml_dtypes.finfo(dtype)


def involves_floats(invals: Sequence[np.ndarray], out_dtypes: Sequence[Any]) -> bool:
    return any(is_float(x.dtype) for x in invals) or any(is_float(d) for d in out_dtypes if d is not None)


def refusal(name: str, invals: Sequence[np.ndarray], params: dict[str, Any], *,
            interpreter: bool = False, ties: bool = False) -> str | None:
    """Why an operation on float data (operands `invals`, lane arrays) is not followed; None when it is.
    `interpreter` (ACC-27, ACC-28): the value is XLA's on the CPU, as semcheck binds it: a division is checked,
    subnormals (flushed to zero by both) and ties (the lowest index first, jax's rule) are followed. `ties`
    (ACC-28, inside a kernel, for the interpreter's modes): numpy's choice, the lowest index, is XLA's on the CPU,
    unless a zero of either sign is among the values (XLA's top-k orders -0.0 below 0.0, numpy does not). ACC-89: a
    `top_k` with `is_stable=False` is never followed through a tie, in either case (XLA on the CPU then orders equal
    values as its sort leaves them, not lowest index first)."""
    if name not in EXACT and name not in CHECKED and not (interpreter and name in CPU_CHECKED):
        return f"float arithmetic that rounds ({name}), whose last bits may differ between semcheck, jax's " \
               "interpreter and a TPU"
    for x in invals:
        if name in STRUCTURAL or not is_float(x.dtype):
            continue  # (moving a value changes nothing an exact operation reads of it)
        v = np.asarray(x, dtype=np.float64)
        if np.isnan(v).any():
            return f"a NaN among the operands of {name} (NaNs compare and order differently between implementations)"
        if interpreter:
            continue
        if ((v != 0) & (np.abs(v) < float(_finfo(x.dtype).smallest_normal))).any():
            return f"a subnormal float among the operands of {name} (a TPU may flush it to zero)"
    if name == "top_k" and not params.get("is_stable", True):  # ACC-89: XLA's unstable top-k breaks ties its own way
        return _tie(name, np.asarray(invals[0], dtype=np.float64), params)
    if name in _BY_ORDER and ties and not interpreter:
        if any(is_float(x.dtype) and (np.asarray(x, dtype=np.float64) == 0).any() for x in invals):
            return _tie(name, np.asarray(invals[0], dtype=np.float64), params)
        return None
    if name in _BY_ORDER and not interpreter:
        return _tie(name, np.asarray(invals[0], dtype=np.float64), params)
    return None


def _tie(name: str, x: np.ndarray, params: dict[str, Any]) -> str | None:
    """Why the index an argmax/argmin/top-k chooses is not the same everywhere: a tie it breaks."""
    if name == "top_k":
        axis = int(params.get("axis", -1)) % (x.ndim - 1) + 1
        k = int(params["k"])
    else:
        (axis,) = params["axes"]
        axis, k = int(axis) + 1, 1
        if name == "argmin":
            x = -x
    n = x.shape[axis]
    if n <= 1:
        return None
    top = -np.sort(-x, axis=axis)
    head = np.take(top, range(min(k + 1, n)), axis=axis)
    if (np.diff(head, axis=axis) >= 0).any():
        return f"a tie among the values {name} chooses from (implementations break ties differently)"
    return None


def inexact(name: str, invals: Sequence[np.ndarray], outs: Sequence[Any], params: dict[str, Any]) -> str | None:
    """Why the result of a `CHECKED` (or iota) operation on float data was rounded; None when it is exact."""
    out = outs[0]
    if type(out) is not np.ndarray:
        return None
    if is_float(out.dtype):
        o = np.asarray(out, dtype=np.float64)
        tiny = float(_finfo(out.dtype).smallest_normal)
        finite_in = all(np.isfinite(np.asarray(x, dtype=np.float64)).all() for x in invals)
        if finite_in and (~np.isfinite(o)).any():
            return f"{name} overflows"
        if np.isnan(o).any() or ((o != 0) & (np.abs(o) < tiny)).any():
            return f"{name} gives a NaN or a subnormal float"
    why = _rounded(name, invals, out, params)
    return None if why is None else f"{why}, whose last bits may differ between semcheck, jax's interpreter and a TPU"


def _rounded(name: str, invals: Sequence[np.ndarray], out: np.ndarray, params: dict[str, Any]) -> str | None:
    if name in ("add", "sub", "mul"):
        a, b = (np.asarray(x, dtype=np.float64) for x in invals)
        if name == "mul":
            if max(np.dtype(x.dtype).itemsize for x in invals) > 4:
                return "a product of 64-bit floats"
            exact = a * b  # two significands of at most 24 bits: the float64 product is exact
        else:
            b = -b if name == "sub" else b
            exact = a + b
            back = exact - a  # Knuth's two-sum: the error of the float64 sum
            err = (a - (exact - back)) + (b - back)
            if (err != 0).any():
                return f"a {name} that rounds"
        if (np.asarray(out, dtype=np.float64) != exact).any():
            return f"a {name} that rounds"
        return None
    if name == "div":
        return _quotient_rounded(invals, out)
    if name in ("reduce_sum", "scatter-add"):
        x, axes = invals[0], tuple(a + 1 for a in params.get("axes", ()))
        if name == "scatter-add":  # (per lane: the operand's values and the updates', whatever their places)
            lanes = len(invals[0])
            x, axes = np.concatenate([invals[0].reshape(lanes, -1), invals[-1].reshape(lanes, -1)], 1), (1,)
        if not is_float(x.dtype):
            return None
        v = np.asarray(x, dtype=np.float64)
        p = int(_finfo(x.dtype).nmant) + 1
        # integers whose magnitudes sum to at most 2**p: every partial sum, in any order, is exact
        if (~np.isfinite(v)).any() or (np.floor(v) != v).any() or np.abs(v).sum(axis=axes).max(initial=0) > 2.0 ** p:
            return "a sum of floats whose partial sums may round (its order is the implementation's)"
        return None
    if name == "convert_element_type":
        (x,) = invals
        new = np.dtype(params["new_dtype"])
        if is_float(x.dtype) and new.kind in "iu":
            v = np.trunc(np.asarray(x, dtype=np.float64))
            info = np.iinfo(new)
            if (~np.isfinite(v)).any() or (v < info.min).any() or (v > info.max).any():
                return "a conversion of a float outside the integer type's range"
            return None
        if not is_float(new):
            return None
        if x.dtype.kind in "iu" and x.dtype.itemsize > 4:  # (past 2**53 a float64 would round too)
            if any(int(o) != int(v) for o, v in zip(np.asarray(out, dtype=np.float64).reshape(-1).tolist(),
                                                    x.reshape(-1).tolist())):
                return f"a conversion to {new.name} that rounds"
            return None
        if (np.asarray(out, dtype=np.float64) != np.asarray(x, dtype=np.float64)).any():
            return f"a conversion to {new.name} that rounds"
        return None
    return None


def _quotient_rounded(invals: Sequence[np.ndarray], out: np.ndarray) -> str | None:
    """ACC-27: why a float division's result is not its exact quotient (None when it is): `out * b == a`, with the
    float64 product of two significands of at most 24 bits exact, says the rational `a / b` is `out`."""
    if max(np.dtype(x.dtype).itemsize for x in invals) > 4:
        return "a quotient of 64-bit floats"
    a, b = (np.asarray(x, dtype=np.float64) for x in invals)
    o = np.asarray(out, dtype=np.float64)
    if (b == 0).any() or (~np.isfinite(a)).any() or (o * b != a).any():
        return "a division that rounds"
    return None


# Collectives that only move or select values: a float they give is exact (ACC-26).
MOVING_COLLECTIVES = frozenset({"all_gather", "ppermute", "all_to_all", "pmax", "pmin"})


def rounds_floats(name: str, invals: Sequence[Any], outs: Sequence[Any], params: dict[str, Any], *,
                  interpreter: bool = False) -> str | None:
    """ACC-26: why the float values of primitive `name` on concrete operands `invals` (results `outs`) are not
    followed (arithmetic that rounds, a NaN, a tie, ...); None when it involves no float or computes exactly
    (`refusal`, `inexact`, on arrays given a lane axis). `interpreter` (ACC-27, ACC-28): followed where XLA on the
    CPU, which computes the program around a call in jax's interpreter modes, gives these bits."""
    if name in MOVING_COLLECTIVES:
        return None
    arrays = [np.asarray(x)[None] for x in invals if x is not None]
    results = [np.asarray(o)[None] for o in outs if o is not None]
    if not involves_floats(arrays, [o.dtype for o in results]) and name != "top_k":
        return None
    why = refusal(name, arrays, params, interpreter=interpreter)
    if why is None and (name in CHECKED or name in CPU_CHECKED):
        why = inexact(name, arrays, results, params)
    return why


__all__ = ["CHECKED", "CPU_CHECKED", "EXACT", "MOVING_COLLECTIVES", "STRUCTURAL", "inexact", "involves_floats",
           "is_float", "refusal", "rounds_floats"]
