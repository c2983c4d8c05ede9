"""The spec can be read in pieces: from any property's clause, the rules its citations reach are few.

The two spec documents (`specs/semantics/`, `specs/deciding/`) are parsed into a citation graph: a
rule (a paragraph opening with `**X-n`, or a row `| X-n | ...` of a rule table) cites every rule
id its text names; a sub-rule (`BUF-4a`) stands for its rule, and a range (`ERR-2 .. ERR-6`) for
every rule of it. The `Tests:`, `Related:` and `Status:` lines are not followed: they name tests,
rules worth reading next and the rule that realises a target, none of them a premise. Every
property's rule (PROP-n in `specs/deciding/properties.md`, its clause) must reach at most
`BOUND` rules, itself included; a failure prints the longest chain of citations and what it reached.
The last tests run the parser on a small fake spec to show that the bound can fail.
"""

from __future__ import annotations

import re
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = ("specs/semantics", "specs/deciding")
PROPERTIES = "specs/deciding/properties.md"
BOUND = 40

_START = re.compile(r"^\*\*([A-Z]+-\d+)\b|^\|\s*([A-Z]+-\d+)\s*\|(?!\s*retired\b)|^#", re.M)
_ID = re.compile(r"\b([A-Z]+)-(\d+)[a-z]?\b")
_RANGE = re.compile(r"\b([A-Z]+)-(\d+)[a-z]?\s*\.\.\s*\1-(\d+)[a-z]?\b")
_NOT_PREMISES = ("Tests:", "Related:", "Status:")


def rule_texts(text: str) -> dict[str, str]:
    """Each rule's own text: its paragraph up to the next rule or heading (a table row: its line),
    without the lines that are not premises (a `Tests:`, `Related:` or `Status:` line and the lines
    that continue it up to a blank line)."""
    out: dict[str, str] = {}
    starts = list(_START.finditer(text))
    for i, m in enumerate(starts):
        rule = m.group(1) or m.group(2)
        if rule is None:
            continue
        end = starts[i + 1].start() if i + 1 < len(starts) else len(text)
        if m.group(2):  # a table row is its line
            nl = text.find("\n", m.start())
            end = nl if nl >= 0 else len(text)
        kept, skipping = [], False
        for line in text[m.start() : end].split("\n"):
            if line.startswith(_NOT_PREMISES):
                skipping = True
            elif not line.strip():
                skipping = False
            if not skipping:
                kept.append(line)
        out[rule] = out.get(rule, "") + "\n".join(kept)
    return out


def cited(text: str, rules: set[str]) -> set[str]:
    """The rules `text` names: ids (a sub-rule stands for its rule) and every rule of a range."""
    out = {f"{k}-{n}" for k, n in _ID.findall(text)}
    for k, a, b in _RANGE.findall(text):
        out |= {f"{k}-{n}" for n in range(int(a), int(b) + 1)}
    return out & rules


def citation_graph(texts: dict[str, str]) -> dict[str, set[str]]:
    rules = set(texts)
    return {r: cited(t, rules) - {r} for r, t in texts.items()}


def reached(graph: dict[str, set[str]], start: str) -> dict[str, str | None]:
    """Every rule `start` reaches (itself included), each with the rule it was first reached from."""
    parent: dict[str, str | None] = {start: None}
    queue = deque([start])
    while queue:
        u = queue.popleft()
        for v in sorted(graph[u]):
            if v not in parent:
                parent[v] = u
                queue.append(v)
    return parent


def longest_chain(parent: dict[str, str | None]) -> list[str]:
    """The longest of the shortest citation chains from the start: the rule read last, and why."""
    def chain(r: str | None) -> list[str]:
        out = []
        while r is not None:
            out.append(r)
            r = parent[r]
        return out[::-1]
    return max((chain(r) for r in parent), key=len)


def over_bound(graph: dict[str, set[str]], starts: list[str], bound: int) -> list[str]:
    """One message per start that reaches more than `bound` rules: the count, the chain, the rules."""
    out = []
    for s in starts:
        parent = reached(graph, s)
        if len(parent) > bound:
            out.append(f"{s} reaches {len(parent)} rules (at most {bound}); longest chain "
                       f"{' -> '.join(longest_chain(parent))}; reached: {', '.join(sorted(parent))}")
    return out


def _spec_texts() -> dict[str, str]:
    texts: dict[str, str] = {}
    for d in DOCUMENTS:
        for p in sorted((ROOT / d).glob("*.md")):
            for rule, text in rule_texts(p.read_text(encoding="utf-8")).items():
                texts[rule] = texts.get(rule, "") + text
    return texts


TEXTS = _spec_texts()
GRAPH = citation_graph(TEXTS)
CLAUSES = re.findall(r"^\*\*(PROP-\d+) `", (ROOT / PROPERTIES).read_text(encoding="utf-8"), flags=re.M)


def test_every_property_has_a_clause_naming_its_reductions():
    from semcheck.checker.properties.registry import REGISTRY

    assert CLAUSES == [p.rule for p in REGISTRY]
    for rule in CLAUSES:
        assert "Reductions:" in TEXTS[rule], f"{rule}'s clause does not say which reductions it accepts"


def test_every_reduction_a_property_accepts_is_argued_in_its_clause():
    from semcheck.checker.properties.reductions import REDUCTIONS
    from semcheck.checker.properties.registry import REGISTRY

    for p in REGISTRY:
        clause = TEXTS[p.rule][TEXTS[p.rule].index("Reductions:"):]
        for name, _ in p.reductions:
            assert REDUCTIONS[name].rule in cited(clause, set(TEXTS)), f"{p.id} accepts {name} without citing its rule"


def test_from_every_property_clause_at_most_40_rules_are_reached():
    assert over_bound(GRAPH, CLAUSES, BOUND) == []


def test_the_semantics_cites_no_rule_of_how_semcheck_decides():
    semantics = {r for p in (ROOT / DOCUMENTS[0]).glob("*.md") for r in rule_texts(p.read_text(encoding="utf-8"))}
    deciding = set(TEXTS) - semantics
    leaks = sorted(f"{r} cites {', '.join(sorted(GRAPH[r] & deciding))}" for r in semantics if GRAPH[r] & deciding)
    assert leaks == []


def test_every_relative_link_of_the_documents_resolves():
    broken = []
    for d in DOCUMENTS:
        for p in sorted((ROOT / d).glob("*.md")):
            for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", p.read_text(encoding="utf-8")):
                if "://" not in target and not (p.parent / target).exists():
                    broken.append(f"{p.relative_to(ROOT)}: {target}")
    assert broken == []


# --- the checks catch what they should -----------------------------------------------------------

FAKE = """\
# Fake

**TOY-1 Clause.** Decided by TOY-2 (TOY-3a is a sub-rule of TOY-3).
Tests: `tests/test_toy.py::test_one` (TOY-9 here is not a premise).
Related: TOY-6, a see-also.

**TOY-2 Second.** Needs TOY-4 .. TOY-5.

**TOY-3 Third.** Cites nothing.

**TOY-4 Fourth.** Back to TOY-1.

**TOY-5 Fifth.** Nothing.

**TOY-6 Sixth.** Far away: TOY-7.

**TOY-7 Seventh.** Nothing.

| TOY-8 | a table rule citing TOY-7 |
| TOY-9 | retired: never defined |
"""


def test_citations_follow_ids_sub_rules_and_ranges_but_not_tests_or_related_lines():
    graph = citation_graph(rule_texts(FAKE))
    assert set(graph) == {f"TOY-{n}" for n in range(1, 9)}
    assert graph["TOY-1"] == {"TOY-2", "TOY-3"}
    assert graph["TOY-2"] == {"TOY-4", "TOY-5"}
    assert graph["TOY-8"] == {"TOY-7"}
    assert set(reached(graph, "TOY-1")) == {"TOY-1", "TOY-2", "TOY-3", "TOY-4", "TOY-5"}


def test_the_bound_fails_with_the_longest_chain():
    graph = citation_graph(rule_texts(FAKE))
    assert over_bound(graph, ["TOY-1"], 5) == []
    (msg,) = over_bound(graph, ["TOY-1"], 4)
    assert msg.startswith("TOY-1 reaches 5 rules (at most 4); longest chain TOY-1 -> TOY-2 -> TOY-4;")
