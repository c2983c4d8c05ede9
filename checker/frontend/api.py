"""`load`: kernel file -> traced kernels -> lowered `Program`s."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from semcheck.checker.frontend.dynamic_grid import resolve_grid
from semcheck.checker.frontend.errors import BadTargetReturn, FrontendError
from semcheck.checker.frontend.lower import LoweringStats, at_call
from semcheck.checker.frontend.scan_inputs import lower_iterations, refuse_regions_a_loop_varies
from semcheck.checker.frontend.symmetric_lowering import SYMMETRIC_FROM, lower_call
from semcheck.checker.frontend.targets import Target, load_targets, provision_for_tracing
from semcheck.checker.frontend.trace import KernelCall, MeshInfo
from semcheck.model.ops import DMA_MODES, Loc, Program

if TYPE_CHECKING:
    from semcheck.checker.frontend.concrete_inputs import KernelInputs


@dataclasses.dataclass(frozen=True)
class LoweredKernel:
    """One kernel launch of one target, lowered for one device count."""

    program: Program
    mode: str | None  # the interpreter's dma_execution_mode (None: not interpreted)
    mesh: MeshInfo
    source_file: str
    target: str
    name: str  # the pallas_call / core_map name
    index: int  # position among the target's kernels
    loc: Loc  # the pallas_call / core_map line
    cores_per_device: int
    collective_id: int | None
    requested_devices: int
    interpret_params: Any = None
    call: KernelCall | None = dataclasses.field(default=None, repr=False, compare=False)
    stats: LoweringStats = dataclasses.field(default_factory=LoweringStats, compare=False)
    # PRG-169: the earlier calls (positions among the target's kernels) whose outputs gave its scalar inputs
    producers: tuple[int, ...] = ()
    computed_by: str = ""
    unwritten: str = ""  # PRG-200: of those calls, the ones that may read memory nothing writes ("" when none)
    # PRG-183: where a loop's iterations give the call different scalar inputs, each iteration's own lowering
    # (which iteration, in words; its program), checked one by one in place of `program` (a lowering over no
    # values); empty otherwise
    iterations: tuple[tuple[str, Program], ...] = ()
    # ACC-27: where the interpreter's modes know values `hardware` does not (`program` is lowered with those), the
    # lowering for `hardware`, or why it could not be made (the refusal, at its line); None: `program` is every mode's
    hardware: Program | str | tuple | None = None  # ACC-64: a tuple of (case, program), `range_cases`
    # PRG-217: the interpreter modes whose program is not `program` (a call that never starts after an earlier call
    # raising other errors in the two modes, or shown to raise in every run of one mode only): (mode, its program,
    # or why that mode has none)
    modes_apart: tuple[tuple[str, Program | str], ...] = ()
    # ACC-71: the call lowered again with some racy reads given values (`KernelInputs.pins`); None: not offered
    relower: Callable[[Any], Program] | None = dataclasses.field(default=None, repr=False, compare=False)
    # ERR-57: the analysis of `program` that `after_failures` read its deadlock-free verdict off, shared with its
    # checks (`checking.kernel_results`); None: none was made
    analysis: Any = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def num_devices(self) -> int:
        return self.program.topology.num_devices

    @property
    def target_name(self) -> str:
        return self.target

    @property
    def warnings(self) -> tuple[str, ...]:
        return tuple(self.stats.warnings)


def load(
    path: str,
    target: str | None = None,
    entry: str | None = None,
    devices: int = 2,
    cores: int | None = None,
    dma_mode: str | None = None,
    build_kwargs: dict[str, Any] | None = None,
) -> list[LoweredKernel]:
    """Lower every TPU kernel of the selected target(s) of a kernel file.

    `path` may carry a selector (`file.py::name`); `target` selects by name
    too; `entry` names a builder function when the file has no
    `@semcheck.target` and no `build`. `devices` is passed to the builder
    (jax gets that many host devices if it is not initialised yet; a target
    traced with an abstract mesh, RUN-14, never makes them).
    `cores` overrides the interpreter's cores per device (a target's own
    `cores=` applies otherwise); `dma_mode` overrides the reported mode (under `hardware` every kernel is
    lowered with the values all modes share; otherwise with the interpreter modes' values, ACC-27).
    `build_kwargs` are passed to builders that accept them.
    """
    if dma_mode is not None and dma_mode not in DMA_MODES:
        raise ValueError(f"dma_mode must be one of {DMA_MODES}, got {dma_mode!r}")
    provision_for_tracing(devices)
    targets = load_targets(path, entry=entry, target=target)
    out: list[LoweredKernel] = []
    for t in targets:  # ACC-27: `program` is what the interpreter runs, with the values its modes know
        out.extend(lower_target(t, devices, cores=cores, dma_mode=dma_mode, build_kwargs=build_kwargs,
                                per_mode=dma_mode != "hardware"))
    return out


def lower_target(
    t: Target,
    devices: int,
    *,
    cores: int | None = None,
    dma_mode: str | None = None,
    build_kwargs: dict[str, Any] | None = None,
    per_mode: bool = False,
) -> list[LoweredKernel]:
    """Build, trace and lower one target.

    The builder first runs staged (`Target.build_shapes`: argument shapes
    only). If a kernel then needs the values of its scalar inputs (a loop
    bound or branch read from a scalar-prefetch table: `NeedsConcreteInputs`),
    the builder runs for real and the kernels are lowered again with the
    values the concrete arguments give (`concrete_inputs`). `per_mode` (ACC-27): a kernel whose values differ
    between the interpreter's modes and `hardware` gets each mode's lowering (`LoweredKernel.hardware`); else
    every kernel is lowered with the values all modes share.
    """
    # lazy: these import jax, which must load after the caller provisions devices
    from semcheck.checker.frontend.concrete_inputs import inputs_of_trace, trace_with_inputs
    from semcheck.checker.frontend.scalar_memory import NeedsConcreteInputs, NeedsFloatInputs
    from semcheck.checker.frontend.staged_trace import staged_trace

    kwargs = build_kwargs or {}

    def lowered(values: Callable[[bool], tuple[list[KernelCall], list[KernelInputs]]]) -> list[LoweredKernel]:
        try:
            return lower_all(t, devices, values(False), cores=cores, dma_mode=dma_mode)
        except NeedsFloatInputs:  # ACC-41: the float inputs' values too, computed only where a value needs them
            return lower_all(t, devices, values(True), cores=cores, dma_mode=dma_mode)

    traced = None
    try:
        staged = staged_trace(t, devices, kwargs)  # kept: the program of the calls starts from it too
        if staged is not None:
            (_, args), closed = staged
            traced = inputs_of_trace(closed, args, path=t.path, per_mode=per_mode)
    except FrontendError:
        traced = None  # e.g. fn closes over a value the staged build left abstract
    if traced is not None:
        try:
            return lowered(lambda floats: inputs_of_trace(closed, args, path=t.path, per_mode=per_mode,
                                                          floats=True) if floats else traced)
        except NeedsConcreteInputs:
            if not any(i.abstract for i in traced[1]):
                raise
    fn, args = t.build(devices, **kwargs)
    return lowered(lambda floats: trace_with_inputs(fn, args, path=t.path, per_mode=per_mode, floats=floats))


def lower_all(t: Target, devices: int, traced: tuple[list[KernelCall], list[KernelInputs]], *,
               cores: int | None, dma_mode: str | None) -> list[LoweredKernel]:
    calls, inputs = traced
    n_cores = cores if cores is not None else t.cores
    out = []
    failed: tuple[int, Any] | None = None  # (unit, failure): LAUNCH-2/3 stop their compile unit and all after it
    for traced_call, values in zip(calls, inputs):
        call = resolve_grid(traced_call, values)
        stats = LoweringStats()
        # PRG-183: each iteration of a loop that varies the call's values lowered with its own
        iterations = lower_iterations(values, lambda v: lower_call(
            resolve_grid(traced_call, v), cores=n_cores, name=f"{t.name}:{call.name}", stats=stats, inputs=v,
            symmetric_from=SYMMETRIC_FROM if len(calls) == 1 else None))
        unseen = stats.unpredicted  # ERR-32: the iterations' (where there are any, the lowering below is not checked)
        refused = None  # ERR-37: (the interpreter's program, why hardware has none) for a kernel not lowered
        try:
            # RUN-22: one period of the devices when certified; else every device, if RUN-13 lets it be built
            program = lower_call(call, cores=n_cores, name=f"{t.name}:{call.name}", stats=stats, inputs=values,
                                 symmetric_from=SYMMETRIC_FROM if len(calls) == 1 else None)
        except FrontendError as e:
            if not iterations:
                from semcheck.checker.frontend.refused_launch import refused_unlowered  # lazy: it imports numpy

                refused = refused_unlowered(call, e, cores=n_cores, name=f"{t.name}:{call.name}") \
                    if len(calls) == 1 else _never_starts(call, e, out, calls, n_cores, f"{t.name}:{call.name}")
                if refused is None:
                    raise
                program = refused[0]
            else:
                program = iterations[0][1]  # (a lowering over no values needed them: the first iteration's stands in)
        if not iterations:
            refuse_regions_a_loop_varies(program)  # PRG-182
        else:
            stats.unpredicted = unseen
        if failed is None and program.launch_failure is not None and not isinstance(refused, _NeverStarts):
            failed = (call.unit, at_call(program.launch_failure, call))  # PRG-223: the failing call's line
        mode = dma_mode if dma_mode is not None else call.dma_mode
        # ACC-27: the values hardware knows, where they differ; ACC-28: the same values, where the kernel broke a
        # tie only the interpreter's modes break alike
        hw = None if values is None else values.hardware if values.hardware is not None else (
            dataclasses.replace(values, on_cpu=False) if stats.cpu_only else None)
        hardware = refused[1] if refused is not None else None if hw is None else _hardware_lowering(
            hw, lambda v: lower_call(resolve_grid(traced_call, v), cores=n_cores,
                                                  name=f"{t.name}:{call.name}", stats=LoweringStats(), inputs=v,
                                                  symmetric_from=SYMMETRIC_FROM if len(calls) == 1 else None))
        if not isinstance(hardware, str):  # ERR-56: a load or store of a ref in HBM or ANY is not decided on a TPU;
            from semcheck.checker.frontend.refused_launch import hardware_unknown  # lazy: it imports numpy

            hardware = hardware_unknown(call) or hardware  # ACC-88: nor a kernel Mosaic refuses (a stable top_k)
        stood = refused[2] if isinstance(refused, _NeverStarts) else None  # PRG-208: the call that fails
        apart = refused[3] if isinstance(refused, _NeverStarts) else ()  # PRG-217: its modes that differ
        out.append(
            LoweredKernel(
                program=program,
                mode=mode,
                mesh=call.mesh,
                source_file=os.path.abspath(t.path) if t.path else "",
                target=t.name,
                name=call.name,
                index=call.index,
                loc=call.loc,
                cores_per_device=program.topology.cores_per_device,
                collective_id=call.collective_id,
                requested_devices=devices,
                interpret_params=call.interpret_params,
                call=call,
                stats=stats,
                producers=values.producers if values is not None and stood is None else (),
                computed_by=values.computed_by if values is not None and stood is None else "",
                unwritten=values.unwritten if values is not None and stood is None else "",
                iterations=iterations,
                hardware=hardware,
                modes_apart=apart,
                relower=None if values is None or iterations or refused is not None else _relowering(
                    traced_call, values, n_cores, f"{t.name}:{call.name}", len(calls) == 1),
            )
        )
    if failed is not None:
        out = [_never_runs(k, *failed) for k in out]
    from semcheck.checker.programs.interpreter import after_failures
    from semcheck.checker.properties.some_runs_raise import undecided_after

    return after_failures(out, undecided_after)  # PRG-11: what the calls after a failing one do in the interpreter


class _NeverStarts(tuple):
    """PRG-208: (the stand-in program, why `hardware` has none, the earlier call that fails in every run, the
    interpreter modes whose stand-in differs, PRG-217)."""


def _never_starts(call: KernelCall, error: Exception, earlier: list[LoweredKernel], calls: list[KernelCall],
                  cores: int | None, name: str) -> _NeverStarts | None:
    """PRG-208: a call of several whose kernel is not lowered, stood in for where it never starts in the
    interpreter (`programs.interpreter.never_starts_unlowered`); None where `error` must stand."""
    from semcheck.checker.programs.interpreter import never_starts_unlowered

    got = never_starts_unlowered(call, error, earlier, [c.unit for c in calls], cores=cores, name=name)
    return None if got is None else _NeverStarts(got)


def _hardware_lowering(values: KernelInputs, lower: Any) -> Any:
    """ACC-27: the lowering with the values `hardware` knows, or why there is none (its refusal, at its line);
    ACC-64: one lowering per case of the indices whose range is known (`range_cases.HardwareCases`)."""
    from semcheck.checker.frontend.range_cases import lower_by_cases

    got = lower_by_cases(lambda cases: lower(dataclasses.replace(values, cases=cases)))
    return f"unsupported {got.removeprefix('unsupported ')}" if isinstance(got, str) else got


def _relowering(traced_call: KernelCall, values: KernelInputs, cores: int | None, name: str, alone: bool) -> Any:
    """ACC-71: the call lowered with its interpreter modes' values and the given racy reads' values; ACC-80: with
    `hardware`, with the values every implementation gives (a value only the CPU computes is unknown, ACC-28)."""
    def relower(pins: Any, hardware: bool = False) -> Program:
        v = dataclasses.replace(values, pins=pins, **({"on_cpu": False} if hardware else {}))
        return lower_call(resolve_grid(traced_call, v), cores=cores, name=name, stats=LoweringStats(), inputs=v,
                          symmetric_from=SYMMETRIC_FROM if alone else None)

    return relower


def _never_runs(k: LoweredKernel, unit: int, failure: Any) -> LoweredKernel:
    """LAUNCH-3: a kernel compiled with one the interpreter refuses (in the same top-level call), or called
    after it, never runs in interpret mode: it carries that failure unless it has its own."""
    if k.program.launch_failure is not None or k.call is None or k.call.unit < unit:
        return k
    hardware = dataclasses.replace(k.hardware, launch_failure=failure) if isinstance(k.hardware, Program) \
        else k.hardware.replace_programs(lambda p: dataclasses.replace(p, launch_failure=failure)) \
        if isinstance(k.hardware, tuple) else k.hardware
    return dataclasses.replace(k, program=dataclasses.replace(k.program, launch_failure=failure), hardware=hardware,
                               iterations=tuple((w, dataclasses.replace(p, launch_failure=failure))
                                                for w, p in k.iterations))


__all__ = ["LoweredKernel", "load", "lower_target", "FrontendError", "BadTargetReturn"]
