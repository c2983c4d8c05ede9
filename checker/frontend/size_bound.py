"""RUN-13: may a kernel's program be materialised (every device's operations built)?

The front end builds one op tuple per core of every device; memory, not the device count, bounds
that. `estimate(call, cores)` reads the size off the traced kernel before anything is built: the
grid steps of a device, times the operations one step can emit (the kernel body's semaphore, DMA
and ref-access equations, loops with a static trip count unrolled, the larger branch of each cond),
plus each core's allocations, times the devices. `check_materialisable` refuses a program whose
estimate passes `MAX_MATERIALISED_OPS`, with a message that says what bounds it and how big it
would be. A path that does not materialise the program (a certified symmetric one) does not call
it. This module imports jax only inside the functions that walk a jaxpr.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from semcheck.checker.frontend.errors import FrontendError
from semcheck.checker.frontend.sync_primitives import SYNC
from semcheck.checker.frontend.trace import KernelCall

MAX_MATERIALISED_OPS = 40_000_000
"""RUN-13: the largest estimated program the front end builds. A built operation costs about 170 bytes
with what the checks keep of it (the ring all-reduce at 1,024 devices: 15.7 million operations, 2.7 GB
peak in one process). On every example at 8 and 64 devices the estimate was 0.57 to 3.7 times the
built size, the rings whose programs grow as N^2 1.7 to 1.9 times (the ring all-reduce at 1,024: about
29 million estimated), so this bound lets every 1,024-device run of the examples build, and refuses
the ring all-reduce from about 1,200 devices on."""

BYTES_PER_OP = 170

# the ref accesses (jax state primitives and pallas masked loads and stores) and the semaphore and DMA primitives
_STATE_PRIMS = frozenset({"get", "swap", "addupdate", "masked_load", "masked_swap"})


class ProgramTooLarge(FrontendError):
    """RUN-13: the program would pass the size bound; a usage error (exit 2)."""

    code = "usage"


@dataclasses.dataclass(frozen=True)
class Estimate:
    """An estimate of a materialised program's size (RUN-13)."""

    devices: int
    cores: int
    steps: int  # grid steps of one device (all its cores together)
    per_step: int  # operations one grid step can emit
    per_core: int  # operations of one core outside its grid steps (allocations, exit checks)

    @property
    def ops(self) -> int:
        return self.devices * (self.steps * self.per_step + self.cores * self.per_core)


def estimate(call: KernelCall, cores: int | None = None) -> Estimate:
    """RUN-13: the estimated size of `call`'s program (grid resolved); `cores` as `lower_kernel` takes it
    (an override of the interpreter's cores per device, ignored for a core_map)."""
    if cores is None or call.core_axis_name is not None:
        cores = call.cores_per_device
    steps = math.prod(g if g is not None else 1 for g in call.grid) if call.grid else 1
    per_step = max(1, _ops_of(call.jaxpr) + 2 * _moving_blocks(call))
    per_core = 2 * len(call.operands) + 2
    return Estimate(call.mesh.num_devices, max(1, int(cores)), steps, per_step, per_core)


def check_materialisable(call: KernelCall, cores: int | None = None, *, bound: int | None = None) -> Estimate:
    """RUN-13: raise `ProgramTooLarge` when `call`'s program, built for every device, would pass the bound.

    The one place the front end decides "may this be materialised"; the estimate when it may."""
    est = estimate(call, cores)
    limit = MAX_MATERIALISED_OPS if bound is None else bound
    if est.ops > limit:
        raise ProgramTooLarge(
            f"building every device's program of kernel {call.name!r} at {est.devices:,} devices would take "
            f"about {_count(est.ops)} operations (estimated: {est.steps:,} grid steps x up to {est.per_step} "
            f"operations a step x {est.devices:,} devices, about {_size(est.ops * BYTES_PER_OP)}); memory bounds "
            f"the program semcheck builds to {_count(limit)} operations (specs/deciding/runs.md RUN-13): "
            "verify fewer devices",
            loc=call.loc,
        )
    return est


def check_composable(calls: list[KernelCall], cores: int | None = None) -> int:
    """RUN-13: raise `ProgramTooLarge` when a program of kernel calls, every invocation's program built for
    every device and composed, would pass the bound (each call alone may be under it); its estimate else."""
    per_call: dict[int, int] = {}  # a loop invokes one call many times: its jaxpr is walked once
    for call in calls:
        if id(call) not in per_call:
            per_call[id(call)] = estimate(call, cores).ops
    total = sum(per_call[id(call)] for call in calls)
    if total > MAX_MATERIALISED_OPS:
        names = sorted({call.name for call in calls})
        raise ProgramTooLarge(
            f"building the program of {len(calls)} kernel calls ({', '.join(repr(n) for n in names)}) at "
            f"{calls[0].mesh.num_devices:,} devices would take about {_count(total)} operations (about "
            f"{_size(total * BYTES_PER_OP)}); memory bounds the program semcheck builds to "
            f"{_count(MAX_MATERIALISED_OPS)} operations (specs/deciding/runs.md RUN-13): verify fewer devices",
            loc=calls[0].loc,
        )
    return total


def _moving_blocks(call: KernelCall) -> int:
    """Blocks that may be copied in or out at every grid step: those whose block index is not a constant
    (a core_map, without block mappings, copies nothing per step)."""
    moving = 0
    for bm in call.block_mappings:
        outs = getattr(getattr(bm, "index_map_jaxpr", None), "jaxpr", None)
        if outs is None or any(type(v).__name__ != "Literal" for v in outs.outvars):
            moving += 1
    return moving


def _ops_of(jaxpr: Any) -> int:
    """Operations one pass of `jaxpr` can emit on one device: the larger branch, static loops unrolled."""
    from semcheck.checker.frontend.trace import sub_jaxprs

    total = 0
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name in SYNC or name in _STATE_PRIMS:
            total += 1
            continue
        subs = [_ops_of(sub) for sub in sub_jaxprs(eqn.params)]
        # a device takes one branch of a cond per pass
        inner = max(subs, default=0) if name == "cond" else sum(subs)
        if name == "scan":
            inner *= max(1, int(eqn.params.get("length", 1)))
        elif name == "run_scoped":
            inner += 2  # its allocations and frees
        total += inner
    return total


def _count(n: int) -> str:
    if n >= 10**9:
        return f"{n / 10**9:.1f} billion"
    if n >= 10**6:
        return f"{n / 10**6:.1f} million"
    return f"{n:,}"


def _size(nbytes: int) -> str:
    return f"{nbytes / 2**30:.1f} GB" if nbytes >= 2**30 else f"{nbytes / 2**20:.0f} MB"


__all__ = ["MAX_MATERIALISED_OPS", "Estimate", "ProgramTooLarge", "check_materialisable", "estimate"]
