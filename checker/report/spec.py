"""`semcheck spec RULE`: print one rule of the specification (SEM-3, BUF-4a, PROP-4 or a property id).

The specification is two documents, each a folder of Markdown files: `semantics/` (what TPUs and
jax's interpreter do) and `deciding/` (how semcheck decides each property). They are read from the
copy shipped with semcheck (package data `semcheck.specs`, see pyproject.toml); `PROPERTY` (e.g.
`deadlock-free`) is looked up in the property registry and prints its PROP rule.
"""

from __future__ import annotations

import re
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from semcheck.checker.properties.registry import BY_ID

SPEC_DOCUMENTS = ("semantics", "deciding")


def _specs_root() -> Traversable | None:
    """The shipped `specs` folder, or the source tree's when this install maps none."""
    try:
        root = resources.files("semcheck.specs")
        if root.joinpath(SPEC_DOCUMENTS[0]).is_dir():
            return root
    except ModuleNotFoundError:
        pass
    # An editable install made before specs/ became package data maps no semcheck.specs:
    # read the source tree's specs/, beside checker/.
    root = Path(__file__).resolve().parents[2] / "specs"
    return root if root.is_dir() else None


def spec_files() -> list[Traversable]:
    """Every Markdown file of the two documents, document by document, in name order."""
    root = _specs_root()
    if root is None:
        return []
    out: list[Traversable] = []
    for doc in SPEC_DOCUMENTS:
        folder = root.joinpath(doc)
        if folder.is_dir():
            out += sorted((f for f in folder.iterdir() if f.name.endswith(".md") and f.is_file()), key=lambda f: f.name)
    return out


def rule_id(name: str) -> str:
    """`name` as a rule id: a property id becomes its PROP rule, anything else is upper-cased."""
    prop = BY_ID.get(name.lower())
    return prop.rule if prop is not None else name.upper()


def rule_text(rule: str) -> str | None:
    """The paragraph that defines `rule` (e.g. `SEM-3`, or `deadlock-free` for PROP-4), or its row of a
    rule table (`ERR-5`), or None."""
    rid = re.escape(rule_id(rule))
    paragraph, row = re.compile(rf"^\*\*{rid}\b"), re.compile(rf"^\|\s*{rid}\s*\|")
    for f in spec_files():
        for p in f.read_text(encoding="utf-8").split("\n\n"):
            if paragraph.match(p.strip()):
                return p.strip()
            for line in p.splitlines():
                if row.match(line.strip()):
                    return line.strip()
    return None
