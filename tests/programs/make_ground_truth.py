"""Record what jax's interpreter does with every program in examples/programs/: ground_truth.json.

    python tests/programs/make_ground_truth.py                      # everything
    python tests/programs/make_ground_truth.py --only reduce_scatter --devices 2
    python tests/programs/make_ground_truth.py --probes-only

Every configuration (file, build kwargs, device count, DMA mode) runs twice, each time in a fresh
subprocess killed after `--timeout` seconds ("hang"): once plain, recording the outcome (completed /
hang / error with the innermost exception), the interpreter's exit-time non-zero-count lines and
whether the result matches the file's `reference`; and once with jax's race detector
(`detect_races=True, on_race="warn"`, a wide vector clock as in tests/kernels/make_race_ground_truth.py),
recording every "RACE DETECTED" message of every call (the detector's flag only covers the last call,
specs/semantics/calls.md PRG-14). The child also lists the program's pallas_calls as `jax.make_jaxpr` sees
them (kernel names in program order; a loop body once), and, for a program that records its own
steps (`fn.steps`), what each step did.

The probes of probes.py are recorded too (section "probes"), at 2 and 4 devices and in both modes
where they run kernels.

With --only, the existing records of other configurations are kept.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import hashlib
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE.parent / "kernels"))
sys.path.insert(0, str(HERE))

import make_race_ground_truth as mrg  # noqa: E402 - race-message parsing
import probes  # noqa: E402
import run_interpret as ri  # noqa: E402 - error extraction, exit-warning parsing, process groups

GROUND_TRUTH_PATH = HERE / "ground_truth.json"
MARKER = "@@SEMCHECK_PROGRAM_RESULT@@ "
RACE_MARKER = "@@SEMCHECK_PROGRAM_RACE@@ "
DMA_MODES = ("eager", "on_wait")
DEVICES = (2, 4)
VECTOR_CLOCK_SIZE = 256

# What each example is meant to be (what a checker should say under `hardware`), and what the
# interpreter is expected to show. `hardware` lists the properties that are violated (empty: every
# property proved); `from_devices` when the violation needs that many devices.
SEMAPHORE_RESULT = "lowering fails on the semaphore result (PRG-12)"
PER_DEVICE_CALL = ("hangs: a device that runs a call the others skip waits at its start or clean-up barrier for "
                   "every device (PRG-145, PRG-179)")
NO_TAGS = "get_barrier_semaphore fails: the interpreter uses no tags, the collective_id is None (PRG-13)"
LAST_ITERATION_OUT_OF_BOUNDS = ("the last iteration's call raises IndexError: Out-of-bounds read at its copy "
                               "(PRG-183)")
LAST_CLEAR_OUT_OF_BOUNDS = ("the last iteration's clear call raises ValueError: Out-of-bounds write at its copy "
                            "(PRG-183)")
EXAMPLES: dict[str, dict[str, Any]] = {
    "examples/programs/async_copy.py": {"hardware": [], "interpreter": SEMAPHORE_RESULT},
    "examples/programs/async_slice.py": {"hardware": [], "interpreter": SEMAPHORE_RESULT},
    "examples/programs/async_dynamic_slice.py": {"hardware": [], "interpreter": SEMAPHORE_RESULT},
    "examples/programs/async_remote_copy.py": {"hardware": [], "interpreter": SEMAPHORE_RESULT},
    "examples/programs/collective_permute_loop.py": {"hardware": [],
                                                     "interpreter": SEMAPHORE_RESULT},
    "examples/programs/bidi_permute_loop.py": {"hardware": [], "interpreter": SEMAPHORE_RESULT},
    "examples/programs/reduce_scatter_twice.py": {"hardware": [], "interpreter": "completes"},
    "examples/programs/repeated_shift_double_barrier.py": {"hardware": [],
                                                           "interpreter": "completes"},
    "examples/programs/distinct_collective_ids_two_patterns.py": {"hardware": [],
                                                                  "interpreter": "completes"},
    "examples/programs/two_patterns_two_tags.py": {"hardware": [], "interpreter": NO_TAGS},
    "examples/programs/cond_two_patterns.py": {"hardware": [], "interpreter": "completes"},
    "examples/programs/per_device_cond.py": {"hardware": [], "interpreter": PER_DEVICE_CALL},
    "examples/programs/ragged_chunks_while.py": {"hardware": [], "interpreter": PER_DEVICE_CALL},
    "examples/programs/ring_slots_loop.py": {"hardware": [], "interpreter": "completes"},
    "examples/programs/copy_then_async_copy.py": {"hardware": [], "interpreter": SEMAPHORE_RESULT},
    "examples/programs/async_copy_into_memory_spaces.py": {"hardware": [], "interpreter": SEMAPHORE_RESULT},
    # PRG-167: loop bounds from concrete arrays given to both calls
    "examples/programs/kv_transfer_layers.py": {"hardware": [], "interpreter": SEMAPHORE_RESULT,
                                                "devices": [2, 4, 8]},
    "examples/programs/ring_attention_two_calls.py": {"hardware": [], "interpreter": "completes",
                                                      "devices": [2, 4, 8]},
    # PRG-169: loop bounds an earlier kernel call (the plan) computes
    "examples/programs/ring_attention_planned.py": {"hardware": [], "interpreter": "completes",
                                                    "devices": [2, 4, 8]},
    # PRG-228: a metadata call whose fori_loop accumulates chunk counts into SMEM tables, then a copy call
    "examples/programs/chunk_table_planned.py": {"hardware": [], "interpreter": "completes", "devices": [2, 4, 8]},
    "examples/programs/buggy/chunk_table_planned_table_per_sequence.py": {
        "hardware": [], "devices": [2, 4, 8],
        "interpreter": "the metadata call raises ValueError: Out-of-bounds swap at its store past the table (ACC-10); "
                       "the second call never starts"},
    # PRG-183: one call per layer in a fori_loop, the layer index the loop's
    "examples/programs/kv_cache_layers_loop.py": {"hardware": [], "interpreter": "completes"},
    "examples/programs/buggy/kv_cache_layers_loop_one_layer_too_many.py": {
        "hardware": [], "interpreter": LAST_ITERATION_OUT_OF_BOUNDS},
    # PRG-126, PRG-183: a lax.switch per layer between two calls, on a replicated layer-kind table
    "examples/programs/hybrid_layers_switch.py": {"hardware": [], "interpreter": "completes"},
    "examples/programs/buggy/hybrid_layers_switch_clears_next_layer.py": {
        "hardware": [], "interpreter": LAST_CLEAR_OUT_OF_BOUNDS},
    # PRG-186: one call per dirty page in a while_loop, the count an input array
    "examples/programs/dirty_page_flush_while.py": {"hardware": [], "interpreter": "completes"},
    "examples/programs/buggy/dirty_page_flush_while_count_past_staging.py": {
        "hardware": [], "interpreter": LAST_ITERATION_OUT_OF_BOUNDS},
    "examples/programs/buggy/ring_attention_planned_skips_steps.py": {
        "hardware": ["deadlock-free", "exit-balance", "dma-bytes"], "devices": [2, 4, 8],
        "interpreter": "hangs: the second ring call's devices run different step counts"},
    "examples/programs/buggy/kv_transfer_layers_last_wait_missing.py": {
        "hardware": ["exit-balance", "dma-bytes", "race-free"], "interpreter": SEMAPHORE_RESULT, "devices": [2, 4, 8]},
    "examples/programs/buggy/kv_transfer_layers_wrong_bytes.py": {
        "hardware": ["exit-balance", "dma-bytes", "race-free"], "interpreter": SEMAPHORE_RESULT, "devices": [2, 4, 8]},
    "examples/programs/buggy/ring_attention_two_calls_last_recv_unwaited.py": {
        "hardware": ["invocation-confined", "race-free"], "devices": [2, 4, 8],
        "interpreter": "eager: second call warns at exit on the receive semaphore, race reported; "
                       "on_wait: the last copy's write never runs, no warning, no race"},
    "examples/programs/buggy/async_copy_into_vmem_read_before_done.py": {
        "hardware": ["race-free"], "interpreter": SEMAPHORE_RESULT},
    "examples/programs/buggy/async_copy_done_without_start.py": {
        "hardware": ["deadlock-free", "dma-bytes"], "interpreter": SEMAPHORE_RESULT},
    "examples/programs/buggy/async_copy_start_without_done.py": {
        "hardware": ["exit-balance", "dma-bytes", "race-free"], "interpreter": SEMAPHORE_RESULT},
    "examples/programs/buggy/async_copy_done_wrong_future.py": {
        "hardware": ["deadlock-free", "dma-bytes"], "interpreter": SEMAPHORE_RESULT},
    "examples/programs/buggy/async_slice_done_without_start.py": {
        "hardware": ["deadlock-free", "dma-bytes"], "interpreter": SEMAPHORE_RESULT},
    "examples/programs/buggy/async_slice_start_without_done.py": {
        "hardware": ["exit-balance", "dma-bytes", "race-free"], "interpreter": SEMAPHORE_RESULT},
    "examples/programs/buggy/async_slice_done_wrong_future.py": {
        "hardware": ["deadlock-free", "dma-bytes"], "interpreter": SEMAPHORE_RESULT},
    "examples/programs/buggy/async_dynamic_slice_done_without_start.py": {
        "hardware": ["deadlock-free", "dma-bytes"], "interpreter": SEMAPHORE_RESULT},
    "examples/programs/buggy/async_dynamic_slice_start_without_done.py": {
        "hardware": ["exit-balance", "dma-bytes", "race-free"], "interpreter": SEMAPHORE_RESULT},
    "examples/programs/buggy/async_dynamic_slice_done_wrong_future.py": {
        "hardware": ["race-free"], "interpreter": SEMAPHORE_RESULT},
    "examples/programs/buggy/async_remote_copy_recv_done_without_start.py": {
        "hardware": ["deadlock-free", "dma-bytes"], "interpreter": SEMAPHORE_RESULT},
    "examples/programs/buggy/async_remote_copy_start_without_send_done.py": {
        "hardware": ["exit-balance", "dma-bytes"], "interpreter": SEMAPHORE_RESULT},
    "examples/programs/buggy/async_remote_copy_recv_done_wrong_future.py": {
        "hardware": ["invocation-confined", "race-free"], "interpreter": SEMAPHORE_RESULT},
    "examples/programs/buggy/async_remote_copy_one_id_two_directions.py": {
        "hardware": ["invocation-confined"], "from_devices": 3, "interpreter": SEMAPHORE_RESULT},
    "examples/programs/buggy/collective_permute_loop_recv_done_skipped.py": {
        "hardware": ["invocation-confined"], "interpreter": SEMAPHORE_RESULT},
    "examples/programs/buggy/collective_permute_loop_recv_done_without_start.py": {
        "hardware": ["deadlock-free", "dma-bytes"], "interpreter": SEMAPHORE_RESULT},
    "examples/programs/buggy/collective_permute_loop_recv_done_wrong_future.py": {
        "hardware": ["invocation-confined"], "from_devices": 3,
        "interpreter": SEMAPHORE_RESULT},
    "examples/programs/buggy/bidi_permute_loop_start_without_send_done.py": {
        "hardware": ["exit-balance", "dma-bytes"], "interpreter": SEMAPHORE_RESULT},
    "examples/programs/buggy/bidi_permute_loop_recv_one_future_twice.py": {
        "hardware": ["invocation-confined"], "interpreter": SEMAPHORE_RESULT},
    "examples/programs/buggy/repeated_shift_single_barrier.py": {
        "hardware": ["invocation-confined"], "from_devices": 5, "interpreter": "completes",
        "devices": [2, 4, 5]},
    "examples/programs/buggy/shared_collective_id_two_patterns.py": {
        "hardware": ["invocation-confined"], "from_devices": 4, "interpreter": "completes"},
    "examples/programs/buggy/per_device_cond_partner_skips.py": {
        "hardware": ["deadlock-free", "exit-balance", "dma-bytes"], "interpreter": PER_DEVICE_CALL},
    "examples/programs/buggy/per_device_local_call.py": {"hardware": [], "interpreter": PER_DEVICE_CALL},
    "examples/programs/buggy/ring_slots_loop_one_slot_short.py": {
        "hardware": [], "interpreter": "the fourth call raises ValueError: Out-of-bounds write at its copy (PRG-199)"},
    "examples/programs/buggy/ragged_chunks_while_ring_uneven.py": {
        "hardware": ["deadlock-free", "exit-balance", "dma-bytes"], "interpreter": PER_DEVICE_CALL},
    "examples/programs/buggy/cond_two_patterns_one_id.py": {
        "hardware": ["invocation-confined"], "from_devices": 4, "interpreter": "completes"},
    "examples/programs/buggy/two_patterns_one_tag.py": {
        "hardware": ["invocation-confined"], "from_devices": 4, "interpreter": NO_TAGS},
    "examples/programs/buggy/unwaited_writeback.py": {
        "hardware": ["exit-balance", "dma-bytes", "race-free"],
        "interpreter": "eager: right numbers, exit warning, race reported; "
                       "on_wait: the copy never runs (wrong numbers), no race"},
    "examples/programs/buggy/auto_ids_call_without_barrier.py": {
        "hardware": ["deadlock-free"], "interpreter": "completes (jax's TPU lowering refuses it: LAUNCH-7)"},
    "examples/programs/buggy/left_manager_id_collision.py": {
        "hardware": [], "interpreter": "first call fails at get_barrier_semaphore and leaves its manager, second "
                                       "re-raises, third collides on the left manager's ids, fourth re-raises, "
                                       "fifth runs (PRG-11, PRG-154)"},
    # PRG-208: the plan's copy reads past its table; the call that reads the plan never starts (PRG-11)
    "examples/programs/buggy/plan_copy_past_its_table.py": {
        "hardware": [], "interpreter": "the plan call raises IndexError: Out-of-bounds read at its write-back copy; "
                                       "the second call never starts (PRG-11)"},
    # PRG-217: the plan's write-backs read past their tables; eager raises at the first start, on_wait at the first
    # wait, which runs the copy started second (last in, first out); the call that reads the plan never starts
    "examples/programs/buggy/plan_writebacks_fail_apart.py": {
        "hardware": [], "interpreter": "the plan call raises IndexError: Out-of-bounds read, of its first table "
                                       "under eager and of its second under on_wait; the second call never starts "
                                       "(PRG-11)"},
    "examples/programs/buggy/failing_call_then_second_call.py": {
        "hardware": [], "interpreter": "first call fails, second re-raises its error, third runs "
                                       "(PRG-11)"},
}
# Non-default build kwargs: (path, kwargs, devices).
VARIANTS: list[tuple[str, dict[str, Any], tuple[int, ...]]] = [
    ("examples/programs/reduce_scatter_twice.py", {"double_barrier": False}, DEVICES),
    ("examples/programs/repeated_shift_double_barrier.py", {}, (5,)),
]

NOTES = [
    "Every program with a semaphore result (the start/done family) fails while it is lowered, "
    "before any call starts: NotImplementedError 'nan + dma_sem', in both modes and at every "
    "device count, correct programs and their misuses alike (PRG-12).",
    "Programs without semaphore results complete with the right numbers, even those that are "
    "wrong on a TPU (a single barrier across repeated calls, one collective id for two "
    "patterns): every call ends in a barrier of all devices (PRG-10).",
    "The unwaited write-back: under eager the copy runs inside .start(), the exit check prints "
    "the DMA semaphore's count and the detector reports the copy's write against the call's own "
    "read of its result; under on_wait the copy never runs (no race, wrong numbers).",
    "A failing call then two correct ones: the second raises the first's error at dispatch "
    "(ordered-effect token) and never starts; the third completes (PRG-11).",
]


def example_files(root: Path = REPO_ROOT) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in (root / "examples" / "programs").rglob("*.py"))


def file_sha256(path: str) -> str:
    return hashlib.sha256((REPO_ROOT / path).read_bytes()).hexdigest()


def case_key(path: str, kwargs: dict, devices: int, mode: str, races: bool) -> str:
    return f"{path}|{json.dumps(kwargs, sort_keys=True)}|{devices}|{mode}|{'races' if races else 'plain'}"


# --------------------------------------------------------------------------------------------
# child
# --------------------------------------------------------------------------------------------


def _pallas_calls(closed) -> list[str]:
    """The pallas_call kernel names of a traced program, in order (bodies of loops once)."""
    from jax._src import core

    names: list[str] = []

    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            if eqn.primitive.name == "pallas_call":
                name = eqn.params.get("name")
                if not name:
                    info = getattr(eqn.params.get("jaxpr"), "debug_info", None)
                    name = getattr(info, "func_name", None) or "?"
                names.append(str(name))
                continue
            for sub in core.jaxprs_in_params(eqn.params):
                walk(sub)

    walk(closed.jaxpr)
    return names


def _child(path: str, devices: int, mode: str, kwargs: dict, races: bool) -> None:
    flags = re.sub(r"--xla_force_host_platform_device_count=\d+", "", os.environ.get("XLA_FLAGS", ""))
    os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={devices}".strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import logging

    class _Forward(logging.Handler):
        def emit(self, record):
            try:
                msg = record.getMessage()
            except Exception:  # noqa: BLE001
                return
            if "RACE DETECTED" in msg:
                sys.stdout.write(RACE_MARKER + json.dumps(msg) + "\n")
                sys.stdout.flush()

    logging.getLogger().addHandler(_Forward(level=logging.WARNING))
    result: dict[str, Any] = {"phase": "import"}
    try:
        import jax
        import numpy as np
        from jax.experimental.pallas import tpu as pltpu

        params = dict(dma_execution_mode=mode)
        if races:
            params.update(detect_races=True, on_race="warn", vector_clock_size=VECTOR_CLOCK_SIZE)
        mod = ri._load_module(path)
        result["phase"] = "build"
        fn, args = mod.build(devices, dma_mode=mode, interpret=pltpu.InterpretParams(**params),
                             **kwargs)
        try:
            result["pallas_calls"] = _pallas_calls(jax.make_jaxpr(fn)(*args))
        except Exception as e:  # noqa: BLE001 - a Python program of several jits
            result["pallas_calls"] = None
            result["trace_error"] = f"{type(e).__name__}: {str(e)[:100]}"
        result["phase"] = "run"
        out = jax.block_until_ready(fn(*args))
        result["phase"] = "check"
        ref = getattr(mod, "reference", None)
        if ref is not None:
            expected = ref(*[np.asarray(a) for a in args], num_devices=devices, **kwargs)
            outs = out if isinstance(out, (tuple, list)) else (out,)
            exps = expected if isinstance(expected, (tuple, list)) else (expected,)
            result["output_matches_reference"] = bool(len(outs) == len(exps) and all(
                np.allclose(np.asarray(o), np.asarray(e)) for o, e in zip(outs, exps)))
        result["status"] = "completed"
    except BaseException as e:  # noqa: BLE001
        import traceback

        etype, msg = ri.innermost_error("".join(traceback.format_exception(e)))
        result.update(status="error", error_type=etype or type(e).__name__, error_message=msg)
    steps = getattr(locals().get("fn"), "steps", None)
    if steps is not None:
        result["steps"] = steps
    sys.stdout.flush()
    print(MARKER + json.dumps(result), flush=True)
    os._exit(0)


# --------------------------------------------------------------------------------------------
# parent
# --------------------------------------------------------------------------------------------


def run_case(path: str, devices: int, mode: str, kwargs: dict | None = None, *,
             races: bool = False, timeout: float = 90.0) -> dict[str, Any]:
    """One interpreter run of one configuration in a subprocess; what happened."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(REPO_ROOT / path),
           "--devices", str(devices), "--modes", mode, "--kwargs", json.dumps(kwargs or {})]
    if races:
        cmd.append("--races")
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONUNBUFFERED="1")
    t0 = time.monotonic()
    with tempfile.TemporaryFile("w+") as out_f, tempfile.TemporaryFile("w+") as err_f:
        proc = subprocess.Popen(cmd, stdout=out_f, stderr=err_f, stdin=subprocess.DEVNULL, env=env,
                                start_new_session=True)
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
    child = None
    messages = []
    for line in stdout.splitlines():
        if line.startswith(MARKER):
            child = json.loads(line[len(MARKER):])
        elif line.startswith(RACE_MARKER):
            messages.append(json.loads(line[len(RACE_MARKER):]))
    parsed = [mrg.parse_race(m, REPO_ROOT) for m in messages]
    report: dict[str, Any] = {
        "outcome": ("hang" if timed_out else "error") if child is None else child["status"],
        "error_type": None if child is None else child.get("error_type"),
        "error_message": None if child is None else child.get("error_message"),
        "nonzero_count_warnings": sorted(set(ri.nonzero_count_warnings(stdout))),
        "output_matches_reference": None if child is None else child.get("output_matches_reference"),
        "pallas_calls": None if child is None else child.get("pallas_calls"),
        "seconds": round(time.monotonic() - t0, 2),
    }
    if child is None and not timed_out:
        report["error_type"] = "ChildProcessDied"
        report["error_message"] = stderr[-300:]
    if child is not None and "steps" in child:
        report["steps"] = child["steps"]
    if races:
        report["race_messages"] = len(messages)
        report["races"] = sorted({mrg.trimmed_message(r) for r in parsed if r is not None})
        report["race_signatures"] = sorted({json.dumps(mrg.race_signature(r)) for r in parsed
                                            if r is not None})
    return report


def configs(only: list[str], devices_filter: list[int] | None) -> list[tuple]:
    out = []
    for path, spec in EXAMPLES.items():
        for n in spec.get("devices", DEVICES):
            out.append((path, {}, n))
    for path, kwargs, devs in VARIANTS:
        for n in devs:
            out.append((path, kwargs, n))
    if only:
        out = [c for c in out if any(o in c[0] for o in only)]
    if devices_filter:
        out = [c for c in out if c[2] in devices_filter]
    return [(p, kw, n, m, r) for p, kw, n in out for m in DMA_MODES for r in (False, True)]


def record_probes() -> list[dict[str, Any]]:
    rows = []
    for name in probes.PROBES:
        settings = ([(n, m) for n in DEVICES for m in DMA_MODES] if name in probes.INTERPRETING
                    else [(2, "eager")])
        for n, m in settings:
            res = probes.run_probe(name, n, m)
            rows.append({"probe": name, "devices": n, "dma_mode": m, **res})
            print(f"probe {name} n={n} {m}: {res['status']}", file=sys.stderr)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", action="append", default=[])
    ap.add_argument("--devices", default="")
    ap.add_argument("--modes", default=",".join(DMA_MODES))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=90.0)
    ap.add_argument("--probes-only", action="store_true")
    ap.add_argument("--no-probes", action="store_true")
    ap.add_argument("--out", default=str(GROUND_TRUTH_PATH))
    # child mode
    ap.add_argument("--child", metavar="PATH")
    ap.add_argument("--kwargs", default="{}")
    ap.add_argument("--races", action="store_true")
    ns = ap.parse_args(argv)
    if ns.child:
        _child(ns.child, int(ns.devices), ns.modes, json.loads(ns.kwargs), ns.races)

    out_path = Path(ns.out)
    old = json.loads(out_path.read_text()) if out_path.exists() else {}
    cases = {c["key"]: c for c in old.get("cases", [])} if (ns.only or ns.probes_only) else {}
    t0 = time.monotonic()
    if not ns.probes_only:
        todo = configs(ns.only, [int(d) for d in ns.devices.split(",") if d])
        print(f"{len(todo)} runs, {ns.workers} workers", file=sys.stderr)
        with cf.ThreadPoolExecutor(max_workers=ns.workers) as pool:
            futs = {pool.submit(run_case, p, n, m, kw, races=r, timeout=ns.timeout): (p, kw, n, m, r)
                    for p, kw, n, m, r in todo}
            for fut in cf.as_completed(futs):
                p, kw, n, m, r = futs[fut]
                rep = fut.result()
                key = case_key(p, kw, n, m, r)
                cases[key] = {"key": key, "path": p, "kwargs": kw, "devices": n, "dma_mode": m,
                              "detect_races": r, **rep}
                print(f"[{time.monotonic() - t0:6.0f}s] {key}: {rep['outcome']} "
                      f"{rep.get('error_message') or ''} ok={rep['output_matches_reference']} "
                      f"races={rep.get('race_messages')}", file=sys.stderr)
    probe_rows = old.get("probes", []) if ns.no_probes else record_probes()
    import jax
    import numpy as np

    doc = {
        "schema_version": 1,
        "description": (
            "What jax's Pallas TPU interpret mode does with the programs of examples/programs/ "
            "(CPU, --xla_force_host_platform_device_count=devices), one subprocess per run. "
            "outcome: completed | hang | error (error_message: the innermost exception). "
            "detect_races: the run used jax's race detector (races: every distinct race "
            "message of every call). pallas_calls: the program's kernels as make_jaxpr sees "
            "them. examples[path]: what the program is meant to be (hardware: the properties a "
            "checker should find violated; [] = all proved) and what the interpreter is expected "
            "to show. probes: the experiments of probes.py behind specs/semantics/calls.md."),
        "notes": NOTES,
        "environment": {"jax": jax.__version__, "numpy": np.__version__,
                        "python": platform.python_version()},
        "examples": {p: {**spec, "sha256": file_sha256(p)} for p, spec in EXAMPLES.items()},
        "variants": [{"path": p, "kwargs": kw, "devices": list(d)} for p, kw, d in VARIANTS],
        "cases": sorted(cases.values(), key=lambda c: c["key"]),
        "probes": probe_rows,
    }
    out_path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {len(doc['cases'])} cases, {len(probe_rows)} probe runs to {out_path} in "
          f"{time.monotonic() - t0:.0f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
