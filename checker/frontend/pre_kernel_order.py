"""Values before a kernel whose order of updates the implementation chooses (spec ACC-33).

`concrete_inputs` binds the program around a call on the example arguments (ACC-8). Two of jax's primitives
give results that depend on an order no document fixes: a `scatter` (`x.at[idx].set(v)`) whose updates
overlap ("if multiple updates are performed to the same index of operand, they may be applied in any order",
`lax.scatter`'s documentation), and a `sort` with `is_stable=False` that carries values past its keys, when
keys tie. Where such an equation's result would depend on that order (overlapping updates of different bits,
tied keys), it has no value, with the reason and the line; elsewhere (unique indices, overlapping updates that
are equal, no tie) its result is the one every order gives.

Imports of jax sit in the functions (see `trace`'s docstring).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from semcheck.checker.frontend.kernel_eqns import sub_jaxprs
from semcheck.checker.frontend.trace import eqn_loc
from semcheck.model.ops import NO_LOC

ORDERED = frozenset({"scatter", "sort"})
"""The primitives whose result may depend on an order the implementation chooses (ACC-33)."""


def has_ordered(eqn: Any, names: frozenset[str] = ORDERED) -> bool:
    """Whether a call equation (`jit`, ...) holds one of `names` (`ORDERED` primitives) at any depth: the evaluation
    then enters it, so that the equation meets `order_refusal` (and ACC-34's check), rather than binding it whole."""
    return any(e.primitive.name in names or has_ordered(e, names)
               for sub in sub_jaxprs(eqn) for e in getattr(sub, "jaxpr", sub).eqns)


def order_refusal(eqn: Any, invals: Sequence[Any], outs: Sequence[Any], outer: Any = NO_LOC) -> str | None:
    """ACC-33: why the result of `eqn` on `invals` (results `outs`) depends on an order the implementation
    chooses, at its line; None when every order gives it."""
    name = eqn.primitive.name
    if name not in ORDERED:
        return None
    why = _scatter_overlap(eqn.params, invals) if name == "scatter" else _unstable_tie(eqn.params, outs)
    if why is None:
        return None
    loc = eqn_loc(eqn, outer)
    return f"{why}{f' at {loc}' if loc.line else ''} (specs/deciding/frontend.md ACC-33)"


def _bits(x: np.ndarray) -> np.ndarray | None:
    """`x`'s elements as unsigned integers of their width (so -0.0 and 0.0, or two NaNs, differ), None past 32 bits."""
    size = np.dtype(x.dtype).itemsize
    if size > 4:
        return None
    return np.ascontiguousarray(x).view({1: np.uint8, 2: np.uint16, 4: np.uint32}[size])


def _scatter_overlap(params: dict[str, Any], invals: Sequence[Any]) -> str | None:
    """A scatter whose updates meet at an element with different bits (counted by jax's own scatter-add of ones,
    with the equation's dimension numbers and mode, so clipped or dropped indices count as the scatter places them)."""
    from jax import lax

    operand, indices, updates = (np.asarray(x) for x in invals[:3])
    kw = dict(dimension_numbers=params["dimension_numbers"], mode=params.get("mode"))
    try:
        count = np.asarray(lax.scatter_add(np.zeros(operand.shape, np.int32), indices,
                                           np.ones(updates.shape, np.int32), **kw))
        if not (count > 1).any():
            return None
        bits = _bits(updates)
        if bits is not None:
            info = np.iinfo(bits.dtype)
            hi = np.asarray(lax.scatter_max(np.full(operand.shape, info.min, bits.dtype), indices, bits, **kw))
            lo = np.asarray(lax.scatter_min(np.full(operand.shape, info.max, bits.dtype), indices, bits, **kw))
            if not ((count > 1) & (hi != lo)).any():
                return None
    except Exception:  # noqa: BLE001 - an overlap semcheck cannot rule out is refused
        pass
    return ("a scatter whose updates overlap with different values (which update wins is the implementation's: "
            "'they may be applied in any order')")


def _unstable_tie(params: dict[str, Any], outs: Sequence[Any]) -> str | None:
    """A sort that may reorder equal keys (`is_stable=False`) and carries other operands, where keys tie."""
    keys = int(params.get("num_keys", 1))
    if params.get("is_stable", False) or len(outs) <= keys:
        return None
    dim = int(params["dimension"])
    ks = [np.moveaxis(np.asarray(o), dim, -1) for o in outs[:keys]]
    if any(k.dtype.kind == "f" and (np.isnan(k).any() or (k == 0).any()) for k in ks):
        tie = True  # (a NaN, or zeros of either sign, order by their bits or not at all)
    else:
        tie = bool(np.logical_and.reduce([k[..., 1:] == k[..., :-1] for k in ks]).any()) if ks[0].shape[-1] > 1 \
            else False
    if not tie:
        return None
    return ("an unstable sort (is_stable=False) of keys that tie, carrying other values (the order of equal keys is "
            "the implementation's)")


__all__ = ["ORDERED", "has_ordered", "order_refusal"]
