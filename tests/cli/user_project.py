"""A team's own project, generated outside the checkout: a `src/` layout whose kernels live in a
package, one of them with a planted bug (the wrong-slot wait of `examples/buggy/race_wrong_slot_wait.py`),
configured by `[tool.semcheck]` as the README says. The end-to-end tests run semcheck on it from an
installed copy, as a user would."""

from __future__ import annotations

import os
import re
import subprocess
import textwrap
from pathlib import Path

from ._support import BUGGY, EXAMPLES, env

# where the planted bug is to be fixed: the wait on the other slot's semaphore
BUG_FILE = "src/ringkernels/kernels/wrong_slot.py"
BUG_LINE = 64
CLEAN_FILE = "src/ringkernels/kernels/ring.py"


def make_project(root: Path) -> Path:
    """Write the project under `root` / "project" and return its directory."""
    proj = root / "project"
    pkg = proj / "src" / "ringkernels"
    (pkg / "kernels").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    # the ring's builder lives in the package: only `pythonpath = ["src"]` lets the kernel file import it
    (pkg / "ring_impl.py").write_text((EXAMPLES / "ring_permute.py").read_text())
    (pkg / "kernels" / "__init__.py").write_text("")
    (proj / CLEAN_FILE).write_text("from ringkernels.ring_impl import build  # noqa: F401\n")
    bug = (BUGGY / "race_wrong_slot_wait.py").read_text()
    lines = bug.splitlines()
    assert "fetch(i, 1 - slot).wait()" in lines[BUG_LINE - 1], "the planted bug's wait moved"
    lines[BUG_LINE - 1] = lines[BUG_LINE - 1].split("  #")[0]  # the user's file does not say where its bug is
    (proj / BUG_FILE).write_text("\n".join(lines) + "\n")
    (proj / "tests").mkdir()
    (proj / "tests" / "test_nothing_yet.py").write_text("def test_the_package_imports():\n"
                                                        "    import ringkernels  # noqa: F401\n")
    (proj / "pyproject.toml").write_text(textwrap.dedent("""
        [project]
        name = "ringkernels"
        version = "0.1.0"

        [tool.pytest.ini_options]
        testpaths = ["tests"]
        pythonpath = ["src"]

        [tool.semcheck]
        paths = ["src/ringkernels/kernels"]
        pythonpath = ["src"]
        devices = [2]
        dma-mode = "eager"
    """))
    return proj


def user_env(venv: Path) -> dict[str, str]:
    """The environment of a shell with `venv` activated: its bin first, nothing leading back to the checkout."""
    e = env()
    for var in ("PYTHONPATH", "PYTHONHOME"):
        e.pop(var, None)
    e["VIRTUAL_ENV"] = str(venv)
    e["PATH"] = f"{venv / 'bin'}{os.pathsep}{e.get('PATH', '')}"
    return e


def run(venv: Path, proj: Path, command: str, *, timeout: float = 600,
        extra: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`command` in a shell in the project, as a user (or a CI step) types it."""
    return subprocess.run(["bash", "-c", command], cwd=proj, env={**user_env(venv), **(extra or {})},
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


FINDING = re.compile(r"^(?P<file>[^:\s]+\.py):(?P<line>\d+):(?P<col>\d+): (?P<prop>[\w-]+): (?P<verdict>\w+)", re.M)
ANNOTATION = re.compile(r"^::(?P<level>error|warning) title=semcheck \((?P<prop>[\w-]+)\),file=(?P<file>[^,]+),"
                        r"line=(?P<line>\d+)", re.M)


def findings(concise: str) -> set[tuple[str, int, str, str]]:
    """(file, line, property, verdict) of each `--format concise` line."""
    return {(m["file"], int(m["line"]), m["prop"], m["verdict"]) for m in FINDING.finditer(concise)}


def annotations(github: str) -> set[tuple[str, int, str, str]]:
    """(file, line, property, level) of each `--format github` annotation."""
    return {(m["file"], int(m["line"]), m["prop"], m["level"]) for m in ANNOTATION.finditer(github)}
