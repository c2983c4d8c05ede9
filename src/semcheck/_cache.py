"""The result cache: a re-run on unchanged kernel files answers from `.semcheck_cache/`.

As mypy's and ruff's caches: one entry per verification request (one kernel
file x target x device count), keyed by everything the answer depends on:

* the kernel file's bytes, and those of the modules it imports from its own
  directory (followed transitively; a package there counts with all its files);
* the versions of Python, jax, jaxlib, numpy and z3, semcheck's version and a
  digest of semcheck's own source (an edited checker is a different checker);
* the request's options: target, entry, device count, cores, DMA modes,
  properties, fold, timeout.

Any change is a different key, so nothing is ever invalidated in place; stale
entries are simply not read again. Answers with a timeout are not kept (a
rerun may do better); input errors are never cached. Entries are pickles
written atomically (the cache is trusted like the source tree it sits in).
`--no-cache` neither reads nor writes. The cache directory is the directory
of the `pyproject.toml` that configures semcheck, else the working
directory; `SEMCHECK_CACHE_DIR` overrides it.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import os
import pickle
import sys
import tempfile
from typing import Any

CACHE_DIR_NAME = ".semcheck_cache"
FORMAT = "1"  # bump when the pickled classes change shape


@functools.cache
def _environment_digest() -> str:
    """Python, jax, jaxlib, numpy, z3, hypothesis and semcheck versions, and semcheck's own source."""
    from importlib import metadata

    import semcheck
    import semcheck.checker
    import semcheck.model

    h = hashlib.sha256()
    h.update(f"format {FORMAT}; python {sys.version}".encode())
    for dist in ("jax", "jaxlib", "numpy", "z3-solver", "hypothesis", "semcheck"):  # hypothesis draws generated inputs
        try:
            v = metadata.version(dist)
        except metadata.PackageNotFoundError:
            v = "-"
        h.update(f"; {dist} {v}".encode())
    for pkg in (semcheck, semcheck.checker, semcheck.model):
        root = os.path.dirname(os.path.abspath(pkg.__file__))
        for dirpath, dirnames, names in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for name in sorted(names):
                if name.endswith(".py"):
                    p = os.path.join(dirpath, name)
                    h.update(os.path.relpath(p, root).encode())
                    with open(p, "rb") as f:
                        h.update(hashlib.sha256(f.read()).digest())
    return h.hexdigest()


def local_imports(path: str) -> list[str]:
    """The kernel file and the files it imports from its own directory, transitively, sorted."""
    base = os.path.dirname(os.path.abspath(path))
    seen: set[str] = set()
    todo = [os.path.abspath(path)]
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            with open(p, "rb") as f:
                tree = ast.parse(f.read())
        except (OSError, SyntaxError, ValueError):
            continue
        names: list[str] = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names += [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.module:
                    names.append(node.module)
                if node.level:  # from . import x
                    names += [a.name for a in node.names]
        for name in names:
            top = name.split(".")[0]
            module = os.path.join(base, top + ".py")
            package = os.path.join(base, top)
            if os.path.isfile(module):
                todo.append(module)
            elif os.path.isfile(os.path.join(package, "__init__.py")):
                for dirpath, dirnames, files in os.walk(package):
                    dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
                    todo += [os.path.join(dirpath, f) for f in sorted(files) if f.endswith(".py")]
    return sorted(seen)


def request_key(req: Any) -> str:
    """The cache key of one `verify.Request`."""
    h = hashlib.sha256(_environment_digest().encode())
    options = dataclasses.asdict(req)
    h.update(repr(sorted(options.items())).encode())
    for p in local_imports(req.path):
        h.update(p.encode())
        try:
            with open(p, "rb") as f:
                h.update(hashlib.sha256(f.read()).digest())
        except OSError:
            h.update(b"unreadable")
    return h.hexdigest()


def _timed_out(findings: Any) -> bool:
    if any(n.code == "timeout" for n in findings.notes):
        return True
    for r in findings.results:
        for v in r.verdicts:
            reason = (v.reason or "").lower()
            if v.verdict == "unknown" and any(w in reason for w in ("timeout", "timed out", "canceled")):
                return True
    return False


class ResultCache:
    """`get(request)` -> the `Findings` of an earlier identical request, or None; `put(request, findings)`."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.hits = 0
        self.misses = 0

    def _file(self, req: Any) -> str:
        key = request_key(req)
        return os.path.join(self.directory, key[:2], key + ".pickle")

    def get(self, req: Any) -> Any:
        try:
            with open(self._file(req), "rb") as f:
                out = pickle.load(f)
        except (OSError, EOFError, pickle.UnpicklingError, AttributeError, ImportError, TypeError, ValueError):
            self.misses += 1
            return None
        self.hits += 1
        return out

    def put(self, req: Any, findings: Any) -> None:
        if _timed_out(findings):
            return
        target = self._file(req)
        try:
            self._prepare()
            os.makedirs(os.path.dirname(target), exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(target), suffix=".tmp")
            with os.fdopen(fd, "wb") as f:
                pickle.dump(findings, f, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, target)
        except OSError:  # a read-only tree: no cache, same answers
            pass

    def _prepare(self) -> None:
        """Create the directory with a .gitignore and a CACHEDIR.TAG (as pytest and ruff do)."""
        if os.path.isdir(self.directory):
            return
        os.makedirs(self.directory, exist_ok=True)
        with open(os.path.join(self.directory, ".gitignore"), "w") as f:
            f.write("# created by semcheck\n*\n")
        with open(os.path.join(self.directory, "CACHEDIR.TAG"), "w") as f:
            f.write("Signature: 8a477f597d28d172789f06886806bc55\n"
                    "# This file is a cache directory tag created by semcheck.\n")


def default_directory(config_file: str | None) -> str:
    env = os.environ.get("SEMCHECK_CACHE_DIR")
    if env:
        return env
    base = os.path.dirname(config_file) if config_file else os.getcwd()
    return os.path.join(base, CACHE_DIR_NAME)
