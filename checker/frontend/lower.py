"""Lower a traced TPU kernel to per-core op programs, as the interpreter runs it.

The kernel body is evaluated abstractly, once per core and grid point, for
all devices at once: every integer value is a numpy array whose leading axis
is the device ("lane") axis, of length 1 when the value is the same on every
device (constants, `program_id`, loop counters) and of length D when it
depends on `axis_index`. `pl.when`/`cond`/`while` whose predicate differs
between devices run under a lane mask, exactly like SIMT hardware: the ops of
a branch are appended only to the programs of the devices that take it.

What the evaluation tracks:

* integer (and small float) scalar arithmetic, so that semaphore indices,
  device ids, signal increments, wait values and trip counts are known;
* the contents of small integer refs (SMEM scalar state, scalar-prefetch
  tables, with the example arguments' values when they carry some:
  `scalar_memory`, `concrete_inputs`), so that control flow on page tables,
  lengths and counts is followed;
* semaphore references: scratch semaphores (`SemArray(label, shape)`), the
  barrier semaphore, `run_scoped` semaphores; indexing gives `SemRef`s;
* control flow, unrolled: cond/switch, scan/fori_loop, while_loop;
* the semaphore and DMA primitives, which emit IR ops.

Anything else is opaque (`Unknown`): vector compute, values loaded from
untracked refs, semaphore reads. Opaque values are harmless until they decide control flow
or a semaphore operand; then the front end raises `Unsupported` rather than
guess.

What a lane is, besides a device of the mesh:

* `lower_kernel(devices=...)` evaluates only those devices (lane i is device `devices[i]`, its mesh
  coordinates real, so remote targets are real device ids) and returns a `PartialLowering`. It is
  exact or refused (`evaluator.SubsetRefused`): a value, branch or allocation label of these devices
  that would depend on how the other devices' lanes evaluate makes it refuse;
* a core's grid steps, and a `fori_loop`'s iterations, run as lanes of one evaluation (devices x
  steps) when no step leaves anything for the next that the evaluation follows (`grid.run_core`,
  `control_flow._scan_as_lanes`); otherwise one at a time, as the interpreter runs them.

Grid order, the split of the grid between the cores of a device, the
`parallel` dimension shuffle, allocation order and id-relevant details follow
`interpret_pallas_call` of jax's TPU interpret mode.

Where each part lives:

* `values`: the abstract values (`Unknown`, `SemArray`, `BufRef`);
* `evaluator`: the SPMD evaluator core (lanes, masks, locations, dispatch);
* `grid`: launch operands, the grid schedule, `program_id`/`axis_index`;
* `dynamic_grid`: grid bounds computed at run time, from the example
  arguments' values (ACC-5);
* `sync_rules`: semaphores, DMAs, `run_scoped` allocations (the IR ops);
* `accesses`: kernel loads and stores of refs;
* `scalar_memory`, `scalar_state`, `concrete_inputs`: the contents of small
  integer refs (ACC-4), what may change them, and the example arguments'
  values of the scalar operands;
* `control_flow`: cond, while, scan, calls;
* `pipeline`: `emit_pipeline`;
* `numeric`: the arithmetic primitives;
* `lowerer`: the evaluator with every rule module stacked on it;
* here: `lower_kernel`, which runs it and wraps the bodies with
  `semcheck.model.launch` (LAUNCH-1). This module imports without jax.
"""

from __future__ import annotations

import dataclasses
import gc
import time

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from semcheck.checker.frontend.errors import Unsupported
from semcheck.checker.frontend.trace import KernelCall
from semcheck.model.count_width import count_past_int32
from semcheck.model.errors import SemaphoreOutput, Untranslatable
from semcheck.model.launch import launch, launch_core
from semcheck.model.ops import NO_LOC, Op, Program, Topology

if TYPE_CHECKING:
    from semcheck.checker.frontend.concrete_inputs import KernelInputs


@dataclasses.dataclass
class LoweringStats:
    """What lowering did (accumulated over the kernels of a target)."""

    seconds: float = 0.0
    num_ops: int = 0
    eqns_evaluated: int = 0
    grid_points: int = 0
    grid_points_as_lanes: int = 0  # of those, evaluated several steps at once (`GridRules.run_core`)
    iterations_as_lanes: int = 0  # loop iterations evaluated as lanes (`ControlFlowRules._scan_as_lanes`)
    # ACC-28: a tie followed inside the kernel only for the interpreter's modes (its words and line), "" if none
    cpu_only: str = ""
    # ERR-32: a load, store or copy whose window the interpreter may refuse unseen (its words), "" if none
    unpredicted: str = ""
    # ERR-62: a load or store whose window runs past its buffer on some lane (its words), "" if none
    past_end: str = ""
    # Things the caller should know about the lowered program (not errors).
    warnings: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class PartialLowering:
    """Some devices' core programs of a kernel (`lower_kernel(devices=...)`), and what `launch` needs.

    `bodies[i]` holds the kernel bodies of device `devices[i]`'s cores (local core order), in the
    whole program's device numbering: remote targets are real device ids in 0..N-1. `launch()` of
    every device's bodies with `launch_args` gives the lowered `Program`; `cores()` gives these
    devices' launched cores (LAUNCH-1), equal to that program's.
    """

    topology: Topology
    devices: tuple[int, ...]
    bodies: tuple[tuple[tuple[Op, ...], ...], ...]
    launch_args: dict[str, Any] = dataclasses.field(compare=False)

    def cores(self) -> dict[int, tuple[Op, ...]]:
        """Global core id -> its launched program, for the cores of `devices`."""
        topo = self.topology
        first = frozenset(topo.global_core(d, 0) for d in range(topo.num_devices))
        return {topo.global_core(d, c): launch_core(topo, topo.global_core(d, c), ops, first_cores=first,
                                                    **self.launch_args)
                for d, mine in zip(self.devices, self.bodies) for c, ops in enumerate(mine)}

    def program(self) -> Program:
        """The whole `Program`, when `devices` are all of them."""
        if sorted(self.devices) != list(range(self.topology.num_devices)):
            raise ValueError("a program needs every device's bodies")
        order = {d: i for i, d in enumerate(self.devices)}
        bodies = [ops for d in range(self.topology.num_devices) for ops in self.bodies[order[d]]]
        return launch(self.topology, bodies, **self.launch_args)


def lower_kernel(
    call: KernelCall,
    *,
    cores: int | None = None,
    name: str | None = None,
    stats: LoweringStats | None = None,
    inputs: KernelInputs | None = None,
    devices: Sequence[int] | None = None,
    follow_copies: bool = True,
    follow_floats: bool | None = None,
) -> Program | PartialLowering:
    """The `Program` the interpreter runs for `call` (see module docstring).

    `cores` overrides the interpreter's `num_cores_or_threads` (ignored for a
    `core_map`, whose mesh fixes the core count, as in the interpreter).
    `inputs` are the concrete values of the kernel's scalar operands
    (`concrete_inputs`), None when the example arguments carried none.
    `devices`: lower only these devices' cores and return a `PartialLowering`; it raises
    `evaluator.SubsetRefused` (an `Unsupported`) when their programs depend on how the other
    devices evaluate (then lower every device). An error the lowering of another device would meet is
    not seen: the caller must know (e.g. from a rotation certificate) that the others run alike.
    `follow_copies` False: values copies move are not followed (ACC-9's last clause: ACC-4's treatment).
    `follow_floats`: float data local copies move is followed too (ACC-41); None (the default): the kernel is
    lowered without, and again with it when that lowering needs such a value (`NeedsFloatCopies`); lowering
    some devices, such a value refuses the subset (the whole lowering follows it).
    """
    from semcheck.checker.frontend.evaluator import SubsetRefused
    from semcheck.checker.frontend.scalar_memory import NeedsFloatCopies

    if follow_floats is not None:
        return _lower_kernel(call, cores, name, stats, inputs, devices, follow_copies, follow_floats)
    try:
        return _lower_kernel(call, cores, name, stats, inputs, devices, follow_copies, False)
    except NeedsFloatCopies as e:
        if devices is not None:
            raise SubsetRefused(e.primitive, f"{e.reason}, which a lowering of every device follows",
                                e.loc) from None
        if not follow_copies:
            raise
    return _lower_kernel(call, cores, name, stats, inputs, devices, follow_copies, True)


def _lower_kernel(call: KernelCall, cores: int | None, name: str | None, stats: LoweringStats | None,
                  inputs: KernelInputs | None, devices: Sequence[int] | None, follow_copies: bool,
                  follow_floats: bool) -> Program | PartialLowering:
    """`lower_kernel` with `follow_floats` decided."""
    # Imported here: the rule modules import jax, and this module must not, so
    # that `frontend.lower_target` imports before the caller provisions devices
    # (jax reads JAX_PLATFORMS when it is imported).
    from semcheck.checker.frontend.call_boundary import exit_reads
    from semcheck.checker.frontend.dynamic_grid import resolve_grid
    from semcheck.checker.frontend.grid import hbm_labels, hbm_names, launch_operands
    from semcheck.checker.frontend.lowerer import Lowerer

    t0 = time.perf_counter()
    call = resolve_grid(call, inputs)  # ACC-5: run-time grid bounds from the example arguments
    num_devices = call.mesh.num_devices
    if call.mesh.physical_devices > num_devices and num_devices >= 1 and call.mesh.axis_names:
        raise Unsupported(
            "shard_map",
            f"the kernel runs under a shard_map that is manual over only "
            f"{dict(call.mesh.shape)} of a {call.mesh.physical_devices}-device mesh; "
            "the interpreter then disagrees with itself about the device count",
            call.loc,
        )
    n_cores = call.cores_per_device
    if cores is not None and call.core_axis_name is None:
        n_cores = int(cores)
    if n_cores < 1:
        raise Unsupported("pallas_call", f"{n_cores} cores per device", call.loc)
    if call.grid_mapping is not None and getattr(call.grid_mapping, "local_grid_env", None) is not None:
        raise Unsupported("pallas_call", "a local grid environment (vmapped kernel) is not supported", call.loc)

    # ERR-36 fails first (the interpreter's first step), then LAUNCH-2, ERR-43, when tracing, then LAUNCH-3
    failure = lowering_failure(call)
    scratch, kernel_args, hbm_buffers = launch_operands(call)
    lw = Lowerer(call, num_devices, n_cores, follow_copies=follow_copies, follow_floats=follow_floats)
    schedule = lw.schedule  # grid_schedule(call, n_cores)
    chosen = None if devices is None else tuple(int(d) for d in devices)
    if chosen is not None:
        if not chosen or len(set(chosen)) != len(chosen) or not all(0 <= d < num_devices for d in chosen):
            raise ValueError(f"devices must be distinct device ids in 0..{num_devices - 1}, got {devices!r}")
        lw.select_devices(chosen)
    lw.set_launch_values(kernel_args, inputs)
    lanes = lw.L if chosen is None else len(chosen)
    bodies: list[list[Op]] = [[] for _ in range(lanes * n_cores)]
    # The lowering allocates up to one op per device and step (a DMA carries its
    # regions), none of them cyclic: the cycle collector's passes over the growing
    # program would cost as much again, so it rests until the program is built.
    collecting = gc.isenabled()
    gc.disable()
    try:
        for core in range(n_cores):
            per_lane = lw.run_core(core, schedule[core], kernel_args)
            for d in range(lanes):
                bodies[d * n_cores + core] = per_lane[d]
        # LAUNCH-2, LAUNCH-3 fail before any core runs (an access through a view the interpreter cannot index
        # is the access's own failure, ERR-9: `Access.view_error`)
        launch_args: dict[str, Any] = dict(
            collective_id=call.collective_id,
            scratch=scratch,
            hbm_buffers=hbm_buffers,
            name=name or call.name,
            loc=call.loc,
            launch_failure=failure,
            exit_accesses=exit_reads(call, hbm_labels(call)),  # PRG-120: the results are read after the call
            names=hbm_names(call) + tuple(lw.scoped_names.items()),
            # RACE-1: the interpreter keeps the race detector's clocks when the call asks for it
            detect_races=bool(getattr(call.interpret_params, "detect_races", False)),
        )
        if chosen is not None:
            partial = PartialLowering(
                Topology(num_devices, n_cores), chosen,
                tuple(tuple(tuple(bodies[i * n_cores + c]) for c in range(n_cores)) for i in range(len(chosen))),
                launch_args)
        else:
            program = launch(Topology(num_devices, n_cores), bodies, **launch_args)
            wrap = count_past_int32(program)
            if wrap is not None:  # ACC-90: jax's int32 count may wrap where semcheck's does not
                raise Unsupported("dma_wait", f"a {wrap.describe()} raises its count, and what the program adds to "
                                  f"counts reaches 2**31, past the int32 jax's interpreter keeps a count in (it wraps "
                                  f"there): specs/deciding/frontend.md ACC-90", wrap.loc)
            if lw.followed_reads:  # ACC-9: the values read from refs copies write, checked per mode
                offsets = [_body_offset(program.cores[g], bodies[g]) for g in range(len(bodies))]
                program = dataclasses.replace(program, followed=lw.value_facts(offsets))
    finally:
        if collecting:
            gc.enable()
    if chosen is not None:
        program = partial  # type: ignore[assignment]
    if stats is not None:
        stats.seconds += time.perf_counter() - t0
        stats.num_ops += sum(map(len, bodies)) if chosen is not None else program.num_ops
        stats.eqns_evaluated += lw.eqn_count
        stats.grid_points += sum(len(s) for s in schedule)
        stats.grid_points_as_lanes += lw.points_as_lanes
        stats.iterations_as_lanes += lw.iterations_as_lanes
        stats.warnings.extend(w for w in lw.warnings if w not in stats.warnings)
        stats.cpu_only = stats.cpu_only or lw.cpu_only
        stats.unpredicted = stats.unpredicted or lw.unpredicted
        stats.past_end = stats.past_end or lw.past_end
    return program


def _body_offset(core_ops: tuple[Op, ...], body: list[Op]) -> int:
    """Where a kernel body starts in its launched core program (LAUNCH-1 puts it there whole)."""
    if not body:
        return 0
    for i, op in enumerate(core_ops):
        if op is body[0] and i + len(body) <= len(core_ops) and core_ops[i + len(body) - 1] is body[-1]:
            return i
    raise Unsupported("pallas_call", "semcheck cannot find the kernel's body in its launched program", NO_LOC)


def lowering_failure(call: KernelCall) -> Any:
    """What jax's interpreter raises while it lowers `call`, before anything of its computation runs (or None):
    ERR-36 first (the interpreter's first step), then LAUNCH-2, ERR-43, when tracing, then LAUNCH-3. PRG-222: it
    lowers every call of a computation this way, those in a branch or loop body no device runs included. ERR-61 comes
    after the outputs are allocated (LAUNCH-2), before the grid is zipped with its semantics (ERR-43)."""
    from semcheck.checker.frontend.interpreter_lowering import translation_failure  # imports jax
    from semcheck.checker.frontend.typed_operands import typed_operand_failure

    return (typed_operand_failure(call.refused_spaces) or semaphore_output_failure(call)
            or hbm_scratch_failure(call) or vmapped_semantics_failure(call) or translation_failure(call))


def at_call(failure: Any, call: KernelCall) -> Any:
    """PRG-223: `failure` naming `call`'s line, for the calls it stops that are not `call` (a failure that names
    no line of its own: a semaphore result, LAUNCH-2; a typed argument, ERR-36)."""
    if getattr(failure, "loc", False) is None:
        return dataclasses.replace(failure, loc=call.loc)
    return failure


def semaphore_output_failure(call: KernelCall) -> SemaphoreOutput | None:
    """LAUNCH-2 / D21: the interpreter builds every output's initial value before the kernel runs and
    fails on a semaphore dtype (ERR-8); a TPU launches the call. The program is lowered as the hardware
    runs it, semaphore outputs allocated like semaphore inputs, and carries the failure for the
    interpreter's modes."""
    aliased = {int(o) for _, o in call.input_output_aliases}
    outputs = [o for o in call.operands if o.role == "output"]
    sem_outputs = [(j, o) for j, o in enumerate(outputs) if o.kind == "semaphore"]
    if not sem_outputs:
        return None
    if any(j in aliased for j, _ in sem_outputs):
        # the interpreter reuses the aliased input instead: a case it was never seen to run
        j, o = next((j, o) for j, o in sem_outputs if j in aliased)
        raise Unsupported("pallas_call", f"output {o.name!r} is a semaphore array aliased to an input: what "
                          "jax's TPU interpreter does with it is not known (specs/semantics/divergences.md D21)", call.loc)
    uninit = getattr(call.interpret_params, "uninitialized_memory", None) or "nan"
    return SemaphoreOutput(sem_outputs[0][1].name, str(uninit), sem_outputs[0][1].dtype)


def hbm_scratch_failure(call: KernelCall) -> Untranslatable | None:
    """ERR-61: a scratch operand in HBM or ANY: jax's interpreter allocates a kernel argument in HBM only for an input
    or an output (`assert is_input ^ is_output` in `interpret_pallas_call`, an `AssertionError` with no message) while
    it lowers the call, before any device runs; a TPU allocates it."""
    scratch = next((o for o in call.operands if o.role == "scratch" and o.kind == "buffer" and o.memory_space == "hbm"),
                   None)
    if scratch is None:
        return None
    return Untranslatable("pallas_call", "AssertionError", "", "trace", call.loc.file, call.loc.line,
                          f"scratch operand {scratch.name!r} in HBM or ANY")


def vmapped_semantics_failure(call: KernelCall) -> Untranslatable | None:
    """ERR-43: a vmapped `pallas_call` given `dimension_semantics`: vmap adds grid dimensions the semantics
    do not name, and jax's interpreter zips the two strictly (`safe_zip`) while it lowers the call, before
    any device runs; Mosaic gives the added dimensions their own semantics, so a TPU runs it."""
    ds = call.dimension_semantics
    if call.kind != "pallas_call" or call.core_axis_name is not None or ds is None or not call.vmapped_dims:
        return None
    if len(ds) + len(call.vmapped_dims) != len(call.grid):
        return None  # not the vmapped shape: the other checks of the grid say what it is
    return Untranslatable("pallas_call", "ValueError", f"safe_zip() argument 1 has length {len(ds)} but argument 0 "
                          f"has length {len(call.grid)}. All lengths: ({len(call.grid)}, {len(ds)})", "trace",
                          call.loc.file, call.loc.line, call.loc.text)


__all__ = ["LoweringStats", "PartialLowering", "at_call", "lower_kernel", "lowering_failure", "vmapped_semantics_failure"]
