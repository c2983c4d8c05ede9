"""A target whose kernel calls hand semaphores to each other, checked as one program (specs/deciding/programs.md).

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


def jax_picks_ids(kernels: list[LoweredKernel]) -> bool:
    """PRG-125: whether some call uses the barrier semaphore with a collective id jax picks when it lowers
    for a TPU (a tag, or an auto-assignment mode): its own lowering has none, the TPU's is the program's."""
    from semcheck.model.symmetric import class_cores

    return any(k.call is not None and k.call.collective_id is None
               and any(op.fetches_barrier for p in lowerings(k) for ops in class_cores(p) for op in ops)
               for k in kernels)


def lowerings(k: LoweredKernel) -> list[Any]:
    """A call's lowering and, where a loop gives each iteration its own values, each iteration's (PRG-183)."""
    return [k.program, *dict.fromkeys(p for _, p in getattr(k, "iterations", ()))]


def lower_program(t: Target, devices: int, kernels: list[LoweredKernel], *, cores: int | None = None,
                  build_kwargs: dict[str, Any] | None = None) -> list[ComposedProgram] | None:
    """The target's composed program, one per order of its calls XLA may choose (the traced order
    first), or None when its calls share no semaphore (module docstring)."""
    if not takes_or_returns_semaphores(kernels):
        return None
    from semcheck.checker.frontend.scalar_memory import NeedsConcreteInputs
    from semcheck.checker.frontend.trace import make_jaxpr

    n_cores = cores if cores is not None else t.cores
    irs, followed = _program_irs(t, devices, build_kwargs or {}, make_jaxpr), None
    while True:
        try:
            return [c for ir in irs for c in _composed(t, ir, n_cores, followed, strict=True)]
        except NeedsConcreteInputs as e:
            if followed is not None:
                raise _not_followed(e) from e
            # PRG-167: the values the build's concrete arguments give each call, as a single call gets them
            irs, followed = _followed_irs(t, devices, build_kwargs or {}, make_jaxpr)


def _composed(t: Target, ir: Any, n_cores: int, followed: Any, *, strict: bool) -> list[ComposedProgram]:
    """The composed orders of one program (PRG-126: one per branch taken). `strict` (calls that hand over
    semaphores, PRG-102): a program the walk could not follow is refused; otherwise (PRG-115) the caller
    has dealt with it, and a program without calls composes to nothing."""
    from semcheck.checker.frontend.size_bound import check_composable

    if ir.unknown is not None and strict:
        reason, loc = ir.unknown
        raise Unsupported("program", reason, loc)
    check_composable([inv.call for inv in ir.invocations], n_cores)  # RUN-13, before anything is built
    if not ir.invocations and not strict:
        return []
    from semcheck.checker.frontend.lower import LoweringStats

    stats = LoweringStats()  # ERR-32: a window of some call the interpreter may refuse unseen
    lowered = _lower_invocations(t, ir, n_cores, followed, stats)
    computed = _computed_by(ir, followed)
    return [_unseen_in(_computed_in(_in_branch(c, ir), computed, _computed_by(ir, followed, "unwritten")),
                       stats.unpredicted, stats.past_end)
            for c in compose_readings(ir, lowered, name=t.name)]


def _computed_by(ir: Any, followed: Any, what: str = "computed_by") -> str:
    """PRG-169: the kernel calls whose outputs, run by jax's interpreter, gave a call of `ir` its values (`what`:
    "unwritten", PRG-200: those of them that may read memory nothing writes, and why)."""
    if followed is None:
        return ""
    said = [getattr(followed[id(inv.eqn)], what) for inv in ir.invocations if id(inv.eqn) in followed]
    return ", ".join(dict.fromkeys(w for w in said if w))


def _unseen_in(c: ComposedProgram, unpredicted: str, past_end: str) -> ComposedProgram:
    import dataclasses

    return dataclasses.replace(c, unpredicted=unpredicted, past_end=past_end) if unpredicted or past_end else c


def _computed_in(c: ComposedProgram, computed: str, unwritten: str) -> ComposedProgram:
    import dataclasses

    return dataclasses.replace(c, computed_by=computed, unwritten=unwritten) if computed else c


def _lower_invocations(t: Target, ir: Any, n_cores: int, followed: Any, stats: Any = None) -> list[Any]:
    """Each invocation's kernel program, lowered once per call and scalar inputs (PRG-167: `followed`, the
    values per launch equation, or None when the calls were traced on shapes)."""
    from semcheck.checker.frontend.lower import lower_kernel
    from semcheck.checker.frontend.scalar_memory import NeedsConcreteInputs

    from semcheck.checker.frontend.scan_inputs import refuse_regions_a_loop_varies

    by_call: dict[tuple[int, int], Any] = {}
    lowered = []
    for inv, inputs in zip(ir.invocations, invocation_inputs(ir, followed)):
        key = (id(inv.call), id(inputs))
        if key not in by_call:
            try:
                by_call[key] = _unfollowed(lower_kernel, inv, n_cores, f"{t.name}:{inv.name}", inputs, stats)
            except NeedsConcreteInputs as e:
                e.invocation = inv  # which call, for the reason (`_not_followed`)
                raise
            refuse_regions_a_loop_varies(by_call[key])  # PRG-182: a launch whose iterations are not told apart
        lowered.append(by_call[key])
    return lowered


def invocation_inputs(ir: Any, followed: Any) -> list[Any]:
    """Per invocation of `ir`, the values its call reads (PRG-167: per launch equation; None without `followed`).
    PRG-183: a launch in a loop whose iterations give it different values has each iteration's own, the walk's
    n-th invocation of the launch reading the evaluation's n-th reach, where the two count the same reaches and
    each is run by the devices that make the reach (PRG-198: all of them, or the `reached_by` of a reach only some
    make); otherwise it has none (and PRG-182 refuses a region that needs them)."""
    if followed is None:
        return [None] * len(ir.invocations)
    by_launch: dict[int, list[Any]] = {}
    for inv in ir.invocations:
        by_launch.setdefault(id(inv.eqn), []).append(inv)
    told: set[int] = set()
    for key, invs in by_launch.items():
        its = getattr(followed.get(key), "iterations", ())
        if its and len(its) == len(invs) and all(inv.devices == got.reached_by for inv, (_, got) in zip(invs, its)):
            told.add(key)
    seen: dict[int, int] = {}
    out = []
    for inv in ir.invocations:
        inputs = followed.get(id(inv.eqn))
        n = seen.get(id(inv.eqn), 0)
        seen[id(inv.eqn)] = n + 1
        if id(inv.eqn) in told:
            inputs = inputs.iterations[n][1]
        out.append(inputs)
    return out


def _followed_irs(t: Target, devices: int, kwargs: dict[str, Any], make_jaxpr: Any) -> tuple[list[Any], Any]:
    """PRG-167: the programs of the target traced on its concrete example arguments, and per launch equation
    the values `concrete_inputs` gives its call (one path with a single call's)."""
    import jax

    from semcheck.checker.frontend.concrete_inputs import inputs_by_launch
    from semcheck.checker.frontend.program_walk import program_irs

    fn, args = t.build(devices, **kwargs)
    closed = make_jaxpr(fn, args, path=t.path)
    return program_irs(closed.jaxpr, jax.tree.leaves(args)), inputs_by_launch(closed, args)


def _not_followed(e: Exception) -> Unsupported:
    """PRG-167: a call whose scalar inputs the build's arguments do not give (an earlier kernel's output, a
    value computed in a loop around the calls, shapes for arguments): unknown, with why and the call's line."""
    inv = getattr(e, "invocation", None)
    what = inv.describe() if inv is not None else "a kernel call"
    loc = inv.loc if inv is not None else getattr(e, "loc", None)
    return Unsupported("program", f"{what} needs the values of its scalar inputs, which the program does not "
                       f"give it: {e}", loc)


def _unfollowed(lower_kernel: Any, inv: Any, cores: int, name: str, inputs: Any, stats: Any = None) -> Any:
    """A kernel's program for a composed program: lowered again without following values copies move when
    its lowering followed some (ACC-9's last clause, ACC-4's treatment): a composed program does not carry
    the check that makes them facts, and what needs them is then unknown at its own line."""
    from semcheck.checker.frontend.scalar_memory import NeedsFloatInputs

    try:
        program = lower_kernel(inv.call, cores=cores, name=name, inputs=inputs, stats=stats)
    except NeedsFloatInputs:  # PRG-207: a value only ACC-41's lowering computes, which follows copies
        program = None
    if program is None or getattr(program, "followed", None) is not None:
        program = lower_kernel(inv.call, cores=cores, name=name, inputs=inputs, follow_copies=False, stats=stats)
    return program


def _in_branch(c: ComposedProgram, ir: Any) -> ComposedProgram:
    import dataclasses

    return dataclasses.replace(c, branch=ir.describe_branches()) if ir.branches else c


def _program_irs(t: Target, devices: int, kwargs: dict[str, Any], make_jaxpr: Any,
                 traced: tuple[Any, Any] | None = None) -> list[Any]:
    """PRG-126: the target's programs, one per combination of the branches its conds around kernel calls
    may take; the build's concrete inputs decide the conds they can. `traced`: the target's jaxpr and
    inputs, when the caller has them already."""
    from semcheck.checker.frontend.program_ir import PER_DEVICE, UNKNOWN_TRIPS
    from semcheck.checker.frontend.program_walk import program_irs

    jaxpr, args = traced if traced is not None else _trace_with_args(t, devices, kwargs, make_jaxpr)
    irs = program_irs(jaxpr, args)
    # PRG-145, PRG-171: a cond's branch on each device, a while loop's trip count, from the concrete arguments
    per_device = any(ir.unknown is not None and (PER_DEVICE in ir.unknown[0] or UNKNOWN_TRIPS in ir.unknown[0])
                     for ir in irs)
    if args is None and (per_device or any(ir.branches for ir in irs)):
        try:
            import jax

            fn, concrete = t.build(devices, **kwargs)
            irs = program_irs(make_jaxpr(fn, concrete, path=t.path).jaxpr, jax.tree.leaves(concrete))
        except FrontendError:
            pass
    return irs  # PRG-146: each program's ids are jax's over every branch, taken or not


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
               "traced order was checked (PRG-117)")
        return [dataclasses.replace(compose(ir, lowered, name=name, reading=r), unexplored=why) for r in readings]
    return [c for r in readings for c in compose_orders(ir, lowered, name=name, reading=r)]


def communicating_program(t: Target, devices: int, kernels: list[LoweredKernel], *, cores: int | None = None,
                          build_kwargs: dict[str, Any] | None = None) -> tuple[list[ComposedProgram] | None, str]:
    """PRG-115: a target whose calls take and return no semaphore but communicate (a remote signal or copy)
    and run more than one kernel invocation is composed too, so that invocation-confined (PROP-8) and the
    barrier counts a collective id carries from call to call (PRG-105) are checked over the program.
    Returns (the composed orders or None, why invocation-confined cannot be decided when the program cannot
    be composed: then the calls are checked alone and that property is unknown)."""
    from semcheck.checker.frontend.program_lower import program_communicates

    picked = jax_picks_ids(kernels)
    if not picked and not any(program_communicates(p) for k in kernels for p in lowerings(k)):
        return None, ""
    from semcheck.checker.frontend.scalar_memory import NeedsConcreteInputs
    from semcheck.checker.frontend.trace import make_jaxpr

    def cannot(why: str, loc: Any = None) -> tuple[None, str]:
        if picked:  # PRG-125: checked alone, such a call has no id on a TPU: no hardware verdict from it
            raise Unsupported("program", f"{why}; a kernel of it has a collective id jax picks for a TPU, which "
                              "only the composed program gives (specs/deciding/programs.md PRG-125)",
                              loc if loc is not None else kernels[0].call.loc)
        return None, why

    try:
        irs = _program_irs(t, devices, build_kwargs or {}, make_jaxpr)
    except FrontendError as e:
        return cannot(f"the program of its calls could not be followed ({e})")
    if all(ir.unknown is None and len(ir.invocations) < 2 and not _only_some(ir) for ir in irs) and not picked:
        return None, ""
    for ir in irs:
        if ir.unknown is not None:
            reason, loc = ir.unknown
            if picked:
                cannot(f"the program of its calls is not followed: {reason}", loc)
            return None, f"the program of its calls is not followed ({reason}, {loc})"
    n_cores = cores if cores is not None else t.cores
    followed = None
    while True:
        try:
            out = [c for ir in irs for c in _composed(t, ir, n_cores, followed, strict=False)]
            break
        except NeedsConcreteInputs as e:
            if followed is not None:
                return cannot(f"the program of its calls could not be composed ({_not_followed(e)})")
            try:  # PRG-167: the values the build's concrete arguments give each call
                irs, followed = _followed_irs(t, devices, build_kwargs or {}, make_jaxpr)
            except FrontendError as e2:
                return cannot(f"the program of its calls could not be composed ({e2})")
            for ir in irs:
                if ir.unknown is not None:
                    if picked:
                        cannot(f"the program of its calls is not followed: {ir.unknown[0]}", ir.unknown[1])
                    return None, f"the program of its calls is not followed ({ir.unknown[0]}, {ir.unknown[1]})"
        except FrontendError as e:
            return cannot(f"the program of its calls could not be composed ({e})")
    if not out:
        return None, ""
    return out, ""


def calls_some_devices_skip(t: Target, devices: int, kernels: list[LoweredKernel], *,
                            build_kwargs: dict[str, Any] | None = None) -> tuple[str, Any, Any] | None:
    """PRG-163: for a target whose calls are checked alone (they neither communicate nor take or return a
    semaphore), why the interpreter's verdicts of the calls alone do not hold, with the line: some call runs
    on only some devices of a mesh of several (or may: a cond or loop around it the walk cannot follow).
    None when every device runs every call; the third item is the walked program where the walk gave each device
    its calls (PRG-180 reads it), else None. Costs a trace only where a call runs on several devices, and a
    walk only where a call sits under a `cond` or `while` (the scan of the traced jaxpr decides)."""
    if not any(k.call is not None and max(k.mesh.num_devices, k.mesh.physical_devices) > 1 for k in kernels):
        return None  # one device: no device can skip a call
    from semcheck.checker.frontend.trace import make_jaxpr

    kwargs = build_kwargs or {}
    try:
        traced = _trace_with_args(t, devices, kwargs, make_jaxpr)
    except FrontendError as e:
        return f"the program of its calls could not be traced to tell which devices run each call ({e})", None, None
    if not _call_under_branch(traced[0]):
        return None
    try:
        irs = _program_irs(t, devices, kwargs, make_jaxpr, traced)
    except FrontendError as e:
        return f"the program of its calls could not be followed to tell which devices run each call ({e})", None, None
    for ir in irs:
        if ir.unknown is not None:
            reason, loc = ir.unknown
            return f"the program of its calls is not followed ({reason}), so which devices run each call is not known", loc, None
        if _only_some(ir):
            split = next(inv for inv in ir.invocations if inv.devices is not None)
            return f"{split.describe()} runs on only some devices", split.loc, (ir if len(irs) == 1 else None)
    return None


def refuse_collective_hang(t: Target, devices: int, kernels: list[LoweredKernel], *,
                           build_kwargs: dict[str, Any] | None = None) -> None:
    """PRG-201 for calls checked alone: a program whose XLA operations hold a collective inside a `cond` or a
    `while` loop (outside any kernel) is walked, and where the walk cannot follow it (a collective only some
    devices may run, or anything else that stops it first) the target is unknown with the walk's reason and line:
    a device that runs the collective waits for the others of its group, in every mode. A program without such a
    collective is not walked (as before), nor one whose calls run on one device."""
    if not any(k.call is not None and max(k.mesh.num_devices, k.mesh.physical_devices) > 1 for k in kernels):
        return  # one device: every device of a group joins
    from semcheck.checker.frontend.program_jaxpr import branching_collective
    from semcheck.checker.frontend.source_names import eqn_loc
    from semcheck.checker.frontend.trace import make_jaxpr

    kwargs = build_kwargs or {}
    try:
        traced = _trace_with_args(t, devices, kwargs, make_jaxpr)
    except FrontendError as e:
        raise Unsupported("program", "the program of its calls could not be traced to tell whether an XLA "
                          f"collective inside a cond or loop may be run by only some devices (PRG-201): {e}") from e
    found = next((c for e in traced[0].eqns if (c := branching_collective(e)) is not None), None)
    if found is None:
        return
    try:
        irs = _program_irs(t, devices, kwargs, make_jaxpr, traced)
    except FrontendError as e:
        raise Unsupported("program", f"the program of its calls, which holds an XLA collective inside a cond or "
                          f"loop, could not be followed ({e}) (PRG-201)", eqn_loc(found)) from e
    for ir in irs:
        if ir.unknown is not None:
            reason, loc = ir.unknown
            if "PRG-201" not in reason:
                reason = (f"the program of its calls, which holds an XLA collective ({found.primitive.name}) inside "
                          f"a cond or loop, is not followed ({reason}) (PRG-201)")
            raise Unsupported("program", reason, loc)


def _call_under_branch(jaxpr: Any, under: bool = False) -> bool:
    """PRG-163: whether a kernel call of `jaxpr` sits inside a `cond` (or `switch`) or a `while_loop`, the only
    constructs whose branch or trip count may differ between devices."""
    from semcheck.checker.frontend.trace import sub_jaxprs

    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name in ("pallas_call", "mpmd_map"):
            if under:
                return True
            continue
        inner = under or name in ("cond", "while")
        if any(_call_under_branch(sub, inner) for sub in sub_jaxprs(eqn.params)):
            return True
    return False


def _only_some(ir: Any) -> bool:
    """PRG-145, PRG-163: whether some call of the program runs on only some devices (a lone such call is
    composed too: checked alone, every device would run it)."""
    return any(inv.devices is not None for inv in ir.invocations)


def _trace(t: Target, devices: int, kwargs: dict[str, Any], make_jaxpr: Any) -> Any:
    return _trace_with_args(t, devices, kwargs, make_jaxpr)[0]


_last_trace: dict[tuple, tuple[Any, Any]] = {}
"""The last target's trace: `communicating_program` and `calls_some_devices_skip` (PRG-163) both need it."""


def _trace_with_args(t: Target, devices: int, kwargs: dict[str, Any], make_jaxpr: Any) -> tuple[Any, Any]:
    """The traced jaxpr and its inputs' concrete values (None when the build was staged, abstract)."""
    key = (t.path, t.name, devices, repr(sorted(kwargs.items())), make_jaxpr)
    if key not in _last_trace:
        traced = _trace_uncached(t, devices, kwargs, make_jaxpr)
        _last_trace.clear()
        _last_trace[key] = traced
    return _last_trace[key]


def _trace_uncached(t: Target, devices: int, kwargs: dict[str, Any], make_jaxpr: Any) -> tuple[Any, Any]:
    from semcheck.checker.frontend.staged_trace import staged_trace

    try:
        staged = staged_trace(t, devices, kwargs)  # lowering the target traced it already
        if staged is not None:
            return staged[1].jaxpr, None
    except FrontendError:
        pass  # e.g. fn closes over a value the staged build left abstract
    import jax

    fn, args = t.build(devices, **kwargs)
    return make_jaxpr(fn, args, path=t.path).jaxpr, jax.tree.leaves(args)


__all__ = ["calls_some_devices_skip", "communicating_program", "jax_picks_ids", "lower_program",
           "refuse_collective_hang", "takes_or_returns_semaphores"]
