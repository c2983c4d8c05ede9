"""Properties left unchecked on purpose: `--select` / `--ignore`, and suppression comments in a kernel file.

A comment `# semcheck: ignore[exit-balance] why it does not matter here` (one or more property
ids, comma-separated, and a reason, which is required) suppresses by where it stands (specs/deciding/report.md
REP-25): at the top of the file (before the first statement after the module docstring), those
properties for every target of the file, which are then not checked at all; on a target's `def` (or
its decorator) line, for that target; on another function's `def` line (a kernel's), the findings
whose primary location lies in that function; on any other line, the findings whose primary location
is that line. A suppressed property is never counted as proved: each report lists it as suppressed,
with its reason and where it was asked for. A comment that suppresses nothing is reported as unused
(REP-26), as ruff's RUF100 does.
"""

from __future__ import annotations

import dataclasses
import io
import os
import re
import tokenize
from collections.abc import Sequence

from semcheck.checker.properties.registry import IDS
from semcheck.checker.run.request import InputError
from semcheck.model.ops import Loc

COMMENT = re.compile(r"#\s*semcheck:\s*ignore\s*\[(?P<props>[^\]]*)\]\s*:?\s*(?P<reason>.*)$")
_MENTION = re.compile(r"#\s*semcheck:\s*ignore\b")


@dataclasses.dataclass(frozen=True)
class Suppression:
    property: str
    reason: str
    source: str  # "comment" (in the kernel file), "--select" or "--ignore"
    loc: Loc | None = None  # the comment's line
    scope: str = "file"  # REP-25: "file", "target" (a target's def), "span" (another def) or "line"
    span: tuple[int, int] = (0, 0)  # the lines a "span" or "line" suppression covers
    target: str = ""  # the target a "target" suppression is about, or the def's name for a "span"

    def describe(self) -> str:
        """`exit-balance: the leak is freed by the caller (# semcheck: ignore at k.py:12)`; a target's or a
        line's says so (`... for target build`, `... for the findings at k.py:40`)."""
        if self.loc is None:
            return f"{self.property}: {self.reason}"
        where = (f" for target {self.target}" if self.scope == "target" else
                 f" for the findings in {self.target}()" if self.scope == "span" else
                 " for the findings on that line" if self.scope == "line" else "")
        return f"{self.property}: {self.reason} (# semcheck: ignore at {self.loc.file}:{self.loc.line}{where})"

    def said(self) -> str:
        """`suppressed (not checked)` for a file's or a target's, `suppressed` for a finding's, which was checked."""
        return "suppressed" if self.scope in ("span", "line") else "suppressed (not checked)"

    def unused(self) -> str:
        """REP-26: what an unused suppression comment is reported as."""
        what = {"target": f"target {self.target} has no {self.property} verdict",
                "span": f"no {self.property} finding lies in {self.target}()",
                "line": f"no {self.property} finding is on this line"}.get(self.scope, "")
        return f"unused suppression # semcheck: ignore[{self.property}]: {what}"


def parse_properties(values: Sequence[str] | None, flag: str) -> list[str]:
    """`--select a,b --select c` -> [a, b, c], each a property id (else a usage error naming it)."""
    out: list[str] = []
    for value in values or ():
        for p in (x.strip() for x in value.split(",")):
            if not p:
                continue
            if p not in IDS:
                raise InputError("usage", f"{flag} {p}: not a property (properties: {', '.join(IDS)})")
            out.append(p)
    return out


def from_flags(select: Sequence[str], ignore: Sequence[str], *, select_from: str = "--select",
               ignore_from: str = "--ignore on the command line") -> list[Suppression]:
    """The properties --select / --ignore (or [tool.semcheck] select / ignore: `*_from` says which) leave out."""
    out = []
    for p in IDS:
        if select and p not in select:
            out.append(Suppression(p, f"not in {select_from} {','.join(select)}", "--select"))
        elif p in ignore:
            out.append(Suppression(p, ignore_from, "--ignore"))
    return out


def from_file(path: str) -> list[Suppression]:
    """The file-wide suppression comments of a kernel file (REP-25: at its top), one per property."""
    out: dict[str, Suppression] = {}
    for x in comments(path):
        if x.scope == "file":
            out.setdefault(x.property, x)
    return [out[p] for p in IDS if p in out]


def comments(path: str) -> list[Suppression]:
    """Every suppression comment of a kernel file (read, not imported), one per property named, each with
    its scope (REP-25); a malformed one is an input error."""
    try:
        with open(path, "rb") as f:
            source = f.read()
    except OSError:
        return []  # the file's own error is reported where it is read
    out: dict[str, Suppression] = {}
    try:
        tokens = list(tokenize.tokenize(io.BytesIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return []  # a syntax error is reported as such
    lines = source.decode("utf-8", "replace").splitlines()
    top, defs = _layout(source)
    found: list[Suppression] = []
    for tok in tokens:
        if tok.type != tokenize.COMMENT or not _MENTION.match(tok.string):
            continue
        line = tok.start[0]
        loc = Loc(os.path.abspath(path), line, lines[line - 1] if line <= len(lines) else "")
        m = COMMENT.match(tok.string)
        if m is None:
            raise InputError("bad-suppression", "expected `# semcheck: ignore[PROPERTY,...] REASON`", loc)
        props = [p.strip() for p in m["props"].split(",") if p.strip()]
        reason = m["reason"].strip()
        if not props:
            raise InputError("bad-suppression", "name the properties to ignore: `# semcheck: ignore[exit-balance] "
                                                "REASON`", loc)
        for p in props:
            if p not in IDS:
                raise InputError("bad-suppression", f"{p!r} is not a property (properties: {', '.join(IDS)})", loc)
        if not reason:
            raise InputError("bad-suppression", f"say why {', '.join(props)} may be ignored: "
                                                f"`# semcheck: ignore[{','.join(props)}] REASON`", loc)
        scope, span, name = ("file", (0, 0), "") if line < top else defs.get(line, ("line", (line, line), ""))
        found += [Suppression(p, reason, "comment", loc, scope, span, name) for p in props]
    return found


def _layout(source: bytes) -> tuple[int, dict[int, tuple[str, tuple[int, int], str]]]:
    """(the first line past the file's top: its first statement after the module docstring; the lines of
    each function's `def`, decorators and signature -> ("target" for a module-level function, else "span",
    the function's lines, its name))."""
    import ast

    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return 1 << 30, {}
    body = tree.body
    doc = bool(body) and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
        and isinstance(body[0].value.value, str)
    rest = body[1:] if doc else body
    top = rest[0].lineno if rest else 1 << 30
    top = min([top, *(d.lineno for d in getattr(rest[0], "decorator_list", ()))]) if rest else top
    defs: dict[int, tuple[str, tuple[int, int], str]] = {}
    module_level = {id(n) for n in body}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            head_end = node.body[0].lineno - 1 if node.body[0].lineno > node.lineno else node.lineno
            kind = "target" if id(node) in module_level else "span"
            for line in range(first, head_end + 1):
                defs[line] = (kind, (node.lineno, node.end_lineno or node.lineno), node.name)
    return top, defs


def local(path: str) -> list[Suppression]:
    """The suppression comments of a kernel file that are not file-wide (REP-25)."""
    return [x for x in comments(path) if x.scope != "file"]


def apply_local(path: str, results: list, sups: Sequence[Suppression]) -> tuple[list, list[Suppression],
                                                                                   list[Suppression]]:
    """REP-25, REP-26: `results` (request.Result) without the verdicts the target, def and line comments
    `sups` suppress; the suppressions that took effect; and those that matched nothing (unused).

    A target comment drops its properties from every row of that target (a module-level function named by
    no target is a kernel def: its lines, as any other function's). A line or def comment drops a violated
    or unknown finding of its properties (`report.findings`) whose primary location is on its lines, in the
    configurations the finding shows in."""
    import dataclasses as dc

    from semcheck.checker.report.findings import findings

    if not sups or not results:
        return results, [], list(sups)
    targets = {r.target.split("#")[0] for r in results}
    # a module-level function that is no target is a kernel (or a helper): its comment covers its lines
    sups = [dc.replace(x, scope="span") if x.scope == "target" and x.target not in targets else x for x in sups]
    real = os.path.realpath(path)
    drop: set[tuple[str, int, str, str]] = set()  # (target, devices, mode, property)
    used: list[Suppression] = []
    found = findings(path, results)
    for x in sups:
        hit = False
        if x.scope == "target":
            for r in results:
                if r.target.split("#")[0] == x.target and any(v.property == x.property for v in r.verdicts):
                    drop.add((r.target, r.devices, r.dma_mode, x.property))
                    hit = True
        else:
            lo, hi = x.span
            for f in found:
                if (f.kind in ("violated", "unknown") and x.property in f.properties and f.loc is not None
                        and os.path.realpath(f.loc.file) == real and lo <= f.loc.line <= hi):
                    drop.update((f.target, n, m, x.property) for n, m in f.configs)
                    hit = True
        if hit:
            used.append(x)
    unused = [x for x in sups if not any(x is u for u in used)]
    kept = [dc.replace(r, verdicts=[v for v in r.verdicts if (r.target, r.devices, r.dma_mode, v.property) not in drop])
            for r in results]
    return kept, used, unused


def combine(flags: Sequence[Suppression], comments: Sequence[Suppression]) -> list[Suppression]:
    """One suppression per property, the file's own comment first (it carries the reason), in property order."""
    by: dict[str, Suppression] = {}
    for s in [*comments, *flags]:
        by.setdefault(s.property, s)
    return [by[p] for p in IDS if p in by]
