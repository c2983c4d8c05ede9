"""REP-40: the text report reads the working directory once, not once per line, and its lines are what
`rel` makes of each."""

from __future__ import annotations

import io
import os

import pytest

from semcheck.checker.properties.registry import IDS
from semcheck.checker.properties.verdict import Verdict, Witness
from semcheck.checker.report import render
from semcheck.checker.report.console import LineConsole
from semcheck.checker.report.findings import rel
from semcheck.checker.run.request import Result
from semcheck.model.ops import Loc

pytestmark = pytest.mark.rule("REP-40")

DEVICES = 300


def _results() -> list[Result]:
    """A violation whose witness has a timeline of `DEVICES` devices, each event naming the kernel by its
    absolute path (as a pod-scale witness's timeline does), and proofs."""
    path = os.path.abspath("kernels/ring.py")
    loc = Loc(path, 7, "pl.semaphore_wait(sem)")
    timeline = [{"device": d, "events": [f"{path}:6  signal sem +1 -> device {(d + 1) % DEVICES}",
                                         f"{path}:7  >> wait sem for 2"]} for d in range(DEVICES)]
    witness = Witness(message=f"unbalanced at exit: sem at {path}:6", locs=(loc,), details={"timeline": timeline})
    verdicts = [Verdict("exit-balance", "violated", witness=witness)]
    verdicts += [Verdict(p, "proved") for p in IDS if p != "exit-balance"]
    return [Result("ring", DEVICES, "eager", verdicts)]


def _console(buf: io.StringIO) -> LineConsole:
    return LineConsole(file=buf, width=80, no_color=True, highlight=False, soft_wrap=True)


def _counting(monkeypatch) -> list[int]:
    calls = [0]
    real = os.getcwd

    def getcwd() -> str:
        calls[0] += 1
        return real()

    monkeypatch.setattr(os, "getcwd", getcwd)
    return calls


@pytest.mark.parametrize("how", ["one file", "files"])
def test_the_text_report_reads_the_working_directory_once(monkeypatch, how):
    results = _results()
    buf = io.StringIO()
    calls = _counting(monkeypatch)
    if how == "one file":
        render.render_text(_console(buf), "kernels/ring.py", results)
    else:
        render.render_files(_console(buf), [render.FileReport("kernels/ring.py", results)])
    lines = buf.getvalue().splitlines()
    assert len(lines) > 2 * DEVICES  # every device's events were said
    assert calls[0] <= 5  # once per report, a few reads outside the witness's lines: not one per line


def test_each_line_is_what_rel_makes_of_it():
    results = _results()
    buf = io.StringIO()
    render.render_text(_console(buf), "kernels/ring.py", results)
    text = buf.getvalue()
    cwd = os.getcwd() + os.sep
    assert cwd not in text
    events = [e for d in results[0].verdicts[0].witness.details["timeline"] for e in d["events"]]
    said = [line.strip() for line in text.splitlines()]
    for e in events:
        assert rel(e) in said  # each event's line: its text with the working directory taken out
