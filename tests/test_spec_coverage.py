"""specs/semantics.md is the model's prose: every rule is cited by code, and every test a rule names exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SPEC = (ROOT / "specs" / "semantics.md").read_text(encoding="utf-8")
RULES = re.findall(r"^\*\*([A-Z]+-\d+)\b", SPEC, flags=re.M)
CODE = "\n".join(p.read_text(encoding="utf-8") for d in ("model", "checker") for p in (ROOT / d).rglob("*.py"))


def _paragraph(rule: str) -> str:
    start = SPEC.index(f"**{rule}")
    nxt = re.search(r"^\*\*[A-Z]+-\d+\b|^## ", SPEC[start + 2 :], flags=re.M)
    return SPEC[start : start + 2 + nxt.start()] if nxt else SPEC[start:]


def test_the_spec_has_rules():
    assert len(RULES) >= 30


@pytest.mark.parametrize("rule", [r for r in RULES if not r.startswith("PROP")])
def test_every_rule_is_cited_by_code(rule):
    assert re.search(rf"\b{rule}\b", CODE), f"no code cites {rule}"


@pytest.mark.parametrize("rule", [r for r in RULES if not r.startswith(("PROP", "ERR", "RUN-1", "RUN-2"))])
def test_every_rule_names_tests_that_exist(rule):
    para = _paragraph(rule)
    assert "Tests:" in para, f"{rule} names no tests"
    refs = re.findall(r"`(tests/[\w/]+\.py)(?:::(\w+))?`|`::(\w+)`", para.split("Tests:", 1)[1])
    assert refs, f"{rule} names no tests"
    current = None
    for path, name, bare in refs:
        if path:
            current = ROOT / path
            assert current.exists(), f"{rule}: {path} does not exist"
        name = name or bare
        if name:
            assert current is not None
            assert re.search(rf"def {name}\b", current.read_text(encoding="utf-8")), f"{rule}: no test {name} in {current}"
