"""Children started warm (forked from a server that imported jax once) answer as cold ones do.

`checker/run/warm_start.py`: a warm child must see the device count it asked for and the
environment its parent has, and must not outlive semcheck."""

from __future__ import annotations

import os
import signal
import subprocess
import time

from ._support import EXAMPLES, SEMCHECK, env, semcheck, semcheck_many, without_timings


def test_a_warm_sweep_answers_as_a_cold_one():
    args = ("verify", EXAMPLES / "ring_allreduce.py", "--devices", "2,4", "--dma-mode", "all", "--no-cache",
            "--format", "json")
    warm, cold = semcheck_many([(args, {}), (args, {"extra_env": {"SEMCHECK_COLD_START": "1"}})])
    assert warm.returncode == cold.returncode == 0, (warm.stderr, cold.stderr)
    warm_rows, cold_rows = without_timings(warm.json())["results"], without_timings(cold.json())["results"]
    assert {r["devices"] for r in warm_rows} == {2, 4}
    assert warm_rows == cold_rows


def test_a_warm_child_sees_the_parents_environment_and_device_count(tmp_path):
    (tmp_path / "k.py").write_text(
        (EXAMPLES / "ring_permute.py").read_text() + "\n"
        "import os as _os\n"
        "if _os.environ.get('PROBE') != 'yes':\n"
        "    raise RuntimeError(f\"saw PROBE={_os.environ.get('PROBE')!r}\")\n"
        "_build = build\n\n\n"
        "def build(num_devices, **kw):\n"
        "    if jax.device_count() != num_devices:\n"
        "        raise RuntimeError(f'{jax.device_count()} devices, {num_devices} asked for')\n"
        "    return _build(num_devices, **kw)\n")
    run = semcheck("verify", "k.py", "--devices", "2,4", "--no-cache", cwd=tmp_path, extra_env={"PROBE": "yes"})
    assert run.returncode == 0, run.stderr
    missing = semcheck("verify", "k.py", "--devices", "2", "--no-cache", cwd=tmp_path)
    assert missing.returncode == 2 and "saw PROBE=None" in missing.stderr


def test_a_child_does_not_outlive_semcheck_killed_hard(tmp_path):
    pid_file = tmp_path / "child.pid"
    (tmp_path / "k.py").write_text(
        "import os, time\n"
        f"open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
        "time.sleep(120)\n")
    cli = subprocess.Popen([*SEMCHECK, "verify", "k.py", "--devices", "2", "--no-cache"], cwd=tmp_path,
                           env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not pid_file.exists() or not pid_file.read_text():
            assert time.monotonic() < deadline and cli.poll() is None, "the child never imported the kernel"
            time.sleep(0.2)
        child = int(pid_file.read_text())
        os.kill(cli.pid, signal.SIGKILL)
        cli.wait()
        deadline = time.monotonic() + 15
        while _alive(child):
            assert time.monotonic() < deadline, "the verifying child outlived semcheck"
            time.sleep(0.2)
    finally:
        if cli.poll() is None:
            cli.kill()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"  # a zombie has exited
    except FileNotFoundError:
        return False


def test_the_servers_imports_start_no_backend_and_read_no_device_count():
    # a child provisions its own device count after the fork: the server's imports must not start a jax
    # backend (the count is fixed when one starts) nor change the environment past what importing jax
    # sets (TF_CPP_MIN_LOG_LEVEL, TPU_SKIP_MDS_QUERY: a cold child imports jax too)
    import sys

    code = ("import importlib, os, sys\n"
            "import jax\n"
            "from semcheck.checker.run.warm_start import PRELOAD\n"
            "before = dict(os.environ)\n"
            "for m in PRELOAD: importlib.import_module(m)\n"
            "from jax._src import xla_bridge\n"
            "assert not xla_bridge.backends_are_initialized()\n"
            "assert dict(os.environ) == before\n"
            "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env(), timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
