"""`load`: kernel file -> traced kernels -> lowered `Program`s."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from semcheck.checker.frontend.errors import BadTargetReturn, FrontendError
from semcheck.checker.frontend.lower import LoweringStats, lower_kernel
from semcheck.checker.frontend.targets import Target, load_targets, provision_devices
from semcheck.checker.frontend.trace import KernelCall, MeshInfo, trace_kernels
from semcheck.model.ops import DMA_MODES, Loc, Program


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
    (jax gets that many host devices if it is not initialised yet).
    `cores` overrides the interpreter's cores per device (a target's own
    `cores=` applies otherwise); `dma_mode` overrides the reported mode.
    `build_kwargs` are passed to builders that accept them.
    """
    if dma_mode is not None and dma_mode not in DMA_MODES:
        raise ValueError(f"dma_mode must be one of {DMA_MODES}, got {dma_mode!r}")
    provision_devices(devices)
    targets = load_targets(path, entry=entry, target=target)
    out: list[LoweredKernel] = []
    for t in targets:
        out.extend(lower_target(t, devices, cores=cores, dma_mode=dma_mode, build_kwargs=build_kwargs))
    return out


def lower_target(
    t: Target,
    devices: int,
    *,
    cores: int | None = None,
    dma_mode: str | None = None,
    build_kwargs: dict[str, Any] | None = None,
) -> list[LoweredKernel]:
    """Build, trace and lower one target."""
    built = t.build_shapes(devices, **(build_kwargs or {}))
    calls = None
    if built is not None:
        try:
            calls = trace_kernels(*built, path=t.path)
        except FrontendError:
            calls = None  # e.g. fn closes over a value the staged build left abstract
    if calls is None:
        fn, args = t.build(devices, **(build_kwargs or {}))
        calls = trace_kernels(fn, args, path=t.path)
    n_cores = cores if cores is not None else t.cores
    out = []
    for call in calls:
        stats = LoweringStats()
        program = lower_kernel(call, cores=n_cores, name=f"{t.name}:{call.name}", stats=stats)
        mode = dma_mode if dma_mode is not None else call.dma_mode
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
            )
        )
    return out


__all__ = ["LoweredKernel", "load", "lower_target", "FrontendError", "BadTargetReturn"]
