"""The result cache: a re-run on unchanged kernel files answers from `.semcheck_cache/`.

One entry per verification request (one kernel file x target x device
count), found in two steps, as build systems with dynamic dependencies do:

1. the request's key: the kernel file's path and bytes, the request's
   options (target, entry, device count, cores, DMA modes, properties,
   fold, timeout, examples) and the environment: Python's version, every
   installed distribution and its version, a digest of semcheck's own
   source (an edited checker is a different checker), the `JAX_*`, `XLA_*`,
   `TPU_*` and `LIBTPU*` variables, which set jax's configuration, and the
   `PYTHON*` variables, `sys.path` and the working directory, which decide
   where imports and relative paths resolve;
2. under that key, answers kept with the dependencies the verifying process
   observed while it imported the file and ran `build`
   (`semcheck._dependencies`: every module, file, directory listing, path
   and environment variable read). An answer is returned only if every one
   of them still reads as it did.

Anything not observed is not cached: a run that timed out (a rerun may do
better), that started another program or opened a connection, or that ended
in an input error. Entries are pickles written atomically (the cache is
trusted like the source tree it sits in). An answer from the cache is marked
as such in every report (`Result.cached`). `--no-cache` neither reads nor
writes. The cache directory is the directory of the `pyproject.toml` that
configures semcheck, else the working directory; `SEMCHECK_CACHE_DIR`
overrides it.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import pickle
import sys
import tempfile
from time import time_ns
from typing import Any

from semcheck._dependencies import Dependencies, file_digest

CACHE_DIR_NAME = ".semcheck_cache"
FORMAT = "2"  # bump when the pickled classes change shape
KEPT = 8  # answers kept per request (one per state of its dependencies); the oldest go first
# Variables read before any kernel code runs: jax's and XLA's configuration, and Python's own
# (PYTHONPATH and the like decide which files an import finds).
CONFIG_PREFIXES = ("JAX_", "XLA_", "TPU_", "LIBTPU", "PYTHON")


@functools.cache
def _installed_digest() -> str:
    """Python's version, every installed distribution with its version, and semcheck's own source."""
    from importlib import metadata

    import semcheck
    import semcheck.checker
    import semcheck.model

    h = hashlib.sha256(f"format {FORMAT}; python {sys.version}".encode())
    dists = sorted({(d.metadata["Name"] or "", d.version) for d in metadata.distributions()})
    h.update(repr(dists).encode())
    for pkg in (semcheck, semcheck.checker, semcheck.model):
        root = os.path.dirname(os.path.abspath(pkg.__file__))
        for dirpath, dirnames, names in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for name in sorted(names):
                if name.endswith(".py"):
                    p = os.path.join(dirpath, name)
                    h.update(os.path.relpath(p, root).encode())
                    h.update(file_digest(p).encode())
    return h.hexdigest()


def _environment_digest() -> str:
    """`_installed_digest`, the variables that configure jax, XLA and Python, and where imports and
    relative paths resolve: the verifying process inherits this process's `sys.path` and
    working directory."""
    config = sorted((k, v) for k, v in os.environ.items() if k.startswith(CONFIG_PREFIXES))
    where = (os.getcwd(), tuple(sys.path))
    return hashlib.sha256(f"{_installed_digest()}; {config!r}; {where!r}".encode()).hexdigest()


def request_key(req: Any) -> str:
    """Step 1's key of one `request.Request`: what is known before the kernel runs."""
    h = hashlib.sha256(_environment_digest().encode())
    h.update(repr(sorted(dataclasses.asdict(req).items())).encode())
    path = os.path.abspath(req.path)
    h.update(f"{path}; {file_digest(path)}".encode())
    return h.hexdigest()


def _timed_out(findings: Any) -> bool:
    """A timeout anywhere in the answer: a rerun may decide more, so it is not kept."""
    from semcheck.checker.properties.verdict import unknown_kind

    return any(n.code == "timeout" for n in findings.notes) or any(
        v.verdict == "unknown" and unknown_kind(v.reason or "") == "timeout"
        for r in findings.results for v in r.verdicts)


class ResultCache:
    """`get(request)` -> the `Findings` of an earlier identical request whose dependencies all read
    as they did then, or None; `put(request, findings)` keeps findings that carry their dependencies."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.hits = 0
        self.misses = 0

    def _folder(self, req: Any) -> str:
        key = request_key(req)
        return os.path.join(self.directory, key[:2], key)

    def get(self, req: Any) -> Any:
        folder = self._folder(req)
        try:
            names = sorted(os.listdir(folder), reverse=True)
        except OSError:
            names = []
        for name in names:
            if not name.endswith(".pickle"):
                continue
            try:
                with open(os.path.join(folder, name), "rb") as f:
                    deps, findings = pickle.load(f)
            except (OSError, EOFError, pickle.UnpicklingError, AttributeError, ImportError, TypeError,
                    ValueError):
                continue
            if isinstance(deps, Dependencies) and deps.uncacheable is None and deps.changed() is None:
                self.hits += 1
                for r in findings.results:
                    r.cached = True
                return findings
        self.misses += 1
        return None

    def put(self, req: Any, findings: Any) -> None:
        deps = findings.dependencies
        if (not isinstance(deps, Dependencies) or deps.uncacheable is not None or _timed_out(findings)
                or findings.errors):  # a target that raised is an input error: never kept
            return
        folder = self._folder(req)
        try:
            self._prepare()
            os.makedirs(folder, exist_ok=True)
            old = sorted(n for n in os.listdir(folder) if n.endswith(".pickle"))
            # names sort by time, so `get` tries the newest answer first
            name = f"{time_ns()}-{hashlib.sha256(repr(deps).encode()).hexdigest()[:16]}.pickle"
            fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
            with os.fdopen(fd, "wb") as f:
                pickle.dump((deps, findings), f, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, os.path.join(folder, name))
            for stale in old[: max(0, len(old) + 1 - KEPT)]:
                os.remove(os.path.join(folder, stale))
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
