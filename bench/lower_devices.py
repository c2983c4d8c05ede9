"""CPU time to lower some devices of a kernel (`lower_kernel(devices=...)`), in one process
(bench/README.md "Lowering some devices").

    python bench/lower_devices.py examples/ring_allreduce.py 8960 [--devices 0,1] [--whole] [--one-at-a-time]

The kernel is traced on an abstract mesh of N devices (`jax.make_mesh` returns a
`jax.sharding.AbstractMesh`), so jax provisions no N fake devices; prints one JSON line: the CPU
seconds of the trace and of the lowering, the grid points and how many ran as lanes, the operations
of the lowered cores, and the peak resident memory. `--whole` lowers every device instead;
`--one-at-a-time` evaluates grid steps and loop iterations one by one (what the lanes save).
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time


def main(path: str, n: int, devices: list[int] | None, one_at_a_time: bool = False) -> dict:
    import jax

    if one_at_a_time:
        from semcheck.checker.frontend import control_flow, grid

        grid.GridRules._run_as_lanes = lambda self, points, args: False
        control_flow.ControlFlowRules._scan_as_lanes = lambda self, *args: None

    jax.make_mesh = lambda shape, names, **_: jax.sharding.AbstractMesh(tuple(shape), tuple(names))
    from semcheck.checker.frontend.concrete_inputs import trace_with_inputs
    from semcheck.checker.frontend.lower import LoweringStats, lower_kernel
    from semcheck.checker.frontend.targets import load_targets

    target = load_targets(path)[0]
    t0 = time.process_time()
    built = target.build_shapes(n) or target.build(n)
    calls, inputs = trace_with_inputs(*built, path=target.path)
    t1 = time.process_time()
    stats = LoweringStats()
    lowered = [lower_kernel(call, cores=target.cores, inputs=values, stats=stats, devices=devices)
               for call, values in zip(calls, inputs)]
    t2 = time.process_time()
    # the launched cores (LAUNCH-1): `PartialLowering.cores` wraps every device's (empty) bodies once
    ops = sum(p.num_ops if devices is None else sum(map(len, p.cores().values())) for p in lowered)
    t3 = time.process_time()
    return {"kernel": path, "num_devices": n, "lowered": "all" if devices is None else devices,
            "trace_s": round(t1 - t0, 3), "lower_s": round(t2 - t1, 3), "launch_s": round(t3 - t2, 3),
            "grid_points": stats.grid_points,
            "grid_points_as_lanes": stats.grid_points_as_lanes, "ops": ops,
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kernel")
    parser.add_argument("num_devices", type=int)
    parser.add_argument("--devices", default="0", help="comma-separated device ids (default: 0)")
    parser.add_argument("--whole", action="store_true", help="lower every device")
    parser.add_argument("--one-at-a-time", action="store_true", help="no grid steps or loop iterations as lanes")
    ns = parser.parse_args()
    chosen = None if ns.whole else [int(d) for d in ns.devices.split(",")]
    print(json.dumps(main(ns.kernel, ns.num_devices, chosen, ns.one_at_a_time)))
    sys.exit(0)
