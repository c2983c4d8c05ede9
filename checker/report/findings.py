"""Findings: what SARIF, GitHub annotations and the concise text report list, one entry per problem.

A *finding* is a violated property of a target at one bug line, or one cause of unknown verdicts
of a target (a timeout, a run that can fail, ...), with every configuration (device count x DMA
mode) where it shows. Its location is the bug's line: for a violation that some DMA mode proves,
the line of the interpreter divergence that explains it (a signal without core_index, say) when
that divergence is tied to a line; else the line to change that `places` chooses from the witness
(REP-10), the witness's other lines related. Its fingerprint is made
of what identifies the bug (property or cause, target, file and line), never of timings or of
which device counts were verified, so it is the same from run to run.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import re
from collections.abc import Sequence

from semcheck.checker.properties.differences import CAUSES, Difference, differences
from semcheck.checker.properties.registry import IDS
from semcheck.checker.run.request import Result
from semcheck.checker.properties.verdict import Verdict, unknown_kind
from semcheck.checker.report.places import Place, Places, places
from semcheck.model.ops import Loc

# Divergences that name the line that behaves differently (D3-D4 names the first DMAs, not a bug).
LINE_CAUSES = ("D1", "D20", "D22")
_FILE_LINE = re.compile(r"(\S+\.py):(\d+)")


@dataclasses.dataclass(frozen=True)
class Finding:
    file: str  # the kernel file, as the report names it
    target: str
    kind: str  # "violated" | "unknown" | "unrunnable" | "vacuous" (REP-20, REP-21)
    cause: str  # the property (violated) or the unknown kind ("timeout", "fails", ...)
    properties: tuple[str, ...]  # the properties it is about
    verdict: Verdict  # as found at the smallest device count
    configs: tuple[tuple[int, str], ...]  # (devices, dma mode) where it shows, in report order
    where: Places  # the bug's line (None: the kernel file as a whole) and the other lines, each with a message
    difference: Difference | None = None  # when some DMA mode proves what this violates
    part: str = ""  # the properties, when one cause's rows split into findings by where they show


    @property
    def loc(self) -> Loc | None:
        """The bug's line: the primary location."""
        return self.where.primary.loc if self.where.primary is not None else None

    @property
    def related(self) -> tuple[Place, ...]:
        return self.where.related

    @property
    def rule(self) -> str:
        return self.cause if self.kind == "violated" else self.kind

    def fingerprint(self) -> str:
        where = f"{uri(self.loc.file)}:{self.loc.line}" if self.loc is not None else uri(self.file)
        key = f"{self.kind}/{self.cause}|{self.target}|{where}" + (f"|{self.part}" if self.part else "")
        return hashlib.sha256(key.encode()).hexdigest()[:32]

    def message(self) -> str:
        """What goes wrong, in one line: the witness's message, or the unknown's reason."""
        w = self.verdict.witness
        text = w.message if self.kind == "violated" and w is not None else self.verdict.reason
        return rel(re.sub(r"\s*\n\s*", " ", text).strip())

    def title(self) -> str:
        """`deadlock-free violated` or `deadlock-free, exit-balance unknown`."""
        return f"{', '.join(self.properties)} {self.kind}"


def _by_configs(entries: list[tuple[int, str, Verdict]]) -> list[list[tuple[int, str, Verdict]]]:
    """One group's rows split by the configurations each property shows at: a finding lists properties
    and configurations, and means each property at each configuration (a deadlock violated under eager
    must not read as unknown there because a hardware row shares the unknown's cause)."""
    shows: dict[str, set[tuple[int, str]]] = {}
    for n, m, v in entries:
        shows.setdefault(v.property, set()).add((n, m))
    parts: dict[frozenset, list[tuple[int, str, Verdict]]] = {}
    for e in entries:
        parts.setdefault(frozenset(shows[e[2].property]), []).append(e)
    return list(parts.values())


def findings(path: str, results: Sequence[Result]) -> list[Finding]:
    """The findings of one kernel file's results: violations first, in property order."""
    diff = {(d.target, d.devices, d.property): d for d in differences(results)}
    groups: dict[tuple, list[tuple[int, str, Verdict]]] = {}
    where: dict[tuple, tuple[Places, Difference | None]] = {}
    for r in results:
        for v in r.verdicts:
            if v.verdict == "violated":
                d = diff.get((r.target, r.devices, v.property))
                at = places(v, _divergence_line(d))
                loc = at.primary.loc if at.primary is not None else None
                key = (r.target, "violated", v.property, (loc.file, loc.line) if loc else None)
                where.setdefault(key, (at, d))
            elif v.verdict == "unknown":
                key = (r.target, "unknown", unknown_kind(v.reason), None)
                loc = _reason_line(v.reason)
                where.setdefault(key, (Places(Place(loc, "the line the reason names") if loc else None), None))
            elif v.verdict in ("unrunnable", "vacuous"):  # REP-20, REP-21: said, never as proved nor as a bug
                key = (r.target, v.verdict, v.stats.get("rule", "") if v.verdict == "unrunnable" else v.property, None)
                loc = _reason_line(v.reason)
                where.setdefault(key, (Places(Place(loc, "the line the reason names") if loc else None), None))
            else:
                continue
            groups.setdefault(key, []).append((r.devices, r.dma_mode, v))
    order = {p: i for i, p in enumerate(IDS)}
    out = []
    for key, entries in groups.items():
        target, kind, cause, _ = key
        at, d = where[key]
        parts = _by_configs(entries)  # a finding says every property of it at every configuration of it
        for part in parts:
            first = min(part, key=lambda e: e[0])  # the smallest device count, modes in report order
            props = tuple(sorted(dict.fromkeys(e[2].property for e in part), key=order.get))
            configs = tuple(dict.fromkeys((n, m) for n, m, _ in part))
            label = ",".join(props) if len(parts) > 1 else ""
            out.append(Finding(path, target, kind, cause, props, first[2], configs, at, d, label))
    rank = {"violated": 0, "unknown": 1, "unrunnable": 2, "vacuous": 3}
    out.sort(key=lambda f: (rank[f.kind], order[f.properties[0]]))
    return out


def _divergence_line(d: Difference | None) -> Place | None:
    """The line of an interpreter divergence that explains why some DMA mode proves what this violates."""
    if d is not None:
        for e in d.causes:
            if e.code in LINE_CAUSES and e.locs:
                return Place(e.locs[0], f"{e.code}: {CAUSES[e.code]}", "divergence")
    return None


def _reason_line(reason: str) -> Loc | None:
    """The first kernel line an unknown's reason names (an unsupported construct's, a failing run's)."""
    for m in _FILE_LINE.finditer(reason):
        file = m.group(1)
        if os.path.isfile(file):
            return Loc(os.path.abspath(file), int(m.group(2)), _line_text(os.path.abspath(file), int(m.group(2))))
    return None


@functools.lru_cache(maxsize=256)
def _lines(file: str) -> tuple[str, ...]:
    try:
        with open(file, encoding="utf-8") as f:
            return tuple(f.read().splitlines())
    except (OSError, UnicodeDecodeError):
        return ()


def _line_text(file: str, line: int) -> str:
    lines = _lines(file)
    return lines[line - 1] if 0 < line <= len(lines) else ""


def column(loc: Loc) -> int:
    """The 1-based column where the statement on `loc`'s line starts (1 when unknown)."""
    text = _line_text(loc.file, loc.line)
    return len(text) - len(text.lstrip()) + 1 if text.strip() else 1


def display_path(file: str) -> str:
    """A kernel file as a person types it: relative to the working directory when under it."""
    try:
        r = os.path.relpath(file)
    except ValueError:
        return file
    return r if not r.startswith("..") else os.path.abspath(file)


def uri(file: str) -> str:
    """A relative (to the working directory) or absolute URI reference for a kernel file."""
    from urllib.parse import quote

    try:
        r = os.path.relpath(file)
    except ValueError:
        r = file
    path = r if not r.startswith("..") else os.path.abspath(file)
    # `:` quoted too: in a relative reference, `a:b.py` would read as scheme `a`
    return quote(path.replace(os.sep, "/"), safe="/@-._~")


def rel(text: str, prefix: str | None = None) -> str:
    """Kernel paths relative to the working directory, as the user typed them. `prefix`: `cwd_prefix()`
    when the caller read it already (REP-40: a report reads it once, not once per line)."""
    return text.replace(cwd_prefix() if prefix is None else prefix, "")


def cwd_prefix() -> str:
    """What `rel` takes out of a text: the working directory and a separator."""
    return os.getcwd() + os.sep


def where(configs: Sequence[tuple[int, str]]) -> str:
    """`2 devices (eager, on_wait), 4 devices (eager)`."""
    by_devices: dict[int, list[str]] = {}
    for n, mode in configs:
        by_devices.setdefault(n, []).append(mode)
    return ", ".join(f"{n} devices ({', '.join(modes)})" for n, modes in by_devices.items())
