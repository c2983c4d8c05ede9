"""Reports: text for people, JSON for machines (schema in specs/report-schema.json), SARIF 2.1.0."""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Sequence
from typing import Any

from semcheck.checker.differences import CAUSES, difference_json, differences
from semcheck.checker.generated_inputs import coverage, input_line, row_suffix
from semcheck.checker.properties import BY_ID, IDS, REGISTRY
from semcheck.checker.verdict import Verdict, unknown_kind
from semcheck.checker.request import Result

SCHEMA_VERSION = "1.4"
MARK = {"proved": "✓", "violated": "✗", "unknown": "?"}
PLAIN_MARK = {"proved": "ok", "violated": "FAIL", "unknown": "??"}
STYLE = {"proved": "green", "violated": "bold red", "unknown": "yellow"}


def _loc(loc) -> dict[str, Any] | None:
    if loc is None:
        return None
    return {"file": loc.file, "line": loc.line, "text": loc.text}


def verdict_json(v: Verdict) -> dict[str, Any]:
    out: dict[str, Any] = {"property": v.property, "verdict": v.verdict}
    if v.reason:
        out["reason"] = v.reason
    if v.witness is not None:
        w = v.witness
        out["witness"] = {
            "message": w.message,
            "hint": w.hint or BY_ID[v.property].hint,
            "schedule": [list(a) for a in w.schedule],
            "blocked": [{"core": c, "pc": pc, "what": what} for c, pc, what in w.blocked],
            "locations": [_loc(loc) for loc in w.locs],
            "details": w.details,
        }
    if v.input is not None:
        out["input"] = input_json(v.input)
    if v.stats:
        out["stats"] = v.stats
    return out


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
        "summary": summary(results),
        "results": rows,
        "differences": [dict(difference_json(d), file=f.path) for f in files for d in differences(f.results)],
        "errors": [_error_json(f) for f in files if f.error is not None]
                  + [_error_json(f, e, name) for f in files for name, e in f.target_errors],
    }


def summary(results: Sequence[Result]) -> dict[str, int]:
    s = {"proved": 0, "violated": 0, "unknown": 0}
    for r in results:
        for v in r.verdicts:
            s[v.verdict] += 1
    return s


def to_sarif(path: str, results: Sequence[Result], version: str) -> dict[str, Any]:
    """SARIF 2.1.0 of one kernel file (see `to_sarif_files`)."""
    return to_sarif_files([FileReport(path, list(results))], version)


def to_sarif_files(files: Sequence[FileReport], version: str) -> dict[str, Any]:
    """SARIF 2.1.0: one result per violated (level error) or unknown (level warning) verdict.

    Proved verdicts produce no result; a file that could not be verified at
    all is one result of level error (rule `input-error`). URIs are relative
    to the working directory (run semcheck from the repository root for
    code-scanning uploads). Each result's property bag says where it holds:
    target, device count and DMA mode.
    """
    rules = [
        {
            "id": p.id,
            "name": "".join(w.capitalize() for w in p.id.split("-")),
            "shortDescription": {"text": p.summary},
            "help": {"text": f"{p.summary} Typical fix: {p.hint}. Spec: `semcheck spec {p.rule}`."},
            "defaultConfiguration": {"level": "error"},
            "properties": {"specRule": p.rule},
        }
        for p in REGISTRY
    ]
    sarif_results = []
    for f in files:
        failed = [(f.path, f.error)] if f.error is not None else [
            (f"{f.path}::{name}", e) for name, e in f.target_errors]
        for what, e in failed:
            loc = e.loc if e.loc is not None and e.loc.line else None
            sarif_results.append({
                "ruleId": "input-error",
                "level": "error",
                "message": {"text": _rel(f"semcheck could not verify {what}: {e.one_line()}")},
                "locations": [{"physicalLocation": {
                    "artifactLocation": {"uri": _uri(loc.file if loc else f.path)},
                    **({"region": {"startLine": loc.line}} if loc else {})}}],
                "properties": {"code": e.code},
            })
        if f.error is None:
            sarif_results.extend(_sarif_results(f.path, f.results))
    if any(f.error is not None or f.target_errors for f in files):
        rules.append({"id": "input-error", "name": "InputError",
                      "shortDescription": {"text": "semcheck could not verify the kernel file at all."},
                      "defaultConfiguration": {"level": "error"}})
    return {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "semcheck",
                        "version": version,
                        "rules": rules,
                    }
                },
                "results": sarif_results,
            }
        ],
    }


def _sarif_results(path: str, results: Sequence[Result]) -> list[dict[str, Any]]:
    sarif_results = []
    differ = {(d.target, d.devices, d.property): d for d in differences(results)}
    for r in results:
        for v in r.verdicts:
            if v.verdict == "proved":
                continue
            w = v.witness
            locs = [loc for loc in (w.locs if w else ()) if loc and loc.line > 0]
            text = (w.message if w else v.reason) + f" [{r.target}, {r.devices} devices, {r.dma_mode}]"
            if v.input is not None and v.verdict == "violated":
                line = input_line(v) or ""
                text += f" {line[:1].upper()}{line[1:]}."
            d = differ.get((r.target, r.devices, v.property))
            if d is not None and v.verdict == "violated":
                text += f" Modes differ: {_difference_line(d)}."
            hint = hint_for(v)
            if hint:
                text += f" Hint: {hint}."
            res: dict[str, Any] = {
                "ruleId": v.property,
                "ruleIndex": IDS.index(v.property),
                "level": "error" if v.verdict == "violated" else "warning",
                "message": {"text": _rel(text)},
            }
            loc = locs[0] if locs else None
            res["locations"] = [
                {
                    "physicalLocation": {
                        "artifactLocation": {"uri": _uri(loc.file if loc else path)},
                        **({"region": {"startLine": loc.line}} if loc else {}),
                    }
                }
            ]
            if len(locs) > 1:
                res["relatedLocations"] = [
                    {
                        "id": i,
                        "physicalLocation": {
                            "artifactLocation": {"uri": _uri(o.file)},
                            "region": {"startLine": o.line},
                        },
                    }
                    for i, o in enumerate(locs[1:])
                ]
            res["properties"] = {
                "target": r.target,
                "devices": r.devices,
                "dmaMode": r.dma_mode,
                "verdict": v.verdict,
            }
            if v.input is not None:
                res["properties"]["input"] = input_json(v.input)
            sarif_results.append(res)
    return sarif_results


def _uri(file: str) -> str:
    """A relative (to the working directory) or absolute URI reference for a kernel file."""
    from urllib.parse import quote

    try:
        rel = os.path.relpath(file)
    except ValueError:
        rel = file
    path = rel if not rel.startswith("..") else os.path.abspath(file)
    return quote(path.replace(os.sep, "/"), safe="/:@-._~")


def _rel(text: str) -> str:
    """Kernel paths relative to the working directory, as the user typed them."""
    return text.replace(os.getcwd() + os.sep, "")


# --- text --------------------------------------------------------------------------

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
    return ""


def _configs(results: Sequence[Result]) -> list[tuple[str, int, str, list[Verdict]]]:
    return [(r.target, r.devices, r.dma_mode, list(r.verdicts)) for r in results]


def _worst(verdicts: Sequence[Verdict]) -> str:
    kinds = {v.verdict for v in verdicts}
    return "violated" if "violated" in kinds else "unknown" if "unknown" in kinds else "proved"


def _config_summary(verdicts: Sequence[Verdict]) -> str:
    parts = []
    for kind in ("violated", "unknown"):
        names = [v.property for v in verdicts if v.verdict == kind]
        if names and len(names) == len(verdicts) > 1:
            return f"all {len(names)} properties {kind}"
        if names:
            parts.append(f"{', '.join(names)} {kind}")
    n = sum(v.verdict == "proved" for v in verdicts)
    if not parts:
        text = f"all {n} properties proved" if n != 1 else "proved"
        folds = [(v.stats.get("fold") or {}).get("devices") for v in verdicts]
        on_fold = {f for f in folds if f is not None}
        if len(on_fold) == 1:
            k = sum(f is not None for f in folds)
            text += (f" on a fold onto {on_fold.pop()} devices (RUN-7)" if k == len(folds)
                     else f", {k} on a fold onto {on_fold.pop()} devices (RUN-7)")
        return text
    if n:
        parts.append(f"{n} proved")
    return "; ".join(parts)


def _row_summary(r: Result) -> str:
    """A row's summary: its verdicts, and for a target with generated inputs how many were verified."""
    return _config_summary(r.verdicts) + row_suffix(r.examples)


def _where(configs: Sequence[tuple[int, str]]) -> str:
    by_devices: dict[int, list[str]] = {}
    for n, mode in configs:
        by_devices.setdefault(n, []).append(mode)
    return ", ".join(f"{n} devices ({', '.join(modes)})" for n, modes in by_devices.items())


def _header(path: str, results: Sequence[Result]) -> str:
    targets = list(dict.fromkeys(r.target for r in results))
    devices = sorted({r.devices for r in results})
    modes = list(dict.fromkeys(r.dma_mode for r in results))
    return (f"{path}: {'target' if len(targets) == 1 else 'targets'} {', '.join(targets)}; "
            f"{', '.join(map(str, devices))} devices; DMA {'mode' if len(modes) == 1 else 'modes'} "
            f"{', '.join(modes)}")


def render_text(console, path: str, results: Sequence[Result]) -> None:
    """What a person reads: one line per configuration, then each problem once, in detail.

    A configuration is a target x device count x DMA mode. A violated or
    unknown property found at several configurations is shown in full at the
    first (smallest) one, with the others listed under it. Colour and
    Unicode marks on a terminal, plain ASCII marks otherwise.
    """
    from rich.text import Text

    plain = not console.is_terminal
    marks = PLAIN_MARK if plain else MARK
    rule_chars = "-" if plain else "─"

    def say(text: str, style: str = "") -> None:
        console.print(Text(_rel(text), style=style), soft_wrap=True, highlight=False)

    _render_file(console, say, marks, rule_chars, path, results)
    _render_summary(console, marks, plain, results)


def render_files(console, files: Sequence[FileReport]) -> None:
    """The text report of a run over several kernel files: each file's section, then one summary.

    One file without an error reads exactly as `render_text`. A file that
    could not be verified gets one line saying why.
    """
    from rich.text import Text

    plain = not console.is_terminal
    marks = PLAIN_MARK if plain else MARK
    rule_chars = "-" if plain else "─"

    def say(text: str, style: str = "") -> None:
        console.print(Text(_rel(text), style=style), soft_wrap=True, highlight=False)

    for i, f in enumerate(files):
        if i:
            console.print()
        if f.error is not None:
            line = Text(f"{marks['violated']} ", style=STYLE["violated"])
            line.append(_rel(f"{f.path}: not verified: {f.error.one_line()}"))
            console.print(line, soft_wrap=True, highlight=False)
            continue
        _render_file(console, say, marks, rule_chars, f.path, f.results)
    _render_summary(console, marks, plain, [r for f in files for r in f.results], files)


def _render_file(console, say, marks, rule_chars, path: str, results: Sequence[Result]) -> None:
    from rich.text import Text

    if results:
        say(_header(path, results), "bold")
    width = max((len(r.target) for r in results), default=0)
    mark_width = max(len(m) for m in marks.values())
    for r in results:
        worst = _worst(r.verdicts)
        line = Text(f"{marks[worst]:<{mark_width}} ", style=STYLE[worst])
        line.append(f"{r.target:<{width}}  devices={r.devices:<4} {r.dma_mode:<8}  ")
        line.append(_row_summary(r), style=STYLE[worst] if worst != "proved" else "")
        if r.cached:
            line.append("  (cached)", style="dim")
        console.print(line, soft_wrap=True, highlight=False)

    # Each problem once. A violation: per (target, property). Unknowns: per
    # (target, kind of reason), listing the properties -- a timeout or a
    # failing run leaves several undecided for the same reason.
    groups: dict[tuple[str, str, str], list[tuple[int, str, Verdict]]] = {}
    for target, n, mode, verdicts in _configs(results):
        for v in verdicts:
            if v.verdict == "violated":
                groups.setdefault((target, "violated", v.property), []).append((n, mode, v))
            elif v.verdict == "unknown":
                groups.setdefault((target, "unknown", unknown_kind(v.reason)), []).append((n, mode, v))
    order = {p: i for i, p in enumerate(IDS)}

    def first_property(key) -> int:
        return min(order.get(v.property, 99) for _, _, v in groups[key])

    for key in sorted(groups, key=lambda k: (k[1] != "violated", first_property(k))):
        target, kind, _ = key
        entries = sorted(groups[key], key=lambda c: c[0])  # stable: mode order kept per device count
        n, mode, v = entries[0]
        props = list(dict.fromkeys(e[2].property for e in sorted(entries, key=lambda e: order.get(e[2].property, 99))))
        others = list(dict.fromkeys((m, d) for m, d, _ in entries if (m, d) != (n, mode)))
        console.print()
        shown = ", ".join(props) if len(props) < 3 else f"{len(props)} properties"
        title = Text(f"{marks[kind]} {shown} {kind}", style=STYLE[kind])
        title.append(f": {target}, {n} devices, {mode}")
        console.rule(title, characters=rule_chars, align="left")
        if kind == "violated" and v.witness is not None:
            _witness(console, say, v.witness)
            if v.input is not None:
                say(input_line(v) or "", "bold")
        else:
            same = [e[2] for e in entries if (e[0], e[1]) == (n, mode)]
            reasons = list(dict.fromkeys(u.reason for u in same))
            if len(reasons) == 1:
                say(reasons[0])
            else:
                for u in same:
                    say(f"{u.property}: {u.reason}")
        if len(props) >= 3:
            say(f"properties: {', '.join(props)}")
        if others:
            say(f"also {kind} at: {_where(others)}", "dim")
        hint = hint_for(v)
        if hint:
            line = Text("hint: ", style="bold")
            line.append(_rel(hint))
            console.print(line, soft_wrap=True, highlight=False)

    lines = coverage(results)
    if lines:
        console.print()
        for text in lines:
            say(f"generated inputs: {text}")

    # Where the interpreter and the hardware disagree, per target x device count, with what can explain it.
    by_config: dict[tuple[str, int], list] = {}
    for d in differences(results):
        by_config.setdefault((d.target, d.devices), []).append(d)
    for (target, n), ds in by_config.items():
        console.print()
        title = Text(f"{marks['unknown']} modes differ", style=STYLE["unknown"])
        title.append(f": {target}, {n} devices")
        console.rule(title, characters=rule_chars, align="left")
        for d in ds:
            say(d.describe())
        for e in dict.fromkeys(e for d in ds for e in d.causes):
            say(f"can explain it, {e.code}: {CAUSES[e.code]}")
            for loc in e.locs:
                say(f"  at {loc.file}:{loc.line}: {loc.text.strip()}")
        if not any(d.causes for d in ds):
            say("no known interpreter divergence explains it: see specs/divergences.md")
        say("interpret mode (eager, on_wait) predicts jax's interpreter; hardware predicts a TPU "
            "(specs/divergences.md)", "dim")


def _render_summary(console, marks, plain: bool, results: Sequence[Result],
                    files: Sequence[FileReport] | None = None) -> None:
    from rich.text import Text

    s = summary(results)
    errors = sum(f.error is not None for f in files or ())
    worst = "violated" if s["violated"] or errors else "unknown" if s["unknown"] or not results else "proved"
    console.print()
    line = Text(f"{marks[worst]} ", style=STYLE[worst])
    text = f"{s['proved']} proved, {s['violated']} violated, {s['unknown']} unknown"
    if files is not None and len(files) > 1:
        text += f" in {len(files) - errors} kernel files"
    if errors:
        text += f"; {errors} {'file' if errors == 1 else 'files'} not verified"
    line.append(text, style="bold" if not plain else "")
    cached = sum(r.cached for r in results)
    if cached:  # above the summary, which stays the last line
        console.print(Text(f"{cached} of {len(results)} configurations answered from the result cache: "
                           "nothing they read has changed since they were verified (--no-cache verifies afresh)",
                           style="dim"), soft_wrap=True, highlight=False)
    console.print(line, soft_wrap=True, highlight=False)


def _difference_line(d) -> str:
    causes = "; ".join(f"{e.code}: {CAUSES[e.code]}" for e in d.causes)
    return d.describe() + (f" (can explain it, {causes})" if causes else "")


def _witness(console, say, w) -> None:
    explanation = w.details.get("explanation")
    if explanation:
        # a deadlock, explained per group of blocked cores (one per rotation class) and as a cycle;
        # the per-device timelines, which say the same thing N times, stay in the JSON
        say("deadlock: " + explanation[0] if not explanation[0].startswith("cycle") else explanation[0])
        for line in explanation[1:]:
            say(line)
        for loc in dict.fromkeys(w.locs):
            if loc is not None and loc.line:
                say(f"  at {loc.file}:{loc.line}: {loc.text.strip()}")
        return
    say(w.message)
    timeline = w.details.get("timeline")
    if timeline:
        say("timeline (last steps of each involved device; >> marks where it stops):")
        for dev in timeline:
            say(f"  device {dev['device']}:")
            for ev in dev["events"]:
                say(f"    {ev}", "dim" if ">>" not in ev else "")
    for _, _, what in w.blocked:  # core and position indices stay in the JSON
        say(f"  stopped: {what}")
    for loc in dict.fromkeys(w.locs):
        if loc is not None and loc.line:
            say(f"  at {loc.file}:{loc.line}: {loc.text.strip()}")


def render(fmt: str, label: str, files: Sequence[FileReport], version: str) -> str:
    """A machine- or browser-readable report (`fmt` json, sarif, markdown or html), ending in a newline."""
    if fmt == "json":
        return dump_json(to_json_files(label, files)) + "\n"
    if fmt == "sarif":
        return json.dumps(to_sarif_files(files, version), indent=2) + "\n"
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


# --- markdown and HTML, with Mermaid sequence diagrams of the witnesses ----------------------

MERMAID_CDN = "https://cdn.jsdelivr.net/npm/mermaid@11/dist/mermaid.min.js"
"""Where the HTML report loads Mermaid from, unless SEMCHECK_MERMAID_JS names a local mermaid.min.js
to inline (then the file works offline)."""
MAX_DIAGRAM_WAITS = 4  # blocked cores drawn per deadlock; the rest are the same up to rotation, or listed
_MERMAID_UNSAFE = re.compile(r"[^A-Za-z0-9 _.,()+\-=\[\]/'*!?]")


def _mtext(text: str) -> str:
    """Text safe inside a Mermaid message or note: no ; # : < > { } or quotes, which its grammar reads."""
    text = re.sub(r"(\d):(\d)", r"\1..\2", text.replace("->", "to"))
    return re.sub(r"\s+", " ", _MERMAID_UNSAFE.sub(" ", text)).strip() or "-"


def mermaid_diagram(v: Verdict) -> str | None:
    """A Mermaid `sequenceDiagram` of a violation's witness (None when there is nothing to draw).

    Deadlocks: one participant per core involved; an operation that added to a blocked counter is a
    solid arrow, one that never runs a dotted arrow ending in a cross, each blocked wait a note.
    Races: the two accesses as notes on their devices, and the copy between them. Other witnesses:
    where each involved device stops, from the timeline.
    """
    w = v.witness
    if w is None:
        return None
    if w.details.get("waits"):
        return _deadlock_diagram(w.details["waits"])
    if w.details.get("accesses"):
        return _race_diagram(w.details["accesses"], w)
    timeline = w.details.get("timeline") or []
    if not timeline:
        return None
    out = ["sequenceDiagram"]
    devices = [d["device"] for d in timeline][:MAX_DIAGRAM_WAITS]
    out += [f"    participant D{d} as device {d}" for d in devices]
    for d in timeline[:MAX_DIAGRAM_WAITS]:
        stop = next((e for e in reversed(d["events"]) if ">>" in e), d["events"][-1] if d["events"] else "")
        loc, _, what = stop.partition("  ")
        out.append(f"    Note over D{d['device']}: stops at {_mtext(loc.rsplit(':', 1)[-1] and 'line ' + loc.rsplit(':', 1)[-1])} "
                   f"{_mtext(what.replace('>>', ''))}")
    return "\n".join(out)


def _deadlock_diagram(waits: list[dict]) -> str:
    drawn = waits[:MAX_DIAGRAM_WAITS]
    cores: dict[int, str] = {}
    for wt in drawn:
        cores.setdefault(wt["core"], wt["name"])
        for nd in wt["needs"]:
            cores.setdefault(nd["core"], nd["name"])
    out = ["sequenceDiagram"]
    out += [f"    participant C{c} as {_mtext(name)}" for c, name in sorted(cores.items())]
    for wt in drawn:
        arrows: dict[tuple, int] = {}
        for nd in sorted(wt["needs"], key=lambda nd: not nd["runs"]):  # what ran, then what never runs
            key = (nd["core"], nd["what"], nd["line"], nd["runs"])
            arrows[key] = arrows.get(key, 0) + 1
        for (core, what, line, runs), times in arrows.items():
            again = f", {times} times" if times > 1 else ""
            if runs:
                out.append(f"    C{core}->>C{wt['core']}: {_mtext(what)}, line {line}{again}")
            else:
                out.append(f"    C{core}--xC{wt['core']}: {_mtext(what)}, line {line}{again} (never runs)")
        out.append(f"    Note over C{wt['core']}: BLOCKED at line {wt['line']}, {_mtext(wt['what'])}")
    if len(waits) > len(drawn):
        first, last = min(cores), max(cores)
        span = f"C{first},C{last}" if first != last else f"C{first}"
        out.append(f"    Note over {span}: {len(waits) - len(drawn)} more blocked cores, "
                   f"the same up to rotation or as the text says")
    return "\n".join(out)


def _race_diagram(accesses: list[dict], w) -> str:
    devices = sorted({a["device"] for a in accesses})
    out = ["sequenceDiagram"]
    out += [f"    participant D{d} as device {d}" for d in devices]
    for a in accesses:
        line = str(a.get("line", "")).rsplit(":", 1)[-1]
        kind = "writes" if a.get("write") else "reads"
        out.append(f"    Note over D{a['device']}: {_mtext(a['what'])} ({kind}), line {_mtext(line)}")
    a, b = accesses[0], accesses[-1]
    copy = next((x for x in accesses if "cop" in x["what"]), None)
    if copy is not None:
        other = b if copy is a else a
        out.append(f"    D{copy['device']}-)D{other['device']}: the copy, in flight while the other access runs")
    out.append(f"    Note over D{devices[0]},D{devices[-1]}: RACE, either order is possible" if len(devices) > 1
               else f"    Note over D{devices[0]}: RACE, either order is possible")
    return "\n".join(out)


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


_MD_MARK = {"proved": "✅", "violated": "❌", "unknown": "❓"}


def _problems(results: Sequence[Result]):
    """Each violated property once per target (first at the smallest device count), and the unknowns
    grouped by cause: [(kind, target, verdict at first, [(devices, mode) elsewhere], n, mode)]."""
    groups: dict[tuple, list] = {}
    for r in results:
        for v in r.verdicts:
            if v.verdict == "proved":
                continue
            key = (r.target, v.verdict, v.property if v.verdict == "violated" else unknown_kind(v.reason))
            groups.setdefault(key, []).append((r.devices, r.dma_mode, v))
    order = {p: i for i, p in enumerate(IDS)}
    out = []
    for key in sorted(groups, key=lambda k: (k[1] != "violated", min(order[v.property] for _, _, v in groups[k]))):
        entries = sorted(groups[key], key=lambda e: e[0])
        n, mode, v = entries[0]
        props = list(dict.fromkeys(e[2].property for e in entries))
        others = list(dict.fromkeys((d, m) for d, m, _ in entries if (d, m) != (n, mode)))
        out.append((key[1], key[0], v, others, n, mode, props))
    return out


def to_markdown(label: str, files: Sequence[FileReport]) -> str:
    """GitHub-flavoured markdown: a summary table, then per problem its explanation, a Mermaid
    sequence diagram of the witness and the hint (fit for $GITHUB_STEP_SUMMARY and PR comments)."""
    results = [r for f in files for r in f.results]
    s = summary(results)
    errors = [f for f in files if f.error is not None]
    worst = "violated" if s["violated"] or errors else "unknown" if s["unknown"] or not results else "proved"
    out = [f"## semcheck {_MD_MARK[worst]} {_md_cell(_rel(label))}", "",
           f"**{s['proved']} proved, {s['violated']} violated, {s['unknown']} unknown**"
           + (f" in {len(files) - len(errors)} kernel files" if len(files) > 1 else "")
           + (f"; {len(errors)} not verified" if errors else ""), "",
           "| | file | target | devices | DMA mode | result |", "|---|---|---|---|---|---|"]
    for f in files:
        if f.error is not None:
            out.append(f"| ❌ | `{_md_cell(f.path)}` | | | | not verified: {_md_cell(_rel(f.error.one_line()))} |")
        for r in f.results:
            worst_r = _worst(r.verdicts)
            out.append(f"| {_MD_MARK[worst_r]} | `{_md_cell(f.path)}` | {_md_cell(r.target)} | {r.devices} | "
                       f"{r.dma_mode} | {_md_cell(_row_summary(r))} |")
    covered = [text for f in files for text in coverage(f.results)]
    if covered:
        out += [""] + [f"- generated inputs: {_md_cell(text)}" for text in covered]
    for f in files:
        for kind, target, v, others, n, mode, props in _problems(f.results):
            shown = ", ".join(props) if len(props) < 3 else f"{len(props)} properties"
            out += ["", f"### {_MD_MARK[kind]} {shown} {kind}: `{_md_cell(f.path)}` {_md_cell(target)}, "
                        f"{n} devices, {mode}", ""]
            if kind == "violated" and v.witness is not None:
                text = v.witness.details.get("explanation") or [v.witness.message]
                out += ["```text", *(_rel(t) for t in text), "```"]
                diagram = mermaid_diagram(v)
                if diagram:
                    out += ["", "```mermaid", diagram, "```"]
                locs = [loc for loc in dict.fromkeys(v.witness.locs) if loc is not None and loc.line]
                if locs:
                    out += [""] + [f"- `{_rel(loc.file)}:{loc.line}`: `{_md_cell(loc.text.strip())}`" for loc in locs]
                if v.input is not None:
                    out += ["", f"**{_md_cell(input_line(v) or '')}**"]
            else:
                out.append(_md_cell(_rel(v.reason)))
                if len(props) >= 3:
                    out += ["", f"properties: {', '.join(props)}"]
            if others:
                out += ["", f"also {kind} at: {_where(others)}"]
            hint = hint_for(v)
            if hint:
                out += ["", f"**hint:** {_md_cell(_rel(hint))}"]
    return "\n".join(out) + "\n"


def to_html(label: str, files: Sequence[FileReport]) -> str:
    """One self-contained HTML page: the markdown report's content, with the diagrams drawn by Mermaid."""
    import html

    e = html.escape
    results = [r for f in files for r in f.results]
    s = summary(results)
    body = [f"<h1>semcheck: {e(_rel(label))}</h1>",
            f"<p><b>{s['proved']} proved, {s['violated']} violated, {s['unknown']} unknown</b></p>",
            "<table><tr><th></th><th>file</th><th>target</th><th>devices</th><th>DMA mode</th><th>result</th></tr>"]
    for f in files:
        if f.error is not None:
            body.append(f"<tr><td>❌</td><td><code>{e(f.path)}</code></td><td colspan=3></td>"
                        f"<td>not verified: {e(_rel(f.error.one_line()))}</td></tr>")
        for r in f.results:
            body.append(f"<tr><td>{_MD_MARK[_worst(r.verdicts)]}</td><td><code>{e(f.path)}</code></td>"
                        f"<td>{e(r.target)}</td><td>{r.devices}</td><td>{r.dma_mode}</td>"
                        f"<td>{e(_row_summary(r))}</td></tr>")
    body.append("</table>")
    diagrams = 0
    for f in files:
        for kind, target, v, others, n, mode, props in _problems(f.results):
            shown = ", ".join(props) if len(props) < 3 else f"{len(props)} properties"
            body.append(f"<h2>{_MD_MARK[kind]} {e(shown)} {kind}: <code>{e(f.path)}</code> {e(target)}, "
                        f"{n} devices, {mode}</h2>")
            if kind == "violated" and v.witness is not None:
                text = v.witness.details.get("explanation") or [v.witness.message]
                body.append("<pre class=text>" + e("\n".join(_rel(t) for t in text)) + "</pre>")
                if v.input is not None:
                    body.append(f"<p><b>{e(input_line(v) or '')}</b></p>")
                diagram = mermaid_diagram(v)
                if diagram:
                    diagrams += 1
                    body.append(f"<pre class=mermaid>\n{e(diagram)}\n</pre>")
            else:
                body.append(f"<p>{e(_rel(v.reason))}</p>")
            if others:
                body.append(f"<p>also {kind} at: {e(_where(others))}</p>")
            hint = hint_for(v)
            if hint:
                body.append(f"<p><b>hint:</b> {e(_rel(hint))}</p>")
    local = os.environ.get("SEMCHECK_MERMAID_JS")
    if local:
        with open(local, encoding="utf-8") as fh:
            script = "<script>\n" + fh.read().replace("</script", "<\\/script") + "\n</script>"
        note = "Mermaid is inlined in this file."
    else:
        script = f'<script src="{MERMAID_CDN}"></script>'
        note = (f"The diagrams are drawn by Mermaid, loaded from {MERMAID_CDN}; offline, set "
                "SEMCHECK_MERMAID_JS to a local mermaid.min.js when writing the report to inline it.")
    style = ("body{font-family:system-ui,sans-serif;margin:2em;max-width:80em}"
             "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2em .5em;text-align:left}"
             "pre.text{background:#f6f8fa;padding:.8em;white-space:pre-wrap}")
    return ("<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8>"
            f"<title>semcheck: {e(_rel(label))}</title><style>{style}</style></head><body>\n"
            + "\n".join(body)
            + (f"\n<p><small>{e(note)}</small></p>\n{script}\n"
               "<script>mermaid.initialize({startOnLoad: true, securityLevel: 'strict'});</script>\n"
               if diagrams else "\n")
            + "</body></html>\n")
