"""CPU time by phase of one kernel at one device count, in one process (bench/README.md "Past 256 devices").

    python bench/scale_phases.py examples/ring_allreduce.py 1024

Every property but invocation-confined, all three modes, `check_program` per mode on one `Analysis`
(as `semcheck verify` shares it), the cyclic collector off (as the verify child runs); prints one JSON
line: operations, CPU seconds of trace + lower, of DR-5's symmetry, of each mode, the total with the
jax import, and the peak resident memory.
"""

from __future__ import annotations

import gc
import json
import resource
import sys
import time


def main(path: str, devices: int) -> dict:
    t_start = time.process_time()
    from semcheck.checker.frontend import provision_devices

    provision_devices(devices)
    import jax  # noqa: F401 - timed: every run pays it

    gc.disable()
    from semcheck.checker.analysis import Analysis
    from semcheck.checker.checking import check_program
    from semcheck.checker.frontend import load
    from semcheck.checker.properties import IDS

    out: dict = {"kernel": path, "devices": devices}
    t = time.process_time()
    kernels = load(path, devices=devices)
    out["trace_lower_s"] = round(time.process_time() - t, 2)
    program = kernels[0].program
    out["ops"] = program.num_ops
    analysis = Analysis(program, modes=("eager", "on_wait", "hardware"))
    t = time.process_time()
    analysis.symmetry
    out["symmetry_s"] = round(time.process_time() - t, 2)
    props = tuple(p for p in IDS if p != "invocation-confined")
    verdicts = {}
    for mode in ("eager", "on_wait", "hardware"):
        t = time.process_time()
        for v in check_program(program, mode, props, analysis=analysis):
            verdicts[f"{mode}:{v.property}"] = v.verdict
        out[f"{mode}_s"] = round(time.process_time() - t, 2)
    out["total_s"] = round(time.process_time() - t_start, 2)
    out["peak_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    out["verdicts"] = sorted(set(verdicts.values()))
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], int(sys.argv[2]))))
