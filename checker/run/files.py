"""The kernel files of a run, found once, and what each came to: `semcheck verify PATH...` and
`semcheck.check(PATH)` plan their files here and read each file's report from here, so a
directory means the same kernels, requests and suppressions to both (REP-29), and a user's project the
same verdicts to every way in (REP-30: the plugin collects `planning.configured_kernels`, the same
discovery)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from semcheck.checker.run.config import Settings, checked_properties
from semcheck.checker.run.planning import discover, file_requests, precheck_file
from semcheck.checker.run.request import InputError, Request
from semcheck.checker.run.runs import FileRun


def plan_files(st: Settings, given: Sequence[str], flags: Sequence[Any], *,
               selectors: Mapping[str, str] | None = None, only_kernels: bool = False, fold: bool = True,
               every_n: bool = False) -> tuple[list[FileRun], dict[str, list]]:
    """(one `FileRun` per kernel file under `given`, the properties each leaves unchecked and why).

    Files and directories are discovered once (`planning.discover`, with the settings' excludes and
    entry); a path that does not exist is its own file's input error, beside the others. `selectors`
    maps a file's real path to the `::target` it was given with. `every_n` adds the parametric
    request (PAR-8) to each file whose checked properties it decides."""
    missing = [g for g in given if not os.path.exists(g)]
    present = [g for g in given if os.path.exists(g)]
    files, _skipped = (discover(present, exclude=st.exclude, entry=st.entry, only_kernels=only_kernels)
                       if present else ([], []))
    runs: list[FileRun] = []
    suppressed: dict[str, list] = {}
    for path in [*files, *missing]:
        target = (selectors or {}).get(os.path.realpath(path))
        try:
            precheck_file(path)
            suppressed[path], checked = checked_properties(flags, path)
            reqs = file_requests(path, target, st, checked, fold=fold)
            if every_n:
                from semcheck.checker.parametric.every_n import PROPS, traced_counts

                if set(checked) & set(PROPS):
                    reqs.append(Request(os.path.abspath(path), target, st.entry, max(traced_counts()), st.cores,
                                        st.modes, st.timeout, properties=checked, fold=fold,
                                        examples=st.examples, every_n=True))
            runs.append(FileRun(path, reqs))
        except InputError as e:
            runs.append(FileRun(path, [], error=e))
    return runs, suppressed


def file_reports(runs: Sequence[FileRun], suppressed: Mapping[str, list]) -> list:
    """Each file's `report.render.FileReport`: its results less what its target, def and line comments
    suppress (REP-25), those suppressions beside the file's own, and the comments that suppressed
    nothing (REP-26)."""
    from semcheck.checker.report import render as report
    from semcheck.checker.report import suppress as report_suppress

    out = []
    for run in runs:
        found, used, unused = run.findings.results if run.findings else [], [], []
        if run.error is None and run.findings is not None:
            found, used, unused = report_suppress.apply_local(run.path, found, report_suppress.local(run.path))
        out.append(report.FileReport(run.path, found, run.error, run.cached,
                                     run.findings.errors if run.findings else [],
                                     [*suppressed.get(run.path, []), *used] if run.error is None else [],
                                     run.findings.claims if run.findings else [], unused))
    return out
