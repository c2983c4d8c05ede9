"""Which commit this semcheck is, for `semcheck --version` (specs/deciding/report.md REP-33).

`git_commit` asks git which commit a source tree is at: the short hash, with `+dirty` when a tracked
file differs from it (untracked files do not count, as with `git describe --dirty`). The build
(`setup.py`) asks it about the tree it builds from and writes the answer into the package as
`RECORD`, empty when git cannot tell; `commit` reads that record first, so an installed wheel never
needs git. A checkout (an editable install, `make demo`) has no record: git is asked at run time,
and only when it tracks this very file, so that a venv inside some other repository does not report
that repository's commit.

Standard library only: `setup.py` loads this file by its path, before semcheck is installed.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

RECORD = "COMMIT"  # the build's record, beside this file in the installed package


def _git(directory: Path, *args: str) -> str | None:
    try:
        p = subprocess.run(["git", "--no-optional-locks", "-C", str(directory), *args], capture_output=True,
                           text=True, timeout=20, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):  # no git on this machine, or it hung
        return None
    return p.stdout if p.returncode == 0 else None


def git_commit(directory: Path, tracked: str) -> str | None:
    """`0f3b14e`, or `0f3b14e+dirty` when a tracked file has changes, for the checkout `directory` is in;
    None when git cannot tell (no git, not a checkout, or `tracked`, a path under `directory`, is not
    a file of that checkout)."""
    if _git(directory, "ls-files", "--error-unmatch", "--", tracked) is None:
        return None
    head = _git(directory, "rev-parse", "--short", "HEAD")
    status = _git(directory, "status", "--porcelain", "--untracked-files=no")
    if not head or status is None:
        return None
    return head.strip() + ("+dirty" if status.strip() else "")


def commit() -> str | None:
    """The commit this semcheck was built from (the build's record), else the commit of the checkout it
    runs from; None when neither is known."""
    here = Path(__file__).resolve()
    record = here.with_name(RECORD)
    if record.is_file():  # a built package: the record decides, even when it is empty
        return record.read_text(encoding="utf-8").strip() or None
    return git_commit(here.parent, here.name)


def version_line(version: str) -> str:
    """What `semcheck --version` prints: `semcheck 0.1.0 (commit 0f3b14e+dirty)`."""
    found = commit()
    return f"semcheck {version}" + (f" (commit {found})" if found else "")
