"""Every conformance vector (specs/conformance/vectors) against both implementations."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from ._support import REPO, load_runner

runner = load_runner()
VECTORS = runner.load_vectors()


def _generator():
    name = "semcheck_conformance_generate"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REPO / "specs" / "conformance" / "generate.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def test_there_are_vectors_for_every_buffer_and_semaphore_rule_family():
    rules = {r.split("-")[0] for _, v in VECTORS for r in v["rules"]}
    assert {"SEM", "DMA", "BUF", "RACE", "ERR", "random"} <= rules
    assert len(VECTORS) >= 50


@pytest.mark.parametrize("path,vector", VECTORS, ids=[p.stem for p, _ in VECTORS])
def test_the_model_conforms(path, vector):
    assert runner.run_vector(vector, "model") == []


@pytest.mark.jax
@pytest.mark.parametrize("path,vector", VECTORS, ids=[p.stem for p, _ in VECTORS])
def test_jax_conforms(path, vector):
    assert runner.run_vector(vector, "jax") == []


def test_the_vectors_are_what_the_model_generates_today():
    gen = _generator()
    wanted = {gen.filename(i, v): gen.render(v) for i, v in enumerate(gen.all_vectors())}
    have = {p.name: p.read_text() for p, _ in VECTORS}
    assert sorted(have) == sorted(wanted), "run specs/conformance/generate.py"
    stale = [name for name in wanted if have[name] != wanted[name]]
    assert not stale, f"stale vectors {stale}: run specs/conformance/generate.py"
