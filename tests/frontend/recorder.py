"""Compare lowered programs with what the TPU interpreter actually does.

Run as a script in a fresh process (the host device count is fixed before jax
starts)::

    python tests/frontend/recorder.py --devices 4 kernel_a.py kernel_b.py::target

For every target it

1. lowers the target with the front end and resolves the program to
   per-core event sequences with concrete semaphore ids (the id of
   `SemRef(label, i)` is the base id its `AllocSem` got, counted per core
   from 2000, plus `i`; the barrier semaphore is the collective id);
2. runs the same `fn(*args)` in Pallas TPU interpret mode with the
   interpreter's semaphore, DMA and allocation callbacks wrapped so that
   every call is logged with its device, core, ids, targets and bytes;
3. compares the two, per core, and prints one JSON line per target
   (prefixed with a marker) with the verdict and the first difference.

Also importable: `resolve_program(program)` and `events_equal(a, b)`.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import threading
import traceback
from typing import Any

MARKER = "@@FRONTEND_RECORD@@ "
FIRST_SEM_ID = 2000


# --- the lowered side ---------------------------------------------------------


def resolve_program(program: Any) -> dict[str, Any]:
    """Per-core event lists with concrete ids, as the interpreter would log them.

    Returns {"cores": {"d,c": [events]}, "barrier_sems": {d: count}}.
    """
    from semcheck.model.ops import (
        BARRIER,
        AllocSem,
        DmaStart,
        GetBarrierSem,
        Read,
        Signal,
        Wait,
    )

    topo = program.topology
    ncores = topo.cores_per_device
    next_id = {g: FIRST_SEM_ID for g in range(topo.num_cores)}
    device_labels: dict[int, dict[str, int]] = collections.defaultdict(dict)
    events: dict[str, list[list[Any]]] = {}
    barrier_sems: dict[int, int] = collections.Counter()

    # Device-scope allocations happen on the device thread before the cores start.
    for d in range(topo.num_devices):
        for op in program.cores[topo.global_core(d, 0)]:
            if isinstance(op, AllocSem) and op.scope == "device":
                base = next_id[topo.global_core(d, 0)]
                for c in range(ncores):
                    next_id[topo.global_core(d, c)] += op.count
                device_labels[d][op.label] = base

    for g, ops in enumerate(program.cores):
        d, c = topo.device_of(g), topo.local_core_of(g)
        labels = dict(device_labels[d])
        out: list[list[Any]] = []
        if c == 0:
            for op in ops:
                if isinstance(op, AllocSem) and op.scope == "device":
                    out.append(["alloc_device", labels[op.label], op.count])

        def sid(ref: Any) -> int:
            if ref.label == BARRIER:
                return int(program.collective_id)
            return labels[ref.label] + ref.index

        for op in ops:
            if isinstance(op, AllocSem):
                if op.scope == "device":
                    continue
                base = next_id[g]
                next_id[g] += op.count
                labels[op.label] = base
                out.append(["alloc", base, op.count])
            elif isinstance(op, GetBarrierSem):
                barrier_sems[d] += 1
            elif isinstance(op, Signal):
                out.append([
                    "signal", sid(op.sem), op.inc,
                    d if op.device is None else op.device,
                    0 if op.core is None else op.core,
                ])
            elif isinstance(op, Wait):
                out.append(["wait" if op.kind == "semaphore" else "dma_wait", sid(op.sem), op.value])
            elif isinstance(op, DmaStart):
                out.append([
                    "dma_start", sid(op.dst_sem),
                    None if op.src_sem is None else sid(op.src_sem),
                    d if op.device is None else op.device,
                    c if op.core is None else op.core,
                    op.nbytes,
                ])
            elif isinstance(op, Read):
                out.append(["read", sid(op.sem)])
        events[f"{d},{c}"] = out
    return {"cores": events, "barrier_sems": {str(k): v for k, v in sorted(barrier_sems.items())}}


# --- the interpreter side -----------------------------------------------------


class Recorder:
    """Wraps the interpreter's callbacks; logs per (device, local core)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.start_lock = threading.Lock()
        self.events: dict[str, list[list[Any]]] = collections.defaultdict(list)
        self.barrier_sems: dict[int, int] = collections.Counter()
        self.dma_bytes: dict[int, int] = {}
        self.installed = False

    def reset(self) -> None:
        with self.lock:
            self.events = collections.defaultdict(list)
            self.barrier_sems = collections.Counter()
            self.dma_bytes = {}

    def log(self, device: Any, core: Any, event: list[Any]) -> None:
        with self.lock:
            self.events[f"{int(device)},{int(core)}"].append(event)

    def install(self) -> None:
        if self.installed:
            return
        from jax._src.pallas.mosaic.interpret import interpret_pallas_call as ipc

        rec = self
        orig_alloc = ipc._allocate_semaphores
        orig_signal = ipc.semaphore_signal
        orig_wait = ipc.semaphore_wait
        orig_dma_start = ipc.dma_start
        orig_dma_wait = ipc.dma_wait
        orig_barrier = ipc.get_barrier_semaphore
        base_dma = ipc.DMA

        def _int(x: Any) -> int | None:
            return None if x is None else int(x)

        def allocate_semaphores(token, device_id, local_core_id, shape, *a, **k):
            token, ids = orig_alloc(token, device_id, local_core_id, shape, *a, **k)
            flat = [int(x) for x in ids.reshape(-1)] or [None]
            count = len(ids.reshape(-1))
            if local_core_id is None:
                rec.log(device_id, 0, ["alloc_device", flat[0], count])
            else:
                rec.log(device_id, local_core_id, ["alloc", flat[0], count])
            return token, ids

        def semaphore_signal(token, device_id, local_core_id, sem_id, inc, target_device_id,
                             target_local_core_id, *a, **k):
            rec.log(device_id, local_core_id, [
                "signal", int(sem_id), int(inc),
                int(device_id) if target_device_id is None else int(target_device_id),
                0 if target_local_core_id is None else int(target_local_core_id),
            ])
            return orig_signal(token, device_id, local_core_id, sem_id, inc, target_device_id,
                               target_local_core_id, *a, **k)

        def semaphore_wait(token, device_id, local_core_id, sem_id, value, *a, **k):
            rec.log(device_id, local_core_id, ["wait", int(sem_id), int(value)])
            return orig_wait(token, device_id, local_core_id, sem_id, value, *a, **k)

        def dma_start(token, device_id, src_local_core_id, src_memory_space, src_id, src_transforms,
                      dst_memory_space, dst_id, dst_transforms, dst_sem_id, src_sem_id, dst_device_id,
                      dst_local_core_id=None, *a, **k):
            event = [
                "dma_start", int(dst_sem_id), _int(src_sem_id),
                int(device_id) if dst_device_id is None else int(dst_device_id),
                int(src_local_core_id) if dst_local_core_id is None else int(dst_local_core_id),
                None,
            ]
            with rec.start_lock:  # dma_start never blocks: the id counter read is exact
                dma_id = ipc.dma_id_counter.value
                event[5] = ("dma", dma_id)
                rec.log(device_id, src_local_core_id, event)
                return orig_dma_start(token, device_id, src_local_core_id, src_memory_space, src_id,
                                      src_transforms, dst_memory_space, dst_id, dst_transforms, dst_sem_id,
                                      src_sem_id, dst_device_id, dst_local_core_id, *a, **k)

        def dma_wait(token, device_id, local_core_id, sem_id, size, *a, **k):
            rec.log(device_id, local_core_id, ["dma_wait", int(sem_id), int(size)])
            return orig_dma_wait(token, device_id, local_core_id, sem_id, size, *a, **k)

        def get_barrier_semaphore(token, device_id, collective_id, *a, **k):
            with rec.lock:
                rec.barrier_sems[int(device_id)] += 1
            return orig_barrier(token, device_id, collective_id, *a, **k)

        class RecordingDMA(base_dma):
            def execute_read(self):
                super().execute_read()
                data = self.data
                if data is not None and self.id not in rec.dma_bytes:
                    rec.dma_bytes[self.id] = int(data.itemsize * data.size)

        # The callbacks keep their wrapped originals' names for jax's error messages.
        for fn, orig in ((allocate_semaphores, orig_alloc), (semaphore_signal, orig_signal),
                         (semaphore_wait, orig_wait), (dma_start, orig_dma_start),
                         (dma_wait, orig_dma_wait), (get_barrier_semaphore, orig_barrier)):
            fn.__name__ = orig.__name__
        ipc._allocate_semaphores = allocate_semaphores
        ipc.semaphore_signal = semaphore_signal
        ipc.semaphore_wait = semaphore_wait
        ipc.dma_start = dma_start
        ipc.dma_wait = dma_wait
        ipc.get_barrier_semaphore = get_barrier_semaphore
        ipc.DMA = RecordingDMA
        self.installed = True

    def finish(self) -> dict[str, Any]:
        cores = {}
        for key, evs in self.events.items():
            out = []
            for e in evs:
                if e[0] == "dma_start" and isinstance(e[5], tuple):
                    e = e[:5] + [self.dma_bytes.get(e[5][1])]
                out.append(e)
            cores[key] = out
        return {"cores": cores, "barrier_sems": {str(k): v for k, v in sorted(self.barrier_sems.items())}}


# --- comparison -----------------------------------------------------------------


def first_difference(lowered: dict[str, Any], recorded: dict[str, Any], *, prefix: bool = False) -> str | None:
    """None when equal; otherwise a description of the first mismatch.

    With `prefix=True` (the run hung or failed part-way) every core's
    recorded events must be a prefix of its lowered events.
    """
    keys = sorted(set(lowered["cores"]) | set(recorded["cores"]),
                  key=lambda k: tuple(int(x) for x in k.split(",")))
    for key in keys:
        a = lowered["cores"].get(key, [])
        b = recorded["cores"].get(key, [])
        for i, (x, y) in enumerate(zip(a, b)):
            if not _same_event(x, y):
                return f"core {key} event {i}: lowered {x} but the interpreter did {y}"
        if prefix:
            if len(b) > len(a):
                return f"core {key}: the interpreter did more than lowered: {b[len(a)]}"
            continue
        if len(a) != len(b):
            extra = a[len(b)] if len(a) > len(b) else b[len(a)]
            who = "lowered" if len(a) > len(b) else "interpreter"
            return f"core {key}: {len(a)} lowered events vs {len(b)} recorded; first extra ({who}): {extra}"
    if not prefix and lowered["barrier_sems"] != recorded["barrier_sems"]:
        return f"barrier semaphore uses differ: lowered {lowered['barrier_sems']} vs {recorded['barrier_sems']}"
    return None


def _same_event(lowered: list[Any], recorded: list[Any]) -> bool:
    """Equal events; a DMA whose read never ran (None bytes) matches any size."""
    if list(lowered) == list(recorded):
        return True
    return (
        lowered[0] == recorded[0] == "dma_start"
        and recorded[5] is None
        and list(lowered[:5]) == list(recorded[:5])
    )


# --- driver ----------------------------------------------------------------------


def _concrete(a: Any) -> Any:
    """Data for an abstract argument, placed with its sharding."""
    import jax
    import numpy as np

    if not isinstance(a, jax.ShapeDtypeStruct):
        return a
    x = np.arange(int(np.prod(a.shape)), dtype=np.float64).reshape(a.shape).astype(a.dtype)
    sharding = getattr(a, "sharding", None)
    return jax.device_put(x, sharding) if sharding is not None else x


def run_one(spec: str, devices: int, rec: Recorder, timeout: float | None = None) -> dict[str, Any]:
    import jax
    import numpy as np

    from semcheck.checker.frontend.concrete_inputs import trace_with_inputs
    from semcheck.checker.frontend.lower import lower_kernel
    from semcheck.checker.frontend.scalar_memory import NeedsFloatInputs
    from semcheck.checker.frontend.targets import load_targets

    result: dict[str, Any] = {"spec": spec, "devices": devices}
    targets = load_targets(spec)
    if len(targets) != 1:
        result.update(status="error", error=f"{len(targets)} targets; select one with ::name")
        return result
    t = targets[0]
    fn, args = t.build(devices)
    # concrete scalar operands, if args carry them, as the interpreter's modes compute them (ACC-27, ACC-37)
    calls, inputs = trace_with_inputs(fn, args, path=t.path, per_mode=True)
    lowered = {"cores": {}, "barrier_sems": {}}
    for k, call in enumerate(calls):
        try:
            prog = lower_kernel(call, cores=t.cores, inputs=inputs[k])
        except NeedsFloatInputs:  # ACC-41: the float inputs' values too, as `api.lower_target` computes them
            calls, inputs = trace_with_inputs(fn, args, path=t.path, per_mode=True, floats=True)
            prog = lower_kernel(call, cores=t.cores, inputs=inputs[k])
        res = resolve_program(prog)
        if k == 0:
            lowered = res
        else:  # several kernels: concatenate per core; barrier uses add up
            for key, evs in res["cores"].items():
                lowered["cores"].setdefault(key, []).extend(evs)
            for key, v in res["barrier_sems"].items():
                lowered["barrier_sems"][key] = lowered["barrier_sems"].get(key, 0) + v
    result["lowered_events"] = sum(len(v) for v in lowered["cores"].values())

    concrete = [_concrete(a) for a in args]
    rec.reset()
    if timeout is None:
        jax.block_until_ready(fn(*concrete))
        result["outcome"] = "completed"
    else:
        # A kernel may deadlock or fail inside the interpreter: what it did up
        # to then must still be a prefix of the lowered program.
        box: dict[str, Any] = {}

        def run() -> None:
            try:
                jax.block_until_ready(fn(*concrete))
                box["outcome"] = "completed"
            except BaseException as e:  # noqa: BLE001
                box["outcome"] = "error"
                box["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"

        th = threading.Thread(target=run, daemon=True)
        th.start()
        th.join(timeout)
        result["outcome"] = box.get("outcome", "hang")
        if "error" in box:
            result["run_error"] = box["error"]
    recorded = rec.finish()
    result["recorded_events"] = sum(len(v) for v in recorded["cores"].values())
    diff = first_difference(lowered, recorded, prefix=result["outcome"] != "completed")
    result["status"] = "match" if diff is None else "mismatch"
    if diff is not None:
        result["difference"] = diff
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--devices", type=int, required=True)
    parser.add_argument("--timeout", type=float, default=None,
                        help="stop waiting for a run after this many seconds and compare prefixes "
                             "(the process exits after the first run that does not finish)")
    parser.add_argument("specs", nargs="+")
    ns = parser.parse_args(argv)

    from semcheck.checker.frontend.targets import provision_devices

    provision_devices(ns.devices)
    rec = Recorder()
    rec.install()
    for spec in ns.specs:
        try:
            result = run_one(spec, ns.devices, rec, ns.timeout)
        except BaseException as e:  # noqa: BLE001 - reported as data
            result = {
                "spec": spec,
                "devices": ns.devices,
                "status": "error",
                "error": f"{type(e).__name__}: {e}",
                "traceback": traceback.format_exc(),
            }
            try:
                from jax._src.pallas.mosaic.interpret import interpret_pallas_call as ipc

                ipc.reset_tpu_interpret_mode_state()
            except Exception:
                pass
        sys.stdout.write(MARKER + json.dumps(result) + "\n")
        sys.stdout.flush()
        if result.get("outcome") == "hang":
            os._exit(0)  # interpreter threads are stuck for good; nothing else can run here
    return 0


if __name__ == "__main__":
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    sys.exit(main())
