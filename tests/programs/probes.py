"""Probes: small experiments that back the rules of specs/semantics/calls.md (PRG-*).

Each probe runs in a fresh subprocess (the number of fake CPU devices is fixed before jax is
imported, and a failed interpreter run leaves threads behind) and prints one JSON line behind a
marker.  make_ground_truth.py records their results in ground_truth.json (section "probes");
test_ground_truth.py checks the record and, marked slow, re-runs them.

    python tests/programs/probes.py collective_ids            # one probe, printed
    python tests/programs/probes.py failure_then_next --devices 4 --dma-mode on_wait

Probes:

* collective_ids: lowers small programs for TPU (on CPU, nothing runs) under each value of
  `jax_pallas_auto_assign_collective_ids` and reads the `collective_id` of every Mosaic custom
  call from the lowered text (PRG-5).
* manager_per_call: counts the interpreter's SharedMemory objects and logs, per device, when it
  enters a call (shared-memory initialisation) and when it reaches the call's clean-up barrier,
  with device 1 held back before that barrier (PRG-10).
* failure_then_next: a call that fails (a collective id equal to an internal semaphore id), then
  further calls of other jitted functions, a program of two calls, a plain XLA computation;
  what each raises, where, and how many devices started each call (PRG-11).
* semaphore_output_program: a start/done program whose start kernel returns a DMA semaphore
  (PRG-12).
* barrier_without_collective_id: get_barrier_semaphore in a kernel without collective_id, then a
  correct call (PRG-13).
* race_detector_per_call: with jax's race detector on (eager), a call whose write-back DMA is never
  waited (a race the detector reports) followed by a race-free call in the same program: how many
  race messages were logged, and what the detector's `races_found` flag says afterwards (PRG-14).
* collective_ids_cond: as collective_ids, for conds on a replicated flag around barrier kernels
  without ids: which ids the kernels of both branches get, and in what order (PRG-146).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

MARKER = "@@SEMCHECK_PROGRAM_PROBE@@ "
PROBES = ("collective_ids", "manager_per_call", "failure_then_next", "semaphore_output_program",
          "barrier_without_collective_id", "race_detector_per_call", "collective_ids_cond")
# The probes that run kernels in the interpreter (the others only lower or trace).
INTERPRETING = ("manager_per_call", "failure_then_next", "barrier_without_collective_id")
# The interpreter's error for a collective id that is also an internal semaphore id (ERR-1).
COLLISION = "occurs as both fixed-id and internal"


# --------------------------------------------------------------------------------------------
# child side: the probes themselves
# --------------------------------------------------------------------------------------------


def _setup(devices: int):
    import jax  # noqa: F401 - imported after XLA_FLAGS is set
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = jax.make_mesh((devices,), ("x",))
    return jax, jnp, pl, pltpu, NamedSharding, P, mesh


def _outcome(fn, *args) -> dict[str, Any]:
    """Runs fn(*args) to completion; what it raised, if anything, and from where."""
    import jax
    import numpy as np

    try:
        out = jax.block_until_ready(fn(*args))
        return {"outcome": "completed", "first_value": float(np.asarray(out).ravel()[0])}
    except Exception as e:  # noqa: BLE001 - the exception is the observation
        tb = "".join(traceback.format_exception(e))
        frames = re.findall(r'File "[^"]*/jax/(_src/[\w/]+\.py)", line \d+, in (\w+)', tb)
        return {
            "outcome": "error",
            "error_type": type(e).__name__,
            "innermost": _innermost_line(tb),
            # raised while jax fetched the previous computation's ordered-effect token
            "raised_at_token_input": any(f in ("get_token_input", "_token_shard_arg")
                                         for _, f in frames),
            "collision_message": COLLISION in str(e),
        }


def _innermost_line(tb: str) -> str:
    lines = [ln.strip() for ln in tb.splitlines()
             if re.match(r"^\s*[\w.]*(Error|Exception)\b", ln)]
    return lines[-1][:200] if lines else ""


def collective_id_programs(devices: int) -> dict[str, Any]:
    """The programs probe `collective_ids` lowers, by name (each a function of one array)."""
    jax, jnp, pl, pltpu, NamedSharding, P, mesh = _setup(devices)
    import functools

    def barrier_kernel(x_ref, o_ref, *, k, tag):
        b = pltpu.get_barrier_semaphore(tag) if tag is not None else pltpu.get_barrier_semaphore()
        right = jax.lax.rem(jax.lax.axis_index("x") + 1, devices)
        pl.semaphore_signal(b, k, device_id=(right,))
        pl.semaphore_wait(b, k)
        o_ref[...] = x_ref[...] + k  # k makes distinct kernels (distinct modules)

    def plain_kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1

    def remote_kernel(x_ref, o_ref, send, recv):
        right = jax.lax.rem(jax.lax.axis_index("x") + 1, devices)
        c = pltpu.make_async_remote_copy(x_ref, o_ref, send, recv, device_id=(right,))
        c.start()
        c.wait()

    shape = jax.ShapeDtypeStruct((8, 128), jnp.float32)

    def barrier_call(k, cid=None, tag=None, skip=False):
        return pl.pallas_call(
            functools.partial(barrier_kernel, k=k, tag=tag), out_shape=shape,
            compiler_params=pltpu.CompilerParams(collective_id=cid, skip_device_barrier=skip))

    def plain_call():
        return pl.pallas_call(plain_kernel, out_shape=shape)

    def remote_call(cid=None):
        return pl.pallas_call(
            remote_kernel, out_shape=shape, in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY),
            scratch_shapes=[pltpu.SemaphoreType.DMA] * 2,
            compiler_params=pltpu.CompilerParams(collective_id=cid))

    def chain(*calls):
        def f(x):
            for c in calls:
                x = c(x)
            return x
        return f

    return {
        # in program order: A, A, B (A and B differ only in the count they signal)
        "A_A_B_no_ids": chain(barrier_call(1), barrier_call(1), barrier_call(2)),
        "auto_then_manual_0": chain(barrier_call(1), barrier_call(3, cid=0)),
        "two_kernels_one_tag": chain(barrier_call(1, tag="t"), barrier_call(2, tag="t")),
        "same_kernel_skip_device_barrier_differs": chain(barrier_call(1),
                                                        barrier_call(1, skip=True)),
        "plain_kernel": chain(plain_call()),
        "remote_copy_without_barrier": chain(remote_call()),
        "remote_copy_without_barrier_with_id_0": chain(remote_call(cid=0)),
        "25_distinct_kernels": chain(*[barrier_call(k) for k in range(1, 26)]),
        "26_distinct_kernels": chain(*[barrier_call(k) for k in range(1, 27)]),
    }


def probe_collective_ids(devices: int, dma_mode: str) -> dict[str, Any]:
    jax, jnp, pl, pltpu, NamedSharding, P, mesh = _setup(devices)
    del dma_mode
    programs = collective_id_programs(devices)
    x = jax.ShapeDtypeStruct((8 * devices, 128), jnp.float32, sharding=NamedSharding(mesh, P("x")))
    result: dict[str, Any] = {}
    for mode in ("no", "yes", "override"):
        jax.config.update("jax_pallas_auto_assign_collective_ids", mode)
        for name, f in programs.items():
            fn = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=P("x"), out_specs=P("x"),
                                       check_vma=False))
            try:
                text = fn.trace(x).lower(lowering_platforms=("tpu",)).as_text()
                result[f"{mode}/{name}"] = {
                    # \22 is a quote inside the custom call's backend_config string
                    "collective_ids": [int(i) for i in re.findall(r"collective_id\\22: (\d+)", text)],
                    "has_communication": re.findall(r"has_communication\\22: (\w+)", text),
                    "skip_device_barrier": re.findall(r"skip_device_barrier\\22: (\w+)", text),
                }
            except Exception as e:  # noqa: BLE001
                result[f"{mode}/{name}"] = {"error_type": type(e).__name__,
                                            "error": str(e).splitlines()[0][:160]}
    return result


def collective_id_cond_programs(devices: int) -> dict[str, tuple[Any, tuple[int, int, int, int]]]:
    """The programs probe `collective_ids_cond` lowers (PRG-146), by name: each a function of (x, f) with a
    `lax.cond` on the replicated f around barrier kernels, and its shape (calls before the cond, in branch 0,
    in branch 1, after it)."""
    jax, jnp, pl, pltpu, NamedSharding, P, mesh = _setup(devices)
    import functools

    def barrier_kernel(x_ref, o_ref, *, k):
        b = pltpu.get_barrier_semaphore()
        right = jax.lax.rem(jax.lax.axis_index("x") + 1, devices)
        pl.semaphore_signal(b, k, device_id=(right,))
        pl.semaphore_wait(b, k)
        o_ref[...] = x_ref[...] + k  # k makes distinct kernels (distinct modules)

    shape = jax.ShapeDtypeStruct((8, 128), jnp.float32)

    def call(k, cid=None):
        return pl.pallas_call(functools.partial(barrier_kernel, k=k), out_shape=shape,
                              compiler_params=pltpu.CompilerParams(collective_id=cid))

    def chain(*calls):
        def f(x):
            for c in calls:
                x = c(x)
            return x
        return f

    def program(before, false, true, after):
        def f(x, flag):
            x = chain(*before)(x)
            x = jax.lax.cond(jnp.sum(flag) > 0, chain(*true), chain(*false), x)
            return chain(*after)(x)
        return f, (len(before), len(false), len(true), len(after))

    return {
        # lax.cond(p, true, false): branch 0 is the false branch
        "false_B_true_A": program([], [call(2)], [call(1)], []),
        "A_then_cond_B_C_then_D": program([call(1)], [call(2)], [call(3)], [call(4)]),
        "same_kernel_in_both_branches": program([], [call(1)], [call(1)], [call(2)]),
        "manual_0_in_false_branch": program([], [call(3, cid=0)], [call(1)], []),
        "manual_0_in_true_branch": program([], [call(1)], [call(3, cid=0)], []),
    }


def probe_collective_ids_cond(devices: int, dma_mode: str) -> dict[str, Any]:
    """PRG-146: the ids jax's TPU lowering gives the barrier kernels of both branches of a cond (lowered on
    CPU, nothing runs), in the order of the custom calls in the lowered text."""
    jax, jnp, pl, pltpu, NamedSharding, P, mesh = _setup(devices)
    del dma_mode
    x = jax.ShapeDtypeStruct((8 * devices, 128), jnp.float32, sharding=NamedSharding(mesh, P("x")))
    flag = jax.ShapeDtypeStruct((8, 1024), jnp.float32, sharding=NamedSharding(mesh, P()))
    result: dict[str, Any] = {}
    for mode in ("no", "yes", "override"):
        jax.config.update("jax_pallas_auto_assign_collective_ids", mode)
        for name, (f, shape) in collective_id_cond_programs(devices).items():
            fn = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=(P("x"), P()), out_specs=P("x"), check_vma=False))
            try:
                text = fn.trace(x, flag).lower(lowering_platforms=("tpu",)).as_text()
                result[f"{mode}/{name}"] = {"shape": list(shape), "collective_ids": [
                    int(i) for i in re.findall(r"collective_id\\22: (\d+)", text)]}
            except Exception as e:  # noqa: BLE001
                result[f"{mode}/{name}"] = {"shape": list(shape), "error_type": type(e).__name__,
                                            "error": str(e).splitlines()[0][:160]}
    return result


def _interpret_calls(devices: int, dma_mode: str):
    """The calls the interpreter probes use: a correct one and one that fails (ERR-1)."""
    jax, jnp, pl, pltpu, NamedSharding, P, mesh = _setup(devices)
    params = pltpu.InterpretParams(dma_execution_mode=dma_mode)
    shape = jax.ShapeDtypeStruct((8, 128), jnp.float32)

    def colliding_kernel(x_ref, o_ref, sem):
        del sem  # its internal id is 2000, the collective id below
        b = pltpu.get_barrier_semaphore()
        right = jax.lax.rem(jax.lax.axis_index("x") + 1, devices)
        pl.semaphore_signal(b, 1, device_id=(right,))
        pl.semaphore_wait(b, 1)
        o_ref[...] = x_ref[...]

    def add_one_kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1

    def no_id_barrier_kernel(x_ref, o_ref, sem):
        del sem  # a scratch semaphore: its id is allocated before the kernel fails
        b = pltpu.get_barrier_semaphore()
        right = jax.lax.rem(jax.lax.axis_index("x") + 1, devices)
        pl.semaphore_signal(b, 1, device_id=(right,))
        pl.semaphore_wait(b, 1)
        o_ref[...] = x_ref[...]

    def local_semaphore_kernel(x_ref, o_ref, sem):
        pl.semaphore_signal(sem, 1)
        pl.semaphore_wait(sem, 1)
        o_ref[...] = x_ref[...] + 1

    calls = {
        "colliding": pl.pallas_call(
            colliding_kernel, out_shape=shape, scratch_shapes=[pltpu.SemaphoreType.REGULAR],
            compiler_params=pltpu.CompilerParams(collective_id=2000), interpret=params),
        "add_one": pl.pallas_call(add_one_kernel, out_shape=shape, interpret=params),
        "no_id_barrier": pl.pallas_call(no_id_barrier_kernel, out_shape=shape,
                                        scratch_shapes=[pltpu.SemaphoreType.REGULAR],
                                        interpret=params),
        "local_semaphore": pl.pallas_call(local_semaphore_kernel, out_shape=shape,
                                          scratch_shapes=[pltpu.SemaphoreType.REGULAR],
                                          interpret=params),
    }

    def program(*names):
        def f(x):
            for n in names:
                x = calls[n](x)
            return x
        return jax.jit(jax.shard_map(f, mesh=mesh, in_specs=P("x"), out_specs=P("x"),
                                     check_vma=False))

    x = jax.device_put(jnp.zeros((8 * devices, 128), jnp.float32), NamedSharding(mesh, P("x")))
    return jax, program, x


def _record_semaphore_ids():
    """The ids the interpreter hands out for scratch semaphores, in allocation order."""
    from jax._src.pallas.mosaic.interpret import interpret_pallas_call as ipc

    ids: list[int] = []
    original = ipc._allocate_semaphores

    def recording(*args, **kw):
        token, sem_ids = original(*args, **kw)
        ids.extend(int(i) for i in sem_ids.ravel())
        return token, sem_ids

    ipc._allocate_semaphores = recording  # looked up when a pallas_call is traced
    return ids


def _count_starts():
    """Counts, per device, the interpreter's shared-memory initialisations (one per call start)."""
    import collections

    from jax._src.pallas.mosaic.interpret import interpret_pallas_call as ipc

    starts: collections.Counter = collections.Counter()
    original = ipc._initialize_shared_memory

    def counting(token, device_id, *a, **kw):
        starts[int(device_id)] += 1
        return original(token, device_id, *a, **kw)

    ipc._initialize_shared_memory = counting  # looked up when a pallas_call is traced
    return starts, ipc


def probe_manager_per_call(devices: int, dma_mode: str) -> dict[str, Any]:
    import threading

    jax, program, x = _interpret_calls(devices, dma_mode)
    from jax._src.pallas.mosaic.interpret import interpret_pallas_call as ipc
    from jax._src.pallas.mosaic.interpret import shared_memory as memory

    log: list[tuple[str, int, int]] = []
    lock = threading.Lock()
    managers: list[Any] = []  # kept alive, so that no two managers can share an id()
    calls_seen: dict[int, int] = {}

    init_original = ipc._initialize_shared_memory
    clean_original = ipc._clean_up_shared_memory
    sm_init = memory.SharedMemory.__init__

    def counting_init(self, *a, **kw):
        managers.append(self)
        sm_init(self, *a, **kw)

    def enter(token, device_id, *a, **kw):
        d = int(device_id)
        with lock:
            calls_seen[d] = calls_seen.get(d, 0) + 1
            log.append(("enter", d, calls_seen[d]))
        return init_original(token, device_id, *a, **kw)

    def leave(token, device_id):
        d = int(device_id)
        if d == 1:
            time.sleep(0.5)  # hold device 1 back before the clean-up barrier
        with lock:
            log.append(("reach_clean_up_barrier", d, calls_seen[d]))
        return clean_original(token, device_id)

    memory.SharedMemory.__init__ = counting_init
    ipc._initialize_shared_memory = enter
    ipc._clean_up_shared_memory = leave
    fn = program("add_one", "add_one", "add_one")
    out = _outcome(fn, x)
    # every device reaches call k's clean-up barrier before any device enters call k + 1
    ordered = all(
        max(i for i, (e, _, k) in enumerate(log) if e == "reach_clean_up_barrier" and k == c)
        < min(i for i, (e, _, k) in enumerate(log) if e == "enter" and k == c + 1)
        for c in (1, 2))
    return {"run": out, "calls": 3, "managers_created": len(managers),
            "distinct_managers": len({id(m) for m in managers}),
            "manager_left_after_run": ipc._shared_memory is not None,
            "all_reach_clean_up_before_next_call": ordered, "log": log}


def probe_failure_then_next(devices: int, dma_mode: str) -> dict[str, Any]:
    jax, program, x = _interpret_calls(devices, dma_mode)
    starts, ipc = _count_starts()
    ids = _record_semaphore_ids()
    plain = jax.jit(lambda v: v * 2)
    sequences = {
        "fail_then_two_correct": [("colliding", program("colliding")),
                                  ("add_one", program("add_one")),
                                  ("add_one", program("add_one"))],
        "two_call_program_fails_first_then_xla_then_correct": [
            ("colliding+add_one", program("colliding", "add_one")),
            ("plain_xla", plain),
            ("add_one", program("add_one")),
            ("add_one", program("add_one"))],
        "correct_fail_correct": [("add_one", program("add_one")),
                                 ("colliding", program("colliding")),
                                 ("add_one", program("add_one"))],
        "fail_then_semaphore_calls": [("colliding", program("colliding")),
                                      ("local_semaphore", program("local_semaphore")),
                                      ("local_semaphore", program("local_semaphore"))],
    }
    result: dict[str, Any] = {}
    for name, steps in sequences.items():
        rows = []
        for label, fn in steps:
            before, before_ids = sum(starts.values()), len(ids)
            row = {"call": label, **_outcome(fn, x)}
            row["device_call_starts"] = sum(starts.values()) - before
            row["manager_left"] = ipc._shared_memory is not None
            row["semaphore_ids"] = sorted(set(ids[before_ids:]))
            rows.append(row)
        result[name] = rows
    return result


def probe_semaphore_output_program(devices: int, dma_mode: str) -> dict[str, Any]:
    jax, jnp, pl, pltpu, NamedSharding, P, mesh = _setup(devices)
    starts, _ = _count_starts()
    params = pltpu.InterpretParams(dma_execution_mode=dma_mode)

    def start_kernel(x_ref, aliased, o_ref, sem):
        del aliased
        pltpu.make_async_copy(x_ref, o_ref, sem).start()

    def done_kernel(x_ref, o_ref, sem, aliased):
        del aliased
        pltpu.make_async_copy(x_ref, o_ref, sem).wait()

    any_spec = pl.BlockSpec(memory_space=pl.ANY)
    sem_spec = pl.BlockSpec(memory_space=pltpu.SEMAPHORE)

    def f(x):
        x, out, sem = pl.pallas_call(
            start_kernel,
            out_shape=(jax.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct(x.shape, x.dtype),
                       pltpu.SemaphoreType.DMA(())),
            in_specs=[any_spec], out_specs=(any_spec, any_spec, sem_spec),
            input_output_aliases={0: 0}, interpret=params)(x)
        return pl.pallas_call(
            done_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            in_specs=[any_spec, any_spec, sem_spec], out_specs=any_spec,
            input_output_aliases={1: 0}, interpret=params)(x, out, sem)

    fn = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))
    x = jax.device_put(jnp.zeros((8 * devices, 128), jnp.float32), NamedSharding(mesh, P("x")))
    out = _outcome(fn, x)
    stages: dict[str, Any] = {}
    try:  # where it fails: tracing the program, or lowering it (nothing runs in either)
        traced = fn.trace(x)
        stages["trace"] = "ok"
        traced.lower()
        stages["lower"] = "ok"
    except Exception as e:  # noqa: BLE001
        stages["failed_at"] = "lower" if "trace" in stages else "trace"
        stages["error"] = f"{type(e).__name__}: {str(e)[:120]}"
    return {"run": out, "device_call_starts": sum(starts.values()), "stages": stages}


def probe_barrier_without_collective_id(devices: int, dma_mode: str) -> dict[str, Any]:
    jax, program, x = _interpret_calls(devices, dma_mode)
    starts, ipc = _count_starts()
    ids = _record_semaphore_ids()
    rows = []
    for label in ("no_id_barrier", "add_one", "local_semaphore", "local_semaphore"):
        before, before_ids = sum(starts.values()), len(ids)
        row = {"call": label, **_outcome(program(label), x)}
        row["device_call_starts"] = sum(starts.values()) - before
        row["manager_left"] = ipc._shared_memory is not None
        row["semaphore_ids"] = sorted(set(ids[before_ids:]))
        rows.append(row)
    return {"sequence": rows}


def probe_race_detector_per_call(devices: int, dma_mode: str) -> dict[str, Any]:
    import logging

    jax, jnp, pl, pltpu, NamedSharding, P, mesh = _setup(devices)
    from jax._src.pallas.mosaic.interpret import interpret_pallas_call as ipc

    messages: list[str] = []

    class _Collect(logging.Handler):
        def emit(self, record):
            if "RACE DETECTED" in record.getMessage():
                messages.append(record.getMessage())

    logging.getLogger().addHandler(_Collect(level=logging.WARNING))
    params = pltpu.InterpretParams(dma_execution_mode="eager", detect_races=True, on_race="warn",
                                   vector_clock_size=256)
    del dma_mode  # eager: the unwaited copy runs (under on_wait it never does)
    shape = jax.ShapeDtypeStruct((8, 128), jnp.float32)

    def unwaited_kernel(x_ref, o_hbm, acc, sem):
        acc[...] = x_ref[...]
        pltpu.make_async_copy(acc, o_hbm, sem).start()  # never waited

    def add_one_kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1

    racy = pl.pallas_call(
        unwaited_kernel, out_shape=shape, in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32), pltpu.SemaphoreType.DMA],
        interpret=params)
    clean = pl.pallas_call(add_one_kernel, out_shape=shape, interpret=params)
    x = jax.device_put(jnp.zeros((8 * devices, 128), jnp.float32), NamedSharding(mesh, P("x")))

    def run(f):
        fn = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=P("x"), out_specs=P("x"),
                                   check_vma=False))
        before = len(messages)
        out = _outcome(fn, x)
        return {"run": out, "race_messages": len(messages) - before,
                "races_found_flag_after": bool(ipc.races is not None and ipc.races.races_found)}

    return {"racy_call_alone": run(racy), "racy_then_clean_call": run(lambda v: clean(racy(v)))}


def _child(name: str, devices: int, dma_mode: str) -> None:
    flags = re.sub(r"--xla_force_host_platform_device_count=\d+", "", os.environ.get("XLA_FLAGS", ""))
    os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={devices}".strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ["JAX_TRACEBACK_FILTERING"] = "off"  # the frames say where an error was raised
    try:
        result = {"status": "ok", "result": globals()[f"probe_{name}"](devices, dma_mode)}
    except BaseException as e:  # noqa: BLE001
        result = {"status": "probe_failed", "error": "".join(traceback.format_exception(e))[-3000:]}
    sys.stdout.flush()
    print(MARKER + json.dumps(result), flush=True)
    os._exit(0)  # threads of a failed interpreter run may still be waiting


# --------------------------------------------------------------------------------------------
# parent side
# --------------------------------------------------------------------------------------------


def run_probe(name: str, devices: int = 2, dma_mode: str = "eager", timeout: float = 120.0,
              python: str | None = None) -> dict[str, Any]:
    """Runs one probe in a subprocess; its result, or {"status": "hang" | "died", ...}."""
    if name not in PROBES:
        raise ValueError(f"unknown probe {name!r}; one of {PROBES}")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kernels"))
    import run_interpret as ri  # noqa: E402 - its process-group killer

    cmd = [python or sys.executable, str(Path(__file__).resolve()), name, "--child",
           "--devices", str(devices), "--dma-mode", dma_mode]
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONUNBUFFERED="1")
    with tempfile.TemporaryFile("w+") as out_f, tempfile.TemporaryFile("w+") as err_f:
        proc = subprocess.Popen(cmd, stdout=out_f, stderr=err_f, stdin=subprocess.DEVNULL,
                                env=env, start_new_session=True)
        try:
            proc.wait(timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
        ri._kill_group(proc)
        out_f.seek(0)
        stdout = out_f.read()
        err_f.seek(0)
        stderr = err_f.read()
    for line in stdout.splitlines():
        if line.startswith(MARKER):
            return json.loads(line[len(MARKER):])
    return {"status": "hang" if timed_out else "died", "stderr_tail": stderr[-2000:]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("probe", choices=PROBES)
    ap.add_argument("--devices", type=int, default=2)
    ap.add_argument("--dma-mode", default="eager", choices=("eager", "on_wait"))
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ns = ap.parse_args(argv)
    if ns.child:
        _child(ns.probe, ns.devices, ns.dma_mode)
    print(json.dumps(run_probe(ns.probe, ns.devices, ns.dma_mode), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
