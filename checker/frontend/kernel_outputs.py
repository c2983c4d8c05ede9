"""PRG-169: the outputs of an earlier kernel call, where a later call's scalar inputs are computed from them.

`concrete_inputs` evaluates the program around the kernels on the example arrays, device by device. A
`pallas_call` whose outputs a later call's scalar operands (or grid bounds) depend on is run here, on one
device's concrete operands, by jax's interpreter on the CPU, so its outputs are one run's. They are facts
only where every schedule gives them: `run_kernel` refuses a kernel whose run could depend on other devices
(a remote copy or signal, the barrier semaphore, a device id) and one whose outputs depend on memory nothing
writes (two runs, one with uninitialised memory filled with NaN, one with zeros, must agree) and one whose
outputs differ when its copies run at their waits (an on_wait run must agree too); the rest (the kernel's own
races) is decided by the race check of the program that reads the values, which the callers
require to hold before any verdict resting on them stands (`checker/properties/computed_inputs.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from semcheck.checker.frontend.compile_cache import kept
from semcheck.checker.frontend.index_signs import handed_on, negative_index
from semcheck.checker.frontend.intervals import Held
from semcheck.checker.frontend.partial_values import Partial, first_unknown
from semcheck.checker.frontend.source_names import eqn_loc
from semcheck.checker.frontend.sync_primitives import DEVICE_ID_OPERAND

# Kernel primitives whose run may depend on another device: a remote copy or signal (a `device_id`), the
# barrier semaphore, a device's coordinate.
_TALKS = ("get_barrier_semaphore", "axis_index", "device_id")
HELD_ELEMENTS = 1 << 16  # PRG-230: the most elements of an input whose values a load's interval reads


def describe(call: Any) -> str:
    """A kernel call's words for reasons (`trace.KernelCall`): its call index, name and line."""
    at = f" at {call.loc}" if call.loc.line else ""
    return f"kernel call {call.index} ({call.name}{at})"


def run_kernel(eqn: Any, invals: list[Any], call: Any,
               reasons: Sequence[str | None] = ()) -> tuple[list[Any] | None, str]:
    """PRG-169: `eqn` (a `pallas_call`, `call` as `trace` describes it) run by jax's interpreter on `invals`, its
    outputs; or None and why not (PRG-206: an input without a value is named by its reason in `reasons`, per
    operand of `eqn`, with its line). PRG-192: an output is kept where its runs agree: an array where they agree
    everywhere, a `partial_values.Partial` where they differ on some of its elements (or all), whose reason names
    the first; None, and why, where they agree on no element of any output."""
    what = describe(call)
    if eqn.primitive.name != "pallas_call":
        return None, f"the output of {what}, which is not a pallas_call semcheck runs"
    if any(x is None for x in invals):
        first = next((r for x, r in zip(invals, reasons) if x is None and r), "")
        return None, f"the output of {what}, whose inputs semcheck could not compute" + (f": {first}" if first else "")
    if _talks(eqn.params["jaxpr"]):
        return None, (f"the output of {what}, which communicates with other devices (a remote copy or signal, "
                      "the barrier semaphore or a device id): one device's run alone does not give it")
    kept_run: list[np.ndarray] | None = None
    unknown: list[np.ndarray] = []
    said: list[str] = []  # per output, why its first unknown element is (PRG-192)
    for mode, fill in _RUNS:  # PRG-189: a run that fails, or leaves no element known, ends the runs
        got = _run(eqn, invals, mode, fill)
        if got is None:
            return None, f"the output of {what}, which jax's interpreter could not run alone on the CPU"
        if kept_run is None:
            kept_run, unknown, said = got, [np.zeros(o.shape, bool) for o in got], [""] * len(got)
            continue
        if any(a.shape != b.shape or a.dtype != b.dtype for a, b in zip(kept_run, got)):
            return None, f"the output of {what}, whose runs give outputs of different shapes"
        why = ("depends on memory the kernel never writes (its runs with uninitialised memory filled with NaN "
               "and with zeros differ there)" if mode == "eager" else
               "is not the same when copies run at their waits (on_wait) as when they run at their starts")
        for k, (a, b) in enumerate(zip(kept_run, got)):
            differ = ~_agree(a, b) & ~unknown[k]  # PRG-192: a run that disagrees narrows what is known
            if differ.any() and not said[k]:
                said[k] = f"the output of {what}, whose {first_unknown(differ)} of output {k} {why}"
            unknown[k] |= differ
        if all(u.all() for u in unknown):
            break
    if all(u.all() for u in unknown) and kept_run:
        return None, next(s for s in said if s)
    outs = [Partial(o, u, s) if u.any() else o for o, u, s in zip(kept_run, unknown, said)]
    return outs, next((s for s in said if s), "")


def unwritten_reads(eqn: Any, invals: Sequence[Any] = ()) -> str:
    """PRG-200: why a kernel run by PRG-169 may read memory nothing writes in a way its two fills need not show
    (a scratch buffer, a `run_scoped` buffer, an output that aliases no input read back or handed to anything but a
    store, a block past its array's end, PRG-202: an index that may be negative), in words; "" where it reads its
    inputs only. The interpreter's modes fill such memory as the two runs do; a TPU leaves there what was there."""
    params = eqn.params
    gm = params.get("grid_mapping")
    inner = getattr(params["jaxpr"], "jaxpr", params["jaxpr"])
    if gm is None:
        return "a kernel whose operands semcheck cannot tell apart"
    for bm in gm.block_mappings:
        shape = tuple(getattr(bm.array_aval, "shape", ()))
        sizes = [getattr(b, "block_size", b) for b in bm.block_shape]
        if len(sizes) != len(shape) or not all(
                b is None or (isinstance(b, int) and b > 0 and n % b == 0) for b, n in zip(sizes, shape)):
            return f"a block of shape {tuple(sizes)} over an operand of shape {shape}, whose edge blocks are padded"
    start = gm.num_index_operands + gm.num_inputs
    aliased = {o for _, o in params.get("input_output_aliases", ())}
    refs = inner.invars[start:]
    for j, ref in enumerate(refs):
        if j >= gm.num_outputs:
            if "sem" not in str(getattr(getattr(ref, "aval", None), "dtype", "")):
                return "a scratch buffer"
        elif j not in aliased and _read_back(inner, ref):
            return f"output {j}, read back by the kernel"
    if _scoped(inner):
        return "a run_scoped buffer"
    grid = tuple(d if isinstance(d, int) else -1 for d in getattr(gm, "grid", ()))
    found = negative_index(inner, tuple(d if d > 0 else 2**31 - 1 for d in grid), _held(eqn, invals))
    if found is not None:  # PRG-202
        return (f"an index semcheck cannot show is at least 0, at {eqn_loc(found)} (a negative one reads before the "
                "ref on a TPU, where jax's interpreter counts it from the end)")
    return ""


def _held(eqn: Any, invals: Sequence[Any]) -> dict[int, Held]:
    """PRG-220: per position among the kernel's operands, the least and greatest value of each integer input the
    call was run on (`invals`, one per operand of `eqn`), where the input aliases no output; a kernel that
    closes over refs, or an input known in part, gives none. PRG-230: with the input's elements, up to
    `HELD_ELEMENTS` of them."""
    params, gm = eqn.params, eqn.params["grid_mapping"]
    inner = getattr(params["jaxpr"], "jaxpr", params["jaxpr"])
    lead = gm.num_dynamic_grid_bounds
    if getattr(params["jaxpr"], "constvars", ()) or len(invals) != lead + gm.num_index_operands + gm.num_inputs:
        return {}
    aliased = {i for i, _ in params.get("input_output_aliases", ())}
    held: dict[int, Held] = {}
    for k, v in enumerate(invals[lead:]):
        if k in aliased or k + lead in aliased or v is None or isinstance(v, Partial):
            continue
        a = np.asarray(v)
        ref = getattr(inner.invars[k], "aval", None)
        dtype = getattr(getattr(ref, "inner_aval", ref), "dtype", None)
        if a.size and np.issubdtype(a.dtype, np.integer) and dtype == a.dtype:
            whole = k < gm.num_index_operands or _whole(gm.block_mappings[k - gm.num_index_operands], a.shape)
            held[k] = Held(int(a.min()), int(a.max()), a if whole and a.size <= HELD_ELEMENTS else None)
    return held


def _whole(bm: Any, shape: tuple[int, ...]) -> bool:
    """PRG-230: whether an input's block is the whole array (its block shape is the array's, and its index map
    gives block 0 on every axis), so the kernel's ref holds the input's elements at their own positions."""
    sizes = tuple(getattr(b, "block_size", b) for b in bm.block_shape)
    jaxpr = getattr(bm.index_map_jaxpr, "jaxpr", bm.index_map_jaxpr)
    return sizes == tuple(shape) and all(hasattr(o, "val") and int(np.asarray(o.val)) == 0 for o in jaxpr.outvars)


def _read_back(jaxpr: Any, ref: Any) -> bool:
    """Whether `ref` is used by an equation of `jaxpr` other than a store whose old value is dropped (a `cond`'s
    branches, and PRG-219 a loop's bodies and a call's, are followed; any other use counts as a read)."""
    used = {id(x) for e in jaxpr.eqns for x in e.invars} | {id(x) for x in jaxpr.outvars}
    for eqn in jaxpr.eqns:
        if not any(x is ref for x in eqn.invars):
            continue
        name = eqn.primitive.name
        if name == "swap" and eqn.invars[0] is ref and not any(id(v) in used for v in eqn.outvars) \
                and not any(x is ref for x in eqn.invars[1:]):
            continue
        inside = handed_on(eqn, [k for k, x in enumerate(eqn.invars) if x is ref])  # a cond, loop or call; PRG-219
        if inside is not None and not any(_read_back(j, v) for j, v in inside):
            continue
        return True
    return False


def _scoped(jaxpr: Any) -> bool:
    return any(e.primitive.name == "run_scoped" or any(_scoped(getattr(s, "jaxpr", s)) for s in _subs(e.params))
               for e in jaxpr.eqns)


def _agree(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per element, whether two runs' outputs are the same (NaN equals NaN in a float output)."""
    same = a == b
    if a.dtype.kind in "fc":
        same |= np.isnan(a) & np.isnan(b)
    return np.asarray(same, dtype=bool)


# The runs that must agree: eager with jax's NaN fill (the values kept), with zeros, and on_wait.
_RUNS = (("eager", "nan"), ("eager", "zero"), ("on_wait", "nan"))


def _run(eqn: Any, invals: list[Any], mode: str, fill: str) -> list[np.ndarray] | None:
    try:
        with kept():  # PRG-188: every process that runs this kernel compiles the same module
            out = _jitted(eqn, mode, fill)(*invals)
        outs = [np.asarray(o) for o in (out if eqn.primitive.multiple_results else [out])]
    except Exception:  # noqa: BLE001 - no value, never a guess
        return None
    return None if any(o.dtype == object for o in outs) else outs


# The call jitted once per (launch equation, mode, fill): every device, pass and later evaluation of the same
# trace runs the compiled interpreter (a compile costs about a second, a run of it a few milliseconds). The
# equation is kept with its entry, so an id is never taken for another equation's.
_JITTED: dict[tuple[int, str, str], tuple[Any, Any]] = {}
_JITTED_MAX = 32


def _jitted(eqn: Any, mode: str, fill: str) -> Any:
    import jax  # lazy: see trace's docstring
    from jax.experimental.pallas import tpu as pltpu

    key = (id(eqn), mode, fill)
    hit = _JITTED.get(key)
    if hit is not None and hit[0] is eqn:
        return hit[1]
    params = dict(eqn.params)
    params["interpret"] = pltpu.InterpretParams(dma_execution_mode=mode, uninitialized_memory=fill)
    got = eqn.primitive.get_bind_params(params)
    subfuns, bind = got if isinstance(got, tuple) else ((), got)
    fn = jax.jit(lambda *xs: eqn.primitive.bind(*subfuns, *xs, **bind))
    while len(_JITTED) >= _JITTED_MAX:
        _JITTED.pop(next(iter(_JITTED)))
    _JITTED[key] = (eqn, fn)
    return fn


def _talks(jaxpr: Any) -> bool:
    """Whether a kernel jaxpr may depend on another device (module docstring)."""
    inner = getattr(jaxpr, "jaxpr", jaxpr)
    for eqn in inner.eqns:
        name = eqn.primitive.name
        if name in _TALKS or any(t in name for t in ("remote", "barrier")):
            return True
        if _remote(eqn):
            return True
        if any(_talks(sub) for sub in _subs(eqn.params)):
            return True
    return False


def _subs(params: dict[str, Any]) -> list[Any]:
    """The jaxprs among an equation's parameters (a loop's body, a cond's branches, a scoped body)."""
    out = []
    for value in params.values():
        for v in (value if isinstance(value, (tuple, list)) else (value,)):
            if hasattr(getattr(v, "jaxpr", v), "eqns"):
                out.append(v)
    return out


def _remote(eqn: Any) -> bool:
    """A copy or signal with a device id (its operands' tree names one, `DEVICE_ID_OPERAND`)."""
    key, at = DEVICE_ID_OPERAND.get(eqn.primitive.name, (None, 0))
    if key is None or eqn.params.get(key) is None:
        return False
    try:
        return eqn.params[key].unflatten(list(eqn.invars))[at] is not None
    except Exception:  # noqa: BLE001 - an unknown layout: say it may talk
        return True


__all__ = ["describe", "run_kernel", "unwritten_reads"]
