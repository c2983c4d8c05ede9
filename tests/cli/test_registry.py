"""The property registry (checker/properties/registry.py) is the one list of properties: the report
schema, the spec, the SARIF rules and the checks all agree with it (PROP-1..PROP-6)."""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys

import pytest
from semcheck.checker.report import render as report
from semcheck.checker.properties.registry import BY_ID, BY_RULE, IDS, REGISTRY
from semcheck.checker.report.spec import rule_text
from semcheck.checker.properties.verdict import Verdict

from ._support import REPO, SCHEMA

PROP_RULES = tuple(p.rule for p in REGISTRY)


def test_the_report_schema_lists_exactly_the_registered_properties_in_order():
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    assert schema["$defs"]["property"]["enum"] == list(IDS)


# PROP rules the spec defines before their registry entry and check land; the test below
# fails as soon as one is registered, so the entry is removed here in the same change.
PENDING: set[str] = set()


def test_every_prop_rule_of_the_spec_is_registered_and_names_its_property():
    spec = (REPO / "specs" / "deciding" / "properties.md").read_text(encoding="utf-8")
    defined = re.findall(r"^\*\*(PROP-\d+) `([a-z0-9-]+)`", spec, flags=re.M)
    assert [d for d in defined if d[0] not in PENDING] == [(p.rule, p.id) for p in REGISTRY]
    assert not PENDING & set(BY_RULE), "a pending PROP rule is registered now: remove it from PENDING"
    assert PENDING <= {rule for rule, _ in defined}


@pytest.mark.parametrize("prop", IDS)
def test_spec_prints_a_property_by_id_and_by_rule(prop):
    text = rule_text(prop)
    assert text is not None and text.startswith(f"**{BY_ID[prop].rule} `{prop}`")
    assert rule_text(BY_ID[prop].rule) == text


@pytest.mark.parametrize("prop", IDS)
def test_every_entry_is_complete_and_its_check_resolves(prop):
    p = BY_ID[prop]
    assert BY_RULE[p.rule] is p
    assert p.summary.endswith(".") and "\n" not in p.summary
    assert p.hint and not p.hint.endswith(".")  # reports append their own full stop
    module, _, name = p.check_ref.partition(":")
    assert callable(getattr(importlib.import_module(module), name))


def test_sarif_rules_come_from_the_registry():
    sarif = report.to_sarif("k.py", [], "0")
    rules = sarif["runs"][0]["tool"]["driver"]["rules"]
    # the properties, then the findings that are not a property's: unknowns and input errors
    assert [r["id"] for r in rules] == [*IDS, "unknown", "input-error", "unrunnable", "vacuous", "unused-suppression"]
    rules = rules[:len(IDS)]
    assert [r["properties"]["specRule"] for r in rules] == list(PROP_RULES)
    assert all(BY_ID[r["id"]].summary == r["shortDescription"]["text"] for r in rules)


def test_a_verdict_about_an_unregistered_property_is_refused():
    with pytest.raises(ValueError, match="unknown property"):
        Verdict("race-free-typo", "proved")


def test_reading_the_registry_loads_no_check():
    """verdict.py reads the registry; the registry must not pull in Z3 or the checks (no import cycle)."""
    code = ("import sys; import semcheck.checker.properties.verdict, semcheck.checker.properties.registry; "
            "print(sorted(m for m in sys.modules if m == 'z3' or m.startswith('semcheck.checker.z3')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_deciding_deadlock_freedom_loads_no_solver():
    """deadlock-free is decided by the least stuck vector (PROP-4); Z3 is only its certificate."""
    code = ("import sys; import semcheck.checker.properties.deadlock, semcheck.checker.static.lowering, semcheck.checker.properties.exit_balance; "
            "print('z3' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
