"""Properties left unchecked on purpose: `--select` / `--ignore`, and suppression comments in a kernel file.

A comment `# semcheck: ignore[exit-balance] why it does not matter here` (one or more property
ids, comma-separated, and a reason, which is required) anywhere in a kernel file suppresses those
properties for every target of that file. A suppressed property is not checked at all, so it is
never counted as proved: each report lists it as suppressed, with its reason and where it was
asked for.
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

    def describe(self) -> str:
        """`exit-balance: the leak is freed by the caller (# semcheck: ignore at k.py:12)`."""
        if self.loc is not None:
            return f"{self.property}: {self.reason} (# semcheck: ignore at {self.loc.file}:{self.loc.line})"
        return f"{self.property}: {self.reason}"


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
    """The suppression comments of a kernel file (read, not imported); a malformed one is an input error."""
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
        for p in props:
            out.setdefault(p, Suppression(p, reason, "comment", loc))
    return [out[p] for p in IDS if p in out]


def combine(flags: Sequence[Suppression], comments: Sequence[Suppression]) -> list[Suppression]:
    """One suppression per property, the file's own comment first (it carries the reason), in property order."""
    by: dict[str, Suppression] = {}
    for s in [*comments, *flags]:
        by.setdefault(s.property, s)
    return [by[p] for p in IDS if p in by]
