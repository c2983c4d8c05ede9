"""`semcheck spec RULE`: print one rule of the specification (SEM-3, BUF-4a, PROP-4 or a property id).

The rules are read from the spec files shipped with semcheck (package data
`semcheck.specs`, see pyproject.toml); `PROPERTY` (e.g. `deadlock-free`) is
looked up in the property registry and prints its PROP rule.
"""

from __future__ import annotations

import re
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from semcheck.checker.properties.registry import BY_ID

SPEC_FILES = ("semantics.md", "buffers.md", "programs.md", "parametric.md")


def spec_file(name: str) -> Traversable | None:
    """The shipped spec document `name` (e.g. `semantics.md`), or None if it is not there."""
    try:
        f = resources.files("semcheck.specs") / name
        if f.is_file():
            return f
    except ModuleNotFoundError:
        pass
    # An editable install made before specs/ became package data maps no semcheck.specs:
    # read the source tree's specs/, beside checker/.
    f = Path(__file__).resolve().parents[2] / "specs" / name
    return f if f.is_file() else None


def rule_id(name: str) -> str:
    """`name` as a rule id: a property id becomes its PROP rule, anything else is upper-cased."""
    prop = BY_ID.get(name.lower())
    return prop.rule if prop is not None else name.upper()


def rule_text(rule: str) -> str | None:
    """The paragraph that defines `rule` (e.g. `SEM-3`, or `deadlock-free` for PROP-4), or None."""
    pat = re.compile(rf"^\*\*{re.escape(rule_id(rule))}\b")
    for name in SPEC_FILES:
        f = spec_file(name)
        if f is None:
            continue
        for p in f.read_text(encoding="utf-8").split("\n\n"):
            if pat.match(p.strip()):
                return p.strip()
    return None
