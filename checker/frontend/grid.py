"""Grid and launch emulation: what the interpreter runs, on which core, in what order.

* `launch_operands`: the kernel's operands as scratch allocations (in the
  interpreter's order, LAUNCH-1) and the values the kernel body receives;
* `grid_schedule`: the grid points each core of a device runs, including the
  split of the grid between cores and the random shuffle of `parallel`
  dimensions, as `interpret_pallas_call` of jax's TPU interpret mode does;
* `GridRules`: driving the evaluator over those points, and the rules that
  read the launch coordinates (`program_id`, `num_programs`, `axis_index`);
  at each core's start, the contents of the refs the kernel keeps scalar
  state in (`scalar_memory`): scalar-prefetch and whole SMEM/VMEM inputs from
  the launch's concrete values (`concrete_inputs`), scratch unknown; outputs
  and blocked inputs are not tracked. They persist across the core's grid
  points, as the interpreter's buffers do (it allocates them once per core and
  copies a whole input in at the core's first step only).
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax._src.pallas import primitives as pallas_prims
from jax._src.pallas.mosaic import pipeline as mosaic_pipeline

from semcheck.checker.frontend.block_copies import BlockCopies, hbm_labels  # noqa: F401 - callers import it from here
from semcheck.checker.frontend.concrete_inputs import KernelInputs, is_scalar_operand
from semcheck.checker.frontend.errors import FrontendError, Unsupported
from semcheck.checker.frontend.evaluator import Evaluator
from semcheck.checker.frontend.partial_values import Partial
from semcheck.checker.frontend.scalar_memory import AbstractInput, UncomputedFloatInput, trackable
from semcheck.checker.frontend.trace import KernelCall
from semcheck.checker.frontend.values import BufRef, SemArray, Unknown
from semcheck.model.launch import Scratch
from semcheck.model.ops import BARRIER


def launch_operands(call: KernelCall) -> tuple[list[Scratch], list[Any], int]:
    """Scratch allocations (interpreter order), kernel argument values, HBM buffer count."""
    aliased_outputs = {o for _, o in call.input_output_aliases}
    hbm_buffers = call.num_inputs + sum(1 for i in range(call.num_outputs) if i not in aliased_outputs)
    hbm = hbm_labels(call)
    scratch: list[Scratch] = []
    args: list[Any] = []
    used: set[str] = {BARRIER, *(f"hbm{k}" for k in range(hbm_buffers))}
    inputs = outputs = 0
    for i, op in enumerate(call.operands):
        if op.role == "input":
            inputs += 1
        elif op.role == "output":
            outputs += 1
        if op.role in ("input", "output") and call.sees_array(op):
            if op.memory_space != "hbm" and (tuple(op.block_shape or ()) != tuple(op.shape) or call.cores_per_device > 1):
                raise Unsupported("pallas_call", f"{op.role} {op.name!r} is an array typed with memory space "
                                  f"{op.array_space} and a block of it, or on a device of several cores: where a TPU "
                                  "keeps it then is not known to semcheck (GRID-5)", call.loc)
            # The kernel sees the HBM buffer the launch allocated for the operand
            # (`hbm{k}`, LAUNCH-1; on a TPU the array typed with a memory space, GRID-5): its accesses and DMAs
            # name that buffer.
            args.append(BufRef(hbm[("input", inputs - 1) if op.role == "input" else ("output", outputs - 1)]))
            continue
        label = op.name if op.name and op.name not in used else f"{op.role}{i}"
        while label in used:
            label += "_"
        used.add(label)
        if op.kind == "semaphore":
            scratch.append(Scratch(label, op.count, kind="semaphore", loc=call.loc))
            args.append(SemArray(label, tuple(op.block_shape if op.block_shape is not None else op.shape),
                                 op.sem_type or "dma"))
        else:
            scratch.append(
                Scratch(label, kind="buffer", nbytes=op.nbytes, memory_space=op.memory_space, loc=call.loc)
            )
            args.append(BufRef(label))
    return scratch, args, hbm_buffers


def hbm_names(call: KernelCall) -> tuple[tuple[str, str], ...]:
    """How reports name the launch's HBM buffers (`Program.names`): a pl.ANY / HBM operand by the kernel's
    parameter, which is that buffer; a blocked operand's array as `NAME (HBM)` (NAME is its VMEM block)."""
    hbm = hbm_labels(call)
    seen: dict[str, str] = {}
    n = {"input": 0, "output": 0}
    for op in call.operands:
        if op.role not in n:
            continue
        j = n[op.role]
        n[op.role] += 1
        label = hbm.get((op.role, j))
        if label is not None and op.name and label not in seen:  # an aliased output: its input's name
            seen[label] = (f"{op.name} (its HBM buffer)" if op.kind == "semaphore" else
                           op.name if call.sees_array(op) else f"{op.name} (HBM)")
    return tuple(seen.items())


def parallel_dims(call: KernelCall) -> tuple[bool, ...]:
    """Per grid dimension: whether it is `parallel` (those must form a prefix of the grid)."""
    ds = call.dimension_semantics
    if ds is None:
        return (False,) * len(call.grid)
    par = tuple(d == "parallel" for d in ds)
    for a, b in zip(par[:-1], par[1:]):
        if b and not a:
            raise Unsupported(
                "pallas_call", "dimensions with parallel semantics must form a prefix of the grid", call.loc
            )
    return par


_permutation_cache: dict[tuple[Any, ...], list[np.ndarray | None]] = {}
def _grid_coordinates(call: KernelCall, par: tuple[bool, ...]) -> list[np.ndarray | None]:
    """Per grid dimension: the interpreter's shuffled coordinates, or None (identity)."""
    if call.kind == "core_map" or call.core_axis_name is not None or not any(par):
        return [None] * len(call.grid)
    seed = call.random_seed
    key = (seed, call.grid, par)
    cached = _permutation_cache.get(key)
    if cached is not None:
        return cached
    rng = jax.random.key(seed or 0)
    coords: list[np.ndarray | None] = []
    for size, p in zip(call.grid, par):
        if p:
            rng, sub = jax.random.split(rng)
            coords.append(np.asarray(jax.random.permutation(sub, jnp.arange(size, dtype=jnp.int32))))
        else:
            coords.append(None)
    coords += [None] * (len(call.grid) - len(coords))
    _permutation_cache[key] = coords
    return coords


def grid_schedule(call: KernelCall, cores: int) -> list[list[tuple[int, ...]]]:
    """The grid points each local core runs, in order (as `_execute_grid_for_core`)."""
    return [[point for _, point, _ in steps] for steps in core_steps(call, cores)]


def core_steps(call: KernelCall, cores: int) -> list[list[tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]]:
    """Per local core, its grid steps in order: (loop index, grid point, the next iteration's grid point).

    The loop index is the iteration counter split over the grid (what the interpreter's messages
    print); the point is what `program_id` returns (a `parallel` dimension shuffled); the next
    iteration wraps round to the first, as `get_next_indices` does.
    """
    grid = call.grid
    par = parallel_dims(call)
    num_iterations = math.prod(grid) if grid else 1
    if num_iterations == 0:
        return [[] for _ in range(cores)]
    coords = _grid_coordinates(call, par)
    subgrid = math.prod(g if p else 1 for g, p in zip(grid, par))
    points_per_core = (subgrid + cores - 1) // cores
    per_core = points_per_core * (num_iterations // subgrid)

    out = []
    for c in range(cores):  # the iteration counter split row-major over the grid, for all steps at once
        its = np.arange(c * per_core, min((c + 1) * per_core, num_iterations), dtype=np.int64)
        if not grid:
            out.append([((), (), ())] * len(its))
            continue
        idx = np.stack(np.unravel_index(its, grid), axis=1)
        nxt = np.stack(np.unravel_index((its + 1) % num_iterations, grid), axis=1)
        pts, npts = idx.copy(), nxt.copy()
        for d, cd in enumerate(coords):
            if cd is not None:
                pts[:, d], npts[:, d] = cd[idx[:, d]], cd[nxt[:, d]]
        out.append(list(zip(map(tuple, idx.tolist()), map(tuple, pts.tolist()), map(tuple, npts.tolist()))))
    return out


# What one grid step may leave for the next besides tracked scalar memory: run_scoped allocations (their
# labels count evaluations; `emit_pipeline` allocates in its expansion).
_STEP_STATE = frozenset({pallas_prims.run_scoped_p, mosaic_pipeline.emit_pipeline_p})

# At most this many lanes (devices x grid steps) per evaluation of `GridRules.run_core`.
STEP_LANES = 1 << 15


class GridRules(Evaluator):
    """Runs the body once per grid point of a core; the launch-coordinate rules."""

    def __init__(self, call: KernelCall, num_devices: int, cores: int) -> None:
        super().__init__(call, num_devices, cores)
        self.grid_point: tuple[Any, ...] = ()  # per dimension an int, or a lane array (`run_core`)
        self._inputs: KernelInputs | None = None
        self.points_as_lanes = 0
        # (label, shape, dtype, initial lane array or None, why it is unknown) per tracked operand;
        # the why has no line: a load reports its own
        self._launch_state: list[tuple[str, tuple[int, ...], str, Any, Unknown]] = []
        # GRID-1: the pipeline's block copies of the current core (a pallas_call with BlockSpecs)
        self._kernel_args: list[Any] = []
        steps = core_steps(call, cores)
        self.schedule = [[point for _, point, _ in mine] for mine in steps]  # `grid_schedule`'s
        self._steps = steps if call.kind == "pallas_call" and call.block_mappings else None
        self._copies: BlockCopies | None = None
        self._shared: str | None = None
        self.rules.update({
            pallas_prims.program_id_p: self._program_id,
            pallas_prims.num_programs_p: self._num_programs,
        })
        self.named_rules["axis_index"] = self._axis_index

    # --- driving ---------------------------------------------------------------

    def set_launch_values(self, kernel_args: list[Any], inputs: KernelInputs | None) -> None:
        """Which operands' contents are tracked from the launch on, and with what (module docstring).

        Scalar-prefetch operands and whole inputs start with the launch's values
        (unknown without them); scratch starts unknown (uninitialised). Outputs
        and blocked inputs are not tracked: on a TPU the buffer a block lives in
        may change from one grid step to the next (double buffering).
        """
        state = []
        self._kernel_args = kernel_args
        self._inputs = inputs
        values = inputs.values if inputs is not None else ()
        floats = bool(getattr(self, "follow_floats", False))  # ACC-41: float refs a lowering following float copies
        for i, (op, arg) in enumerate(zip(self.call.operands, kernel_args)):  # tracks (`trackable`)
            if type(arg) is not BufRef or op.kind != "buffer":
                continue
            shape = tuple(op.block_shape if op.block_shape is not None else op.shape)
            scratch = op.role == "scratch"
            if not (is_scalar_operand(op, floats) or (scratch and trackable(shape, op.dtype, op.memory_space,
                                                                           floats=floats))) or (
                    op.memory_space == "hbm" and not self._tracks_hbm(i)):
                self.memory.ignored.add(arg.name)
                continue
            what = "scalar-prefetch operand" if op.role == "index" else op.role
            init = None if scratch else (values[i] if i < len(values) else None)
            unknown = None
            if isinstance(init, Partial):  # PRG-193: the elements an earlier call's runs disagree on are unknown
                init, unknown = init.values, init.unknown
            if type(init) is np.ndarray and init.shape[0] == self.num_devices > 1:
                init = init[self.lane_devices]  # one row per device: the lanes' devices' rows
                unknown = None if unknown is None else unknown[self.lane_devices]
            if scratch:
                why = Unknown(f"the initial contents of scratch {op.name!r} (uninitialised memory), read")
                self.memory.uninitialised.add(arg.name)  # ACC-71: the interpreter fills it
            elif inputs is None or inputs.abstract:
                why = AbstractInput(f"the contents of {what} {op.name!r}, which the example arguments do "
                                    "not carry, read")
            elif not inputs.floats and not is_scalar_operand(op):  # computed for the other lowerings only
                why = UncomputedFloatInput(f"the contents of {what} {op.name!r}, read")
            else:
                why = Unknown(f"the contents of {what} {op.name!r} ({inputs.why_of(i)}), read")
            state.append((arg.name, shape, op.dtype, init, why, op.memory_space, unknown))
        self._launch_state = state

    def _tracks_hbm(self, i: int) -> bool:
        """ACC-30: an HBM input is tracked only where copies are followed (one core per device, so no other
        core writes it) and no output aliases it (the pipeline's write-back writes no tracked ref)."""
        nidx = sum(1 for op in self.call.operands if op.role == "index")
        aliased = {int(j) - nidx for j, _ in self.call.input_output_aliases}
        inputs = [k for k, op in enumerate(self.call.operands) if op.role == "input"]
        return bool(getattr(self, "follow_copies", False)) and i in inputs and inputs.index(i) not in aliased

    def start_core(self, core: int) -> None:
        self.core = core
        self.bodies = [[] for _ in range(self.L)]
        # Each core has its own SMEM and VMEM, initialised at its first grid step.
        self.memory.reset()
        for label, shape, dtype, init, why, space, unknown in self._launch_state:
            self.memory.define(label, shape, dtype, init, why, space, unknown=unknown)
        steps = self._steps
        self._copies = BlockCopies(self, core, steps[core], self._kernel_args) if steps is not None else None
        if self._copies is not None:
            if self._shared is None:  # GRID-4: once per call, over every core's grid points
                self._shared = self._sharing(steps)
            self._copies.shared = self._shared

    def _sharing(self, steps: list[Any]) -> str:
        """GRID-4's reason over every device: when only some devices are lowered (`subset`), another
        device's blocks may conflict, so the index maps are evaluated for all of them (only then)."""
        assert self._copies is not None
        if self.subset and not self._copies.split_forced:
            every = type(self)(self.call, self.num_devices, self.cores)  # the Lowerer this mixin is part of
            every.set_launch_values(self._kernel_args, self._inputs)
            every.start_core(0)
            self.cpu_only = self.cpu_only or every.cpu_only  # ACC-28: a tie it followed is this lowering's too
            return every._shared or ""
        return self._copies.parallel_sharing([p for mine in steps for _, p, _ in mine])

    def run_core(self, core: int, points: list[tuple[int, ...]], kernel_args: list[Any]) -> list[list[Any]]:
        """Run core `core` over its grid points; its ops per lane's device (`self.bodies`).

        Steps that share nothing run as lanes of one evaluation (lanes = devices x steps,
        `program_id` a lane array): exact when no step reads what an earlier one left (no tracked
        scalar memory, no run_scoped allocation, whose labels count evaluations) and lanes evaluated
        together lose nothing one lane alone would know (`Evaluator.lossy`); otherwise, or when the
        evaluation fails, the core runs again step by step, as the interpreter does.
        """
        self.start_core(core)
        if len(points) > 1 and not self.memory and not self.contains(self.call.jaxpr, _STEP_STATE):
            warnings = len(self.warnings)
            try:
                if self._run_as_lanes(points, kernel_args):
                    self.points_as_lanes += len(points)
                    return self.bodies
            except FrontendError:
                pass
            del self.warnings[warnings:]
            self.start_core(core)
        for point in points:
            self.run_grid_point(point, kernel_args)
        return self.bodies

    def _run_as_lanes(self, points: list[tuple[int, ...]], kernel_args: list[Any]) -> bool:
        """`run_core`'s steps as lanes, in chunks of at most `STEP_LANES` lanes; False if lossy."""
        call, devices = self.call, self.lane_devices
        D = int(devices.shape[0])
        # one device of a subset has a copy lane (`select_devices`); with two steps or more the steps
        # give a device-dependent value its lane axis, so the copy is evaluated once and shared
        alone = self.subset and D == 2 and devices[0] == devices[1]
        bodies = self.bodies
        copies = self._copies
        chunk = max(2, STEP_LANES // (1 if alone else D))
        dims = [dim for dim in range(len(call.grid)) if dim not in call.vmapped_dims]
        try:
            for c0 in range(0, len(points), chunk):
                pts = points[c0 : c0 + chunk]
                S = len(pts)
                lanes = devices[:1] if alone and S > 1 else devices
                E = int(lanes.shape[0])
                coords = np.asarray(pts, dtype=np.int32).reshape(S, len(call.grid))
                self.set_lanes(np.tile(lanes, S))  # lane s * E + d: step s of device d
                self.bodies = [[] for _ in range(S * E)]
                self.grid_point = tuple(np.repeat(coords[:, dim], E) for dim in range(len(call.grid)))
                self.grid_env.append(tuple((np.repeat(coords[:, dim], E), call.grid[dim]) for dim in dims))
                self.lossy = False
                try:
                    self.eval_jaxpr(call.jaxpr, kernel_args, None)
                finally:
                    self.grid_env.pop()
                if self.lossy:
                    return False
                steps = self.bodies
                self.set_lanes(devices)
                self.bodies = bodies
                if copies is not None:
                    copies.precompute([*pts, *(nxt for _, _, nxt in copies.steps[c0 : c0 + S])])
                for s in range(S):  # GRID-1: each step's copies around its body, in the step's order
                    if copies is not None:
                        copies.before()
                    any(map(list.extend, bodies, steps[s * E : (s + 1) * E] * (D // E)))
                    if copies is not None:
                        copies.after()
        finally:
            self.set_lanes(devices)
        self.bodies = bodies
        return True

    def run_grid_point(self, point: tuple[int, ...], kernel_args: list[Any]) -> None:
        call = self.call
        env = tuple(
            (np.array([idx], dtype=np.int32), size)
            for dim, (idx, size) in enumerate(zip(point, call.grid))
            if dim not in call.vmapped_dims
        )
        self.grid_env.append(env)
        self.grid_point = point
        copies = self._copies
        try:
            if copies is not None:
                copies.before()
            self.eval_jaxpr(call.jaxpr, kernel_args, None)
            if copies is not None:
                copies.after()
        finally:
            self.grid_env.pop()

    def repeat_lanes(self, n: int) -> Any:
        L, point = self.L, self.grid_point
        restore = super().repeat_lanes(n)
        self.grid_point = tuple(np.tile(a, n) if type(a) is np.ndarray and a.shape[0] == L > 1 else a for a in point)

        def restore_point() -> None:
            restore()
            self.grid_point = point

        return restore_point

    # --- rules: grid and axes -----------------------------------------------------------

    def _program_id(self, eqn: Any, invals: list[Any], mask: Any) -> list[Any]:
        axis = eqn.params["axis"]
        env = self.grid_env[-1] if self.grid_env else ()
        if not 0 <= axis < len(env):
            raise Unsupported("program_id", f"axis {axis} outside the grid {tuple(s for _, s in env)}", self.loc(eqn))
        return [env[axis][0]]

    def _num_programs(self, eqn: Any, invals: list[Any], mask: Any) -> list[Any]:
        axis = eqn.params["axis"]
        env = self.grid_env[-1] if self.grid_env else ()
        if not 0 <= axis < len(env):
            raise Unsupported("num_programs", f"axis {axis} outside the grid", self.loc(eqn))
        return [np.array([env[axis][1]], dtype=np.int32)]

    def _axis_index(self, eqn: Any, invals: list[Any], mask: Any) -> list[Any]:
        name = eqn.params["axis_name"]
        if name in self.core_axis_names:
            return [np.array([self.core], dtype=np.int32)]
        if name in self.axis_coords:
            return [self.axis_coords[name]]
        names = self.call.grid_names or ()
        if name in names:
            at = self.grid_point[names.index(name)]
            return [at if type(at) is np.ndarray else np.array([at], dtype=np.int32)]  # a lane array: `run_core`
        raise Unsupported("axis_index", f"axis {name!r} is neither a mesh axis nor a grid axis", self.loc(eqn))
