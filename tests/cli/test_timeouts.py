"""Timeouts are unknown (exit 3), never proved, and the stuck process is killed."""

from __future__ import annotations

import time

import pytest

from semcheck.checker.properties.registry import IDS

from ._support import alive, semcheck, write_kernels


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    return write_kernels(tmp_path_factory.mktemp("kernels"))


def test_build_that_sleeps_times_out_as_unknown(kernels):
    path = kernels["sleeps_in_build.py"]
    run = semcheck("verify", path, "--devices", "2", "--dma-mode", "eager", "--timeout", "0.5",
                   "--format", "json", cwd=path.parent)
    assert run.returncode == 3, run.stderr
    assert len(run.stderr_lines) == 1, run.stderr
    line = run.stderr_lines[0]
    assert line.startswith("semcheck: timeout: ") and "--timeout 0.5s" in line and "sleeps_in_build.py" in line
    assert "Traceback" not in run.stderr
    report = run.json()
    assert report["summary"] == {"proved": 0, "violated": 0, "unknown": len(IDS)}
    assert {r["target"] for r in report["results"]} == {"build"}
    assert all(r["verdict"] == "unknown" and r["reason"].startswith("timeout") for r in report["results"])
    # Start-up (importing jax) is not the kernel's time, but the sleeping build is cut short.
    assert run.seconds < 120


def test_a_sweep_keeps_what_finished_before_a_timeout(kernels):
    """Device count 2 is proved; 4 sleeps in build and is unknown: exit 3, both in the report."""
    path = kernels["sleeps_in_build.py"]
    run = semcheck("verify", path, "--devices", "2,4", "--dma-mode", "hardware", "--timeout", "10",
                   "--jobs", "2", "--format", "json", cwd=path.parent, extra_env={"SLEEP_AT": "4"})
    assert run.returncode == 3, run.stderr
    assert len(run.stderr_lines) == 1 and "at 4 devices" in run.stderr_lines[0]
    by_devices = {}
    for r in run.json()["results"]:
        by_devices.setdefault(r["devices"], set()).add(r["verdict"])
    assert by_devices == {2: {"proved"}, 4: {"unknown"}}


def test_kernel_hanging_at_import_is_killed_after_the_timeout(kernels, tmp_path):
    pid_file = tmp_path / "pid"
    path = kernels["hangs_at_import.py"]
    t0 = time.monotonic()
    run = semcheck("verify", path, "--devices", "2", "--timeout", "1", cwd=path.parent,
                   extra_env={"PID_FILE": str(pid_file)}, timeout=200)
    assert run.returncode == 3, run.stderr
    assert run.stderr_lines[0].startswith("semcheck: timeout: ")
    assert f"0 proved, 0 violated, {3 * len(IDS)} unknown" in run.stdout
    # The kernel sleeps 600 s: semcheck returned long before, and its process is gone.
    assert time.monotonic() - t0 < 150
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(pid), f"the kernel's process {pid} survived the timeout"


def test_every_device_count_with_a_timeout_says_so_on_stderr():
    from ._support import EXAMPLES

    # a warm child decides the ring at 2 or 4 devices inside 0.05 s and its grace (child.py: at least 0.5 s):
    # at 512 and 1,024 devices it takes seconds
    run = semcheck("verify", EXAMPLES / "ring_allreduce.py", "--devices", "512,1024", "--timeout", "0.05",
                   "--no-cache", "--format", "json", cwd=EXAMPLES.parent)
    assert run.returncode == 3, run.stderr
    timed_out = {row["devices"] for row in run.json()["results"] if row.get("reason", "").startswith("timeout")}
    assert timed_out == {512, 1024}
    for n in timed_out:  # the child was stopped, or it answered with checks it ran out of time in
        assert any(line.startswith("semcheck: timeout: ring_allreduce.py at " + f"{n} devices")
                   for line in run.stderr_lines), run.stderr


def test_an_import_that_hangs_is_waited_for_once_not_once_per_device_count(kernels, tmp_path):
    path = kernels["hangs_at_import.py"]
    run = semcheck("verify", path, "--devices", "2,4,8", "--timeout", "2", "--format", "json", cwd=path.parent,
                   extra_env={"PID_FILE": str(tmp_path / "pid")}, timeout=200)
    assert run.returncode == 3, run.stderr
    rows = run.json()["results"]
    assert {row["devices"] for row in rows} == {2, 4, 8} and all(row["verdict"] == "unknown" for row in rows)
    assert {row["reason"] for row in rows if row["devices"] > 2} == {
        "timeout: importing the kernel file did not finish within --timeout 2s at 2 devices; not tried again"}
    # one line says it for the file; the progress lines (off a terminal) say what came of each device count
    assert [line for line in run.stderr_lines if line.startswith("semcheck: timeout: ")] == [
        "semcheck: timeout: hangs_at_import.py: importing the kernel file did not finish within --timeout 2s; the "
        "process was stopped, and nothing else of the file is tried (its import would hang again)"]
    assert run.progress == [
        "semcheck: [1/3] hangs_at_import.py: 2 devices: not verified, the kernel file's import did not finish within "
        "--timeout 2s",
        "semcheck: [2/3] hangs_at_import.py: 4 devices: not tried, the kernel file's import did not finish before",
        "semcheck: [3/3] hangs_at_import.py: 8 devices: not tried, the kernel file's import did not finish before"]
