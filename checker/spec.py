"""`semcheck spec RULE`: print one rule of specs/semantics.md."""

from __future__ import annotations

import re
from pathlib import Path

SPEC_FILES = ("semantics.md", "buffers.md")


def _spec_dir() -> Path | None:
    here = Path(__file__).resolve().parent.parent / "specs"
    return here if here.is_dir() else None


def rule_text(rule: str) -> str | None:
    """The paragraph that defines `rule` (e.g. `SEM-3`), or None."""
    d = _spec_dir()
    if d is None:
        return None
    pat = re.compile(rf"^\*\*{re.escape(rule.upper())}\b")
    for name in SPEC_FILES:
        f = d / name
        if not f.exists():
            continue
        paras = f.read_text(encoding="utf-8").split("\n\n")
        for p in paras:
            if pat.match(p.strip()):
                return p.strip()
    return None
