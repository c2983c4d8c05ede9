"""--select / --ignore and `# semcheck: ignore[PROPERTY] REASON`: a property not checked is reported as
suppressed, with its reason, in every format; it is never dropped silently and never counted as proved."""

from __future__ import annotations

import shutil

import pytest

from ._support import BUGGY, semcheck, semcheck_many
from .test_reports import assert_valid, report_validator, sarif_validator

REASON = "the extra signal is drained by the next call"
ARGS = ("--devices", "2", "--dma-mode", "eager")


@pytest.fixture
def leak(tmp_path):
    """The exit-balance example (violated: an extra signal), with a file-wide suppression comment at its top
    (REP-25: right after the module docstring)."""
    path = tmp_path / "leak.py"
    shutil.copy(BUGGY / "exit_leak_extra_signal.py", path)
    lines = path.read_text().splitlines()
    import ast

    at = ast.parse(path.read_text()).body[0].end_lineno  # the docstring's last line
    lines.insert(at, f"# semcheck: ignore[exit-balance] {REASON}")
    path.write_text("\n".join(lines) + "\n")
    return path, at + 1


def test_a_suppressed_property_is_reported_as_suppressed_in_every_format(leak):
    path, line = leak
    fmts = ("text", "concise", "github", "json", "sarif", "markdown", "html")
    runs = dict(zip(fmts, semcheck_many([(("verify", path.name, *ARGS, "--format", f), {"cwd": path.parent})
                                         for f in fmts]), strict=True))
    for fmt, run in runs.items():
        assert run.returncode == 0, (fmt, run.stderr)  # the only violation is suppressed
        assert "exit-balance" in run.stdout and REASON in run.stdout, fmt
    assert f"-- exit-balance suppressed (not checked): {REASON} (# semcheck: ignore at leak.py:{line})" \
        in runs["text"].stdout
    assert "all 7 properties proved" in runs["text"].stdout  # seven were checked, not eight
    assert runs["text"].stdout.splitlines()[-1] == "ok 7 proved, 0 violated, 0 unknown; not checked (suppressed): exit-balance"
    assert runs["concise"].stdout.splitlines()[-1] == "7 proved, 0 violated, 0 unknown; not checked (suppressed): exit-balance"
    assert f"leak.py:{line}:1: exit-balance: suppressed (not checked): {REASON}" in runs["concise"].stdout.splitlines()
    assert any(x.startswith(f"::notice title=semcheck (exit-balance),file=leak.py,line={line},")
               for x in runs["github"].stdout.splitlines())
    report = runs["json"].json()
    assert_valid(report_validator(), report, "json")
    assert "exit-balance" not in {r["property"] for r in report["results"]}
    assert report["summary"] == {"proved": 7, "violated": 0, "unknown": 0}
    (s,) = report["suppressed"]
    assert (s["property"], s["reason"], s["source"], s["location"]["line"]) == ("exit-balance", REASON, "comment", line)
    log = runs["sarif"].json()
    assert_valid(sarif_validator(), log, "sarif")
    (res,) = log["runs"][0]["results"]
    assert res["ruleId"] == "exit-balance" and res["level"] == "note"
    assert res["suppressions"] == [{"kind": "inSource", "justification": REASON}]
    assert res["locations"][0]["physicalLocation"]["region"]["startLine"] == line


def test_select_and_ignore_check_fewer_properties_and_say_so(leak):
    path, _ = leak
    plain = BUGGY / "exit_leak_extra_signal.py"
    selected, ignored = semcheck_many([
        (("verify", plain, *ARGS, "--select", "deadlock-free,race-free", "--format", "json"), {}),
        (("verify", plain, *ARGS, "--ignore", "exit-balance", "--ignore", "dma-bytes", "--format", "json"), {}),
    ])
    assert selected.returncode == 0 and ignored.returncode == 0, (selected.stderr, ignored.stderr)
    a, b = selected.json(), ignored.json()
    assert [r["property"] for r in a["results"]] == ["deadlock-free", "race-free"]
    assert [(s["property"], s["source"]) for s in a["suppressed"]] == [
        ("id-disjoint", "--select"), ("id-int16", "--select"), ("id-agreement", "--select"),
        ("exit-balance", "--select"), ("dma-bytes", "--select"), ("invocation-confined", "--select")]
    assert {r["property"] for r in b["results"]} == {"id-disjoint", "id-int16", "id-agreement", "deadlock-free",
                                                     "race-free", "invocation-confined"}
    assert [(s["property"], s["source"]) for s in b["suppressed"]] == [("exit-balance", "--ignore"),
                                                                        ("dma-bytes", "--ignore")]
    unsuppressed = semcheck("verify", plain, *ARGS, "--select", "exit-balance", "--format", "concise")
    assert unsuppressed.returncode == 1 and ": exit-balance: violated (build: 2 devices (eager))" in unsuppressed.stdout


@pytest.mark.parametrize("comment, words", [
    ("# semcheck: ignore[exit-balance]", ("say why", "exit-balance")),
    ("# semcheck: ignore[exit-balanse] typo", ("'exit-balanse' is not a property",)),
    ("# semcheck: ignore exit-balance because", ("expected `# semcheck: ignore[PROPERTY,...] REASON`",)),
])
def test_a_suppression_without_a_reason_or_with_a_wrong_name_is_bad_input(tmp_path, comment, words):
    path = tmp_path / "k.py"
    path.write_text((BUGGY / "exit_leak_extra_signal.py").read_text() + f"\n{comment}\n")
    line = len(path.read_text().splitlines())
    run = semcheck("verify", "k.py", *ARGS, cwd=tmp_path)
    assert run.returncode == 2 and run.stdout == ""
    (msg,) = run.stderr_lines
    assert msg.startswith("semcheck: bad-suppression: ") and msg.endswith(f"(k.py:{line})"), msg
    assert all(w in msg for w in words), msg


def test_select_of_an_unknown_property_is_a_usage_error():
    run = semcheck("verify", BUGGY / "exit_leak_extra_signal.py", "--select", "deadlock")
    assert run.returncode == 2
    assert run.stderr_lines == ["semcheck: usage error: --select deadlock: not a property (properties: id-disjoint, "
                                "id-int16, id-agreement, deadlock-free, exit-balance, dma-bytes, race-free, "
                                "invocation-confined)"]


# --- REP-25, REP-26: suppressions by where they stand ------------------------------------------------

SCOPED = '''"""A kernel file read for its comments only."""
# semcheck: ignore[dma-bytes] the caller pads every copy
import os


def build(num_devices):  # semcheck: ignore[race-free] its races are checked by the caller's test
    return os.sep


def _kernel(a):  # semcheck: ignore[id-int16] ids are checked at 2 devices only
    a = 1
    return a  # semcheck: ignore[exit-balance] drained by the next call


X = 1  # semcheck: ignore[deadlock-free] nothing is here
'''


def _scoped(tmp_path):
    from semcheck.checker.properties.registry import IDS
    from semcheck.checker.properties.verdict import Verdict, Witness
    from semcheck.checker.run.request import Result
    from semcheck.model.ops import Loc

    path = tmp_path / "k.py"
    path.write_text(SCOPED)
    lines = SCOPED.splitlines()

    def at(line):
        return Witness("bad", locs=(Loc(str(path), line, lines[line - 1]),))

    bad = {"exit-balance": at(12), "deadlock-free": at(11), "id-int16": at(11)}
    vs = [Verdict(p, "violated", witness=bad[p]) if p in bad else Verdict(p, "proved") for p in IDS]
    return path, [Result("build", 2, "eager", vs)]


@pytest.mark.rule("REP-25")
def test_a_suppression_applies_where_it_stands(tmp_path):
    from semcheck.checker.report import suppress

    path, results = _scoped(tmp_path)
    assert [(x.property, x.scope) for x in suppress.from_file(str(path))] == [("dma-bytes", "file")]
    local = suppress.local(str(path))
    assert [(x.property, x.scope, x.loc.line) for x in local] == [
        ("race-free", "target", 6), ("id-int16", "target", 10), ("exit-balance", "line", 12),
        ("deadlock-free", "line", 15)]
    kept, used, unused = suppress.apply_local(str(path), results, local)
    (row,) = kept
    # the target's race-free, the kernel's id-int16 (its line 11 lies in _kernel), the violation on line 12
    assert {v.property: v.verdict for v in row.verdicts} == {
        "id-disjoint": "proved", "id-agreement": "proved", "deadlock-free": "violated", "dma-bytes": "proved",
        "invocation-confined": "proved"}
    assert [x.property for x in used] == ["race-free", "id-int16", "exit-balance"]
    assert [x.describe().split(" (# ")[1] for x in used] == [
        f"semcheck: ignore at {path}:6 for target build)", f"semcheck: ignore at {path}:10 for the findings in _kernel())",
        f"semcheck: ignore at {path}:12 for the findings on that line)"]
    # deadlock-free is violated at line 11, not at line 15 where its comment stands
    assert [(x.property, x.loc.line) for x in unused] == [("deadlock-free", 15)]


@pytest.mark.rule("REP-26")
def test_an_unused_suppression_is_a_finding_at_its_line_in_every_format(tmp_path):
    from semcheck.checker.report import render as report
    from semcheck.checker.report import suppress
    from semcheck.checker.report.lines import to_concise, to_github

    path, results = _scoped(tmp_path)
    kept, used, unused = suppress.apply_local(str(path), results, suppress.local(str(path)))
    files = [report.FileReport(str(path), kept, suppressed=used, unused=unused)]
    said = "unused suppression # semcheck: ignore[deadlock-free]: no deadlock-free finding is on this line"
    doc = report.to_json_files("k.py", files)
    assert_valid(report_validator(), doc, "json")
    (u,) = doc["unused_suppressions"]
    assert (u["property"], u["scope"], u["location"]["line"], u["message"]) == ("deadlock-free", "line", 15, said)
    assert [(s["property"], s.get("scope")) for s in doc["suppressed"]] == [
        ("race-free", "target"), ("id-int16", "span"), ("exit-balance", "line")]
    assert f"{path}:15:1: unused-suppression: {said} (nothing is here)" in to_concise(files).splitlines()
    assert f"line=15,col=1::{path}:15:1: unused-suppression: {said}" in to_github(files)
    log = report.to_sarif_files(files, "0")
    assert_valid(sarif_validator(), log, "sarif")
    (res,) = [r for r in log["runs"][0]["results"] if r["ruleId"] == "unused-suppression"]
    assert res["level"] == "warning" and res["locations"][0]["physicalLocation"]["region"]["startLine"] == 15
    assert "unused suppressions" in report.to_markdown("k.py", files)
    import io

    from semcheck.checker.report.console import LineConsole

    out = io.StringIO()
    report.render_files(LineConsole(file=out, width=300), files)
    assert f"?? {said} (nothing is here; at {path}:15)" in out.getvalue()
    assert "-- exit-balance suppressed: drained by the next call" in out.getvalue()  # checked, then suppressed


@pytest.mark.rule("REP-25")
def test_a_comment_on_the_violation_s_line_suppresses_it_end_to_end(tmp_path):
    path = tmp_path / "leak.py"
    text = (BUGGY / "exit_leak_extra_signal.py").read_text()
    first = semcheck("verify", BUGGY / "exit_leak_extra_signal.py", *ARGS, "--select", "exit-balance",
                     "--format", "json").json()
    (row,) = first["results"]
    line = row["witness"]["locations"][0]["line"]  # the finding's primary line
    lines = text.splitlines()
    lines[line - 1] += f"  # semcheck: ignore[exit-balance] {REASON}"
    path.write_text("\n".join(lines) + "\n")
    run = semcheck("verify", path.name, *ARGS, "--select", "exit-balance", "--format", "concise", cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"leak.py:{line}:" in run.stdout and f"exit-balance: suppressed: {REASON}" in run.stdout
