"""semcheck's processes end with the command, quietly: a ^C is the user's interrupt (exit 130), a
verifying process whose semcheck was killed -9 exits without a traceback, and nothing semcheck
started (the warm-start server, multiprocessing's resource tracker) is left in the command's
process group when it returns. (A kernel that raises KeyboardInterrupt itself is its own error:
tests/cli/test_errors.py.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ._support import CLEAN, EXAMPLES, SEMCHECK, env

pytestmark = pytest.mark.jax

# Writes its pid, then waits at import for a file to appear (or for ever).
WAITS = (
    "import os, sys, time\n"
    f"sys.path.insert(0, {str(EXAMPLES)!r})\n"
    "with open(os.environ['PID_FILE'], 'w') as f:\n"
    "    f.write(str(os.getpid()))\n"
    "while not os.path.exists(os.environ['GO_FILE']):\n"
    "    time.sleep(0.005)\n"
    "from ring_permute import build  # noqa: E402,F401\n"
)


def _start(tmp_path: Path, **extra: str) -> subprocess.Popen:
    (tmp_path / "waits.py").write_text(WAITS)
    extra.update(PID_FILE=str(tmp_path / "pid"), GO_FILE=str(tmp_path / "go"))
    return subprocess.Popen([*SEMCHECK, "verify", "waits.py", "--devices", "2", "--dma-mode", "eager", "--no-cache"],
                            cwd=tmp_path, env=env(**extra), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, preexec_fn=_as_a_terminal)


def _as_a_terminal() -> None:
    """SIGINT as a terminal's command has it: a shell starts a background job (`make test &`) with SIGINT
    ignored, which its children inherit, and a ^C to such a command interrupts nothing."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _child_pid(tmp_path: Path, proc: subprocess.Popen, limit: float = 240) -> int:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        text = (tmp_path / "pid").read_text() if (tmp_path / "pid").exists() else ""
        if text:
            return int(text)
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("the verifying process never imported the kernel file")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def _group(pgid: int) -> list[str]:
    """The live processes of a process group, by command line."""
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            found.append(cmd[:200])
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("cold", [False, True], ids=["warm", "cold"])
def test_nothing_semcheck_started_outlives_the_command(tmp_path, cold):
    """A harness that checks the command's process group as soon as it returns finds it empty."""
    extra = {"SEMCHECK_COLD_START": "1"} if cold else {}
    proc = subprocess.Popen([*SEMCHECK, "verify", str(CLEAN), "--devices", "2", "--dma-mode", "eager", "--no-cache"],
                            cwd=tmp_path, env=env(**extra), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    out, err = proc.communicate(timeout=300)
    left = _group(proc.pid)
    assert proc.returncode == 0, err
    assert left == [], left


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_ctrl_c_is_the_users_interrupt(tmp_path):
    """SIGINT to the command's process group, as a terminal's ^C: one line, exit 130, no traceback,
    and the verifying process (in a group of its own) is stopped too."""
    proc = _start(tmp_path)
    child = _child_pid(tmp_path, proc)
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == "semcheck: interrupted", err
    assert "Traceback" not in err
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("cold", [False, True], ids=["warm", "cold"])
def test_a_verifying_process_whose_semcheck_was_killed_exits_quietly(tmp_path, cold):
    """semcheck killed -9 while the kernel is being imported; the import then finishes and the verifying
    process finds nobody to answer: it exits, and says nothing on the stderr it shares with the
    terminal (it printed two chained BrokenPipeError tracebacks)."""
    proc = _start(tmp_path, **({"SEMCHECK_COLD_START": "1"} if cold else {}))
    child = _child_pid(tmp_path, proc)
    proc.kill()
    proc.wait()
    (tmp_path / "go").write_text("")  # the import finishes at once: its next message has no reader
    _, err = proc.communicate(timeout=120)  # read to the end: every holder of the stderr pipe is gone
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)
