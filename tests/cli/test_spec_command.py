"""`semcheck spec RULE` reads the two spec documents (specs/semantics/, specs/deciding/) file by file.

Every file that defines a rule can be printed from, table rows and retired ids included, and a rule
that does not exist is one line on stderr with the input error's exit code, never a traceback. The
CLI is called in process (`main`), the lookup reads the source tree's specs or the shipped copy.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from semcheck.checker.report.spec import SPEC_DOCUMENTS, rule_text, spec_files
from semcheck.checker.run.cli import main
from semcheck.checker.run.exit_codes import EXIT_INPUT, EXIT_PROVED

REPO = Path(__file__).resolve().parents[2]
_FIRST_RULE = re.compile(r"^\*\*([A-Z]+-\d+)\b", re.M)


def _first_rules() -> list[tuple[str, str]]:
    out = []
    for doc in SPEC_DOCUMENTS:
        for p in sorted((REPO / "specs" / doc).glob("*.md")):
            m = _FIRST_RULE.search(p.read_text(encoding="utf-8"))
            if m:
                out.append((f"{doc}/{p.name}", m.group(1)))
    return out


def test_the_lookup_reads_every_file_of_both_documents():
    names = {f"{Path(str(f)).parent.name}/{f.name}" for f in spec_files()}
    on_disk = {f"{d}/{p.name}" for d in SPEC_DOCUMENTS for p in (REPO / "specs" / d).glob("*.md")}
    assert names == on_disk and {"semantics/kernels.md", "deciding/properties.md"} <= names


@pytest.mark.parametrize("where, rule", _first_rules())
def test_a_rule_of_every_file_is_printed(where, rule):
    assert rule_text(rule).startswith(f"**{rule} "), where


def test_table_rows_retired_ids_and_property_ids_are_found():
    assert rule_text("ERR-5").startswith("| ERR-5 | `IndexError`")
    assert "retired" in rule_text("DR-40")
    assert rule_text("race-free").startswith("**PROP-7 `race-free`")
    assert rule_text("NOPE-1") is None


def test_the_command_prints_a_rule_or_one_line_and_exit_2(capsys):
    assert main(["spec", "RUN-7"]) == EXIT_PROVED
    assert capsys.readouterr().out.startswith("**RUN-7 Folding.**")
    assert main(["spec", "NOPE-1"]) == EXIT_INPUT
    err = capsys.readouterr().err
    assert err.strip().splitlines() == ["semcheck: no rule 'NOPE-1' in the specification"]
