"""The jax front end: kernel file -> traced jaxpr -> per-core op programs.

    from semcheck.checker import frontend
    kernels = frontend.load("ring.py", devices=4)      # list[LoweredKernel]
    kernels[0].program                                 # a semcheck.model Program

Stages (each usable alone):

* `targets`: import a kernel file, find its targets, provision host devices;
* `trace`: trace a target with `jax.make_jaxpr` and find its kernels
  (`KernelCall`);
* `lower`: evaluate a kernel per device, core and grid point into IR ops and
  wrap them with `semcheck.model.launch` (its docstring maps the modules it
  is built from: `evaluator`, `grid`, `sync_rules`, `accesses`,
  `control_flow`, `pipeline`, `numeric`, stacked in `lowerer`).

Importing this package does not import jax; `load` does.
"""

from __future__ import annotations

from semcheck.checker.frontend.errors import (
    BadTargetReturn,
    DeviceProvisioningError,
    FrontendError,
    KernelFileNotFound,
    KernelRaised,
    KernelSyntaxError,
    NoTargets,
    NotTpuPallasCall,
    Unsupported,
)
from semcheck.checker.frontend.targets import (
    Target,
    find_targets,
    import_kernel_file,
    load_targets,
    provision_devices,
    split_selector,
)


def __getattr__(name: str):  # lazy: these import jax-dependent modules
    if name in ("load", "lower_target", "LoweredKernel"):
        from semcheck.checker.frontend import api

        return getattr(api, name)
    if name in ("trace_kernels", "KernelCall", "MeshInfo", "Operand"):
        from semcheck.checker.frontend import trace

        return getattr(trace, name)
    if name in ("lower_kernel", "LoweringStats"):
        from semcheck.checker.frontend import lower

        return getattr(lower, name)
    if name == "grid_schedule":
        from semcheck.checker.frontend import grid

        return grid.grid_schedule
    raise AttributeError(name)


__all__ = [
    "load",
    "lower_target",
    "LoweredKernel",
    "trace_kernels",
    "KernelCall",
    "MeshInfo",
    "lower_kernel",
    "grid_schedule",
    "LoweringStats",
    "Target",
    "find_targets",
    "import_kernel_file",
    "load_targets",
    "provision_devices",
    "split_selector",
    "FrontendError",
    "KernelFileNotFound",
    "KernelSyntaxError",
    "KernelRaised",
    "NoTargets",
    "BadTargetReturn",
    "NotTpuPallasCall",
    "DeviceProvisioningError",
    "Unsupported",
]
