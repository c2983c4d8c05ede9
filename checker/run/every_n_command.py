"""`semcheck every-n FILE`: the command that prints the claims for every N (specs/deciding/parametric.md, PAR-6).

The argument parsing and exit codes live here, in the run layer; the proof is `parametric.every_n`.
"""

from __future__ import annotations

from semcheck.checker.parametric.every_n import DEFAULT_PROBES, DEFAULT_RANGE, every_n
from semcheck.checker.parametric.template import MIN_TRACED, NotTemplate


def every_n_main(argv: list[str]) -> int:
    """`semcheck every-n FILE`: the PAR-6 claims of one kernel file; exit 0 when every property is
    proved for every N >= 2 in every mode asked for, 1 when a traced N violates one, 3 otherwise,
    2 for bad input."""
    import argparse
    import json
    import sys

    from semcheck.checker.report.escape import line  # kernel names and exception text (REP-1)
    from semcheck.checker.run.exit_codes import EXIT_INPUT, EXIT_PROVED, EXIT_UNKNOWN, EXIT_VIOLATED

    ap = argparse.ArgumentParser(prog="semcheck every-n", description=(
        "Prove deadlock-free, exit-balance, the id properties, dma-bytes and race-free for every device count N >= 2 "
        "(specs/deciding/parametric.md): the "
        "kernel is traced and checked at N = 2 .. UPTO, and its jaxpr shown to be one template in N."))
    ap.add_argument("path", metavar="PATH", help="kernel.py or kernel.py::target")
    ap.add_argument("--upto", type=int, default=DEFAULT_RANGE[-1], metavar="K",
                    help=f"trace and check every N from 2 to K (default {DEFAULT_RANGE[-1]}; at least "
                    f"{MIN_TRACED + 1})")
    ap.add_argument("--probes", default=",".join(map(str, DEFAULT_PROBES)), metavar="N,N",
                    help="device counts past K to trace and check as well (default "
                    f"{','.join(map(str, DEFAULT_PROBES))}; 'none' for none)")
    ap.add_argument("--dma-mode", default="all", choices=["hardware", "eager", "on_wait", "all"])
    ap.add_argument("--format", default="text", choices=["text", "json"])
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:
        return EXIT_INPUT if e.code else EXIT_PROVED
    if args.upto < MIN_TRACED + 1:
        print(f"semcheck every-n: --upto must be at least {MIN_TRACED + 1}", file=sys.stderr)
        return EXIT_INPUT
    modes = ("eager", "on_wait", "hardware") if args.dma_mode == "all" else (args.dma_mode,)
    try:
        probes = () if args.probes == "none" else tuple(int(x) for x in args.probes.split(",") if x.strip())
    except ValueError:
        print(f"semcheck every-n: --probes wants device counts such as 31,64, got {args.probes!r}", file=sys.stderr)
        return EXIT_INPUT
    if any(n < 2 or n > 1024 for n in probes):
        print("semcheck every-n: a probe must be between 2 and 1024 devices", file=sys.stderr)
        return EXIT_INPUT
    from semcheck.checker.frontend.errors import FrontendError

    try:
        out = every_n(args.path, ns=tuple(range(2, args.upto + 1)), probes=probes, modes=modes)
    except (FrontendError, OSError, NotTemplate) as e:
        print(line(f"semcheck every-n: {args.path}: {e}"), file=sys.stderr)
        return EXIT_INPUT
    except Exception as e:  # noqa: BLE001 - one line, as `verify` does
        print(line(f"semcheck every-n: internal-error: {type(e).__name__}: {e}"), file=sys.stderr)
        return EXIT_INPUT
    try:
        if args.format == "json":
            print(json.dumps({"path": args.path, "claims": [c.as_json() for c in out]}, indent=2))
        else:
            for c in out:
                print(line(c.line()))
    except BrokenPipeError:  # `semcheck every-n ... | head`
        import os

        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence the interpreter's flush at exit
        return EXIT_INPUT
    if any(c.violated_at for c in out):
        return EXIT_VIOLATED
    return EXIT_PROVED if all(c.every_n for c in out) else EXIT_UNKNOWN
