"""The result cache: a re-run on unchanged kernel files answers from .semcheck_cache/, says so, and
any change to the kernel, a module it imports, or the options verifies afresh.
(tests/cli/test_cache_staleness.py edits every kind of dependency at random.)"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from ._support import CLEAN, semcheck

ARGS = ("verify", "kernels", "--devices", "2,4", "--format", "json")


def entries(root) -> set[str]:
    return {p.name for p in (root / ".semcheck_cache").rglob("*.json")}


@pytest.mark.jax
def test_a_second_run_answers_from_the_cache_and_a_change_invalidates_it(tmp_path):
    (tmp_path / "kernels").mkdir()
    kernel = tmp_path / "kernels" / "ring.py"
    shutil.copy(CLEAN, kernel)
    kernel.write_text(kernel.read_text() + "\nimport helper  # noqa: E402,F401\n")
    (tmp_path / "kernels" / "helper.py").write_text("ANSWER = 42\n")

    first = semcheck(*ARGS, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert len(entries(tmp_path)) == 2  # one per device count
    assert (tmp_path / ".semcheck_cache" / ".gitignore").read_text().strip().endswith("*")
    second = semcheck(*ARGS, cwd=tmp_path)
    assert second.returncode == 0 and second.stderr_lines == []
    assert not any("cached" in row for row in first.json()["results"])
    assert all(row.pop("cached") is True for row in second.json()["results"])
    answer = second.json()
    for row in answer["results"]:
        del row["cached"]
    assert answer == first.json()  # timings too: the same answer
    text = semcheck("verify", "kernels", "--devices", "2,4", cwd=tmp_path)
    assert text.stdout.count("(cached)") == 6, text.stdout  # 2 device counts x 3 modes
    assert "6 of 6 configurations answered from the result cache" in text.stdout

    # other options are another entry
    other = semcheck(*ARGS, "--dma-mode", "hardware", cwd=tmp_path)
    assert other.returncode == 0 and len(entries(tmp_path)) == 4

    # the kernel changes: verified afresh
    kernel.write_text(kernel.read_text() + "# a comment changes the file\n")
    edited = semcheck(*ARGS, cwd=tmp_path)
    assert edited.returncode == 0 and len(entries(tmp_path)) == 6
    # a module it imports from its directory changes: verified afresh
    (tmp_path / "kernels" / "helper.py").write_text("ANSWER = 43\n")
    semcheck(*ARGS, cwd=tmp_path)
    assert len(entries(tmp_path)) == 8


def test_no_cache_neither_reads_nor_writes(tmp_path):
    (tmp_path / "kernels").mkdir()
    shutil.copy(CLEAN, tmp_path / "kernels" / "ring.py")
    run = semcheck(*ARGS[:3], "2", "--dma-mode", "eager", "--no-cache", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert not (tmp_path / ".semcheck_cache").exists()


HOOK = """
import os, sys
from semcheck import _dependencies as d
seen = []
real = d.Recorder.audit
d.Recorder.audit = lambda self, event, args: (seen.append(event), real(self, event, args))[1]
rec = d.install()
with d.observe(rec):
    for _ in range(1000):
        id(rec)
    with open(sys.argv[1]) as f:
        f.read()
print(sorted(set(seen)))
print(any(p.endswith("kernel.txt") for p, _ in rec.dependencies().files))
"""


def test_the_recorder_reads_what_the_build_opens_and_no_other_event(tmp_path):
    """The audit hook lives as long as the verifying process, whose checks call `id()` millions of times
    (each an audit event): only the events the recorder reads reach it, and what is opened is recorded."""
    import subprocess
    import sys

    kernel = tmp_path / "kernel.txt"
    kernel.write_text("x")
    proc = subprocess.run([sys.executable, "-c", HOOK, str(kernel)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    events, recorded = proc.stdout.split("\n")[:2]
    assert "builtins.id" not in events and "'open'" in events
    assert recorded == "True"


@pytest.mark.jax
def test_the_entry_of_a_proved_file_never_answers_for_a_buggy_one(tmp_path):
    """Copying a proved file's entry over a buggy file's (as anyone who can write to .semcheck_cache/
    could) makes no verdict: the buggy file is verified afresh and violated, exit 1."""
    from ._support import BUGGY

    shutil.copy(CLEAN, tmp_path / "clean.py")
    shutil.copy(BUGGY / "exit_leak_extra_signal.py", tmp_path / "buggy.py")
    args = ("--devices", "2", "--dma-mode", "eager", "--format", "json")
    assert semcheck("verify", "clean.py", *args, cwd=tmp_path).returncode == 0
    assert semcheck("verify", "buggy.py", *args, cwd=tmp_path).returncode == 1
    by_kernel = {}
    for p in (tmp_path / ".semcheck_cache").rglob("*.json"):
        by_kernel[os.path.basename(json.loads(p.read_text())["body"]["kernel"][0])] = p
    shutil.copy(by_kernel["clean.py"], by_kernel["buggy.py"])
    again = semcheck("verify", "buggy.py", *args, cwd=tmp_path)
    assert again.returncode == 1, again.stdout
    assert not any(row.get("cached") for row in again.json()["results"])
    assert any(row["verdict"] == "violated" for row in again.json()["results"])


@pytest.mark.jax
def test_verbose_says_why_an_answer_was_not_kept(tmp_path):
    kernel = tmp_path / "ring.py"
    shutil.copy(CLEAN, kernel)
    kernel.write_text(kernel.read_text() + "\nimport subprocess  # noqa: E402\nsubprocess.run(['true'])\n")
    quiet = semcheck("verify", "ring.py", "--devices", "2", "--dma-mode", "eager", cwd=tmp_path)
    verbose = semcheck("verify", "ring.py", "--devices", "2", "--dma-mode", "eager", "-v", cwd=tmp_path)
    assert quiet.returncode == verbose.returncode == 0, verbose.stderr
    assert quiet.stderr_lines == []
    assert verbose.stderr_lines == ["semcheck: not-cached: ring.py at 2 devices: not kept in the result cache: "
                                    "it starts another program"], verbose.stderr
    assert not list((tmp_path / ".semcheck_cache").rglob("*.json"))
