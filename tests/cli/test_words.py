"""Words that mean what they say (specs/deciding/report.md REP-20 .. REP-24, REP-27): vacuous is not proved, an
interpreter limitation is not a deadlock, one mark per meaning, rule ids under -v, semaphores by their
kernel names, and output that stays where it belongs.

The renderers are pure functions of the results, so most tests build the results by hand; the end-to-end
ones run the CLI once per kernel, at 2 devices."""

from __future__ import annotations

import io
import json
import subprocess

import pytest

from semcheck.checker.properties.registry import IDS
from semcheck.checker.properties.verdict import Verdict, Witness
from semcheck.checker.report import render as report
from semcheck.checker.report.lines import to_concise, to_github
from semcheck.checker.run.exit_codes import EXIT_PROVED, EXIT_UNKNOWN, EXIT_UNRUNNABLE, EXIT_VIOLATED, exit_code
from semcheck.checker.run.request import Result
from tests.cli._support import EXAMPLES, SCHEMA, SEMCHECK, semcheck

NO_EXIT = ("no run reaches a kernel exit: every run hangs before every device's exit check (see deadlock-free), "
           "so no count is checked at an exit")


def _row(mode: str, kinds: dict[str, str], fold: dict | None = None) -> Result:
    vs = []
    for p in IDS:
        kind = kinds.get(p, "proved")
        if kind == "violated":
            vs.append(Verdict(p, "violated", witness=Witness("it leaks")))
        elif kind == "proved":
            vs.append(Verdict(p, "proved", stats={"fold": fold} if fold else {}))
        else:
            vs.append(Verdict(p, kind, reason=NO_EXIT if kind == "vacuous" else "interpret mode cannot run this "
                              "kernel: jax raises NotImplementedError: nan + dma_sem at k.py:3, at launch",
                              stats={} if kind == "vacuous" else {"raises": "NotImplementedError at k.py:3"}))
    return Result("build", 2, mode, vs)


def _text(files, detail: str = "normal") -> str:
    from semcheck.checker.report.console import LineConsole

    out = io.StringIO()
    report.render_files(LineConsole(file=out, highlight=False, soft_wrap=True, width=200), files, detail=detail)
    return out.getvalue()


@pytest.mark.rule("REP-20")
def test_vacuous_is_said_in_every_format_and_never_counted_as_proved():
    jsonschema = pytest.importorskip("jsonschema")
    files = [report.FileReport("k.py", [_row("eager", {"exit-balance": "vacuous"})])]
    doc = report.to_json_files("k.py", files)
    jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text())).validate(doc)
    (row,) = [r for r in doc["results"] if r["property"] == "exit-balance"]
    assert (row["verdict"], row["reason"]) == ("vacuous", NO_EXIT)
    assert doc["summary"] == {"proved": 7, "vacuous": 1, "violated": 0, "unknown": 0}

    text = _text(files)
    assert "ok   build  devices=2    eager     7 proved; exit-balance vacuous" in text
    assert "all 8 properties proved" not in text
    assert "vac exit-balance vacuous: build, 2 devices, eager" in text and NO_EXIT in text
    assert text.rstrip().endswith("ok 7 proved, 0 violated, 0 unknown, 1 vacuous")

    (note,) = report.to_sarif_files(files, "0")["runs"][0]["results"]
    assert (note["ruleId"], note["level"], note["properties"]["verdict"]) == ("vacuous", "note", "vacuous")
    assert any(": vacuous: exit-balance (build: 2 devices (eager)): no run reaches" in x
               for x in to_concise(files).splitlines())
    assert to_github(files).startswith("::notice title=semcheck (vacuous)")
    assert "⭕ exit-balance vacuous" in report.to_markdown("k.py", files)
    assert "exit-balance vacuous" in report.to_html("k.py", files)
    assert exit_code(files[0].results) == EXIT_PROVED  # true of every run, so no failure


@pytest.mark.rule("REP-20")
def test_modes_differ_says_vacuous():
    files = [report.FileReport("k.py", [_row("eager", {"exit-balance": "vacuous"}),
                                        _row("hardware", {"exit-balance": "violated"})])]
    text = _text(files)
    assert "exit-balance: violated on hardware; vacuous under eager (2 devices)" in text
    assert "proved under eager" not in text
    (d,) = report.to_json_files("k.py", files)["differences"]
    assert d["verdicts"] == {"eager": "vacuous", "hardware": "violated"}
    # proved beside vacuous is no difference: both hold
    same = [_row("eager", {"exit-balance": "vacuous"}), _row("hardware", {})]
    assert report.to_json_files("k.py", [report.FileReport("k.py", same)])["differences"] == []


@pytest.mark.rule("REP-22")
def test_marks_are_distinct():
    for marks in (report.MARK, report.PLAIN_MARK):
        assert len(set(marks.values())) == len(marks), marks
    unknown = Result("build", 2, "on_wait", [Verdict(p, "unknown", reason="z3 gave up") for p in IDS])
    files = [report.FileReport("k.py", [_row("eager", {}), unknown, _row("hardware", {"deadlock-free": "violated"})])]
    heads = [x for x in _text(files).splitlines() if x.endswith("-")]
    assert any(x.startswith("?? 8 properties unknown") for x in heads), heads
    assert any(x.startswith("!= modes differ") for x in heads), heads
    assert not any(x.startswith("?? modes differ") for x in heads)


@pytest.mark.rule("REP-23")
def test_rule_ids_only_under_verbose():
    files = [report.FileReport("k.py", [_row("eager", {}, fold={"devices": 2, "faithful": False})])]
    plain = _text(files)
    assert "all 8 properties proved on the run of one class of 2 devices\n" in plain
    assert "RUN-31" not in plain
    assert "all 8 properties proved on the run of one class of 2 devices (RUN-31)" in _text(files, "verbose")


@pytest.mark.rule("REP-21")
def test_exit_codes_rank_unrunnable_after_unknown():
    assert exit_code([_row("eager", {p: "unrunnable" for p in IDS}), _row("hardware", {})]) == EXIT_UNRUNNABLE
    assert exit_code([_row("eager", {p: "unrunnable" for p in IDS}),
                      _row("hardware", {"deadlock-free": "violated"})]) == EXIT_VIOLATED
    unknown = Result("build", 2, "hardware", [Verdict(p, "unknown", reason="z3 gave up") for p in IDS])
    assert exit_code([_row("eager", {p: "unrunnable" for p in IDS}), unknown]) == EXIT_UNKNOWN


# --- end to end: the CLI, one run per kernel ------------------------------------------------------


@pytest.fixture(scope="module")
def async_copy():
    """A start/done program whose start kernel returns its DMA semaphore: jax's interpreter refuses the
    semaphore output at launch (D21); a TPU runs it."""
    return semcheck("verify", EXAMPLES / "programs" / "async_copy.py", "--devices", "2", "--no-cache")


@pytest.mark.rule("REP-21")
def test_an_interpreter_limitation_is_unrunnable_with_its_own_exit_code(async_copy):
    r = async_copy
    assert r.returncode == EXIT_UNRUNNABLE, r.stdout + r.stderr
    rows = [x for x in r.stdout.splitlines() if " devices=2 " in x]
    assert [(x.split()[0], x.split()[3]) for x in rows] == [("n/a", "eager"), ("n/a", "on_wait"), ("ok", "hardware")]
    assert r.stdout.rstrip().splitlines()[-1] == "n/a 8 proved, 0 violated, 0 unknown, 16 unrunnable in interpret mode"
    assert ("interpret mode cannot run this kernel: jax raises NotImplementedError at "
            "examples/programs/async_copy.py:58") in rows[0]
    assert "deadlock" not in r.stdout and "violated" not in r.stdout.replace("0 violated", "")
    assert "hint: jax's TPU interpreter cannot run a pallas_call with semaphore outputs" in r.stdout


@pytest.mark.slow  # a buggy kernel of its own; the names are read where the other verdicts are (REP-24)
@pytest.mark.rule("REP-24")
def test_semaphores_are_named_by_the_kernel_in_eager():
    r = semcheck("verify", EXAMPLES / "buggy" / "dma_byte_mismatch_wait_larger.py", "--devices", "2",
                 "--dma-mode", "eager", "--select", "dma-bytes", "--format", "json", "--no-cache")
    (row,) = r.json()["results"]
    assert row["verdict"] == "violated", row
    said = row["witness"]["message"]
    assert "recv_sem[0] (id 2001)" in said and "semaphore 2001" not in said, said


_CHATTY = """\
import importlib.util
import logging
import os

print("the kernel file says hello")
_spec = importlib.util.spec_from_file_location("_ring", {ring!r})
_ring = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_ring)


def build(num_devices):
    logging.getLogger().error("AsyncCopyDescriptor was not used (said by the test kernel)")
    return _ring.build(num_devices)
"""


@pytest.mark.rule("REP-27")
def test_the_kernel_s_output_is_kept_for_verbose_and_never_colour_is_no_escape(tmp_path):
    kernel = tmp_path / "chatty.py"
    kernel.write_text(_CHATTY.format(ring=str(EXAMPLES / "ring_permute.py")))
    cache = {"SEMCHECK_CACHE_DIR": str(tmp_path / "cache")}
    quiet = semcheck("verify", kernel, "--devices", "2", "--dma-mode", "hardware", "--color", "never",
                     extra_env={"FORCE_COLOR": "1", **cache})
    assert quiet.returncode == 0, quiet.stdout + quiet.stderr
    for stream in (quiet.stdout, quiet.stderr):
        assert "says hello" not in stream and "AsyncCopyDescriptor" not in stream
        assert "\x1b" not in stream  # --color never: not even bold, though FORCE_COLOR says a terminal
    # answered from the result cache, which keeps what the import printed with the answer it gave
    loud = semcheck("verify", kernel, "--devices", "2", "--dma-mode", "hardware", "-v", extra_env=cache)
    assert "(cached)" in loud.stdout
    assert "semcheck: output: chatty.py at 2 devices printed" in loud.stderr
    assert "the kernel file says hello" in loud.stderr
    assert "AsyncCopyDescriptor was not used (said by the test kernel)" in loud.stderr
    assert "says hello" not in loud.stdout


@pytest.mark.rule("REP-27")
def test_spec_into_a_closed_pipe_is_no_traceback():
    p = subprocess.Popen([*SEMCHECK, "spec", "PRG-11"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()  # as `| head -0` does before semcheck writes
    assert p.wait(timeout=60) == 0
    assert p.stderr.read() == b""
    p.stderr.close()



@pytest.mark.rule("REP-34")
def test_a_signal_to_a_core_of_its_own_device_is_not_read_as_another_device():
    from semcheck.model.ops import SemRef, Signal

    sem = SemRef("ready")
    own = Signal(sem, 1, device=None, core=1).describe()
    other = Signal(sem, 1, device=2, core=1).describe()
    assert own.endswith("+1 -> core 1 of this device") and other.endswith("+1 -> device 2 core 1")
