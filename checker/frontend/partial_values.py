"""PRG-192, PRG-193: an earlier kernel call's output known element by element, and what is computed from it.

`kernel_outputs.run_kernel` keeps, per output, the elements on which its runs agree (PRG-192): the others are
unknown. Such a value is a `Partial`, which is deliberately not an array: code that does not know it (`np.asarray`
gives an object array, `type(x) is np.ndarray` is false) sees no value, never the kept run's numbers at an unknown
element. The evaluation of ACC-8 (`concrete_inputs`) carries it through the XLA ops between the calls by `derive`
(PRG-193): an output element is known only where every input element it is computed from is; an operation whose
dependence of output on input elements this module does not state makes its whole output unknown. A launch's
operand that is a `Partial` starts the later call's tracked memory with those elements unknown
(`scalar_memory.ScalarMemory.define`), so a read of one is unknown there, with the reason.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np


class Partial:
    """An array of which some elements are unknown: `values` (the kept run's; meaningless where unknown),
    `unknown` (bool, the same shape) and `why` (the first unknown element, in words). Equal only to itself."""

    __slots__ = ("values", "unknown", "why")

    def __init__(self, values: np.ndarray, unknown: np.ndarray, why: str) -> None:
        assert values.shape == unknown.shape, (values.shape, unknown.shape)
        self.values = values
        self.unknown = unknown
        self.why = why

    @property
    def shape(self) -> tuple[int, ...]:
        return self.values.shape

    def __repr__(self) -> str:
        return f"Partial({self.values.shape}, {int(self.unknown.sum())} unknown)"


def partial(values: np.ndarray, unknown: np.ndarray | None, why: str) -> np.ndarray | Partial | None:
    """`values` with the elements `unknown` marks unknown: the array itself when none is, None when all are."""
    if unknown is None or not unknown.any():
        return values
    if unknown.all():
        return None
    return Partial(values, np.array(unknown, dtype=bool), why)


def plain(x: Any) -> Any:
    """The kept run's numbers of `x` (for checks that read dtypes and shapes, never as a value)."""
    return x.values if isinstance(x, Partial) else x


def first_unknown(unknown: np.ndarray) -> str:
    """The first unknown element in words: its index, and how many more there are."""
    flat = np.flatnonzero(unknown)
    at = [int(i) for i in np.unravel_index(int(flat[0]), unknown.shape)] if unknown.ndim else []
    more = f" (and {flat.size - 1} more)" if flat.size > 1 else ""
    return f"element {at}{more}"


def same_value(x: Any, y: Any) -> bool:
    """Whether two values (an array, a `Partial` or None) are the same: the same known elements, each equal."""
    if x is None or y is None:
        return x is None and y is None
    if isinstance(x, Partial) or isinstance(y, Partial):
        if not (isinstance(x, Partial) and isinstance(y, Partial)) or x.shape != y.shape:
            return False
        return bool(np.array_equal(x.unknown, y.unknown)) and bool(np.array_equal(x.values[~x.unknown],
                                                                                 y.values[~y.unknown]))
    return np.shape(x) == np.shape(y) and bool(np.array_equal(x, y))


def stack(per_device: Sequence[Any]) -> np.ndarray | Partial | None:
    """Per-device values of one shape (arrays or `Partial`s) -> one lane array (leading axis 1 when every device
    agrees), a `Partial` one where some element is unknown on some device."""
    values = np.stack([np.asarray(plain(v)) for v in per_device])
    unknown = np.stack([v.unknown if isinstance(v, Partial) else np.zeros(np.shape(v), bool) for v in per_device])
    if values.shape[0] > 1 and bool((unknown == unknown[:1]).all()) and bool(
            (np.where(unknown, values[:1], values) == values[:1]).all()):
        values, unknown = values[:1], unknown[:1]
    why = next((v.why for v in per_device if isinstance(v, Partial)), "")
    return partial(values, unknown, why)


# Operations each element of whose output is computed from the elements at the same index of its operands (an
# operand of shape () is every index's).
ELEMENTWISE = frozenset({
    "add", "sub", "mul", "div", "rem", "max", "min", "neg", "abs", "sign", "and", "or", "not", "xor", "eq", "ne",
    "lt", "le", "gt", "ge", "shift_left", "shift_right_logical", "shift_right_arithmetic", "convert_element_type",
    "select_n", "clamp", "integer_pow", "square", "floor", "ceil", "round", "population_count", "clz"})
# Operations each element of whose output is one element of an operand, or a constant, at a position the
# operation's parameters and its index operands (which must be known) fix: run on the masks, they move each mask
# element as they move the value's.
MOVES = frozenset({"slice", "reshape", "squeeze", "expand_dims", "broadcast_in_dim", "transpose", "rev",
                   "concatenate", "copy", "copy_p", "pad", "dynamic_slice", "dynamic_update_slice"})
# Operations whose data operands come first, the index operands after them (which must be known).
_DATA_OPERANDS = {"dynamic_slice": 1, "dynamic_update_slice": 2, "pad": 2}
# Reductions over `axes` (an output element is unknown where any element it reduces is) and scans along `axis`.
REDUCTIONS = frozenset({"reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "reduce_and", "reduce_or",
                        "reduce_xor", "argmax", "argmin"})
SCANS = frozenset({"cumsum", "cumprod", "cummax", "cummin", "cumlogsumexp"})


def derive(eqn: Any, invals: Sequence[Any], bind: Callable[[list[Any]], list[Any] | None]) -> list[Any] | None:
    """PRG-193: `eqn`'s outputs where some operand is a `Partial`: arrays, `Partial`s, None (all unknown); or None
    when this module does not say which output elements depend on which input elements (then all are unknown).
    `bind` computes the outputs from plain operands (the kept run's numbers at unknown elements)."""
    name = eqn.primitive.name
    if eqn.primitive.multiple_results or len(eqn.outvars) != 1:
        return None
    why = next(x.why for x in invals if isinstance(x, Partial))
    data = _DATA_OPERANDS.get(name, len(invals))
    if any(isinstance(x, Partial) for x in invals[data:]) or any(x is None for x in invals):
        return None  # an index of a move that is not known: it may name any element
    if name in ELEMENTWISE:
        mask = _elementwise_mask(eqn, invals)
    elif name in MOVES:
        mask = _moved_mask(eqn, invals, data)
    elif name in REDUCTIONS:
        axes = tuple(eqn.params["axes"])
        mask = np.asarray(invals[0].unknown).any(axis=axes) if len(invals) == 1 else None
    elif name in SCANS:
        mask = _scanned_mask(eqn, invals[0])
    else:
        return None
    if mask is None:
        return None
    got = bind([plain(x) for x in invals])
    if got is None or len(got) != 1 or type(got[0]) is not np.ndarray or got[0].shape != mask.shape:
        return None
    return [partial(got[0], mask, why)]


def _unknown(x: Any) -> np.ndarray:
    return x.unknown if isinstance(x, Partial) else np.zeros(np.shape(x), bool)


def _out_shape(eqn: Any) -> tuple[int, ...] | None:
    shape = getattr(eqn.outvars[0].aval, "shape", None)
    return None if shape is None else tuple(int(s) for s in shape)


def _elementwise_mask(eqn: Any, invals: Sequence[Any]) -> np.ndarray | None:
    shape = _out_shape(eqn)
    if shape is None or any(np.shape(plain(x)) not in ((), shape) for x in invals):
        return None
    out = np.zeros(shape, bool)
    for x in invals:
        out |= np.broadcast_to(_unknown(x), shape)
    return out


def _moved_mask(eqn: Any, invals: Sequence[Any], data: int) -> np.ndarray | None:
    """The masks of the data operands moved as the operation moves them (by jax, on boolean arrays)."""
    try:
        import jax  # lazy: see trace's docstring

        got = eqn.primitive.get_bind_params(eqn.params)
        subfuns, params = got if isinstance(got, tuple) else ((), got)
        masks = [_unknown(x) for x in invals[:data]]
        with jax.ensure_compile_time_eval():
            out = eqn.primitive.bind(*subfuns, *masks, *invals[data:], **params)
        out = np.asarray(out)
    except Exception:  # noqa: BLE001 - not said: all unknown
        return None
    return out if out.dtype == np.bool_ and out.shape == _out_shape(eqn) else None


def _scanned_mask(eqn: Any, x: Any) -> np.ndarray | None:
    axis = int(eqn.params["axis"])
    mask = _unknown(x)
    if not 0 <= axis < mask.ndim:
        return None
    if eqn.params.get("reverse"):
        return np.flip(np.logical_or.accumulate(np.flip(mask, axis), axis=axis), axis)
    return np.logical_or.accumulate(mask, axis=axis)


__all__ = ["ELEMENTWISE", "MOVES", "Partial", "REDUCTIONS", "SCANS", "derive", "first_unknown", "partial", "plain",
           "same_value", "stack"]
