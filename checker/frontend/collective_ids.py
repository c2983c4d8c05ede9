"""The collective id jax 0.12 gives each kernel call when it lowers a program for a TPU (spec PRG-123).

`assign` follows `_lowered_to_custom_call_config` (`jax/_src/tpu_custom_call.py`) with the
lowering's `CollectiveIdMapping` (`jax/_src/interpreters/mlir.py`), under the three values of
`jax_pallas_auto_assign_collective_ids` (spec programs.md PRG-5):

* the manual ids of the whole program are reserved first (none under `override`);
* a kernel with a barrier-semaphore tag is keyed by (tag, `skip_device_barrier`) in every mode, a
  kernel without an id under `yes` and every kernel under `override` by (its module,
  `skip_device_barrier`); a key's id is the smallest integer >= 0 not yet used, in lowering order,
  the same for the same key; one key more than the limit fails;
* a kernel that uses the barrier semaphore and has no id fails to lower, and so does one with an id
  and no barrier (unless `allow_collective_id_without_custom_barrier`).

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
    from semcheck.checker.frontend.trace import _sub_jaxprs

    uses, tags = False, set()

    def walk(jaxpr: Any) -> None:
        nonlocal uses
        for eqn in jaxpr.eqns:
            if eqn.primitive.name == "get_barrier_semaphore":
                uses = True
                if eqn.params.get("tag") is not None:
                    tags.add(eqn.params["tag"])
            for sub in _sub_jaxprs(eqn.params):
                walk(sub)

    walk(call.jaxpr)
    return uses, (next(iter(tags)) if len(tags) == 1 else None)


def lowering_error(tag: Any) -> str | None:
    """PRG-123: jax's error when it lowers, for a TPU, a kernel that uses the barrier semaphore without a
    collective_id of its own (`tag`: its barrier-semaphore tag), or None when jax gives it one."""
    mode, _ = config()
    if tag is None and mode == "no":
        return (f"jax cannot lower this kernel for a TPU: ValueError: {NEEDS_ID} (it uses the barrier semaphore "
                "and has no collective_id; specs/programs.md PRG-5): give it CompilerParams(collective_id=...), a "
                "barrier-semaphore tag, or set jax_pallas_auto_assign_collective_ids='yes'")
    return None


def _module_key(call: KernelCall) -> tuple:
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
                key = ("module", _module_key(c), skip)
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


__all__ = ["Assigned", "NEEDS_ID", "NO_BARRIER", "assign", "barrier_tag", "config", "lowering_error"]
