"""One line per finding (`report_findings`): `--format concise` for editors and people, `--format github`
for GitHub Actions annotations (workflow commands, as ruff's `--output-format github`)."""

from __future__ import annotations

import os
from collections.abc import Sequence

from semcheck.checker.report.rows import FileReport, summary, summary_counts
from semcheck.checker.report.escape import gh_data, gh_property, line as one_line
from semcheck.checker.report.every_n import line_texts, summary_words
from semcheck.checker.report.findings import Finding, column, display_path, findings, rel, where


def _place(x: Finding) -> tuple[str, int, int]:
    if x.loc is None:
        return display_path(x.file), 1, 1  # the file as a whole, as ruff places file-level diagnostics
    return display_path(x.loc.file), x.loc.line, column(x.loc)


def _text(x: Finding) -> tuple[str, str]:
    """(rule, message): (`deadlock-free`, `violated (build: 2 devices (hardware)): deadlock: ...`), or for an
    unknown (`unknown`, `deadlock-free, exit-balance (build: 2 devices (eager)): the program can fail ...`)."""
    what = "violated" if x.kind == "violated" else ", ".join(x.properties)
    # a target whose kernel lives in another file (a program importing it): the line is the kernel's,
    # the target is named with its own file, so the clean kernel's file does not look wrong alone
    target = x.target
    if x.loc is not None and os.path.realpath(x.loc.file) != os.path.realpath(x.file):
        target = f"{display_path(x.file)}::{x.target}"
    return x.rule, f"{what} ({target}: {where(x.configs)}): {x.message()}"


def _errors(f: FileReport):
    """(file, line, message) of a file or target that could not be verified."""
    failed = [(f.path, f.error)] if f.error is not None else [(f"{f.path}::{n}", e) for n, e in f.target_errors]
    for what, e in failed:
        loc = e.loc if e.loc is not None and e.loc.line else None
        yield (display_path(loc.file) if loc else display_path(f.path)), (loc.line if loc else 1), rel(f"{what}: {e.one_line()}")


def _suppressed(f: FileReport):
    """(path, line, col, property, message) of each property the file does not check on purpose."""
    for x in f.suppressed:
        path, line, col = (display_path(x.loc.file), x.loc.line, column(x.loc)) if x.loc else (display_path(f.path), 1, 1)
        yield path, line, col, x.property, rel(f"{x.said()}: {x.reason}")


def _unused(f: FileReport):
    """(path, line, col, message) of each suppression comment that suppressed nothing (REP-26)."""
    for x in f.unused:
        yield display_path(x.loc.file), x.loc.line, column(x.loc), rel(f"{x.unused()} ({x.reason})")


def _summary_line(files: Sequence[FileReport]) -> str:
    s = summary([r for f in files for r in f.results])
    sups = sorted({x.property for f in files for x in f.suppressed if x.said().endswith("(not checked)")})
    return (summary_counts(s) + summary_words(files) + (f"; not checked (suppressed): {', '.join(sups)}" if sups else ""))


def to_concise(files: Sequence[FileReport]) -> str:
    """`path:line:col: property: message`, one line per finding, then the summary line."""
    out = []
    for f in files:
        for path, line, message in _errors(f):
            out.append(f"{path}:{line}:1: input-error: {message}")
        for x in findings(f.path, f.results) if f.error is None else ():
            path, line, col = _place(x)
            rule, message = _text(x)
            out.append(f"{path}:{line}:{col}: {rule}: {message}")
        for path, line, col, rule, message in _suppressed(f):
            out.append(f"{path}:{line}:{col}: {rule}: {message}")
        for path, line, col, message in _unused(f):
            out.append(f"{path}:{line}:{col}: unused-suppression: {message}")
        for path, rule, _kind, message in line_texts(f):  # --every-n (PAR-8)
            out.append(f"{path}:1:1: {rule}: {message}")
    out.append(_summary_line(files))
    return "\n".join(one_line(x) for x in out) + "\n"  # a name's newline or `::` must not make a line


def to_github(files: Sequence[FileReport]) -> str:
    """`::error title=...,file=...,line=...,col=...::message` per violation (`::warning` per unknown)."""
    out = []
    for f in files:
        for path, line, message in _errors(f):
            out.append(f"::error title={gh_property('semcheck (input-error)')},file={gh_property(path)},"
                       f"line={line}::{gh_data(f'{path}:{line}:1: input-error: {message}')}")
        for x in findings(f.path, f.results) if f.error is None else ():
            path, line, col = _place(x)
            rule, message = _text(x)
            level = {"violated": "error", "vacuous": "notice"}.get(x.kind, "warning")
            out.append(f"::{level} title={gh_property(f'semcheck ({rule})')},file={gh_property(path)},"
                       f"line={line},col={col}::{gh_data(f'{path}:{line}:{col}: {rule}: {message}')}")
        for path, line, col, rule, message in _suppressed(f):
            out.append(f"::notice title={gh_property(f'semcheck ({rule})')},file={gh_property(path)},"
                       f"line={line},col={col}::{gh_data(f'{path}:{line}:{col}: {rule}: {message}')}")
        for path, line, col, message in _unused(f):
            out.append(f"::warning title={gh_property('semcheck (unused-suppression)')},file={gh_property(path)},"
                       f"line={line},col={col}::{gh_data(f'{path}:{line}:{col}: unused-suppression: {message}')}")
        for path, rule, kind, message in line_texts(f):  # --every-n (PAR-8): a traced N violated is an error
            level = {"violated": "error", "unknown": "warning"}.get(kind, "notice")
            out.append(f"::{level} title={gh_property(f'semcheck ({rule})')},file={gh_property(path)},"
                       f"line=1::{gh_data(f'{path}:1:1: {rule}: {message}')}")
    out.append(one_line(_summary_line(files)))
    return "\n".join(out) + "\n"
