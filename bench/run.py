"""Benchmark: semcheck against the ways one could otherwise check a kernel.

    .venv/bin/python bench/run.py                    # the full sweep (about 20 minutes)
    .venv/bin/python bench/run.py --quick            # tiny sizes, seconds
    .venv/bin/python bench/run.py --real             # shipped-style kernels at 2,4,8 against one interpret run
    .venv/bin/python bench/run.py --kernels allreduce --sizes 2,4,8 --contenders semcheck,spin

Contenders, each run in its own subprocess (wall time from the parent, peak
resident memory from `os.wait4`, which covers the subprocess and everything
it waited for):

* `semcheck`  -- `semcheck verify FILE --devices N --dma-mode all --format json`,
  end to end: process start, jax import, tracing, every property, every mode;
* `semcheck_nofold` -- the same command with `--no-fold`: every device checked
  (spec RUN-7), what a kernel whose devices do not repeat costs; run for the
  kernels whose devices repeat (`NOFOLD_KERNELS`), its verdicts compared with
  the folded run's;
* `phases`    -- the same work inside one process, timed by phase: jax import,
  trace + lower, the model's fast run (all modes), Z3 deadlock-freedom (all
  modes), all property checks (all modes); it also saves the lowered program
  for the contenders below;
* `interpret` -- running the kernel once in jax's Pallas TPU interpret mode
  (`tests/kernels/run_interpret.py`, eager DMAs, fake CPU devices);
* `explorer`  -- `semcheck.model.explore(program, "hardware", reduce=False)`:
  every interleaving, states hashed, no reduction (the naive model checker);
* `z3ts`      -- the naive SMT baseline: one Z3 timestamp per event
  (bench/timestamped.py), hardware mode;
* `spin`      -- SPIN on the Promela rendering (`oracles/spin`),
  hardware mode, safety search with SPIN's default partial-order reduction.

The baselines get the lowered program for free (it is lowered once per size
by `phases`); their time is their own computation only. A contender stops for
larger sizes of a kernel once a run exceeds the time cap (`--time-cap`,
default 120 s) or the memory cap (`--mem-cap-gib`, default 8); with
`--extrapolate` (default on) it also stops when its last doubling predicts
the next size would exceed the time cap.

Results: `results.json` (every run), `results.md` (tables with semcheck's
time over each contender's), `time_vs_devices.png`, in `--out`
(default bench/results). The fitted exponent of semcheck's time against the
device count is printed and written to both.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import pickle
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.append(str(Path(__file__).resolve().parent.parent))  # the SPIN baseline, oracles/spin

KERNELS = {
    "allreduce": "examples/ring_allreduce.py",
    "allgather": "examples/ring_allgather.py",
    "permute": "examples/ring_permute.py",
    # buggy: the time to the first violation, with its witness
    "deadlock": "examples/buggy/cyclic_wait_deadlock.py",
    "leak": "examples/buggy/exit_leak_unwaited_send.py",
    "ringdeadlock": "examples/buggy/wrong_neighbour_deadlock.py",
    # devices that do not repeat as a 1-D rotation, and a quadratic program
    "tree": "bench/kernels/tree_reduce.py",
    "outofstep": "bench/kernels/ring_out_of_step.py",
    "torus2d": "bench/kernels/torus_halo_2d.py",
    "alltoall": "bench/kernels/all_to_all.py",
}
KERNEL_TITLES = {
    "allreduce": "ring all-reduce",
    "allgather": "ring all-gather",
    "permute": "barrier + permute",
    "deadlock": "cyclic-wait deadlock",
    "leak": "exit leak (unwaited send)",
    "ringdeadlock": "deadlocking ring (wrong neighbour)",
    "tree": "tree reduction",
    "outofstep": "ring, one device out of step",
    "torus2d": "2-D torus halo",
    "alltoall": "all-to-all",
}
# Interpret mode hangs on these (it never reports a deadlock): its run is stopped at --hang-cap.
HANGS = frozenset({"deadlock", "ringdeadlock"})
# `semcheck_nofold` runs only where the fold applies: the kernels whose devices repeat as a 1-D rotation.
# The tree, the 2-D torus and the all-to-all gain nothing from the fold (their `semcheck` time is already
# that of every device checked), and the buggy kernels' violations are decided on every device anyway.
NOFOLD_KERNELS = ("allreduce", "allgather", "permute")
CONTENDERS = ("semcheck", "semcheck_nofold", "phases", "interpret", "explorer", "z3ts", "spin")
TITLES = {
    "semcheck": "semcheck verify (end to end)",
    "semcheck_nofold": "semcheck verify --no-fold (end to end, every device)",
    "phases": "semcheck, in one process",
    "interpret": "jax interpret mode (one run)",
    "explorer": "exhaustive explorer, no reduction",
    "z3ts": "Z3, per-event timestamps",
    "spin": "SPIN (Promela, default POR)",
}
BASELINE_MODE = "hardware"
FULL_SIZES = (2, 4, 8, 16, 32, 64, 128, 256)
QUICK_SIZES = (2, 4)
MODES = ("eager", "on_wait", "hardware")


# =============================================================================
# workers: one measurement each, in a fresh process; print one JSON line
# =============================================================================

MARK = "@@BENCH@@ "


def _emit(obj: dict) -> None:
    sys.stdout.flush()
    print(MARK + json.dumps(obj), flush=True)


def _load_program(path: str):
    with open(path, "rb") as f:
        return pickle.load(f)


def worker_phases(a: dict) -> dict:
    """semcheck's work in one process, phase by phase; partial results are emitted as it goes,
    so a run stopped at a cap still tells where its time went."""
    t_start = time.perf_counter()
    from semcheck.checker.frontend import provision_devices

    provision_devices(a["devices"])
    import jax  # noqa: F401 - timed: what every jax-based run pays

    gc.disable()  # as `semcheck verify`'s checking process does

    out: dict = {"phases": {}}
    ph = out["phases"]
    ph["import"] = time.perf_counter() - t_start
    from semcheck.checker.frontend import load

    t = time.perf_counter()
    kernels = load(str(ROOT / a["kernel_path"]), devices=a["devices"])
    ph["trace_lower"] = time.perf_counter() - t
    program = kernels[0].program
    out["ops"] = program.num_ops
    out["kernels"] = len(kernels)
    if a.get("save_program"):  # for the baselines; not part of semcheck's time (see pickle_s)
        t = time.perf_counter()
        with open(a["save_program"], "wb") as f:
            pickle.dump(program, f, protocol=pickle.HIGHEST_PROTOCOL)
        out["pickle_s"] = time.perf_counter() - t
    if a.get("lower_only"):
        return out
    _emit(dict(out, status="partial"))

    from semcheck.model import fast_run

    t = time.perf_counter()
    out["fast_run"] = {m: fast_run(program, m).kind for m in MODES}
    ph["fast_run"] = time.perf_counter() - t
    _emit(dict(out, status="partial"))

    timeout_ms = int(a["cap"] * 1000)
    try:
        # imported outside the timing; finding a program's fold (RUN-7) is timed, in its first check
        import semcheck.checker.properties.folding
        import semcheck.checker.properties.registry  # noqa: F401
        from semcheck.checker.properties.registry import IDS as PROPERTIES
        from semcheck import check_program
    except Exception as e:  # noqa: BLE001 - another part may still be in progress
        out["checks_unavailable"] = f"{type(e).__name__}: {e}"
    else:
        # every property in every mode, timed one by one: Z3 deadlock-freedom is one of them
        per: dict[str, float] = {}
        out["checks"] = {}
        for m in MODES:
            for prop in PROPERTIES:
                t = time.perf_counter()
                (v,) = check_program(program, m, (prop,), timeout_ms=timeout_ms)
                per[prop] = per.get(prop, 0.0) + time.perf_counter() - t
                out["checks"][f"{m}:{prop}"] = v.verdict
                if v.verdict == "violated" and "first_violation" not in out:
                    # from process start: import, trace + lower, the fast run and the checks before it
                    out["first_violation"] = f"{m}:{prop}"
                    out["first_violation_s"] = round(time.perf_counter() - t_start - out.get("pickle_s", 0), 4)
                    out["first_violation_witness"] = v.witness is not None
                ph["all_checks"] = sum(per.values())
                out["per_property_s"] = {k: round(x, 4) for k, x in per.items()}
                _emit(dict(out, status="partial"))
        ph["z3_deadlock"] = per["deadlock-free"]
        # the same without folding (RUN-7): what a program whose devices do not repeat costs
        t = time.perf_counter()  # check_program makes a fresh analysis: nothing is shared with the above
        unfolded = {}
        for m in MODES:
            for v in check_program(program, m, PROPERTIES, timeout_ms=timeout_ms, fold=False):
                unfolded[f"{m}:{v.property}"] = v.verdict
            ph["all_checks_unfolded"] = time.perf_counter() - t
            _emit(dict(out, status="partial"))
        out["unfolded_verdicts_agree"] = unfolded == out["checks"]
    if "all_checks" not in ph:
        try:
            from semcheck.checker.z3.deadlock import deadlock_free
        except Exception as e:  # noqa: BLE001
            out["z3_unavailable"] = f"{type(e).__name__}: {e}"
        else:
            t = time.perf_counter()
            out["z3_deadlock"] = {}
            for m in MODES:
                out["z3_deadlock"][m] = deadlock_free(program, m, timeout_ms=timeout_ms).verdict
                ph["z3_deadlock"] = time.perf_counter() - t
                _emit(dict(out, status="partial"))
    ph["total_in_process"] = time.perf_counter() - t_start - out.get("pickle_s", 0)
    return out


def worker_interpret(a: dict) -> dict:
    import importlib.util

    spec = importlib.util.spec_from_file_location("run_interpret", ROOT / "tests" / "kernels" / "run_interpret.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rep = mod.run_kernel(ROOT / a["kernel_path"], a["devices"], "eager", timeout=a["cap"])
    out = {"outcome": rep["outcome"], "seconds": rep["seconds"],
           "output_matches_reference": rep.get("output_matches_reference")}
    if rep["outcome"] == "hang":
        out["status"] = "timeout"
    elif rep["outcome"] != "completed":
        out["status"] = "error"
        out["error"] = f"{rep.get('error_type')}: {rep.get('error_message')}"
    return out


def worker_explorer(a: dict) -> dict:
    from semcheck.model import ExplorationLimit, explore

    program = _load_program(a["program"])
    t = time.perf_counter()
    try:
        ex = explore(program, BASELINE_MODE, reduce=False, max_states=a.get("max_states", 10**12))
    except ExplorationLimit as e:
        return {"status": "memory", "error": str(e), "compute_s": time.perf_counter() - t}
    return {"compute_s": time.perf_counter() - t, "states": ex.states,
            "verdict": "deadlock" if "deadlock" in ex.kinds() else "deadlock-free",
            "outcomes": sorted(set(ex.kinds()))}


def worker_z3ts(a: dict) -> dict:
    try:
        from timestamped import deadlock_free_timestamped  # bench/timestamped.py
    except Exception as e:  # noqa: BLE001
        return {"status": "unavailable", "error": f"{type(e).__name__}: {e}"}
    program = _load_program(a["program"])
    t = time.perf_counter()
    v = deadlock_free_timestamped(program, BASELINE_MODE, timeout_ms=int(a["cap"] * 1000))
    out = {"compute_s": time.perf_counter() - t, "verdict": v.verdict,
           "stats": {k: v.stats[k] for k in ("vars", "ite_terms", "terms", "solve_s") if k in (v.stats or {})}}
    if v.verdict == "unknown":
        out["status"] = "timeout" if "timeout" in (v.reason or "") or "canceled" in (v.reason or "") else "error"
        out["error"] = v.reason
    return out


def worker_spin(a: dict) -> dict:
    from oracles.spin import PromelaUnsupported, render, run_spin, spin_available

    if not spin_available():
        return {"status": "unavailable", "error": "spin or gcc not installed"}
    program = _load_program(a["program"])
    t = time.perf_counter()
    try:
        r = render(program, BASELINE_MODE)
    except PromelaUnsupported as e:
        return {"status": "unsupported", "error": str(e)}
    t_render = time.perf_counter() - t
    try:
        sr = run_spin(r, timeout=a["cap"], memlim_mb=int(a["mem_cap_gib"] * 1024))
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "compute_s": time.perf_counter() - t}
    out = {"compute_s": time.perf_counter() - t, "verdict": sr.verdict, "states": sr.states_stored,
           "phases": dict(sr.seconds, render=round(t_render, 4)), "pan_memory_mb": sr.memory_mb,
           "promela_bytes": len(r.text), "vector_bytes_bound": r.vector_bytes}
    if sr.verdict == "unknown":
        out["status"] = "memory" if "memory" in sr.reason else "error"
        out["error"] = sr.reason
    return out


# The regression guard's fixed programs: (name, kernel, devices). A repeating ring, a program whose
# devices do not repeat, and a deadlock (the query answers with a witness); 64 devices keeps the
# whole guard at a few seconds (the two small programs at 256 devices: a few thousand operations).
GUARD_PROGRAMS = (("allreduce-64", "allreduce", 64), ("tree-256", "tree", 256), ("deadlock-256", "deadlock", 256))
GUARD_MIN_S = 0.3  # each measurement repeats until it has run this long (at least once, at most 5 times)


def _best_rate(ops: int, fn) -> tuple[float, object]:
    """ops per second of `fn`'s fastest repetition (the least disturbed by other work on the machine)."""
    best, spent, reps, out = float("inf"), 0.0, 0, None
    while reps < 5 and (reps == 0 or spent < GUARD_MIN_S):
        t = time.perf_counter()
        out = fn()
        dt = time.perf_counter() - t
        best, spent, reps = min(best, dt), spent + dt, reps + 1
    return round(ops / best), out


def worker_quick(a: dict) -> dict:
    """The regression guard: ops per second of the model's fast run (RUN-3) and of the deadlock
    query (`deadlock_free`, lowering + stuck-vector query + witness), every mode, on fixed programs."""
    t_start = time.perf_counter()
    from semcheck.checker.frontend import provision_devices

    provision_devices(max(n for _, _, n in GUARD_PROGRAMS))
    import jax

    jax.devices()  # initialise with the most devices any program needs (the smaller ones use a subset)

    gc.disable()  # as `semcheck verify`'s checking process does
    from semcheck.checker.frontend import load
    from semcheck.checker.z3.deadlock import deadlock_free
    from semcheck.model.fast import fast_run

    programs = {}
    for name, kernel, n in GUARD_PROGRAMS:
        program = load(str(ROOT / KERNELS[kernel]), devices=n)[0].program
        fast, dead, verdicts = {}, {}, {}
        for m in MODES:
            fast[m], _ = _best_rate(program.num_ops, lambda: fast_run(program, m))

            def query():
                # a fresh analysis per call: no lowering or query answered from the previous repetition
                return deadlock_free(program, m, timeout_ms=60_000)

            dead[m], v = _best_rate(program.num_ops, query)
            verdicts[m] = v.verdict
        programs[name] = {"kernel": KERNELS[kernel], "devices": n, "ops": program.num_ops,
                          "fast_run_ops_per_s": fast, "deadlock_ops_per_s": dead, "deadlock_verdicts": verdicts}
    return {"programs": programs, "seconds": round(time.perf_counter() - t_start, 2)}


WORKERS = {
    "quick": worker_quick,
    "phases": worker_phases,
    "interpret": worker_interpret,
    "explorer": worker_explorer,
    "z3ts": worker_z3ts,
    "spin": worker_spin,
}


def worker_main(spec: str) -> int:
    a = json.loads(spec)
    try:
        out = WORKERS[a["contender"]](a)
    except BaseException as e:  # noqa: BLE001 - reported as data
        import traceback

        out = {"status": "error", "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-2000:]}
    _emit(out)
    sys.stdout.flush()
    os._exit(0)  # do not wait for stray threads (jax, z3)


# =============================================================================
# parent: run a command under time and memory caps
# =============================================================================


def _children(pid: int) -> list[int]:
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(x) for x in f.read().split()]
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        pass
    return out


def _tree(pid: int) -> list[int]:
    """`pid` and every process of its session (`run_capped` starts each run in a session of its own): a
    process whose parent exited is still in it. semcheck verify checks in a process forked by a
    forkserver, which may outlive its parent; the children walk alone missed it (its memory, and
    stopping it at a cap)."""
    seen, stack = [], [pid]
    while stack:
        p = stack.pop()
        seen.append(p)
        stack += _children(p)
    return seen + [p for p in _session(pid) if p not in seen]


def _session(sid: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()  # state, ppid, pgrp, session, ...
        except (FileNotFoundError, ProcessLookupError, PermissionError, IndexError):
            continue
        if len(fields) > 3 and int(fields[3]) == sid:
            out.append(int(name))
    return out


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (FileNotFoundError, ProcessLookupError, ValueError):
        return 0


def run_capped(cmd: list[str], *, cap_s: float, mem_cap: int, env: dict | None = None) -> dict:
    """Run `cmd`; kill its whole process tree past `cap_s` seconds or `mem_cap` bytes of summed RSS."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out_f, tempfile.TemporaryFile("w+") as err_f:
        proc = subprocess.Popen(cmd, stdout=out_f, stderr=err_f, stdin=subprocess.DEVNULL, env=env,
                                cwd=ROOT, start_new_session=True)
        killed, peak_tree, peak_one, rusage, status_code = None, 0, 0, None, None
        while True:
            pid, status_code, rusage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            elapsed = time.perf_counter() - t0
            tree = _tree(proc.pid)
            sizes = [_rss_bytes(p) for p in tree]
            rss = sum(sizes)
            peak_tree = max(peak_tree, rss)
            peak_one = max(peak_one, *sizes)  # sampled: a process the wait below does not reap counts too
            if killed is None and (elapsed > cap_s or rss > mem_cap):
                killed = "timeout" if elapsed > cap_s else "memory"
                for p in reversed(tree):  # every process here was started by this run
                    try:
                        os.kill(p, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            time.sleep(0.05 if elapsed < 2 else 0.2)
        for p in _session(proc.pid):  # whatever outlived the run (a checking process whose parent was stopped)
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.returncode = os.waitstatus_to_exitcode(status_code)
        wall = time.perf_counter() - t0
        out_f.seek(0)
        stdout = out_f.read()
        err_f.seek(0)
        stderr = err_f.read()
    return {
        "wall_s": wall,
        "returncode": proc.returncode,
        "killed": killed,
        # KiB on Linux: the largest process of the tree the wait reaped, or of the samples
        "peak_rss_mb": max(rusage.ru_maxrss / 1024, peak_one / 2**20),
        "peak_tree_rss_mb": peak_tree / 2**20,
        "stdout": stdout,
        "stderr": stderr,
    }


# =============================================================================
# parent: the sweep
# =============================================================================


def _scrub(text: str | None) -> str | None:
    """Keep results free of this machine's paths."""
    if text is None:
        return None
    text = text.replace(str(ROOT) + os.sep, "").replace(str(ROOT), ".")
    text = re.sub(r"/tmp/[\w./-]+", "<tmp>", text)
    return " ".join(text.replace(sys.executable, "python").split())


def measure(contender: str, kernel: str, n: int, args, workdir: str, *, save_program: str | None = None,
            lower_only: bool = False) -> dict:
    rec = {"kernel": kernel, "devices": n, "contender": contender}
    cap = args.time_cap
    mem_cap = int(args.mem_cap_gib * 2**30)
    prog = os.path.join(workdir, f"{kernel}-{n}.pkl")  # saved by the phases run of this size
    if contender in ("semcheck", "semcheck_nofold"):
        cli = str(Path(sys.executable).parent / "semcheck")
        cmd = [cli, "verify", KERNELS[kernel], "--devices", str(n), "--dma-mode", "all", "--format", "json",
               "--timeout", str(cap), "--no-cache", "--no-config"]  # every run verifies afresh
        if contender == "semcheck_nofold":
            cmd.append("--no-fold")  # every device checked (spec RUN-7)
        if args.ignore:  # a property left out, to see what the others cost (recorded in the settings)
            cmd += ["--ignore", args.ignore]
    else:
        if contender == "interpret" and kernel in HANGS:
            cap = min(cap, args.hang_cap)  # it hangs: how long it ran without an answer is all there is to say
        if contender in ("explorer", "z3ts", "spin") and not os.path.exists(prog):
            rec.update(status="error", error="the lowered program is missing (the phases run failed)")
            return rec
        spec = {"contender": contender, "kernel_path": KERNELS[kernel], "devices": n, "cap": cap,
                "mem_cap_gib": args.mem_cap_gib, "program": prog, "save_program": save_program,
                "lower_only": lower_only}
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(spec)]
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONUNBUFFERED="1")
    r = run_capped(cmd, cap_s=cap + 3, mem_cap=mem_cap, env=env)  # a little grace for self-timed workers
    rec["wall_s"] = round(r["wall_s"], 4)
    rec["peak_rss_mb"] = round(max(r["peak_rss_mb"], r["peak_tree_rss_mb"] if r["killed"] else 0), 1)
    if r["killed"]:
        rec["status"] = r["killed"]
        rec["error"] = f"killed past the {'time' if r['killed'] == 'timeout' else 'memory'} cap"
        partial = _last_result(r["stdout"])
        if partial:  # what the run had done by then
            partial.pop("status", None)
            partial.pop("pickle_s", None)
            rec["partial"] = True
            rec.update({k: v for k, v in partial.items() if k not in rec})
            if "phases" in rec:
                rec["phases"] = {k: round(v, 4) for k, v in rec["phases"].items()}
        return rec
    if contender in ("semcheck", "semcheck_nofold"):
        try:
            report = json.loads(r["stdout"])
        except ValueError:
            rec["status"] = "timeout" if "timeout" in r["stderr"] else "error"
            rec["error"] = _scrub((r["stderr"].strip() or r["stdout"].strip())[-600:])
            rec["exit_code"] = r["returncode"]
            return rec
        rec["exit_code"] = r["returncode"]
        results = report.get("results") or []
        # every verdict, to compare the folded run with the no-fold one
        rec["verdicts"] = {(f"{x['target']}/" if x.get("target") else "") + f"{x.get('dma_mode')}:{x.get('property')}":
                           x.get("verdict") for x in results}
        # results decided on a fold (their stats name it): none may be with --no-fold
        rec["folded_results"] = sum(1 for x in results if isinstance(x.get("stats"), dict) and x["stats"].get("fold"))
        rec["violated"] = sorted(f"{x['dma_mode']}:{x['property']}" for x in results if x.get("verdict") == "violated")
        rec["violated_with_witness"] = sum(1 for x in results if x.get("verdict") == "violated" and x.get("witness"))
        unknown = [x for x in results if x.get("verdict") == "unknown"]
        rec["unknown"] = sorted(f"{x['dma_mode']}:{x['property']}" for x in unknown)
        # race-free gives up at once when its happens-before run has no certificate and restricted runs
        # would pass their work budget (model/race.py work_estimate): the other properties are still answers
        budget = [x for x in unknown if x.get("property") == "race-free" and "more than semcheck spends"
                  in (x.get("reason") or "")]
        if budget:
            rec["race_free_over_budget"] = True
        if r["returncode"] in (0, 1) or (r["returncode"] == 3 and unknown and len(budget) == len(unknown)):
            rec["status"] = "ok"  # proved, or a violation found: an answer either way
        elif r["returncode"] == 3:  # something unknown: out of time, or unsupported
            rec["status"] = "timeout" if "timeout" in (r["stderr"] + r["stdout"]).lower() else "unknown"
            rec["error"] = _scrub(r["stderr"].strip()[-600:])
        else:
            rec["status"] = "error"
        if rec["status"] == "ok":
            rec["time_s"] = rec["wall_s"]
        rec["verdict"] = report.get("summary")
        return rec
    result = _last_result(r["stdout"])
    if result is None or result.get("status") == "partial":
        rec.update(status="error", error=_scrub(f"worker died (exit {r['returncode']}): {r['stderr'][-600:]}"))
        return rec
    rec["status"] = result.pop("status", "ok")
    if "error" in result:
        rec["error"] = _scrub(result.pop("error"))
    result.pop("traceback", None)
    if contender in ("phases", "interpret"):
        rec["time_s"] = round(rec["wall_s"] - result.pop("pickle_s", 0), 4)
    elif "compute_s" in result:
        rec["time_s"] = round(result.pop("compute_s"), 4)
    if "phases" in result:
        result["phases"] = {k: round(v, 4) for k, v in result["phases"].items()}
    rec.update(result)
    return rec


def environment() -> dict:
    def version(cmd):
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
            return (p.stdout + p.stderr).strip().splitlines()[0]
        except (OSError, IndexError, subprocess.SubprocessError):
            return None

    env = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "spin": version(["spin", "-V"]) if shutil.which("spin") else None,
        "gcc": version(["gcc", "--version"]) if shutil.which("gcc") else None,
    }
    for mod in ("jax", "z3", "numpy"):
        try:
            m = __import__(mod)
            env[mod] = getattr(m, "__version__", None) or (m.get_version_string() if mod == "z3" else None)
        except Exception:  # noqa: BLE001
            env[mod] = None
    return env


def _predict_exceeds(history: list[dict], n_next: int, cap: float) -> float | None:
    """The time the next size would take if the last doubling's growth went on, when that is past the cap."""
    ok = [h for h in history if h.get("status") == "ok" and h.get("time_s")]
    if len(ok) < 2:
        return None
    a, b = ok[-2], ok[-1]
    if a["time_s"] < 1.0 or b["devices"] <= a["devices"]:
        return None  # too small to extrapolate from noise
    import math

    growth = (b["time_s"] / a["time_s"]) ** (math.log(n_next / b["devices"]) / math.log(b["devices"] / a["devices"]))
    predicted = b["time_s"] * max(growth, 1.0)
    return predicted if predicted > cap else None


def _compare_verdicts(rec: dict, folded: dict | None) -> None:
    """Mark a no-fold run with whether its verdicts are the folded run's (they must be: RUN-7)."""
    if folded is None or rec.get("status") != "ok" or folded.get("status") != "ok":
        return  # nothing to compare (one of them gave no answer)
    a, b = folded.get("verdicts") or {}, rec.get("verdicts") or {}
    rec["verdicts_differ"] = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    rec["verdicts_agree"] = not rec["verdicts_differ"]
    if not rec["verdicts_agree"]:
        print(f"VERDICTS DIFFER with and without the fold: {rec['kernel']} at {rec['devices']} devices: "
              + ", ".join(f"{k} {a.get(k)} folded, {b.get(k)} not" for k in rec["verdicts_differ"]), flush=True)


def sweep(args) -> list[dict]:
    """Two passes, sizes ascending within each: semcheck and interpret mode, then the baselines.

    The first pass runs one measurement at a time and saves each size's
    lowered program for the second. The second runs each (kernel, baseline)
    as a chain of sizes, `--jobs` runs at a time (the baselines are
    single-threaded), smallest next size first; the time budget
    (`--budget-min`) only cuts this pass, so semcheck's own measurements are
    always complete; the budget's clock leaves out the no-fold runs, so adding
    them cost the baselines nothing.
    """
    import threading
    from concurrent.futures import ThreadPoolExecutor

    records: list[dict] = []
    lock = threading.Lock()
    workdir = tempfile.mkdtemp(prefix="semcheck-bench-")
    stopped: dict[tuple[str, str], str] = {}  # (kernel, contender) -> why it runs no larger sizes
    lowering_locks: dict[tuple[str, int], threading.Lock] = {}
    t_begin = time.perf_counter()
    # the no-fold runs came after the budget was set: their time does not count against the baselines'
    unbudgeted = [0.0]
    first = [c for c in ("phases", "semcheck", "semcheck_nofold", "interpret") if c in args.contenders]
    baselines = [c for c in args.contenders if c in ("explorer", "z3ts", "spin")]

    def program_path(kernel: str, n: int) -> str:
        return os.path.join(workdir, f"{kernel}-{n}.pkl")

    def run_one(c: str, kernel: str, n: int, **extra) -> dict:
        t = time.perf_counter() - t_begin
        rec = measure(c, kernel, n, args, workdir, **extra)
        if c == "semcheck_nofold":
            unbudgeted[0] += time.perf_counter() - t_begin - t
            with lock:
                _compare_verdicts(rec, next((r for r in records if r["kernel"] == kernel and r["devices"] == n
                                             and r["contender"] == "semcheck"), None))
        shown = rec.get("time_s", rec.get("wall_s")) or 0
        print(f"[{t:7.1f}s] {kernel:9s} {n:4d} {c:15s} {rec['status']:8s} {shown:8.2f} s "
              f"{rec.get('peak_rss_mb', 0) or 0:8.0f} MB  {(rec.get('error') or '')[:90]}", flush=True)
        if rec["status"] in ("timeout", "memory") and not extra.get("lower_only"):
            with lock:
                stopped[(kernel, c)] = (f"a smaller size exceeded the "
                                        f"{'time' if rec['status'] == 'timeout' else 'memory'} cap")
        return rec

    def attempt(c: str, kernel: str, n: int, *, budgeted: bool, prepare=None, **extra) -> None:
        rec = {"kernel": kernel, "devices": n, "contender": c}
        with lock:
            hist = [r for r in records if r["kernel"] == kernel and r["contender"] == c]
        # semcheck's own time is not monotone in the size: race-free is decided up to a work budget and
        # answers unknown at once past it, so a slow middle size says nothing about the next one
        extrapolate = args.extrapolate and c not in ("semcheck", "semcheck_nofold", "phases")
        predicted = _predict_exceeds(hist, n, args.time_cap) if extrapolate else None
        if budgeted and args.budget_min and time.perf_counter() - t_begin - unbudgeted[0] > args.budget_min * 60:
            rec.update(status="skipped", error="the sweep's overall time budget was used up")
        elif (kernel, c) in stopped:
            rec.update(status="skipped", error=stopped[(kernel, c)])
        elif predicted is not None:
            rec.update(status="skipped", error=f"extrapolated from the last doubling: about {predicted:.0f} s, "
                                               f"past the {args.time_cap:g} s cap")
            with lock:
                stopped[(kernel, c)] = "a smaller size was predicted to exceed the time cap"
        else:
            if prepare is not None:
                prepare()
            rec = run_one(c, kernel, n, **extra)
        with lock:
            records.append(rec)

    def ensure_program(kernel: str, n: int) -> None:
        with lock:
            lk = lowering_locks.setdefault((kernel, n), threading.Lock())
        with lk:  # one chain lowers a missing program, the others wait for it
            if not os.path.exists(program_path(kernel, n)):
                rec = run_one("phases", kernel, n, save_program=program_path(kernel, n), lower_only=True)
                rec["auxiliary"] = True  # only lowered the program for the baselines
                with lock:
                    records.append(rec)

    try:
        for n in args.sizes:
            for kernel in args.kernels:
                for c in first:
                    if c == "semcheck_nofold" and kernel not in NOFOLD_KERNELS:
                        continue  # no fold to turn off: its `semcheck` run already checks every device
                    save = program_path(kernel, n) if (c == "phases" and baselines) else None
                    attempt(c, kernel, n, budgeted=False, save_program=save)
        # Each (kernel, baseline) is a chain of sizes, run in order; the free worker takes the
        # chain whose next size is smallest, so every kernel gets its small sizes before the
        # budget can cut anything, and only the largest sizes are left to it.
        nxt = {(k, c): 0 for k in args.kernels for c in baselines}
        busy: set = set()
        cond = threading.Condition(lock)

        def worker() -> None:
            while True:
                with cond:
                    while True:
                        ready = [ch for ch, i in nxt.items() if i < len(args.sizes) and ch not in busy]
                        if ready or not busy:
                            break
                        cond.wait()
                    if not ready:
                        cond.notify_all()
                        return
                    ch = min(ready, key=lambda ch: (args.sizes[nxt[ch]], args.kernels.index(ch[0]),
                                                    baselines.index(ch[1])))
                    busy.add(ch)
                    n = args.sizes[nxt[ch]]
                kernel, c = ch
                try:
                    attempt(c, kernel, n, budgeted=True, prepare=lambda: ensure_program(kernel, n))
                finally:
                    with cond:
                        nxt[ch] += 1
                        busy.discard(ch)
                        cond.notify_all()

        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            for f in [pool.submit(worker) for _ in range(max(1, args.jobs))]:
                f.result()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    order = {c: i for i, c in enumerate(CONTENDERS)}
    records.sort(key=lambda r: (args.kernels.index(r["kernel"]), r["devices"], order[r["contender"]],
                                bool(r.get("auxiliary"))))
    return records


def parse_args(argv):
    ap = argparse.ArgumentParser(description="Benchmark semcheck against interpret mode, a naive explorer, "
                                             "a naive SMT encoding and SPIN.")
    ap.add_argument("--kernels", default=",".join(KERNELS), help=f"comma list of {', '.join(KERNELS)}")
    ap.add_argument("--sizes", default=None, help="device counts, e.g. 2,4,8 (default 2..256, powers of two)")
    ap.add_argument("--contenders", default=",".join(CONTENDERS), help=f"comma list of {', '.join(CONTENDERS)}")
    ap.add_argument("--quick", action="store_true",
                    help="the regression guard (a few seconds): ops per second of the fast run and the deadlock "
                         "query on fixed programs, appended to --out's history.jsonl; no sweep")
    ap.add_argument("--smoke", action="store_true", help="a sweep at tiny sizes (2,4) with small caps")
    ap.add_argument("--real", action="store_true",
                    help="no sweep: the shipped-style kernels, semcheck verify at 2,4,8 against one interpret-mode "
                         "run at 2, as ratios (bench/real_kernels.py; --kernels and --out are passed on)")
    ap.add_argument("--merge", action="store_true",
                    help="keep --out's records of the kernels not run this time (each kernel's rows stay "
                         "from one run; results.md names the run of each)")
    ap.add_argument("--time-cap", type=float, default=None, help="seconds per run (default 120; --smoke 30)")
    ap.add_argument("--hang-cap", type=float, default=20.0,
                    help="seconds an interpret-mode run of a kernel that hangs (a deadlock) gets (default 20)")
    ap.add_argument("--mem-cap-gib", type=float, default=None, help="GiB per run (default 8; --smoke 2)")
    ap.add_argument("--no-extrapolate", dest="extrapolate", action="store_false",
                    help="run every size until a run actually exceeds a cap")
    ap.add_argument("--jobs", type=int, default=2,
                    help="baseline chains run in parallel (default 2; semcheck and interpret always run alone)")
    ap.add_argument("--budget-min", type=float, default=None,
                    help="after this many minutes (the --no-fold runs not counted), run only semcheck's own "
                         "measurements (default 21; 0: no limit)")
    ap.add_argument("--ignore", default="", metavar="PROPERTY[,...]",
                    help="passed to semcheck verify: properties its runs do not check (default: none)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"), help="results directory")
    ap.add_argument("--report-only", action="store_true",
                    help="only rewrite results.md and the plot from --out's results.json")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker or args.real:  # --real's kernels are examples' names (bench/real_kernels.py)
        return args
    args.kernels = [k.strip() for k in args.kernels.split(",") if k.strip()]
    args.contenders = [c.strip() for c in args.contenders.split(",") if c.strip()]
    bad = [k for k in args.kernels if k not in KERNELS] + [c for c in args.contenders if c not in CONTENDERS]
    if bad:
        ap.error(f"unknown kernel or contender: {', '.join(bad)}")
    if args.sizes:
        args.sizes = sorted({int(x) for x in args.sizes.split(",") if x.strip()})
    else:
        args.sizes = list(QUICK_SIZES if args.smoke else FULL_SIZES)
    if args.time_cap is None:
        args.time_cap = 30.0 if args.smoke else 120.0
    if args.budget_min is None:
        args.budget_min = 21.0
    if args.mem_cap_gib is None:
        args.mem_cap_gib = 2.0 if args.smoke else 8.0
    return args


def _last_result(stdout: str) -> dict | None:
    result = None
    for line in stdout.splitlines():
        if line.startswith(MARK):
            result = json.loads(line[len(MARK):])
    return result


def _public_argv(argv: list[str]) -> list[str]:
    """The command line minus the output directory (a path on this machine)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--out":
            skip = True
        elif not a.startswith("--out="):
            out.append(a)
    return out


def _geomean(xs) -> float | None:
    import math

    xs = [x for x in xs if x]
    return round(math.exp(sum(math.log(x) for x in xs) / len(xs))) if xs else None


def _git(*cmd: str) -> str | None:
    try:
        p = subprocess.run(["git", *cmd], capture_output=True, text=True, cwd=ROOT, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return p.stdout.strip() if p.returncode == 0 else None


def quick_guard(args) -> int:
    """`--quick`: measure the guard's throughputs in a fresh process, append one line to history.jsonl."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    spec = {"contender": "quick", "cap": 120}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(spec)]
    r = run_capped(cmd, cap_s=120, mem_cap=int(4 * 2**30), env=dict(os.environ, JAX_PLATFORMS="cpu"))
    res = _last_result(r["stdout"])
    if r["killed"] or not res or res.get("status") == "error":
        why = (res or {}).get("error") or r["killed"] or r["stderr"][-600:]
        print(f"the regression guard failed: {_scrub(why)}", file=sys.stderr)
        return 1
    progs = res["programs"]
    line = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "commit": _git("rev-parse", "--short=12", "HEAD"),
        # tracked files changed since that commit: the numbers are of a working tree, not of the commit
        "dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "seconds": res["seconds"],
        "fast_run_ops_per_s": _geomean(v for p in progs.values() for v in p["fast_run_ops_per_s"].values()),
        "deadlock_ops_per_s": _geomean(v for p in progs.values() for v in p["deadlock_ops_per_s"].values()),
        "programs": progs,
    }
    hist = out / "history.jsonl"
    previous = []
    if hist.exists():
        for text in hist.read_text().splitlines():
            try:
                previous.append(json.loads(text))
            except ValueError:
                continue
    with hist.open("a") as f:
        f.write(json.dumps(line, sort_keys=True) + "\n")
    print(f"regression guard ({res['seconds']:.1f} s): fast run {line['fast_run_ops_per_s']:,} ops/s, "
          f"deadlock query {line['deadlock_ops_per_s']:,} ops/s (geometric means over "
          f"{len(progs)} programs x {len(MODES)} modes)")
    for name, p in progs.items():
        print(f"  {name:13s} {p['ops']:7,} ops  fast run " + ", ".join(f"{m} {v:,}" for m, v in
              p["fast_run_ops_per_s"].items()) + "  | deadlock " + ", ".join(
              f"{m} {v:,} ({p['deadlock_verdicts'][m]})" for m, v in p["deadlock_ops_per_s"].items()))
    same = [p for p in previous if set(p.get("programs") or ()) == set(progs)]  # the same fixed programs
    recent = [p for p in same[-5:] if p.get("fast_run_ops_per_s") and p.get("deadlock_ops_per_s")]
    if recent:
        import statistics

        for key, what in (("fast_run_ops_per_s", "fast run"), ("deadlock_ops_per_s", "deadlock query")):
            base = statistics.median(p[key] for p in recent)
            print(f"  {what}: {line[key] / base:.2f} x the median of the last {len(recent)} line(s)")
    print(f"appended to {hist}")
    return 0


def merge(old: dict, new: dict) -> dict:
    """`new` plus `old`'s records of the kernels `new` did not run; each kernel keeps the run it came from."""
    kept = [k for k in old["settings"]["kernels"] if k not in new["settings"]["kernels"]]
    old_run = {k: old[k] for k in ("started", "total_s", "command")}
    runs = {k: (old.get("runs") or {}).get(k, old_run) for k in kept}
    runs.update(new["runs"])
    order = list(KERNELS)
    kernels = sorted(set(kept) | set(new["settings"]["kernels"]), key=lambda k: order.index(k) if k in order else 99)
    out = dict(new)
    out["settings"] = dict(new["settings"], kernels=kernels,
                           sizes=sorted(set(new["settings"]["sizes"]) | set(old["settings"]["sizes"])),
                           kernel_files={k: KERNELS.get(k, old["settings"].get("kernel_files", {}).get(k))
                                         for k in kernels})
    out["runs"] = {k: runs[k] for k in kernels}
    recs = [r for r in old["records"] if r["kernel"] in kept] + new["records"]
    recs.sort(key=lambda r: kernels.index(r["kernel"]))
    out["records"] = recs
    out["total_s"] = round(sum(r["total_s"] for r in {json.dumps(v, sort_keys=True): v
                                                      for v in out["runs"].values()}.values()), 1)
    return out


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.worker:
        return worker_main(args.worker)
    if args.quick:
        return quick_guard(args)
    if args.real:
        import real_kernels

        given = [] if args.kernels == ",".join(KERNELS) else ["--kernels", args.kernels]
        return real_kernels.main([*given, "--out", args.out])
    import report

    if args.report_only:
        out = Path(args.out)
        data = json.loads((out / "results.json").read_text())
        data["fits"] = report.fit_exponents(data["records"])
        (out / "results.json").write_text(json.dumps(data, indent=1) + "\n")
        (out / "results.md").write_text(report.markdown(data))
        report.plot(data, out / "time_vs_devices.png")
        print(report.fits_text(data["fits"]))
        return 0
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    t0 = time.perf_counter()
    load_start = os.getloadavg()[1]  # what else ran: on a shared machine wall times scale with it
    records = sweep(args)
    data = {
        "started": started,
        "total_s": round(time.perf_counter() - t0, 1),
        "command": " ".join(["bench/run.py"] + _public_argv(argv if argv is not None else sys.argv[1:])),
        "settings": {"kernels": args.kernels, "sizes": args.sizes, "contenders": args.contenders,
                     "time_cap_s": args.time_cap, "mem_cap_gib": args.mem_cap_gib,
                     "extrapolate": args.extrapolate, "baseline_mode": BASELINE_MODE, "jobs": args.jobs,
                     "budget_min": args.budget_min, "ignore": args.ignore,
                     "kernel_files": {k: KERNELS[k] for k in args.kernels}},
        "environment": dict(environment(), load_5min=[round(load_start, 2), round(os.getloadavg()[1], 2)]),
        "records": records,
    }
    out = Path(args.out)
    run = {k: data[k] for k in ("started", "total_s", "command")}
    data["runs"] = {k: run for k in args.kernels}  # kernel -> the run its rows come from
    if args.merge and (out / "results.json").exists():
        data = merge(json.loads((out / "results.json").read_text()), data)
    data["fits"] = report.fit_exponents(data["records"])
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(data, indent=1) + "\n")
    (out / "results.md").write_text(report.markdown(data))
    plotted = report.plot(data, out / "time_vs_devices.png")
    print()
    print(report.fits_text(data["fits"]))
    print(f"wrote {out / 'results.json'}, {out / 'results.md'}" + (f", {plotted}" if plotted else " (no plot: "
                                                                                   "matplotlib missing)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
