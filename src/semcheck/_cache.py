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
better), that started another program, forked, left a thread running or
opened a connection, or that ended in an input error.

An entry answers only for its own request: it is JSON (`semcheck._cache_entry`,
no pickle: reading an entry runs no code), written atomically, and holds the
request's key, the kernel file's path and digest and a digest of its own
body; `get` checks all of them, and every field, before the entry is used.
An entry copied into another request's folder, edited or cut short is a miss
(and removed; the fresh answer replaces it). The body's digest catches an
edit, not a forger who rewrites the digests too: that would need a secret
kept outside the tree. An answer from the cache is marked
as such in every report (`Result.cached`). `--no-cache` neither reads nor
writes. The cache directory is the directory of the `pyproject.toml` that
configures semcheck, else the working directory; `SEMCHECK_CACHE_DIR`
overrides it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import sys
import tempfile
import threading
from time import time_ns
from typing import Any

from semcheck import _cache_entry as entry
from semcheck._cache_entry import BadEntry, Unwritable
from semcheck._dependencies import Dependencies, file_digest

CACHE_DIR_NAME = ".semcheck_cache"
FORMAT = "3"  # bump when an entry changes shape (`semcheck._cache_entry`)
SUFFIX = ".json"
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

    def _folder(self, key: str) -> str:
        return os.path.join(self.directory, key[:2], key)

    def get(self, req: Any) -> Any:
        key = request_key(req)
        folder = self._folder(key)
        try:
            names = sorted((n for n in os.listdir(folder) if n.endswith(SUFFIX)), reverse=True)
        except OSError:
            names = []
        kernel = _kernel(req)
        for name in names:
            path = os.path.join(folder, name)
            try:
                with open(path, "rb") as f:
                    deps, findings = _read(f.read(), key, kernel)
            except OSError:
                continue
            except BadEntry:  # not an answer of this request: never used, and replaced by the fresh one
                with contextlib.suppress(OSError):
                    os.remove(path)
                continue
            if deps.uncacheable is None and deps.changed() is None:
                self.hits += 1
                for r in findings.results:
                    r.cached = True
                return findings
        self.misses += 1
        return None

    def put(self, req: Any, findings: Any) -> str | None:
        """Keep `findings` if they may be; else the reason they are not, where the run itself does not
        say it (a timeout has a note of its own, an input error its line)."""
        deps = findings.dependencies
        if (not isinstance(deps, Dependencies) or _timed_out(findings)
                or findings.errors):  # a target that raised is an input error: never kept
            return None
        if deps.uncacheable is not None:
            return deps.uncacheable
        key = request_key(req)
        try:
            text = _write(deps, findings, key, _kernel(req))
        except Unwritable as e:  # a value the format has no place for: answered, not kept
            return f"the answer holds {e}, which a cache entry cannot"
        folder = self._folder(key)
        try:
            self._prepare()
            os.makedirs(folder, exist_ok=True)
            old = sorted(n for n in os.listdir(folder) if n.endswith((SUFFIX, ".pickle")))
            # names sort by time, so `get` tries the newest answer first
            name = f"{time_ns()}-{hashlib.sha256(repr(deps).encode()).hexdigest()[:16]}{SUFFIX}"
            fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, os.path.join(folder, name))
            stale = [n for n in old if not n.endswith(SUFFIX)]  # an older format's entries
            kept = [n for n in old if n.endswith(SUFFIX)]
            for n in stale + kept[: max(0, len(kept) + 1 - KEPT)]:
                os.remove(os.path.join(folder, n))
        except OSError:  # a read-only tree or a full disk: no cache, same answers
            pass
        return None

    def _prepare(self) -> None:
        """The directory with a .gitignore and a CACHEDIR.TAG (as pytest and ruff make), each written
        again when missing: a directory made on a full disk, or by an older semcheck, gets them too."""
        os.makedirs(self.directory, exist_ok=True)
        for name, text in _MARKERS.items():
            path = os.path.join(self.directory, name)
            if os.path.isfile(path):
                continue
            tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
            try:
                with open(tmp, "w") as f:  # as any file the user makes (mkstemp's would be private)
                    f.write(text)
                os.replace(tmp, path)  # whole or not at all: a full disk leaves no empty marker behind
            except OSError:
                with contextlib.suppress(OSError):
                    os.remove(tmp)
                raise


_MARKERS = {
    ".gitignore": "# created by semcheck\n*\n",
    "CACHEDIR.TAG": ("Signature: 8a477f597d28d172789f06886806bc55\n"
                     "# This file is a cache directory tag created by semcheck.\n"),
}


def _kernel(req: Any) -> tuple[str, str]:
    path = os.path.abspath(req.path)
    return path, file_digest(path)


def _body_digest(body: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, allow_nan=False).encode()).hexdigest()


def _write(deps: Dependencies, findings: Any, key: str, kernel: tuple[str, str]) -> str:
    body = {"format": FORMAT, "key": key, "kernel": list(kernel), "dependencies": entry.dependencies_out(deps),
            "findings": entry.findings_out(findings)}
    return json.dumps({"body": body, "digest": _body_digest(body)}, allow_nan=False)


def _read(data: bytes, key: str, kernel: tuple[str, str]) -> tuple[Dependencies, Any]:
    """An entry's dependencies and findings, if it is an entry of this request whose body reads back
    exactly as written; else `BadEntry`."""
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        raise BadEntry("not JSON") from None
    body = entry.field(doc, "body", dict)
    if entry.field(doc, "digest", str) != _body_digest(body):
        raise BadEntry("its digest does not match its body")
    if entry.field(body, "format", str) != FORMAT:
        raise BadEntry("another format")
    if entry.field(body, "key", str) != key:
        raise BadEntry("the entry of another request")
    if entry.field(body, "kernel", list) != list(kernel):
        raise BadEntry("the entry of another kernel file")
    try:
        deps = entry.dependencies_in(entry.field(body, "dependencies", dict))
        return deps, entry.findings_in(entry.field(body, "findings", dict), deps)
    except BadEntry:
        raise
    except (RecursionError, TypeError, ValueError, KeyError, AttributeError) as e:  # whatever a bad entry
        raise BadEntry(f"{type(e).__name__} while reading it") from None  # trips over is a miss, never a crash


def default_directory(config_file: str | None) -> str:
    env = os.environ.get("SEMCHECK_CACHE_DIR")
    if env:
        return env
    base = os.path.dirname(config_file) if config_file else os.getcwd()
    return os.path.join(base, CACHE_DIR_NAME)
