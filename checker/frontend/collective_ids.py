"""The collective id jax 0.12 gives each kernel call when it lowers a program for a TPU (spec PRG-123).

`assign` follows `_lowered_to_custom_call_config` (`jax/_src/tpu_custom_call.py`) with the
lowering's `CollectiveIdMapping` (`jax/_src/interpreters/mlir.py`), under the three values of
`jax_pallas_auto_assign_collective_ids` (spec PRG-5):

* the manual ids of the whole program are reserved first (none under `override`);
* a kernel with a barrier-semaphore tag is keyed by (tag, `skip_device_barrier`) in every mode, a
  kernel without an id under `yes` and every kernel under `override` by (its module,
  `skip_device_barrier`); a key's id is the smallest integer >= 0 not yet used, in lowering order,
  the same for the same key; one key more than the limit fails;
* a kernel that uses the barrier semaphore and has no id fails to lower, and so does one with an id
  and no barrier (unless `allow_collective_id_without_custom_barrier`): under `yes` that is every
  kernel without an id that does not use the barrier semaphore, under `override` every such kernel
  (LAUNCH-7, `refusals`).

jax keys a module by the hash of its Mosaic text, which semcheck does not build: two calls are one
module here when their kernel jaxprs print alike and their grids, operands and compiler parameters
(the id aside) are equal. The error texts are jax's. Imports of jax sit in the functions.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from semcheck.checker.frontend.trace import KernelCall

NEEDS_ID = ("collective_id has to be specified when using a custom barrier (cannot auto-allocate without "
            "lowering context)")
NO_BARRIER = "collective_id has to be unspecified or None when not using a custom barrier"


@dataclasses.dataclass(frozen=True)
class Assigned:
    """A call's collective id as jax lowers it, or jax's lowering error (`error`, a ValueError's text)."""

    collective_id: int | None
    error: str | None = None
    auto: bool = False  # the id is jax's choice, not the call's own


def config() -> tuple[str, int]:
    """The program's `jax_pallas_auto_assign_collective_ids` mode and its limit, as jax reads them now."""
    import jax

    return (str(jax.config.jax_pallas_auto_assign_collective_ids),
            int(jax.config.jax_pallas_auto_assign_collective_ids_limit))


def barrier_tag(call: KernelCall) -> tuple[bool, Any]:
    """(whether the kernel uses the barrier semaphore, its tag or None)."""
    from semcheck.checker.frontend.trace import sub_jaxprs

    uses, tags = False, set()

    def walk(jaxpr: Any) -> None:
        nonlocal uses
        for eqn in jaxpr.eqns:
            if eqn.primitive.name == "get_barrier_semaphore":
                uses = True
                if eqn.params.get("tag") is not None:
                    tags.add(eqn.params["tag"])
            for sub in sub_jaxprs(eqn.params):
                walk(sub)

    walk(call.jaxpr)
    return uses, (next(iter(tags)) if len(tags) == 1 else None)


def lowering_error(tag: Any) -> str | None:
    """PRG-123: jax's error when it lowers, for a TPU, a kernel that uses the barrier semaphore without a
    collective_id of its own (`tag`: its barrier-semaphore tag), or None when jax gives it one."""
    mode, _ = config()
    if tag is None and mode == "no":
        return (f"jax cannot lower this kernel for a TPU: ValueError: {NEEDS_ID} (it uses the barrier semaphore "
                "and has no collective_id; specs/semantics/calls.md PRG-5): give it CompilerParams(collective_id=...), a "
                "barrier-semaphore tag, or set jax_pallas_auto_assign_collective_ids='yes'")
    return None


def refusals(calls: Sequence[KernelCall], mode: str | None = None, limit: int | None = None) -> dict[int, str]:
    """LAUNCH-7: id(call) -> jax's ValueError text, for the `calls` that use no barrier semaphore and that
    jax's TPU lowering refuses (`_lowered_to_custom_call_config`: the call's collective id resolves to an
    integer, its own or an auto-assigned one, and the Mosaic module has no custom barrier). The calls that
    use the barrier semaphore are PRG-123's and PRG-125's business."""
    if mode is None or limit is None:
        mode, limit = config()
    got = assign(calls, mode, limit)
    by_id = {id(c): c for c in calls}
    return {key: a.error for key, a in got.items() if a.error is not None and not barrier_tag(by_id[key])[0]}


def mark_refused(kernels: list[Any]) -> list[Any]:
    """LAUNCH-7 on a target's kernels checked call by call (each with its `call`, in lowering order): a
    call jax's TPU lowering refuses fails its whole top-level computation, and the program stops there,
    so it, every call of its computation and every later call carry the refusal as their TPU launch
    failure (`Program.tpu_failure`; as LAUNCH-3 stops the interpreter's). The interpreter runs them."""
    from semcheck.model.errors import TpuLoweringFailure

    calls = [k.call for k in kernels if isinstance(k.call, KernelCall)]  # a traced call (jax's lowering has one)
    refused = refusals(calls) if calls else {}
    if not refused:
        return kernels
    first = next(k for k in kernels if k.call is not None and id(k.call) in refused)
    out = []
    for k in kernels:
        if not isinstance(k.call, KernelCall) or k.call.unit < first.call.unit or k.program.tpu_failure is not None:
            out.append(k)
            continue
        mine = id(k.call) in refused
        failure = TpuLoweringFailure(refused[id(k.call)] if mine else refused[id(first.call)],
                                     "" if mine else f"{first.name} at {first.loc}")
        out.append(dataclasses.replace(k, program=dataclasses.replace(k.program, tpu_failure=failure)))
    return out


def composed_refusal(invocations: Sequence[Any], lowered: Sequence[Any]) -> Any:
    """LAUNCH-7 on a composed program: the TPU launch failure of its first invocation that uses no barrier
    semaphore and whose collective id jax resolves (`Invocation.id_error`, PRG-125), or None."""
    from semcheck.model.errors import TpuLoweringFailure

    for inv, prog in zip(invocations, lowered):
        uses = any(op.fetches_barrier for ops in prog.cores for op in ops)
        if not uses and getattr(inv, "id_error", None) is not None:
            return TpuLoweringFailure(inv.id_error, f"{inv.describe()}")
    return None


def module_key(call: KernelCall) -> tuple:
    params = call.compiler_params
    fields = {}
    if dataclasses.is_dataclass(params):
        fields = {f.name: repr(getattr(params, f.name)) for f in dataclasses.fields(params)
                  if f.name != "collective_id"}
    return (str(call.jaxpr), repr(call.grid), tuple(call.operands), tuple(sorted(fields.items())),
            tuple(call.input_output_aliases))


def assign(calls: Sequence[KernelCall], mode: str = "no", limit: int = 25) -> dict[int, Assigned]:
    """id(call) -> its collective id or lowering error, for the distinct `calls` in lowering order."""
    distinct = list({id(c): c for c in calls}.values())
    used: set[int] = set()
    if mode != "override":
        used |= {c.collective_id for c in distinct if c.collective_id is not None}
    auto: dict[tuple, int] = {}
    out: dict[int, Assigned] = {}
    for c in distinct:
        params = c.compiler_params
        skip = bool(getattr(params, "skip_device_barrier", False))
        allow = bool(getattr(params, "allow_collective_id_without_custom_barrier", False))
        barrier, tag = barrier_tag(c)
        cid = None if mode == "override" else c.collective_id
        if mode != "override" and c.collective_id is not None and tag is not None:
            out[id(c)] = Assigned(None, f"Conflicting collective_id specified: CompilerParams has {c.collective_id!r} "
                                        f"but get_barrier_semaphore has {tag!r}.")
            continue
        key = None
        if cid is None:
            if tag is not None:
                key = ("tag", tag, skip)
            elif mode in ("yes", "override"):
                key = ("module", module_key(c), skip)
        if key is not None:
            if key not in auto:
                auto[key] = next(i for i in range(len(used) + 1) if i not in used)
                used.add(auto[key])
                if len(auto) > limit:
                    out[id(c)] = Assigned(None, "The number of auto-assigned collective ids for pallas kernels "
                                                f"exceeded the limit of {limit}.")
                    continue
            cid = auto[key]
        if barrier and cid is None:
            out[id(c)] = Assigned(None, NEEDS_ID)
        elif not barrier and cid is not None and not allow:
            out[id(c)] = Assigned(None, NO_BARRIER)
        else:
            out[id(c)] = Assigned(cid, None, key is not None)
    return out


__all__ = ["Assigned", "NEEDS_ID", "NO_BARRIER", "assign", "barrier_tag", "composed_refusal", "config", "lowering_error",
           "mark_refused", "refusals"]
