"""The kernel launches of a traced program as the concrete-input evaluation walks them: the launches in
`trace.find_kernels`'s order, the jaxprs an equation carries, and a launch's operands as `trace` names
them (ACC-4, ACC-8)."""

from __future__ import annotations

from typing import Any

from semcheck.checker.frontend.closed_refs import discharged
from semcheck.checker.frontend.trace import Operand
from semcheck.model.ops import NO_LOC

KERNEL_PRIMS = ("pallas_call", "mpmd_map")


def walk_kernel_eqns(jaxpr: Any) -> Any:
    """The kernel launches in `jaxpr`, in the order `trace.find_kernels` numbers them."""
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in KERNEL_PRIMS:
            yield eqn
            continue
        for s in sub_jaxprs(eqn):
            yield from walk_kernel_eqns(getattr(s, "jaxpr", s))


def sub_jaxprs(eqn: Any) -> list[Any]:
    """The jaxprs among `eqn`'s parameters, as `trace` walks them."""
    from jax._src import core as jax_core  # lazy: see trace's docstring

    from semcheck.checker.frontend.trace import jaxpr_classes

    types_ = jaxpr_classes(jax_core)
    out = []
    for value in eqn.params.values():
        for v in (value if isinstance(value, (tuple, list)) else (value,)):
            if isinstance(v, types_):
                out.append(v)
    return out


def pallas_operands(eqn: Any) -> list[Operand]:
    """A pallas_call's index and input operands as `trace` describes them (they follow the equation's
    dynamic grid bounds)."""
    from semcheck.checker.frontend.trace import make_operand, block_memory_space, eqn_loc

    if getattr(eqn.params["jaxpr"], "constvars", None):  # the call jax runs (LAUNCH-4)
        eqn = discharged(eqn, eqn_loc(eqn, NO_LOC))
    gm = eqn.params["grid_mapping"]
    kernel = eqn.params["jaxpr"]
    out = []
    for i, var in enumerate(kernel.invars[: gm.num_index_operands + gm.num_inputs]):
        if i < gm.num_index_operands:
            out.append(make_operand("index", "", var.aval, "smem"))
        else:
            bm = gm.block_mappings[i - gm.num_index_operands]
            out.append(make_operand("input", "", var.aval, block_memory_space(bm),
                                array_shape=tuple(bm.array_aval.shape),
                                block_shape=tuple(getattr(var.aval, "shape", ()))))
    return out


def core_map_operands(eqn: Any) -> list[Operand]:
    """ACC-47: a `core_map`'s (an `mpmd_map` of one mesh) input operands as `trace` describes them; none
    for an `mpmd_map` the front end does not lower."""
    from semcheck.checker.frontend.trace import core_map_operand

    meshes, jaxprs = eqn.params.get("meshes", ()), eqn.params.get("jaxprs", ())
    if len(meshes) != 1 or len(jaxprs) != 1:
        return []
    invars = jaxprs[0].invars
    return [core_map_operand("input", "", invars[i].aval, v.aval, meshes[0])
            for i, v in enumerate(eqn.invars) if i < len(invars)]
