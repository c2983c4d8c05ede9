"""Float values known within bounds (ACC-35, ACC-36): arithmetic that rounds, evaluated by intervals.

ACC-25 follows float values computed by exact operations only. A kernel that routes by a softmax (`exp`, a
sum, a division) computes values whose last bits are the implementation's. In jax's interpreter modes those
bits are XLA's on the CPU, which may fuse, contract a product and a sum into one FMA, or sum in any order;
each of those results still lies within a bound of the exact real result. So the front end carries such a
value as an interval (`values.Bounded`: float64 `lo` and `hi` per lane and element) widened at every operation
that rounds by a stated bound, and an operation that decides something from it (a comparison, an argmax, a
top-k, a conversion to an integer) gives a fact only where its outcome is the same for every point of the
intervals; a near tie is unknown with the operation's line (ACC-36).

The bounds, for float32 (`U` = 2^-24, the unit roundoff):

* `add`, `sub`, `mul`, `div` (XLA's CPU division is correctly rounded, ACC-27): relative `BASIC` = 2^-22 = 4U
  of the result. A contracted `a * b + c` rounds once, not twice: its unrounded product lies in the product's
  interval, so the sum's widened interval holds it.
* `reduce_sum` of `n` terms, in any order or tree: `(n - 1) * BASIC * sum |x|` (Higham's `gamma_{n-1}` bound
  for any order of summation is at most `(n - 1) * 2U` while `(n - 1) * U <= 1/2`).
* `exp`, `log`, `logistic`, `tanh`: relative `FUNCTIONS[name]`, at least 13 times the largest error measured
  against float64 on XLA's CPU (`specs/deciding/frontend.md` ACC-35 says how).

Every bound is computed in float64 and widened by `SLACK` more for float64's own rounding. An operand bound
that is not finite (but `exp(-inf)`, exactly 0), a result that may overflow or be subnormal (XLA on the CPU
flushes subnormals, numpy does not), a NaN, or a type other than float32 for an operation that rounds: the
value is unknown, as before. It imports only numpy and the value classes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from semcheck.checker.frontend.float_exact import STRUCTURAL, is_float
from semcheck.checker.frontend.values import Bounded, Unknown
from semcheck.model.ops import NO_LOC, Loc

BASIC = 2.0 ** -22
SLACK = 2.0 ** -50
# Measured on XLA's CPU (jax 0.8), largest relative error against float64 over 3 x 2^22 float32 inputs each:
# exp 1.39U, log 1.98U, logistic 2.46U, tanh 4.90U; the bounds are at least 13 times those.
FUNCTIONS = {"exp": 2.0 ** -19, "log": 2.0 ** -19, "logistic": 2.0 ** -18, "tanh": 2.0 ** -18}
ARITHMETIC = frozenset({"add", "sub", "mul", "div"})
ROUNDING = ARITHMETIC | frozenset(FUNCTIONS) | frozenset({"reduce_sum"})
# Non-decreasing in every float operand: the bounds are the operation applied to the lower and to the upper ones.
MONOTONE = (STRUCTURAL - {"iota"}) | frozenset({"max", "min", "clamp", "reduce_max", "reduce_min", "floor", "ceil",
                                                 "round", "sign"})
COMPARISONS = frozenset({"lt", "le", "gt", "ge", "eq", "ne"})
BY_ORDER = frozenset({"argmax", "argmin", "top_k"})
_F32 = np.dtype(np.float32)
_TINY = float(np.finfo(np.float32).tiny)
_MAX = float(np.finfo(np.float32).max)


def rounds_within_bounds(name: str, invals: Sequence[Any], out_dtypes: Sequence[Any]) -> bool:
    """Whether operation `name` on these operands (exact or bounded) is one `evaluate` bounds: an operation that
    rounds, on float32 operands, with float32 results."""
    return name in ROUNDING and all(_dtype(x) == _F32 for x in invals if is_float(_dtype(x))) and all(
        d is not None and np.dtype(d) == _F32 for d in out_dtypes)


def has_bounds(invals: Sequence[Any]) -> bool:
    return any(type(x) is Bounded for x in invals)


def evaluate(name: str, eqn: Any, invals: list[Any], fn: Callable[..., Any], loc: Loc,
             out_dtypes: Sequence[Any]) -> tuple[list[Any], bool]:
    """ACC-35, ACC-36: the results of `name` (NUMERIC's rule `fn`) on operands some of which are `Bounded`, or
    all exact where the operation rounds; and whether a known result came from bounds (a decision, which holds
    only in the interpreter's modes). Unknown results say why, at `loc`."""
    origin = next((x for x in invals if type(x) is Bounded), None)
    src = f" (from {origin.why} at {origin.loc})" if origin is not None else ""
    if any(type(x) is not np.ndarray and type(x) is not Bounded for x in invals):
        return [Unknown(f"the result of {name} on an unknown value", loc) for _ in out_dtypes], False
    if any(np.isnan(b).any() for x in invals if _bounds(x)[2] for b in _bounds(x)[:2]):
        return [Unknown(f"a NaN among the operands of {name}{src}", loc) for _ in out_dtypes], False
    if any(type(x) is np.ndarray and is_float(x.dtype) and ((x != 0) & (np.abs(np.asarray(x, dtype=np.float64))
                                                                   < float(np.finfo(x.dtype).tiny))).any()
           for x in invals):
        return [Unknown(f"a subnormal float among the operands of {name} (XLA on the CPU flushes it to zero)", loc)
                for _ in out_dtypes], False
    try:
        if name in ROUNDING:
            why = None if rounds_within_bounds(name, invals, out_dtypes) else \
                f"float arithmetic that rounds ({name}) on a type other than float32, which semcheck does not bound"
            got = _rounding(name, eqn, invals) if why is None else why
            if isinstance(got, str):
                return [Unknown(f"{got}{src} (ACC-35)", loc) for _ in out_dtypes], False
            return [Bounded(f"float arithmetic that rounds ({name}), known only within bounds (ACC-35)", loc,
                            got[0], got[1], out_dtypes[0])], False
        if name in COMPARISONS:
            return _decided([_compare(name, *invals)], name, src, loc, out_dtypes)
        if name in BY_ORDER:
            return _decided(_by_order(name, eqn, invals[0]), name, src, loc, out_dtypes)
        if name == "convert_element_type":
            got = _convert(eqn, invals[0], out_dtypes[0])
            if type(got) is Unknown:
                return [Unknown(f"{got.why}{src}", loc)], False
            return _decided([got], name, src, loc, out_dtypes)
        if name == "neg":
            lo, hi, _ = _bounds(invals[0])
            return _bounded_or_point([(-hi, -lo)], origin, loc, out_dtypes)
        if name == "abs":
            lo, hi, _ = _bounds(invals[0])
            mag = np.maximum(np.abs(lo), np.abs(hi))
            low = np.where(lo >= 0, lo, np.where(hi <= 0, -hi, 0.0))
            return _bounded_or_point([(low, mag)], origin, loc, out_dtypes)
        if name in MONOTONE:
            los, his = _apply(fn, eqn, invals, 0), _apply(fn, eqn, invals, 1)
            return _bounded_or_point(list(zip(los, his)), origin, loc, out_dtypes)
    except (ValueError, IndexError, TypeError) as e:  # a numpy corner (a shape the rule does not cover)
        return [Unknown(f"{name} on a value known only within bounds ({type(e).__name__}){src}", loc)
                for _ in out_dtypes], False
    return [Unknown(f"float arithmetic semcheck does not bound ({name}) on a value known only within bounds{src}",
                    loc) for _ in out_dtypes], False


def lane_reshape(x: Any, f: Callable[[np.ndarray], np.ndarray]) -> Any:
    """`f` applied to a lane array, or to both bounds of a `Bounded` value."""
    return Bounded(x.why, x.loc, f(x.lo), f(x.hi), x.dtype) if type(x) is Bounded else f(x)


def _dtype(x: Any) -> Any:
    return x.dtype if type(x) in (np.ndarray, Bounded) else None


def _bounds(x: Any) -> tuple[Any, Any, bool]:
    """(lo, hi, whether float): a Bounded value's bounds, an exact float array as a point, other arrays raw."""
    if type(x) is Bounded:
        return x.lo, x.hi, True
    if is_float(x.dtype):
        v = np.asarray(x, dtype=np.float64)
        return v, v, True
    return x, x, False


def _apply(fn: Callable[..., Any], eqn: Any, invals: list[Any], side: int) -> list[np.ndarray]:
    out = fn(eqn, *(_bounds(x)[side] for x in invals))
    return [np.asarray(o) for o in (out if eqn.primitive.multiple_results else [out])]


def _bounded_or_point(pairs: list[tuple[np.ndarray, np.ndarray]], origin: Any, loc: Loc,
                      out_dtypes: Sequence[Any]) -> tuple[list[Any], bool]:
    """Bounded results; a result whose bounds meet (a floor both bounds floor alike) is its value, exactly."""
    outs, decided = [], False
    for (lo, hi), dtype in zip(pairs, out_dtypes):
        lo, hi = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
        point = np.asarray(lo, dtype=dtype) if dtype is not None else None
        if point is not None and bool((lo == hi).all()) and bool((point.astype(np.float64) == lo).all()):
            outs.append(point)
            decided = True
        else:
            outs.append(Bounded(origin.why, origin.loc, lo, hi, dtype))
    return outs, decided


def _decided(outs: list[Any], name: str, src: str, loc: Loc, out_dtypes: Sequence[Any]) -> tuple[list[Any], bool]:
    if any(o is None for o in outs):
        return [Unknown(f"a near tie among the values {name} compares: their bounds overlap{src} (ACC-36)", loc)
                for _ in out_dtypes], False
    return outs, any(type(o) is np.ndarray for o in outs)


def _widen(lo: np.ndarray, hi: np.ndarray, rel: float, extra: Any = 0.0) -> tuple[np.ndarray, np.ndarray] | str:
    r = rel + SLACK
    lo, hi = lo - np.abs(lo) * r - extra, hi + np.abs(hi) * r + extra
    if not (np.isfinite(lo).all() and np.isfinite(hi).all()) or (np.abs(lo) > _MAX).any() or (np.abs(hi) > _MAX).any():
        return "a float result that may overflow"
    if ((lo < _TINY) & (hi > -_TINY) & ~((lo == 0) & (hi == 0))).any():
        return "a float result that may be subnormal or of either sign (XLA on the CPU flushes subnormals)"
    return lo, hi


def _rounding(name: str, eqn: Any, invals: list[Any]) -> tuple[np.ndarray, np.ndarray] | str:
    bounds = [_bounds(x)[:2] for x in invals]
    if name == "exp":
        ((lo, hi),) = bounds
        if np.isposinf(hi).any() or np.isnan(lo).any():
            return "an exp of an unbounded value"
        with np.errstate(over="ignore"):
            elo, ehi = np.exp(lo), np.exp(hi)
        zero = np.isneginf(hi)  # exp(-inf) is exactly 0 everywhere
        got = _widen(np.where(zero, 1.0, elo), np.where(zero, 1.0, ehi), FUNCTIONS[name])
        if isinstance(got, str):
            return got
        return np.where(zero, 0.0, got[0]), np.where(zero, 0.0, got[1])
    if name in ("add", "sub"):
        return _sum_of_two(name, *bounds)
    if not all(np.isfinite(b).all() for pair in bounds for b in pair):
        return f"a {name} of a value that is not finite"
    if name in FUNCTIONS:
        ((lo, hi),) = bounds
        if name == "log" and (lo <= 0).any():
            return "a log of a value that may not be positive"
        f = {"log": np.log, "tanh": np.tanh, "logistic": lambda v: 1.0 / (1.0 + np.exp(-v))}[name]
        with np.errstate(over="ignore"):
            return _widen(f(lo), f(hi), FUNCTIONS[name])
    if name == "reduce_sum":
        ((lo, hi),) = bounds
        axes = tuple(int(a) + 1 for a in eqn.params["axes"])
        n = int(np.prod([lo.shape[a] for a in axes])) if axes else 1
        mag = np.maximum(np.abs(lo), np.abs(hi)).sum(axis=axes)
        extra = (max(n - 1, 0) * BASIC + n * 2.0 ** -52) * mag
        return _widen(lo.sum(axis=axes), hi.sum(axis=axes), 0.0, extra)
    (alo, ahi), (blo, bhi) = bounds
    if name == "div" and ((blo <= 0) & (bhi >= 0)).any():
        return "a division by a value that may be zero"
    op = np.multiply if name == "mul" else np.divide
    corners = np.broadcast_arrays(op(alo, blo), op(alo, bhi), op(ahi, blo), op(ahi, bhi))
    return _widen(np.minimum.reduce(corners), np.maximum.reduce(corners), BASIC)


def _sum_of_two(name: str, a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> Any:
    """`add` or `sub`: an infinite operand (exactly one, known exactly, such as a -inf that masks a padded logit)
    gives that infinity exactly, with no rounding; finite operands give the widened bounds."""
    (alo, ahi), (blo, bhi) = a, b
    if name == "sub":
        blo, bhi = -bhi, -blo
    fin_a, fin_b = np.isfinite(alo) & np.isfinite(ahi), np.isfinite(blo) & np.isfinite(bhi)
    inf_a, inf_b = np.isinf(alo) & (alo == ahi), np.isinf(blo) & (blo == bhi)
    if not ((fin_a & fin_b) | (inf_a & fin_b) | (fin_a & inf_b)).all():
        return f"a {name} of values that are not finite"
    lo, hi = alo + blo, ahi + bhi
    exact = np.broadcast_to(~(fin_a & fin_b), lo.shape)
    got = _widen(np.where(exact, 1.0, lo), np.where(exact, 1.0, hi), BASIC)
    if isinstance(got, str):
        return got
    return np.where(exact, lo, got[0]), np.where(exact, hi, got[1])


def _compare(name: str, a: Any, b: Any) -> np.ndarray | None:
    """A comparison's outcome where it is the same for every point of the bounds; None where they overlap."""
    alo, ahi, _ = _bounds(a)
    blo, bhi, _ = _bounds(b)
    if name in ("gt", "ge"):
        (alo, ahi), (blo, bhi), name = (blo, bhi), (alo, ahi), "lt" if name == "gt" else "le"
    if name == "lt":
        yes, no = ahi < blo, alo >= bhi
    elif name == "le":
        yes, no = ahi <= blo, alo > bhi
    else:
        yes = (alo == ahi) & (blo == bhi) & (alo == blo)
        no = (ahi < blo) | (bhi < alo)
        if name == "ne":
            yes, no = no, yes
    if not (yes | no).all():
        return None
    return np.asarray(yes)


def _by_order(name: str, eqn: Any, x: Any) -> list[Any]:
    """argmax/argmin/top_k where the indices are the same for every point of the bounds (None where not): the
    chosen values' lower bounds above every later candidate's upper bound, in lower-bound order."""
    lo, hi, _ = _bounds(x)
    if name == "argmin":
        lo, hi = -hi, -lo
    if name == "top_k":
        axis, k = int(eqn.params.get("axis", -1)) % (lo.ndim - 1) + 1, int(eqn.params["k"])
    else:
        axis, k = int(eqn.params["axes"][0]) + 1, 1
    n = lo.shape[axis]
    order = np.argsort(-lo, axis=axis, kind="stable")
    slo, shi = np.take_along_axis(lo, order, axis), np.take_along_axis(hi, order, axis)
    later = np.flip(np.maximum.accumulate(np.flip(shi, axis), axis), axis)  # max of hi from each position on
    for i in range(min(k, n - 1)):
        if not (np.take(slo, i, axis) > np.take(later, i + 1, axis)).all():
            return [None] * (2 if name == "top_k" else 1)
    idx = np.take(order, range(k), axis=axis)
    if name != "top_k":
        return [np.squeeze(idx, axis).astype(np.dtype(eqn.params["index_dtype"]))]
    xlo, xhi, _ = _bounds(x)
    values = Bounded(x.why, x.loc, np.take_along_axis(xlo, idx, axis), np.take_along_axis(xhi, idx, axis), x.dtype) \
        if type(x) is Bounded else np.take_along_axis(x, idx, axis)
    return [values, idx.astype(np.int32)]


def _convert(eqn: Any, x: Any, dtype: Any) -> Any:
    """A conversion of a bounded float: to an integer type where both bounds truncate alike (in range); to bool
    where no bound straddles 0; to a float type at least as wide, the same bounds. None where the bounds decide
    nothing (a near tie); `Unknown` for a conversion semcheck does not bound (a narrower float)."""
    new = np.dtype(eqn.params["new_dtype"])
    lo, hi, _ = _bounds(x)
    if new.kind in "iu":
        tlo, thi = np.trunc(lo), np.trunc(hi)
        info = np.iinfo(new)
        if (tlo != thi).any() or (tlo < info.min).any() or (tlo > info.max).any():
            return None
        return tlo.astype(new)
    if new.kind == "b":  # (true where the bounds exclude 0, false where both are 0)
        if (((lo > 0) | (hi < 0)) | ((lo == 0) & (hi == 0))).all():
            return (lo != 0) | (hi != 0)
        return None
    if new.kind == "f" and new.itemsize >= np.dtype(x.dtype).itemsize:
        return Bounded(x.why, x.loc, lo, hi, new)
    return Unknown(f"a conversion to {new.name} of a value known only within bounds, which semcheck does not bound",
                   NO_LOC)


__all__ = ["BASIC", "FUNCTIONS", "ROUNDING", "evaluate", "has_bounds", "lane_reshape", "rounds_within_bounds"]
