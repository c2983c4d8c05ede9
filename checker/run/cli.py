"""Command-line interface: `semcheck verify kernel.py[::target] ...`.

Exit codes: 0 every property proved; 1 a property violated; 2 usage or input
error (one line on stderr, a traceback only with --debug); 3 nothing violated
but something not proved (unknown, timeout); 130 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import sys
from collections.abc import Iterator

from semcheck.checker.properties.registry import REGISTRY
from semcheck.checker.run.config import FORMATS as CONFIG_FORMATS  # the Format Literal's names (REP-4)
from semcheck.checker.run.config import Settings, result_cache, settings, use_pythonpath  # noqa: F401
from semcheck.checker.run.exit_codes import (  # noqa: F401 - re-exported: callers found them here
    EXIT_INPUT,
    EXIT_INTERRUPTED,
    EXIT_PROVED,
    EXIT_UNKNOWN,
    EXIT_VIOLATED,
    UsageError,
    exit_code,
)

FORMATS = list(CONFIG_FORMATS)


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
    p.add_argument("--version", action="store_true",
                   help="print the version, and the commit it was built from when known, and exit")
    sub = p.add_subparsers(dest="command", parser_class=_Parser)
    v = sub.add_parser("verify", help="verify the kernels of files and directories",
                       description="Verify the targets of kernel files at one or more device counts. "
                       "A directory is searched for files that define @semcheck.target functions or a "
                       "module-level build. Defaults come from [tool.semcheck] in the nearest pyproject.toml; "
                       "flags override them. "
                       f"Properties: {', '.join(f'{p.id} ({p.rule})' for p in REGISTRY)}.")
    v.add_argument("paths", nargs="*", metavar="PATH",
                   help="kernel.py, kernel.py::target or a directory (default: [tool.semcheck] paths)")
    v.add_argument("--devices", default=None,
                   help="device counts: 4, 2,4,8 or 2..64 (both ends and the powers of two between "
                   "them: 2..5 is 2,4,5); "
                   "default: the target's own, else [tool.semcheck] devices, else 2,4,8")
    v.add_argument("--cores", type=int, default=None, help="cores per device (default: the kernel's)")
    v.add_argument("--dma-mode", default=None, choices=["hardware", "eager", "on_wait", "all"],
                   help="semantics of DMAs: hardware (a real TPU), eager / on_wait (jax's interpret "
                   "mode), or all three (default)")
    v.add_argument("--format", default="text", choices=FORMATS,
                   help="text for people (default), concise (path:line:col: property: message per finding), "
                   "github (GitHub Actions annotations), json (specs/report-schema.json), sarif (2.1.0), "
                   "markdown (GitHub-flavoured, with Mermaid diagrams) or html (one self-contained page)")
    v.add_argument("--color", default="auto", choices=["auto", "always", "never"],
                   help="colour and Unicode marks in the text report: auto (on a terminal, default), always, "
                   "never; NO_COLOR and FORCE_COLOR are honoured under auto")
    loud = v.add_mutually_exclusive_group()
    loud.add_argument("-q", "--quiet", action="store_true",
                      help="text: the findings and the summary line only (no table of configurations); "
                      "no progress on stderr")
    loud.add_argument("-v", "--verbose", action="store_true",
                      help="text: every property of every configuration, with why it holds; stderr: a line "
                      "per verified device count, on a terminal too")
    v.add_argument("--select", action="append", default=None, metavar="PROPERTY[,...]",
                   help="check only these properties (repeatable); the others are reported as suppressed")
    v.add_argument("--ignore", action="append", default=None, metavar="PROPERTY[,...]",
                   help="do not check these properties (repeatable); they are reported as suppressed. In a "
                   "kernel file, `# semcheck: ignore[PROPERTY,...] REASON` does so for that file")
    v.add_argument("--output", "-o", default=None, metavar="FILE",
                   help="write the report to FILE instead of stdout (written only when verification ran)")
    v.add_argument("--entry", default=None, metavar="NAME", help="name of a build-like function to verify")
    v.add_argument("--timeout", type=float, default=None, metavar="S",
                   help="seconds per device count for importing, tracing and checking the kernel "
                   "(semcheck's own start-up not counted); what is not decided in time is unknown "
                   "(default 300)")
    v.add_argument("--examples", type=int, default=None, metavar="N",
                   help="inputs to generate for targets declared with @semcheck.target(inputs=STRATEGY): "
                   "each is verified, the first violation is shrunk to a minimal input (default 20)")
    v.add_argument("--jobs", "-j", type=int, default=None, metavar="N",
                   help="device counts and files verified in parallel, each in its own process (default 1)")
    v.add_argument("--exclude", action="append", default=None, metavar="PATTERN",
                   help="skip files and directories matching this glob when searching directories "
                   "(repeatable; adds to [tool.semcheck] exclude)")
    v.add_argument("--only-kernels", action="store_true",
                   help="filter files given explicitly like discovered ones: skip those that define no "
                   "kernel or match an exclude pattern (for pre-commit, which passes every changed file)")
    v.add_argument("--no-config", action="store_true", help="ignore [tool.semcheck] in pyproject.toml")
    v.add_argument("--no-cache", action="store_true",
                   help="verify everything afresh: neither read nor write the result cache (.semcheck_cache/)")
    v.add_argument("--every-n", action="store_true", default=None,
                   help="also prove deadlock-free, exit-balance, the id properties and dma-bytes for every device count "
                   "N >= 2 where the kernel "
                   "is one family in N (specs/deciding/parametric.md PAR-8); the report says where the argument holds and why "
                   "not elsewhere. Or [tool.semcheck] every-n = true")
    v.add_argument("--no-fold", action="store_true",
                   help="check every device even when the devices repeat (spec RUN-7; slower, same verdicts)")
    v.add_argument("--debug", action="store_true", help="show tracebacks")
    sub.add_parser("every-n", help="prove deadlock-free, exit-balance, the id properties and dma-bytes for every device count N >= 2 "
                   "(specs/deciding/parametric.md)", add_help=False)
    s = sub.add_parser("spec", help="print a rule of the specification, e.g. SEM-3 or deadlock-free",
                       description="Print a rule of the specification; without RULE, list the properties.")
    s.add_argument("rule", nargs="?", help="a rule id (SEM-3, BUF-4a, PROP-4) or a property id (deadlock-free)")
    return p


def _err_console(color: str = "auto"):
    from semcheck.checker.report.console import LineConsole

    return LineConsole(stderr=True, highlight=False, soft_wrap=True, **_color_options(color))


def _color_options(color: str, file: bool = False) -> dict:
    """rich Console options for --color: `always` as FORCE_COLOR, `never` as NO_COLOR; `auto` leaves
    rich to decide (a terminal, NO_COLOR, FORCE_COLOR). A report written to --output has no colour
    unless asked for."""
    if color == "always":  # the flag wins over NO_COLOR
        return {"force_terminal": True, "no_color": False}
    if color == "never" or file:  # REP-27: no colour system at all, so not even bold or dim is written
        return {"no_color": True, "color_system": None, **({"force_terminal": False} if file else {})}
    return {}


# --- verify ------------------------------------------------------------------------


def cmd_verify(args) -> int:
    from semcheck.checker.report import render as report
    from semcheck.checker.run.request import NOT_CACHED, InputError
    from semcheck.checker.run.runs import FileRun

    err = _err_console(getattr(args, "color", "auto"))
    try:
        st = settings(args)
        if args.output:
            out_dir = os.path.dirname(os.path.abspath(args.output))
            if not os.path.isdir(out_dir):
                raise UsageError(f"--output {args.output}: no such directory {out_dir}")
            if os.path.isdir(args.output):
                raise UsageError(f"--output {args.output} is a directory")
        selectors: dict[str, str | None] = {}
        given: list[str] = []
        for arg in st.paths:
            # a file that exists is a path, whatever its name holds (a `::` too); else `file::target`
            path, sep, target = (arg, "", "") if os.path.isfile(arg) else arg.partition("::")
            if sep and os.path.isdir(path):
                raise UsageError(f"{arg}: a ::target selects a target of a file, not of a directory")
            given.append(path)
            if sep and target:
                selectors[os.path.realpath(path)] = target
        from semcheck.checker.run.config import flag_suppressions
        from semcheck.checker.run.files import plan_files

        flags = flag_suppressions(st)
        use_pythonpath(st.pythonpath)  # the kernel files' imports (in the checking processes too)
        # a path that does not exist is that file's input error (precheck_file says so), reported as every
        # other one is, in every format, beside the files that do exist
        runs, suppressed = plan_files(st, given, flags, selectors=selectors, only_kernels=args.only_kernels,
                                      fold=not args.no_fold, every_n=st.every_n)
        cache = None if args.no_cache else result_cache(st)
        from semcheck.checker.report.progress import run_with_progress

        from semcheck.checker.frontend.compile_cache import private_directory, shared_compiles

        with private_directory() as compiles, shared_compiles(compiles):  # PRG-188
            run_with_progress(runs, st, args, err, cache)
    except UsageError as e:
        err.print(f"semcheck: usage error: {e}", markup=False)
        return EXIT_INPUT
    except InputError as e:
        if args.debug and e.debug_text:
            _say_lines(err, e.debug_text)
        err.print(f"semcheck: {e.one_line()}", markup=False)
        return EXIT_INPUT

    from semcheck.checker.run.child import OUTPUT
    from semcheck.checker.run.request import relpaths

    for run in runs:
        if run.error is not None:
            if args.debug and run.error.debug_text:
                _say_lines(err, run.error.debug_text)
            err.print(f"semcheck: {run.error.one_line()}", markup=False)
    label = " ".join(p for p in st.paths) if len(st.paths) > 1 or os.path.isdir(given[0]) else given[0]
    if not runs:
        if args.only_kernels:  # pre-commit handed over changed files, none of them a kernel
            err.print(f"semcheck: no kernel files: nothing in {', '.join(given)} defines @semcheck.target "
                      f"or a module-level {st.entry or 'build'}", markup=False)
            return EXIT_PROVED
        # as a file that defines no target: bad input, with the same output
        e = InputError("no-kernels", f"nothing in {', '.join(given)} defines @semcheck.target "
                                     f"or a module-level {st.entry or 'build'}")
        runs = [FileRun(label, [], error=e)]
        err.print(f"semcheck: {e.one_line()}", markup=False)
    if all(run.error is not None for run in runs):
        if args.format != "text":  # machine-readable output says what went wrong too, as for many files
            from semcheck import __version__

            write(args, report.render(args.format, label, [report.FileReport(r.path, [], r.error) for r in runs],
                                      __version__))
        return EXIT_INPUT

    notes = [n for run in runs if run.findings is not None for n in run.findings.notes
             if n.code not in (NOT_CACHED, OUTPUT) or args.verbose]
    for note in {(n.code, n.message, n.loc): n for n in notes}.values():  # once, whatever device count said it
        if note.code == OUTPUT:  # REP-27: the kernel's own lines, each guarded as every line on stderr is
            _say_lines(err, relpaths(f"semcheck: output: {note.message}"))
            continue
        where = f" ({note.loc.file}:{note.loc.line})" if note.loc is not None and note.loc.line else ""
        if where and where[2:-1] in note.message:
            where = ""
        err.print(relpaths(f"semcheck: {note.code}: {note.message}{where}"), markup=False)

    for run in runs:
        for name, e in run.findings.errors if run.findings is not None else ():
            if args.debug and e.debug_text:
                _say_lines(err, e.debug_text)
            err.print(f"semcheck: {e.one_line()} (target {name})", markup=False)
    from semcheck.checker.run.files import file_reports

    files = file_reports(runs, suppressed)
    results = [r for f in files for r in f.results]
    if args.format == "text":
        from semcheck.checker.report.console import LineConsole as Console

        detail = "quiet" if args.quiet else "verbose" if args.verbose else "normal"
        if args.output:
            with open(args.output, "w", encoding="utf-8") as f:
                console = Console(file=f, highlight=False, soft_wrap=True, **_color_options(args.color, file=True))
                report.render_files(console, files, detail=detail)
        else:
            report.render_files(Console(highlight=False, **_color_options(args.color)), files, detail=detail)
    else:
        from semcheck import __version__

        write(args, report.render(args.format, label, files, __version__))
    code = exit_code(results, errors=sum((f.error is not None) + len(f.target_errors) for f in files),
                     claims=[c for f in files for c in f.claims])
    if not results and not any(f.error for f in files):
        err.print("semcheck: nothing was verified (no kernel was found in the selected targets)", markup=False)
    return code


def _say_lines(err, text: str) -> None:
    """A traceback (--debug), a line at a time: each is guarded as every line on stderr is."""
    for x in text.rstrip().split("\n"):
        err.print(x, markup=False)


def write(args, text: str) -> None:
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
        sys.stdout.flush()


def cmd_spec(args) -> int:
    from semcheck.checker.report.spec import rule_text

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


def _verify_and_stop(args) -> int:
    """`cmd_verify`, and the warm-start server stopped before the command returns (it would outlive it). The
    cyclic collector rests meanwhile, as in the checking processes (REP-39): the command receives and reports
    their results, millions of small acyclic objects at pod scale, whose re-scans were most of its CPU."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        return cmd_verify(args)
    finally:
        if collecting:
            gc.enable()
        from semcheck.checker.run.child import kill_all
        from semcheck.checker.run.warm_start import shutdown

        kill_all()
        shutdown()


def _stdout_gone() -> None:
    """The reader of stdout left (`| head`): no traceback, and none from the interpreter's flush at exit."""
    try:
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - lives until the process ends
    except OSError:
        pass


@contextlib.contextmanager
def _ending_cleanly_on_termination() -> Iterator[None]:
    """RUN-53: inside this block a SIGTERM or SIGHUP ends the command as its end does, its children killed and its
    compile folder (PRG-188) removed: the signal raises `SystemExit` (128 + the signal's number, a shell's code
    for it) in this process, whose `finally` blocks then run. Only where the signal's action is the default (a
    `nohup` keeps ignoring SIGHUP) and this is the main thread (which alone may set one), only in the process that
    set it (a process forked from this one ends as it would have), and once: a second such signal ends the command
    at once, as before. The actions are restored on leaving (a library caller of `main` keeps its own)."""
    import signal
    import threading

    here = os.getpid()

    def end(signum, frame) -> None:  # noqa: ARG001 - signal's handler signature
        signal.signal(signum, signal.SIG_DFL)
        if os.getpid() != here:
            os.kill(os.getpid(), signum)
            return
        raise SystemExit(128 + signum)

    ours = []
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):
            if sig is not None and signal.getsignal(sig) == signal.SIG_DFL:
                signal.signal(sig, end)
                ours.append(sig)
    try:
        yield
    finally:
        for sig in ours:
            signal.signal(sig, signal.SIG_DFL)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["every-n"]:
        from semcheck.checker.run.every_n_command import every_n_main

        return every_n_main(argv[1:])
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, or a usage error already printed as one line
        return EXIT_INPUT if e.code else EXIT_PROVED
    if args.version:
        from semcheck import __version__
        from semcheck._commit import version_line  # with the commit, when known (REP-33)

        print(version_line(__version__))
        return EXIT_PROVED
    if args.command == "verify":
        try:
            with _ending_cleanly_on_termination():
                return _verify_and_stop(args)
        except KeyboardInterrupt:
            from semcheck.checker.run.child import kill_all

            kill_all()
            print("semcheck: interrupted", file=sys.stderr)
            return EXIT_INTERRUPTED
        except BrokenPipeError:  # `semcheck verify ... | head`
            _stdout_gone()
            return EXIT_INPUT
        except Exception as e:  # noqa: BLE001 - one line unless --debug
            if args.debug:
                raise
            from semcheck.checker.report.escape import line

            print(line(f"semcheck: internal-error: {type(e).__name__}: {e} (rerun with --debug for the traceback)"),
                  file=sys.stderr)
            return EXIT_INPUT
    if args.command == "spec":
        try:
            return cmd_spec(args)
        except BrokenPipeError:  # REP-27: `semcheck spec PRG-11 | head -1` read what it wanted
            _stdout_gone()
            return EXIT_PROVED
    parser.print_help(sys.stderr)
    return EXIT_INPUT


if __name__ == "__main__":
    sys.exit(main())
