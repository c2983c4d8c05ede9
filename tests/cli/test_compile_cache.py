"""PRG-188: the checking processes of one command share XLA's compiles of PRG-169's runs through jax's persistent
compilation cache, in a private folder of the command's own that nothing outlives (a compiled executable runs
when loaded: a folder of the result cache could be planted); the verdicts are those of a run without it."""

from __future__ import annotations

import os
import subprocess
import sys
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
