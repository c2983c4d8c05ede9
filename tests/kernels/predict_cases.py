"""Child-process helper: lower ground-truth cases at one device count and print predictions as JSON.

Usage: python predict_cases.py DEVICES < cases.json   (a list of {path, dma_mode, kwargs})
Each device count needs its own process: jax is provisioned with that many host devices first.
"""

from __future__ import annotations

import json
import sys


def main() -> int:
    n = int(sys.argv[1])
    from semcheck.checker.frontend import load, provision_devices

    provision_devices(n)
    from predict import predict  # tests/kernels/predict.py, beside this script (its directory is on sys.path)

    from semcheck.checker.properties.failing_facts import view_ops
    from semcheck.checker.properties.followed_values import not_facts
    from semcheck.model.ops import DmaStart

    out = []
    lowered: dict = {}
    for case in json.load(sys.stdin):
        key = (case["path"], json.dumps(case.get("kwargs") or {}, sort_keys=True))
        try:
            if key not in lowered:
                lowered[key] = load(case["path"], devices=n, build_kwargs=case.get("kwargs") or None)
            (kernel,) = lowered[key]
            why = not_facts(kernel.program, case["dma_mode"])
            if why is not None:  # ACC-9: the lowered program may not be the kernel's: no prediction
                out.append({**case, "prediction": {"outcome": "unknown", "error_message": why}})
                continue
            copies = [op for op in view_ops(kernel.program) if type(op) is DmaStart and op.nbytes > 0]
            if copies and case["dma_mode"] == "on_wait":  # ACC-10: it raises if a waiter runs it; not modelled
                out.append({**case, "prediction": {"outcome": "unknown", "error_message": (
                    f"the copy at {copies[0].loc} raises under on_wait when a waiter runs its task")}})
                continue
            p = predict(kernel.program, case["dma_mode"])
            topo = kernel.program.topology
            report = {
                "outcome": p.outcome,
                "error_type": p.error_type,
                "error_message": p.error_message,
                "may_error": [list(e) for e in p.may_error],
                "nonzero_count_warnings": [
                    f"Semaphore {s} has non-zero count for {topo.device_of(c)} (global core {c})"
                    f" at kernel exit: {v}"
                    for s, c, v in p.leaks
                ],
            }
        except Exception as e:  # reported per case; the test shows it
            report = {"outcome": "frontend-error", "error_type": type(e).__name__, "error_message": str(e)}
        out.append({**case, "prediction": report})
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
