"""Questions the program walk (`program_walk`) asks of jaxprs and values, apart from its state.

Imports of jax sit in the functions (see `trace`'s docstring).
"""

from __future__ import annotations

import math
from typing import Any

from semcheck.checker.frontend.trace import KernelCall, eqn_loc

MAX_FOLD = 4096
"""The largest operand (elements) the walk evaluates to know a value (PRG-126)."""

UNIFORM_COLLECTIVES = frozenset({"psum", "pmax", "pmin", "psum_invariant", "all_gather", "all_gather_invariant",
                                 "pbroadcast"})
"""The collectives whose result is the same on every device when their operand is (PRG-126); every other
operation over a mesh axis (`ppermute`, `all_to_all`, `reduce_scatter`, ...) may differ."""


def _over_mesh_axes(params: dict) -> bool:
    """Whether an operation names mesh axes (a collective's `axis_name`, or `axes` of names where a
    reduction's `axes` are array dimensions)."""
    if "axis_name" in params:
        return True
    axes = params.get("axes")
    return isinstance(axes, (tuple, list)) and any(not isinstance(a, int) for a in axes)


def device_dependent(eqn: Any) -> bool:
    """PRG-126: whether an operation's results may differ between devices whose operands are the same:
    `axis_index`, a collective other than `UNIFORM_COLLECTIVES`, a host callback or a stateful random number,
    or any of them inside the operation's bodies (a `jit`, a `cond`, a loop)."""
    from semcheck.checker.frontend.pre_kernel_collectives import NOT_DETERMINISTIC

    name = eqn.primitive.name
    if name == "axis_index" or name in NOT_DETERMINISTIC:
        return True
    if name not in UNIFORM_COLLECTIVES and _over_mesh_axes(eqn.params):
        return True
    return any(device_dependent(e) for sub in subs(eqn) for e in getattr(sub, "jaxpr", sub).eqns)


# Operations that name mesh axes and move no data: the device's coordinate, and jax's casts of how a value varies.
_NOT_COLLECTIVES = frozenset({"axis_index", "pvary", "preduced", "vary_unreduced_cast"})


def collective_in(eqn: Any) -> Any:
    """PRG-201: the first operation of `eqn` (itself, or inside its bodies, not inside a kernel) that moves data
    between devices over mesh axes (every collective, `psum` too: each device that runs it waits for the others of
    its group), or None."""
    name = eqn.primitive.name
    if name in ("pallas_call", "mpmd_map") or name in _NOT_COLLECTIVES:
        return None
    if _over_mesh_axes(eqn.params):
        return eqn
    return next((c for sub in subs(eqn) for e in getattr(sub, "jaxpr", sub).eqns
                 if (c := collective_in(e)) is not None), None)


def branching_collective(eqn: Any) -> Any:
    """PRG-201: the first collective of `eqn` inside a `cond` or a `while` loop (in it, or in its bodies), or None."""
    if eqn.primitive.name in ("pallas_call", "mpmd_map"):
        return None
    if eqn.primitive.name in ("cond", "while"):
        return next((c for sub in subs(eqn) for e in getattr(sub, "jaxpr", sub).eqns
                     if (c := collective_in(e)) is not None), None)
    return next((c for sub in subs(eqn) for e in getattr(sub, "jaxpr", sub).eqns
                 if (c := branching_collective(e)) is not None), None)


def varying_calls(body: Any) -> str | None:
    """PRG-130: what makes a loop body's kernel calls differ between iterations (a cond, a while loop around
    a call, a run_state), or None when every iteration runs the same calls in the same order."""
    for eqn in body.eqns:
        name = eqn.primitive.name
        if name in ("pallas_call", "mpmd_map") or not any(jaxpr_has_kernel(s) for s in subs(eqn)):
            continue
        if name in ("cond", "while", "run_state"):
            return f"a {name} at {eqn_loc(eqn)}"
        for sub in subs(eqn):
            inner = varying_calls(sub)
            if inner is not None:
                return inner
    return None


def concrete(x: Any) -> Any:
    """`x` as a numpy value when it is a concrete one (not a shape, not a tracer) of at most `MAX_FOLD`
    elements, else None."""
    import numpy as np

    if isinstance(x, (bool, int, float, np.ndarray, np.generic)):
        value = np.asarray(x)
    else:
        import jax

        if not isinstance(x, jax.Array) or isinstance(x, jax.core.Tracer):
            return None
        try:
            value = np.asarray(x)
        except Exception:  # noqa: BLE001 - a value numpy cannot read is not known
            return None
    return value if value.size <= MAX_FOLD else None


def side_effecting(call: KernelCall) -> bool:
    """Whether XLA must keep every launch of the call (`CompilerParams.has_side_effects`: "set to True to
    prevent kernel being CSEd by XLA"): True or a side-effect type other than pure."""
    effects = getattr(call.compiler_params, "has_side_effects", False)
    if isinstance(effects, bool):
        return effects
    return str(getattr(effects, "name", effects)).upper() != "PURE"


def subs(eqn: Any) -> list[Any]:
    from semcheck.checker.frontend.trace import sub_jaxprs

    return list(sub_jaxprs(eqn.params))


def single_sub(eqn: Any) -> Any:
    found = subs(eqn)
    return found[0] if len(found) == 1 else None


def is_call_shaped(eqn: Any) -> bool:
    sub = single_sub(eqn)
    return sub is not None and len(sub.invars) == len(eqn.invars) and len(sub.outvars) == len(eqn.outvars) \
        and eqn.primitive.name not in ("cond", "while", "scan")


def jaxpr_has_kernel(jaxpr: Any) -> bool:
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in ("pallas_call", "mpmd_map"):
            return True
        if any(jaxpr_has_kernel(s) for s in subs(eqn)):
            return True
    return False


def shard_map_axes(eqn: Any, axes: dict[str, int], physical: int) -> tuple[dict[str, int], int]:
    mesh = eqn.params["mesh"]
    manual = set(eqn.params.get("newly_manual_axes", ())) | set(getattr(mesh, "manual_axes", ()) or ())
    sub_axes = dict(axes)
    for k, v in mesh.shape.items():
        if k in manual:
            sub_axes[k] = int(v)
    return sub_axes, max(physical, int(math.prod(mesh.shape.values())))


MAX_LANES = 64
"""The most devices the walk evaluates a per-device value on (PRG-145)."""


def mesh_lanes(eqn: Any, physical: int) -> list[dict[str, int]] | None:
    """PRG-145: each device's coordinates on the manual axes of a shard_map, device by device (the order the
    kernels' lanes use, `concrete_inputs`: row-major over the mesh's axis names), or None when the manual axes
    do not cover the devices or there are more than MAX_LANES."""
    mesh = eqn.params["mesh"]
    manual = set(eqn.params.get("newly_manual_axes", ())) | set(getattr(mesh, "manual_axes", ()) or ())
    names = [a for a in mesh.axis_names if a in manual]
    sizes = dict(mesh.shape)
    lanes = math.prod(sizes[a] for a in names)
    if lanes != physical or lanes > MAX_LANES:
        return None
    out = []
    for lane in range(lanes):
        coords, rest = {}, lane
        for a in reversed(names):
            coords[a] = rest % sizes[a]
            rest //= sizes[a]
        out.append(coords)
    return out


def shard_values(eqn: Any, x: Any, spec: Any, lanes: list[dict[str, int]]) -> list[Any] | None:
    """PRG-145: each device's block of the known global value `x` under a shard_map in_spec, as
    `concrete_inputs` cuts it, or None."""
    from semcheck.checker.frontend.device_shards import Device, shard

    mesh = eqn.params["mesh"]
    manual = set(eqn.params.get("newly_manual_axes", ())) | set(getattr(mesh, "manual_axes", ()) or ())
    got = [shard(x, spec, Device(lane, coords), dict(mesh.shape), manual) for lane, coords in enumerate(lanes)]
    return None if any(g is None for g in got) else got


__all__ = ["MAX_FOLD", "MAX_LANES", "UNIFORM_COLLECTIVES", "branching_collective", "collective_in", "concrete",
           "device_dependent", "is_call_shaped",
           "jaxpr_has_kernel", "mesh_lanes", "shard_map_axes", "shard_values", "side_effecting", "single_sub", "subs", "varying_calls"]
