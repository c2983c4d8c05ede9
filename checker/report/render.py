"""Reports: the JSON report (schema in specs/report-schema.json) and the format switch (what every format
shares is `rows`). Text is `report_text`, SARIF `sarif`, markdown and HTML `report_markdown`."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

from semcheck.checker.properties.differences import difference_json, differences
from semcheck.checker.properties.registry import BY_ID
from semcheck.checker.properties.verdict import Verdict
from semcheck.checker.run.request import Result
from semcheck.checker.report.places import places
from semcheck.checker.report.findings import cwd_prefix, rel as _rel
from semcheck.checker.report.rows import (  # noqa: F401 - callers import them from here
    MARK, PLAIN_MARK, STYLE, FileReport, input_json, summary, summary_counts, overall, UNKNOWN_HINTS,
    hint_for, UNRUNNABLE_HINT, unrunnable_line, configs, worst_kind, row_summary, header, difference_line)

SCHEMA_VERSION = "1.8"


def _loc(loc) -> dict[str, Any] | None:
    if loc is None:
        return None
    return {"file": loc.file, "line": loc.line, "text": loc.text}


def rel_all(x: Any) -> Any:
    """`x` (a witness's details: JSON data) with kernel paths in its texts relative to the working
    directory, as the report's `file` fields are (`rel` of each text, the working directory read once)."""
    return _relative(x, cwd_prefix())


_LEAVES = frozenset({int, float, bool, type(None)})
"""The exact types `_relative` returns as they are (a text is the only leaf it changes)."""


def _relative(x: Any, prefix: str) -> Any:
    t = type(x)
    if t is str:
        return x.replace(prefix, "")
    if t in _LEAVES:
        return x
    if t is dict:  # each value as `_relative` makes it, a text or a number without the call
        return {k: v.replace(prefix, "") if type(v) is str else v if type(v) in _LEAVES else _relative(v, prefix)
                for k, v in x.items()}
    if t is list or t is tuple:
        return [v.replace(prefix, "") if type(v) is str else v if type(v) in _LEAVES else _relative(v, prefix)
                for v in x]
    if isinstance(x, str):
        return x.replace(prefix, "")
    if isinstance(x, dict):
        return {k: _relative(v, prefix) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_relative(v, prefix) for v in x]
    return x


def verdict_json(v: Verdict) -> dict[str, Any]:
    out: dict[str, Any] = {"property": v.property, "verdict": v.verdict}
    if v.reason:
        out["reason"] = _rel(v.reason)
    if v.witness is not None:
        w = v.witness
        prefix = cwd_prefix()
        # the texts name kernel lines relative to the working directory; `locations` keep the
        # absolute file the schema promises (a tool opens it from anywhere)
        out["witness"] = {
            "message": _rel(w.message),
            "hint": _rel(w.hint or BY_ID[v.property].hint),
            "schedule": list(map(list, w.schedule)),
            "blocked": [{"core": c, "pc": pc, "what": _relative(what, prefix)} for c, pc, what in w.blocked],
            "locations": [_loc(loc) for loc in w.locs],
            "details": rel_all(w.details),
        }
        at = places(v)  # REP-10: the line to change, and the others with what happens there (1.8)
        if at.primary is not None:
            out["witness"]["primary_location"] = _place_json(at.primary)
            out["witness"]["related_locations"] = [_place_json(p) for p in at.related]
    if v.input is not None:
        out["input"] = input_json(v.input)
    if v.stats:
        out["stats"] = v.stats
    return out


def _place_json(p) -> dict[str, Any]:
    return {**_loc(p.loc), "message": _rel(p.message), "role": p.role}


def to_json(path: str, results: Sequence[Result]) -> dict[str, Any]:
    """The JSON report of one kernel file."""
    return to_json_files(path, [FileReport(path, list(results))])


def _error_json(f: FileReport, e: Any = None, target: str | None = None) -> dict[str, Any]:
    e = f.error if e is None else e
    out = {"file": f.path, "code": e.code, "message": _rel(e.one_line().split(": ", 1)[1]),
           "location": _loc(e.loc) if e.loc is not None and e.loc.line else None}
    related = getattr(e, "related", None)
    if related is not None and related.line:  # ERR-23: the call into the code that raised
        out["related_locations"] = [{**_loc(related), "message": "the code that raised was called from here",
                                     "role": "called-from"}]
    if target is not None:
        out["target"] = target
    return out


def to_json_files(label: str, files: Sequence[FileReport]) -> dict[str, Any]:
    """The JSON report of a run over one or several kernel files (`label`: the paths as given)."""
    rows = []
    for f in files:
        for r in f.results:
            for v in r.verdicts:
                row = {"file": f.path, "target": r.target, "devices": r.devices, "dma_mode": r.dma_mode}
                row.update(verdict_json(v))
                if r.examples is not None:
                    row["generated_inputs"] = r.examples
                if r.cached:
                    row["cached"] = True
                rows.append(row)
    results = [r for f in files for r in f.results]
    return {
        "schema": "semcheck-report",
        "version": SCHEMA_VERSION,
        "file": label,
        "files": [f.path for f in files if f.error is None],
        # vacuous and unrunnable counted only when there are some: a report without them reads as before 1.8
        "summary": {k: n for k, n in summary(results).items() if n or k in ("proved", "violated", "unknown")},
        "results": rows,
        "differences": [dict(difference_json(d), file=f.path) for f in files for d in differences(f.results)],
        "suppressed": [suppression_json(f.path, x) for f in files for x in f.suppressed],
        **({"unused_suppressions": [unused_json(f.path, x) for f in files for x in f.unused]}
           if any(f.unused for f in files) else {}),
        **({"every_n": [row for f in files for row in every_n_json(f)]} if any(f.claims for f in files) else {}),
        "errors": [_error_json(f) for f in files if f.error is not None]
                  + [_error_json(f, e, name) for f in files for name, e in f.target_errors],
    }


def every_n_json(f: FileReport) -> list[dict[str, Any]]:
    from semcheck.checker.report.every_n import to_json

    return to_json(f)


def suppression_json(path: str, x: Any) -> dict[str, Any]:
    out = {"file": path, "property": x.property, "reason": _rel(x.reason), "source": x.source}
    if x.loc is not None:
        out["location"] = _loc(x.loc)
    if getattr(x, "scope", "file") != "file":  # REP-25
        out["scope"] = x.scope
        out["target"] = x.target
    return out


def unused_json(path: str, x: Any) -> dict[str, Any]:
    """REP-26: a suppression comment that suppressed nothing."""
    return {"file": path, "property": x.property, "reason": _rel(x.reason), "scope": x.scope,
            "message": x.unused(), "location": _loc(x.loc)}


def render(fmt: str, label: str, files: Sequence[FileReport], version: str) -> str:
    """A report in a format other than text (json, sarif, concise, github, markdown, html), ending in a newline."""
    if fmt == "json":
        return dump_json(to_json_files(label, files)) + "\n"
    if fmt == "sarif":
        return json.dumps(to_sarif_files(files, version), indent=2) + "\n"
    if fmt == "concise":
        from semcheck.checker.report.lines import to_concise

        return to_concise(files)
    if fmt == "github":
        from semcheck.checker.report.lines import to_github

        return to_github(files)
    if fmt == "markdown":
        return to_markdown(label, files)
    if fmt == "html":
        return to_html(label, files)
    raise ValueError(f"unknown report format {fmt!r}")


def dump_json(obj: dict[str, Any]) -> str:
    """`json.dumps(obj, indent=2, default=_default)`, written faster (REP-38)."""
    from semcheck.checker.report.json_text import dumps

    return dumps(obj, _default)


def _default(o: Any) -> Any:
    if dataclasses.is_dataclass(o):
        return dataclasses.asdict(o)
    if isinstance(o, (set, frozenset, tuple)):
        return list(o)
    return str(o)


# The formats live in their own modules; these names stay here, where callers have always found them.


def to_sarif(path: str, results: Sequence[Result], version: str) -> dict[str, Any]:
    from semcheck.checker.report.sarif import to_sarif as f

    return f(path, results, version)


def to_sarif_files(files: Sequence[FileReport], version: str) -> dict[str, Any]:
    from semcheck.checker.report.sarif import to_sarif_files as f

    return f(files, version)


def render_text(console, path: str, results: Sequence[Result]) -> None:
    from semcheck.checker.report.text import render_text as f

    f(console, path, results)


def render_files(console, files: Sequence[FileReport], detail: str = "normal") -> None:
    from semcheck.checker.report.text import render_files as f

    f(console, files, detail)


def to_markdown(label: str, files: Sequence[FileReport]) -> str:
    from semcheck.checker.report.markdown import to_markdown as f

    return f(label, files)


def to_html(label: str, files: Sequence[FileReport]) -> str:
    from semcheck.checker.report.markdown import to_html as f

    return f(label, files)
