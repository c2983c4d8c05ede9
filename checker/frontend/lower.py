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
* semaphore references: scratch semaphores (`SemArray(label, shape)`), the
  barrier semaphore, `run_scoped` semaphores; indexing gives `SemRef`s;
* control flow, unrolled: cond/switch, scan/fori_loop, while_loop;
* the semaphore and DMA primitives, which emit IR ops.

Anything else is opaque (`Unknown`): vector compute, values loaded from refs,
semaphore reads. Opaque values are harmless until they decide control flow
or a semaphore operand; then the front end raises `Unsupported` rather than
guess.

Grid order, the split of the grid between the cores of a device, the
`parallel` dimension shuffle, allocation order and id-relevant details follow
`interpret_pallas_call` of jax's TPU interpret mode.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from semcheck.checker.frontend.errors import Unsupported
from semcheck.checker.frontend.trace import KernelCall, eqn_loc
from semcheck.model.launch import Scratch, launch
from semcheck.model.ops import (
    BARRIER,
    NO_LOC,
    AllocBuffer,
    AllocSem,
    DmaStart,
    FreeBuffer,
    GetBarrierSem,
    Loc,
    Op,
    Program,
    Read,
    SemRef,
    Signal,
    Topology,
    Wait,
)

# Integer arrays with more elements than this per device are not evaluated
# (they are vector data, not scalar control values).
MAX_EVAL_ELEMENTS = 1024
# A `while` loop that runs longer than this is reported, not unrolled forever.
MAX_WHILE_ITERATIONS = 1_000_000


# --- values -------------------------------------------------------------------


class Unknown:
    """An opaque value (data, float compute, a semaphore read, ...)."""

    __slots__ = ("why", "loc")

    def __init__(self, why: str, loc: Loc = NO_LOC) -> None:
        self.why = why
        self.loc = loc

    def __repr__(self) -> str:
        return f"Unknown({self.why!r} at {self.loc})"


@dataclasses.dataclass(frozen=True, eq=False)
class SemArray:
    """A semaphore ref: the allocation `label` with array shape `shape`."""

    label: str
    shape: tuple[int, ...]


@dataclasses.dataclass(frozen=True, eq=False)
class BufRef:
    """A non-semaphore ref (its contents are never tracked)."""

    name: str


# --- the lowering -------------------------------------------------------------


@dataclasses.dataclass
class LoweringStats:
    seconds: float = 0.0
    num_ops: int = 0
    eqns_evaluated: int = 0
    grid_points: int = 0
    # Things the caller should know about the lowered program (not errors).
    warnings: list[str] = dataclasses.field(default_factory=list)


def lower_kernel(
    call: KernelCall,
    *,
    cores: int | None = None,
    name: str | None = None,
    stats: LoweringStats | None = None,
) -> Program:
    """The `Program` the interpreter runs for `call` (see module docstring).

    `cores` overrides the interpreter's `num_cores_or_threads` (ignored for a
    `core_map`, whose mesh fixes the core count, as in the interpreter).
    """
    t0 = time.perf_counter()
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

    scratch, kernel_args, hbm_buffers = _launch_operands(call)
    schedule = grid_schedule(call, n_cores)
    lw = _Lowerer(call, num_devices, n_cores)
    bodies: list[list[Op]] = [[] for _ in range(num_devices * n_cores)]
    for core in range(n_cores):
        lw.start_core(core)
        for point in schedule[core]:
            lw.run_grid_point(point, kernel_args)
        for d in range(num_devices):
            bodies[d * n_cores + core] = lw.bodies[d]
    program = launch(
        Topology(num_devices, n_cores),
        bodies,
        collective_id=call.collective_id,
        scratch=scratch,
        hbm_buffers=hbm_buffers,
        name=name or call.name,
        loc=call.loc,
    )
    if stats is not None:
        stats.seconds += time.perf_counter() - t0
        stats.num_ops += program.num_ops
        stats.eqns_evaluated += lw.eqn_count
        stats.grid_points += sum(len(s) for s in schedule)
        stats.warnings.extend(w for w in lw.warnings if w not in stats.warnings)
    return program


def _launch_operands(call: KernelCall) -> tuple[list[Scratch], list[Any], int]:
    """Scratch allocations (interpreter order), kernel argument values, HBM buffer count."""
    aliased_outputs = {o for _, o in call.input_output_aliases}
    hbm_buffers = call.num_inputs + sum(1 for i in range(call.num_outputs) if i not in aliased_outputs)
    scratch: list[Scratch] = []
    args: list[Any] = []
    used: set[str] = {BARRIER}
    for i, op in enumerate(call.operands):
        label = op.name if op.name and op.name not in used else f"{op.role}{i}"
        while label in used:
            label += "_"
        used.add(label)
        if op.kind == "semaphore":
            scratch.append(Scratch(label, op.count, kind="semaphore", loc=call.loc))
            args.append(SemArray(label, tuple(op.block_shape if op.block_shape is not None else op.shape)))
        elif op.role in ("input", "output") and op.memory_space == "hbm":
            args.append(BufRef(label))  # the HBM buffer allocated for the call
        else:
            scratch.append(
                Scratch(label, kind="buffer", nbytes=op.nbytes, memory_space=op.memory_space, loc=call.loc)
            )
            args.append(BufRef(label))
    return scratch, args, hbm_buffers


def parallel_dims(call: KernelCall) -> tuple[bool, ...]:
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
    import jax
    import jax.numpy as jnp

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
    grid = call.grid
    par = parallel_dims(call)
    num_iterations = math.prod(grid) if grid else 1
    if num_iterations == 0:
        return [[] for _ in range(cores)]
    coords = _grid_coordinates(call, par)
    subgrid = math.prod(g if p else 1 for g, p in zip(grid, par))
    points_per_core = (subgrid + cores - 1) // cores
    per_core = points_per_core * (num_iterations // subgrid)
    out: list[list[tuple[int, ...]]] = []
    for c in range(cores):
        pts = []
        for it in range(c * per_core, min((c + 1) * per_core, num_iterations)):
            idx = []
            rest = it
            for size in reversed(grid):
                idx.append(rest % size)
                rest //= size
            idx.reverse()
            pts.append(
                tuple(int(coords[d][i]) if coords[d] is not None else int(i) for d, i in enumerate(idx))
            )
        out.append(pts)
    return out


class _Lowerer:
    def __init__(self, call: KernelCall, num_devices: int, cores: int) -> None:
        import jax
        from jax._src import core as jax_core
        from jax._src.pallas import primitives as pallas_prims
        from jax._src.pallas.mosaic import primitives as tpu_prims
        from jax._src.state import primitives as state_prims

        self.jax = jax
        self.call = call
        self.L = num_devices
        self.cores = cores
        self.all_lanes = list(range(num_devices))
        self.collective_id = call.collective_id
        self.axis_names = call.mesh.axis_names
        self.axis_sizes = call.mesh.axis_sizes
        self.axis_coords: dict[str, np.ndarray] = {}
        ids = np.arange(num_devices, dtype=np.int64)
        for i, name in enumerate(self.axis_names):
            inner = math.prod(self.axis_sizes[i + 1 :])
            self.axis_coords[name] = ((ids // inner) % self.axis_sizes[i]).astype(np.int32)
        self.core_axis_names = (call.core_axis_name,) if call.core_axis_name else ()
        self.core = 0
        self.bodies: list[list[Op]] = []
        self.grid_env: list[tuple[tuple[Any, int], ...]] = []
        self.loc_override: Loc | None = None
        # Equations traced inside a nested trace (run_scoped, loops, ...) may carry
        # truncated tracebacks without a user frame: they get their parent's line.
        self.parent_loc: Loc = call.loc
        self.label_counter = 0
        self.eqn_count = 0
        self.warnings: list[str] = []
        self._loc_cache: dict[int, Loc] = {}
        self._site_cache: dict[int, str] = {}
        self._site_lines: dict[tuple[str, int], int] = {}
        self._static_cache: dict[int, Any] = {}
        self._semref_cache: dict[tuple[str, int], SemRef] = {}
        self._has_sem_cache: dict[int, bool] = {}
        self._pipeline_cache: dict[int, Any] = {}
        self._op_cache: dict[tuple[Any, ...], dict[Any, Op]] = {}
        self._drop_var = jax_core.DropVar
        self._literal = jax_core.Literal
        from semcheck.checker.frontend.trace import _jaxpr_types

        self._jaxpr_types = _jaxpr_types(jax_core)
        self.pallas_prims = pallas_prims
        self.tpu_prims = tpu_prims
        self.device_id_type = pallas_prims.DeviceIdType
        self.rules: dict[Any, Callable[..., list[Any]]] = {
            tpu_prims.get_barrier_semaphore_p: self._get_barrier_semaphore,
            pallas_prims.semaphore_signal_p: self._semaphore_signal,
            pallas_prims.semaphore_wait_p: self._semaphore_wait,
            pallas_prims.semaphore_read_p: self._semaphore_read,
            tpu_prims.dma_start_p: self._dma_start,
            tpu_prims.dma_wait_p: self._dma_wait,
            pallas_prims.run_scoped_p: self._run_scoped,
            pallas_prims.program_id_p: self._program_id,
            pallas_prims.num_programs_p: self._num_programs,
            state_prims.get_p: self._ref_read,
            state_prims.swap_p: self._ref_read,
            state_prims.addupdate_p: self._ref_read,
            pallas_prims.load_p: self._ref_read,
            pallas_prims.swap_p: self._ref_read,
        }
        from jax._src.pallas.mosaic import pipeline as mosaic_pipeline

        self.rules[mosaic_pipeline.emit_pipeline_p] = self._emit_pipeline
        self.rules[mosaic_pipeline.pipeline_body_p] = self._pipeline_body
        self.mosaic_pipeline = mosaic_pipeline
        self.sem_prims = {
            tpu_prims.get_barrier_semaphore_p,
            pallas_prims.semaphore_signal_p,
            pallas_prims.semaphore_wait_p,
            pallas_prims.semaphore_read_p,
            tpu_prims.dma_start_p,
            tpu_prims.dma_wait_p,
            pallas_prims.run_scoped_p,
            mosaic_pipeline.emit_pipeline_p,
        }
        self.named_rules: dict[str, Callable[..., list[Any]]] = {
            "cond": self._cond,
            "while": self._while,
            "scan": self._scan,
            "jit": self._call,
            "pjit": self._call,
            "closed_call": self._call,
            "core_call": self._call,
            "eval_jaxpr": self._call,
            "custom_jvp_call": self._call,
            "custom_vjp_call": self._call,
            "custom_vjp_call_jaxpr": self._call,
            "checkpoint": self._call,
            "remat2": self._call,
            "axis_index": self._axis_index,
        }

    # --- driving ---------------------------------------------------------------

    def start_core(self, core: int) -> None:
        self.core = core
        self.bodies = [[] for _ in range(self.L)]

    def run_grid_point(self, point: tuple[int, ...], kernel_args: list[Any]) -> None:
        call = self.call
        env = tuple(
            (np.array([idx], dtype=np.int32), size)
            for dim, (idx, size) in enumerate(zip(point, call.grid))
            if dim not in call.vmapped_dims
        )
        self.grid_env.append(env)
        self.grid_point = point
        try:
            self.eval_jaxpr(call.jaxpr, kernel_args, None)
        finally:
            self.grid_env.pop()

    # --- the evaluator ------------------------------------------------------------

    def eval_jaxpr(self, jaxpr: Any, args: Sequence[Any], mask: np.ndarray | None) -> list[Any]:
        env: dict[Any, Any] = {}
        binders = list(jaxpr.constvars) + list(jaxpr.invars)
        if len(binders) != len(args):
            raise Unsupported("jaxpr", f"arity mismatch ({len(binders)} binders, {len(args)} values)",
                              self.loc_override or NO_LOC)
        for v, a in zip(binders, args):
            env[v] = a
        literal = self._literal
        drop = self._drop_var
        rules = self.rules
        named = self.named_rules
        for eqn in jaxpr.eqns:
            self.eqn_count += 1
            invals = [self._lit(v) if type(v) is literal else env[v] for v in eqn.invars]
            prim = eqn.primitive
            rule = rules.get(prim)
            if rule is None:
                rule = named.get(prim.name)
            if rule is not None:
                outs = rule(eqn, invals, mask)
            else:
                outs = self._numeric(eqn, invals)
            for v, o in zip(eqn.outvars, outs):
                if type(v) is not drop:
                    env[v] = o
        return [self._lit(v) if type(v) is literal else env[v] for v in jaxpr.outvars]

    def eval_closed(self, closed: Any, args: Sequence[Any], mask: np.ndarray | None) -> list[Any]:
        """Evaluate a jaxpr whose attached constants (if any) are not among `args`."""
        consts = getattr(closed, "consts", None)
        inner = closed.jaxpr
        if consts and len(args) == len(inner.invars):
            return self.eval_jaxpr(inner, [*self._consts(closed), *args], mask)
        return self.eval_jaxpr(inner, args, mask)

    def _consts(self, closed: Any) -> list[Any]:
        key = id(closed)
        hit = self._static_cache.get(("consts", key))  # type: ignore[arg-type]
        if hit is None:
            hit = [self._from_python(c, "a constant") for c in closed.consts]
            self._static_cache[("consts", key)] = hit  # type: ignore[index]
        return hit

    def _from_python(self, c: Any, what: str) -> Any:
        try:
            arr = np.asarray(c)
        except Exception:
            return Unknown(what)
        if arr.dtype == object or arr.size > MAX_EVAL_ELEMENTS:
            return Unknown(what)
        return arr[None]

    def _lit(self, v: Any) -> Any:
        key = id(v)
        hit = self._static_cache.get(key)
        if hit is None:
            val = v.val
            dtype = getattr(v.aval, "dtype", None)
            try:
                arr = np.asarray(val, dtype=dtype) if dtype is not None else np.asarray(val)
            except Exception:
                arr = None
            if arr is None or arr.dtype == object or arr.size > MAX_EVAL_ELEMENTS:
                hit = Unknown("a literal")
            else:
                hit = arr[None]
            self._static_cache[key] = (hit, v)  # keep `v` alive: ids must not be reused
            return hit
        return hit[0]

    # --- locations -------------------------------------------------------------

    def loc(self, eqn: Any) -> Loc:
        if self.loc_override is not None:
            return self.loc_override
        key = id(eqn)
        hit = self._loc_cache.get(key)
        if hit is None:
            hit = eqn_loc(eqn, self.parent_loc)
            self._loc_cache[key] = hit
        return hit

    def eval_sub(self, eqn: Any, jaxpr: Any, args: Sequence[Any], mask: Any, closed: bool = True) -> list[Any]:
        """Evaluate a sub-jaxpr of `eqn`, whose line is the fallback location inside."""
        outer = self.parent_loc
        self.parent_loc = self.loc(eqn)
        try:
            if closed:
                return self.eval_closed(jaxpr, args, mask)
            return self.eval_jaxpr(jaxpr, args, mask)
        finally:
            self.parent_loc = outer

    def site(self, eqn: Any, loc: Loc) -> str:
        key = id(eqn)
        hit = self._site_cache.get(key)
        if hit is None:
            base = f"{os.path.basename(loc.file)}:{loc.line}"
            n = self._site_lines.get((loc.file, loc.line), 0)
            self._site_lines[(loc.file, loc.line)] = n + 1
            hit = f"scoped@{base}" + (f".{n + 1}" if n else "")
            self._site_cache[key] = hit
        return hit

    # --- lane helpers --------------------------------------------------------------

    def active(self, mask: np.ndarray | None) -> list[int]:
        if mask is None:
            return self.all_lanes
        return np.flatnonzero(mask).tolist()

    def known(self, value: Any, eqn: Any, what: str) -> np.ndarray:
        """`value` as a lane array; `Unsupported` if it is opaque."""
        if type(value) is np.ndarray:
            return value
        if isinstance(value, Unknown):
            src = f" (it comes from {value.why}" + (f" at {value.loc}" if value.loc.line else "") + ")"
            raise Unsupported(eqn.primitive.name, f"{what} depends on a value semcheck cannot compute{src}",
                              self.loc(eqn))
        if isinstance(value, (int, np.integer, bool, np.bool_)):
            return np.array([value])
        raise Unsupported(eqn.primitive.name, f"{what} is a {type(value).__name__}, not a number",
                          self.loc(eqn))

    def lane_ints(self, arr: np.ndarray, eqn: Any, what: str) -> list[int]:
        """A per-lane scalar as a Python list of length L."""
        if arr.ndim > 1 and math.prod(arr.shape[1:]) != 1:
            raise Unsupported(eqn.primitive.name, f"{what} is an array of shape {arr.shape[1:]}, not a scalar",
                              self.loc(eqn))
        flat = arr.reshape(arr.shape[0])
        if flat.shape[0] == 1:
            return [int(flat[0])] * self.L
        return [int(x) for x in flat.tolist()]

    def op_cache(self, eqn: Any, *extra: Any) -> dict[Any, Op]:
        """Ops already built for `eqn` (identical ops are shared, across lanes and iterations)."""
        key = (id(eqn), self.loc_override, *extra)
        cache = self._op_cache.get(key)
        if cache is None:
            cache = self._op_cache[key] = {}
        return cache

    def semref(self, label: str, index: int) -> SemRef:
        key = (label, index)
        ref = self._semref_cache.get(key)
        if ref is None:
            ref = self._semref_cache[key] = SemRef(label, index)
        return ref

    def merge(self, mask: np.ndarray, new: Any, old: Any) -> Any:
        """`new` on the lanes of `mask`, `old` elsewhere."""
        if old is None or new is old:
            return new
        if type(new) is not np.ndarray or type(old) is not np.ndarray:
            if isinstance(new, Unknown):
                return new
            if isinstance(old, Unknown):
                return old
            return new  # refs: identical on every lane
        m = mask.reshape((self.L,) + (1,) * (max(new.ndim, old.ndim) - 1))
        out = np.where(m, new, old).astype(new.dtype, copy=False)
        if out.shape[0] > 1 and bool((out == out[:1]).all()):
            out = out[:1]
        return out

    # --- semaphore operands ------------------------------------------------------

    def sem_indices(self, ref: Any, transforms: Sequence[Any], eqn: Any, what: str) -> tuple[str, list[int]]:
        """The allocation label and per-lane flat index of a scalar semaphore view."""
        from jax._src.state import types as state_types
        from jax._src.state.indexing import NDIndexer, Slice

        if isinstance(ref, state_types.TransformedRef):
            transforms = (*ref.transforms, *transforms)
            ref = ref.ref
        if not isinstance(ref, SemArray):
            if isinstance(ref, Unknown):
                self.known(ref, eqn, what)
            raise Unsupported(eqn.primitive.name, f"{what} is not a semaphore semcheck can track "
                              f"({type(ref).__name__})", self.loc(eqn))
        shape = ref.shape
        # view dim -> (base dim, start, stride, size); fixed base coordinates
        view: list[tuple[int, Any, int, int]] = [(d, 0, 1, s) for d, s in enumerate(shape)]
        fixed: list[Any] = [0] * len(shape)
        for t in transforms:
            if t is None:
                continue
            if not isinstance(t, NDIndexer):
                raise Unsupported(eqn.primitive.name, f"{what}: a {type(t).__name__} of a semaphore ref",
                                  self.loc(eqn))
            if len(t.indices) != len(view):
                raise Unsupported(eqn.primitive.name, f"{what}: indexer rank mismatch", self.loc(eqn))
            new_view = []
            for (bd, start, stride, size), idx in zip(view, t.indices):
                if isinstance(idx, Slice):
                    s = self._index_value(idx.start, eqn, what)
                    sz = int(self._index_value(idx.size, eqn, what)[0]) if not isinstance(idx.size, int) else idx.size
                    self._check_bounds(s, size - (sz - 1) * idx.stride if sz else size + 1, eqn, what, size)
                    new_view.append((bd, start + s * stride, stride * idx.stride, sz))
                else:
                    i = self._index_value(idx, eqn, what)
                    if i.ndim > 1:
                        raise Unsupported(eqn.primitive.name, f"{what}: array-valued index of a semaphore ref",
                                          self.loc(eqn))
                    self._check_bounds(i, size, eqn, what, size)
                    fixed[bd] = start + i * stride
            view = new_view
        if any(size != 1 for (_, _, _, size) in view):
            raise Unsupported(eqn.primitive.name, f"{what} is not a single semaphore "
                              f"(shape {tuple(s for *_, s in view)})", self.loc(eqn))
        for bd, start, _, _ in view:
            fixed[bd] = start
        flat: Any = 0
        for d in range(len(shape)):
            flat = flat * shape[d] + fixed[d]
        if isinstance(flat, int):
            return ref.label, [flat] * self.L
        return ref.label, self.lane_ints(np.asarray(flat), eqn, what)

    def _index_value(self, x: Any, eqn: Any, what: str) -> np.ndarray:
        if isinstance(x, (int, np.integer)):
            return np.array([int(x)], dtype=np.int64)
        arr = self.known(x, eqn, f"the index of {what}")
        return arr.reshape(arr.shape[0], *arr.shape[1:]).astype(np.int64)

    def _check_bounds(self, i: np.ndarray, limit: int, eqn: Any, what: str, size: int) -> None:
        if bool((i < 0).any()) or bool((i >= limit).any()):
            bad = int(i[(i < 0) | (i >= limit)].reshape(-1)[0])
            raise Unsupported(eqn.primitive.name, f"{what}: index {bad} is out of bounds for a semaphore "
                              f"dimension of size {size} (the interpreter would clamp it silently)",
                              self.loc(eqn))

    def logical_device(self, device_id: Any, id_type: Any, eqn: Any) -> tuple[list[int] | None, list[int] | None]:
        """`device_id` -> (per-lane logical device ids, per-lane core index from a dict) or None."""
        if device_id is None:
            return None, None
        loc = self.loc(eqn)
        prim = eqn.primitive.name
        if id_type == self.device_id_type.LOGICAL:
            arr = self.known(device_id, eqn, "the device id")
            return self.lane_ints(arr, eqn, "the device id"), None
        if id_type != self.device_id_type.MESH:
            raise Unsupported(prim, f"device id type {id_type}", loc)
        names = list(self.axis_names)
        sizes = dict(zip(self.axis_names, self.axis_sizes))
        core_index = None
        if isinstance(device_id, dict):
            per_axis: dict[str, Any] = {}
            non_mesh: dict[Any, Any] = {}
            for axis, idx in device_id.items():
                if isinstance(axis, tuple) and len(axis) == 1:
                    axis = axis[0]
                if isinstance(axis, tuple) and any(a in sizes for a in axis):
                    if not all(a in sizes for a in axis):
                        raise Unsupported(prim, f"device id axis {axis} mixes mesh and core axes", loc)
                    v = self.known(idx, eqn, "the device id").astype(np.int64)
                    dims = [sizes[a] for a in axis]
                    for k, a in enumerate(axis):
                        inner = math.prod(dims[k + 1 :])
                        per_axis[a] = (v // inner) % sizes[a]
                elif axis in sizes:
                    per_axis[axis] = self.known(idx, eqn, "the device id").astype(np.int64)
                else:
                    non_mesh[axis] = idx
            coords = [per_axis[a] if a in per_axis else self.axis_coords[a].astype(np.int64) for a in names]
            if non_mesh:
                if len(non_mesh) == 1 and set(non_mesh) <= set(self.core_axis_names):
                    (ci,) = non_mesh.values()
                    core_index = self.lane_ints(self.known(ci, eqn, "the core index"), eqn, "the core index")
                else:
                    raise Unsupported(prim, f"unrecognised axes in device_id: {sorted(map(str, non_mesh))}", loc)
        else:
            parts = device_id if isinstance(device_id, tuple) else (device_id,)
            if len(parts) != len(names):
                raise Unsupported(
                    prim,
                    f"device_id has {len(parts)} coordinate(s) but the mesh has axes {tuple(names)} "
                    "(the interpreter fails on this)",
                    loc,
                )
            coords = [self.known(p, eqn, "the device id").astype(np.int64) for p in parts]
        if not names:
            logical: Any = np.zeros((1,), dtype=np.int64)
        else:
            logical = 0
            for k, c in enumerate(coords):
                logical = logical + c * math.prod(self.axis_sizes[k + 1 :])
        return self.lane_ints(np.asarray(logical), eqn, "the device id"), core_index

    # --- rules: semaphores and DMAs ---------------------------------------------------

    def _get_barrier_semaphore(self, eqn: Any, invals: list[Any], mask: Any) -> list[Any]:
        if self.collective_id is None:
            raise Unsupported(
                "get_barrier_semaphore",
                "the kernel uses the barrier semaphore but its compiler params set no collective_id "
                "(the interpreter fails on this)",
                self.loc(eqn),
            )
        op = GetBarrierSem(self.loc(eqn))
        bodies = self.bodies
        for d in self.active(mask):
            bodies[d].append(op)
        return [SemArray(BARRIER, ())]

    def _semaphore_signal(self, eqn: Any, invals: list[Any], mask: Any) -> list[Any]:
        sem, transforms, inc, device_id, core_index = eqn.params["args_tree"].unflatten(invals)
        loc = self.loc(eqn)
        label, idx = self.sem_indices(sem, transforms, eqn, "the signalled semaphore")
        incs = self.lane_ints(self.known(inc, eqn, "the signal increment"), eqn, "the signal increment")
        devs, dict_core = self.logical_device(device_id, eqn.params["device_id_type"], eqn)
        cores = None
        if core_index is not None:
            if dict_core is not None:
                raise Unsupported("semaphore_signal", "both core_index and a core axis in device_id", loc)
            cores = self.lane_ints(self.known(core_index, eqn, "the core index"), eqn, "the core index")
        else:
            cores = dict_core
        bodies = self.bodies
        cache = self.op_cache(eqn, label)
        for d in self.active(mask):
            key = (idx[d], incs[d], devs[d] if devs else None, cores[d] if cores else None)
            op = cache.get(key)
            if op is None:
                op = cache[key] = Signal(self.semref(label, key[0]), key[1], key[2], key[3], loc)
            bodies[d].append(op)
        return []

    def _semaphore_wait(self, eqn: Any, invals: list[Any], mask: Any) -> list[Any]:
        sem, transforms, value, decrement = eqn.params["args_tree"].unflatten(invals)
        loc = self.loc(eqn)
        dec = decrement if isinstance(decrement, bool) else bool(np.all(self.known(decrement, eqn, "decrement")))
        if not dec:
            raise Unsupported("semaphore_wait", "a non-decrementing wait (the interpreter does not support it)", loc)
        label, idx = self.sem_indices(sem, transforms, eqn, "the awaited semaphore")
        vals = self.lane_ints(self.known(value, eqn, "the wait value"), eqn, "the wait value")
        bodies = self.bodies
        cache = self.op_cache(eqn, label)
        for d in self.active(mask):
            key = (idx[d], vals[d])
            op = cache.get(key)
            if op is None:
                op = cache[key] = Wait(self.semref(label, key[0]), key[1], "semaphore", loc)
            bodies[d].append(op)
        return []

    def _semaphore_read(self, eqn: Any, invals: list[Any], mask: Any) -> list[Any]:
        sem, transforms = eqn.params["args_tree"].unflatten(invals)
        loc = self.loc(eqn)
        label, idx = self.sem_indices(sem, transforms, eqn, "the read semaphore")
        note = (f"pl.semaphore_read at {loc}: jax's TPU interpreter has no rule for it, so the "
                "kernel cannot run in interpret mode (the program models the hardware read)")
        if note not in self.warnings:
            self.warnings.append(note)
        bodies = self.bodies
        for d in self.active(mask):
            bodies[d].append(Read(self.semref(label, idx[d]), loc))
        return [Unknown("pl.semaphore_read (a count that depends on timing)", loc)]

    def _dma_nbytes(self, eqn: Any) -> int:
        """Bytes moved by a DMA: the size of its (transformed) source ref, a static property."""
        key = ("nbytes", id(eqn))
        hit = self._static_cache.get(key)  # type: ignore[arg-type]
        if hit is None:
            from jax._src import state

            src = eqn.params["tree"].unflatten([v.aval for v in eqn.invars])[0]
            if isinstance(src, state.TransformedRef):
                aval = state.transform_type(src.transforms, src.ref)
            else:
                aval = src
            shape = tuple(int(s) for s in aval.shape)
            hit = math.prod(shape) * np.dtype(aval.dtype).itemsize
            self._static_cache[key] = hit  # type: ignore[index]
        return hit

    def _dma_start(self, eqn: Any, invals: list[Any], mask: Any) -> list[Any]:
        src, dst, dst_sem, src_sem, device_id = eqn.params["tree"].unflatten(invals)
        loc = self.loc(eqn)
        nbytes = self._dma_nbytes(eqn)
        dlabel, didx = self.sem_indices(dst_sem, (), eqn, "the DMA's destination semaphore")
        slabel, sidx = (None, None)
        if src_sem is not None:
            slabel, sidx = self.sem_indices(src_sem, (), eqn, "the DMA's source semaphore")
        devs, dict_core = self.logical_device(device_id, eqn.params["device_id_type"], eqn)
        bodies = self.bodies
        cache = self.op_cache(eqn, dlabel, slabel)
        for d in self.active(mask):
            key = (didx[d], sidx[d] if sidx else None, devs[d] if devs else None,
                   dict_core[d] if dict_core else None)
            op = cache.get(key)
            if op is None:
                op = cache[key] = DmaStart(
                    self.semref(dlabel, key[0]),
                    nbytes,
                    self.semref(slabel, key[1]) if slabel is not None else None,
                    key[2],
                    key[3],
                    loc,
                )
            bodies[d].append(op)
        return []

    def _dma_wait(self, eqn: Any, invals: list[Any], mask: Any) -> list[Any]:
        # For `wait_send`/`wait_read` the descriptor's src/dst are already swapped in
        # the operands: the awaited semaphore sits in the dst_sem slot and the byte
        # count comes from the ref in the src slot, whichever way round.
        _src, _dst, sem, _src_sem, _dev = eqn.params["tree"].unflatten(invals)
        loc = self.loc(eqn)
        nbytes = self._dma_nbytes(eqn)
        label, idx = self.sem_indices(sem, (), eqn, "the awaited DMA semaphore")
        bodies = self.bodies
        cache = self.op_cache(eqn, label)
        for d in self.active(mask):
            op = cache.get(idx[d])
            if op is None:
                op = cache[idx[d]] = Wait(self.semref(label, idx[d]), nbytes, "dma", loc)
            bodies[d].append(op)
        return []

    # --- rules: scopes and refs --------------------------------------------------------

    def _run_scoped(self, eqn: Any, invals: list[Any], mask: Any) -> list[Any]:
        from jax._src.pallas.mosaic import core as mosaic_core

        from semcheck.checker.frontend.trace import _is_semaphore_dtype

        loc = self.loc(eqn)
        if eqn.params.get("collective_axes"):
            raise Unsupported("run_scoped", "run_scoped with collective_axes (the interpreter does not support it)",
                              loc)
        jaxpr = eqn.params["jaxpr"]
        site = self.site(eqn, loc)
        lanes = self.active(mask)
        bodies = self.bodies
        allocs: list[Any] = []
        buffers: list[str] = []
        params = self.call.interpret_params
        allow_hbm = bool(getattr(params, "allow_hbm_allocation_in_run_scoped", False))
        for k, v in enumerate(jaxpr.invars):
            aval = v.aval
            ms = getattr(aval, "memory_space", None)
            self.label_counter += 1
            if ms is mosaic_core.MemorySpace.SEMAPHORE or _is_semaphore_dtype(getattr(aval, "dtype", None)):
                count = math.prod(int(s) for s in aval.shape)
                label = f"{site}#{k}/{self.label_counter}"
                op: Op = AllocSem(label, count, f"{site}#{k}", "core", loc)
                allocs.append(SemArray(label, tuple(int(s) for s in aval.shape)))
            else:
                ms_name = _ms_name(ms)
                if ms_name == "hbm" and not allow_hbm:
                    raise Unsupported("run_scoped", "allocating HBM in run_scoped (the interpreter rejects it)", loc)
                label = f"buf@{site[len('scoped@'):]}#{k}/{self.label_counter}"
                nbytes = _nbytes(aval)
                op = AllocBuffer(label, nbytes, ms_name, "core", loc)
                allocs.append(BufRef(label))
                buffers.append(label)
            for d in lanes:
                bodies[d].append(op)
        outs = self.eval_sub(eqn, jaxpr, [*invals, *allocs], mask, closed=False)
        for label in buffers:
            op = FreeBuffer(label, loc)
            for d in lanes:
                bodies[d].append(op)
        return outs

    def _ref_read(self, eqn: Any, invals: list[Any], mask: Any) -> list[Any]:
        ref = invals[0] if invals else None
        from jax._src.state import types as state_types

        if isinstance(ref, state_types.TransformedRef):
            ref = ref.ref
        if isinstance(ref, SemArray):
            raise Unsupported(eqn.primitive.name, "loads and stores of a semaphore ref", self.loc(eqn))
        why = "a value loaded from a ref"
        loc = self.loc(eqn)
        return [Unknown(why, loc) for _ in eqn.outvars]

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
            return [np.array([self.grid_point[names.index(name)]], dtype=np.int32)]
        raise Unsupported("axis_index", f"axis {name!r} is neither a mesh axis nor a grid axis", self.loc(eqn))

    # --- rules: control flow ----------------------------------------------------------------

    def _cond(self, eqn: Any, invals: list[Any], mask: Any) -> list[Any]:
        branches = eqn.params["branches"]
        index = self.known(invals[0], eqn, "the branch condition")
        ops = invals[1:]
        n = len(branches)
        idx = np.clip(index.reshape(index.shape[0]).astype(np.int64), 0, n - 1)
        if idx.shape[0] == 1:
            return self.eval_sub(eqn, branches[int(idx[0])], ops, mask)
        if bool((idx == idx[0]).all()):
            return self.eval_sub(eqn, branches[int(idx[0])], ops, mask)
        base = np.ones(self.L, dtype=bool) if mask is None else mask
        outs: list[Any] | None = None
        for b in range(n):
            m = base & (idx == b)
            if not m.any():
                continue
            res = self.eval_sub(eqn, branches[b], ops, m)
            if outs is None:
                outs = list(res)
            else:
                outs = [self.merge(m, r, o) for r, o in zip(res, outs)]
        if outs is None:  # no lane active: the outputs are never observed
            outs = [Unknown("an inactive branch") for _ in eqn.outvars]
        return outs

    def _while(self, eqn: Any, invals: list[Any], mask: Any) -> list[Any]:
        p = eqn.params
        cn, bn = p["cond_nconsts"], p["body_nconsts"]
        cconsts, bconsts, vals = invals[:cn], invals[cn : cn + bn], list(invals[cn + bn :])
        cond_jaxpr, body_jaxpr = p["cond_jaxpr"], p["body_jaxpr"]
        base = mask
        iterations = 0
        while True:
            (c,) = self.eval_sub(eqn, cond_jaxpr, [*cconsts, *vals], base)
            c = self.known(c, eqn, "the loop condition").reshape(-1)
            if c.shape[0] == 1 and (base is None or bool(base.all())):
                if not bool(c[0]):
                    break
                vals = self.eval_sub(eqn, body_jaxpr, [*bconsts, *vals], base)
            else:
                running = np.broadcast_to(c.astype(bool), (self.L,))
                if base is not None:
                    running = running & base
                if not running.any():
                    break
                new = self.eval_sub(eqn, body_jaxpr, [*bconsts, *vals], running)
                vals = [self.merge(running, n_, o_) for n_, o_ in zip(new, vals)]
                base = running
            iterations += 1
            if iterations > MAX_WHILE_ITERATIONS:
                raise Unsupported("while", f"the loop ran more than {MAX_WHILE_ITERATIONS} iterations",
                                  self.loc(eqn))
        return vals

    def _scan(self, eqn: Any, invals: list[Any], mask: Any) -> list[Any]:
        p = eqn.params
        consts, carry, xs = (list(g) for g in p["ft_in"].update(invals).unpack())
        length = int(p["length"])
        reverse = bool(p["reverse"])
        body = p["jaxpr"]
        ys_steps: list[list[Any]] = []
        for step in range(length):
            i = length - 1 - step if reverse else step
            x_i = [x[:, i] if type(x) is np.ndarray else x for x in xs]
            ret = self.eval_sub(eqn, body, [*consts, *carry, *x_i], mask)
            carry_out, ys = (list(g) for g in p["ft_out"].update(ret).unpack())
            carry = carry_out
            ys_steps.append(ys)
        if ys_steps and ys_steps[0]:
            if reverse:
                ys_steps.reverse()
            ys_out = []
            for k in range(len(ys_steps[0])):
                col = [s[k] for s in ys_steps]
                if all(type(c) is np.ndarray for c in col) and length * col[0][0].size <= MAX_EVAL_ELEMENTS:
                    lanes = max(c.shape[0] for c in col)
                    ys_out.append(np.stack([np.broadcast_to(c, (lanes,) + c.shape[1:]) for c in col], axis=1))
                else:
                    ys_out.append(Unknown("stacked scan outputs"))
        else:
            n_ys = len(eqn.outvars) - len(carry)
            ys_out = [Unknown("stacked scan outputs") for _ in range(n_ys)]
        return [*carry, *ys_out]

    def _call(self, eqn: Any, invals: list[Any], mask: Any) -> list[Any]:
        p = eqn.params
        sub = p.get("jaxpr") or p.get("call_jaxpr") or p.get("fun_jaxpr")
        if sub is None:
            return self._numeric(eqn, invals)
        if eqn.primitive.name not in ("jit", "pjit") and self._has_sem_ops(sub):
            raise Unsupported(eqn.primitive.name, "semaphore or DMA operations inside a "
                              f"{eqn.primitive.name} (the interpreter does not run them there)", self.loc(eqn))
        return self.eval_sub(eqn, sub, invals, mask)

    def _emit_pipeline(self, eqn: Any, invals: list[Any], mask: Any) -> list[Any]:
        gm = self.call.grid_mapping
        key = id(eqn)
        jaxpr = self._pipeline_cache.get(key)
        if jaxpr is None:
            avals_in = [v.aval for v in eqn.invars]
            try:
                jaxpr = self.mosaic_pipeline.emit_pipeline_to_jaxpr(
                    avals_in,
                    grid_names=getattr(gm, "grid_names", None),
                    grid_sizes=tuple(self.call.grid),
                    **eqn.params,
                )
            except Exception as e:
                raise Unsupported("emit_pipeline", f"expanding the pipeline failed: {type(e).__name__}: {e}",
                                  self.loc(eqn)) from e
            self._pipeline_cache[key] = (jaxpr, eqn)
        else:
            jaxpr = jaxpr[0]
        outer = self.loc_override
        self.loc_override = self.loc(eqn)
        try:
            self.eval_closed(jaxpr, invals, mask)
        finally:
            self.loc_override = outer
        return []

    def _pipeline_body(self, eqn: Any, invals: list[Any], mask: Any) -> list[Any]:
        from jax._src import tree_util

        ps, body_consts, refs = eqn.params["in_tree"].unflatten(invals)
        ps_flat, _ = tree_util.tree_flatten(ps)
        if eqn.params.get("_explicit_indices", False):
            body_invals = [*body_consts, *ps_flat, *refs]
        else:
            body_invals = [*body_consts, *refs]
        cur = self.grid_env[-1] if self.grid_env else ()
        env = tuple(
            (self.known(idx, eqn, "the pipeline step index"), cur[i][1] if i < len(cur) else 0)
            for i, idx in enumerate(ps.index)
        ) + tuple(cur[len(ps.index) :])
        self.grid_env.append(env)
        outer = self.loc_override
        self.loc_override = None  # the body is the user's code
        try:
            self.eval_sub(eqn, eqn.params["jaxpr"], body_invals, mask, closed=False)
        finally:
            self.loc_override = outer
            self.grid_env.pop()
        return []

    def _has_sem_ops(self, jaxpr: Any) -> bool:
        key = id(jaxpr)
        hit = self._has_sem_cache.get(key)
        if hit is None:
            inner = jaxpr.jaxpr
            hit = False
            for e in inner.eqns:
                if e.primitive in self.sem_prims:
                    hit = True
                    break
                for sub in _sub_jaxprs(e.params, self._jaxpr_types):
                    if self._has_sem_ops(sub):
                        hit = True
                        break
                if hit:
                    break
            self._has_sem_cache[key] = hit
        return hit

    # --- numeric primitives ------------------------------------------------------

    def _numeric(self, eqn: Any, invals: list[Any]) -> list[Any]:
        prim = eqn.primitive
        for x in invals:
            if isinstance(x, SemArray):
                raise Unsupported(prim.name, "a primitive semcheck does not know is applied to a semaphore",
                                  self.loc(eqn))
        fn = NUMERIC.get(prim.name)
        if fn is None:
            if any(True for _ in _sub_jaxprs(eqn.params, self._jaxpr_types)):
                if any(self._has_sem_ops(s) for s in _sub_jaxprs(eqn.params, self._jaxpr_types)):
                    raise Unsupported(prim.name, "semaphore or DMA operations inside a higher-order "
                                      "primitive semcheck does not know", self.loc(eqn))
            return [Unknown(f"the result of {prim.name}", self.loc(eqn)) for _ in eqn.outvars]
        for x in invals:
            if type(x) is not np.ndarray:
                if isinstance(x, Unknown):
                    return [x for _ in eqn.outvars]
                return [Unknown(f"the result of {prim.name} on a ref", self.loc(eqn)) for _ in eqn.outvars]
        for v in eqn.outvars:
            shape = getattr(v.aval, "shape", None)
            if shape is None or math.prod(shape) > MAX_EVAL_ELEMENTS:
                return [Unknown(f"a large {prim.name} result (not evaluated)", self.loc(eqn)) for _ in eqn.outvars]
        try:
            out = fn(eqn, *invals)
        except Unsupported:
            raise
        except Exception as e:  # a numpy corner the table does not cover
            return [Unknown(f"{prim.name} ({type(e).__name__})", self.loc(eqn)) for _ in eqn.outvars]
        if not prim.multiple_results:
            out = [out]
        res = []
        for v, o in zip(eqn.outvars, out):
            dtype = getattr(v.aval, "dtype", None)
            if type(o) is np.ndarray and dtype is not None and o.dtype != dtype:
                try:
                    o = o.astype(dtype)
                except TypeError:
                    o = Unknown(f"a {dtype} value")
            res.append(o)
        return res


def _sub_jaxprs(params: dict[str, Any], jaxpr_types: tuple[type, ...]):
    for value in params.values():
        values = value if isinstance(value, (tuple, list)) else (value,)
        for v in values:
            if isinstance(v, jaxpr_types):
                yield v


def _ms_name(ms: Any) -> str:
    from semcheck.checker.frontend.trace import memory_space_name

    return memory_space_name(ms)


def _nbytes(aval: Any) -> int:
    try:
        return math.prod(int(s) for s in aval.shape) * np.dtype(aval.dtype).itemsize
    except TypeError:
        return 0


# --- numeric rule table ----------------------------------------------------------
# Every rule takes lane arrays (leading axis: lanes, length 1 or D) and returns
# lane arrays; axis parameters of jax are shifted by one for the lane axis.


def _ax(axes: Sequence[int]) -> tuple[int, ...]:
    return tuple(int(a) + 1 for a in axes)


def _int_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iu":
        safe = np.where(b == 0, 1, b)
        q = np.abs(a) // np.abs(safe)
        q = np.where((a < 0) ^ (safe < 0), -q, q).astype(a.dtype)
        return np.where(b == 0, np.array(-1).astype(a.dtype), q)
    return a / b


def _int_rem(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iu":
        safe = np.where(b == 0, 1, b)
        return np.where(b == 0, a, np.fmod(a, safe))
    return np.fmod(a, b)


def _select_n(eqn: Any, pred: np.ndarray, *cases: np.ndarray) -> np.ndarray:
    if len(cases) == 1:
        return cases[0]
    if pred.dtype == np.bool_:
        return np.where(pred, cases[1], cases[0])
    which = np.clip(pred.astype(np.int64), 0, len(cases) - 1)
    arrays = np.broadcast_arrays(which, *cases)
    return np.choose(arrays[0], arrays[1:])


def _convert(eqn: Any, x: np.ndarray) -> np.ndarray:
    new = np.dtype(eqn.params["new_dtype"])
    if x.dtype.kind == "f" and new.kind in "iu":
        x = np.trunc(np.nan_to_num(x))
    return x.astype(new)


def _broadcast_in_dim(eqn: Any, x: np.ndarray, *dyn: np.ndarray) -> np.ndarray:
    shape = tuple(eqn.params["shape"])
    dims = eqn.params["broadcast_dimensions"]
    lanes = x.shape[0]
    new_shape = [lanes] + [1] * len(shape)
    for i, d in enumerate(dims):
        new_shape[d + 1] = x.shape[i + 1]
    return np.broadcast_to(x.reshape(new_shape), (lanes,) + shape)


def _reshape(eqn: Any, x: np.ndarray, *dyn: np.ndarray) -> np.ndarray:
    return x.reshape((x.shape[0],) + tuple(eqn.params["new_sizes"]))


def _iota(eqn: Any) -> np.ndarray:
    p = eqn.params
    shape = tuple(p["shape"])
    dim = p["dimension"]
    r = np.arange(shape[dim], dtype=np.dtype(p["dtype"]))
    view = [1] * len(shape)
    view[dim] = shape[dim]
    return np.broadcast_to(r.reshape(view), shape)[None]


def _slice(eqn: Any, x: np.ndarray) -> np.ndarray:
    p = eqn.params
    strides = p.get("strides") or (1,) * len(p["start_indices"])
    idx = (slice(None),) + tuple(
        slice(s, l, st) for s, l, st in zip(p["start_indices"], p["limit_indices"], strides)
    )
    return x[idx]


def _dynamic_slice(eqn: Any, x: np.ndarray, *starts: np.ndarray) -> np.ndarray:
    sizes = eqn.params["slice_sizes"]
    lanes = max([x.shape[0]] + [s.shape[0] for s in starts])
    out = []
    for lane in range(lanes):
        xl = x[min(lane, x.shape[0] - 1)]
        idx = []
        for d, (s, size) in enumerate(zip(starts, sizes)):
            st = int(s.reshape(s.shape[0])[min(lane, s.shape[0] - 1)])
            st = min(max(st, 0), xl.shape[d] - size)
            idx.append(slice(st, st + size))
        out.append(xl[tuple(idx)])
    return np.stack(out)


def _concatenate(eqn: Any, *xs: np.ndarray) -> np.ndarray:
    lanes = max(x.shape[0] for x in xs)
    xs = tuple(np.broadcast_to(x, (lanes,) + x.shape[1:]) for x in xs)
    return np.concatenate(xs, axis=eqn.params["dimension"] + 1)


def _squeeze(eqn: Any, x: np.ndarray) -> np.ndarray:
    return np.squeeze(x, axis=_ax(eqn.params["dimensions"]))


def _transpose(eqn: Any, x: np.ndarray) -> np.ndarray:
    return np.transpose(x, (0,) + _ax(eqn.params["permutation"]))


def _reduce(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    return lambda eqn, x: fn(x, axis=_ax(eqn.params["axes"]))


def _arg(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    def rule(eqn: Any, x: np.ndarray) -> np.ndarray:
        (axis,) = eqn.params["axes"]
        return fn(x, axis=axis + 1).astype(np.dtype(eqn.params["index_dtype"]))

    return rule


def _shift_right_logical(eqn: Any, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    bits = a.dtype.itemsize * 8
    u = a.view(np.dtype(f"u{a.dtype.itemsize}")) if a.dtype.kind == "i" else a
    out = np.where(b >= bits, 0, u >> np.clip(b, 0, bits - 1).astype(u.dtype))
    return out.astype(u.dtype).view(a.dtype)


def _shift_right_arithmetic(eqn: Any, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    bits = a.dtype.itemsize * 8
    return a >> np.clip(b, 0, bits - 1).astype(a.dtype)


def _shift_left(eqn: Any, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    bits = a.dtype.itemsize * 8
    return np.where(b >= bits, 0, a << np.clip(b, 0, bits - 1).astype(a.dtype)).astype(a.dtype)


def _clamp(eqn: Any, lo: np.ndarray, x: np.ndarray, hi: np.ndarray) -> np.ndarray:
    return np.minimum(np.maximum(x, lo), hi)


def _integer_pow(eqn: Any, x: np.ndarray) -> np.ndarray:
    return np.power(x, eqn.params["y"])


def _round(eqn: Any, x: np.ndarray) -> np.ndarray:
    method = int(getattr(eqn.params.get("rounding_method"), "value", eqn.params.get("rounding_method", 0)))
    if method == 0:  # away from zero
        return np.sign(x) * np.floor(np.abs(x) + 0.5)
    return np.round(x)


def _binary(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[..., np.ndarray]:
    return lambda eqn, a, b: fn(a, b)


def _unary(fn: Callable[[np.ndarray], np.ndarray]) -> Callable[..., np.ndarray]:
    return lambda eqn, a: fn(a)


def _identity(eqn: Any, *xs: np.ndarray) -> Any:
    return list(xs) if eqn.primitive.multiple_results else xs[0]


NUMERIC: dict[str, Callable[..., Any]] = {
    "add": _binary(np.add),
    "sub": _binary(np.subtract),
    "mul": _binary(np.multiply),
    "div": _binary(_int_div),
    "rem": _binary(_int_rem),
    "max": _binary(np.maximum),
    "min": _binary(np.minimum),
    "pow": _binary(np.power),
    "and": _binary(np.bitwise_and),
    "or": _binary(np.bitwise_or),
    "xor": _binary(np.bitwise_xor),
    "eq": _binary(np.equal),
    "ne": _binary(np.not_equal),
    "lt": _binary(np.less),
    "le": _binary(np.less_equal),
    "gt": _binary(np.greater),
    "ge": _binary(np.greater_equal),
    "nextafter": _binary(np.nextafter),
    "atan2": _binary(np.arctan2),
    "shift_left": _shift_left,
    "shift_right_logical": _shift_right_logical,
    "shift_right_arithmetic": _shift_right_arithmetic,
    "neg": _unary(np.negative),
    "sign": _unary(np.sign),
    "abs": _unary(np.abs),
    "not": _unary(np.invert),
    "floor": _unary(np.floor),
    "ceil": _unary(np.ceil),
    "round": _round,
    "sqrt": _unary(np.sqrt),
    "exp": _unary(np.exp),
    "log": _unary(np.log),
    "population_count": _unary(lambda a: np.bitwise_count(a)),
    "integer_pow": _integer_pow,
    "select_n": _select_n,
    "clamp": _clamp,
    "convert_element_type": _convert,
    "broadcast_in_dim": _broadcast_in_dim,
    "reshape": _reshape,
    "squeeze": _squeeze,
    "transpose": _transpose,
    "iota": _iota,
    "slice": _slice,
    "dynamic_slice": _dynamic_slice,
    "concatenate": _concatenate,
    "reduce_sum": _reduce(np.sum),
    "reduce_max": _reduce(np.max),
    "reduce_min": _reduce(np.min),
    "reduce_prod": _reduce(np.prod),
    "reduce_and": _reduce(np.all),
    "reduce_or": _reduce(np.any),
    "argmax": _arg(np.argmax),
    "argmin": _arg(np.argmin),
    "copy": _identity,
    "copy_p": _identity,
    "multiple_of": _identity,
    "optimization_barrier": _identity,
    "pvary": _identity,
    "stop_gradient": _identity,
}
