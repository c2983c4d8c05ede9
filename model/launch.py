"""Wrap per-core kernel bodies into a whole launch, as the interpreter runs it (rule LAUNCH-1).

The interpreter runs each device in its own thread: the device first
allocates its HBM buffers, scratch buffers and scratch semaphores (for all of
its cores at once), passes a device barrier when the kernel has no
`collective_id`, runs its cores (in threads when there are several, joined at
the end), reads the call's results, checks its semaphore counts, and waits on a clean-up barrier. In the
IR the device thread is the program of the device's local core 0; the fork
and join of the other cores are device-local barriers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from semcheck.model.errors import Violation
from semcheck.model.ops import (
    NO_LOC,
    AllocBuffer,
    AllocSem,
    Barrier,
    DmaMode,
    ExitCheck,
    Loc,
    Op,
    Program,
    Topology,
)


@dataclasses.dataclass(frozen=True)
class Scratch:
    """One scratch operand of the pallas_call: semaphores or a buffer."""

    label: str
    count: int = 1  # number of semaphores (ignored for buffers)
    kind: str = "semaphore"  # "semaphore" | "buffer"
    nbytes: int = 0
    memory_space: str = "vmem"
    loc: Loc = NO_LOC


def launch(
    topology: Topology,
    bodies: Sequence[Sequence[Op]],
    *,
    collective_id: int | None = None,
    scratch: Sequence[Scratch] = (),
    hbm_buffers: int = 0,
    name: str = "program",
    loc: Loc = NO_LOC,
    launch_failure: Violation | None = None,
    exit_accesses: Sequence[Op] = (),
    names: Sequence[tuple[str, str]] = (),
    detect_races: bool = False,
) -> Program:
    """Build the `Program` the interpreter executes for these kernel bodies (LAUNCH-1).

    `bodies[g]` is everything global core `g` does inside the kernel, across
    all its grid points, in order. `hbm_buffers` is the number of HBM
    input/output buffers each device allocates before its scratch operands.
    `launch_failure`: what the interpreter raises before running anything (LAUNCH-2).
    `exit_accesses`: what each device's core 0 does after its cores finish and before the exit
    check (the read of the call's results, LAUNCH-1), the same ops on every device.
    `names`: how reports name labels (`Program.names`). `detect_races`: the call's race detection (RACE-1).
    """
    if len(bodies) != topology.num_cores:
        raise ValueError(f"{len(bodies)} bodies for {topology.num_cores} cores")
    first_cores = frozenset(topology.global_core(d, 0) for d in range(topology.num_devices))
    cores = [launch_core(topology, g, bodies[g], collective_id=collective_id, scratch=scratch,
                         hbm_buffers=hbm_buffers, loc=loc, exit_accesses=exit_accesses, first_cores=first_cores)
             for g in range(topology.num_cores)]
    return Program(topology, tuple(cores), collective_id=collective_id, name=name, launch_failure=launch_failure,
                   names=tuple(names), detect_races=detect_races)


def launch_core(
    topology: Topology,
    g: int,
    body: Sequence[Op],
    *,
    collective_id: int | None = None,
    scratch: Sequence[Scratch] = (),
    hbm_buffers: int = 0,
    loc: Loc = NO_LOC,
    exit_accesses: Sequence[Op] = (),
    first_cores: frozenset[int] | None = None,
    **_: object,
) -> tuple[Op, ...]:
    """Global core `g` of `launch(topology, bodies, ...)` with `bodies[g] = body` (LAUNCH-1): what one
    core runs does not depend on the others' bodies, so some cores can be launched alone.
    `first_cores`: every device's core 0 (computed when None); the keywords `launch` takes and a core
    does not need (`name`, `launch_failure`, `names`) are accepted and ignored."""
    if first_cores is None:
        first_cores = frozenset(topology.global_core(d, 0) for d in range(topology.num_devices))
    d, c = topology.device_of(g), topology.local_core_of(g)
    device_cores = frozenset(topology.cores_of_device(d))
    ops: list[Op] = []
    if c == 0:
        ops += [
            AllocBuffer(f"hbm{i}", memory_space="hbm", scope="device", loc=loc)
            for i in range(hbm_buffers)
        ]
        for s in scratch:
            if s.kind == "semaphore":
                ops.append(AllocSem(s.label, s.count, site=s.label, scope="device", loc=s.loc))
            else:
                ops.append(
                    AllocBuffer(s.label, s.nbytes, s.memory_space, scope="device", loc=s.loc)
                )
        if collective_id is None and topology.num_devices > 1:
            ops.append(Barrier("start", first_cores, loc))
    if topology.cores_per_device > 1:
        ops.append(Barrier(f"fork{d}", device_cores, loc))
    ops += body
    if topology.cores_per_device > 1:
        ops.append(Barrier(f"join{d}", device_cores, loc))
    if c == 0:
        ops += exit_accesses
        ops.append(ExitCheck(d, loc))
        if topology.num_devices > 1:
            ops.append(Barrier("cleanup", first_cores, loc))
    return tuple(ops)


def launch_failure(program: Program, mode: DmaMode) -> Violation | None:
    """LAUNCH-2: what a launch raises under `mode` before any core runs, or None.

    The interpreter fails this way (it builds every output's initial value
    first); a TPU launches the program unless jax's TPU lowering refused its
    computation (LAUNCH-7, `Program.tpu_failure`).
    """
    return program.tpu_failure if mode == "hardware" else program.launch_failure
