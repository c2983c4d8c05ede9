"""SARIF 2.1.0 (`--format sarif`), for code scanning: one result per finding (`report_findings`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from semcheck.checker.run.generated_inputs import input_line
from semcheck.checker.properties.registry import IDS
from semcheck.checker.report.rows import FileReport, difference_line, hint_for, input_json
from semcheck.checker.report.findings import Finding, column, findings, rel, uri, where
from semcheck.checker.report.sarif_rules import information_uri, rules as sarif_rules
from semcheck.checker.report.suppress import Suppression
from semcheck.model.ops import Loc
from semcheck.checker.run.request import Result

RULE_IDS = [*IDS, "unknown", "input-error", "unrunnable", "vacuous", "unused-suppression"]
LEVEL = {"violated": "error", "unknown": "warning", "unrunnable": "warning", "vacuous": "note"}
FINGERPRINT = "semcheck/v1"  # bump when what the fingerprint is made of changes
# GitHub code scanning drops what passes its limits (1,000 locations per result, 10,000 thread-flow
# locations per result): far inside them, and a thread per device of the witness only
MAX_RELATED, MAX_FLOWS, MAX_STEPS = 50, 16, 24


def to_sarif(path: str, results: Sequence[Result], version: str) -> dict[str, Any]:
    """SARIF 2.1.0 of one kernel file (see `to_sarif_files`)."""
    return to_sarif_files([FileReport(path, list(results))], version)


def to_sarif_files(files: Sequence[FileReport], version: str) -> dict[str, Any]:
    """SARIF 2.1.0: one result per finding, and one per file or target that could not be verified.

    A violated property of a target is a result of level error, a cause of unknown verdicts
    (rule `unknown`) one of level warning, wherever (device counts x DMA modes) they show: the
    property bag lists those configurations. Proved verdicts produce no result. The primary
    location is the bug's line; `partialFingerprints` stay the same from run to run. URIs are
    relative to the working directory (run semcheck from the repository root for code scanning).
    """
    rules = sarif_rules()
    sarif_results = []
    for f in files:
        failed = [(f.path, f.error)] if f.error is not None else [
            (f"{f.path}::{name}", e) for name, e in f.target_errors]
        for what, e in failed:
            loc = e.loc if e.loc is not None and e.loc.line else None
            sarif_results.append({
                "ruleId": "input-error",
                "ruleIndex": RULE_IDS.index("input-error"),
                "level": "error",
                "message": {"text": rel(f"semcheck could not verify {what}: {e.one_line()}")},
                "locations": [{"physicalLocation": {
                    "artifactLocation": {"uri": uri(loc.file if loc else f.path)},
                    **({"region": {"startLine": loc.line}} if loc else {})}}],
                "properties": {"code": e.code},
            })
        if f.error is None:
            sarif_results.extend(sarif_result(x) for x in findings(f.path, f.results))
            sarif_results.extend(suppressed_result(f.path, x) for x in f.suppressed)
            sarif_results.extend(unused_result(f.path, x) for x in f.unused)
            if f.claims:  # --every-n (specs/deciding/parametric.md PAR-8)
                from semcheck.checker.report.every_n import sarif_results as every_n_results

                sarif_results.extend(every_n_results(f, RULE_IDS, FINGERPRINT))
    return {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{"tool": {"driver": {"name": "semcheck", "version": version,
                                      **({"informationUri": home} if (home := information_uri()) else {}),
                                      "rules": rules}},
                  "results": sarif_results}],
    }


def sarif_result(x: Finding) -> dict[str, Any]:
    v = x.verdict
    text = (x.message() if x.kind == "violated" else f"{x.title()}: {x.message()}") + f" [{x.target}: {where(x.configs)}]"
    if v.input is not None and x.kind == "violated":
        line = input_line(v) or ""
        text += f" {line[:1].upper()}{line[1:]}."
    if x.difference is not None:
        text += f" Modes differ: {difference_line(x.difference)}."
    hint = hint_for(v)
    if hint:
        text += f" Hint: {hint}."
    location: dict[str, Any] = {"artifactLocation": {"uri": uri(x.loc.file if x.loc else x.file)}}
    if x.loc is not None:
        location["region"] = {"startLine": x.loc.line, "startColumn": column(x.loc)}
    primary: dict[str, Any] = {"physicalLocation": location}
    if x.where.primary is not None and x.where.primary.message:
        primary["message"] = {"text": rel(x.where.primary.message)}
    res: dict[str, Any] = {
        "ruleId": x.rule,
        "ruleIndex": RULE_IDS.index(x.rule),
        "level": LEVEL[x.kind],
        "message": {"text": rel(text)},
        "locations": [primary],
        "partialFingerprints": {FINGERPRINT: x.fingerprint()},
    }
    if x.related:
        res["relatedLocations"] = [
            {"id": i, "physicalLocation": _physical(o.loc), "message": {"text": rel(o.message or o.loc.text.strip())}}
            for i, o in enumerate(x.related[:MAX_RELATED], 1)
        ]
    flows = code_flows(x)
    if flows:
        res["codeFlows"] = flows
    res["properties"] = {
        "file": uri(x.file),  # the kernel file verified: the location may be in a module it imports
        "target": x.target,
        "verdict": x.kind,
        "properties": list(x.properties),
        "configurations": [{"devices": n, "dmaMode": m} for n, m in x.configs],
        "devices": sorted({n for n, _ in x.configs}),
        "dmaModes": list(dict.fromkeys(m for _, m in x.configs)),
    }
    if x.kind != "violated":
        res["properties"]["cause"] = x.cause
    if v.input is not None:
        res["properties"]["input"] = input_json(v.input)
    return res


def _physical(loc) -> dict[str, Any]:
    return {"artifactLocation": {"uri": uri(loc.file)}, "region": {"startLine": loc.line, "startColumn": column(loc)}}


def code_flows(x: Finding) -> list[dict[str, Any]]:
    """REP-13: one thread flow per device of the witness's timeline, each step a location with what ran."""
    w = x.verdict.witness
    timeline = w.details.get("timeline") if w is not None and x.kind == "violated" else None
    flows = []
    for dev in timeline or ():
        steps = [s for s in dev.get("steps", ()) if isinstance(s, dict) and s.get("line")]
        if not steps:
            continue
        where = f"device {dev['device']}"
        flows.append({
            "id": where.replace(" ", "-"),
            "message": {"text": where},
            "locations": [{
                "location": {"physicalLocation": _physical(Loc(s["file"], int(s["line"]), "")),
                             "message": {"text": rel(_step_text(where, s))}},
                "executionOrder": k,
                **({"importance": "essential"} if s.get("stop") else {}),
            } for k, s in enumerate(steps[-MAX_STEPS:], 1)],
        })
    if not flows:
        return []
    return [{"message": {"text": f"the last steps of each device involved, where {x.properties[0]} is violated"},
             "threadFlows": flows[:MAX_FLOWS]}]


def _step_text(where: str, s: dict) -> str:
    core = f" core {s['core']}" if "core" in s else ""
    return f"{where}{core} stops here: {s['op']}" if s.get("stop") else f"{where}{core}: {s['op']}"


def suppressed_result(path: str, x: Suppression) -> dict[str, Any]:
    """A property not checked on purpose: a result carrying SARIF's own `suppressions`, with the reason."""
    import hashlib

    location: dict[str, Any] = {"artifactLocation": {"uri": uri(x.loc.file if x.loc else path)}}
    if x.loc is not None:
        location["region"] = {"startLine": x.loc.line, "startColumn": column(x.loc)}
    key = f"suppressed/{x.property}|{uri(path)}" + (f"|{x.loc.line}" if x.scope != "file" and x.loc else "")
    return {
        "ruleId": x.property,
        "ruleIndex": RULE_IDS.index(x.property),
        "level": "note",
        "message": {"text": rel(f"{x.property} was not checked (suppressed): {x.reason}" if x.scope in ("file", "target")
                                else f"{x.property} findings suppressed: {x.reason}")},
        "locations": [{"physicalLocation": location}],
        "suppressions": [{"kind": "inSource" if x.source == "comment" else "external",
                          "justification": rel(x.reason)}],
        "partialFingerprints": {FINGERPRINT: hashlib.sha256(key.encode()).hexdigest()[:32]},
        "properties": {"verdict": "suppressed", "source": x.source},
    }


def unused_result(path: str, x: Suppression) -> dict[str, Any]:
    """REP-26: a suppression comment that suppressed nothing, at its line."""
    import hashlib

    key = f"unused-suppression/{x.property}|{uri(path)}|{x.loc.line}"
    return {
        "ruleId": "unused-suppression",
        "ruleIndex": RULE_IDS.index("unused-suppression"),
        "level": "warning",
        "message": {"text": rel(f"{x.unused()} ({x.reason})")},
        "locations": [{"physicalLocation": {"artifactLocation": {"uri": uri(x.loc.file)},
                                            "region": {"startLine": x.loc.line, "startColumn": column(x.loc)}}}],
        "partialFingerprints": {FINGERPRINT: hashlib.sha256(key.encode()).hexdigest()[:32]},
        "properties": {"verdict": "unused-suppression", "property": x.property},
    }
