"""Reports: the JSON report (schema in specs/report-schema.json), what every format shares, and the
format switch. Text is `report_text`, SARIF `sarif`, markdown and HTML `report_markdown`."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

from semcheck.checker.properties.differences import CAUSES, difference_json, differences
from semcheck.checker.run.generated_inputs import row_suffix
from semcheck.checker.properties.registry import BY_ID
from semcheck.checker.properties.verdict import KINDS, Verdict, unknown_kind
from semcheck.checker.run.request import Result
from semcheck.checker.report.places import places
from semcheck.checker.report.findings import rel as _rel

SCHEMA_VERSION = "1.8"
# REP-22: one mark per verdict kind, and the `modes differ` heading's own (`DIFFER`), none shared
MARK = {"proved": "✓", "vacuous": "○", "violated": "✗", "unknown": "?", "unrunnable": "⊘", "differ": "≠"}
PLAIN_MARK = {"proved": "ok", "vacuous": "vac", "violated": "FAIL", "unknown": "??", "unrunnable": "n/a",
              "differ": "!="}
STYLE = {"proved": "green", "vacuous": "cyan", "violated": "bold red", "unknown": "yellow", "unrunnable": "magenta",
         "differ": "yellow"}


def _loc(loc) -> dict[str, Any] | None:
    if loc is None:
        return None
    return {"file": loc.file, "line": loc.line, "text": loc.text}


def _rel_all(x: Any) -> Any:
    """`x` (a witness's details: JSON data) with kernel paths in its texts relative to the working
    directory, as the report's `file` fields are."""
    if isinstance(x, str):
        return _rel(x)
    if isinstance(x, dict):
        return {k: _rel_all(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_rel_all(v) for v in x]
    return x


def verdict_json(v: Verdict) -> dict[str, Any]:
    out: dict[str, Any] = {"property": v.property, "verdict": v.verdict}
    if v.reason:
        out["reason"] = _rel(v.reason)
    if v.witness is not None:
        w = v.witness
        # the texts name kernel lines relative to the working directory; `locations` keep the
        # absolute file the schema promises (a tool opens it from anywhere)
        out["witness"] = {
            "message": _rel(w.message),
            "hint": _rel(w.hint or BY_ID[v.property].hint),
            "schedule": [list(a) for a in w.schedule],
            "blocked": [{"core": c, "pc": pc, "what": _rel(what)} for c, pc, what in w.blocked],
            "locations": [_loc(loc) for loc in w.locs],
            "details": _rel_all(w.details),
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


def input_json(gi) -> dict[str, Any]:
    """A verdict's generated input (`verdict.GeneratedInput`) in the JSON report."""
    out: dict[str, Any] = {"value": gi.value, "text": gi.text, "index": gi.index}
    if gi.shrunk_from is not None:
        out["shrunk_from"] = gi.shrunk_from
        out["shrink_steps"] = gi.shrink_steps
    return out


def to_json(path: str, results: Sequence[Result]) -> dict[str, Any]:
    """The JSON report of one kernel file."""
    return to_json_files(path, [FileReport(path, list(results))])


@dataclasses.dataclass
class FileReport:
    """What one kernel file of a run came to: its results, or the input error that stopped it."""

    path: str  # as given on the command line, or as discovered under a directory
    results: list[Result]
    error: Any = None  # request.InputError
    cached: int = 0  # device counts answered from the result cache
    target_errors: list = dataclasses.field(default_factory=list)  # (target, InputError): builds that raised
    suppressed: list = dataclasses.field(default_factory=list)  # report_suppress.Suppression: not checked
    claims: list = dataclasses.field(default_factory=list)  # parametric.TargetClaims: `--every-n` (PAR-8)
    unused: list = dataclasses.field(default_factory=list)  # report_suppress.Suppression that matched nothing (REP-26)


def _error_json(f: FileReport, e: Any = None, target: str | None = None) -> dict[str, Any]:
    e = f.error if e is None else e
    out = {"file": f.path, "code": e.code, "message": _rel(e.one_line().split(": ", 1)[1]),
           "location": _loc(e.loc) if e.loc is not None and e.loc.line else None}
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


def summary(results: Sequence[Result]) -> dict[str, int]:
    s = dict.fromkeys(KINDS, 0)
    for r in results:
        for v in r.verdicts:
            s[v.verdict] += 1
    return s


def summary_counts(s: dict[str, int]) -> str:
    """`3 proved, 0 violated, 1 unknown`, then the vacuous and unrunnable counts when there are any (REP-20,
    REP-21): those two are never folded into the proved count."""
    text = f"{s['proved']} proved, {s['violated']} violated, {s['unknown']} unknown"
    if s.get("vacuous"):
        text += f", {s['vacuous']} vacuous"
    if s.get("unrunnable"):
        text += f", {s['unrunnable']} unrunnable in interpret mode"
    return text


def overall(s: dict[str, int], bad: bool = False, unknown: bool = False) -> str:
    """The kind a summary line is marked with: violated (or `bad`: an input error), unknown (or `unknown`),
    unrunnable, else proved (vacuous verdicts are no failure, REP-20)."""
    if s["violated"] or bad:
        return "violated"
    if s["unknown"] or unknown:
        return "unknown"
    return "unrunnable" if s.get("unrunnable") else "proved"


# --- shared by the formats ----------------------------------------------------------

UNKNOWN_HINTS = {
    "timeout": "not decided in time: raise --timeout, or verify fewer device counts at once (--devices)",
    "fails": "a run can fail inside the interpreter (see the violated properties): fix that first, "
    "then this property can be decided",
    "deadlocks": "the kernel deadlocks (see deadlock-free): fix that first",
    "encoding": "semcheck cannot decide this for this kernel yet (the reason names the construct); "
    "--dma-mode hardware may still decide it",
    "unsupported": "the front end cannot lower this construct faithfully, so nothing is claimed",
    "other": "semcheck could not decide this property: the reason says why",
}


def hint_for(v: Verdict) -> str:
    if v.verdict == "violated":
        return v.witness.hint if v.witness is not None and v.witness.hint else BY_ID[v.property].hint
    if v.verdict == "unknown":
        return UNKNOWN_HINTS[unknown_kind(v.reason)]
    if v.verdict == "unrunnable":
        return v.stats.get("hint", "") or UNRUNNABLE_HINT
    return ""


UNRUNNABLE_HINT = ("jax's interpreter cannot run this kernel, so interpret mode decides nothing about it: check it "
                   "with --dma-mode hardware (a TPU runs it)")


def unrunnable_line(v: Verdict) -> str:
    """A row's words for a mode jax's interpreter cannot run (REP-21): the reason up to what jax raises."""
    return v.reason.split(": jax raises ", 1)[0] + (": jax raises " + v.stats["raises"] if v.stats.get("raises") else "")


def configs(results: Sequence[Result]) -> list[tuple[str, int, str, list[Verdict]]]:
    return [(r.target, r.devices, r.dma_mode, list(r.verdicts)) for r in results]


def worst_kind(verdicts: Sequence[Verdict]) -> str:
    """A row's mark: violated, unknown, unrunnable, else proved (a vacuous verdict is no failure, REP-20;
    a row of vacuous verdicts only is marked as such)."""
    kinds = {v.verdict for v in verdicts}
    for kind in ("violated", "unknown", "unrunnable", "proved"):
        if kind in kinds:
            return kind
    return "vacuous" if kinds else "proved"


def _config_summary(verdicts: Sequence[Verdict], rules: bool = False) -> str:
    """A row's words. `rules`: name the spec rule a reduction rests on (REP-23: only under -v)."""
    if verdicts and all(v.verdict == "unrunnable" for v in verdicts):
        return unrunnable_line(verdicts[0])
    parts = []
    for kind in ("violated", "unknown", "unrunnable"):
        names = [v.property for v in verdicts if v.verdict == kind]
        if names and len(names) == len(verdicts) > 1:
            return f"all {len(names)} properties {kind}"
        if names:
            parts.append(f"{', '.join(names)} {kind}")
    proved = [v for v in verdicts if v.verdict == "proved"]
    empty = [v.property for v in verdicts if v.verdict == "vacuous"]
    n = len(proved)
    if not parts:
        text = (f"all {n} properties proved" if n != 1 else "proved") if not empty else f"{n} proved" if n else ""
        folds = [(f["devices"], f.get("faithful", True)) if (f := v.stats.get("fold")) else None for v in proved]
        on_fold = {f for f in folds if f is not None}
        if len(on_fold) == 1:
            k = sum(f is not None for f in folds)
            devices, faithful = on_fold.pop()
            where = (f"on a fold onto {devices} devices" + (" (RUN-7)" if rules else "") if faithful
                     else f"on the run of one class of {devices} device{'s' if devices > 1 else ''}"
                     + (" (RUN-31)" if rules else ""))
            text += f" {where}" if k == len(folds) else f", {k} {where}"
        if empty:  # REP-20: true, but shown of nothing, so said apart from the proofs
            text += ("; " if text else "") + f"{', '.join(empty)} vacuous"
        return text
    if n:
        parts.append(f"{n} proved")
    if empty:
        parts.append(f"{', '.join(empty)} vacuous")
    return "; ".join(parts)


def row_summary(r: Result, rules: bool = False) -> str:
    """A row's summary: its verdicts, and for a target with generated inputs how many were verified."""
    return _config_summary(r.verdicts, rules) + row_suffix(r.examples)


def header(path: str, results: Sequence[Result]) -> str:
    targets = list(dict.fromkeys(r.target for r in results))
    devices = sorted({r.devices for r in results})
    modes = list(dict.fromkeys(r.dma_mode for r in results))
    return (f"{path}: {'target' if len(targets) == 1 else 'targets'} {', '.join(targets)}; "
            f"{', '.join(map(str, devices))} devices; DMA {'mode' if len(modes) == 1 else 'modes'} "
            f"{', '.join(modes)}")


def difference_line(d) -> str:
    causes = "; ".join(f"{e.code}: {CAUSES[e.code]}" for e in d.causes)
    return d.describe() + (f" (can explain it, {causes})" if causes else "")


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
    return json.dumps(obj, indent=2, default=_default)


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
