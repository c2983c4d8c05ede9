"""Reports: text for people, JSON for machines (schema in specs/report-schema.json), SARIF 2.1.0."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from typing import Any

from semcheck.checker.verdict import Verdict
from semcheck.checker.verify import Result

SCHEMA_VERSION = "1.0"
MARK = {"proved": "✓", "violated": "✗", "unknown": "?"}
PLAIN_MARK = {"proved": "ok", "violated": "FAIL", "unknown": "??"}
STYLE = {"proved": "green", "violated": "bold red", "unknown": "yellow"}

RULE_HELP = {
    "id-disjoint": "No semaphore id is both the barrier's fixed id (collective_id) and an internal id.",
    "id-int16": "Every semaphore and buffer id the interpreter hands out fits int16.",
    "id-agreement": "A semaphore used remotely names the same allocation on the target core.",
    "deadlock-free": "No reachable state where an unfinished core can never move.",
    "exit-balance": "Every semaphore count is zero and no DMA is pending when the kernel exits.",
    "dma-bytes": "Each DMA wait waits for exactly the bytes its semaphore's DMAs deliver.",
}


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
            "hint": w.hint,
            "schedule": [list(a) for a in w.schedule],
            "blocked": [{"core": c, "pc": pc, "what": what} for c, pc, what in w.blocked],
            "locations": [_loc(loc) for loc in w.locs],
            "details": w.details,
        }
    if v.stats:
        out["stats"] = v.stats
    return out


def to_json(path: str, results: Sequence[Result]) -> dict[str, Any]:
    rows = []
    for r in results:
        for v in r.verdicts:
            row = {"target": r.target, "devices": r.devices, "dma_mode": r.dma_mode}
            row.update(verdict_json(v))
            rows.append(row)
    return {
        "schema": "semcheck-report",
        "version": SCHEMA_VERSION,
        "file": path,
        "summary": summary(results),
        "results": rows,
    }


def summary(results: Sequence[Result]) -> dict[str, int]:
    s = {"proved": 0, "violated": 0, "unknown": 0}
    for r in results:
        for v in r.verdicts:
            s[v.verdict] += 1
    return s


def to_sarif(path: str, results: Sequence[Result], version: str) -> dict[str, Any]:
    rules = [
        {"id": p, "shortDescription": {"text": text}, "helpUri": "specs/semantics.md"}
        for p, text in RULE_HELP.items()
    ]
    sarif_results = []
    for r in results:
        for v in r.verdicts:
            if v.verdict == "proved":
                continue
            w = v.witness
            locs = [loc for loc in (w.locs if w else ()) if loc and loc.line > 0]
            text = (w.message if w else v.reason) + f" [{r.target}, {r.devices} devices, {r.dma_mode}]"
            res: dict[str, Any] = {
                "ruleId": v.property,
                "level": "error" if v.verdict == "violated" else "warning",
                "message": {"text": text},
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
            sarif_results.append(res)
    return {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "semcheck",
                        "version": version,
                        "informationUri": "https://github.com/semcheck/semcheck",
                        "rules": rules,
                    }
                },
                "results": sarif_results,
            }
        ],
    }


def _uri(file: str) -> str:
    try:
        rel = os.path.relpath(file)
    except ValueError:
        rel = file
    return rel if not rel.startswith("..") else file


def _rel(text: str) -> str:
    """Kernel paths relative to the working directory, as the user typed them."""
    return text.replace(os.getcwd() + os.sep, "")


def render_text(console, path: str, results: Sequence[Result]) -> None:
    """One line per target x configuration x property, then each violation and unknown in detail."""
    from rich.text import Text

    plain = not console.is_terminal
    for r in results:
        for v in r.verdicts:
            mark = PLAIN_MARK[v.verdict] if plain else MARK[v.verdict]
            extra = ""
            if v.verdict == "violated" and v.witness:
                extra = f"  {v.witness.message}"
            elif v.verdict == "unknown":
                extra = f"  {v.reason}"
            line = Text(f"{mark} ", style=STYLE[v.verdict])
            line.append(f"{r.target} devices={r.devices} {r.dma_mode:<8} {v.property:<14}{_rel(extra)}")
            console.print(line, no_wrap=True, overflow="ellipsis", highlight=False)
    for r in results:
        for v in r.verdicts:
            if v.verdict != "violated" or v.witness is None:
                continue
            w = v.witness
            console.print()
            console.rule(f"[bold red]{v.property}[/] violated: {r.target}, {r.devices} devices, {r.dma_mode}")
            console.print(_rel(w.message), highlight=False, markup=False)
            timeline = w.details.get("timeline")
            if timeline:
                console.print("Timeline (last steps of each involved device):", highlight=False)
                for dev in timeline:
                    console.print(f"  device {dev['device']}:", highlight=False)
                    for ev in dev["events"]:
                        console.print(f"    {_rel(ev)}", highlight=False, markup=False)
            for c, pc, what in w.blocked:
                console.print(f"  blocked: core {c} op {pc}: {what}", highlight=False, markup=False)
            for loc in dict.fromkeys(w.locs):
                if loc.line:
                    console.print(f"  at {_rel(loc.file)}:{loc.line}: {loc.text.strip()}", highlight=False, markup=False)
            if w.hint:
                console.print(f"[bold]hint:[/] {w.hint}", highlight=False)
    s = summary(results)
    console.print()
    console.print(
        f"{s['proved']} proved, {s['violated']} violated, {s['unknown']} unknown", highlight=False
    )


def dump_json(obj: dict[str, Any]) -> str:
    return json.dumps(obj, indent=2, default=_default)


def _default(o: Any) -> Any:
    if dataclasses.is_dataclass(o):
        return dataclasses.asdict(o)
    if isinstance(o, (set, frozenset, tuple)):
        return list(o)
    return str(o)
