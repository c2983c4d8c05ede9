"""One set of settings for `semcheck verify`, `semcheck.check`, `assert_verified` and `pytest --semcheck`
(specs/deciding/report.md REP-2), the same properties left unchecked by each (REP-5), and the plugin collecting
the configured kernels where pytest does not look (REP-6), on a `src/`-layout project."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

from cli._support import BUGGY, EXAMPLES, env, semcheck
from cli.test_testing import run_pytest


def _src_project(root) -> None:
    """A `src/`-layout project: the kernels under src/kernels import their builders from a package under
    src/ that only `[tool.semcheck] pythonpath` puts on the import path; pytest looks only in tests/."""
    pkg = root / "src" / "ringlib"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    shutil.copy(EXAMPLES / "ring_permute.py", pkg / "clean.py")
    shutil.copy(BUGGY / "missing_signal_deadlock.py", pkg / "deadlock.py")
    kernels = root / "src" / "kernels"
    kernels.mkdir()
    (kernels / "ring.py").write_text("# semcheck: ignore[race-free] the ring's own tests check its data\n"
                                     "from ringlib.clean import build  # noqa: F401\n")
    (kernels / "stuck.py").write_text("from ringlib.deadlock import build  # noqa: F401\n")
    # excluded: were it verified, its build would raise, and every way in would say so
    (kernels / "wip_ring.py").write_text("def build(num_devices):\n    raise RuntimeError('not yet')\n")
    tests = root / "tests"
    tests.mkdir()
    (tests / "test_by_hand.py").write_text(textwrap.dedent("""
        import json
        from semcheck.testing import assert_verified

        def test_ring_by_assert_verified():
            report = assert_verified("src/kernels/ring.py", cache=False)
            with open("assert_verified.json", "w") as f:
                json.dump(report, f)
    """))
    (root / "pyproject.toml").write_text(textwrap.dedent("""
        [tool.pytest.ini_options]
        testpaths = ["tests"]

        [tool.semcheck]
        paths = ["src/kernels"]
        exclude = ["wip_*.py"]
        pythonpath = ["src"]
        devices = [2]
        dma-mode = "hardware"
    """))


CHECK = """
import json
import semcheck
out = {}
# the directory as `semcheck verify` finds it (REP-29): wip_ring.py excluded, each file's own findings
found = semcheck.check("src/kernels", cache=False)
assert found.error is None, found.error
for path, one in found.files.items():
    name = path.split("/")[-1][:-3]
    out[name] = {"rows": sorted((r.devices, r.dma_mode, v.property, v.verdict) for r in one.results
                                for v in r.verdicts),
                 "suppressed": [s.property for s in one.suppressed]}
rows = sorted((r.devices, r.dma_mode, v.property, v.verdict) for r in found.results for v in r.verdicts)
assert rows == sorted(x for one in out.values() for x in one["rows"]), rows
report = json.loads(semcheck.render(found, "src/kernels", "json"))
print(json.dumps({"files": out, "report": report}))
"""


def _by_file(report: dict) -> dict[str, dict]:
    """A JSON report's rows and suppressed properties per kernel name."""
    out: dict[str, dict] = {}
    for row in report["results"]:
        one = out.setdefault(row["file"].split("/")[-1][:-3], {"rows": [], "suppressed": []})
        one["rows"].append([row["devices"], row["dma_mode"], row["property"], row["verdict"]])
    for x in report["suppressed"]:
        one = out.setdefault(x["file"].split("/")[-1][:-3], {"rows": [], "suppressed": []})
        one["suppressed"].append(x["property"])
    return {k: {"rows": sorted(v["rows"]), "suppressed": v["suppressed"]} for k, v in out.items()}


@pytest.mark.rule("REP-2", "REP-5", "REP-6", "REP-29")
def test_a_src_layout_project_agrees_everywhere(tmp_path):
    _src_project(tmp_path)
    cli = semcheck("verify", "--format", "json", "--no-cache", "--jobs", "2", cwd=tmp_path)
    assert cli.returncode == 1, cli.stderr
    by_cli = _by_file(cli.json())
    assert set(by_cli) == {"ring", "stuck"}  # wip_ring.py is excluded
    assert {v for *_, v in by_cli["ring"]["rows"]} == {"proved"}
    assert by_cli["ring"]["suppressed"] == ["race-free"] and by_cli["stuck"]["suppressed"] == []
    assert "race-free" not in {p for _, _, p, _ in by_cli["ring"]["rows"]}
    assert ["deadlock-free", "violated"] in [[p, v] for _, _, p, v in by_cli["stuck"]["rows"]]

    api = subprocess.run([sys.executable, "-c", CHECK], cwd=tmp_path, env=env(), capture_output=True, text=True,
                         timeout=600, stdin=subprocess.DEVNULL)
    assert api.returncode == 0, api.stderr
    by_api = json.loads(api.stdout)
    assert _by_file(by_api["report"]) == by_cli  # the report `semcheck.render` writes says what the CLI's does
    assert by_api["files"] == by_cli

    # the plugin, with no test module listing files: the configured paths' kernels are the tests, though
    # pytest itself looks only in tests/ (whose one test calls assert_verified)
    run = run_pytest(tmp_path, "--semcheck", "--semcheck-no-cache", "-n", "2", "-v")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "ModuleNotFoundError" not in run.stdout and "wip_ring" not in run.stdout
    # under xdist, -v reads `[gw0] [ 33%] PASSED src/kernels/ring.py::semcheck[ring.py-devices=2]`
    assert re.search(r"PASSED \S*src/kernels/ring\.py::semcheck\[ring\.py-devices=2\]", run.stdout), run.stdout
    assert re.search(r"FAILED \S*src/kernels/stuck\.py::semcheck\[stuck\.py-devices=2\]", run.stdout), run.stdout
    assert re.search(r"PASSED \S*tests/test_by_hand\.py::test_ring_by_assert_verified", run.stdout), run.stdout
    assert "1 failed, 2 passed" in run.stdout
    assert "deadlock-free violated" in run.stdout
    assert _by_file(json.loads((tmp_path / "assert_verified.json").read_text())) == {"ring": by_cli["ring"]}

    # -k selects among the configured kernels as among other tests
    only = run_pytest(tmp_path, "--semcheck", "--collect-only", "-q", "-k", "stuck")
    assert "src/kernels/stuck.py::semcheck[stuck.py-devices=2]" in only.stdout, only.stdout
    assert "ring.py" not in only.stdout and "1/3 tests collected (2 deselected)" in only.stdout, only.stdout
    # named paths keep pytest's meaning: only what lies under them
    named = run_pytest(tmp_path, "--semcheck", "--collect-only", "-q", "tests")
    assert "semcheck[" not in named.stdout and "1 test collected" in named.stdout, named.stdout
