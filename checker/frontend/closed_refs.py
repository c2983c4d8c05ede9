"""Kernels that close over refs (spec LAUNCH-4): the pallas_call jax runs for them.

The front end meets such a call twice (tracing, then the concrete evaluation of its scalar
operands), and discharging traces the kernel again, so the discharged equation is kept per
equation for the process's one trace.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from semcheck.checker.frontend.errors import Unsupported
from semcheck.checker.frontend.source_names import eqn_loc, jaxpr_arg_names
from semcheck.model.ops import Loc

_DISCHARGED: dict[int, tuple[Any, Any]] = {}


def discharged(eqn: Any, loc: Loc, axes: dict[str, int] | None = None) -> Any:
    """LAUNCH-4: the pallas_call equation jax runs for `eqn`, a kernel closing over refs.

    Refs a kernel closes over (in `run_state`, a stateful pallas_call) are constants of its jaxpr.
    jax cannot lower such a call: it runs the call its state discharge rule makes of it
    (`_pallas_call_state_discharge_rule` of `pallas/pallas_call.py`, applied when `run_state` is
    discharged), where each closed-over ref is an input in memory space ANY, after the index
    operands, aliased to an extra output in front of the others. This applies that rule; the new
    equation's operands are `discharged_order(eqn, eqn.invars)`. `axes` are the mesh axes the call
    sees (the rule traces the kernel again, and its `axis_index`es need them).
    """
    hit = _DISCHARGED.get(id(eqn))
    if hit is not None and hit[0] is eqn:
        return hit[1]
    import jax  # lazy: see the module docstring
    from jax._src.pallas import pallas_call as pallas_call_mod
    from jax._src.state import discharge as state_discharge

    jaxpr = eqn.params["jaxpr"]
    try:
        rule = state_discharge._discharge_rules[pallas_call_mod.pallas_call_p]
        in_avals = [v.aval for v in eqn.invars]
        ctx = state_discharge.DischargeContext(in_avals, [v.aval for v in eqn.outvars], [True] * len(in_avals), False)
        values = [getattr(a, "inner_aval", a) for a in in_avals]

        def run(*args: Any) -> Any:
            return rule(ctx, *args, **eqn.params)[0]

        closed = jax.make_jaxpr(run, axis_env=list((axes or {}).items()))(
            *[jax.ShapeDtypeStruct(a.shape, a.dtype) for a in values])
        (new,) = [e for e in closed.jaxpr.eqns if e.primitive is pallas_call_mod.pallas_call_p]
    except Exception as e:  # a kernel constant jax's rule does not take (only refs are allowed)
        raise Unsupported("pallas_call", f"the kernel closes over {len(jaxpr.constvars)} value(s) semcheck "
                          f"cannot pass as operands ({type(e).__name__}: {e})", loc) from e
    _DISCHARGED[id(eqn)] = (eqn, new)
    return new


def discharged_order(eqn: Any, xs: Sequence[Any]) -> list[Any]:
    """`xs` (one per operand of pallas_call `eqn`) in the order of the call jax runs (LAUNCH-4): the
    refs a kernel closes over come first in `eqn`, after its dynamic grid bounds and index operands
    in the discharged call."""
    k = len(getattr(eqn.params["jaxpr"], "constvars", ()))
    if not k:
        return list(xs)
    gm = eqn.params["grid_mapping"]
    head = gm.num_dynamic_grid_bounds + gm.num_index_operands
    return [*xs[k : k + head], *xs[:k], *xs[k + head :]]


def closed_names(jaxpr: Any, gm: Any) -> list[str]:
    """Operand names of the discharged call (LAUNCH-4) from the kernel's own (`jaxpr`, grid mapping
    `gm`): the closed-over refs are inputs after the index operands and outputs before the others."""
    names = jaxpr_arg_names(jaxpr)
    if not names:
        return []
    k = len(jaxpr.constvars)
    nidx, nin = gm.num_index_operands, gm.num_inputs
    refs = [f"closed_ref{i}" for i in range(k)]
    return [*names[:nidx], *refs, *names[nidx:nidx + nin], *(f"{r}_out" for r in refs), *names[nidx + nin:]]


def refuse_closed_values(jaxpr: Any, loc: Loc) -> None:
    """LAUNCH-6: a `core_map` kernel closing over a scalar value (jax makes it an operand of the call, as it
    makes a closed-over ref one) is not lowered when the kernel uses it: jax's interpreter gives every
    operand of the kernel the integer id of the buffer it allocates for it, so the kernel computes with
    that id in the value's place, which semcheck does not model. Raises `Unsupported` at the first use."""
    from jax._src.state.types import AbstractRef  # lazy: see the module docstring

    values = {v for v in jaxpr.invars if not isinstance(getattr(v, "aval", None), AbstractRef)}
    if not values:
        return
    for eqn in jaxpr.eqns:
        used = [v for v in eqn.invars if v in values]
        if used:
            raise Unsupported("core_map", f"the kernel closes over a {used[0].aval.str_short()} value, which jax's "
                              "TPU interpreter replaces by the int16 id of the buffer it holds for it (LAUNCH-6): "
                              "pass it as a ref (a closed-over or scalar-prefetch ref) instead",
                              eqn_loc(eqn, loc))
