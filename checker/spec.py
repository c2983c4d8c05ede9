"""`semcheck spec RULE`: print one rule of the specification (SEM-3, BUF-4a, PROP-4 or a property id).

The rules are read from the spec files shipped with semcheck; `PROPERTY` (e.g.
`deadlock-free`) is looked up in the property registry and prints its PROP rule.
"""

from __future__ import annotations

import re
from pathlib import Path

from semcheck.checker.properties import BY_ID

SPEC_FILES = ("semantics.md", "buffers.md")


def _spec_dir() -> Path | None:
    here = Path(__file__).resolve().parent.parent / "specs"
    return here if here.is_dir() else None


def rule_id(name: str) -> str:
    """`name` as a rule id: a property id becomes its PROP rule, anything else is upper-cased."""
    prop = BY_ID.get(name.lower())
    return prop.rule if prop is not None else name.upper()


def rule_text(rule: str) -> str | None:
    """The paragraph that defines `rule` (e.g. `SEM-3`, or `deadlock-free` for PROP-4), or None."""
    d = _spec_dir()
    if d is None:
        return None
    pat = re.compile(rf"^\*\*{re.escape(rule_id(rule))}\b")
    for name in SPEC_FILES:
        f = d / name
        if not f.exists():
            continue
        paras = f.read_text(encoding="utf-8").split("\n\n")
        for p in paras:
            if pat.match(p.strip()):
                return p.strip()
    return None
