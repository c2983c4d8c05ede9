"""Load kernel files with the front end in a fresh process and describe the result.

    python tests/frontend/probe.py --devices 4 file.py[::target] ...

prints one JSON line per spec (after a marker): either the lowered kernels
(names, topology, op counts per core and kind, labels, warnings, timings) or
the front-end error (class, code, primitive, reason, location). Nothing here
runs the kernel.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time
from typing import Any

MARKER = "@@FRONTEND_PROBE@@ "


def describe(kernel: Any) -> dict[str, Any]:
    prog = kernel.program
    kinds = collections.Counter(type(op).__name__ for core in prog.cores for op in core)
    return {
        "target": kernel.target,
        "name": kernel.name,
        "mode": kernel.mode,
        "devices": prog.topology.num_devices,
        "cores_per_device": prog.topology.cores_per_device,
        "collective_id": prog.collective_id,
        "mesh": kernel.mesh.shape,
        "num_ops": prog.num_ops,
        "ops_per_core": [len(c) for c in prog.cores],
        "kinds": dict(kinds),
        "warnings": list(kernel.warnings),
        "launch_failure": None if prog.launch_failure is None else prog.launch_failure.message,
        "lower_seconds": kernel.stats.seconds,
        "loc": [os.path.basename(kernel.loc.file), kernel.loc.line],
        "cores": [[_op(op) for op in core] for core in prog.cores] if prog.num_ops <= 4000 else None,
    }


def _op(op: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"op": type(op).__name__}
    for field in ("label", "count", "site", "scope", "inc", "device", "core", "value", "kind", "nbytes",
                  "name", "memory_space"):
        if hasattr(op, field):
            v = getattr(op, field)
            out[field] = sorted(v) if isinstance(v, frozenset) else v
    for field in ("sem", "dst_sem", "src_sem"):
        if hasattr(op, field):
            ref = getattr(op, field)
            out[field] = None if ref is None else [ref.label, ref.index]
    if hasattr(op, "participants"):
        out["participants"] = sorted(op.participants)
    loc = getattr(op, "loc", None)
    if loc is not None:
        out["line"] = loc.line
        out["file"] = os.path.basename(loc.file)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--devices", type=int, required=True)
    parser.add_argument("--cores", type=int, default=None)
    parser.add_argument("--dma-mode", default=None)
    parser.add_argument("--entry", default=None)
    parser.add_argument("specs", nargs="+")
    ns = parser.parse_args(argv)

    from semcheck.checker import frontend

    for spec in ns.specs:
        result: dict[str, Any] = {"spec": spec, "devices": ns.devices}
        t0 = time.perf_counter()
        try:
            kernels = frontend.load(spec, entry=ns.entry, devices=ns.devices, cores=ns.cores,
                                    dma_mode=ns.dma_mode)
            result["kernels"] = [describe(k) for k in kernels]
        except frontend.FrontendError as e:
            result["error"] = {
                "type": type(e).__name__,
                "code": e.code,
                "message": str(e),
                "primitive": getattr(e, "primitive", None),
                "reason": getattr(e, "reason", None),
                "stage": getattr(e, "stage", None),
                "loc": None if e.loc is None else [os.path.basename(e.loc.file), e.loc.line],
            }
        except Exception as e:  # noqa: BLE001 - an untyped failure is itself a finding
            result["error"] = {"type": "UNTYPED " + type(e).__name__, "message": str(e)}
        result["seconds"] = time.perf_counter() - t0
        sys.stdout.write(MARKER + json.dumps(result) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
