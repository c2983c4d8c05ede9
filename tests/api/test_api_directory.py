"""`semcheck.check(DIR)` finds the kernel files `semcheck verify DIR` finds (REP-29); what makes a
directory bad input is bad input to both, with the same code. No kernel is traced here: the files
either define none or do not parse, so each case answers before any child process starts."""

from __future__ import annotations

import pytest

import semcheck
from cli._support import semcheck as cli


def _tree(root) -> None:
    (root / "kernels").mkdir()
    (root / "kernels" / "helper.py").write_text("def step():\n    return 1\n")
    (root / "kernels" / "notes.txt").write_text("def build(\n")


@pytest.mark.rule("REP-29")
def test_a_directory_without_kernels_is_the_same_input_error_to_both(tmp_path, monkeypatch):
    _tree(tmp_path)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(semcheck.InputError) as e:
        semcheck.check("kernels")
    assert e.value.code == "no-kernels" and "kernels" in e.value.message
    run = cli("verify", "kernels", cwd=tmp_path)
    assert run.returncode == 2 and "no-kernels: nothing in kernels defines" in run.stderr, run.stderr


@pytest.mark.rule("REP-29")
def test_a_directory_whose_every_kernel_is_bad_raises_the_first_files_error(tmp_path, monkeypatch):
    _tree(tmp_path)
    (tmp_path / "kernels" / "a_broken.py").write_text("def build(num_devices):\n    return (\n")
    (tmp_path / "kernels" / "sub").mkdir()
    (tmp_path / "kernels" / "sub" / "b_broken.py").write_text("def build(num_devices):\n    return ]\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(semcheck.InputError) as e:
        semcheck.check("kernels")
    assert e.value.code == "syntax-error" and "a_broken.py" in e.value.message, e.value.message
    run = cli("verify", "kernels", "--format", "json", cwd=tmp_path)
    assert run.returncode == 2
    # the CLI names both files; the API raises the first of the same discovery
    assert [x["file"] for x in run.json()["errors"]] == ["kernels/a_broken.py", "kernels/sub/b_broken.py"]


def test_a_target_of_a_directory_is_a_usage_error(tmp_path, monkeypatch):
    _tree(tmp_path)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(semcheck.InputError) as e:
        semcheck.check("kernels::ring")
    assert e.value.code == "usage" and "not of a directory" in e.value.message
