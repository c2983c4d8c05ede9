"""Trace a target function and find the TPU kernels in it.

`trace_kernels(fn, args)` runs `jax.make_jaxpr` (tracing only: nothing is
compiled or executed) and walks the resulting jaxpr, descending into every
sub-jaxpr (jit, shard_map, cond branches, loops, custom derivatives, ...).
Each `pallas_call`, and each `core_map` over a `TensorCoreMesh` (which
appears as an `mpmd_map` equation), becomes a `KernelCall`: everything the
interpreter reads when it launches the kernel, in the front end's own small
dataclasses.

Imports of jax and of the front end's jax-bound modules sit inside the functions that
need them: the CLI sets `JAX_PLATFORMS` and the fake device count before jax is first
imported (`targets.provision_devices`), and jax reads them only then.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from semcheck.checker.frontend.collective_id_site import collective_id, collective_id_loc
from semcheck.checker.frontend.errors import KernelRaised, NotTpuPallasCall, Unsupported
from semcheck.checker.frontend.source_names import eqn_loc, frame_loc, jaxpr_arg_names, make_loc  # noqa: F401 - callers import them from here
from semcheck.checker.frontend.targets import entry_loc, user_loc
from semcheck.model.ops import NO_LOC, Loc, SemType


@dataclasses.dataclass(frozen=True)
class MeshInfo:
    """The device mesh a kernel runs on: the manual axes of its shard_map(s)."""

    axis_names: tuple[str, ...] = ()
    axis_sizes: tuple[int, ...] = ()
    physical_devices: int = 1  # devices of the enclosing mesh (>= num_devices)

    @property
    def num_devices(self) -> int:
        return math.prod(self.axis_sizes)

    @property
    def shape(self) -> dict[str, int]:
        return dict(zip(self.axis_names, self.axis_sizes))


@dataclasses.dataclass(frozen=True)
class Operand:
    """One kernel operand (index operand, input, output or scratch)."""

    role: str  # "index" | "input" | "output" | "scratch"
    name: str
    kind: str  # "buffer" | "semaphore"
    memory_space: str  # "hbm", "vmem", "smem", "semaphore_mem", ...
    shape: tuple[int, ...]
    dtype: str
    block_shape: tuple[int, ...] | None = None  # inputs/outputs: the block's ref shape
    sem_type: SemType | None = None  # semaphore operands: the allocation's type (DMA-6)
    # inputs/outputs: the memory space the array itself is typed with (`out_shape=pltpu.VMEM(...)`, or an input
    # aliased to such an output), "" for an array of the default (HBM) space (GRID-5)
    array_space: str = ""

    @property
    def count(self) -> int:
        """Number of semaphores (semaphore operands)."""
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        shape = self.block_shape if self.block_shape is not None else self.shape
        try:
            itemsize = np.dtype(self.dtype).itemsize
        except TypeError:
            itemsize = 4
        return math.prod(shape) * itemsize


@dataclasses.dataclass(frozen=True)
class KernelCall:
    """A TPU kernel launch found in the traced program."""

    kind: str  # "pallas_call" | "core_map"
    name: str
    index: int  # position among the kernels of the traced function
    loc: Loc
    jaxpr: Any  # the kernel body (a jax core.Jaxpr)
    # None at a dynamic bound (`dynamic_grid_dims`) until `dynamic_grid.resolve_grid` gives its value
    grid: tuple[int | None, ...]
    grid_names: tuple[Any, ...] | None
    vmapped_dims: tuple[int, ...]
    num_index_operands: int
    num_inputs: int
    num_outputs: int
    operands: tuple[Operand, ...]  # in kernel-argument order
    input_output_aliases: tuple[tuple[int, int], ...]
    collective_id: int | None
    dimension_semantics: tuple[str, ...] | None  # "parallel" / "arbitrary" ...
    cores_per_device: int
    core_axis_name: str | None  # the TensorCoreMesh axis (core_map)
    mesh: MeshInfo
    interpret_params: Any  # InterpretParams or None (compiled, not interpreted)
    compiler_params: Any
    block_mappings: tuple[Any, ...] = ()
    grid_mapping: Any = None
    # Grid dimensions whose bound is a run-time value (passed before the operands at the launch).
    dynamic_grid_dims: tuple[int, ...] = ()
    collective_id_loc: Loc | None = None  # the `collective_id=` argument's line, where found alone
    # What jax compiles with it: the position of the traced function's top-level equation it is in (a jitted
    # function is one equation; otherwise each top-level call is compiled and run on its own, in order).
    unit: int = 0
    # ERR-36: (name, memory space) of each launch argument typed with a space the interpreter refuses
    refused_spaces: tuple[tuple[str, str], ...] = ()

    @property
    def dma_mode(self) -> str | None:
        p = self.interpret_params
        return None if p is None else str(p.dma_execution_mode)

    @property
    def random_seed(self) -> int | None:
        p = self.interpret_params
        return None if p is None else p.random_seed

    @property
    def tpu_only(self) -> bool:
        """GRID-5: whether the interpreter never runs this call: it takes or returns a semaphore array, and a
        semaphore array comes only from a call's output, on which the interpreter fails at launch (LAUNCH-2,
        PRG-107), so nothing of that call's computation runs there."""
        return any(o.kind == "semaphore" and o.role in ("input", "output") for o in self.operands)

    def sees_array(self, op: Operand) -> bool:
        """Whether the kernel's ref of input/output `op` is the launch's array itself, with no block buffer and
        no grid copies: a raw `pl.ANY`/HBM operand (LAUNCH-1), or on a TPU an array typed with a memory space
        (GRID-5: Mosaic places it there and hands it to the kernel as it is)."""
        return op.kind != "semaphore" and (op.memory_space == "hbm" or (self.tpu_only and bool(op.array_space)))

    @property
    def scratch(self) -> tuple[Operand, ...]:
        return tuple(o for o in self.operands if o.role == "scratch")

    @property
    def semaphore_scratch(self) -> tuple[Operand, ...]:
        return tuple(o for o in self.scratch if o.kind == "semaphore")


# --- tracing ------------------------------------------------------------------


def make_jaxpr(fn: Callable[..., Any], args: Sequence[Any], *, path: str = "") -> Any:
    """`jax.make_jaxpr(fn)(*args)`, with kernel failures reported as `KernelRaised`."""
    import jax  # lazy: see the module docstring

    try:
        return jax.make_jaxpr(fn)(*args)
    except Exception as e:
        # ERR-23: the kernel line that raised (the innermost user frame), and where its code was entered
        loc = user_loc(e, path) if path else None
        related = entry_loc(e, path) if path else None
        where = "" if loc is None else f" at {loc.file}:{loc.line}" + (
            "" if related is None else f" (called from {related.file}:{related.line})")
        raise KernelRaised(
            f"kernel raised while tracing{where}: {type(e).__name__}: {_first_line(e)}",
            stage="trace",
            cause=e,
            path=path or None,
            loc=loc,
            related=related,
        ) from e


def trace_kernels(fn: Callable[..., Any], args: Sequence[Any], *, path: str = "") -> list[KernelCall]:
    """Trace `fn(*args)` and return its TPU kernels in program order."""
    closed = make_jaxpr(fn, args, path=path)
    kernels = find_kernels(closed.jaxpr)
    if not kernels:
        raise NotTpuPallasCall(
            "no TPU pallas_call or core_map found in the traced function", path=path or None
        )
    return kernels


def find_kernels(jaxpr: Any) -> list[KernelCall]:
    """All kernel launches in `jaxpr` (recursively), in program order."""
    found: list[KernelCall] = []
    _walk(jaxpr, axes={}, physical=1, found=found)
    return found


def _walk(jaxpr: Any, *, axes: dict[str, int], physical: int, found: list[KernelCall],
          unit: int | None = None) -> None:
    for k, eqn in enumerate(jaxpr.eqns):
        u = k if unit is None else unit
        name = eqn.primitive.name
        if name == "pallas_call":
            found.append(dataclasses.replace(from_pallas_call(eqn, axes, physical, len(found)), unit=u))
            continue
        if name == "mpmd_map":
            found.append(dataclasses.replace(from_mpmd_map(eqn, axes, physical, len(found)), unit=u))
            continue
        sub_axes, sub_physical = axes, physical
        if name == "shard_map":
            # a Mesh or an AbstractMesh (RUN-14): only its axis sizes and manual axes are read
            mesh = eqn.params["mesh"]
            manual = set(eqn.params.get("newly_manual_axes", ())) | set(
                getattr(mesh, "manual_axes", ()) or ()
            )
            sub_axes = dict(axes)
            for k, v in mesh.shape.items():
                if k in manual:
                    sub_axes[k] = int(v)
            sub_physical = max(physical, int(math.prod(mesh.shape.values())))
        for sub in sub_jaxprs(eqn.params):
            _walk(sub, axes=sub_axes, physical=sub_physical, found=found, unit=u)


def sub_jaxprs(params: dict[str, Any]) -> Iterator[Any]:
    from jax._src import core as jax_core  # lazy: see the module docstring

    jaxpr_types = jaxpr_classes(jax_core)
    for value in params.values():
        values = value if isinstance(value, (tuple, list)) else (value,)
        for v in values:
            if isinstance(v, jaxpr_types):
                yield v.jaxpr


def jaxpr_classes(jax_core: Any) -> tuple[type, ...]:
    """The jaxpr classes of this jax (older releases have a separate ClosedJaxpr)."""
    types_ = [jax_core.Jaxpr]
    closed = getattr(jax_core, "ClosedJaxpr", None)
    if isinstance(closed, type) and closed is not jax_core.Jaxpr:
        types_.append(closed)
    return tuple(types_)


# --- pallas_call ----------------------------------------------------------------


def from_pallas_call(eqn: Any, axes: dict[str, int], physical: int, index: int) -> KernelCall:
    from jax._src.pallas.mosaic import core as mosaic_core  # lazy: see the module docstring

    params = eqn.params
    loc = eqn_loc(eqn, _definition_loc(params["jaxpr"]))
    compiler_params = params.get("compiler_params")
    if compiler_params is not None and not isinstance(compiler_params, mosaic_core.CompilerParams):
        raise NotTpuPallasCall(
            f"pallas_call at {loc} has {type(compiler_params).__name__}, not TPU (Mosaic) "
            "compiler params",
            loc=loc,
        )
    from semcheck.checker.frontend.closed_refs import closed_names, discharged, discharged_order
    from semcheck.checker.frontend.typed_operands import refused_spaces

    names_of = params["jaxpr"]
    if getattr(names_of, "constvars", None):  # a kernel closing over refs: the call jax runs (LAUNCH-4)
        params = discharged(eqn, loc, axes).params
    interpret = _tpu_interpret_params(params.get("interpret"), loc)
    gm = params["grid_mapping"]
    dynamic = tuple(d for d, g in enumerate(gm.grid) if not isinstance(g, (int, np.integer)))
    grid = tuple(None if d in dynamic else int(g) for d, g in enumerate(gm.grid))
    jaxpr = params["jaxpr"]
    arg_names = jaxpr_arg_names(jaxpr) if jaxpr is names_of else closed_names(names_of, eqn.params["grid_mapping"])
    operands: list[Operand] = []
    invars = list(jaxpr.invars)
    nidx, nin, nout = gm.num_index_operands, gm.num_inputs, gm.num_outputs
    for i, var in enumerate(invars):
        aval = var.aval
        nm = arg_names[i] if i < len(arg_names) else ""
        if i < nidx:
            operands.append(make_operand("index", nm or f"index{i}", aval, "smem"))
        elif i < nidx + nin + nout:
            j = i - nidx
            bm = gm.block_mappings[j]
            role = "input" if j < nin else "output"
            ms = block_memory_space(bm)
            operands.append(
                make_operand(
                    role,
                    nm or f"{role}{j if j < nin else j - nin}",
                    aval,
                    ms,
                    array_shape=tuple(bm.array_aval.shape),
                    block_shape=tuple(getattr(aval, "shape", ())),
                )
            )
        else:
            operands.append(
                make_operand("scratch", nm or f"scratch{i - nidx - nin - nout}", aval,
                         memory_space_name(getattr(aval, "memory_space", None)))
            )
    operands = _array_spaces(operands, gm, params.get("input_output_aliases", ()))
    mesh_obj = params.get("mesh")
    cores, core_axis = _cores(interpret, mesh_obj, loc)
    dims = _dimension_semantics(compiler_params, len(grid))
    if isinstance(mesh_obj, mosaic_core.TensorCoreMesh) and cores > 1:
        dims = ("parallel",)
    return KernelCall(
        kind="pallas_call",
        name=str(params.get("name") or _debug_name(jaxpr) or "pallas_call"),
        index=index,
        loc=loc,
        jaxpr=jaxpr,
        grid=grid,
        grid_names=tuple(gm.grid_names) if gm.grid_names is not None else None,
        vmapped_dims=tuple(gm.vmapped_dims),
        num_index_operands=nidx,
        num_inputs=nin,
        num_outputs=nout,
        operands=tuple(operands),
        input_output_aliases=tuple(tuple(p) for p in params.get("input_output_aliases", ())),
        collective_id=collective_id(compiler_params),
        collective_id_loc=collective_id_loc(eqn, compiler_params, _definition_loc(names_of)),
        dimension_semantics=dims,
        cores_per_device=cores,
        core_axis_name=core_axis,
        mesh=MeshInfo(tuple(axes), tuple(axes.values()), physical),
        interpret_params=interpret,
        compiler_params=compiler_params,
        block_mappings=tuple(gm.block_mappings),
        grid_mapping=gm,
        dynamic_grid_dims=dynamic,
        refused_spaces=refused_spaces([v.aval for v in discharged_order(eqn, eqn.invars)],
                                      [f"grid bound {d}" for d in dynamic] + [o.name for o in operands]),
    )


def from_mpmd_map(eqn: Any, axes: dict[str, int], physical: int, index: int) -> KernelCall:
    """A `core_map` (an `mpmd_map` of one mesh), as the interpreter's fallback sees it."""
    from jax._src.pallas.mosaic import core as mosaic_core  # lazy: see the module docstring

    params = eqn.params
    meshes = params["meshes"]
    jaxprs = params["jaxprs"]
    loc = eqn_loc(eqn, _definition_loc(jaxprs[0]) if len(jaxprs) == 1 else NO_LOC)
    if len(jaxprs) != 1 or len(meshes) != 1 or params.get("external_meshes"):
        raise Unsupported("mpmd_map", "only a core_map over one mesh is supported", loc)
    (mesh,) = meshes
    (jaxpr,) = jaxprs
    if getattr(jaxpr, "consts", None):  # jax makes a kernel's constants operands first (LAUNCH-4, LAUNCH-6)
        raise Unsupported("core_map", "the kernel jaxpr has constants", loc)
    from semcheck.checker.frontend.closed_refs import refuse_closed_values
    from semcheck.checker.frontend.typed_operands import refused_spaces

    refuse_closed_values(jaxpr, loc)
    refuse_sparse_core(mesh, loc)
    if not isinstance(mesh, mosaic_core.TensorCoreMesh):
        raise NotTpuPallasCall(
            f"core_map at {loc} runs on a {type(mesh).__name__}, not a TensorCoreMesh", loc=loc
        )
    compiler_params = params.get("compiler_params")
    if compiler_params is not None and not isinstance(compiler_params, mosaic_core.CompilerParams):
        raise NotTpuPallasCall(
            f"core_map at {loc} has {type(compiler_params).__name__}, not TPU compiler params",
            loc=loc,
        )
    interpret = _tpu_interpret_params(params.get("interpret"), loc)
    nin = len(eqn.invars)
    nout = len(params["out_avals"])
    arg_names = jaxpr_arg_names(jaxpr)
    operands: list[Operand] = []
    for i, var in enumerate(jaxpr.invars):
        aval = var.aval
        nm = arg_names[i] if i < len(arg_names) else ""
        if i < nin + nout:
            role = "input" if i < nin else "output"
            outer = eqn.invars[i].aval if i < nin else params["out_avals"][i - nin]
            operands.append(core_map_operand(role, nm or f"{role}{i if i < nin else i - nin}", aval, outer, mesh))
        else:
            operands.append(
                make_operand("scratch", nm or f"scratch{i - nin - nout}", aval,
                         memory_space_name(getattr(aval, "memory_space", None)))
            )
    cores = int(mesh.num_cores)
    dims = ("parallel",)
    return KernelCall(
        kind="core_map",
        name=str(params.get("name") or _debug_name(jaxpr) or "core_map"),
        index=index,
        loc=loc,
        jaxpr=jaxpr,
        grid=(cores,),
        grid_names=(mesh.axis_name,),
        vmapped_dims=(),
        num_index_operands=0,
        num_inputs=nin,
        num_outputs=nout,
        operands=tuple(operands),
        input_output_aliases=tuple(sorted(dict(params.get("input_output_aliases", {})).items())),
        collective_id=collective_id(compiler_params),
        collective_id_loc=collective_id_loc(eqn, compiler_params, _definition_loc(jaxpr)),
        dimension_semantics=dims,
        cores_per_device=cores,
        core_axis_name=str(mesh.axis_name),
        mesh=MeshInfo(tuple(axes), tuple(axes.values()), physical),
        interpret_params=interpret,
        compiler_params=compiler_params,
        refused_spaces=refused_spaces([v.aval for v in eqn.invars], [o.name for o in operands]),
    )


def core_map_operand(role: str, name: str, aval: Any, outer: Any, mesh: Any) -> Operand:
    """An input or output of a `core_map` (LAUNCH-6): the kernel sees its array whole, in the memory space
    the array is typed with, else the mesh's default."""
    from jax._src import core as jax_core  # lazy: see the module docstring

    ms = getattr(outer, "memory_space", None)
    if ms is None or isinstance(ms, jax_core.MemorySpace):
        ms = mesh.default_memory_space
    return make_operand(role, name, aval, memory_space_name(ms), block_shape=tuple(getattr(aval, "shape", ())))


# --- helpers --------------------------------------------------------------------


def _array_spaces(operands: list[Operand], gm: Any, aliases: Any) -> list[Operand]:
    """GRID-5: the memory space each input's and output's array is typed with. An output's is its
    `out_shape`'s (`pltpu.VMEM(...)`, `pltpu.SMEM(...)`); an input aliased to such an output takes it, as
    jax's TPU lowering resolves the custom call's operand spaces (`_resolve_memory_spaces` of
    `pallas/mosaic/pallas_call_registration.py`)."""
    from jax._src.pallas.mosaic import core as mosaic_core  # lazy: see the module docstring

    typed = {mosaic_core.MemorySpace.VMEM: "vmem", mosaic_core.MemorySpace.SMEM: "smem"}
    nidx = gm.num_index_operands
    spaces: dict[int, str] = {}
    for j, bm in enumerate(gm.block_mappings):
        ms = getattr(bm.array_aval, "memory_space", None)
        if isinstance(ms, mosaic_core.MemorySpace) and ms in typed:
            spaces[j] = typed[ms]
    for i, o in aliases:
        o = gm.num_inputs + int(o)
        if o in spaces:
            spaces.setdefault(int(i) - nidx, spaces[o])
    if not spaces:
        return operands
    return [dataclasses.replace(op, array_space=spaces[k - nidx]) if k - nidx in spaces and op.kind == "buffer"
            else op for k, op in enumerate(operands)]


def block_memory_space(bm: Any) -> str:
    """The memory space of a block mapping's kernel-side ref: jax 0.12.0 names that aval
    `transformed_block_aval`, 0.12.1 `block_aval` (the older `block_aval` is the untransformed one)."""
    aval = getattr(bm, "transformed_block_aval", None)
    return memory_space_name((aval if aval is not None else bm.block_aval).memory_space)


def memory_space_name(ms: Any) -> str:
    """A memory space as the interpreter classifies it ("any" counts as HBM)."""
    if ms is None:
        return "vmem"
    value = getattr(ms, "value", None)
    name = str(value if value is not None else ms).lower()
    if name in ("any", "hbm"):
        return "hbm"
    if name in ("default",):
        return "vmem"
    return name


def make_operand(role: str, name: str, aval: Any, ms: str, *, array_shape: tuple[int, ...] | None = None,
             block_shape: tuple[int, ...] | None = None) -> Operand:
    shape = tuple(int(d) for d in getattr(aval, "shape", ()))
    dtype = getattr(aval, "dtype", None)
    is_sem = ms == "semaphore_mem" or is_semaphore_dtype(dtype)
    return Operand(
        role=role,
        name=name,
        kind="semaphore" if is_sem else "buffer",
        memory_space="semaphore_mem" if is_sem else ms,
        shape=array_shape if array_shape is not None else shape,
        dtype=str(dtype),
        block_shape=block_shape,
        sem_type=semaphore_type(dtype) if is_sem else None,
    )


def semaphore_type(dtype: Any) -> SemType:
    """The `pltpu.SemaphoreType` of a semaphore dtype, as the IR names it (DMA-6).

    A dtype that is none of the three (an interpreter's int16 view) counts
    bytes like a DMA semaphore, as the interpreter does.
    """
    try:
        from jax._src.pallas import core as pallas_core  # lazy: see the module docstring
        from jax._src.pallas.mosaic import core as tpu_core  # lazy: see the module docstring
        import jax.numpy as jnp  # lazy: see the module docstring

        if jnp.issubdtype(dtype, tpu_core.dma_semaphore):
            return "dma"
        if jnp.issubdtype(dtype, pallas_core.barrier_semaphore):
            return "barrier"
        if jnp.issubdtype(dtype, pallas_core.semaphore):
            return "regular"
    except Exception:
        pass
    return "dma"


def is_semaphore_dtype(dtype: Any) -> bool:
    if dtype is None:
        return False
    try:
        from jax._src.pallas import core as pallas_core  # lazy: see the module docstring
        import jax.numpy as jnp  # lazy: see the module docstring

        return any(
            jnp.issubdtype(dtype, t)
            for t in (pallas_core.semaphore, pallas_core.barrier_semaphore)
        )
    except Exception:
        return "sem" in str(dtype)


def _tpu_interpret_params(interpret: Any, loc: Loc) -> Any:
    from jax._src.pallas.mosaic.interpret.params import InterpretParams  # lazy: see the module docstring

    if isinstance(interpret, InterpretParams):
        return interpret
    if interpret is None or interpret is False:
        return None
    if interpret is True:
        return None  # the generic HLO interpreter: lowered as the TPU would run it
    raise NotTpuPallasCall(
        f"kernel at {loc} is interpreted with {type(interpret).__name__}, not TPU InterpretParams",
        loc=loc,
    )


def refuse_sparse_core(mesh: Any, loc: Loc) -> None:
    """ERR-26: a kernel on a SparseCore mesh is a TPU kernel semcheck does not model, so every
    property is unknown with the mesh and the line; it is not bad input (the user's file is fine)."""
    from jax._src.pallas.mosaic import sc_core  # lazy: see the module docstring

    if isinstance(mesh, (sc_core.VectorSubcoreMesh, sc_core.ScalarSubcoreMesh)):
        raise Unsupported(
            "SparseCore kernel",
            f"it runs on a {type(mesh).__name__}; semcheck models TensorCore kernels only (their DMAs and "
            "semaphores, specs/semantics/), not a SparseCore's subcores (specs/deciding/report.md ERR-26)",
            loc,
        )


def _cores(interpret: Any, mesh: Any, loc: Loc) -> tuple[int, str | None]:
    from jax._src.pallas.mosaic import core as mosaic_core  # lazy: see the module docstring

    if isinstance(mesh, mosaic_core.TensorCoreMesh):
        return int(mesh.num_cores), str(mesh.axis_name)
    refuse_sparse_core(mesh, loc)
    if mesh is not None:
        raise NotTpuPallasCall(f"kernel at {loc} runs on a {type(mesh).__name__}", loc=loc)
    if interpret is not None:
        return int(interpret.num_cores_or_threads), None
    return 1, None


def _dimension_semantics(compiler_params: Any, ndims: int) -> tuple[str, ...] | None:
    ds = getattr(compiler_params, "dimension_semantics", None)
    if ds is None:
        return None
    out = []
    for d in ds:
        name = getattr(d, "value", d)
        out.append(str(name).lower())
    return tuple(out)


def _debug_name(jaxpr: Any) -> str:
    info = getattr(jaxpr, "debug_info", None)
    src = getattr(info, "func_src_info", None) if info is not None else None
    return str(src).split(" ")[0] if src else ""


def _definition_loc(jaxpr: Any) -> Loc:
    """Where the kernel function is defined (from the jaxpr's debug info)."""
    info = getattr(jaxpr, "debug_info", None)
    src = str(getattr(info, "func_src_info", "") or "")
    if " at " not in src:
        return NO_LOC
    where = src.rsplit(" at ", 1)[1]
    file, _, line = where.rpartition(":")
    if not file or not line.isdigit():
        return NO_LOC
    return make_loc(file, int(line))


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
