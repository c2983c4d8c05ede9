"""The numeric primitives: scalar (and small array) integer and float arithmetic.

Enough of `jax.lax` to compute semaphore indices, device ids, signal
increments, wait values and trip counts. `NumericRules._numeric` is the rule
of every primitive without a rule of its own: a primitive missing from the
table, or one applied to an opaque value or a ref, gives `Unknown`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from jax._src.state import types as state_types

from semcheck.checker.frontend.int_overflow import int_overflow
from semcheck.checker.frontend.errors import Unsupported
from semcheck.checker.frontend.evaluator import Evaluator, sub_jaxprs
from semcheck.checker.frontend.float_bounds import evaluate, has_bounds, lane_reshape, rounds_within_bounds
from semcheck.checker.frontend.range_cases import case_value
from semcheck.checker.frontend.float_exact import CHECKED, EXACT, inexact, involves_floats, refusal
from semcheck.checker.frontend.values import MAX_EVAL_ELEMENTS, Bounded, BufRef, SemArray, SomeLanes, Unknown, opaque
from semcheck.model.ops import Access, Region


class NumericRules(Evaluator):
    """The fallback rule: evaluate a primitive with the `NUMERIC` table, or give `Unknown`."""

    # ACC-28: the first tie followed only because the launch's values are the interpreter modes' ("" while none)
    cpu_only: str = ""

    def _unknown_accesses(self, eqn: Any, invals: list[Any]) -> None:
        """ACC-2: a buffer ref handed to a higher-order primitive semcheck does not know may be read
        or written anywhere inside it: a write of the whole buffer, widened, so that race-free is
        unknown there rather than proved on accesses the lowering never saw."""
        loc = self.loc(eqn)
        why = f"passed to {eqn.primitive.name} at {loc}, whose body semcheck does not lower"
        for x in invals:
            while isinstance(x, state_types.TransformedRef):
                x = x.ref
            if type(x) is BufRef:
                op = Access(x.name, Region((), exact=False, why=why), True, loc)
                for d in self.active(None):
                    self.bodies[d].append(op)

    def _numeric(self, eqn: Any, invals: list[Any]) -> list[Any]:
        prim = eqn.primitive
        for x in invals:
            if isinstance(x, SemArray):
                raise Unsupported(prim.name, "a primitive semcheck does not know is applied to a semaphore",
                                  self.loc(eqn))
        fn = NUMERIC.get(prim.name)
        if fn is None:
            if any(True for _ in sub_jaxprs(eqn.params, self._jaxpr_types)):
                if any(self._has_sem_ops(s) for s in sub_jaxprs(eqn.params, self._jaxpr_types)):
                    raise Unsupported(prim.name, "semaphore or DMA operations inside a higher-order "
                                      "primitive semcheck does not know", self.loc(eqn))
                self._unknown_accesses(eqn, invals)
            return [Unknown(f"the result of {prim.name}", self.loc(eqn)) for _ in eqn.outvars]
        if (cased := case_value(self, eqn, invals, self.loc(eqn))) is not None:  # ACC-64: a known range, by cases
            return cased
        if prim.name == "select_n":
            invals = unpicked_cases(eqn, invals)
        elif prim.name in _LANEWISE and any(type(x) is SomeLanes for x in invals):
            return self._some_lanes(eqn, invals)
        bounded = has_bounds(invals)  # ACC-35: float values known within bounds are read by `float_bounds`
        for x in invals:
            if type(x) is not np.ndarray and not (bounded and type(x) is Bounded):
                if isinstance(x, Unknown):
                    return [opaque(x) for _ in eqn.outvars]
                return [Unknown(f"the result of {prim.name} on a ref", self.loc(eqn)) for _ in eqn.outvars]
        for v in eqn.outvars:
            shape = getattr(v.aval, "shape", None)
            if shape is None or math.prod(shape) > MAX_EVAL_ELEMENTS:
                return [Unknown(f"a large {prim.name} result (not evaluated)", self.loc(eqn)) for _ in eqn.outvars]
        if prim.name in _ELEMENTWISE:
            invals = _lift_scalars(eqn, invals)
        if bounded:
            return self._bounded(eqn, invals, fn, opaque(next(x for x in invals if type(x) is not np.ndarray)))
        floats = involves_floats(invals, [getattr(v.aval, "dtype", None) for v in eqn.outvars])
        if floats or prim.name == "top_k":  # ACC-25: exact operations on float data only; ties a top-k breaks
            why = refusal(prim.name, invals, eqn.params)
            if why is not None and prim.name not in EXACT and prim.name not in CHECKED and self._bounds_followed(
                    eqn, invals):  # ACC-35: arithmetic that rounds, within bounds in the interpreter's modes
                return self._bounded(eqn, invals, fn, Unknown(f"{why} (ACC-25{self._unbounded(eqn, invals)})",
                                                              self.loc(eqn)))
            if why is not None and getattr(getattr(self, "_inputs", None), "on_cpu", False) and refusal(
                    prim.name, invals, eqn.params, ties=True) is None:  # ACC-28: a tie numpy breaks as XLA does
                self.cpu_only = self.cpu_only or f"{why} at {self.loc(eqn)} (specs/deciding/frontend.md ACC-28)"
                why = None
            if why is not None:
                return [Unknown(f"{why} (ACC-25{self._unbounded(eqn, invals)})", self.loc(eqn)) for _ in eqn.outvars]
        if (over := int_overflow(prim.name, invals)) is not None:  # ACC-34: XLA on the CPU's value
            if not getattr(getattr(self, "_inputs", None), "on_cpu", False):
                return [Unknown(f"{over} (ACC-34)", self.loc(eqn)) for _ in eqn.outvars]
            self.cpu_only = self.cpu_only or f"{over} at {self.loc(eqn)} (specs/deciding/frontend.md ACC-34)"
        try:
            out = fn(eqn, *invals)
        except Unsupported:
            raise
        except Exception as e:  # a numpy corner the table does not cover
            return [Unknown(f"{prim.name} ({type(e).__name__})", self.loc(eqn)) for _ in eqn.outvars]
        if not prim.multiple_results:
            out = [out]
        if floats and prim.name in CHECKED:
            why = inexact(prim.name, invals, out, eqn.params)
            if why is not None and self._bounds_followed(eqn, invals):  # ACC-35
                return self._bounded(eqn, invals, fn, Unknown(f"{why} (ACC-25{self._unbounded(eqn, invals)})",
                                                              self.loc(eqn)))
            if why is not None:
                return [Unknown(f"{why} (ACC-25{self._unbounded(eqn, invals)})", self.loc(eqn)) for _ in eqn.outvars]
        res = []
        for v, o in zip(eqn.outvars, out):
            dtype = getattr(v.aval, "dtype", None)
            if type(o) is np.ndarray and dtype is not None and o.dtype != dtype:
                try:
                    o = o.astype(dtype)
                except TypeError:
                    o = Unknown(f"a {dtype} value")
            res.append(o)
        return res

    def _some_lanes(self, eqn: Any, invals: list[Any]) -> list[Any]:
        """ACC-60: a lane-wise integer operation on values known on some lanes: computed on every lane (an unknown
        lane holds a known lane's values), its result known on the lanes every operand knows. Otherwise (an
        operand unknown on every lane, float data) the plain `Unknown` of the first such operand."""
        known = None
        for x in invals:
            if type(x) is SomeLanes and x.values.dtype.kind in "biu":
                known = x.known if known is None else known & x.known
            elif type(x) is not np.ndarray or x.dtype.kind not in "biu":
                break
        else:
            if all(getattr(v.aval, "dtype", np.dtype("f4")).kind in "biu" for v in eqn.outvars):
                outs = self._numeric(eqn, [x.values if type(x) is SomeLanes else x for x in invals])
                first = next(x for x in invals if type(x) is SomeLanes)
                return [SomeLanes(first.why, first.loc, o, known) if type(o) is np.ndarray and o.shape[0] == len(known)
                        else opaque(o) for o in outs]
        first = next(x for x in invals if isinstance(x, Unknown) or type(x) is not np.ndarray)
        return [opaque(first) if isinstance(first, Unknown) else Unknown(f"the result of {eqn.primitive.name} on a ref",
                                                                         self.loc(eqn)) for _ in eqn.outvars]

    def _bounds_followed(self, eqn: Any, invals: list[Any]) -> bool:
        """ACC-35, ACC-37: whether this operation that rounds is followed within bounds: in a lowering for the
        interpreter's modes (hardware's refuses it, naming the line), on float32; ACC-74: in `hardware`'s lowering
        by cases too, as the bounds of the exact value, from which nothing is decided (`_bounded`)."""
        inputs = getattr(self, "_inputs", None)
        return (getattr(inputs, "on_cpu", False) or getattr(inputs, "cases", None) is not None) and \
            rounds_within_bounds(eqn.primitive.name, invals, [getattr(v.aval, "dtype", None) for v in eqn.outvars])

    def _unbounded(self, eqn: Any, invals: list[Any]) -> str:
        """ACC-37: why an operation semcheck bounds is not followed here (a lowering for hardware, or for every
        mode at once); "" for one it does not bound."""
        if not rounds_within_bounds(eqn.primitive.name, invals, [getattr(v.aval, "dtype", None) for v in eqn.outvars]):
            return ""
        return "; its bounds are followed only where jax's interpreter modes compute it, ACC-37"

    def _bounded(self, eqn: Any, invals: list[Any], fn: Callable[..., Any], plain: Unknown) -> list[Any]:
        """ACC-35, ACC-36: the results of `eqn` on values known within bounds; a known result decided from
        bounds holds in the interpreter's modes only (ACC-37: `hardware` is lowered again without bounds).
        ACC-74: in `hardware`'s lowering by cases, a result keeps the bounds of its exact value as the `plain`
        unknown the lowering without bounds gave (its reason and line), and nothing is decided from them."""
        loc = self.loc(eqn)
        outs, decided = evaluate(eqn.primitive.name, eqn, invals, fn, loc,
                                 [getattr(v.aval, "dtype", None) for v in eqn.outvars])
        if not getattr(getattr(self, "_inputs", None), "on_cpu", False):
            outs, decided = [Bounded(plain.why, plain.loc, o.lo, o.hi, o.dtype) if type(o) is Bounded
                             else Unknown(plain.why, plain.loc) for o in outs], False
        self.bounds_made = self.bounds_made or any(type(o) is Bounded for o in outs)
        if decided:
            self.cpu_only = self.cpu_only or (f"a {eqn.primitive.name} decided on float values known within bounds "
                                              f"at {loc} (specs/deciding/frontend.md ACC-36)")
        return outs


def _lift_scalars(eqn: Any, invals: list[np.ndarray]) -> list[np.ndarray]:
    """Rank-0 operands of an elementwise primitive with a higher-rank result, as lane arrays of that rank.

    jax's binary ops broadcast a rank-0 operand implicitly (`lt(iota, n)` with n a scalar); a scalar's lane
    array has only the lane axis, so numpy would align it with the result's last axis instead.
    """
    rank = len(getattr(eqn.outvars[0].aval, "shape", ()))
    if rank == 0:
        return invals
    return [lane_reshape(x, lambda a: a.reshape(a.shape[0], *(1,) * rank))
            if getattr(v.aval, "shape", None) == () and (x.lo if type(x) is Bounded else x).ndim == 1 else x
            for v, x in zip(eqn.invars, invals)]


# --- numeric rule table ----------------------------------------------------------
# Every rule takes lane arrays (leading axis: lanes, length 1 or D) and returns
# lane arrays; axis parameters of jax are shifted by one for the lane axis.


def _ax(axes: Sequence[int]) -> tuple[int, ...]:
    return tuple(int(a) + 1 for a in axes)


def _int_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iu":
        safe = np.where(b == 0, 1, b)
        q = np.abs(a) // np.abs(safe)
        q = np.where((a < 0) ^ (safe < 0), -q, q).astype(a.dtype)
        return np.where(b == 0, np.array(-1).astype(a.dtype), q)
    return a / b


def _int_rem(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iu":
        safe = np.where(b == 0, 1, b)
        return np.where(b == 0, a, np.fmod(a, safe))
    return np.fmod(a, b)


def unpicked_cases(eqn: Any, invals: list[Any]) -> list[Any]:
    """ACC-32: a `select_n` whose predicate is known, on every lane, picks only known cases: its unknown cases
    (a value the select discards, such as a load at an index out of bounds) become zeros of their type, which
    no element of the result takes. Otherwise `invals` unchanged (the result is unknown)."""
    pred, cases = invals[0], invals[1:]
    if type(pred) is not np.ndarray or all(type(c) is np.ndarray for c in cases):
        return invals
    which = pred.astype(np.int64) if pred.dtype == np.bool_ else np.clip(pred.astype(np.int64), 0, len(cases) - 1)
    for k in np.unique(which):
        c = cases[int(k)]
        if type(c) is SomeLanes:  # ACC-60: picked only on lanes that know it
            lanes = (which == k).reshape(which.shape[0], -1).any(axis=1)
            if lanes.shape[0] not in (1, c.known.shape[0]) or (lanes & ~c.known).any():
                return invals
        elif type(c) is not np.ndarray:
            return invals
    filler = []
    for v, c in zip(eqn.invars[1:], cases):
        shape, dtype = getattr(v.aval, "shape", None), getattr(v.aval, "dtype", None)
        if type(c) is not np.ndarray and type(c) is not SomeLanes and (shape is None or dtype is None):
            return invals
        filler.append(c if type(c) is np.ndarray else c.values if type(c) is SomeLanes else
                      np.zeros((1, *shape), dtype=dtype))
    return [pred, *filler]


def _select_n(eqn: Any, pred: np.ndarray, *cases: np.ndarray) -> np.ndarray:
    if len(cases) == 1:
        return cases[0]
    if pred.dtype == np.bool_:
        return np.where(pred, cases[1], cases[0])
    which = np.clip(pred.astype(np.int64), 0, len(cases) - 1)
    arrays = np.broadcast_arrays(which, *cases)
    return np.choose(arrays[0], arrays[1:])


def _convert(eqn: Any, x: np.ndarray) -> np.ndarray:
    new = np.dtype(eqn.params["new_dtype"])
    if x.dtype.kind == "f" and new.kind in "iu":
        x = np.trunc(np.nan_to_num(x))
    return x.astype(new)


def _broadcast_in_dim(eqn: Any, x: np.ndarray, *dyn: np.ndarray) -> np.ndarray:
    shape = tuple(eqn.params["shape"])
    dims = eqn.params["broadcast_dimensions"]
    lanes = x.shape[0]
    new_shape = [lanes] + [1] * len(shape)
    for i, d in enumerate(dims):
        new_shape[d + 1] = x.shape[i + 1]
    return np.broadcast_to(x.reshape(new_shape), (lanes,) + shape)


def _reshape(eqn: Any, x: np.ndarray, *dyn: np.ndarray) -> np.ndarray:
    return x.reshape((x.shape[0],) + tuple(eqn.params["new_sizes"]))


def _iota(eqn: Any) -> np.ndarray:
    p = eqn.params
    shape = tuple(p["shape"])
    dim = p["dimension"]
    r = np.arange(shape[dim], dtype=np.dtype(p["dtype"]))
    view = [1] * len(shape)
    view[dim] = shape[dim]
    return np.broadcast_to(r.reshape(view), shape)[None]


def _slice(eqn: Any, x: np.ndarray) -> np.ndarray:
    p = eqn.params
    strides = p.get("strides") or (1,) * len(p["start_indices"])
    idx = (slice(None),) + tuple(
        slice(s, l, st) for s, l, st in zip(p["start_indices"], p["limit_indices"], strides)
    )
    return x[idx]


def _dynamic_slice(eqn: Any, x: np.ndarray, *starts: np.ndarray) -> np.ndarray:
    sizes = eqn.params["slice_sizes"]
    lanes = max([x.shape[0]] + [s.shape[0] for s in starts])
    out = []
    for lane in range(lanes):
        xl = x[min(lane, x.shape[0] - 1)]
        idx = []
        for d, (s, size) in enumerate(zip(starts, sizes)):
            st = int(s.reshape(s.shape[0])[min(lane, s.shape[0] - 1)])
            st = min(max(st, 0), xl.shape[d] - size)
            idx.append(slice(st, st + size))
        out.append(xl[tuple(idx)])
    return np.stack(out)


def _concatenate(eqn: Any, *xs: np.ndarray) -> np.ndarray:
    lanes = max(x.shape[0] for x in xs)
    xs = tuple(np.broadcast_to(x, (lanes,) + x.shape[1:]) for x in xs)
    return np.concatenate(xs, axis=eqn.params["dimension"] + 1)


def _stack(eqn: Any, *xs: np.ndarray) -> np.ndarray:
    lanes = max(x.shape[0] for x in xs)
    xs = tuple(np.broadcast_to(x, (lanes,) + x.shape[1:]) for x in xs)
    return np.stack(xs, axis=eqn.params["axis"] + 1)


def _squeeze(eqn: Any, x: np.ndarray) -> np.ndarray:
    return np.squeeze(x, axis=_ax(eqn.params["dimensions"]))


def _transpose(eqn: Any, x: np.ndarray) -> np.ndarray:
    return np.transpose(x, (0,) + _ax(eqn.params["permutation"]))


def _reduce(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    return lambda eqn, x: fn(x, axis=_ax(eqn.params["axes"]))


def _arg(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    def rule(eqn: Any, x: np.ndarray) -> np.ndarray:
        (axis,) = eqn.params["axes"]
        return fn(x, axis=axis + 1).astype(np.dtype(eqn.params["index_dtype"]))

    return rule


def _top_k(eqn: Any, x: np.ndarray) -> list[np.ndarray]:
    """`lax.top_k`: the `k` largest along `axis` (the last by default), largest first, and their indices
    (a tie never reaches here: `float_exact.refusal`)."""
    axis = int(eqn.params.get("axis", -1)) % (x.ndim - 1) + 1
    order = np.argsort(-np.asarray(x, dtype=np.float64), axis=axis, kind="stable")
    idx = np.take(order, range(int(eqn.params["k"])), axis=axis)
    return [np.take_along_axis(x, idx, axis=axis), idx.astype(np.int32)]


def _shift_right_logical(eqn: Any, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    bits = a.dtype.itemsize * 8
    u = a.view(np.dtype(f"u{a.dtype.itemsize}")) if a.dtype.kind == "i" else a
    out = np.where(b >= bits, 0, u >> np.clip(b, 0, bits - 1).astype(u.dtype))
    return out.astype(u.dtype).view(a.dtype)


def _shift_right_arithmetic(eqn: Any, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    bits = a.dtype.itemsize * 8
    return a >> np.clip(b, 0, bits - 1).astype(a.dtype)


def _shift_left(eqn: Any, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    bits = a.dtype.itemsize * 8
    return np.where(b >= bits, 0, a << np.clip(b, 0, bits - 1).astype(a.dtype)).astype(a.dtype)


def _clamp(eqn: Any, lo: np.ndarray, x: np.ndarray, hi: np.ndarray) -> np.ndarray:
    return np.minimum(np.maximum(x, lo), hi)


def _integer_pow(eqn: Any, x: np.ndarray) -> np.ndarray:
    return np.power(x, eqn.params["y"])


def _round(eqn: Any, x: np.ndarray) -> np.ndarray:
    method = int(getattr(eqn.params.get("rounding_method"), "value", eqn.params.get("rounding_method", 0)))
    if method == 0:  # away from zero
        return np.sign(x) * np.floor(np.abs(x) + 0.5)
    return np.round(x)


def _binary(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[..., np.ndarray]:
    return lambda eqn, a, b: fn(a, b)


def _unary(fn: Callable[[np.ndarray], np.ndarray]) -> Callable[..., np.ndarray]:
    return lambda eqn, a: fn(a)


def _identity(eqn: Any, *xs: np.ndarray) -> Any:
    return list(xs) if eqn.primitive.multiple_results else xs[0]


NUMERIC: dict[str, Callable[..., Any]] = {
    "add": _binary(np.add),
    "sub": _binary(np.subtract),
    "mul": _binary(np.multiply),
    "div": _binary(_int_div),
    "rem": _binary(_int_rem),
    "max": _binary(np.maximum),
    "min": _binary(np.minimum),
    "pow": _binary(np.power),
    "and": _binary(np.bitwise_and),
    "or": _binary(np.bitwise_or),
    "xor": _binary(np.bitwise_xor),
    "eq": _binary(np.equal),
    "ne": _binary(np.not_equal),
    "lt": _binary(np.less),
    "le": _binary(np.less_equal),
    "gt": _binary(np.greater),
    "ge": _binary(np.greater_equal),
    "nextafter": _binary(np.nextafter),
    "atan2": _binary(np.arctan2),
    "shift_left": _shift_left,
    "shift_right_logical": _shift_right_logical,
    "shift_right_arithmetic": _shift_right_arithmetic,
    "neg": _unary(np.negative),
    "sign": _unary(np.sign),
    "abs": _unary(np.abs),
    "not": _unary(np.invert),
    "floor": _unary(np.floor),
    "ceil": _unary(np.ceil),
    "round": _round,
    "sqrt": _unary(np.sqrt),
    "exp": _unary(np.exp),
    "log": _unary(np.log),
    "tanh": _unary(np.tanh),
    "logistic": _unary(lambda a: 1 / (1 + np.exp(-a))),
    "population_count": _unary(lambda a: np.bitwise_count(a)),
    "integer_pow": _integer_pow,
    "select_n": _select_n,
    "clamp": _clamp,
    "convert_element_type": _convert,
    "broadcast_in_dim": _broadcast_in_dim,
    "reshape": _reshape,
    "squeeze": _squeeze,
    "transpose": _transpose,
    "iota": _iota,
    "slice": _slice,
    "dynamic_slice": _dynamic_slice,
    "concatenate": _concatenate,
    "stack": _stack,
    "reduce_sum": _reduce(np.sum),
    "reduce_max": _reduce(np.max),
    "reduce_min": _reduce(np.min),
    "reduce_prod": _reduce(np.prod),
    "reduce_and": _reduce(np.all),
    "reduce_or": _reduce(np.any),
    "argmax": _arg(np.argmax),
    "argmin": _arg(np.argmin),
    "top_k": _top_k,
    "copy": _identity,
    "copy_p": _identity,
    "multiple_of": _identity,
    "optimization_barrier": _identity,
    "pvary": _identity,
    "stop_gradient": _identity,
}


# ACC-60: primitives whose result on a lane is computed from the operands on that lane only
_LANEWISE = frozenset({"add", "sub", "mul", "div", "rem", "max", "min", "and", "or", "xor", "eq", "ne", "lt", "le",
                       "gt", "ge", "shift_left", "shift_right_logical", "shift_right_arithmetic", "clamp",
                       "convert_element_type", "neg", "not", "abs", "sign", "integer_pow"})
# Primitives that apply elementwise, whose rank-0 operands jax broadcasts (`_lift_scalars`).
_ELEMENTWISE = frozenset({"add", "sub", "mul", "div", "rem", "max", "min", "pow", "and", "or", "xor", "eq",
                          "ne", "lt", "le", "gt", "ge", "nextafter", "shift_left", "shift_right_logical",
                          "shift_right_arithmetic", "select_n", "clamp"})
