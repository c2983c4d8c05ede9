"""CPU time by phase of one kernel at one device count, in one process (bench/README.md "Past 256 devices").

    python bench/scale_phases.py examples/ring_allreduce.py 1024
    python bench/scale_phases.py bench/kernels/torus_halo_2d.py 4096 8960 --out bench/results/scale/phases.jsonl

Every property but invocation-confined (`--confined`: every property), all three modes, `check_program`
per mode on one `Analysis` (as `semcheck verify` shares it), the cyclic collector off (as the verify child runs); prints one JSON
line per device count: operations, CPU seconds of the trace (the builder staged, with an abstract mesh
past 256 devices: RUN-14), of the lowering, of DR-5's symmetry, of each mode, the total with the jax
import, the peak resident memory, and whether jax's backend was started (False: no device was made).
A program past RUN-13's size bound is not built: its line gives the estimate and the refusal instead.
Several device counts run one process each (the peak is a process's), one after the other.
`--rows FILE` (one device count) also writes every verdict whole, for comparing two checkouts.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
import time


def main(path: str, devices: int, confined: bool = False, rows: str | None = None) -> dict:
    t_start = time.process_time()
    from semcheck.checker.frontend import provision_devices

    provision_devices(devices)  # read only if a backend starts: an abstract-mesh trace starts none (RUN-14)
    import jax  # noqa: F401 - timed: every run pays it

    gc.disable()
    from jax._src import xla_bridge

    from semcheck.checker.properties.analysis import Analysis
    from semcheck.checker.properties.checking import check_program
    from semcheck.checker.frontend.api import lower_all
    from semcheck.checker.frontend.concrete_inputs import trace_with_inputs
    from semcheck.checker.frontend.size_bound import ProgramTooLarge, estimate
    from semcheck.checker.frontend.targets import abstract_mesh_wanted, load_targets
    from semcheck.checker.properties.registry import IDS

    out: dict = {"kernel": path, "devices": devices, "abstract_mesh": abstract_mesh_wanted(devices)}
    out["import_s"] = round(time.process_time() - t_start, 2)
    t = time.process_time()
    (target,) = load_targets(path)
    built = target.build_shapes(devices)
    if built is None:
        built = target.build(devices)
    traced = trace_with_inputs(*built, path=target.path)
    out["trace_s"] = round(time.process_time() - t, 2)
    out["mesh"] = list(traced[0][0].mesh.axis_sizes)
    est = estimate(traced[0][0])
    out["estimated_ops"] = est.ops
    t = time.process_time()
    try:
        kernels = lower_all(target, devices, traced, cores=None, dma_mode=None)
    except ProgramTooLarge as e:
        out["refused"] = str(e)
        return _finish(out, t_start, xla_bridge)
    out["lower_s"] = round(time.process_time() - t, 2)
    program = kernels[0].program
    out["ops"] = program.num_ops
    out["period"] = getattr(program, "period", None)  # RUN-22: lowered by one period (a Symmetric), or None
    analysis = Analysis(program, modes=("eager", "on_wait", "hardware"))
    t = time.process_time()
    analysis.symmetry
    out["symmetry_s"] = round(time.process_time() - t, 2)
    props = IDS if confined else tuple(p for p in IDS if p != "invocation-confined")
    out["properties"] = "every" if confined else "every but invocation-confined"
    verdicts = {}
    written = []
    for mode in ("eager", "on_wait", "hardware"):
        t = time.process_time()
        for v in check_program(program, mode, props, analysis=analysis):
            verdicts[f"{mode}:{v.property}"] = v.verdict
            if rows:
                written.append(_row(mode, v))
        out[f"{mode}_s"] = round(time.process_time() - t, 2)
    out["verdicts"] = sorted(set(verdicts.values()))
    if rows:  # written after the timing: two checkouts' files compare line by line
        with open(rows, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(r, sort_keys=True) + "\n" for r in written)
    return _finish(out, t_start, xla_bridge)


def _row(mode: str, v) -> dict:
    """One verdict whole: reason, witness message, schedule, blocked cores and every detail (exit-balance's
    per-device warnings, the timeline), with the checkout's root taken out of file names."""
    w = v.witness
    row = {"mode": mode, "property": v.property, "verdict": v.verdict, "reason": v.reason, "witness": None if w is None
           else {"message": w.message, "schedule": [list(a) for a in w.schedule], "blocked": [list(b) for b in w.blocked],
                 "details": w.details}}
    return json.loads(json.dumps(row, default=str).replace(os.getcwd() + os.sep, ""))


def _finish(out: dict, t_start: float, xla_bridge) -> dict:
    out["total_s"] = round(time.process_time() - t_start, 2)
    out["peak_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    out["backend_started"] = bool(xla_bridge.backends_are_initialized())
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path")
    ap.add_argument("devices", type=int, nargs="+")
    ap.add_argument("--out", help="append each JSON line to this file too")
    ap.add_argument("--confined", action="store_true", help="invocation-confined too (every property)")
    ap.add_argument("--rows", help="with one device count: write every verdict whole to this file, a JSON line each")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # a child: one count, here
    a = ap.parse_args()
    if a.rows and len(a.devices) > 1:
        ap.error("--rows takes one device count")
    if a.one:
        print(json.dumps(main(a.path, a.devices[0], a.confined, a.rows)), flush=True)
        sys.exit(0)
    for n in a.devices:
        env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
        extra = (["--confined"] if a.confined else []) + (["--rows", a.rows] if a.rows else [])
        proc = subprocess.run([sys.executable, __file__, a.path, str(n), "--one"] + extra, env=env,
                              capture_output=True, text=True)
        lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
        if proc.returncode != 0 or not lines:
            print(json.dumps({"kernel": a.path, "devices": n, "failed": proc.stderr.strip()[-500:]}), flush=True)
            continue
        row = json.loads(lines[-1])
        row["load_1min"] = round(os.getloadavg()[0], 1)
        print(json.dumps(row), flush=True)
        if a.out:
            with open(a.out, "a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")
