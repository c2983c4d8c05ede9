"""Command-line interface: `semcheck verify kernel.py[::target] ...`.

Exit codes: 0 every property proved; 1 a property violated; 2 usage or input
error (one line on stderr, a traceback only with --debug); 3 nothing violated
but something not proved (unknown, timeout); 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from semcheck.checker.properties import REGISTRY

EXIT_PROVED, EXIT_VIOLATED, EXIT_INPUT, EXIT_UNKNOWN, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (and exit code 2), not the whole usage text."""

    def error(self, message: str):  # type: ignore[override]
        sys.stderr.write(f"semcheck: usage error: {message} (see `{self.prog} --help`)\n")
        raise SystemExit(EXIT_INPUT)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="semcheck",
        description="Prove Pallas TPU kernels free of semaphore-id collisions, deadlocks and leaks.",
        epilog="Exit codes: 0 all proved, 1 a property violated, 2 usage or input error, "
        "3 something not proved (unknown or timeout).",
    )
    p.add_argument("--version", action="store_true", help="print the version and exit")
    sub = p.add_subparsers(dest="command", parser_class=_Parser)
    v = sub.add_parser("verify", help="verify the targets of a kernel file",
                       description="Verify the targets of a kernel file at one or more device counts. "
                       f"Properties: {', '.join(f'{p.id} ({p.rule})' for p in REGISTRY)}.")
    v.add_argument("file", help="kernel.py or kernel.py::target")
    v.add_argument("--devices", default=None,
                   help="device counts: 4, 2,4,8 or 2..64 (powers of two in the range); "
                   "default: the target's own, else 2,4,8")
    v.add_argument("--cores", type=int, default=None, help="cores per device (default: the kernel's)")
    v.add_argument("--dma-mode", default="all", choices=["hardware", "eager", "on_wait", "all"],
                   help="semantics of DMAs: hardware (a real TPU), eager / on_wait (jax's interpret "
                   "mode), or all three (default)")
    v.add_argument("--format", default="text", choices=["text", "json", "sarif"],
                   help="text for people (default), json (specs/report-schema.json) or sarif (2.1.0)")
    v.add_argument("--output", "-o", default=None, metavar="FILE",
                   help="write the report to FILE instead of stdout (written only when verification ran)")
    v.add_argument("--entry", default=None, metavar="NAME", help="name of a build-like function to verify")
    v.add_argument("--timeout", type=float, default=300.0, metavar="S",
                   help="seconds per device count for importing, tracing and checking the kernel "
                   "(semcheck's own start-up not counted); what is not decided in time is unknown "
                   "(default 300)")
    v.add_argument("--jobs", "-j", type=int, default=1, metavar="N",
                   help="device counts verified in parallel, each in its own process (default 1)")
    v.add_argument("--no-fold", action="store_true",
                   help="check every device even when the devices repeat (spec RUN-7; slower, same verdicts)")
    v.add_argument("--debug", action="store_true", help="show tracebacks")
    sub.add_parser("export", help="export a lowered program (--promela: for SPIN)", add_help=False)
    s = sub.add_parser("spec", help="print a rule of the specification, e.g. SEM-3 or deadlock-free",
                       description="Print a rule of the specification; without RULE, list the properties.")
    s.add_argument("rule", nargs="?", help="a rule id (SEM-3, BUF-4a, PROP-4) or a property id (deadlock-free)")
    return p


def _err_console():
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True)


def cmd_verify(args) -> int:
    from semcheck import __version__
    from semcheck.checker import report
    from semcheck.checker.verify import (
        InputError,
        Request,
        check_timeout,
        modes_for,
        parse_devices,
        plan,
        precheck_file,
        relpaths,
    )

    err = _err_console()
    path, _, target = args.file.partition("::")
    target = target or None
    try:
        if args.jobs < 1:
            raise UsageError("--jobs must be at least 1")
        if args.cores is not None and not 1 <= args.cores <= 8:
            raise UsageError("--cores must be between 1 and 8")
        try:
            check_timeout(args.timeout)
            devices = parse_devices(args.devices) if args.devices is not None else None
            modes = modes_for(args.dma_mode)
        except InputError as e:
            raise UsageError(e.message) from None
        if args.output:
            out_dir = os.path.dirname(os.path.abspath(args.output))
            if not os.path.isdir(out_dir):
                raise UsageError(f"--output {args.output}: no such directory {out_dir}")
            if os.path.isdir(args.output):
                raise UsageError(f"--output {args.output} is a directory")
        precheck_file(path)
        # With --entry NAME only that function is verified: its own @semcheck.target
        # devices (if any) apply, not those of the file's other targets.
        reqs = [
            Request(os.path.abspath(path), target if args.entry else sel, args.entry, n, args.cores, modes,
                    args.timeout, fold=not args.no_fold)
            for sel, counts in plan(path, target or args.entry, devices)
            for n in counts
        ]
        outcome = _run(reqs, args, err)
    except UsageError as e:
        err.print(f"semcheck: usage error: {e}", markup=False)
        return EXIT_INPUT
    except InputError as e:
        if args.debug and e.debug_text:
            err.print(e.debug_text.rstrip(), markup=False)
        err.print(f"semcheck: {e.one_line()}", markup=False)
        return EXIT_INPUT

    results = outcome.results
    for note in dict.fromkeys(outcome.notes):
        where = f" ({note.loc.file}:{note.loc.line})" if note.loc is not None and note.loc.line else ""
        if where and where[2:-1] in note.message:
            where = ""
        err.print(relpaths(f"semcheck: {note.code}: {note.message}{where}"), markup=False)

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
            sys.stdout.write(text + "\n")
    elif args.output:
        from rich.console import Console

        with open(args.output, "w", encoding="utf-8") as f:
            report.render_text(Console(file=f, highlight=False, no_color=True, soft_wrap=True), path, results)
    else:
        from rich.console import Console

        report.render_text(Console(highlight=False), path, results)
    code = exit_code(results)
    if not results:
        err.print("semcheck: nothing was verified (no kernel was found in the selected targets)", markup=False)
    return code


def exit_code(results) -> int:
    from semcheck.checker import report

    s = report.summary(results)
    if s["violated"]:
        return EXIT_VIOLATED
    if s["unknown"] or not results:
        return EXIT_UNKNOWN
    return EXIT_PROVED


def _run(reqs, args, err):
    """Run the sweep, with a progress bar on a terminal when there is more than one device count."""
    from semcheck.checker.verify import run_sweep

    if not (err.is_terminal and len(reqs) > 1):
        return run_sweep(reqs, jobs=args.jobs, debug=args.debug)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    name = os.path.basename(reqs[0].path)
    with Progress(TextColumn("[bold]verifying[/] {task.description}"), BarColumn(),
                  MofNCompleteColumn(), TimeElapsedColumn(), console=err, transient=True) as prog:
        task = prog.add_task(f"{name} at {', '.join(str(r.devices) for r in reqs)} devices", total=len(reqs))
        return run_sweep(reqs, jobs=args.jobs, debug=args.debug,
                         on_done=lambda _r: prog.advance(task))


def cmd_spec(args) -> int:
    from semcheck.checker.spec import rule_text

    if args.rule is None:
        width = max(len(p.id) for p in REGISTRY)
        for p in REGISTRY:
            print(f"{p.rule:<7} {p.id:<{width}}  {p.summary}")
        return EXIT_PROVED
    text = rule_text(args.rule)
    if text is None:
        print(f"semcheck: no rule {args.rule!r} in the specification", file=sys.stderr)
        return EXIT_INPUT
    print(text)
    return EXIT_PROVED


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["export"]:
        from semcheck.checker.promela import export_main

        return export_main(argv[1:])
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, or a usage error already printed as one line
        return EXIT_INPUT if e.code else EXIT_PROVED
    if args.version:
        from semcheck import __version__

        print(f"semcheck {__version__}")
        return EXIT_PROVED
    if args.command == "verify":
        try:
            return cmd_verify(args)
        except KeyboardInterrupt:
            from semcheck.checker.verify import kill_all

            kill_all()
            print("semcheck: interrupted", file=sys.stderr)
            return EXIT_INTERRUPTED
        except BrokenPipeError:  # `semcheck verify ... | head`
            try:
                sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence the interpreter's flush at exit
            except OSError:
                pass
            return EXIT_INPUT
        except Exception as e:  # noqa: BLE001 - one line unless --debug
            if args.debug:
                raise
            print(f"semcheck: internal-error: {type(e).__name__}: {e} (rerun with --debug for the traceback)",
                  file=sys.stderr)
            return EXIT_INPUT
    if args.command == "spec":
        return cmd_spec(args)
    parser.print_help(sys.stderr)
    return EXIT_INPUT


if __name__ == "__main__":
    sys.exit(main())
