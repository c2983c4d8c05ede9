"""One settings loader for the CLI, `semcheck.check`, `assert_verified` and the pytest plugin
(specs/deciding/report.md REP-2), and settings that cannot be read (REP-3)."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

from ._support import BUGGY, EXAMPLES, env, semcheck
from .test_testing import run_pytest


def _main(cwd, *args: str) -> tuple[int, list[str]]:
    """`semcheck verify ARGS` in this process (these stop before any checking process): exit code
    and stderr's lines."""
    from semcheck.checker.run.cli import main

    err = io.StringIO()
    with contextlib.chdir(cwd), contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["verify", *args])
    return code, err.getvalue().splitlines()


@pytest.mark.rule("REP-3")
@pytest.mark.parametrize("table, flags, says", [
    (b'[tool.semcheck]\ndevices = [2]\n# caf\xe9 in latin-1\n', (), "not UTF-8"),
    (b'[tool.semcheck]\ndevices = "2,,4"\n', (), "empty entry"),
    (b'[tool.semcheck]\nexclude = "["\n', (), "not a valid glob"),
    (b'[tool.semcheck]\nexclude = ["ok", "a[b"]\n', (), "not a valid glob"),
    (None, ("--devices", "2,,4"), "empty entry"),
    (None, ("--exclude", "x["), "not a valid glob"),
])
def test_bad_settings_are_one_line_and_exit_code_2(tmp_path, table, flags, says):
    (tmp_path / "k.py").write_text("def build(n):\n    return None\n")
    if table is not None:
        (tmp_path / "pyproject.toml").write_bytes(table)
    code, err = _main(tmp_path, "k.py", *flags)
    assert code == 2
    assert len(err) == 1 and err[0].startswith("semcheck: usage error: ") and says in err[0], err
    if table is not None:  # the API and the plugin read the table with the same loader: the same error
        from semcheck.checker.run.config import load_settings
        from semcheck.checker.run.exit_codes import UsageError

        with pytest.raises(UsageError, match=says):
            load_settings(str(tmp_path))


def _src_project(root) -> None:
    """A `src/`-layout project: the kernels under src/kernels import their builders from a package
    under src/ that only `[tool.semcheck] pythonpath` puts on the import path."""
    pkg = root / "src" / "ringlib"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    shutil.copy(EXAMPLES / "ring_permute.py", pkg / "clean.py")
    shutil.copy(BUGGY / "missing_signal_deadlock.py", pkg / "deadlock.py")
    kernels = root / "src" / "kernels"
    kernels.mkdir()
    (kernels / "ring.py").write_text("from ringlib.clean import build  # noqa: F401\n")
    (kernels / "stuck.py").write_text("from ringlib.deadlock import build  # noqa: F401\n")
    (root / "pyproject.toml").write_text(textwrap.dedent("""
        [tool.semcheck]
        paths = ["src/kernels"]
        pythonpath = ["src"]
        devices = [2]
        dma-mode = "hardware"
    """))


CHECK = """
import json, sys
import semcheck
out = {}
for name in ("ring", "stuck"):
    found = semcheck.check(f"src/kernels/{name}.py", cache=False)
    out[name] = sorted((r.devices, r.dma_mode, v.property, v.verdict) for r in found.results for v in r.verdicts)
print(json.dumps(out))
"""


@pytest.mark.rule("REP-2")
def test_a_src_layout_project_has_the_same_verdicts_everywhere(tmp_path):
    _src_project(tmp_path)
    cli = semcheck("verify", "--format", "json", "--no-cache", cwd=tmp_path)
    assert cli.returncode == 1, cli.stderr
    by_cli: dict[str, list] = {}
    for row in cli.json()["results"]:
        name = row["file"].split("/")[-1][:-3]
        by_cli.setdefault(name, []).append((row["devices"], row["dma_mode"], row["property"], row["verdict"]))
    assert {v for _, _, _, v in by_cli["ring"]} == {"proved"}
    assert ("deadlock-free", "violated") in {(p, v) for _, _, p, v in by_cli["stuck"]}

    api = subprocess.run([sys.executable, "-c", CHECK], cwd=tmp_path, env=env(), capture_output=True, text=True,
                         timeout=600, stdin=subprocess.DEVNULL)
    assert api.returncode == 0, api.stderr
    assert {k: [tuple(x) for x in v] for k, v in json.loads(api.stdout).items()} == \
        {k: sorted(v) for k, v in by_cli.items()}

    # the plugin, with no test module: the configured paths' kernels are the tests
    run = run_pytest(tmp_path, "--semcheck", "--semcheck-no-cache", "-n", "2", "-v")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "ModuleNotFoundError" not in run.stdout
    # under xdist, -v reads `[gw0] [ 50%] PASSED src/kernels/ring.py::semcheck[ring.py-devices=2]`
    assert re.search(r"PASSED \S*src/kernels/ring\.py::semcheck\[ring\.py-devices=2\]", run.stdout), run.stdout
    assert re.search(r"FAILED \S*src/kernels/stuck\.py::semcheck\[stuck\.py-devices=2\]", run.stdout), run.stdout
    assert "1 failed, 1 passed" in run.stdout
