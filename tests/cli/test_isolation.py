"""semcheck writes nothing but the report it was asked for and its result cache: no __pycache__
beside the kernel, nothing else in the working directory, HOME or TMPDIR, and no report at all when
it fails (with --no-cache not even the cache: tests/cli/test_cache.py)."""

from __future__ import annotations

import json
import shutil

from ._support import CLEAN, semcheck, semcheck_many


def snapshot(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_writes_only_the_requested_output(tmp_path):
    work, home, tmp = tmp_path / "work", tmp_path / "home", tmp_path / "tmp"
    for d in (work, home, tmp):
        d.mkdir()
    # A kernel that imports a neighbour module (which Python would normally cache in __pycache__).
    shutil.copy(CLEAN, work / "kernel.py")
    with open(work / "kernel.py", "a") as f:
        f.write("\nimport helper_module  # noqa: E402,F401\n")
    (work / "helper_module.py").write_text("ANSWER = 42\n")
    (work / "broken.py").write_text("raise ImportError('this kernel file cannot be imported')\n")
    before = snapshot(tmp_path)
    isolated = {"HOME": str(home), "TMPDIR": str(tmp), "XDG_CACHE_HOME": str(home / ".cache")}
    ok, broken = semcheck_many([
        (("verify", "kernel.py", "--devices", "2", "--dma-mode", "eager", "--format", "json",
          "--output", "report.json"), {"cwd": work, "extra_env": isolated}),
        (("verify", "broken.py", "--devices", "2", "--output", "broken.json"), {"cwd": work, "extra_env": isolated}),
    ])
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout == "" and ok.stderr == ""
    assert json.loads((work / "report.json").read_text())["summary"]["violated"] == 0
    assert broken.returncode == 2 and "kernel-raised" in broken.stderr
    # besides the report, only the result cache (.semcheck_cache/, as mypy's and ruff's caches)
    after = [p for p in snapshot(tmp_path) if not p.startswith("work/.semcheck_cache")]
    assert after == sorted([*before, "work/report.json"])
    assert any(p.endswith(".json") for p in snapshot(work / ".semcheck_cache"))


def test_a_long_temporary_directory_still_verifies(tmp_path):
    """The warm start's server listens on a Unix socket inside TMPDIR, whose path Linux limits to 107
    bytes: under a longer TMPDIR (deep CI work directories, pytest-xdist's) children start cold, not fail."""
    work, tmp = tmp_path / "work", tmp_path / ("t" * 100)
    for d in (work, tmp):
        d.mkdir()
    shutil.copy(CLEAN, work / "kernel.py")
    (ok,) = semcheck_many([
        (("verify", "kernel.py", "--devices", "2", "--dma-mode", "eager", "--format", "json",
          "--output", "report.json", "--no-cache"), {"cwd": work, "extra_env": {"TMPDIR": str(tmp)}}),
    ])
    assert ok.returncode == 0, ok.stderr
    assert json.loads((work / "report.json").read_text())["summary"]["violated"] == 0
