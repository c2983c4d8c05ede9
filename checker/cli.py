"""Command-line interface: `semcheck verify kernel.py[::target] ...`.

Exit codes: 0 every property proved; 1 a property violated; 2 usage or input
error; 3 nothing violated but something not proved (unknown, timeout).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor

EXIT_PROVED, EXIT_VIOLATED, EXIT_INPUT, EXIT_UNKNOWN = 0, 1, 2, 3
MAX_DEVICES = 1024


class UsageError(Exception):
    pass


def parse_devices(text: str) -> list[int]:
    """`2,4,8` or `2..64` (powers of two in the range) or a single count."""
    try:
        if ".." in text:
            lo, hi = (int(x) for x in text.split("..", 1))
            if lo < 1 or hi < lo:
                raise UsageError(f"--devices {text}: the range must satisfy 1 <= lo <= hi")
            out, d = [lo], 1
            while d <= hi:
                if d > lo:
                    out.append(d)
                d *= 2
            if out[-1] != hi:
                out.append(hi)
            counts = out
        else:
            counts = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"--devices {text!r}: expected a count, a list like 2,4,8 or a range like 2..64") from None
    if not counts:
        raise UsageError("--devices needs at least one count")
    for n in counts:
        if n < 1 or n > MAX_DEVICES:
            raise UsageError(f"--devices {n}: device counts must be between 1 and {MAX_DEVICES}")
    return sorted(set(counts))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="semcheck",
        description="Prove Pallas TPU kernels free of semaphore-id collisions, deadlocks and leaks.",
    )
    p.add_argument("--version", action="store_true", help="print the version and exit")
    sub = p.add_subparsers(dest="command")
    v = sub.add_parser("verify", help="verify the targets of a kernel file")
    v.add_argument("file", help="kernel.py or kernel.py::target")
    v.add_argument("--devices", default=None, help="device counts: 2,4,8 or 2..64 (default: the target's)")
    v.add_argument("--cores", type=int, default=None, help="cores per device (default: the kernel's)")
    v.add_argument("--dma-mode", default="all", help="hardware | eager | on_wait | all (default all)")
    v.add_argument("--format", default="text", choices=["text", "json", "sarif"])
    v.add_argument("--output", "-o", default=None, help="write the report here instead of stdout")
    v.add_argument("--entry", default=None, help="name of a build-like function to verify")
    v.add_argument("--timeout", type=float, default=300.0, help="seconds per device count (default 300)")
    v.add_argument("--jobs", type=int, default=1, help="device counts verified in parallel")
    v.add_argument("--debug", action="store_true", help="show tracebacks")
    s = sub.add_parser("spec", help="print a rule of the specification, e.g. SEM-3")
    s.add_argument("rule")
    return p


def _default_devices(path: str, target: str | None) -> list[int]:
    # Read the decorator's devices without importing jax in this process.
    import ast

    try:
        tree = ast.parse(open(path, encoding="utf-8").read())
    except (OSError, SyntaxError, ValueError):
        return [2, 4, 8]  # the child reports the real problem
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and (target is None or node.name == target):
            for dec in node.decorator_list:
                if isinstance(dec, ast.Call) and getattr(dec.func, "attr", getattr(dec.func, "id", "")) == "target":
                    for kw in dec.keywords:
                        if kw.arg == "devices":
                            try:
                                return sorted({int(x) for x in ast.literal_eval(kw.value)})
                            except (ValueError, TypeError):
                                pass
    return [2, 4, 8]


def cmd_verify(args) -> int:
    from rich.console import Console

    from semcheck import __version__
    from semcheck.checker import report
    from semcheck.checker.verify import InputError, Request, modes_for, verify

    err = Console(stderr=True, highlight=False)
    path, _, target = args.file.partition("::")
    target = target or None
    try:
        if not os.path.isfile(path):
            raise InputError("file-missing", f"no such kernel file: {path}")
        if args.timeout <= 0:
            raise UsageError("--timeout must be positive")
        if args.jobs < 1:
            raise UsageError("--jobs must be at least 1")
        if args.cores is not None and not 1 <= args.cores <= 8:
            raise UsageError("--cores must be between 1 and 8")
        devices = parse_devices(args.devices) if args.devices else _default_devices(path, target)
        modes = modes_for(args.dma_mode)
        reqs = [
            Request(os.path.abspath(path), target, args.entry, n, args.cores, modes, args.timeout)
            for n in devices
        ]
        results = []
        show_progress = args.format == "text" and err.is_terminal and len(reqs) > 1
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            futures = [pool.submit(verify, r, debug=args.debug) for r in reqs]
            if show_progress:
                from rich.progress import Progress

                with Progress(console=err, transient=True) as prog:
                    task = prog.add_task("verifying", total=len(futures))
                    for f in futures:
                        f.result()
                        prog.advance(task)
            for f in futures:
                results.extend(f.result())
    except UsageError as e:
        err.print(f"semcheck: usage error: {e}", markup=False)
        return EXIT_INPUT
    except InputError as e:
        where = f" ({e.loc.file}:{e.loc.line})" if e.loc is not None and e.loc.line else ""
        err.print(f"semcheck: {e.code}: {e.message}{where}", markup=False)
        return EXIT_UNKNOWN if e.code == "timeout" else EXIT_INPUT

    if args.format == "json":
        text = report.dump_json(report.to_json(path, results))
    elif args.format == "sarif":
        text = json.dumps(report.to_sarif(path, results, __version__), indent=2)
    else:
        text = None
    if text is not None:
        if args.output:
            with open(args.output, "w", encoding="utf-8") as f:
                f.write(text + "\n")
        else:
            print(text)
    else:
        out = Console(file=open(args.output, "w", encoding="utf-8")) if args.output else Console(highlight=False)
        report.render_text(out, path, results)
    s = report.summary(results)
    if s["violated"]:
        return EXIT_VIOLATED
    if s["unknown"] or not results:
        return EXIT_UNKNOWN
    return EXIT_PROVED


def cmd_spec(args) -> int:
    from semcheck.checker.spec import rule_text

    text = rule_text(args.rule)
    if text is None:
        print(f"semcheck: no rule {args.rule!r} in the specification", file=sys.stderr)
        return EXIT_INPUT
    print(text)
    return EXIT_PROVED


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse already printed one line of usage
        return EXIT_INPUT if e.code else EXIT_PROVED
    if args.version:
        from semcheck import __version__

        print(f"semcheck {__version__}")
        return EXIT_PROVED
    if args.command == "verify":
        try:
            return cmd_verify(args)
        except KeyboardInterrupt:
            return EXIT_INPUT
        except Exception as e:  # noqa: BLE001 - one line unless --debug
            if args.debug:
                raise
            print(f"semcheck: internal error: {type(e).__name__}: {e} (rerun with --debug)", file=sys.stderr)
            return EXIT_INPUT
    if args.command == "spec":
        return cmd_spec(args)
    parser.print_help()
    return EXIT_PROVED


if __name__ == "__main__":
    sys.exit(main())
