"""Integrations: the pre-commit hook, the pytest plugin under pytest-xdist, the CI recipe."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import textwrap
from pathlib import Path

import pytest

from ._support import BUGGY, CLEAN, EXAMPLES, REPO, semcheck
from .test_testing import run_pytest


def hook(hook_id: str = "semcheck") -> dict[str, str]:
    """Hook `hook_id` of .pre-commit-hooks.yaml (flat `key: value` lines; YAML's own parser when installed)."""
    text = (REPO / ".pre-commit-hooks.yaml").read_text()
    try:
        import yaml
    except ImportError:
        items: list[dict[str, str]] = []
        for line in text.splitlines():
            if line.startswith("- "):
                items.append({})
                line = "  " + line[2:]
            if line.startswith("  ") and ":" in line and items:
                key, _, value = line.strip().partition(":")
                items[-1][key] = value.split(" #")[0].strip()
        return next(i for i in items if i["id"] == hook_id)
    item = next(i for i in yaml.safe_load(text) if i["id"] == hook_id)
    return {k: str(v) for k, v in item.items()}


@pytest.mark.rule("REP-36")
def test_the_pre_commit_hook_verifies_changed_kernels_and_skips_other_files(tmp_path):
    h = hook()
    assert h["id"] == "semcheck" and h["language"] == "python"
    assert "python" in h["types"] and h.get("pass_filenames", "true").lower() != "false"
    entry = shlex.split(h["entry"])
    assert entry[:2] == ["semcheck", "verify"] and "--only-kernels" in entry
    shutil.copy(CLEAN, tmp_path / "ring.py")
    shutil.copy(BUGGY / "exit_leak_extra_signal.py", tmp_path / "leak.py")
    (tmp_path / "helper.py").write_text("def helper(x):\n    return x\n")
    (tmp_path / "pyproject.toml").write_text('[tool.semcheck]\ndevices = [2]\ndma-mode = "eager"\n')
    # what pre-commit runs: the entry, then the changed files
    only_helpers = semcheck(*entry[1:], "helper.py", cwd=tmp_path)
    assert only_helpers.returncode == 0, only_helpers.stderr
    clean = semcheck(*entry[1:], "helper.py", "ring.py", cwd=tmp_path)
    assert clean.returncode == 0, clean.stderr
    assert clean.stdout.strip().splitlines()[-1].endswith("0 violated, 0 unknown"), clean.stdout
    buggy = semcheck(*entry[1:], "helper.py", "ring.py", "leak.py", cwd=tmp_path)
    assert buggy.returncode == 1
    # one line per finding, on the kernel's line: path:line:col: property: ..., then the summary; no progress
    *found, summary = buggy.stdout.strip().splitlines()
    assert found and all(re.match(r"leak\.py:\d+:\d+: [\w-]+: violated", x) for x in found), buggy.stdout
    assert summary.endswith("violated, 0 unknown") and buggy.stderr == "", buggy.stdout + buggy.stderr


@pytest.mark.rule("REP-36")
def test_the_paths_hook_reverifies_the_kernels_a_changed_helper_affects(tmp_path):
    h = hook("semcheck-paths")
    assert h.get("pass_filenames", "true").lower() == "false"
    entry = shlex.split(h["entry"])
    assert entry[:2] == ["semcheck", "verify"]
    (tmp_path / "kernels").mkdir()
    src = CLEAN.read_text()
    # the kernel takes its neighbour from a helper module: changing the helper changes the verdict
    assert "right = jax.lax.rem(me + 1, num_devices)" in src, "the clean ring's neighbour line moved"
    (tmp_path / "kernels" / "ring.py").write_text(
        src.replace("right = jax.lax.rem(me + 1, num_devices)",
                    "from helper import step\n    right = jax.lax.rem(me + step(), num_devices)"))
    (tmp_path / "kernels" / "helper.py").write_text("def step():\n    return 1\n")
    (tmp_path / "pyproject.toml").write_text('[tool.semcheck]\npaths = ["kernels"]\ndevices = [4]\n'
                                             'dma-mode = "eager"\npythonpath = ["kernels"]\n')
    first = semcheck(*entry[1:], cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    # nothing found: the summary line alone (no progress lines on stderr)
    assert (first.stdout.strip().splitlines(), first.stderr) == (["8 proved, 0 violated, 0 unknown"], ""), first
    again = semcheck("verify", "--format", "text", cwd=tmp_path)  # the text report marks cached rows
    assert again.returncode == 0 and "(cached)" in again.stdout, again.stdout
    (tmp_path / "kernels" / "helper.py").write_text("def step():\n    return 2\n")  # a ring of stride 2
    changed = semcheck("verify", "--format", "text", cwd=tmp_path)
    assert "(cached)" not in changed.stdout, changed.stdout  # the kernel importing the helper is verified afresh


@pytest.mark.jax
def test_pytest_plugin_under_xdist(tmp_path):
    pytest.importorskip("xdist")
    (tmp_path / "test_kernels.py").write_text(textwrap.dedent(f"""
        import sys

        import semcheck

        sys.path.insert(0, {str(EXAMPLES)!r})

        semcheck_targets = [{os.path.relpath(BUGGY / 'exit_leak_extra_signal.py', tmp_path)!r}]


        @semcheck.target(devices=[2, 4])
        def permute(num_devices):
            from ring_permute import build
            return build(num_devices)


        def test_ordinary():
            assert True
    """))
    run = run_pytest(tmp_path, "--semcheck", "--semcheck-dma-mode", "eager", "--semcheck-devices", "2,4",
                     "-n", "2", "-p", "xdist")
    out = run.stdout
    assert "2 workers" in out or "created: 2/2 workers" in out, out + run.stderr
    # permute at 2 and 4, the leak at 2 and 4, and the ordinary test
    assert re.search(r"2 failed, 3 passed", out), out + run.stderr
    assert "exit-balance violated" in out
    assert run.returncode == 1


def test_the_ci_recipe_uploads_sarif_and_writes_the_step_summary():
    text = (REPO / "specs" / "deciding" / "report.md").read_text()
    recipe = text[text.index("GitHub Actions, with"):]
    assert "github/codeql-action/upload-sarif" in recipe
    assert "--format markdown" in recipe and "$GITHUB_STEP_SUMMARY" in recipe
    assert "--format sarif" in recipe
    assert Path(REPO / ".pre-commit-hooks.yaml").is_file()
