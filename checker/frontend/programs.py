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
from semcheck.checker.frontend.program_lower import MAX_ORDERS, ComposedProgram, compose_orders

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
    return compose_readings(ir, lowered, name=t.name)


def compose_readings(ir: Any, lowered: list[Any], *, name: str) -> list[ComposedProgram]:
    """PRG-116: the composed orders, in both readings when different kernels share a collective id (one
    barrier semaphore for all of them; one each), the first reading's traced order first."""
    from semcheck.checker.frontend.program_lower import READINGS, shares_id_between_kernels

    readings = READINGS if shares_id_between_kernels(ir, lowered) else (None,)
    if ir.unknown is None and ir.invocations and ir.orders(MAX_ORDERS) is None:
        # PRG-117: too many orders to compose each; the traced order is one XLA may run, so what it
        # violates is violated, and the rest is unknown
        import dataclasses

        from semcheck.checker.frontend.program_lower import compose

        why = (f"its calls' data dependences leave more than {MAX_ORDERS} orders XLA may run them in; only the "
               "traced order was checked (programs.md PRG-117)")
        return [dataclasses.replace(compose(ir, lowered, name=name, reading=r), unexplored=why) for r in readings]
    return [c for r in readings for c in compose_orders(ir, lowered, name=name, reading=r)]


def communicating_program(t: Target, devices: int, kernels: list[LoweredKernel], *, cores: int | None = None,
                          build_kwargs: dict[str, Any] | None = None) -> tuple[list[ComposedProgram] | None, str]:
    """PRG-115: a target whose calls take and return no semaphore but communicate (a remote signal or copy)
    and run more than one kernel invocation is composed too, so that invocation-confined (PROP-8) and the
    barrier counts a collective id carries from call to call (PRG-105) are checked over the program.
    Returns (the composed orders or None, why invocation-confined cannot be decided when the program cannot
    be composed: then the calls are checked alone and that property is unknown)."""
    from semcheck.checker.frontend.program_lower import _communicates

    if not any(_communicates(k.program) for k in kernels):
        return None, ""
    from semcheck.checker.frontend.lower import lower_kernel
    from semcheck.checker.frontend.program_ir import program_ir
    from semcheck.checker.frontend.scalar_memory import NeedsConcreteInputs
    from semcheck.checker.frontend.trace import make_jaxpr

    try:
        ir = program_ir(_trace(t, devices, build_kwargs or {}, make_jaxpr))
    except FrontendError as e:
        return None, f"the program of its calls could not be followed ({e})"
    if ir.unknown is None and len(ir.invocations) < 2:
        return None, ""
    if ir.unknown is not None:
        reason, loc = ir.unknown
        return None, f"the program of its calls is not followed ({reason}, {loc})"
    n_cores = cores if cores is not None else t.cores
    by_call: dict[int, Any] = {}
    lowered = []
    try:
        for inv in ir.invocations:
            if id(inv.call) not in by_call:
                by_call[id(inv.call)] = lower_kernel(inv.call, cores=n_cores, name=f"{t.name}:{inv.name}")
            lowered.append(by_call[id(inv.call)])
        return compose_readings(ir, lowered, name=t.name), ""
    except (NeedsConcreteInputs, FrontendError) as e:
        return None, f"the program of its calls could not be composed ({e})"


def _trace(t: Target, devices: int, kwargs: dict[str, Any], make_jaxpr: Any) -> Any:
    built = t.build_shapes(devices, **kwargs)
    if built is not None:
        try:
            return make_jaxpr(*built, path=t.path).jaxpr
        except FrontendError:
            pass  # e.g. fn closes over a value the staged build left abstract
    fn, args = t.build(devices, **kwargs)
    return make_jaxpr(fn, args, path=t.path).jaxpr


__all__ = ["communicating_program", "lower_program", "takes_or_returns_semaphores"]
