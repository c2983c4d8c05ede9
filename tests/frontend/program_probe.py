"""Trace kernel files into programs of kernel calls in a fresh process and describe them.

    python tests/frontend/program_probe.py --devices 2 file.py[::target] ...

prints one JSON line per spec (after a marker): the program's calls (kernel, call index, the
pallas_call's file and line), its links and, when the walk stops, the reason and line; and, when
it composes, the composed program's allocations and barriers per core. Nothing here runs a kernel.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

MARKER = "@@PROGRAM_PROBE@@ "


def _loc(loc) -> list:
    return [os.path.basename(loc.file), loc.line]


def describe(spec: str, devices: int) -> dict:
    from semcheck.checker.frontend import lower_target
    from semcheck.checker.frontend.call_boundary import is_boundary
    from semcheck.checker.frontend.errors import FrontendError
    from semcheck.checker.frontend.program_walk import program_ir
    from semcheck.checker.frontend.programs import _trace, lower_program
    from semcheck.checker.frontend.targets import load_targets
    from semcheck.checker.frontend.trace import make_jaxpr
    from semcheck.model.ops import AllocBuffer, AllocSem, Barrier

    (t,) = load_targets(spec)
    ir = program_ir(_trace(t, devices, {}, make_jaxpr))
    out: dict = {
        "calls": [{"name": i.name, "index": i.index, "loc": _loc(i.loc)} for i in ir.invocations],
        "links": [[link.producer, link.output, link.consumer, link.input, link.kind] for link in ir.links],
        "unknown": None if ir.unknown is None else [ir.unknown[0], _loc(ir.unknown[1])],
    }
    try:
        orders = lower_program(t, devices, lower_target(t, devices))
    except FrontendError as e:
        out["composed"] = {"error": str(e), "loc": None if e.loc is None else _loc(e.loc)}
        return out
    if orders is None:
        out["composed"] = None
        return out
    out["orders"] = [list(c.order) for c in orders]
    composed = orders[0]
    cores = composed.program.cores
    out["composed"] = {
        "sems": [[op.label for op in ops if type(op) is AllocSem] for ops in cores],
        "buffers": [[op.label for op in ops if type(op) is AllocBuffer] for ops in cores],
        "barriers": [[op.name for op in ops if type(op) is Barrier] for ops in cores],
        "collective_id": composed.program.collective_id,
        "calls": [list(ks) for ks in composed.calls],
        "race_gaps": list(composed.race_gaps),
        # PRG-121: the uses of results outside the calls, per core: (call, buffer, write, what, file, line)
        "boundary": [[[k, op.buf, op.write, op.loc.what, os.path.basename(op.loc.file), op.loc.line]
                      for op, k in zip(ops, ks) if is_boundary(op)] for ops, ks in zip(cores, composed.calls)],
    }
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--devices", type=int, default=2)
    ap.add_argument("specs", nargs="+")
    args = ap.parse_args()
    from semcheck.checker.frontend import provision_devices

    provision_devices(args.devices)
    for spec in args.specs:
        print(MARKER + json.dumps({"spec": spec, **describe(spec, args.devices)}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
