"""Run manager conformance vectors against the model or against jax.

    python specs/conformance/runner.py --impl model            # every vector
    python specs/conformance/runner.py --impl jax vectors/x.json

A vector (format in README.md) is a configuration, a sequence of operations
at the level of the shared-memory manager's API, the result or error each
must give, and the state the manager must end in. This file holds the two
implementations behind one interface, `make_impl(name, config)`:

* "model": the reference model's manager (`semcheck.model.manager`, whose
  rules are those of specs/semantics/kernels.md and specs/semantics/buffers.md, RACE-1 included);
* "jax": jax's own `SharedMemory` from Pallas TPU interpret mode, driven the
  way the interpreter drives it.

Both answer `apply(op, args) -> {"result": ...} | {"error": {...}}` and
`snapshot() -> dict`, in the JSON encoding the vectors use, so the
differential tests compare them directly.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np

from semcheck.model import manager
from semcheck.model.errors import Violation

FORMAT = "semcheck-manager-conformance/1"
HERE = Path(__file__).resolve().parent
VECTOR_DIR = HERE / "vectors"
WAIT_TIMEOUT = 2.0  # seconds a wait may take before the jax runner calls it blocked

BLOCKED = {"type": "Blocked", "message": "wait would block"}

DEFAULT_CONFIG = {
    "num_devices": 1,
    "cores_per_device": 1,
    "dma_execution_mode": "on_wait",
    "detect_races": False,
    "out_of_bounds_reads": "raise",
    "uninitialized_memory": "nan",
}


# --- JSON encodings ------------------------------------------------------------------


def enc_scalar(x: Any) -> Any:
    if isinstance(x, float):
        if math.isnan(x):
            return "nan"
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
    return x


def dec_scalar(x: Any) -> Any:
    return {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}.get(x, x) if isinstance(x, str) else x


def enc_array(a: np.ndarray | None) -> dict | None:
    if a is None:
        return None
    a = np.asarray(a)
    return {"dtype": a.dtype.name, "shape": list(a.shape), "data": [enc_scalar(x) for x in a.ravel().tolist()]}


def dec_array(d: dict | None) -> np.ndarray | None:
    if d is None:
        return None
    data = [dec_scalar(x) for x in d["data"]]
    return np.array(data, dtype=np.dtype(d["dtype"])).reshape(tuple(d["shape"]))


def enc_range(rnge: tuple) -> list:
    return [
        {"start": r.start, "stop": r.stop, "step": r.step} if isinstance(r, slice) else r for r in rnge
    ]


def dec_range(items: list) -> tuple:
    return tuple(slice(r["start"], r["stop"], r["step"]) if isinstance(r, dict) else int(r) for r in items)


def dec_indexer(items: list) -> tuple:
    """A kernel indexer (`{"start", "size", "stride"}` or int per dimension) as a range."""
    return tuple(
        slice(r["start"], r["start"] + r["size"] * r["stride"], r["stride"]) if isinstance(r, dict) else int(r)
        for r in items
    )


def error(kind: str, message: str) -> dict:
    return {"error": {"type": kind, "message": message}}


def from_exception(e: BaseException) -> dict:
    return error(type(e).__name__, str(e))


def ok(result: Any = None) -> dict:
    return {"result": result}


def _handle(table: str, sem_id: int) -> list:
    return [table, int(sem_id)]


# --- the model -------------------------------------------------------------------------


class ModelImpl:
    """The reference model's manager (`semcheck.model.manager`): decode, call the rule, encode."""

    def __init__(self, config: dict) -> None:
        self.cfg = {**DEFAULT_CONFIG, **config}
        self.config = manager.Config(**self.cfg)
        self.state = manager.Manager()

    @property
    def buffers(self):
        return self.state.buffers

    def apply(self, op: str, args: dict) -> dict:
        fn = getattr(self, "op_" + op, None)
        if fn is None:
            raise ValueError(f"unknown operation {op!r}")
        return fn(**args)

    def _update(self, out, encode=lambda result: None) -> dict:
        """A rule's outcome: a Violation as an error; else keep the new state and encode the result."""
        if isinstance(out, Violation):
            return _violation(out)
        if isinstance(out, tuple):
            self.state, result = out
            return ok(encode(result))
        self.state = out
        return ok()

    # semaphores ---------------------------------------------------------------------------

    def op_allocate_semaphores(self, key: int, n: int) -> dict:
        return self._update(manager.allocate_semaphores(self.state, key, n), int)

    def op_guarantee_semaphore_with_fixed_id(self, id: int) -> dict:
        return self._update(manager.guarantee_fixed_id(self.state, id))

    def op_get_semaphores_and_increment_clock(self, ids: list, core: int) -> dict:
        keys = manager.lookup(self.state, ids)
        if isinstance(keys, Violation):
            return _violation(keys)
        return ok([None if k is None else _handle(*k) for k in keys])

    def op_signal(self, sem: list, core: int, inc: int, src_core: int = 0) -> dict:
        return self._update(manager.signal(self.state, _key(sem), core, inc))

    def op_read(self, sem: list, core: int) -> dict:
        return ok(manager.read(self.state, _key(sem), core))

    def op_wait(self, sem: list, core: int, value: int) -> dict:
        out = manager.wait(self.config, self.state, _key(sem), core, value)
        if out is None:
            return {"error": BLOCKED}
        self.state, failure = out
        return ok() if failure is None else _violation(failure)

    def op_dma_start(self, src_core: int, dst_core: int, nbytes: int, src_sem_id: int | None, dst_sem_id: int) -> dict:
        return self._update(manager.dma_start(self.config, self.state, src_core, dst_core, nbytes, src_sem_id, dst_sem_id), int)

    def op_enqueue_task(self, sem: list, core: int, dma: int, half: str) -> dict:
        return self._update(manager.enqueue_task(self.state, _key(sem), core, (dma, half)))

    def op_append_semaphore_task(self, id: int, core: int, dma: int, half: str) -> dict:
        return self._update(manager.append_semaphore_task(self.state, id, core, (dma, half)))

    def op_get_sempahores_with_nonzero_count(self, device: int) -> dict:
        found = manager.nonzero(self.config, self.state, device)
        return ok(sorted([key[0], key[1], core, value] for key, core, value in found))

    # buffers ------------------------------------------------------------------------------

    def op_get_next_buffer_id(self, device: int, core: int) -> dict:
        return self._update(manager.next_buffer_id(self.state, device, core), int)

    def op_allocate_buffer(self, key: list, ref_count: int, value: dict, logical_shape: list | None = None) -> dict:
        shape = None if logical_shape is None else tuple(logical_shape)
        return self._update(manager.allocate_buffer(self.state, tuple(key), ref_count, dec_array(value), shape))

    def op_deallocate_buffer(self, key: list) -> dict:
        return self._update(manager.deallocate_buffer(self.state, tuple(key)))

    def op_get_buffer_content(self, key: list, range: list, thread: list) -> dict:
        out = manager.get_buffer_content(self.state, tuple(key), dec_range(range))
        return _violation(out) if isinstance(out, Violation) else ok(_access(out, "value"))

    def op_store_buffer_content(self, key: list, range: list, value: dict, thread: list) -> dict:
        out = manager.store_buffer_content(self.state, tuple(key), dec_range(range), dec_array(value))
        return self._update(out, lambda acc: _access(acc, "in_bounds"))

    def op_swap_buffer_content(self, key: list, range: list, value: dict, mask: dict | None, thread: list) -> dict:
        out = manager.swap_buffer_content(self.state, tuple(key), dec_range(range), dec_array(value), dec_array(mask))
        return self._update(out, lambda acc: _access(acc, "value"))

    def op_kernel_allocate_buffer(
        self, device: int, core: int | None, memory_space: str, value: dict, padded_shape: list | None = None
    ) -> dict:
        padded = None if padded_shape is None else tuple(padded_shape)
        self.state, handed = manager.kernel_allocate_buffer(
            self.config, self.state, device, core, memory_space, dec_array(value), padded
        )
        return _violation(handed) if isinstance(handed, Violation) else ok(handed)

    def op_kernel_deallocate_buffer(self, device: int, core: int, memory_space: str, id: int) -> dict:
        return self._update(manager.kernel_deallocate_buffer(self.state, device, core, memory_space, id))

    def op_kernel_get(self, device: int, core: int, memory_space: str, id: int, indexer: list) -> dict:
        out = manager.kernel_get(self.config, self.state, device, core, memory_space, id, dec_indexer(indexer))
        return _violation(out) if isinstance(out, Violation) else ok(enc_array(out))

    def op_kernel_store(self, device: int, core: int, memory_space: str, id: int, indexer: list, value: dict) -> dict:
        out = manager.kernel_store(self.state, device, core, memory_space, id, dec_indexer(indexer), dec_array(value))
        return self._update(out)

    def op_kernel_swap(
        self, device: int, core: int, memory_space: str, id: int, indexer: list, value: dict, mask: dict | None
    ) -> dict:
        out = manager.kernel_swap(
            self.state, device, core, memory_space, id, dec_indexer(indexer), dec_array(value), dec_array(mask)
        )
        return self._update(out, enc_array)

    # state --------------------------------------------------------------------------------

    def can_wait(self, sem: list, core: int, value: int) -> bool:
        """Whether `wait` returns (possibly after running queued tasks) instead of blocking."""
        return manager.wait(self.config, self.state, _key(sem), core, value) is not None

    def snapshot(self) -> dict:
        st = self.state
        sems = [("internal", i) for i in st.tables.internal] + [("fixed", i) for i in st.tables.fixed]
        counts = sorted(
            [t, i, [int(st.counts.get(((t, i), c), 0)) for c in range(self.config.num_cores)]] for t, i in sems
        )
        tasks = sorted(
            [key[0], key[1], core, [[d, h] for d, h in q]] for (key, core), q in st.queues.items() if q
        )
        return {
            "semaphores": counts,
            "next_semaphore_id": sorted([k, v] for k, v in st.tables.next_id.items()),
            "tasks": tasks,
            "dma_phases": [d.phase for d in st.dmas],
            "buffers": sorted(
                ([list(k), b.ref_count, list(b.logical_shape), enc_array(b.content)] for k, b in st.buffers.mem.items()),
                key=lambda e: repr(e[0]),
            ),
            "next_buffer_id": sorted([list(k), v] for k, v in st.buffers.next_id.items()),
            "deallocated_bytes": st.buffers.deallocated_bytes,
        }


def _violation(v) -> dict:
    return error(v.python_type, v.message)


def _key(handle: list) -> tuple:
    table, sem_id = handle
    return (table, int(sem_id))


def _access(acc, field: str) -> dict:
    """A manager access result: the data read (`value`) or whether a store was accepted (`in_bounds`)."""
    first = {"value": enc_array(acc.value)} if field == "value" else {"in_bounds": acc.in_bounds}
    return {**first, "shape": list(acc.shape), "dtype": acc.dtype.name}


# --- jax ---------------------------------------------------------------------------------


class _SignalDma:
    """The semaphore side of one DMA, as jax's interpreter runs it: a read half that
    signals the send semaphore on the source core and a write half that signals
    the receive semaphore on the destination core, each at most once."""

    def __init__(self, ident, src_sem, dst_sem, src_core, dst_core, nbytes, clock) -> None:
        self.ident, self.src_sem, self.dst_sem = ident, src_sem, dst_sem
        self.src_core, self.dst_core, self.nbytes, self.clock = src_core, dst_core, nbytes, clock
        self.phase = 0
        self.lock = threading.Lock()

    def read_half(self) -> None:
        with self.lock:
            if self.phase != 0:
                return
            if self.src_sem is not None:
                self.src_sem.signal(self.nbytes, self.src_core, self.clock)
            self.phase = 1

    def read_write(self) -> None:
        self.read_half()
        with self.lock:
            if self.phase == 2:
                return
            self.dst_sem.signal(self.nbytes, self.dst_core, self.clock)
            self.phase = 2


class _Task:
    """A callable queued in jax's manager (what `append_semaphore_task` receives)."""

    def __init__(self, dma: _SignalDma, half: str) -> None:
        self.dma, self.half = dma, half

    def __call__(self) -> None:
        (self.dma.read_half if self.half == "read" else self.dma.read_write)()


def jax_modules():
    """jax's interpret-mode manager and interpreter modules (imported on first use)."""
    from jax._src.pallas.mosaic.interpret import interpret_pallas_call as ipc
    from jax._src.pallas.mosaic.interpret import shared_memory as sm_mod

    return sm_mod, ipc


def new_shared_memory(config: dict, barrier=None, clean_up_barrier=None):
    """A fresh jax SharedMemory for `config`, as the interpreter creates it."""
    sm_mod, _ = jax_modules()
    cfg = {**DEFAULT_CONFIG, **config}
    nd, cpd = cfg["num_devices"], cfg["cores_per_device"]
    holder: dict = {}

    def sync_all_clocks() -> None:
        sm = holder["sm"]
        sm.update_clocks([(d, c) for d in range(nd) for c in range(cpd)])

    sm = sm_mod.SharedMemory(
        num_devices=nd,
        num_cores_per_device=cpd,
        out_of_bounds_reads=cfg["out_of_bounds_reads"],
        dma_execution_mode=cfg["dma_execution_mode"],
        uninitialized_memory=cfg["uninitialized_memory"],
        detect_races=cfg["detect_races"],
        vector_clock_size=2 * nd * cpd,
        barrier=barrier or threading.Barrier(nd, action=sync_all_clocks),
        clean_up_barrier=clean_up_barrier or threading.Barrier(nd),
    )
    holder["sm"] = sm
    return sm


@contextlib.contextmanager
def interpreter_bound(sm, races=None, dma_ids=None):
    """Make `sm` the interpreter's current shared memory (its callbacks read a module global)."""
    _, ipc = jax_modules()
    from jax._src.pallas.mosaic.interpret import utils as iutils
    from jax._src.pallas.mosaic.interpret.race_detection_state import RaceDetectionState

    saved = (ipc._shared_memory, ipc.races, ipc.dma_id_counter)
    ipc._shared_memory = sm
    ipc.races = races if races is not None else RaceDetectionState(on_race="raise")
    ipc.dma_id_counter = dma_ids if dma_ids is not None else iutils.Counter(100)
    try:
        yield ipc
    finally:
        ipc._shared_memory, ipc.races, ipc.dma_id_counter = saved


def memory_space_index(name: str) -> int:
    _, ipc = jax_modules()
    for i, n in ipc.TPU_MEMORY_SPACE_NAMES.items():
        if n == name:
            return i
    raise ValueError(f"no memory space {name!r}")


def indexer(items: list):
    """A transform pytree the interpreter's callbacks accept for the kernel indexer `items`.

    Bounds are not validated (as for a dynamic index); the reference shape is
    not used by the callbacks, only its length must match.
    """
    from jax._src.state import indexing

    idx = tuple(
        indexing.Slice(r["start"], r["size"], r["stride"]) if isinstance(r, dict) else int(r) for r in items
    )
    return (indexing.NDIndexer(idx, (1,) * len(idx), (), validate=False),)


class JaxImpl:
    """jax's SharedMemory, driven through its methods (and, for kernel_* operations,
    through the interpreter's own callbacks with this manager made current)."""

    def __init__(self, config: dict) -> None:
        from jax._src.pallas.mosaic.interpret.race_detection_state import RaceDetectionState

        self.cfg = {**DEFAULT_CONFIG, **config}
        self.sm = new_shared_memory(self.cfg)
        self.dmas: list[_SignalDma] = []
        self.races = RaceDetectionState(on_race="raise")

    def _table_of(self, s) -> str:
        if self.sm.sem.get(s.id) is s:
            return "internal"
        if self.sm.fixed_id_sem.get(s.id) is s:
            return "fixed"
        raise AssertionError(f"semaphore object {s.id} is in neither table")

    def _sem(self, handle: list):
        table, sem_id = handle
        return (self.sm.sem if table == "internal" else self.sm.fixed_id_sem)[int(sem_id)]

    def _clock(self, core: int):
        if not self.sm.detect_races:
            return None
        return self.sm.incr_clock(self.sm.global_core_id_to_thread(core))

    def apply(self, op: str, args: dict) -> dict:
        fn = getattr(self, "op_" + op, None)
        if fn is None:
            raise ValueError(f"unknown operation {op!r}")
        try:
            return fn(**args)
        except Exception as e:  # every error is part of the observable behaviour
            return from_exception(e)

    def op_allocate_semaphores(self, key: int, n: int) -> dict:
        return ok(int(self.sm.allocate_semaphores(key, n)))

    def op_guarantee_semaphore_with_fixed_id(self, id: int) -> dict:
        self.sm.guarantee_semaphore_with_fixed_id(id)
        return ok()

    def op_get_semaphores_and_increment_clock(self, ids: list, core: int) -> dict:
        sems, _ = self.sm.get_semaphores_and_increment_clock(ids, core)
        return ok([None if s is None else _handle(self._table_of(s), s.id) for s in sems])

    def op_signal(self, sem: list, core: int, inc: int, src_core: int = 0) -> dict:
        self._sem(sem).signal(inc, core, self._clock(src_core))
        return ok()

    def op_read(self, sem: list, core: int) -> dict:
        return ok(int(self._sem(sem).read(core)))

    def op_wait(self, sem: list, core: int, value: int) -> dict:
        s = self._sem(sem)
        box: dict = {}

        def run() -> None:
            try:
                s.wait(value, core)
                box["done"] = True
            except Exception as e:
                box["error"] = e

        t = threading.Thread(target=run, daemon=True)
        t.start()
        t.join(WAIT_TIMEOUT)
        if t.is_alive():
            self.sm.set_failed(RuntimeError("wait blocked"), top_level=False)
            t.join(5)
            return {"error": BLOCKED}
        if "error" in box:
            return from_exception(box["error"])
        return ok()

    def op_dma_start(self, src_core: int, dst_core: int, nbytes: int, src_sem_id: int | None, dst_sem_id: int) -> dict:
        (src, dst), clock = self.sm.get_semaphores_and_increment_clock((src_sem_id, dst_sem_id), src_core)
        d = _SignalDma(len(self.dmas), src, dst, src_core, dst_core, nbytes, clock)
        self.dmas.append(d)
        if self.sm.dma_execution_mode == "eager":
            d.read_write()
            return ok(d.ident)
        if src_sem_id is not None:
            self.sm.append_semaphore_task(src_sem_id, src_core, _Task(d, "read"))
        self.sm.append_semaphore_task(dst_sem_id, dst_core, _Task(d, "read_write"))
        return ok(d.ident)

    def op_enqueue_task(self, sem: list, core: int, dma: int, half: str) -> dict:
        self._sem(sem).enqueue_task(_Task(self.dmas[dma], half), core)
        return ok()

    def op_append_semaphore_task(self, id: int, core: int, dma: int, half: str) -> dict:
        self.sm.append_semaphore_task(id, core, _Task(self.dmas[dma], half))
        return ok()

    def op_get_sempahores_with_nonzero_count(self, device: int) -> dict:
        found = self.sm.get_sempahores_with_nonzero_count(device)
        return ok(sorted([self._table_of(s), int(s.id), int(c), int(s.count_by_core[c])] for s, c in found))

    def op_get_next_buffer_id(self, device: int, core: int) -> dict:
        return ok(int(self.sm.get_next_buffer_id((device, core))))

    def op_allocate_buffer(self, key: list, ref_count: int, value: dict, logical_shape: list | None = None) -> dict:
        shape = None if logical_shape is None else tuple(logical_shape)
        self.sm.allocate_buffer(tuple(key), ref_count, dec_array(value), logical_shape=shape)
        return ok()

    def op_deallocate_buffer(self, key: list) -> dict:
        self.sm.deallocate_buffer(tuple(key))
        return ok()

    def op_get_buffer_content(self, key: list, range: list, thread: list) -> dict:
        value, (shape, dtype), _ = self.sm.get_buffer_content(tuple(key), dec_range(range), tuple(thread))
        return ok({"value": enc_array(value), "shape": list(shape), "dtype": np.dtype(dtype).name})

    def op_store_buffer_content(self, key: list, range: list, value: dict, thread: list) -> dict:
        in_bounds, (shape, dtype), _ = self.sm.store_buffer_content(
            tuple(key), dec_range(range), dec_array(value), tuple(thread)
        )
        return ok({"in_bounds": bool(in_bounds), "shape": list(shape), "dtype": np.dtype(dtype).name})

    def op_swap_buffer_content(self, key: list, range: list, value: dict, mask: dict | None, thread: list) -> dict:
        old, (shape, dtype), _ = self.sm.swap_buffer_content(
            tuple(key), dec_range(range), dec_array(value), dec_array(mask), tuple(thread)
        )
        return ok({"value": enc_array(old), "shape": list(shape), "dtype": np.dtype(dtype).name})

    def op_kernel_allocate_buffer(
        self, device: int, core: int | None, memory_space: str, value: dict, padded_shape: list | None = None
    ) -> dict:
        with interpreter_bound(self.sm, self.races) as ipc:
            _, handed = ipc._allocate_buffer.__wrapped__(
                None,
                device,
                core,
                memory_space_index(memory_space),
                dec_array(value),
                padded_shape=None if padded_shape is None else tuple(padded_shape),
            )
        return ok(int(handed))

    def op_kernel_deallocate_buffer(self, device: int, core: int, memory_space: str, id: int) -> dict:
        with interpreter_bound(self.sm, self.races) as ipc:
            ipc._deallocate_buffer.__wrapped__(None, device, core, memory_space_index(memory_space), id)
        return ok()

    def op_kernel_get(self, device: int, core: int, memory_space: str, id: int, indexer: list) -> dict:
        with interpreter_bound(self.sm, self.races) as ipc:
            _, value = ipc.get.__wrapped__(
                None, device, core, memory_space_index(memory_space), id, _indexer(indexer)
            )
        return ok(enc_array(np.asarray(value)))

    def op_kernel_store(self, device: int, core: int, memory_space: str, id: int, indexer: list, value: dict) -> dict:
        with interpreter_bound(self.sm, self.races) as ipc:
            ipc.store.__wrapped__(
                None, device, core, memory_space_index(memory_space), id, _indexer(indexer), dec_array(value)
            )
        return ok()

    def op_kernel_swap(
        self, device: int, core: int, memory_space: str, id: int, indexer: list, value: dict, mask: dict | None
    ) -> dict:
        with interpreter_bound(self.sm, self.races) as ipc:
            _, old = ipc.swap.__wrapped__(
                None,
                device,
                core,
                memory_space_index(memory_space),
                id,
                _indexer(indexer),
                dec_array(value),
                dec_array(mask),
            )
        return ok(enc_array(np.asarray(old)))

    def snapshot(self) -> dict:
        sm = self.sm
        sems = [("internal", i, s) for i, s in sm.sem.items()] + [("fixed", i, s) for i, s in sm.fixed_id_sem.items()]
        counts = sorted([t, int(i), [int(x) for x in s.count_by_core]] for t, i, s in sems)
        tasks = sorted(
            [t, int(i), core, [[task.dma.ident, task.half] for task in q]]
            for t, i, s in sems
            for core, q in enumerate(s.tasks)
            if q
        )
        return {
            "semaphores": counts,
            "next_semaphore_id": sorted([k, int(v)] for k, v in dict(sm.next_semaphore_id).items()),
            "tasks": tasks,
            "dma_phases": [d.phase for d in self.dmas],
            "buffers": sorted(
                (
                    [list(k), int(b.ref_count), list(b.logical_shape), enc_array(b.content)]
                    for k, b in sm.mem.items()
                ),
                key=lambda e: repr(e[0]),
            ),
            "next_buffer_id": sorted([list(k), int(v)] for k, v in dict(sm.next_buffer_id).items()),
            "deallocated_bytes": int(sm.deallocated_bytes),
        }


_indexer = indexer


def make_impl(name: str, config: dict):
    if name == "model":
        return ModelImpl(config)
    if name == "jax":
        return JaxImpl(config)
    raise ValueError(f"unknown implementation {name!r} (model | jax)")


# --- running vectors ---------------------------------------------------------------------


def run_vector(vector: dict, impl_name: str) -> list[str]:
    """Run one vector; return the list of mismatches (empty when it conforms)."""
    if vector.get("format") != FORMAT:
        return [f"unknown format {vector.get('format')!r}"]
    impl = make_impl(impl_name, vector["config"])
    problems: list[str] = []
    for i, step in enumerate(vector["steps"]):
        got = impl.apply(step["op"], step["args"])
        if got != step["expect"]:
            problems.append(f"step {i} {step['op']}: expected {step['expect']}, got {got}")
            break
    if not problems and "final" in vector:
        snap = impl.snapshot()
        for field, want in vector["final"].items():
            if snap.get(field) != want:
                problems.append(f"final {field}: expected {want}, got {snap.get(field)}")
    return problems


def load_vectors(paths: list[str] | None = None) -> list[tuple[Path, dict]]:
    files = [Path(p) for p in paths] if paths else sorted(VECTOR_DIR.glob("*.json"))
    return [(f, json.loads(f.read_text())) for f in files]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--impl", choices=("model", "jax"), required=True)
    ap.add_argument("vectors", nargs="*", help="vector files (default: every file in vectors/)")
    ap.add_argument("-q", "--quiet", action="store_true")
    args = ap.parse_args(argv)
    failed = 0
    vectors = load_vectors(args.vectors)
    for path, vector in vectors:
        problems = run_vector(vector, args.impl)
        if problems:
            failed += 1
            print(f"FAIL {path.name}")
            for p in problems:
                print(f"  {p}")
        elif not args.quiet:
            print(f"ok   {path.name}")
    print(f"{len(vectors) - failed}/{len(vectors)} vectors conform ({args.impl})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
