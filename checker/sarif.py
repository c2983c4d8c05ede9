"""SARIF 2.1.0 (`--format sarif`), for code scanning."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from semcheck.checker.generated_inputs import input_line
from semcheck.checker.properties import IDS, REGISTRY
from semcheck.checker.differences import differences
from semcheck.checker.report import FileReport, _difference_line, _rel, _uri, hint_for, input_json
from semcheck.checker.request import Result


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

