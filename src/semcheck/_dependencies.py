"""What importing a kernel file and running its `build` read, observed as it happens.

The result cache (`semcheck._cache`) may answer a request again only if
nothing the answer depends on has changed. Reading the kernel's source for
its imports misses what it reaches at run time (a package-style import, a
helper outside its directory, a data file, an environment variable), so the
verifying process watches instead, while it imports the file and runs
`build` (`observe()`):

* every file opened (Python's `open` audit event, which `import` raises too
  through `io.open_code`), with the digest of its bytes at the moment it was
  opened, or that it was missing;
* every directory listed (`os.listdir` / `os.scandir`, which `glob` and
  `pathlib` use), with the names it held;
* every path whose existence or kind was asked (`os.stat` / `os.lstat`, as
  `os.path.exists`, `isfile` and `isdir` ask);
* every environment variable read through `os.environ` or `os.getenv`, with
  the value the process was started with; enumerating the environment
  makes the whole environment a dependency;
* at the end, every module loaded from a file (its source's digest).

Paths inside Python's installation, site-packages and semcheck itself are
left out: the cache key holds the versions of every installed distribution
and a digest of semcheck's source instead (`_cache._environment_digest`).
jax's configuration is determined by those versions, the kernel's own code
(recorded here) and the `JAX_*` / `XLA_*` variables (in the key), so it
needs no entry of its own. A run that starts another program or opens a
network connection cannot be observed and is never cached (`uncacheable`).
Not seen: files that native code opens itself, without Python's `open`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import site
import stat
import sys
import threading
from collections.abc import Iterator, Mapping
from typing import Any

MISSING = "missing"

_UNOBSERVABLE = {
    "subprocess.Popen": "it starts another program",
    "os.system": "it starts another program",
    "os.exec": "it starts another program",
    "os.posix_spawn": "it starts another program",
    "os.spawn": "it starts another program",
    "socket.connect": "it opens a network connection",
    "urllib.Request": "it opens a network connection",
}


def file_digest(path: str) -> str:
    """The sha256 of a file's bytes; `MISSING` if it is not a readable file."""
    try:
        with open(path, "rb") as f:
            return hashlib.file_digest(f, "sha256").hexdigest()
    except OSError:
        return MISSING


# Caches beside the kernel, which appear and disappear without changing what it does: Python's
# bytecode and semcheck's own results.
IGNORED_NAMES = frozenset({"__pycache__", ".semcheck_cache"})


def listing_digest(path: str) -> str:
    try:
        names = sorted(n for n in os.listdir(path) if n not in IGNORED_NAMES)
    except OSError:
        return MISSING
    return hashlib.sha256("\0".join(names).encode()).hexdigest()


def path_kind(path: str) -> str:
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return MISSING
    return "dir" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode) else "other"


def environment_digest(env: Mapping[str, str]) -> str:
    return hashlib.sha256(repr(sorted(env.items())).encode()).hexdigest()


@dataclasses.dataclass(frozen=True)
class Dependencies:
    """Everything one verification read outside Python and semcheck, with what it read."""

    files: tuple[tuple[str, str], ...] = ()  # (path, digest or MISSING)
    listings: tuple[tuple[str, str], ...] = ()  # (directory, digest of its names or MISSING)
    kinds: tuple[tuple[str, str], ...] = ()  # (path, "file" | "dir" | "other" | MISSING)
    env: tuple[tuple[str, str | None], ...] = ()  # (name, value at start, None if unset)
    whole_env: str | None = None  # the environment's digest, if it was enumerated
    uncacheable: str | None = None  # why the answer must not be kept

    def changed(self, env: Mapping[str, str] | None = None) -> str | None:
        """The first dependency that no longer reads as it did (a short description), or None."""
        env = os.environ if env is None else env
        for path, digest in self.files:
            if file_digest(path) != digest:
                return f"file {path}"
        for path, digest in self.listings:
            if listing_digest(path) != digest:
                return f"directory {path}"
        for path, kind in self.kinds:
            if path_kind(path) != kind:
                return f"path {path}"
        for name, value in self.env:
            if env.get(name) != value:
                return f"environment variable {name}"
        if self.whole_env is not None and environment_digest(env) != self.whole_env:
            return "the environment"
        return None


def _excluded_roots() -> tuple[str, ...]:
    """Python's installation, site-packages and semcheck's own packages (the key covers them)."""
    import importlib

    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             *site.getsitepackages(), site.getusersitepackages(), "/proc", "/sys", "/dev"}
    for name in ("semcheck", "semcheck.model", "semcheck.checker", "semcheck.specs"):
        try:
            module = importlib.import_module(name)
        except ImportError:  # semcheck.specs holds documents only and may not import
            continue
        if getattr(module, "__file__", None):
            roots.add(os.path.dirname(os.path.abspath(module.__file__)))
    return tuple(sorted(os.path.join(os.path.realpath(r), "") for r in roots if r))


class _RecordingEnviron(os._Environ):  # type: ignore[name-defined,misc]
    """`os.environ` as the kernel sees it while observed: reads are recorded."""

    def __init__(self, real: Any, recorder: Recorder) -> None:
        super().__init__(real._data, real.encodekey, real.decodekey, real.encodevalue, real.decodevalue)
        self._recorder = recorder

    def __getitem__(self, key: str) -> str:
        self._recorder.read_env(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        self._recorder.read_env(key)
        return super().__contains__(key)

    def __iter__(self) -> Iterator[str]:
        self._recorder.enumerated_env()
        return super().__iter__()

    def __len__(self) -> int:
        self._recorder.enumerated_env()
        return super().__len__()

    def copy(self) -> dict[str, str]:
        self._recorder.enumerated_env()
        return super().copy()


class Recorder:
    """Collects dependencies while `active`; `dependencies()` says what was read."""

    def __init__(self) -> None:
        self.active = False
        self._busy = threading.local()
        self._excluded = _excluded_roots()
        self._start_env = dict(os.environ)
        self._files: dict[str, str] = {}
        self._listings: dict[str, str] = {}
        self._kinds: dict[str, str] = {}
        self._env: set[str] = set()
        self._whole_env = False
        self._uncacheable: str | None = None

    # --- what the hooks see --------------------------------------------------------

    def _relevant(self, path: Any) -> str | None:
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if not isinstance(path, (str, os.PathLike)):
            return None  # a file descriptor
        p = os.path.realpath(os.path.abspath(os.fspath(path)))
        if p.startswith(self._excluded) or f"{os.sep}__pycache__{os.sep}" in p:
            return None
        return p

    def _quiet(self) -> bool:
        return not self.active or getattr(self._busy, "on", False)

    @contextlib.contextmanager
    def _own_io(self) -> Iterator[None]:
        self._busy.on = True
        try:
            yield
        finally:
            self._busy.on = False

    def audit(self, event: str, args: tuple[Any, ...]) -> None:
        if self._quiet():
            return
        with self._own_io():
            if event == "open":
                p = self._relevant(args[0])
                if p is not None and p not in self._files:
                    self._files[p] = file_digest(p)
            elif event in ("os.listdir", "os.scandir"):
                p = self._relevant(args[0] if args and args[0] is not None else ".")
                if p is not None and p not in self._listings:
                    self._listings[p] = listing_digest(p)
            elif event in _UNOBSERVABLE and self._uncacheable is None:
                self._uncacheable = _UNOBSERVABLE[event]

    def stat(self, path: Any) -> None:
        if self._quiet():
            return
        with self._own_io():
            p = self._relevant(path)
            if p is not None and p not in self._kinds:
                self._kinds[p] = path_kind(p)

    def read_env(self, name: object) -> None:
        if isinstance(name, str) and not self._quiet():
            self._env.add(name)

    def enumerated_env(self) -> None:
        if not self._quiet():
            self._whole_env = True

    # --- the answer ----------------------------------------------------------------

    def dependencies(self) -> Dependencies:
        files = dict(self._files)
        for module in list(sys.modules.values()):
            f = getattr(module, "__file__", None)
            p = self._relevant(f) if isinstance(f, str) else None
            if p is not None and p not in files:
                files[p] = file_digest(p)
        return Dependencies(
            files=tuple(sorted(files.items())),
            listings=tuple(sorted(self._listings.items())),
            kinds=tuple(sorted(self._kinds.items())),
            env=tuple(sorted((n, self._start_env.get(n)) for n in self._env)),
            whole_env=environment_digest(self._start_env) if self._whole_env else None,
            uncacheable=self._uncacheable,
        )


def install() -> Recorder:
    """Start observing this process (once: audit hooks cannot be removed); `observe` turns it on."""
    rec = Recorder()
    # The hook stays for the process's life and Python audits every `id()` call: the checks after the
    # build make millions of them, so the hook drops every event `audit` does not read before a call.
    watched = frozenset({"open", "os.listdir", "os.scandir", *_UNOBSERVABLE})

    def hook(event: str, args: tuple[Any, ...], watched: frozenset = watched, rec: Recorder = rec) -> None:
        if event in watched and rec.active:
            rec.audit(event, args)

    sys.addaudithook(hook)
    real_stat, real_lstat = os.stat, os.lstat

    def recorded_stat(path: Any, *args: Any, **kwargs: Any) -> Any:
        rec.stat(path)
        return real_stat(path, *args, **kwargs)

    def recorded_lstat(path: Any, *args: Any, **kwargs: Any) -> Any:
        rec.stat(path)
        return real_lstat(path, *args, **kwargs)

    os.stat, os.lstat = recorded_stat, recorded_lstat
    os.environ = _RecordingEnviron(os.environ, rec)
    return rec


@contextlib.contextmanager
def observe(rec: Recorder) -> Iterator[None]:
    """Record what the kernel's import and `build` read inside this block."""
    rec.active = True
    try:
        yield
    finally:
        rec.active = False
