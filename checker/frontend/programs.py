"""A target whose kernel calls hand semaphores to each other, checked as one program (programs.md).

`lower_program(target, devices, kernels)` returns None when no kernel call of the target takes or
returns a semaphore: then each call is checked alone, as before. Otherwise the calls cannot be
checked alone (a copy started by one call is waited by another, PRG-102), and it traces the target
once more, walks it into a `ProgramIR` (`program_ir`), lowers each invocation with the same rules
as a single kernel and composes them (`program_lower`). What it cannot follow raises
`Unsupported` with the reason and the line, and the target is unknown.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from semcheck.checker.frontend.errors import FrontendError, Unsupported
from semcheck.checker.frontend.program_lower import ComposedProgram, compose_orders

if TYPE_CHECKING:
    from semcheck.checker.frontend.api import LoweredKernel
    from semcheck.checker.frontend.targets import Target


def takes_or_returns_semaphores(kernels: list[LoweredKernel]) -> bool:
    """Whether some kernel call has a semaphore among its inputs or outputs."""
    return any(o.kind == "semaphore" and o.role in ("input", "output")
               for k in kernels if k.call is not None for o in k.call.operands)


def lower_program(t: Target, devices: int, kernels: list[LoweredKernel], *, cores: int | None = None,
                  build_kwargs: dict[str, Any] | None = None) -> list[ComposedProgram] | None:
    """The target's composed program, one per order of its calls XLA may choose (the traced order
    first), or None when its calls share no semaphore (module docstring)."""
    if not takes_or_returns_semaphores(kernels):
        return None
    from semcheck.checker.frontend.lower import lower_kernel
    from semcheck.checker.frontend.program_ir import program_ir
    from semcheck.checker.frontend.scalar_memory import NeedsConcreteInputs
    from semcheck.checker.frontend.trace import make_jaxpr

    jaxpr = _trace(t, devices, build_kwargs or {}, make_jaxpr)
    ir = program_ir(jaxpr)
    if ir.unknown is not None:
        reason, loc = ir.unknown
        raise Unsupported("program", reason, loc)
    n_cores = cores if cores is not None else t.cores
    by_call: dict[int, Any] = {}
    lowered = []
    for inv in ir.invocations:
        key = id(inv.call)
        if key not in by_call:
            try:
                by_call[key] = lower_kernel(inv.call, cores=n_cores, name=f"{t.name}:{inv.name}")
            except NeedsConcreteInputs as e:
                raise Unsupported("program", f"{inv.describe()} needs the values of its scalar inputs, which "
                                  "programs of kernel calls do not follow yet", inv.loc) from e
        lowered.append(by_call[key])
    return compose_orders(ir, lowered, name=t.name)


def _trace(t: Target, devices: int, kwargs: dict[str, Any], make_jaxpr: Any) -> Any:
    built = t.build_shapes(devices, **kwargs)
    if built is not None:
        try:
            return make_jaxpr(*built, path=t.path).jaxpr
        except FrontendError:
            pass  # e.g. fn closes over a value the staged build left abstract
    fn, args = t.build(devices, **kwargs)
    return make_jaxpr(fn, args, path=t.path).jaxpr


__all__ = ["lower_program", "takes_or_returns_semaphores"]
