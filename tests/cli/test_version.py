"""`semcheck --version` names the commit (specs/deciding/report.md REP-33): in a checkout, git's answer
at run time; in a wheel, the record its build wrote (tests/cli/test_wheel.py builds one)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from semcheck import __version__
from semcheck._commit import git_commit, version_line

from ._support import REPO, semcheck

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")

GIT = ["git", "-c", "user.name=semcheck test", "-c", "user.email=test@example.invalid", "-c", "commit.gpgsign=false"]


def _git(repo: Path, *args: str) -> str:
    return subprocess.run([*GIT, "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.mark.rule("REP-33")
def test_a_checkout_is_named_by_its_short_hash_and_dirty_by_tracked_changes(tmp_path):
    repo = tmp_path / "checkout"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "mod.py").write_text("x = 1\n")
    assert git_commit(repo, "pkg/mod.py") is None  # not a checkout yet
    _git(repo, "init", "--quiet")
    _git(repo, "add", "--all")
    _git(repo, "commit", "--quiet", "-m", "one")
    head = _git(repo, "rev-parse", "--short", "HEAD")
    assert git_commit(repo, "pkg/mod.py") == head
    assert git_commit(repo / "pkg", "mod.py") == head  # asked from the package's own directory
    (repo / "pkg" / "new.py").write_text("")  # an untracked file is no change (as `git describe --dirty`)
    assert git_commit(repo, "pkg/mod.py") == head
    assert git_commit(repo, "pkg/new.py") is None  # a file git does not track: not this checkout's
    (repo / "pkg" / "mod.py").write_text("x = 2\n")
    assert git_commit(repo, "pkg/mod.py") == head + "+dirty"


@pytest.mark.rule("REP-33")
def test_no_git_means_no_commit(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # a PATH without git
    assert git_commit(REPO, "src/semcheck/_commit.py") is None
    assert version_line("1.2.3") in ("semcheck 1.2.3", f"semcheck 1.2.3 (commit {_recorded()})")


def _recorded() -> str | None:
    import semcheck._commit as c

    record = Path(c.__file__).with_name(c.RECORD)
    return record.read_text().strip() if record.is_file() else None


@pytest.mark.rule("REP-33")
def test_the_command_names_this_checkout_s_commit():
    if _recorded() is not None:
        pytest.skip("semcheck is installed from a wheel here: tests/cli/test_wheel.py checks the record")
    want = git_commit(REPO, "src/semcheck/_commit.py")
    run = semcheck("--version")
    assert run.returncode == 0 and run.stderr == ""
    assert run.stdout == (f"semcheck {__version__} (commit {want})\n" if want else f"semcheck {__version__}\n")
