"""The programmatic API: `semcheck.check` verifies kernel files as `semcheck verify` does, and
`semcheck.check_program` checks a program of the model's IR. Tests, the bench and tools built on
semcheck use these instead of the checker's modules.

Typed (specs/deciding/report.md REP-4): the result types are the checker's own dataclasses, re-exported by
`semcheck`; option strings are `Literal`s, and a wrong one at run time is an `InputError`."""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from semcheck.checker.run.config import DmaModeOption, Format, Settings
from semcheck.checker.run.request import Findings, InputError
from semcheck.model.ops import DmaMode

if TYPE_CHECKING:
    from semcheck.checker.properties.verdict import Verdict
    from semcheck.model.ops import Program

PathOrTarget = str | os.PathLike[str] | Callable[..., object]
"""A kernel file, `file.py::target`, or a module-level `@semcheck.target` function."""


def resolve(path_or_target: PathOrTarget) -> tuple[str, str | None]:
    """(absolute kernel file, target selector or None) of a path, `file.py::name` or a target function."""
    if isinstance(path_or_target, (str, os.PathLike)):
        text = os.fspath(path_or_target)
        if os.path.isfile(text):  # a file's own name may hold `::`: a path that exists is a path
            return os.path.abspath(text), None
        file, sep, name = text.partition("::")
        return os.path.abspath(file), (name or None) if sep else None
    if callable(path_or_target):
        fn = inspect.unwrap(path_or_target)
        qualname = getattr(fn, "__qualname__", "")
        name = getattr(fn, "__name__", "")
        if not name or qualname != name:
            raise TypeError(
                f"semcheck needs a module-level function (its file is imported afresh in another "
                f"process), not {qualname or fn!r}"
            )
        file = inspect.getsourcefile(fn)
        if file is None:
            raise TypeError(f"cannot find the source file of {name}")
        return os.path.abspath(file), name
    raise TypeError(f"expected a kernel file path, 'file.py::target' or a target function, not {path_or_target!r}")


def settings(
    start: str,
    devices: int | Iterable[int] | None = None,
    dma_mode: DmaModeOption | Sequence[DmaModeOption] | None = None,
    *,
    timeout: float | None = None,
    cores: int | None = None,
    entry: str | None = None,
    jobs: int | None = None,
) -> Settings:
    """The API's arguments over `[tool.semcheck]` over the defaults (`checker.run.config.load_settings`,
    REP-2); bad arguments or a bad table are an `InputError` (code "usage") with the loader's message."""
    from semcheck.checker.run.config import load_settings
    from semcheck.checker.run.exit_codes import UsageError

    try:
        return load_settings(start, devices=None if devices is None else
                             devices if isinstance(devices, int) else list(devices),
                             dma_mode=dma_mode, timeout=timeout, cores=cores, entry=entry, jobs=jobs,
                             dma_mode_name="dma_mode")
    except UsageError as e:
        raise InputError("usage", str(e)) from None


def check(
    path_or_target: PathOrTarget,
    devices: int | Iterable[int] | None = None,
    dma_mode: DmaModeOption | Sequence[DmaModeOption] | None = None,
    properties: Sequence[str] | None = None,
    *,
    timeout: float | None = None,
    cores: int | None = None,
    entry: str | None = None,
    jobs: int | None = None,
    cache: bool = True,
    fold: bool = True,
) -> Findings:
    """Verify a kernel file (a path, `file.py::target`, or a module-level target function), or
    every kernel file under a directory, at each device count under `dma_mode` (hardware, eager,
    on_wait, all, or a list of them), as `semcheck verify` does, with its settings: what is not
    given comes from `[tool.semcheck]` of the nearest pyproject.toml above the working directory
    (its `pythonpath`, `select` and `ignore` too), else from the CLI's defaults (each target's own
    devices, else 2, 4, 8; all modes; 300 s).

    Returns the `Findings` (`.results`: one `Result` per target x device count x mode, each with
    its `Verdict`s; `.notes`: timeouts, unsupported constructs, and why an answer was not kept in
    the cache; `.suppressed`: the properties not checked, and why; for a directory, `.files`:
    each kernel file's own `Findings`, whose `.error` says why it could not be verified).
    `properties`: check only these (as `--select`). `cache`: answer from, and keep answers in,
    the result cache `semcheck verify` uses. Raises `semcheck.InputError`: code "usage" for bad
    arguments or a bad `[tool.semcheck]`, another code when the kernel file (or every file of the
    directory) cannot be verified at all (REP-4, REP-29).
    """
    st = settings(os.getcwd(), devices, dma_mode, timeout=timeout, cores=cores, entry=entry, jobs=jobs)
    return check_with(st, path_or_target, properties, cache=cache, fold=fold)


def check_with(st: Settings, path_or_target: PathOrTarget, properties: Sequence[str] | None = None, *,
               cache: bool = True, fold: bool = True) -> Findings:
    """`check` with settings already loaded (the pytest plugin loads them once, above its root directory).

    A directory is searched as `semcheck verify DIR` searches it (`checker.run.files.plan_files`, REP-29):
    the result holds every file's rows, and `.files` each file's own `Findings`."""
    from semcheck.checker.run.config import flag_suppressions, result_cache, use_pythonpath
    from semcheck.checker.run.exit_codes import UsageError
    from semcheck.checker.run.files import file_reports, plan_files
    from semcheck.checker.run.runs import run_files

    path, target = resolve(path_or_target)
    if properties is not None and (isinstance(properties, str) or not list(properties)):
        raise InputError("usage", f"properties must be a non-empty list of property ids, not {properties!r}")
    if target is not None and os.path.isdir(path):
        raise InputError("usage", f"{path}::{target}: a ::target selects a target of a file, not of a directory")
    try:
        flags = flag_suppressions(st, select=None if properties is None else list(properties),
                                  select_from="properties")
    except UsageError as e:
        raise InputError("usage", str(e)) from None
    use_pythonpath(st.pythonpath)
    runs, suppressed = plan_files(st, [path], flags, selectors={os.path.realpath(path): target} if target else None,
                                  fold=fold)
    if not runs:  # a directory with no kernel file: bad input, as for `semcheck verify DIR`
        raise InputError("no-kernels", f"nothing in {path} defines @semcheck.target or a module-level "
                                       f"{st.entry or 'build'}")
    run_files(runs, jobs=st.jobs, cache=result_cache(st) if cache else None)
    files: dict[str, Findings] = {}
    for run, rep in zip(runs, file_reports(runs, suppressed), strict=True):
        files[run.path] = Findings(rep.results, run.findings.notes if run.findings else [],
                                   errors=rep.target_errors, claims=rep.claims, suppressed=rep.suppressed,
                                   unused=rep.unused, error=rep.error)
    errors = [f.error for f in files.values() if f.error is not None]
    if not os.path.isdir(path) or len(errors) == len(files):  # nothing verified at all: raise, as for one file
        if errors:
            raise errors[0]
        (one,) = files.values()
        return one
    every = list(files.values())
    return Findings([r for f in every for r in f.results], [n for f in every for n in f.notes],
                    errors=[e for f in every for e in f.errors], claims=[c for f in every for c in f.claims],
                    suppressed=[x for f in every for x in f.suppressed], unused=[x for f in every for x in f.unused],
                    files=files, error=errors[0] if errors else None)


def file_reports_of(found: Findings, path: str) -> list[Any]:
    """The reports (`checker.report.render.FileReport`) of `found`: one per file of a directory's findings,
    else one, labelled `path`."""
    from semcheck.checker.report import render as report

    each = found.files or {path: found}
    return [report.FileReport(p, f.results, f.error, target_errors=f.errors, suppressed=f.suppressed,
                              claims=f.claims, unused=f.unused) for p, f in each.items()]


def render(found: Findings, path: str | os.PathLike[str], format: Format = "text") -> str:  # noqa: A002
    """The report `semcheck verify --format FORMAT` writes for `found`, the findings of kernel file (or
    directory) `path` (text without colour). A format that is none is an `InputError` (REP-4)."""
    import io

    from semcheck import __version__
    from semcheck.checker.report import render as report
    from semcheck.checker.report.console import LineConsole
    from semcheck.checker.run.config import FORMATS

    if format not in FORMATS:
        raise InputError("usage", f"format: {format!r} is not one of {', '.join(FORMATS)}")
    label = os.fspath(path)
    files = file_reports_of(found, label)
    if format != "text":
        return report.render(format, label, files, __version__)
    buf = io.StringIO()
    report.render_files(LineConsole(file=buf, width=120, no_color=True, highlight=False, soft_wrap=True), files)
    return buf.getvalue()


def check_program(program: Program, dma_mode: DmaMode, properties: Sequence[str] | None = None, *,
                  timeout_ms: int = 30_000, fold: bool = True) -> list[Verdict]:
    """Every requested property (all by default) of one program of the model's IR
    (`semcheck.model.ops.Program`) under one DMA mode: a `Verdict` each, in order."""
    from semcheck.checker.properties.checking import check_program as check
    from semcheck.checker.properties.registry import IDS
    from semcheck.checker.run.config import read_modes
    from semcheck.checker.run.exit_codes import UsageError

    try:
        if dma_mode == "all" or read_modes(dma_mode, "dma_mode") != (dma_mode,):
            raise UsageError(f"dma_mode: one mode of a program at a time, not {dma_mode!r}")
    except UsageError as e:
        raise InputError("usage", str(e)) from None
    return check(program, dma_mode, tuple(IDS) if properties is None else tuple(properties),
                 timeout_ms=timeout_ms, fold=fold)
