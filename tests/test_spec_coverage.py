"""Traceability both ways between the specs, the code and the tests.

A rule is an id that a file of the two spec documents (`specs/semantics/`, `specs/deciding/`)
defines: a paragraph opening with `**X-n`, a row of a rule table (`| ERR-5 | ...`), or a lettered
sub-rule of a rule defined in the same file (`BUF-4a`). A row `| DR-10 | retired: ... |` marks an id
that is a gap in the numbering, not a rule; every gap must have one. For every rule:

* rule -> code: some module under `model/` or `checker/` cites its id;
* rule -> test: some test pytest collects carries `@pytest.mark.rule("X-n", ...)` (on the function,
  on its class, or as the module's `pytestmark`);
* every test its "Tests:" line names exists and carries that marker;

and test -> rule: every id a `rule` marker cites is a rule of a spec file.

Markers are read from the test sources with `ast`, not from a nested pytest run, so ids must be
string literals. The checks are plain functions over texts; the last tests run them on a small
fake spec and fake test sources to show they catch what they should. A rule added to either
document needs a citing module and a marked test from the start.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SPEC_DOCUMENTS = ("specs/semantics", "specs/deciding")
SPEC_FILES = tuple(p.relative_to(ROOT).as_posix() for d in SPEC_DOCUMENTS for p in sorted((ROOT / d).glob("*.md")))
# the model, the checker, the public API (src/semcheck) and the build (setup.py): every rule has a home there
CODE_DIRS = ("model", "checker", "src")
CODE_FILES = ("setup.py",)

_BOLD = re.compile(r"^\*\*([A-Z]+-\d+)\b", re.M)
_TABLE_ROW = re.compile(r"^\|\s*([A-Z]+-\d+)\s*\|", re.M)
# a row `| DR-10 | retired: ... |` marks an id that is a gap in the numbering: not a rule
_RETIRED = re.compile(r"^\|\s*([A-Z]+-\d+)\s*\|\s*retired\b", re.M)
_SUB_RULE = re.compile(r"\b([A-Z]+-\d+)([a-z])\b")
_PARAGRAPH_END = re.compile(r"^\*\*[A-Z]+-\d+\b|^#", re.M)


# --- reading the specs ---------------------------------------------------------------------------


def spec_rules(text: str) -> list[str]:
    """The rule ids `text` defines, in order of first definition."""
    found: dict[str, int] = {}
    for m in _BOLD.finditer(text):
        found.setdefault(m.group(1), m.start())
    retired = set(retired_ids(text))
    for m in _TABLE_ROW.finditer(text):
        if m.group(1) not in retired:
            found.setdefault(m.group(1), m.start())
    parents = set(found)
    for m in _SUB_RULE.finditer(text):
        if m.group(1) in parents:
            found.setdefault(m.group(0), m.start())
    return sorted(found, key=found.__getitem__)


def retired_ids(text: str) -> list[str]:
    """The ids `text` marks retired, in order."""
    return _RETIRED.findall(text)


def unmarked_gaps(rules: list[str], retired: list[str]) -> list[str]:
    """The ids below a family's highest rule that are neither a rule nor marked retired."""
    numbers: dict[str, set[int]] = {}
    for r in rules:
        m = re.fullmatch(r"([A-Z]+)-(\d+)", r)
        if m:
            numbers.setdefault(m.group(1), set()).add(int(m.group(2)))
    taken = set(rules) | set(retired)
    return [f"{k}-{i}" for k, ns in sorted(numbers.items()) for i in range(1, max(ns) + 1) if f"{k}-{i}" not in taken]


def rule_paragraph(text: str, rule: str) -> str:
    """The paragraph that opens with `**rule` (up to the next rule or heading); '' if there is none."""
    m = re.search(rf"^\*\*{re.escape(rule)}\b", text, flags=re.M)
    if not m:
        return ""
    nxt = _PARAGRAPH_END.search(text, m.end())
    return text[m.start() : nxt.start() if nxt else len(text)]


def named_tests(paragraph: str) -> list[tuple[str, str | None]]:
    """(test file, test function or None for the whole file) of each test a "Tests:" line names.

    `::name` continues the file named last.
    """
    if "Tests:" not in paragraph:
        return []
    listing = re.split(r"\n\s*\n", paragraph.split("Tests:", 1)[1], maxsplit=1)[0]
    out: list[tuple[str, str | None]] = []
    current = None
    for path, name, bare in re.findall(r"`(tests/[\w/]+\.py)(?:::(\w+))?`|`::(\w+)`", listing):
        if path:
            current = path
        if current is None:
            out.append(("<no file>", bare))
            continue
        out.append((current, (name or bare) or None))
    return out


# --- reading the tests ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Mark:
    """One `rule` marker: the ids it cites and what it marks (`<module>`, `test_f`, `TestC::test_m`)."""

    path: str
    line: int
    target: str
    ids: tuple[str, ...]


def _is_rule_marker(node: ast.AST) -> bool:
    """`pytest.mark.rule(...)` or `mark.rule(...)` (not hypothesis's stateful `@rule(...)`)."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "rule"):
        return False
    owner = node.func.value
    if isinstance(owner, ast.Name):
        return owner.id == "mark"
    return isinstance(owner, ast.Attribute) and owner.attr == "mark" and isinstance(owner.value, ast.Name) and owner.value.id == "pytest"


def _marker_calls(exprs) -> list[ast.Call]:
    return [n for e in exprs for n in ast.walk(e) if _is_rule_marker(n)]


def read_marks(path: str, source: str) -> tuple[list[Mark], list[str]]:
    """Every `rule` marker of one test file, and the problems found reading them.

    Problems: no ids, an id that is not a string literal, and a marker on something pytest does
    not collect (a helper, a class not named Test*, a file not named test_*.py) or where this
    reader cannot tell what it marks.
    """
    tree = ast.parse(source, filename=path)
    collected_file = Path(path).name.startswith("test_") or Path(path).stem.endswith("_test")
    marks: list[Mark] = []
    problems: list[str] = []
    placed: set[int] = set()

    def add(call: ast.Call, target: str, collected: bool) -> None:
        placed.add(id(call))
        where = f"{path}:{call.lineno}"
        ids = []
        for arg in call.args:
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                ids.append(arg.value)
            else:
                problems.append(f"{where}: rule ids must be string literals, got {ast.unparse(arg)}")
        if call.keywords:
            problems.append(f"{where}: the rule marker takes ids only, not keywords")
        if not call.args:
            problems.append(f"{where}: a rule marker without ids")
        if not collected:
            problems.append(f"{where}: rule marker on {target}, which pytest does not collect")
        marks.append(Mark(path, call.lineno, target, tuple(ids)))

    def visit(body, prefix: str, in_test_class: bool) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + node.name
                ok = collected_file and node.name.startswith("test") and (in_test_class or not prefix)
                for call in _marker_calls(node.decorator_list):
                    add(call, name, ok)
            elif isinstance(node, ast.ClassDef):
                ok = collected_file and node.name.startswith("Test")
                for call in _marker_calls(node.decorator_list):
                    add(call, node.name, ok)
                visit(node.body, f"{prefix}{node.name}::", ok)
            elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
                for call in _marker_calls([node.value]):
                    add(call, "<module>" if not prefix else prefix.rstrip(":"), collected_file)

    visit(tree.body, "", False)
    for call in _marker_calls([tree]):
        if id(call) not in placed:
            problems.append(f"{path}:{call.lineno}: cannot tell which test this rule marker marks")
    return marks, problems


# --- the checks, as functions of texts -----------------------------------------------------------


def uncited_by_code(rules: list[str], code: str) -> list[str]:
    return [r for r in rules if not re.search(rf"\b{re.escape(r)}\b", code)]


def without_tests(rules: list[str], marks: list[Mark]) -> list[str]:
    cited = {i for m in marks for i in m.ids}
    return [r for r in rules if r not in cited]


def unknown_citations(marks: list[Mark], rules: set[str]) -> list[str]:
    return [f"{m.path}:{m.line}: {m.target} cites {i}, which no spec defines" for m in marks for i in m.ids if i not in rules]


def defined_tests(source: str) -> set[str]:
    """Names of the module-level functions and of the methods (as `Class::method`) of a source."""
    names: set[str] = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names.update(f"{node.name}::{n.name}" for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))
    return names


def named_test_problems(rule: str, paragraph: str, sources: dict[str, str], marks: list[Mark]) -> list[str]:
    """What is wrong with the tests `rule`'s "Tests:" line names: missing, or not marked with `rule`."""
    problems = []
    for path, name in named_tests(paragraph):
        if path not in sources:
            problems.append(f"{rule}: {path} does not exist")
            continue
        if name is None:
            if not any(rule in m.ids for m in marks if m.path == path):
                problems.append(f"{rule}: no test in {path} is marked rule({rule!r})")
            continue
        functions = defined_tests(sources[path])
        if name not in functions:
            problems.append(f"{rule}: no test {name} in {path}")
        elif rule not in _marks_of(marks, path, name):
            problems.append(f"{rule}: {path}::{name} is not marked rule({rule!r})")
    return problems


def _marks_of(marks: list[Mark], path: str, name: str) -> set[str]:
    """The ids marking test `name` of `path`: its own markers, its classes' and its module's."""
    parts = name.split("::")
    targets = {"<module>"} | {"::".join(parts[: k + 1]) for k in range(len(parts))}
    return {i for m in marks if m.path == path and m.target in targets for i in m.ids}


# --- the real specs and tests --------------------------------------------------------------------


SPECS = {f: (ROOT / f).read_text(encoding="utf-8") for f in SPEC_FILES}
RULES = {f: spec_rules(t) for f, t in SPECS.items()}
ALL_RULES = [r for f in SPEC_FILES for r in RULES[f]]
CODE = "\n".join([*(p.read_text(encoding="utf-8") for d in CODE_DIRS for p in sorted((ROOT / d).rglob("*.py"))),
                  *((ROOT / f).read_text(encoding="utf-8") for f in CODE_FILES if (ROOT / f).is_file())])
SOURCES = {p.relative_to(ROOT).as_posix(): p.read_text(encoding="utf-8") for p in sorted((ROOT / "tests").rglob("*.py"))}
_READ = {path: read_marks(path, src) for path, src in SOURCES.items()}
MARKS = [m for marks, _ in _READ.values() for m in marks]
MARK_PROBLEMS = [p for _, problems in _READ.values() for p in problems]

# A "Tests:" line naming a test that was renamed since: the check runs, and is expected to
# fail, only while the stale name is still in the paragraph (none today).
STALE_NAMES: dict[str, str] = {}


def _status(spec: str, rule: str) -> str:
    """A rule's `Status:` line ('' for none): a `target` rule is specified (and checked against jax
    where it says so) but not implemented by semcheck yet (specs/semantics/calls.md)."""
    m = re.search(r"^Status: (.*)$", rule_paragraph(SPECS[spec], rule), flags=re.M)
    return m.group(1) if m else ""


def _rules_of(spec: str, check: str) -> list:
    out = []
    for r in RULES[spec]:
        status = _status(spec, r)
        marks = ()
        # strict: the day a target rule is cited (or tested), the test fails until its status goes
        if status.startswith("target") and (check == "code" or "No test checks it yet" in status):
            marks = pytest.mark.xfail(strict=True, reason=f"{r} is a target rule: {status}")
        out.append(pytest.param(spec, r, id=r, marks=marks))
    return out


def _with_tests_lines():
    for spec in SPEC_FILES:
        for r in RULES[spec]:
            para = rule_paragraph(SPECS[spec], r)
            if "Tests:" not in para:
                continue
            marks = ()
            if STALE_NAMES.get(r) and STALE_NAMES[r] in para:
                marks = pytest.mark.xfail(strict=True, reason=f"the spec still names {STALE_NAMES[r]}, since renamed")
            yield pytest.param(spec, r, id=r, marks=marks)


def test_the_specs_have_rules():
    kernels, buffers = RULES["specs/semantics/kernels.md"], RULES["specs/semantics/buffers.md"]
    assert len(kernels) >= 30 and {"IR-1", "ERR-5", "SEM-3", "RUN-1"} <= set(kernels)
    assert len(buffers) >= 20 and {"BUF-1", "BUF-4a", "BUF-10a", "BUF-12"} <= set(buffers)
    assert {"RUN-7", "PROP-6"} <= set(RULES["specs/deciding/symmetry.md"]) | set(RULES["specs/deciding/properties.md"])
    assert len(ALL_RULES) == len(set(ALL_RULES)), "a rule id is defined in two spec files"


def test_every_gap_in_the_numbering_is_marked_retired_and_no_rule_is():
    retired = [i for t in SPECS.values() for i in retired_ids(t)]
    assert unmarked_gaps(ALL_RULES, retired) == []
    assert not set(retired) & set(ALL_RULES) and len(retired) == len(set(retired))


@pytest.mark.parametrize("spec, rule", [p for s in SPEC_FILES for p in _rules_of(s, "code")])
def test_every_rule_is_cited_by_code(spec, rule):
    assert not uncited_by_code([rule], CODE), f"{spec}: no module under model/, checker/ or src/ (nor setup.py) cites {rule}"


@pytest.mark.parametrize("spec, rule", [p for s in SPEC_FILES for p in _rules_of(s, "test")])
def test_every_rule_is_checked_by_a_marked_test(spec, rule):
    assert not without_tests([rule], MARKS), f"{spec}: no test is marked @pytest.mark.rule({rule!r})"


def test_every_rule_a_test_cites_exists():
    assert unknown_citations(MARKS, set(ALL_RULES)) == []


def test_rule_markers_are_readable_and_on_collected_tests():
    assert MARK_PROBLEMS == []


@pytest.mark.parametrize("spec, rule", list(_with_tests_lines()))
def test_the_tests_a_rule_names_exist_and_are_marked_with_it(spec, rule):
    para = rule_paragraph(SPECS[spec], rule)
    assert named_tests(para), f"{rule}'s Tests: line names no test"
    assert named_test_problems(rule, para, SOURCES, MARKS) == []


# --- the checks catch what they should -----------------------------------------------------------

FAKE_SPEC = """\
# A fake spec

**TOY-1 First.** Text citing TOY-2 and (TOY-1a), a sub-rule.
Tests: `tests/test_toy.py::test_one`,
`::test_two`.

**TOY-2 Second.** No tests named.

**NOTE** not a rule. Nor is TOY-3 in passing, nor OTHER-1a (its parent is not defined here).

| id | what |
|---|---|
| TAB-1 | a table row |
| TAB-3 | retired: never defined |
"""

FAKE_TESTS = '''\
import pytest
from hypothesis.stateful import rule

pytestmark = [pytest.mark.jax, pytest.mark.rule("TAB-1")]


@pytest.mark.rule("TOY-1", "TOY-1a")
def test_one():
    assert True


@pytest.mark.parametrize("x", [1])
@pytest.mark.rule("TOY-9")
def test_two(x):
    assert x


@pytest.mark.rule("TOY-2")
class TestGroup:
    def test_inside(self):
        pass


@rule()
def not_a_marker():
    pass
'''


def test_rules_are_read_from_bold_paragraphs_table_rows_and_sub_rules():
    assert spec_rules(FAKE_SPEC) == ["TOY-1", "TOY-1a", "TOY-2", "TAB-1"]
    assert named_tests(rule_paragraph(FAKE_SPEC, "TOY-1")) == [("tests/test_toy.py", "test_one"), ("tests/test_toy.py", "test_two")]
    assert named_tests(rule_paragraph(FAKE_SPEC, "TOY-2")) == []


def test_markers_are_read_from_functions_classes_and_pytestmark_but_not_hypothesis_rules():
    marks, problems = read_marks("tests/test_toy.py", FAKE_TESTS)
    assert problems == []
    assert {(m.target, m.ids) for m in marks} == {
        ("<module>", ("TAB-1",)),
        ("test_one", ("TOY-1", "TOY-1a")),
        ("test_two", ("TOY-9",)),
        ("TestGroup", ("TOY-2",)),
    }


def test_retired_rows_are_not_rules_and_gaps_without_one_are_reported():
    assert retired_ids(FAKE_SPEC) == ["TAB-3"] and "TAB-3" not in spec_rules(FAKE_SPEC)
    assert unmarked_gaps(["TAB-1", "TAB-4"], ["TAB-3"]) == ["TAB-2"]
    assert unmarked_gaps(["TAB-1", "TAB-4"], ["TAB-2", "TAB-3"]) == []


def test_the_check_fails_when_a_test_cites_a_rule_that_does_not_exist():
    marks, _ = read_marks("tests/test_toy.py", FAKE_TESTS)
    bad = unknown_citations(marks, set(spec_rules(FAKE_SPEC)))
    assert len(bad) == 1 and "test_two cites TOY-9" in bad[0]


def test_the_check_fails_when_a_rule_lacks_a_test():
    marks, _ = read_marks("tests/test_toy.py", FAKE_TESTS)
    rules = spec_rules(FAKE_SPEC + "\n**TOY-4 Untested.** Nobody marks this.\n")
    assert without_tests(rules, marks) == ["TOY-4"]
    assert without_tests(spec_rules(FAKE_SPEC), marks) == []


def test_the_check_fails_when_no_code_cites_a_rule():
    assert uncited_by_code(["TOY-1", "TOY-1a", "TOY-2"], "# TOY-1 and TOY-2 here; TOY-10 is another rule") == ["TOY-1a"]


def test_the_check_fails_when_a_named_test_is_missing_or_not_marked_with_its_rule():
    marks, _ = read_marks("tests/test_toy.py", FAKE_TESTS)
    para = rule_paragraph(FAKE_SPEC, "TOY-1")
    problems = named_test_problems("TOY-1", para, {"tests/test_toy.py": FAKE_TESTS}, marks)
    assert problems == ["TOY-1: tests/test_toy.py::test_two is not marked rule('TOY-1')"]
    renamed = FAKE_TESTS.replace("def test_one", "def test_first")
    marks2, _ = read_marks("tests/test_toy.py", renamed)
    problems = named_test_problems("TOY-1", para, {"tests/test_toy.py": renamed}, marks2)
    assert "TOY-1: no test test_one in tests/test_toy.py" in problems
    assert named_test_problems("TOY-1", para, {}, marks) == ["TOY-1: tests/test_toy.py does not exist"] * 2


def test_misplaced_or_unreadable_markers_are_reported():
    source = (
        "import pytest\nIDS = ('TOY-1',)\n\n"
        "@pytest.mark.rule(*IDS)\ndef test_a():\n    pass\n\n"
        "@pytest.mark.rule('TOY-1')\ndef helper():\n    pass\n\n"
        "@pytest.mark.rule()\ndef test_b():\n    pass\n\n"
        "LOOSE = pytest.mark.rule('TOY-2')\n"
    )
    _, problems = read_marks("tests/test_toy.py", source)
    assert len(problems) == 4
    assert "string literals" in problems[0] and "helper" in problems[1] and "without ids" in problems[2]
    assert "cannot tell" in problems[3]
    _, problems = read_marks("tests/helpers.py", "import pytest\n@pytest.mark.rule('TOY-1')\ndef test_a():\n    pass\n")
    assert problems and "does not collect" in problems[0]
