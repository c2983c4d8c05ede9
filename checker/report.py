"""Reports: text for people, JSON for machines (schema in specs/report-schema.json), SARIF 2.1.0."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from typing import Any

from semcheck.checker.differences import CAUSES, difference_json, differences
from semcheck.checker.properties import BY_ID, IDS, REGISTRY
from semcheck.checker.verdict import Verdict
from semcheck.checker.verify import Result

SCHEMA_VERSION = "1.2"
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
    if v.stats:
        out["stats"] = v.stats
    return out


def to_json(path: str, results: Sequence[Result]) -> dict[str, Any]:
    """The JSON report of one kernel file."""
    return to_json_files(path, [FileReport(path, list(results))])


@dataclasses.dataclass
class FileReport:
    """What one kernel file of a run came to: its results, or the input error that stopped it."""

    path: str  # as given on the command line, or as discovered under a directory
    results: list[Result]
    error: Any = None  # verify.InputError
    cached: int = 0  # device counts answered from the result cache


def _error_json(f: FileReport) -> dict[str, Any]:
    e = f.error
    return {"file": f.path, "code": e.code, "message": _rel(e.one_line().split(": ", 1)[1]),
            "location": _loc(e.loc) if e.loc is not None and e.loc.line else None}


def to_json_files(label: str, files: Sequence[FileReport]) -> dict[str, Any]:
    """The JSON report of a run over one or several kernel files (`label`: the paths as given)."""
    rows = []
    for f in files:
        for r in f.results:
            for v in r.verdicts:
                row = {"file": f.path, "target": r.target, "devices": r.devices, "dma_mode": r.dma_mode}
                row.update(verdict_json(v))
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
        "errors": [_error_json(f) for f in files if f.error is not None],
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
        if f.error is not None:
            e = f.error
            loc = e.loc if e.loc is not None and e.loc.line else None
            sarif_results.append({
                "ruleId": "input-error",
                "level": "error",
                "message": {"text": _rel(f"semcheck could not verify {f.path}: {e.one_line()}")},
                "locations": [{"physicalLocation": {
                    "artifactLocation": {"uri": _uri(loc.file if loc else f.path)},
                    **({"region": {"startLine": loc.line}} if loc else {})}}],
                "properties": {"code": e.code},
            })
            continue
        sarif_results.extend(_sarif_results(f.path, f.results))
    if any(f.error is not None for f in files):
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


def unknown_kind(reason: str) -> str:
    """A coarse class of an unknown verdict's reason, for grouping and hints."""
    r = reason.lower()
    if r.startswith("timeout") or "z3 gave up: timeout" in r or "canceled" in r:
        return "timeout"
    if r.startswith("unsupported"):
        return "unsupported"
    if "program can fail" in r:
        return "fails"
    if "deadlocks" in r:
        return "deadlocks"
    if "outside the encoding" in r or "not static" in r:
        return "encoding"
    return "other"


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
    for target, n, mode, verdicts in _configs(results):
        worst = _worst(verdicts)
        line = Text(f"{marks[worst]:<{mark_width}} ", style=STYLE[worst])
        line.append(f"{target:<{width}}  devices={n:<4} {mode:<8}  ")
        line.append(_config_summary(verdicts), style=STYLE[worst] if worst != "proved" else "")
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
    for c, pc, what in w.blocked:
        say(f"  blocked: core {c} op {pc}: {what}")
    for loc in dict.fromkeys(w.locs):
        if loc is not None and loc.line:
            say(f"  at {loc.file}:{loc.line}: {loc.text.strip()}")


def render(fmt: str, label: str, files: Sequence[FileReport], version: str) -> str:
    """A machine- or browser-readable report (`fmt` json, sarif, markdown or html), ending in a newline."""
    if fmt == "json":
        return dump_json(to_json_files(label, files)) + "\n"
    if fmt == "sarif":
        return json.dumps(to_sarif_files(files, version), indent=2) + "\n"
    raise ValueError(f"unknown report format {fmt!r}")


def dump_json(obj: dict[str, Any]) -> str:
    return json.dumps(obj, indent=2, default=_default)


def _default(o: Any) -> Any:
    if dataclasses.is_dataclass(o):
        return dataclasses.asdict(o)
    if isinstance(o, (set, frozenset, tuple)):
        return list(o)
    return str(o)
