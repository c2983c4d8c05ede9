"""What every report format shares: the marks, one kernel file's report (`FileReport`), the summary
counts, the hints and a row's words. The formats (`text`, `sarif`, `markdown`, `lines`) and `render`,
the format switch above them, read it here; it imports none of them."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from semcheck.checker.properties.differences import CAUSES
from semcheck.checker.properties.registry import BY_ID
from semcheck.checker.properties.verdict import KINDS, Verdict, unknown_kind
from semcheck.checker.run.generated_inputs import row_suffix
from semcheck.checker.run.request import Result

# REP-22: one mark per verdict kind, and the `modes differ` heading's own (`DIFFER`), none shared
MARK = {"proved": "✓", "vacuous": "○", "violated": "✗", "unknown": "?", "unrunnable": "⊘", "differ": "≠"}
PLAIN_MARK = {"proved": "ok", "vacuous": "vac", "violated": "FAIL", "unknown": "??", "unrunnable": "n/a",
              "differ": "!="}
STYLE = {"proved": "green", "vacuous": "cyan", "violated": "bold red", "unknown": "yellow", "unrunnable": "magenta",
         "differ": "yellow"}


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


def input_json(gi) -> dict[str, Any]:
    """A verdict's generated input (`verdict.GeneratedInput`) in the JSON report."""
    out: dict[str, Any] = {"value": gi.value, "text": gi.text, "index": gi.index}
    if gi.shrunk_from is not None:
        out["shrunk_from"] = gi.shrunk_from
        out["shrink_steps"] = gi.shrink_steps
    return out


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
