"""ERR-37: a call jax's interpreter refuses by its arguments' types, decided in the interpreter's modes even
where its kernel cannot be lowered.

ERR-36's failure is read off the call's arguments, not its kernel: the interpreter raises it before it
looks at the kernel, whatever the kernel does. So when the front end cannot lower the kernel (a construct
it does not follow), the interpreter's modes still have their answer: every run raises before any core
starts (LAUNCH-5), a limitation of the interpreter (`unrunnable`, REP-21). The program that carries it has
no kernel operations; `hardware`, which runs the kernel, has no program and stays unknown with the
lowering's reason (`HardwareUnknown`).
"""

from __future__ import annotations

from typing import Any

from semcheck.checker.frontend.errors import Unsupported
from semcheck.checker.frontend.scalar_memory import NeedsConcreteInputs
from semcheck.checker.frontend.trace import KernelCall
from semcheck.checker.frontend.typed_operands import typed_operand_failure
from semcheck.model.launch import launch
from semcheck.model.ops import Program, Topology


class HardwareUnknown(str):
    """ERR-37: why `hardware` has no program (the lowering's refusal, with its line)."""

    rule = "ERR-37"


def hbm_access_unknown(call: KernelCall) -> HardwareUnknown | None:
    """ERR-56: why `hardware` decides nothing of a kernel that loads or stores a ref in HBM or ANY directly (the
    first such access, with its line), or None when it has none."""
    from semcheck.checker.frontend.interpreter_lowering import hbm_access

    access = hbm_access(call)
    if access is None:
        return None
    why = HardwareUnknown(
        f"the kernel's {access.primitive} of a ref in HBM or ANY at {access.file}:{access.line} is not decided under "
        "hardware: the Pallas TPU docs say a kernel cannot compute on HBM refs (data has to be copied to VMEM first), "
        "and whether Mosaic refuses it or what a TPU does with it is not known here (specs/semantics/kernels.md "
        "ERR-56)")
    why.rule = "ERR-56"
    return why


def mosaic_refusal_unknown(call: KernelCall) -> HardwareUnknown | None:
    """ACC-88: why `hardware` decides nothing of a kernel jax's TPU lowering refuses for a `top_k` with
    `is_stable=True` (the first, with its line), or None when it has none."""
    from semcheck.checker.frontend.mosaic_refusals import STABLE_TOP_K, stable_top_k

    loc = stable_top_k(call.jaxpr, call.loc)
    if loc is None:
        return None
    why = HardwareUnknown(
        f"the kernel's top_k at {loc} has is_stable=True (lax.top_k's default): jax's TPU lowering refuses it "
        f"(NotImplementedError: {STABLE_TOP_K}), so no TPU runs the kernel and semcheck decides nothing of it under "
        "hardware; pass is_stable=False (specs/deciding/frontend.md ACC-88)")
    why.rule = "ACC-88"
    return why


def hardware_unknown(call: KernelCall) -> HardwareUnknown | None:
    """ERR-56, ACC-88: why `hardware` decides nothing of the call whatever its lowering, or None."""
    return hbm_access_unknown(call) or mosaic_refusal_unknown(call)


def first_hardware_unknown(calls) -> HardwareUnknown | None:
    """`hardware_unknown` of the first of `calls` (kernel calls, None skipped) that has a reason."""
    return next((w for c in calls if c is not None for w in (hardware_unknown(c),) if w is not None), None)


def refused_unlowered(call: KernelCall, error: Exception, *, cores: int | None,
                      name: str) -> tuple[Program, HardwareUnknown] | None:
    """(the interpreter's program, why `hardware` has none) for a call whose lowering raised `error` and whose
    arguments the interpreter refuses (ERR-36); None when `error` must stand (another error, values the
    build has not given yet, or a call the interpreter does not refuse so)."""
    if not stands_for_unlowered(error):
        return None
    failure = typed_operand_failure(call.refused_spaces)
    if failure is None:
        return None
    return unlowered_launch(call, failure, error, cores=cores, name=name)


def stands_for_unlowered(error: Exception) -> bool:
    """Whether a lowering's `error` may be stood in for by a launch that fails (ERR-37, PRG-208): an unsupported
    construct, not the values the build has not given yet."""
    return isinstance(error, Unsupported) and not isinstance(error, NeedsConcreteInputs)


def unlowered_launch(call: KernelCall, failure: Any, error: Exception, *, cores: int | None, name: str,
                     rule: str = "ERR-37") -> tuple[Program, HardwareUnknown]:
    """(a program of no kernel operations whose launch fails with `failure` in the interpreter's modes, why
    `hardware` has none: the lowering's `error`, with its line) for a call whose kernel is not lowered."""
    n_cores = int(cores) if cores is not None and call.core_axis_name is None else call.cores_per_device
    topology = Topology(call.mesh.num_devices, n_cores)
    program = launch(topology, [[] for _ in range(topology.num_cores)], collective_id=call.collective_id,
                     name=name, loc=call.loc, launch_failure=failure)
    why = HardwareUnknown(f"unsupported {str(error).removeprefix('unsupported ')}")
    why.rule = rule
    return program, why


__all__ = ["HardwareUnknown", "first_hardware_unknown", "hardware_unknown", "hbm_access_unknown", "mosaic_refusal_unknown", "refused_unlowered", "stands_for_unlowered", "unlowered_launch"]
