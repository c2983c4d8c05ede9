"""`python -m oracles.spin export`: a kernel's lowered program written as Promela, and SPIN run on it."""

from __future__ import annotations

import argparse
import os
import sys

from oracles.spin.pan import run_spin, spin_available
from oracles.spin.promela import MODES, render
from oracles.spin.resolve import PromelaUnsupported


PROG = "python -m oracles.spin export"


def export_main(argv: list[str] | None = None) -> int:
    """`python -m oracles.spin export --promela KERNEL.py[::target] --devices N [--dma-mode M] [-o FILE] [--spin]`.

    Lowers the kernel at one device count and writes its Promela model (one
    file per kernel launch; with several, `-o x.pml` becomes `x.0.pml`,
    `x.1.pml`, ...). `--spin` also runs SPIN on it and prints the verdict.
    Exit codes: 0 written (and, with --spin, deadlock-free), 1 SPIN found a
    deadlock or a failing run, 2 usage or input error, 3 SPIN could not decide.
    """
    from semcheck.checker.report.escape import line  # kernel names and exception text (REP-1)

    ap = argparse.ArgumentParser(prog=PROG, description="Export a kernel's lowered program.")
    ap.add_argument("file", help="kernel.py or kernel.py::target")
    ap.add_argument("--promela", action="store_true", help="write Promela for SPIN (the only format so far)")
    ap.add_argument("--devices", type=int, default=2, help="device count (default 2)")
    ap.add_argument("--cores", type=int, default=None, help="cores per device (default: the kernel's)")
    ap.add_argument("--dma-mode", default="hardware", choices=MODES, help="semantics to render (default hardware)")
    ap.add_argument("--entry", default=None, help="name of a build-like function")
    ap.add_argument("--output", "-o", default=None, help="write here instead of stdout")
    ap.add_argument("--spin", action="store_true", help="also run SPIN and print its verdict on stderr")
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:
        return 2 if e.code else 0
    if not args.promela:
        print(f"{PROG}: choose a format (--promela)", file=sys.stderr)
        return 2
    if args.devices < 1:
        print(f"{PROG}: --devices must be at least 1", file=sys.stderr)
        return 2
    path, _, target = args.file.partition("::")
    if not os.path.isfile(path):
        print(line(f"{PROG}: no such kernel file: {path}"), file=sys.stderr)
        return 2
    from semcheck.checker.frontend import FrontendError, provision_devices

    try:
        provision_devices(args.devices)
        from semcheck.checker.frontend import load

        kernels = load(path, target=target or None, entry=args.entry, devices=args.devices, cores=args.cores)
    except FrontendError as e:
        print(line(f"{PROG}: {e}"), file=sys.stderr)
        return 2
    from semcheck.checker.frontend.programs import takes_or_returns_semaphores

    if takes_or_returns_semaphores(kernels):  # specs/deciding/programs.md: such calls are one program, not each alone
        print(f"{PROG}: the kernel calls take or return semaphores, so they are one program "
              "(specs/deciding/programs.md), and export renders one call at a time", file=sys.stderr)
        return 2
    if args.spin and not spin_available():
        print(f"{PROG}: --spin needs `spin` and a C compiler on PATH", file=sys.stderr)
        return 2
    status = 0
    for k in kernels:
        try:
            r = render(k.program, args.dma_mode)
        except PromelaUnsupported as e:
            print(line(f"{PROG}: {k.target} #{k.index}: cannot render: {e}"), file=sys.stderr)
            return 2
        if args.output:
            dest = args.output
            if len(kernels) > 1:
                stem, ext = os.path.splitext(args.output)
                dest = f"{stem}.{k.index}{ext or '.pml'}"
            with open(dest, "w", encoding="utf-8") as f:
                f.write(r.text)
        else:
            sys.stdout.write(r.text)
        if args.spin:
            sr = run_spin(r)
            extra = f" ({sr.reason})" if sr.reason else ""
            print(line(f"spin: {k.target} #{k.index} at {args.devices} devices, {args.dma_mode}: {sr.verdict}{extra}"
                       f", {sr.states_stored} states"), file=sys.stderr)
            code = {"deadlock-free": 0, "deadlock": 1, "error": 1}.get(sr.verdict, 3)
            status = 1 if 1 in (status, code) else max(status, code)
    return status
