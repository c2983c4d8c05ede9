"""End to end on a user's project (REP-30): a `src/`-layout project generated outside the checkout,
semcheck installed into a fresh venv the README's way (the wheel `make wheel` builds, `pip install
--no-deps`), and every way a team runs it: `semcheck verify`, `pytest --semcheck -n 2`, the two
pre-commit hooks (their `entry`, run as pre-commit runs it: pre-commit itself is not a dependency)
and the workflow file's steps (each `run:` line that calls semcheck, by hand). All must agree on the
verdicts and put the finding on the line to fix.

Why no real `pip install` of the dependencies: that needs a network. The fresh venv sees the test
venv's packages (jax, z3, pytest, ...) through a .pth line, which `--system-site-packages` would not
give a venv made from a venv; semcheck itself resolves to the wheel's copy only (test_wheel.py).

Slow (a wheel build, two kernels verified afresh by the CLI and the plugin: about a minute on one
core); its cheap sibling, `test_wheel.py::test_a_users_project_is_verified_from_the_wheel`, runs by
default."""

from __future__ import annotations

import json
import re
import shlex

import pytest

from ._support import REPO
from .test_integrations import hook
from .test_testing import _plugin_args
from .test_wheel import install_wheel
from .user_project import BUG_FILE, BUG_LINE, CLEAN_FILE, annotations, findings, make_project, run

pytestmark = [pytest.mark.jax, pytest.mark.slow]

WANT = {(BUG_FILE, BUG_LINE, "race-free", "violated")}


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    pytest.importorskip("setuptools", reason="building the wheel offline needs setuptools (pip install -e '.[test]')")
    pytest.importorskip("xdist")
    tmp = tmp_path_factory.mktemp("user")
    venv, _ = install_wheel(tmp)
    return venv, make_project(tmp)


@pytest.mark.rule("REP-30")
def test_every_way_in_agrees_on_a_users_project(project):
    venv, proj = project

    # 1. the command, afresh: the verdict of every row
    cli = run(venv, proj, "semcheck verify --format json --no-cache")
    assert cli.returncode == 1, cli.stdout + cli.stderr
    rows = json.loads(cli.stdout)["results"]
    assert {r["file"] for r in rows} == {BUG_FILE, CLEAN_FILE}
    bad = {(r["file"], r["property"], r["verdict"]) for r in rows if r["verdict"] != "proved"}
    assert bad == {(BUG_FILE, "race-free", "violated")}, bad
    primary = {(r["file"], r["witness"]["primary_location"]["line"]) for r in rows if r["verdict"] == "violated"}
    assert primary == {(BUG_FILE, BUG_LINE)}

    # 2. the pytest plugin under xdist, afresh: the configured paths are its tests
    tests = run(venv, proj, shlex.join(["python", "-m", "pytest", *_plugin_args(), "-p", "no:cacheprovider",
                                        "--semcheck", "--semcheck-no-cache", "-n", "2", "-rA"]))
    out = tests.stdout
    assert tests.returncode == 1, out + tests.stderr
    assert "1 failed, 2 passed" in out, out
    assert re.search(rf"FAILED {re.escape(BUG_FILE)}::semcheck\[", out), out
    assert re.search(rf"PASSED {re.escape(CLEAN_FILE)}::semcheck\[", out), out
    assert "race-free violated" in out and f"wrong_slot.py:{BUG_LINE}" in out, out

    # 3. the pre-commit hooks, as pre-commit runs their entry: the paths hook, then the changed-files hook
    paths = run(venv, proj, hook("semcheck-paths")["entry"])
    assert paths.returncode == 1 and findings(paths.stdout) == WANT, paths.stdout + paths.stderr
    changed = ["src/ringkernels/__init__.py", CLEAN_FILE, BUG_FILE]
    files = run(venv, proj, shlex.join([*shlex.split(hook("semcheck")["entry"]), *changed]))
    assert files.returncode == 1 and findings(files.stdout) == WANT, files.stdout + files.stderr

    # 4. the workflow's steps, by hand, with its paths left to [tool.semcheck]
    steps = [line.strip().removeprefix("run: ")
             for line in (REPO / ".github" / "workflows" / "semcheck.yml").read_text().splitlines()
             if line.strip().startswith("run: semcheck ")]
    assert len(steps) == 3, steps
    summary = proj / "step-summary.md"
    for step in steps:
        run(venv, proj, step, extra={"SEMCHECK_PATHS": "", "GITHUB_STEP_SUMMARY": str(summary)})
    sarif = json.loads((proj / "semcheck.sarif").read_text())
    located = {(loc["physicalLocation"]["artifactLocation"]["uri"], loc["physicalLocation"]["region"]["startLine"],
                x["ruleId"]) for x in sarif["runs"][0]["results"] if x["level"] == "error" for loc in x["locations"]}
    assert located == {(BUG_FILE, BUG_LINE, "race-free")}, located
    assert "race-free" in summary.read_text()
    github = run(venv, proj, "semcheck verify $SEMCHECK_PATHS --format github", extra={"SEMCHECK_PATHS": ""})
    assert annotations(github.stdout) == {(BUG_FILE, BUG_LINE, "race-free", "error")}, github.stdout
