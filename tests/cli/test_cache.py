"""The result cache: a re-run on unchanged kernel files answers from .semcheck_cache/, and any
change to the kernel, a module it imports from its directory, or the options verifies afresh."""

from __future__ import annotations

import shutil

import pytest

from ._support import CLEAN, semcheck, without_timings

ARGS = ("verify", "kernels", "--devices", "2,4", "--format", "json")


def entries(root) -> set[str]:
    return {p.name for p in (root / ".semcheck_cache").rglob("*.pickle")}


def test_the_key_covers_the_kernel_and_its_neighbours(tmp_path):
    from semcheck._cache import local_imports

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "inner.py").write_text("")
    (tmp_path / "helper.py").write_text("import deeper\n")
    (tmp_path / "deeper.py").write_text("")
    (tmp_path / "unrelated.py").write_text("")
    (tmp_path / "k.py").write_text("import os\nimport helper\nfrom pkg import inner\n")
    assert [p.rsplit("/", 1)[-1] for p in local_imports(str(tmp_path / "k.py"))] == [
        "deeper.py", "helper.py", "k.py", "__init__.py", "inner.py"]


@pytest.mark.jax
def test_a_second_run_answers_from_the_cache_and_a_change_invalidates_it(tmp_path):
    (tmp_path / "kernels").mkdir()
    kernel = tmp_path / "kernels" / "ring.py"
    shutil.copy(CLEAN, kernel)
    kernel.write_text(kernel.read_text() + "\nimport helper  # noqa: E402,F401\n")
    (tmp_path / "kernels" / "helper.py").write_text("ANSWER = 42\n")

    first = semcheck(*ARGS, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert len(entries(tmp_path)) == 2  # one per device count
    assert (tmp_path / ".semcheck_cache" / ".gitignore").read_text().strip().endswith("*")
    second = semcheck(*ARGS, cwd=tmp_path)
    assert second.returncode == 0 and second.stderr == ""
    assert without_timings(second.json()) == without_timings(first.json())
    assert second.stdout == first.stdout  # timings too: the same answer
    assert first.seconds >= 5 * second.seconds, (first.seconds, second.seconds)

    # other options are another entry
    other = semcheck(*ARGS, "--dma-mode", "hardware", cwd=tmp_path)
    assert other.returncode == 0 and len(entries(tmp_path)) == 4

    # the kernel changes: verified afresh
    kernel.write_text(kernel.read_text() + "# a comment changes the file\n")
    edited = semcheck(*ARGS, cwd=tmp_path)
    assert edited.returncode == 0 and len(entries(tmp_path)) == 6
    # a module it imports from its directory changes: verified afresh
    (tmp_path / "kernels" / "helper.py").write_text("ANSWER = 43\n")
    semcheck(*ARGS, cwd=tmp_path)
    assert len(entries(tmp_path)) == 8


def test_no_cache_neither_reads_nor_writes(tmp_path):
    (tmp_path / "kernels").mkdir()
    shutil.copy(CLEAN, tmp_path / "kernels" / "ring.py")
    run = semcheck(*ARGS[:3], "2", "--dma-mode", "eager", "--no-cache", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert not (tmp_path / ".semcheck_cache").exists()
