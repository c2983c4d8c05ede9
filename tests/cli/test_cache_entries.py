"""A result-cache entry answers only for its own request: it is JSON read field by field (no pickle,
so reading one runs no code), it carries its request's key and the kernel file's digest, and an
entry copied elsewhere, edited or cut short is a miss, removed, and replaced. No jax here: the
answers are made by hand (tests/cli/test_cache.py has the same through the CLI)."""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from semcheck._cache import FORMAT, ResultCache, _read, _write, request_key
from semcheck._cache_entry import BadEntry
from semcheck._dependencies import Dependencies, file_digest
from semcheck.checker.properties.registry import IDS
from semcheck.checker.run.request import Findings, Note, Request, Result
from semcheck.checker.properties.verdict import GeneratedInput, Verdict, Witness
from semcheck.model.ops import Loc

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.lists(inner, max_size=3).map(tuple)
                      | st.dictionaries(st.text(max_size=4) | st.integers(), inner, max_size=3), max_leaves=12)
locs = st.builds(Loc, st.text(max_size=10), st.integers(0, 500), st.text(max_size=10))
schedules = st.lists(st.tuples(st.sampled_from(["core", "dma_read"]), st.integers(0, 9)), max_size=4).map(tuple)
blocked = st.lists(st.tuples(st.integers(0, 9), st.integers(0, 9), st.text(max_size=5)), max_size=2).map(tuple)
witnesses = st.builds(Witness, st.text(max_size=20), schedules, blocked,
                      st.lists(locs, max_size=2).map(tuple), st.dictionaries(st.text(max_size=5), values, max_size=3),
                      st.text(max_size=10))
inputs = st.none() | st.builds(GeneratedInput, values, st.text(max_size=5), st.integers(0, 9), st.integers(1, 9))


@st.composite
def verdicts(draw):
    kind = draw(st.sampled_from(["proved", "violated", "unknown"]))
    reason = draw(st.text(min_size=1, max_size=10)) if kind == "unknown" else ""
    return Verdict(draw(st.sampled_from(IDS)), kind, reason,
                   draw(witnesses) if kind == "violated" else None,
                   draw(st.dictionaries(st.text(max_size=5), values, max_size=3)), draw(inputs))


results = st.builds(Result, st.text(max_size=8), st.integers(1, 64), st.sampled_from(["eager", "on_wait", "hardware"]),
                    st.lists(verdicts(), max_size=3), st.dictionaries(st.text(max_size=5), values, max_size=2),
                    st.dictionaries(st.text(max_size=5), st.floats(0, 10), max_size=2))
notes = st.builds(Note, st.sampled_from(["timeout", "unsupported"]), st.text(max_size=10), st.integers(1, 9),
                  st.none() | locs)
pairs = st.lists(st.tuples(st.text(max_size=6), st.text(max_size=6)), max_size=3).map(tuple)
env_pairs = st.lists(st.tuples(st.text(max_size=6), st.none() | st.text(max_size=6)), max_size=3).map(tuple)
dependencies = st.builds(Dependencies, pairs, pairs, pairs, pairs, env_pairs)
findings = st.builds(lambda rs, ns, d: Findings(rs, ns, d), st.lists(results, max_size=3), st.lists(notes, max_size=2),
                     dependencies)

KEY, KERNEL = "k" * 64, ("/project/kernel.py", "d" * 64)


def _same(a: Findings, b: Findings) -> bool:
    return (a.results, a.notes, a.claims, a.dependencies) == (b.results, b.notes, b.claims, b.dependencies)


@settings(max_examples=40, deadline=None)
@given(findings)
def test_an_answer_reads_back_equal(f):
    deps, back = _read(_write(f.dependencies, f, KEY, KERNEL).encode(), KEY, KERNEL)
    assert deps == f.dependencies and _same(back, f)


@settings(max_examples=40, deadline=None)
@given(findings, st.data())
def test_an_edited_entry_never_reads_back_as_another_answer(f, data):
    """Any one character changed: the entry is a miss, or (whitespace, an equal number) the same answer."""
    text = _write(f.dependencies, f, KEY, KERNEL)
    i = data.draw(st.integers(0, len(text) - 1))
    c = data.draw(st.sampled_from('0123456789"{}[],:. aefnlrtu\\'))
    edited = text[:i] + c + text[i + 1:]
    try:
        _, back = _read(edited.encode(), KEY, KERNEL)
    except BadEntry:
        return
    assert _same(back, f)


@pytest.mark.parametrize("cut", [0, 1, 10, -2])
def test_a_cut_short_entry_is_a_miss(cut):
    f = Findings([Result("build", 2, "eager", [Verdict("exit-balance", "proved")])], [], Dependencies())
    text = _write(f.dependencies, f, KEY, KERNEL)
    with pytest.raises(BadEntry):
        _read(text[:cut].encode(), KEY, KERNEL)


def test_an_entry_with_the_digest_recomputed_still_names_its_own_request():
    """Rewriting the body and its digest does not make an entry another request's: key and kernel are checked."""
    f = Findings([Result("build", 2, "eager", [Verdict("exit-balance", "proved")])], [], Dependencies())
    text = _write(f.dependencies, f, KEY, KERNEL)
    with pytest.raises(BadEntry, match="another request"):
        _read(text.encode(), "x" * 64, KERNEL)
    with pytest.raises(BadEntry, match="another kernel"):
        _read(text.encode(), KEY, (KERNEL[0], "e" * 64))


# --- through ResultCache, with a real kernel file ---------------------------------------------------


def _request(path: Path) -> Request:
    return Request(str(path), None, None, 2, None, ("eager",), 60.0, properties=("exit-balance",))


def _answer(verdict: str) -> Findings:
    witness = Witness("a signal is left over") if verdict == "violated" else None
    return Findings([Result("build", 2, "eager", [Verdict("exit-balance", verdict, witness=witness)])], [],
                    Dependencies())


@pytest.fixture
def project(tmp_path):
    (tmp_path / "clean.py").write_text("def build(num_devices):\n    return 'clean'\n")
    (tmp_path / "buggy.py").write_text("def build(num_devices):\n    return 'buggy'\n")
    return tmp_path


def _entries(cache_dir: Path, req: Request) -> list[Path]:
    key = request_key(req)
    return sorted((cache_dir / key[:2] / key).glob("*.json"))


def test_an_entry_copied_over_another_requests_never_answers(project):
    cache = ResultCache(str(project / ".semcheck_cache"))
    clean, buggy = _request(project / "clean.py"), _request(project / "buggy.py")
    cache.put(clean, _answer("proved"))
    cache.put(buggy, _answer("violated"))
    assert cache.get(clean).results[0].verdicts[0].verdict == "proved"
    (theirs,), (mine,) = _entries(project / ".semcheck_cache", clean), _entries(project / ".semcheck_cache", buggy)
    shutil.copy(theirs, mine)  # the proved file's answer in the buggy file's place
    assert cache.get(buggy) is None
    assert not mine.exists()  # removed: the fresh answer replaces it
    cache.put(buggy, _answer("violated"))
    assert cache.get(buggy).results[0].verdicts[0].verdict == "violated"


def test_an_entry_of_the_kernel_before_an_edit_never_answers(project):
    cache = ResultCache(str(project / ".semcheck_cache"))
    req = _request(project / "buggy.py")
    cache.put(req, _answer("proved"))
    (entry,) = _entries(project / ".semcheck_cache", req)
    (project / "buggy.py").write_text("def build(num_devices):\n    return 'edited'\n")
    assert cache.get(req) is None
    key = request_key(req)  # the old answer put where the edited kernel's answer is looked for
    place = project / ".semcheck_cache" / key[:2] / key
    place.mkdir(parents=True)
    shutil.copy(entry, place / entry.name)
    assert cache.get(req) is None and not (place / entry.name).exists()


def test_a_pickle_in_the_cache_is_never_loaded(project):
    """An entry is JSON: bytes that would run code when unpickled are a miss, and run nothing."""
    cache = ResultCache(str(project / ".semcheck_cache"))
    req = _request(project / "clean.py")
    cache.put(req, _answer("proved"))
    (entry,) = _entries(project / ".semcheck_cache", req)
    marker = project / "ran"
    entry.write_bytes(pickle.dumps(_Runs(str(marker))))
    assert cache.get(req) is None
    assert not marker.exists() and not entry.exists()


class _Runs:
    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_an_entry_with_a_wrong_field_is_a_miss(project):
    cache = ResultCache(str(project / ".semcheck_cache"))
    req = _request(project / "clean.py")
    cache.put(req, _answer("violated"))
    (entry,) = _entries(project / ".semcheck_cache", req)
    doc = json.loads(entry.read_text())
    doc["body"]["findings"]["results"][0]["verdicts"][0]["verdict"] = "proved"
    entry.write_text(json.dumps(doc))  # the digest no longer matches the body
    assert cache.get(req) is None
    assert doc["body"]["format"] == FORMAT


def test_the_markers_are_written_again_when_missing(project):
    """A directory made on a full disk (or by hand) without .gitignore and CACHEDIR.TAG gets them."""
    root = project / ".semcheck_cache"
    root.mkdir()
    cache = ResultCache(str(root))
    cache.put(_request(project / "clean.py"), _answer("proved"))
    assert (root / ".gitignore").read_text().splitlines()[-1] == "*"
    assert (root / "CACHEDIR.TAG").read_text().startswith("Signature: 8a477f597d28d172789f06886806bc55")
    (root / "CACHEDIR.TAG").unlink()
    cache.put(_request(project / "buggy.py"), _answer("proved"))
    assert (root / "CACHEDIR.TAG").is_file()
    assert not [p for p in os.listdir(root) if p.endswith(".tmp")]


def test_a_kept_answer_is_the_kernel_files_own(project):
    assert file_digest(str(project / "clean.py")) != file_digest(str(project / "buggy.py"))
    cache = ResultCache(str(project / ".semcheck_cache"))
    req = _request(project / "clean.py")
    cache.put(req, _answer("proved"))
    hit = cache.get(req)
    assert hit.results[0].cached and hit.results[0].verdicts == _answer("proved").results[0].verdicts
