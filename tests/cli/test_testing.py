"""`semcheck.testing.assert_verified` and the pytest plugin (`pytest --semcheck`)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from importlib import metadata

import pytest

from semcheck.testing import VerificationError, assert_verified

from ._support import BUGGY, CLEAN, EXAMPLES, env


def test_assert_verified_passes_a_clean_kernel_and_returns_the_report():
    report = assert_verified(CLEAN, devices=2, dma_mode="eager")
    from semcheck.checker.properties.registry import IDS

    assert report["summary"] == {"proved": len(IDS), "violated": 0, "unknown": 0}


def test_assert_verified_fails_with_the_text_report():
    with pytest.raises(AssertionError) as info:
        assert_verified(f"{BUGGY / 'missing_signal_deadlock.py'}::build", devices=[2], dma_mode="hardware",
                        properties=["deadlock-free", "id-disjoint"])
    err = info.value
    assert isinstance(err, VerificationError) and err.code == "violated"
    text = str(err)
    assert text.startswith("semcheck did not prove")
    assert "deadlock-free violated: build, 2 devices, hardware" in text
    assert "hint:" in text
    # Only the requested properties were checked.
    assert {r["property"] for r in err.report["results"]} == {"deadlock-free", "id-disjoint"}


def test_assert_verified_reports_a_kernel_that_cannot_be_verified(tmp_path):
    (tmp_path / "empty.py").write_text("x = 1\n")
    with pytest.raises(VerificationError) as info:
        assert_verified(tmp_path / "empty.py", devices=2, dma_mode="eager")
    assert info.value.code == "no-targets" and info.value.report is None


@pytest.mark.parametrize("kwargs, words", [
    ({"devices": 0}, "device count 0"),
    ({"devices": []}, "no device counts"),
    ({"dma_mode": "lazy"}, "dma_mode: 'lazy' is not one of"),
    ({"properties": ["no-such-property"]}, "no-such-property"),
    ({"timeout": -1}, "--timeout"),
])
def test_assert_verified_rejects_bad_arguments(kwargs, words):
    from semcheck import InputError

    with pytest.raises(InputError) as info:  # the caller's mistake, not the kernel's failure (REP-4)
        assert_verified(CLEAN, **kwargs)
    assert info.value.code == "usage" and words in info.value.message


def test_assert_verified_rejects_a_nested_function():
    @__import__("semcheck").target
    def local(num_devices):  # pragma: no cover - never called
        raise AssertionError

    with pytest.raises(TypeError, match="module-level"):
        assert_verified(local)


def _plugin_args() -> list[str]:
    """`-p semcheck.testing` unless the installed package already registers the plugin."""
    registered = any(ep.value.split(":")[0] == "semcheck.testing"
                     for ep in metadata.entry_points(group="pytest11"))
    return [] if registered else ["-p", "semcheck.testing"]


def run_pytest(directory, *args):
    cmd = [sys.executable, "-m", "pytest", *_plugin_args(), "-p", "no:cacheprovider", "--rootdir",
           str(directory), "-rN", *args]
    return subprocess.run(cmd, cwd=directory, env=env(), capture_output=True, text=True, timeout=600,
                          stdin=subprocess.DEVNULL)


def test_pytest_plugin_collects_targets_and_lists(tmp_path):
    (tmp_path / "test_kernels.py").write_text(textwrap.dedent(f"""
        import sys

        import semcheck

        sys.path.insert(0, {str(EXAMPLES)!r})

        # Checked by `pytest --semcheck`: the targets of these files (relative to this one).
        semcheck_targets = [{os.path.relpath(BUGGY / 'exit_leak_extra_signal.py', tmp_path)!r}]


        @semcheck.target(devices=[2, 4])
        def permute(num_devices):
            from ring_permute import build
            return build(num_devices)


        def test_ordinary():
            assert True
    """))
    plain = run_pytest(tmp_path)
    assert plain.returncode == 0, plain.stdout + plain.stderr
    assert "1 passed" in plain.stdout

    run = run_pytest(tmp_path, "--semcheck", "--semcheck-devices", "2", "--semcheck-dma-mode", "eager", "-v")
    out = run.stdout
    assert run.returncode == 1, out + run.stderr
    assert "test_kernels.py::permute[devices=2] PASSED" in out
    assert "exit_leak_extra_signal.py-devices=2] FAILED" in out
    assert "test_kernels.py::test_ordinary PASSED" in out
    assert "exit-balance violated: build, 2 devices, eager" in out
    assert "1 failed, 2 passed" in out
    only = run_pytest(tmp_path, "--semcheck", "--semcheck-devices", "2", "--semcheck-dma-mode", "hardware",
                      "-m", "semcheck", "--strict-markers", "-k", "permute")
    assert only.returncode == 0, only.stdout + only.stderr
    assert "1 passed, 2 deselected" in only.stdout
    # nothing written but semcheck's result cache, which `semcheck verify` shares
    assert sorted(tmp_path.iterdir()) == [tmp_path / ".semcheck_cache", tmp_path / "test_kernels.py"]
    again = run_pytest(tmp_path, "--semcheck", "--semcheck-devices", "2", "--semcheck-dma-mode", "eager", "-v")
    assert again.returncode == 1 and "1 failed, 2 passed" in again.stdout
    assert "(cached)" in again.stdout  # the failure's report says where its answer came from
    fresh = run_pytest(tmp_path, "--semcheck", "--semcheck-devices", "2", "--semcheck-dma-mode", "eager",
                       "--semcheck-no-cache", "-v")
    assert fresh.returncode == 1 and "(cached)" not in fresh.stdout


def test_pytest_plugin_reads_the_project_configuration(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.semcheck]\ndevices = [2]\ndma-mode = "eager"\n')
    (tmp_path / "test_kernels.py").write_text(textwrap.dedent(f"""
        import sys

        import semcheck

        sys.path.insert(0, {str(EXAMPLES)!r})

        semcheck_targets = [{os.path.relpath(EXAMPLES / 'ring_permute.py', tmp_path)!r}]  # a build file


        @semcheck.target
        def permute(num_devices):
            from ring_permute import build
            return build(num_devices)


        @semcheck.target(devices=[4])
        def declared(num_devices):
            from ring_permute import build
            return build(num_devices)
    """))
    run = run_pytest(tmp_path, "--semcheck", "--collect-only", "-q")
    assert run.returncode == 0, run.stdout + run.stderr
    # the project's devices for the bare target, its own for the other (as `semcheck verify`)
    assert "test_kernels.py::permute[devices=2]" in run.stdout
    assert "permute[devices=4]" not in run.stdout and "permute[devices=8]" not in run.stdout
    assert "test_kernels.py::declared[devices=4]" in run.stdout
    listed = [line for line in run.stdout.splitlines() if "ring_permute.py-devices=" in line]
    assert [line.rsplit("=", 1)[1] for line in listed] == ["2]"]  # a listed file's build: the project's too
    (tmp_path / "pyproject.toml").write_text('[tool.semcheck]\ndevices = [2]\ndma_modes = "eager"\n')
    bad = run_pytest(tmp_path, "--semcheck", "--collect-only", "-q")
    assert bad.returncode == 4, bad.stdout + bad.stderr  # pytest's usage error, once, before any item
    assert "[tool.semcheck] dma_modes: unknown setting" in bad.stderr and "Traceback" not in bad.stderr
    (tmp_path / "pyproject.toml").write_text('[tool.semcheck]\ndevices = [2]\ndma-mode = "eager"\n')
    ran = run_pytest(tmp_path, "--semcheck", "-k", "permute and not ring_permute", "-v")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "1 passed" in ran.stdout
