"""What `semcheck verify --every-n` adds to every report format (specs/deciding/parametric.md PAR-8): per target,
one line per property that PAR-6, PAR-9 or PAR-10 argues (proved for every N, or why not), one line for the properties it
does not argue, or one line saying why the parametric check does not apply to the target at all."""

from __future__ import annotations

import dataclasses
from typing import Any

from semcheck.checker.parametric.every_n import NOT_ARGUED, PREMISE, PROPS
from semcheck.checker.properties.registry import IDS
from semcheck.checker.report.findings import rel


@dataclasses.dataclass(frozen=True)
class Line:
    target: str
    kind: str  # "proved" (for every N), "violated" (at a traced N), "unknown" (not for every N), "per-n"
    properties: tuple[str, ...]
    text: str  # without the property names
    rule: str
    modes: tuple[str, ...] = ()  # the DMA modes it is said of (all of them when empty)


def _checked(f) -> tuple[str, ...]:
    off = {x.property for x in f.suppressed if getattr(x, "scope", "file") == "file"}  # (REP-25: checked else)
    return tuple(p for p in IDS if p not in off)


def _words(f, target: str, c) -> str:
    """A claim's words; a violation at a traced N says which command shows its witness."""
    if not c.violated_at:
        return c.words()
    from semcheck.checker.report.findings import display_path

    return f"{c.words()} (`semcheck verify {display_path(f.path)}::{target} --devices {c.violated_at[0]}` shows it)"


def lines(f) -> list[Line]:
    """The every-N lines of one file's report, per target in the order the targets were checked."""
    out: list[Line] = []
    checked = _checked(f)
    argued = tuple(p for p in PROPS if p in checked)
    for tc in f.claims:
        if tc.reason:
            if argued:
                out.append(Line(tc.target, "unknown", argued, f"not claimed for every N: {rel(tc.reason)}", "PAR-8"))
        else:
            for p in argued:
                mine = [c for c in tc.claims if c.prop == p]
                words = list(dict.fromkeys(_words(f, tc.target, c) for c in mine))
                if len(words) == 1:  # the same in every mode: one line
                    c = mine[0]
                    kind = "proved" if c.every_n else "violated" if c.violated_at else "unknown"
                    out.append(Line(tc.target, kind, (p,), words[0], c.rule, tuple(x.mode for x in mine)))
                    continue
                for c in mine:
                    kind = "proved" if c.every_n else "violated" if c.violated_at else "unknown"
                    out.append(Line(tc.target, kind, (p,), _words(f, tc.target, c), c.rule, (c.mode,)))
        rest = tuple(p for p in checked if p not in PROPS)
        out = _merged(out)
        if rest:
            out.append(Line(tc.target, "per-n", rest, NOT_ARGUED, "PAR-7"))
    return out


def _merged(out: list[Line]) -> list[Line]:
    """A reason that withholds the claim of both properties alike is one line (a proof stays one per property)."""
    merged: list[Line] = []
    for x in out:
        last = merged[-1] if merged else None
        if (last is not None and x.kind == last.kind == "unknown" and (x.target, x.text, x.modes)
                == (last.target, last.text, last.modes)):
            merged[-1] = dataclasses.replace(last, properties=last.properties + x.properties)
        else:
            merged.append(x)
    return merged


def text(line: Line) -> str:
    modes = f" [{', '.join(line.modes)}]" if line.modes else ""
    return f"{', '.join(line.properties)}{modes}: {line.text}"


def to_json(f) -> list[dict[str, Any]]:
    """The JSON report's `every_n` entries of one file: one per target x argued property x DMA mode."""
    out = []
    checked = _checked(f)
    for tc in f.claims:
        if tc.reason:
            modes = list(tc.modes) or list(dict.fromkeys(r.dma_mode for r in f.results))
            for p in (p for p in PROPS if p in checked):
                for m in modes:
                    out.append({"file": f.path, "target": tc.target, "property": p, "dma_mode": m,
                                "every_n": False, "proved_at": [], "violated_at": [], "traced": [],
                                "reason": rel(tc.reason), "rule": "PAR-8"})
            continue
        for c in tc.claims:
            if c.prop not in checked:
                continue
            row = {"file": f.path, "target": tc.target, "property": c.prop, "dma_mode": c.mode,
                   "every_n": c.every_n, "proved_at": list(c.proved_at), "violated_at": list(c.violated_at),
                   "traced": list(c.traced), "reason": rel(c.reason) if not c.every_n else "", "rule": c.rule,
                   "text": c.words()}
            if c.every_n:
                row["premise"] = PREMISE
            if tc.cached:
                row["cached"] = True
            out.append(row)
    return out


# SARIF 2.1.0 3.27.9: a level other than "none" goes with kind "fail" only
SARIF_KIND = {"proved": ("pass", "none"), "violated": ("fail", "error"), "unknown": ("review", "none")}


def sarif_results(f, rule_ids: list[str], fingerprint: str) -> list[dict[str, Any]]:
    """SARIF results of the every-N lines (not those of the properties argued per N only): a proof for every
    N is a `pass`, a traced N that violates a property a `fail` (an error), a claim not made a `review`."""
    import hashlib

    from semcheck.checker.report.findings import uri

    out = []
    for x in lines(f):
        if x.kind == "per-n":
            continue
        kind, level = SARIF_KIND[x.kind]
        rule = x.properties[0] if x.kind != "unknown" or len(x.properties) == 1 else "unknown"
        if rule not in rule_ids:
            rule = "unknown"
        key = f"every-n/{','.join(x.properties)}|{x.target}|{uri(f.path)}|{x.text}"
        out.append({
            "ruleId": rule,
            "ruleIndex": rule_ids.index(rule),
            "kind": kind,
            "level": level,
            "message": {"text": rel(f"{text(x)} [{x.target}]")},
            "locations": [{"physicalLocation": {"artifactLocation": {"uri": uri(f.path)}}}],
            "partialFingerprints": {fingerprint: hashlib.sha256(key.encode()).hexdigest()[:32]},
            "properties": {"target": x.target, "verdict": x.kind, "everyN": x.kind == "proved",
                           "properties": list(x.properties), "specRule": x.rule},
        })
    return out


def line_texts(f):
    """(path, property, kind, message) per every-N line, for `--format concise` and `--format github`."""
    from semcheck.checker.report.findings import display_path

    for x in lines(f):
        if x.kind == "per-n":  # a finding per line: the per-N properties have theirs already
            continue
        modes = f" [{', '.join(x.modes)}]" if x.modes else ""
        yield display_path(f.path), ",".join(x.properties), x.kind, rel(f"every N{modes} ({x.target}): {x.text}")


def tally(files) -> dict[str, int]:
    """Per target x argued property x DMA mode: proved for every N, violated at a traced N, or neither."""
    out = {"proved": 0, "violated": 0, "unknown": 0}
    for row in (row for f in files for row in to_json(f)):
        out["proved" if row["every_n"] else "violated" if row["violated_at"] else "unknown"] += 1
    return out


def summary_words(files) -> str:
    """`; for every N: 2 proved, 1 violated at a traced N, 1 not proved` ('' without --every-n)."""
    if not any(f.claims for f in files):
        return ""
    t = tally(files)
    return (f"; for every N: {t['proved']} proved, {t['violated']} violated at a traced N, "
            f"{t['unknown']} not proved")
