"""Progress of `semcheck verify` on stderr while its requests run (specs/deciding/report.md, "The text report"):
a bar on a terminal; off one (a CI log), one line per finished request, saying what came of it."""

from __future__ import annotations

import os
import sys
import threading


def status(req, out) -> str:
    """What one finished request came to, in the words of its progress line."""
    what = "every N (the parametric check, PAR-8)" if req.every_n else f"{req.devices} devices"
    if not out.imported:
        tried = not any("not tried again" in (v.reason or "") for r in out.results for v in r.verdicts) and \
            not any("not tried again" in c.reason for c in out.claims)
        return (f"{what}: not verified, the kernel file's import did not finish within --timeout {req.timeout:g}s"
                if tried else f"{what}: not tried, the kernel file's import did not finish before")
    if any(n.code == "timeout" for n in out.notes):
        return f"{what}: checked, but not everything was decided within --timeout {req.timeout:g}s"
    return f"{what} checked" if req.every_n else f"{what} verified"


def run_with_progress(runs, st, args, err, cache) -> None:
    """Run every file's sweep, showing progress when there is more than one request: a bar on a
    terminal; off one (a CI log), one line per finished request, so the log shows the sweep
    advancing. -q shows neither; -v the lines on a terminal too. Every request advances the bar,
    those not tried after an import that hung too, so none is left dangling."""
    from semcheck.checker.run.runs import run_files

    total = sum(len(r.requests) for r in runs)
    if args.quiet or total < 2:  # -q: the pre-commit hooks print the findings alone (REP-36)
        run_files(runs, jobs=st.jobs, debug=args.debug, cache=cache)
        return
    # a real terminal, not one forced by --color always or FORCE_COLOR: a bar would flood a CI log
    if not isatty(sys.stderr) or args.verbose or getattr(args, "color", "auto") == "never":  # a bar moves the cursor
        lock, done = threading.Lock(), [0]

        def line(req, out) -> None:
            with lock:  # run_files calls back from its worker threads
                done[0] += 1
                err.print(f"semcheck: [{done[0]}/{total}] {os.path.relpath(req.path)}: {status(req, out)}",
                          markup=False)

        run_files(runs, jobs=st.jobs, debug=args.debug, cache=cache, on_done=line)
        return
    from rich.markup import escape

    from semcheck.checker.report.escape import line
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    if len(runs) == 1:
        counts = [str(r.devices) for r in runs[0].requests if not r.every_n]
        what = f"{escape(line(os.path.basename(runs[0].path)))} at {', '.join(counts)} devices"
        if len(counts) < len(runs[0].requests):
            what += " and for every N"
    else:
        what = f"{len(runs)} kernel files"
    with Progress(TextColumn("[bold]verifying[/] {task.description}"), BarColumn(),
                  MofNCompleteColumn(), TimeElapsedColumn(), console=err, transient=True) as prog:
        task = prog.add_task(what, total=total)
        run_files(runs, jobs=st.jobs, debug=args.debug, cache=cache,
                  on_done=lambda _req, _out: prog.advance(task))


def isatty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
