"""Semaphore and DMA rules: the primitives that become IR ops (IR-1).

* the barrier semaphore (`GetBarrierSem`, SEM-2), signals (SEM-4, SIG-1),
  waits (SEM-5), reads (SEM-6);
* DMA start and wait: the sibling module `dma_rules` (a mixin over this one);
* `run_scoped` allocations of semaphores and buffers (SEM-1, scope `core`);
* the operands they share: which semaphore a (transformed) ref denotes
  (`sem_indices`) and which device a device id names (`logical_device`).

Kernel loads and stores of buffers are the sibling module `accesses`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax._src.pallas import primitives as pallas_prims
from jax._src.pallas.mosaic import core as mosaic_core
from jax._src.pallas.mosaic import primitives as tpu_prims
from jax._src.state import types as state_types
from jax._src.state.indexing import NDIndexer, Slice

from semcheck.checker.frontend.errors import KernelRaised, Unsupported
from semcheck.checker.frontend.evaluator import Evaluator, append_to_each
from semcheck.checker.frontend.regions import flatten_ref, foreign_transform, refuse_multi_ref
from semcheck.checker.frontend.sync_primitives import SYNC_OR_SCOPE, primitives
from semcheck.checker.frontend.trace import KernelCall, is_semaphore_dtype, memory_space_name, semaphore_type
from semcheck.checker.frontend.values import BufRef, SemArray, Unknown
from semcheck.model.ops import (
    BARRIER,
    AllocBuffer,
    AllocSem,
    FreeBuffer,
    GetBarrierSem,
    Op,
    Read,
    SemType,
    Signal,
    Wait,
)

# Ref transforms that change nothing about which semaphore or elements a view names.
IDENTITY_TRANSFORMS: tuple[type, ...] = (state_types.MemorySpaceCastTransform, mosaic_core.AccessAssumptionTransform)

# The primitives whose presence in a sub-jaxpr matters to the program (the front end's one table).
SYNC_PRIMS = primitives(SYNC_OR_SCOPE)


class SyncRules(Evaluator):
    """The semaphore, DMA and `run_scoped` rules."""

    def __init__(self, call: KernelCall, num_devices: int, cores: int) -> None:
        super().__init__(call, num_devices, cores)
        self.collective_id = call.collective_id
        self.label_counter = 0  # makes every run_scoped allocation label unique
        # how reports name each run_scoped allocation site (`site#k`, `buf@...#k`): by the body's parameter
        self.scoped_names: dict[str, str] = {}
        self.rules.update({
            tpu_prims.get_barrier_semaphore_p: self._get_barrier_semaphore,
            pallas_prims.semaphore_signal_p: self._semaphore_signal,
            pallas_prims.semaphore_wait_p: self._semaphore_wait,
            pallas_prims.semaphore_read_p: self._semaphore_read,
            pallas_prims.run_scoped_p: self._run_scoped,
        })
        self.sem_prims.update(SYNC_PRIMS)

    # --- semaphore operands ------------------------------------------------------

    def refuse_selected(self, ref: Any, eqn: Any, what: str) -> None:
        """`Unsupported` for a ref chosen with `pl.select_ref` (a `SelectTransform`).

        Mosaic lowers a DMA through a selected ref, but jax's TPU interpreter
        does not run one (its DMA callbacks convert the transforms to integers
        and fail on the tuple of refs; its `dma_wait` cannot type the view), so
        the interpreter modes have no semantics to follow: unknown, with the line.
        """
        if refuse_multi_ref(ref):
            raise Unsupported(
                eqn.primitive.name,
                f"{what} is chosen with pl.select_ref (a SelectTransform): jax's TPU interpreter "
                "cannot run a DMA through a selected ref, so semcheck does not lower it "
                "(choose between two copies with pl.when or lax.cond instead)",
                self.loc(eqn),
            )
        if isinstance(ref, state_types.TransformedRef):
            _, chain = flatten_ref(ref)
            self.refuse_foreign(chain, eqn, what)

    def refuse_foreign(self, chain: Sequence[Any], eqn: Any, what: str) -> None:
        """`Unsupported` for a ref transform semcheck does not know (`regions.foreign_transform`)."""
        t = foreign_transform(chain)
        if t is not None:
            raise Unsupported(eqn.primitive.name, f"{what} is viewed through a {type(t).__name__}, a ref "
                              "transform semcheck does not know (it may name other memory)", self.loc(eqn))

    def sem_indices(self, ref: Any, transforms: Sequence[Any], eqn: Any, what: str) -> tuple[str, list[int]]:
        """The allocation label and per-lane flat index of a scalar semaphore view."""
        self.refuse_selected(ref, eqn, what)
        if any(isinstance(t, state_types.MultiRefTransform) for t in transforms if t is not None):
            self.refuse_selected(state_types.TransformedRef((), tuple(transforms)), eqn, what)
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
        self.refuse_foreign(transforms, eqn, what)
        for t in transforms:
            if t is None or isinstance(t, IDENTITY_TRANSFORMS):
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

    @staticmethod
    def sem_type(ref: Any) -> SemType:
        """The type of the allocation a semaphore ref (or view) denotes (DMA-6); after `sem_indices` accepted it."""
        base = ref.ref if isinstance(ref, state_types.TransformedRef) else ref
        return base.sem_type if isinstance(base, SemArray) else "dma"

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
        if id_type == pallas_prims.DeviceIdType.LOGICAL:
            arr = self.known(device_id, eqn, "the device id")
            return self.lane_ints(arr, eqn, "the device id"), None
        if id_type != pallas_prims.DeviceIdType.MESH:
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
            from semcheck.checker.frontend.collective_ids import lowering_error

            refused = lowering_error(eqn.params.get("tag"))
            if refused is not None:  # PRG-123: not a program jax compiles for a TPU, nor one its interpreter runs
                raise KernelRaised(refused, stage="lower", loc=self.loc(eqn))
            # PRG-125: jax picks the id on a TPU; this call's own lowering keeps no id, which is what the
            # interpreter runs (ERR-6: it fails here), and the program composition gives the TPU's id
        op = GetBarrierSem(self.loc(eqn))
        bodies = self.bodies
        append_to_each(bodies if mask is None else [bodies[d] for d in self.active(mask)], op)
        return [SemArray(BARRIER, (), "barrier")]

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
        if idx.count(idx[0]) == len(idx) and vals.count(vals[0]) == len(vals):  # one wait for every device
            key = (idx[0], vals[0])
            op = cache.get(key)
            if op is None:
                op = cache[key] = Wait(self.semref(label, key[0]), key[1], "semaphore", loc)
            append_to_each(bodies if mask is None else [bodies[d] for d in self.active(mask)], op)
            return []
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
        # LAUNCH-3: the interpreter cannot compile the read for the CPU; the program carries that failure
        # (`interpreter_lowering`) and models the hardware read (SEM-6)
        bodies = self.bodies
        for d in self.active(mask):
            bodies[d].append(Read(self.semref(label, idx[d]), loc))
        return [Unknown("pl.semaphore_read (a count that depends on timing)", loc)]

    def _run_scoped(self, eqn: Any, invals: list[Any], mask: Any) -> list[Any]:
        loc = self.loc(eqn)
        if eqn.params.get("collective_axes"):
            raise Unsupported("run_scoped", "run_scoped with collective_axes (the interpreter does not support it)",
                              loc)
        jaxpr = eqn.params["jaxpr"]
        site = self.site(eqn, loc)
        lanes = self.active(mask)
        bodies = self.bodies
        allocs: list[Any] = []
        ended: list[str] = []  # every allocation's label: its scope ends with the body (BUF-9; SEM-10)
        params = self.call.interpret_params
        allow_hbm = bool(getattr(params, "allow_hbm_allocation_in_run_scoped", False))
        params_of = _body_params(jaxpr)
        for k, v in enumerate(jaxpr.invars):
            aval = v.aval
            ms = getattr(aval, "memory_space", None)
            self.label_counter += 1
            if ms is mosaic_core.MemorySpace.SEMAPHORE or is_semaphore_dtype(getattr(aval, "dtype", None)):
                count = math.prod(int(s) for s in aval.shape)
                label = f"{site}#{k}/{self.label_counter}"
                if k < len(params_of):
                    self.scoped_names[f"{site}#{k}"] = params_of[k]
                op: Op = AllocSem(label, count, f"{site}#{k}", "core", loc)
                allocs.append(SemArray(label, tuple(int(s) for s in aval.shape), semaphore_type(aval.dtype)))
                ended.append(label)
            else:
                ms_name = memory_space_name(ms)
                if ms_name == "hbm" and not allow_hbm:
                    raise Unsupported("run_scoped", "allocating HBM in run_scoped (the interpreter rejects it)", loc)
                label = f"buf@{site[len('scoped@'):]}#{k}/{self.label_counter}"
                if k < len(params_of):
                    self.scoped_names[label.rsplit("/", 1)[0]] = params_of[k]
                nbytes = _nbytes(aval)
                op = AllocBuffer(label, nbytes, ms_name, "core", loc)
                self.memory.allocate(label, aval.shape, aval.dtype, ms_name)  # tracked from its first use (ACC-43)
                allocs.append(BufRef(label))
                ended.append(label)
            for d in lanes:
                bodies[d].append(op)
        outs = self.eval_sub(eqn, jaxpr, [*invals, *allocs], mask, closed=False)
        for label in ended:
            op = FreeBuffer(label, loc)
            for d in lanes:
                bodies[d].append(op)
        return outs


def _nbytes(aval: Any) -> int:
    try:
        return math.prod(int(s) for s in aval.shape) * np.dtype(aval.dtype).itemsize
    except TypeError:
        return 0


_JAX_DIR = os.path.dirname(jax.__file__)


def _body_params(jaxpr: Any) -> tuple[str, ...]:
    """The parameter names of a run_scoped body, one per allocation, as the user wrote them (jax's
    trace keeps them); () when jax's own code wrote the body (emit_pipeline's scratch, say) or the
    names do not line up with the allocations."""
    info = getattr(jaxpr, "debug_info", None)
    names = tuple(getattr(info, "arg_names", None) or ())
    src = str(getattr(info, "func_src_info", "") or "")
    if len(names) != len(jaxpr.invars) or not all(names) or _JAX_DIR + os.sep in src \
            or any(n.startswith("<") for n in names):
        return ()
    return names
