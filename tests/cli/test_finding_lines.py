"""`--format concise` and `--format github`: one line per finding, the same findings SARIF has."""

from __future__ import annotations

import re

from semcheck.checker.report.render import FileReport
from semcheck.checker.report.lines import to_github
from semcheck.checker.run.request import Result
from semcheck.checker.properties.verdict import Verdict, Witness
from semcheck.model.ops import Loc

from ._support import BUGGY, CLEAN, EXAMPLES, semcheck_many

HANGS = BUGGY / "two_core_signal_hangs_on_tpu.py"
COLLISION = BUGGY / "fixed_id_collision.py"
CONCISE = re.compile(r"^(?P<path>[^:]+):(?P<line>\d+):(?P<col>\d+): (?P<rule>[a-z0-9-]+): (?P<message>.+)$")


def test_concise_and_github_lines_are_the_sarif_findings():
    args = ("verify", COLLISION, HANGS, "--devices", "2")
    concise, github, sarif, clean = semcheck_many([
        ((*args, "--format", "concise"), {"cwd": EXAMPLES.parent}),
        ((*args, "--format", "github"), {"cwd": EXAMPLES.parent}),
        ((*args, "--format", "sarif"), {"cwd": EXAMPLES.parent}),
        (("verify", CLEAN, "--devices", "2", "--format", "concise"), {"cwd": EXAMPLES.parent}),
    ])
    assert concise.returncode == github.returncode == sarif.returncode == 1
    results = sarif.json()["runs"][0]["results"]
    *lines, last = concise.stdout.splitlines()
    assert re.fullmatch(r"\d+ proved, [1-9]\d* violated, \d+ unknown(, \d+ vacuous)?", last)
    parsed = [CONCISE.match(line) for line in lines]
    assert all(parsed), lines
    expected = [(r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
                 # a file-level finding (a vacuous one whose reason names no line) is at line 1 in concise
                 r["locations"][0]["physicalLocation"].get("region", {}).get("startLine", 1), r["ruleId"])
                for r in results]
    assert [(m["path"], int(m["line"]), m["rule"]) for m in parsed] == expected
    # the TPU-only hang is placed on the signal without core_index, its column that of the statement
    (hang,) = [m for m in parsed if m["path"].endswith("two_core_signal_hangs_on_tpu.py") and m["rule"] != "vacuous"]
    assert (hang["line"], hang["col"], hang["rule"]) == ("57", "9", "deadlock-free")
    assert hang["message"].startswith("violated (build: 2 devices (hardware)): deadlock: ")
    # an unknown's line names the properties it leaves undecided once (the collision decides every
    # property since every run fails, RUN-11: there may be none)
    unknown = [m for m in parsed if m["rule"] == "unknown"]
    assert all(re.match(r"[a-z0-9-]+(, [a-z0-9-]+)* \(build: 2 devices \(", m["message"]) for m in unknown)

    *annotations, summary = github.stdout.splitlines()
    assert summary == last
    assert len(annotations) == len(lines)
    for note, line, m in zip(annotations, lines, parsed, strict=True):
        level = {"unknown": "warning", "vacuous": "notice"}.get(m["rule"], "error")  # a vacuous one is a note (REP-20)
        assert note == (f"::{level} title=semcheck ({m['rule']}),file={m['path']},line={m['line']},"
                        f"col={m['col']}::{line}")

    assert clean.returncode == 0 and clean.stdout.splitlines() == [clean.stdout.strip()]
    assert re.fullmatch(r"\d+ proved, 0 violated, 0 unknown\n", clean.stdout)


def test_github_annotations_escape_what_the_workflow_command_parser_reads(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    kernel = tmp_path / "k,ernel.py"
    kernel.write_text("x = 1\n" * 3)
    witness = Witness("100% wrong:\nsecond line", locs=(Loc(str(kernel), 2, "x = 1"),))
    result = Result("build", 2, "eager", [Verdict("exit-balance", "violated", witness=witness)])
    (note, _) = to_github([FileReport(str(kernel), [result])]).splitlines()
    head, _, message = note.partition("::")[2].partition("::")
    assert head == "error title=semcheck (exit-balance),file=k%2Cernel.py,line=2,col=1"
    assert message.endswith("100%25 wrong: second line") and "\n" not in message


def test_a_finding_in_a_kernel_of_another_file_names_the_target_file(tmp_path, monkeypatch):
    """A program target whose kernel lives in another file: the line is the kernel's, and the message
    names the target's own file, so the (clean) kernel's file does not look wrong on its own."""
    from semcheck.checker.report.lines import to_concise

    monkeypatch.chdir(tmp_path)
    kernel, program = tmp_path / "kernels.py", tmp_path / "program.py"
    kernel.write_text("x = 1\n" * 3)
    program.write_text("y = 2\n" * 3)
    witness = Witness("deadlock", locs=(Loc(str(kernel), 2, "x = 1"),))
    there = Result("build", 2, "hardware", [Verdict("deadlock-free", "violated", witness=witness)])
    here = Result("build", 2, "hardware", [Verdict("exit-balance", "violated", witness=Witness(
        "leak", locs=(Loc(str(program), 3, "y = 2"),)))])
    lines = to_concise([FileReport(str(program), [there, here])]).splitlines()
    assert lines[0] == "kernels.py:2:1: deadlock-free: violated (program.py::build: 2 devices (hardware)): deadlock"
    assert lines[1] == "program.py:3:1: exit-balance: violated (build: 2 devices (hardware)): leak"
