"""PRG-188: the checking processes of one command share XLA's compiles of PRG-169's runs through jax's persistent
compilation cache, in a private folder of the command's own that nothing outlives (a compiled executable runs
when loaded: a folder of the result cache could be planted); the verdicts are those of a run without it."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from semcheck.checker.frontend.compile_cache import ENV, private_directory, shared_compiles

from ._support import env, semcheck

REPO = Path(__file__).resolve().parents[2]
ARGS = ("verify", "examples/programs/ring_attention_planned.py", "--devices", "2", "--dma-mode", "eager",
        "--format", "json")


def _verdicts(run) -> dict:
    return {(r["target"], r["dma_mode"], r["property"]): r["verdict"] for r in run.json()["results"]}


def _compiles(folder: Path) -> dict[str, int]:
    """The plan kernel's compiled modules (jax names a jitted lambda's module `jit__lambda`) and when each was
    written."""
    return {p.name: p.stat().st_mtime_ns for p in folder.glob("jit__lambda-*")}


@pytest.mark.jax
@pytest.mark.rule("PRG-188", "PRG-169")
def test_a_command_s_compiles_go_to_a_private_folder_that_does_not_outlive_it(tmp_path):
    cache, tmp = tmp_path / "cache", tmp_path / "tmp"
    tmp.mkdir()
    run = {"cwd": REPO, "timeout": 900, "extra_env": {"SEMCHECK_CACHE_DIR": str(cache), "TMPDIR": str(tmp)}}
    fresh = semcheck(*ARGS, "--no-cache", **run)
    cached = semcheck(*ARGS, **run)
    assert fresh.returncode == cached.returncode == 0, cached.stderr[-2000:]
    assert not (cache / "xla").exists() and not list(tmp.glob("semcheck-xla-*"))
    assert _verdicts(fresh) == _verdicts(cached)
    assert set(_verdicts(cached).values()) == {"proved"}


@pytest.mark.rule("PRG-188")
def test_the_private_folder_is_this_user_s_alone_and_removed_on_leaving():
    with private_directory() as d:
        assert os.stat(d).st_mode & 0o777 == 0o700 and not os.listdir(d)
    assert not os.path.exists(d)


@pytest.mark.jax
@pytest.mark.rule("PRG-188")
def test_a_process_loads_what_another_process_of_the_command_compiled(tmp_path):
    """The mechanism the command relies on: a compile kept (`kept`) in one process is written to the folder `ENV`
    names, and a second process compiling the same module loads it instead of writing it again."""
    code = ("import jax, jax.numpy as jnp; from semcheck.checker.frontend.compile_cache import kept, "
            "use_shared_compiles; use_shared_compiles()\n"
            "with kept():\n    print(jax.jit(lambda x: jnp.cumsum(x * 3) - 1)(jnp.arange(7)).tolist())")
    clean = {k: v for k, v in env().items() if k not in (ENV, "JAX_COMPILATION_CACHE_DIR")}
    folder = tmp_path / "xla"

    def once() -> str:
        return subprocess.run([sys.executable, "-c", code], env={**clean, ENV: str(folder)}, capture_output=True,
                              text=True, timeout=300, check=True).stdout

    first = once()
    written = _compiles(folder)
    assert written, sorted(p.name for p in folder.iterdir()) if folder.exists() else "no folder"
    assert once() == first
    assert _compiles(folder) == written  # loaded, not compiled and written again


@pytest.mark.rule("PRG-188")
def test_the_command_line_names_the_cache_to_its_runs_only(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    with shared_compiles("somewhere"):
        assert os.environ[ENV] == "somewhere"
        with shared_compiles(None):
            assert ENV not in os.environ
        assert os.environ[ENV] == "somewhere"
    assert ENV not in os.environ


@pytest.mark.jax
@pytest.mark.rule("PRG-188")
def test_jax_s_own_cache_setting_is_kept(tmp_path):
    code = ("import jax; from semcheck.checker.frontend.compile_cache import use_shared_compiles; "
            "use_shared_compiles(); print(jax.config.jax_compilation_cache_dir)")
    clean = {k: v for k, v in env().items() if k not in (ENV, "JAX_COMPILATION_CACHE_DIR")}

    def setting(**extra: str) -> str:
        p = subprocess.run([sys.executable, "-c", code], env={**clean, **extra}, capture_output=True, text=True,
                           timeout=300, check=True)
        return p.stdout.strip()

    assert setting() == "None"
    assert setting(**{ENV: str(tmp_path / "ours")}) == str(tmp_path / "ours")
    assert setting(**{ENV: str(tmp_path / "ours"), "JAX_COMPILATION_CACHE_DIR": str(tmp_path / "theirs")}) == \
        str(tmp_path / "theirs")


def _dead_pid() -> int:
    """The id of a process that has ended (and been reaped)."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _started(tmp_path, **popen):
    """A command checking a small kernel, once its compile folder exists (TMPDIR is `tmp_path`)."""
    import time

    from ._support import SEMCHECK

    p = subprocess.Popen([*SEMCHECK, "verify", "examples/ring_permute.py", "--devices", "2", "--no-cache",
                          "--no-config"], cwd=REPO, env=env(TMPDIR=str(tmp_path)), stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True, **popen)
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob("semcheck-xla-*")) and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    return p


def _ended(p, timeout: float = 60) -> str:
    import signal

    try:
        return p.communicate(timeout=timeout)[1].decode()
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


@pytest.mark.rule("RUN-53")
@pytest.mark.parametrize("name", ["SIGTERM", "SIGHUP"])
def test_a_terminated_command_removes_its_compile_folder(tmp_path, name):
    """SIGTERM (as a test's timeout or a job scheduler sends it) or SIGHUP ends the command as its end does:
    the folder, named after the command's process, is gone and the exit code is the shell's for the signal."""
    import signal

    sig = getattr(signal, name)
    p = _started(tmp_path)
    folders = list(tmp_path.glob("semcheck-xla-*"))
    assert folders and folders[0].name.startswith(f"semcheck-xla-{p.pid}-"), p.poll()
    p.send_signal(sig)
    err = _ended(p)
    assert p.returncode == 128 + sig, err[-2000:]
    assert not list(tmp_path.glob("semcheck-xla-*"))


@pytest.mark.rule("RUN-53")
def test_a_hangup_the_command_was_started_to_ignore_stays_ignored(tmp_path):
    """`nohup semcheck ...`: the command keeps ignoring SIGHUP, finishes, and removes its folder as it ends."""
    import signal

    p = _started(tmp_path, preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    assert list(tmp_path.glob("semcheck-xla-*")), p.poll()
    p.send_signal(signal.SIGHUP)
    err = _ended(p, timeout=300)
    assert p.returncode == 0, err[-2000:]
    assert not list(tmp_path.glob("semcheck-xla-*"))


@pytest.mark.rule("RUN-53")
def test_a_new_command_removes_the_folders_of_dead_commands_only(tmp_path, monkeypatch):
    """A command killed outright (SIGKILL) leaves its folder; the next command removes it, and never the folder
    of a command that is still running, a link, a name of another form (one a user may give that merely looks
    alike included), or another user's folder."""
    from semcheck.checker.frontend.compile_cache import remove_abandoned

    dead, live = _dead_pid(), os.getpid()
    alike = [f"semcheck-xla-{dead}-notes", f"semcheck-xla-{dead}-abcd_123.bak", f"semcheck-xla-0{dead}-abcd_123",
             f"semcheck-xla-{dead}-ABCD_123"]  # names a user may give: not of the form a command makes
    for name in (f"semcheck-xla-{dead}-abcd_123", f"semcheck-xla-{dead}-b0000000", f"semcheck-xla-{live}-c0000000",
                 "semcheck-xla-d", f"semcheck-xla-x{dead}-e0000000", f"other-{dead}-f", *alike):
        (tmp_path / name).mkdir()
        (tmp_path / name / "entry").write_text("compiled")
    made = os.path.basename(tempfile.mkdtemp(prefix=f"semcheck-xla-{dead}-", dir=tmp_path))  # as a command makes it
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("")
    (tmp_path / f"semcheck-xla-{dead}-link0000").symlink_to(outside)
    (tmp_path / f"semcheck-xla-{dead}-file0000").write_text("")

    with monkeypatch.context() as m:  # every folder looks like another user's
        m.setattr(os, "getuid", lambda: os.stat(tmp_path).st_uid + 1)
        assert remove_abandoned(str(tmp_path)) == []
    removed = remove_abandoned(str(tmp_path))
    assert sorted(os.path.basename(p) for p in removed) == sorted([f"semcheck-xla-{dead}-abcd_123",
                                                                   f"semcheck-xla-{dead}-b0000000", made])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [f"semcheck-xla-{live}-c0000000", "semcheck-xla-d", f"semcheck-xla-x{dead}-e0000000", f"other-{dead}-f",
         "outside", f"semcheck-xla-{dead}-link0000", f"semcheck-xla-{dead}-file0000", *alike])
    assert (outside / "keep").exists()


@pytest.mark.rule("RUN-53")
def test_the_next_command_removes_what_a_killed_command_left(tmp_path):
    dead = _dead_pid()
    (tmp_path / f"semcheck-xla-{dead}-left0000").mkdir()
    run = semcheck("verify", "examples/ring_permute.py", "--devices", "2", "--no-cache", "--no-config",
                   "--dma-mode", "eager", cwd=REPO, extra_env={"TMPDIR": str(tmp_path)})
    assert run.returncode == 0, run.stderr[-2000:]
    assert not list(tmp_path.glob("semcheck-xla-*"))
