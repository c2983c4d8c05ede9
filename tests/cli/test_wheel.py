"""The built wheel works on its own: `semcheck spec` finds the rules it ships (specs/ is package
data) and `semcheck verify` runs from the installed copy, not from this checkout, on a user's
project outside it.

The wheel is built from a copy of the sources (so the build leaves nothing in the checkout) and
installed with --no-deps into a fresh venv. The dev venv's third-party packages (jax, z3, ...) are
made visible through a .pth line naming its site-packages: a directory added that way is not a
site directory, so its own .pth files -- among them the editable install's finder -- do not run,
and `import semcheck` can only find the wheel's copy (asserted below).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from semcheck import __version__

from ._support import REPO, env
from .test_integrations import hook
from .user_project import BUG_FILE, BUG_LINE, annotations, findings, make_project, run

pytestmark = pytest.mark.jax  # `semcheck verify` traces the example with jax

# What a wheel is built from: the project's sources, as a fresh clone has them.
SOURCES = ("pyproject.toml", "setup.py", "README.md", "src", "model", "checker", "specs")
EXAMPLE = REPO / "examples" / "ring_allreduce.py"


def _run(argv: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    e = env()
    for var in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"):  # nothing may lead back to the checkout
        e.pop(var, None)
    return subprocess.run(argv, cwd=cwd, env=e, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def _ok(p: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert p.returncode == 0, f"{p.args}: exit {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}"
    return p


def _commit_copy(src: Path) -> str:
    """Make the copy `src` a git checkout of one commit, then change a tracked file, as a working tree
    built with local edits is: the commit the wheel must record (`<short hash>+dirty`, REP-33)."""
    git = ["git", "-C", str(src), "-c", "user.name=semcheck test", "-c", "user.email=test@example.invalid",
           "-c", "commit.gpgsign=false"]
    _ok(_run([*git, "init", "--quiet"], cwd=src))
    _ok(_run([*git, "add", "--all"], cwd=src))
    _ok(_run([*git, "commit", "--quiet", "-m", "the sources of the wheel test"], cwd=src))
    head = _ok(_run([*git, "rev-parse", "--short", "HEAD"], cwd=src)).stdout.strip()
    with (src / "README.md").open("a", encoding="utf-8") as f:
        f.write("\nA local edit.\n")
    return head + "+dirty"


def install_wheel(tmp: Path) -> tuple[Path, dict[str, float]]:
    """Build the wheel from a copy of the sources (as `make wheel` does), made a git checkout with a local
    edit (`tmp / "commit"` says which commit the wheel must name), and install it into a fresh venv
    under `tmp`: (the venv, seconds per step). The dev venv's packages are visible through a .pth line."""
    seconds: dict[str, float] = {}

    t = time.monotonic()
    src = tmp / "src"
    src.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")
    for name in SOURCES:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=ignore)
        else:
            shutil.copy2(path, src / name)
    (tmp / "commit").write_text(_commit_copy(src), encoding="utf-8")
    said = []  # what the build and the install print: nothing (REP-35)
    said.append(_ok(_run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                          "--no-cache-dir", "--disable-pip-version-check", "--wheel-dir", str(tmp / "dist"),
                          str(src)], cwd=tmp)))
    (wheel,) = (tmp / "dist").glob("semcheck-*.whl")
    seconds["build"] = time.monotonic() - t

    t = time.monotonic()
    venv = tmp / "venv"
    _ok(_run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp))
    python = venv / "bin" / "python"
    said.append(_ok(_run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps",
                          "--no-index", "--no-cache-dir", "--disable-pip-version-check", str(wheel)], cwd=tmp)))
    (tmp / "install-output").write_text("".join(p.stdout + p.stderr for p in said), encoding="utf-8")
    fresh_site = _ok(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          cwd=tmp)).stdout.strip()
    dev_site = sysconfig.get_paths()["purelib"]
    (Path(fresh_site) / "dev-site-packages.pth").write_text(dev_site + "\n", encoding="utf-8")
    seconds["install"] = time.monotonic() - t
    return venv, seconds


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, Path, dict[str, float]]:
    """(the fresh venv, a working directory outside the checkout, seconds per step)."""
    pytest.importorskip("setuptools", reason="building the wheel offline needs setuptools (pip install -e '.[test]')")
    tmp = tmp_path_factory.mktemp("wheel")
    venv, seconds = install_wheel(tmp)
    work = tmp / "elsewhere"
    work.mkdir()
    return venv, work, seconds


# a file of each of the two documents (semantics/, deciding/) and the report schema
SHIPPED = ("semantics/kernels.md", "semantics/buffers.md", "semantics/divergences.md", "deciding/properties.md",
           "report-schema.json")


def test_the_wheel_ships_the_spec_files(installed):
    venv, work, _ = installed
    code = ("import json, sys, semcheck, semcheck.checker; from importlib import resources; "
            "specs = resources.files('semcheck.specs'); "
            "print(json.dumps({'semcheck': semcheck.__file__, 'checker': semcheck.checker.__file__, "
            f"'specs': [n for n in {SHIPPED!r} if specs.joinpath(*n.split('/')).is_file()], "
            "'editable': [m for m in sys.modules if 'editable' in m], "
            "'typed': (resources.files('semcheck') / 'py.typed').is_file()}))")
    found = json.loads(_ok(_run([str(venv / "bin" / "python"), "-c", code], cwd=work)).stdout)
    # semcheck resolves to the wheel's copy in the fresh venv, never to this checkout
    assert found["semcheck"].startswith(str(venv)) and found["checker"].startswith(str(venv)), found
    assert found["editable"] == []
    assert found["specs"] == list(SHIPPED)
    assert found["typed"]  # py.typed: type checkers read the public API's annotations (REP-4)


def test_semcheck_spec_prints_a_rule_from_the_wheel(installed):
    venv, work, seconds = installed
    t = time.monotonic()
    p = _ok(_run([str(venv / "bin" / "semcheck"), "spec", "SEM-3"], cwd=work))
    seconds["spec"] = time.monotonic() - t
    assert p.stdout.startswith("**SEM-3 "), p.stdout
    p = _ok(_run([str(venv / "bin" / "semcheck"), "spec", "deadlock-free"], cwd=work))
    assert p.stdout.startswith("**PROP-4 `deadlock-free`"), p.stdout


@pytest.mark.rule("REP-35")
def test_installing_prints_nothing(installed):
    """The wheel's build and install print nothing; an editable install (`make demo`'s) raises no
    warning: setuptools' backend, as pip calls it, run with every UserWarning (setuptools' warnings
    are) an error, on the same copy of the sources."""
    venv, work, _ = installed
    assert (work.parent / "install-output").read_text(encoding="utf-8") == ""
    src = work.parent / "src"
    code = "from setuptools import build_meta; print(build_meta.build_editable(%r))" % str(work.parent / "editable")
    p = _run([sys.executable, "-W", "error::UserWarning", "-c", code], cwd=src)
    assert p.returncode == 0 and p.stdout.strip().endswith(".whl"), p.stderr[-3000:]
    assert "Warning" not in p.stderr, p.stderr


@pytest.mark.rule("REP-33")
def test_the_wheel_names_its_commit_without_git(installed):
    venv, work, _ = installed
    e = env(PATH=str(venv / "bin"))  # no git on the PATH: the wheel's record answers
    for var in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"):
        e.pop(var, None)
    assert shutil.which("git", path=e["PATH"]) is None
    p = subprocess.run([str(venv / "bin" / "semcheck"), "--version"], cwd=work, env=e, capture_output=True,
                       text=True, timeout=120, stdin=subprocess.DEVNULL)
    want = (work.parent / "commit").read_text(encoding="utf-8")
    assert (p.returncode, p.stdout, p.stderr) == (0, f"semcheck {__version__} (commit {want})\n", ""), p


@pytest.mark.rule("REP-30")
def test_a_users_project_is_verified_from_the_wheel(installed, tmp_path):
    """The cheap sibling of tests/cli/test_user_project.py: the pre-commit hook's entry and the
    annotations, from the wheel, on a `src/`-layout project outside the checkout."""
    venv, _, seconds = installed
    proj = make_project(tmp_path)
    t = time.monotonic()
    which = run(venv, proj, "command -v semcheck")
    assert which.stdout.strip() == str(venv / "bin" / "semcheck"), which.stdout  # the wheel's, not the checkout's
    p = run(venv, proj, hook("semcheck-paths")["entry"])
    seconds["verify"] = time.monotonic() - t
    assert p.returncode == 1, p.stdout + p.stderr
    # one line per finding, on the line to fix: the wait on the other slot's semaphore
    assert findings(p.stdout) == {(BUG_FILE, BUG_LINE, "race-free", "violated")}, p.stdout
    assert p.stdout.strip().splitlines()[-1].endswith("1 violated, 0 unknown"), p.stdout
    g = run(venv, proj, "semcheck verify --format github")  # answered from the cache the hook filled
    assert g.returncode == 1 and annotations(g.stdout) == {(BUG_FILE, BUG_LINE, "race-free", "error")}, g.stdout
    print("wheel test seconds:", {k: round(v, 1) for k, v in seconds.items()})
