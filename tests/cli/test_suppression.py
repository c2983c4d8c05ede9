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
    """The exit-balance example (violated: an extra signal), with a suppression comment on its pallas_call line."""
    path = tmp_path / "leak.py"
    shutil.copy(BUGGY / "exit_leak_extra_signal.py", path)
    lines = path.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if "pl.pallas_call(" in line)
    lines[at] += f"  # semcheck: ignore[exit-balance] {REASON}"
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
    assert f"leak.py:{line}:5: exit-balance: suppressed (not checked): {REASON}" in runs["concise"].stdout.splitlines()
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
