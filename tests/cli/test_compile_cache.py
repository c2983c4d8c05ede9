"""PRG-188: the checking processes share XLA's compiles of PRG-169's runs through jax's persistent compilation
cache, in a folder of the result cache; a later run loads them, and its verdicts are those of a fresh run."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from semcheck.checker.frontend.compile_cache import ENV, shared_compiles

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
def test_a_later_run_loads_the_plan_kernel_s_compiles(tmp_path):
    cache = tmp_path / "cache"
    run = {"cwd": REPO, "timeout": 900, "extra_env": {"SEMCHECK_CACHE_DIR": str(cache)}}
    fresh = semcheck(*ARGS, "--no-cache", **run)
    assert fresh.returncode == 0, fresh.stderr[-2000:]
    assert not cache.exists()  # --no-cache: no compile cache either

    first = semcheck(*ARGS, **run)
    folder = cache / "xla"
    written = _compiles(folder)
    # the eager runs with NaN and with zero fill are two modules; the on_wait run is the NaN run's module
    assert len(written) == 2, sorted(p.name for p in folder.iterdir())
    for entry in cache.iterdir():  # forget the answers, keep the compiles
        if len(entry.name) == 2:
            shutil.rmtree(entry)
    second = semcheck(*ARGS, **run)
    assert not any(r.get("cached") for r in second.json()["results"])
    assert _compiles(folder) == written  # loaded, not compiled and written again
    assert _verdicts(fresh) == _verdicts(first) == _verdicts(second)
    assert set(_verdicts(second).values()) == {"proved"}


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
