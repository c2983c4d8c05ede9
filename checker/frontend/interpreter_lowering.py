"""Primitives jax's TPU interpreter can neither interpret nor compile for the CPU (LAUNCH-3, ERR-10, D12).

jax 0.12's interpret mode does not run a kernel equation by equation: it
translates the kernel's jaxpr into a CPU program (`_interpret_jaxpr` of
`pallas/mosaic/interpret/interpret_pallas_call.py`) and compiles that. The
primitives it knows (loads, stores, DMAs, semaphores, control flow, ...) become
callbacks or jax control flow; every other equation is bound as it is, so the
CPU compiler must have a lowering rule for it. `pl.semaphore_read` has none: the
compile fails with `NotImplementedError: MLIR translation rule for primitive
'semaphore_read' not found for platform cpu`, before any device starts, in every
run, wherever the equation sits (a branch no core takes is compiled too).

Only dead code escapes: pallas drops unused pure equations when it traces the
kernel (an unused read never reaches the kernel's jaxpr), but nothing after
that does (a read whose value only `delay` takes, which the interpreter gives
nothing, is compiled and fails).

A load with a mask is one of the interpreter's own primitives, but it refuses it while tracing
(`NotImplementedError: masked load_p`), before the compile; so is a load or store of a ref in HBM or ANY
(`ValueError: get_p: Buffers with a memory space of HBM or ANY cannot be referenced directly.`, ERR-54).

An equation the interpreter binds as it is on a ref gets the integer id the
interpreter holds for the ref: `addupdate` (`state_primitives.ref_addupdate`,
never `ref[...] += x`, which is a load and a store) then raises a `ValueError`
while the interpreter traces the kernel, before the compile.

`translation_failure(call)` is the first such failure, as the launch failure
the program carries (`Program.launch_failure`, LAUNCH-3).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from semcheck.checker.frontend.errors import Unsupported
from semcheck.checker.frontend.sync_primitives import INTERPRETED, primitives
from semcheck.checker.frontend.trace import KernelCall, jaxpr_classes, eqn_loc
from semcheck.model.errors import Untranslatable
from semcheck.model.ops import Loc


def _interpreted() -> tuple[frozenset[Any], frozenset[Any]]:
    """(primitives the interpreter translates itself, those of them whose sub-jaxprs it translates the
    same way), read off `_interpret_jaxpr`'s cases in jax 0.12."""
    from jax import lax
    from jax._src import pjit
    from jax._src.pallas import primitives as pallas_prims
    from jax._src.pallas.mosaic import pipeline as mosaic_pipeline
    from jax._src.pallas.mosaic import primitives as tpu_prims
    from jax._src.state import primitives as state_prims

    nested = frozenset({lax.cond_p, lax.scan_p, lax.while_p, pjit.jit_p, pallas_prims.run_scoped_p,
                        mosaic_pipeline.emit_pipeline_p, mosaic_pipeline.pipeline_body_p})
    own = frozenset({
        pallas_prims.delay_p, tpu_prims.prng_seed_p, tpu_prims.trace_value_p,  # translated to nothing
        pallas_prims.load_p, pallas_prims.swap_p, tpu_prims.prng_random_bits_p, lax.axis_index_p,
        state_prims.get_p, state_prims.swap_p, *primitives(INTERPRETED),
        # resolved from the grid environment when the interpreter binds them (`program_id_bind_with_trace`)
        pallas_prims.program_id_p, pallas_prims.num_programs_p,
    })
    return own | nested, nested


def has_cpu_rule(prim: Any) -> bool:
    """Whether jax's MLIR lowering has a rule for `prim` on the CPU (`_get_lowering_rules` of
    `interpreters/mlir.py`: a CPU-specific rule, else the default one)."""
    from jax._src.interpreters import mlir

    return prim in mlir._platform_specific_lowerings.get("cpu", {}) or prim in mlir._lowerings


def translation_failure(call: KernelCall) -> Untranslatable | None:
    """LAUNCH-3: what translating and compiling the kernel for interpret mode raises (ERR-10), or None.

    The interpreter's trace comes before the compile, so a failure of the trace anywhere in the kernel
    is raised first; each stage raises at its first failing equation in program order."""
    from jax._src.pallas.mosaic.interpret import interpret_pallas_call as ipc

    known, nested = _interpreted()
    impls = getattr(ipc, "_interpret_impls", {})
    types_ = jaxpr_classes(_core())
    found = list(_failing(call.jaxpr, known | frozenset(impls), nested, types_, call.loc, True))
    return next((f for f in found if f.stage == "trace"), found[0] if found else None)


def hbm_access(call: KernelCall) -> Untranslatable | None:
    """ERR-56: the first load or store of a ref in HBM or ANY the interpreter refuses in the kernel (ERR-54), whether
    or not another failure comes first; None when there is none."""
    known, nested = _interpreted()
    from jax._src.pallas.mosaic.interpret import interpret_pallas_call as ipc

    found = _failing(call.jaxpr, known | frozenset(getattr(ipc, "_interpret_impls", {})), nested,
                     jaxpr_classes(_core()), call.loc, True)
    return next((f for f in found if f.error == HBM_ACCESS.format(f.primitive)), None)


def _core() -> Any:
    from jax._src import core

    return core


def _bound_on_ids(eqn: Any, loc: Loc) -> Untranslatable | None:
    """An equation the interpreter binds as it is with a ref operand: the bind sees the integer id the
    interpreter holds for the ref. Known for `addupdate`, whose abstract evaluation refuses it; any other
    such primitive is not lowered (what its bind does with an id is not known)."""
    from jax._src.pallas import primitives as pallas_prims
    from jax._src.state import primitives as state_prims
    from jax._src.state.types import AbstractRef

    if eqn.primitive is pallas_prims.semaphore_read_p:
        return None  # its abstract evaluation reads no operand: the bind passes, the compile fails
    if not any(isinstance(getattr(v, "aval", None), AbstractRef) for v in eqn.invars):
        return None
    if eqn.primitive is state_prims.addupdate_p:
        return Untranslatable("addupdate", "ValueError", "`addupdate` must be called on `Ref` types: int16[].",
                              "trace", loc.file, loc.line, loc.text)
    raise Unsupported(eqn.primitive.name, "jax's TPU interpreter binds this primitive on the integer id it "
                      "holds for a ref, and what that does is not known", loc)


def _failing(jaxpr: Any, known: frozenset[Any], nested: frozenset[Any], types_: tuple[type, ...],
             parent: Loc, interpreted: bool) -> Iterator[Untranslatable]:
    """The equations of `jaxpr` (and its sub-jaxprs) the interpreter cannot translate or compile, in order.

    `interpreted`: whether the interpreter translates this jaxpr (else jax's lowering compiles it whole,
    as the body of an equation the interpreter bound as it is)."""
    inner = getattr(jaxpr, "jaxpr", jaxpr)
    for eqn in inner.eqns:
        loc = eqn_loc(eqn, parent)
        prim = eqn.primitive
        own = interpreted and prim in known
        if own and _masked_load(eqn):
            yield Untranslatable("load", "NotImplementedError", "masked load_p", "trace", loc.file, loc.line,
                                 loc.text)
        elif own and (direct := _direct_hbm_access(eqn)) is not None:
            yield Untranslatable(direct, "ValueError", HBM_ACCESS.format(direct), "trace", loc.file, loc.line,
                                 loc.text)
        if not own:
            bound = _bound_on_ids(eqn, loc) if interpreted else None
            if bound is not None:
                yield bound
            elif not has_cpu_rule(prim):
                yield Untranslatable(prim.name, "NotImplementedError", f"MLIR translation rule for primitive "
                                     f"'{prim.name}' not found for platform cpu", "compile", loc.file, loc.line,
                                     loc.text)
        if own and prim not in nested:
            continue
        for sub in _subs(eqn.params, types_):
            yield from _failing(sub, known, nested, types_, loc, own)


def _masked_load(eqn: Any) -> bool:
    """A load with a mask (`pltpu.load(ref, mask=...)`): the interpreter refuses it while it traces the kernel
    (`NotImplementedError: masked load_p`, ERR-10), whether or not a core would reach it. A masked store it
    runs (ERR-28)."""
    from jax._src.pallas import primitives as pallas_prims

    if eqn.primitive is not pallas_prims.load_p:
        return False
    _, _, mask, _ = eqn.params["args_tree"].unflatten(eqn.invars)
    return mask is not None


# ERR-54: the interpreter's words for a load or store of a ref in HBM or ANY (`_get_memory_space_and_raise_if_hbm`)
HBM_ACCESS = ("{}_p: Buffers with a memory space of HBM or ANY cannot be referenced directly. Instead, use "
              "`pltpu.sync_copy` or `pltpu.async_copy`.")


def _direct_hbm_access(eqn: Any) -> str | None:
    """ERR-54: the name the interpreter gives a load or store (`get`, `swap`, pallas' `load`) whose ref is in HBM or
    ANY: it refuses it while it traces the kernel, whether or not a core would reach it; else None."""
    from jax._src.pallas import core as pallas_core
    from jax._src.pallas import primitives as pallas_prims
    from jax._src.pallas.mosaic import core as mosaic_core
    from jax._src.state import primitives as state_prims

    names = {state_prims.get_p: "get", state_prims.swap_p: "swap", pallas_prims.load_p: "load",
             pallas_prims.swap_p: "swap"}
    name = names.get(eqn.primitive)
    if name is None or not eqn.invars:
        return None
    space = getattr(getattr(eqn.invars[0], "aval", None), "memory_space", None)
    return name if space is pallas_core.MemorySpace.ANY or space is mosaic_core.MemorySpace.HBM else None


def _subs(params: dict[str, Any], types_: tuple[type, ...]) -> Iterator[Any]:
    for value in params.values():
        for v in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(v, types_):
                yield v


__all__ = ["translation_failure", "has_cpu_rule", "hbm_access"]
