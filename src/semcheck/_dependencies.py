"""What importing a kernel file and running its `build` read, observed as it happens.

The result cache (`semcheck._cache`) may answer a request again only if
nothing the answer depends on has changed. Reading the kernel's source for
its imports misses what it reaches at run time (a package-style import, a
helper outside its directory, a data file, an environment variable), so the
verifying process watches instead, while it imports the file and runs
`build` (`observe()`). Every route by which Python code learns of a file
ends in one of a few calls, and the recorder sits on those (the narrowest
common layer), not on the many functions above them:

* every file opened (Python's `open` audit event, raised by `open`,
  `io.open`, `pathlib`'s `open` / `read_text` / `read_bytes` and by `import`
  through `io.open_code`), with the digest of its bytes when it was opened,
  or that it was missing;
* every directory listed (the `os.listdir` / `os.scandir` audit events, which
  `glob` and `pathlib`'s `iterdir` / `glob` raise), with its names and the
  kind of each entry;
* every path asked about through `os.stat`, `os.lstat`, `os.access` or
  `os.readlink`: these raise no audit event, so they are wrapped (and
  `os.path.exists` / `isfile` / `isdir` / `islink` / `getsize` /
  `getmtime` / `getctime`, `pathlib`'s `exists` / `is_file` / `stat` and
  `shutil` call them by attribute, so they reach the wrappers): its kind,
  permissions and, of a regular file, size, modification and change times;
* for each path above, every symbolic link on the way to it (each prefix of
  the path as named, and each link those point to): a retargeted link is a
  change even where the file it now names reads the same way;
* every environment variable read through `os.environ`, `os.environb`,
  `os.getenv` or `os.getenvb`, with the value the process was started
  with; enumerating the environment makes the whole environment a
  dependency;
* at the end, every module loaded from a file (its source's digest).

Paths are recorded as named (made absolute), not resolved, so that a check
later follows the links as the kernel did. Paths inside Python's
installation, site-packages and semcheck itself are left out: the cache
key holds the versions of every installed distribution and a digest of
semcheck's source instead (`_cache._environment_digest`). jax's
configuration is determined by those versions, the kernel's own code
(recorded here) and the `JAX_*` / `XLA_*` variables (in the key), so it
needs no entry of its own. A run that starts another program (`subprocess`,
`os.system` / `exec*` / `spawn*` / `posix_spawn`, `multiprocessing`), forks,
opens a network connection or leaves a thread running when its code returns
cannot be observed and is never cached (`uncacheable`). Not seen: files
that native code opens itself, without Python's `open`; a file's access
time (every read changes it); the sizes and times `os.scandir`'s entries
carry; functions bound before the recorder was installed (`from os import
stat` in a module imported earlier).
"""

from __future__ import annotations

import _thread
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
NOT_A_LINK = "not a link"

_UNOBSERVABLE = {
    "subprocess.Popen": "it starts another program",
    "os.system": "it starts another program",
    "os.exec": "it starts another program",
    "os.posix_spawn": "it starts another program",
    "os.spawn": "it starts another program",
    "os.fork": "it forks (what the forked process reads is not observed)",
    "os.forkpty": "it forks (what the forked process reads is not observed)",
    "socket.connect": "it opens a network connection",
    "urllib.Request": "it opens a network connection",
}
THREADS = "it leaves a thread running when its code returns (what the thread reads later is not observed)"

# The functions as they were before `install` wrapped them: the recorder's own reads go around it.
_stat, _lstat, _readlink = os.stat, os.lstat, os.readlink


def file_digest(path: str) -> str:
    """The sha256 of a file's bytes; `MISSING` if it is not a readable file."""
    try:
        with open(path, "rb") as f:
            return hashlib.file_digest(f, "sha256").hexdigest()
    except (OSError, ValueError):
        return MISSING


# Caches beside the kernel, which appear and disappear without changing what it does: Python's
# bytecode and semcheck's own results.
IGNORED_NAMES = frozenset({"__pycache__", ".semcheck_cache"})


def listing_digest(path: str) -> str:
    """A directory's names, and the kind of each entry (a file replaced by a directory of the same
    name is a change), as `os.scandir` reports them without following links."""
    try:
        with os.scandir(path) as it:
            names = sorted(f"{e.name}\0{_entry_kind(e)}" for e in it if e.name not in IGNORED_NAMES)
    except (OSError, ValueError):
        return MISSING
    return hashlib.sha256("\0".join(names).encode()).hexdigest()


def _entry_kind(e: os.DirEntry) -> str:
    try:
        return "l" if e.is_symlink() else "d" if e.is_dir(follow_symlinks=False) else \
            "f" if e.is_file(follow_symlinks=False) else "o"
    except OSError:
        return MISSING


def path_state(path: str) -> str:
    """What `os.stat` tells of a path (following links): its kind and permissions (what `os.access`
    answers from), and of a regular file its size and modification and change times. Not a
    directory's times: they change whenever an entry comes or goes (`listing_digest` says which)."""
    try:
        st = _stat(path)
    except (OSError, ValueError):
        return MISSING
    perm = f"{stat.S_IMODE(st.st_mode):o}"
    if stat.S_ISDIR(st.st_mode):
        return f"dir {perm}"
    if stat.S_ISREG(st.st_mode):
        return f"file {perm} {st.st_size} {st.st_mtime_ns} {st.st_ctime_ns}"
    return f"other {stat.S_IFMT(st.st_mode):o} {perm}"


def link_state(path: str) -> str:
    """`link TARGET` for a symbolic link, `NOT_A_LINK` for anything else, `MISSING` for nothing."""
    try:
        if not stat.S_ISLNK(_lstat(path).st_mode):
            return NOT_A_LINK
        return f"link {_readlink(path)}"
    except (OSError, ValueError):
        return MISSING


def link_chain(path: str) -> dict[str, str]:
    """`link_state` of every prefix of `path` (absolute) and of every link those point to, as far as
    the links go: what the kernel's open or stat followed on its way to the file."""
    out: dict[str, str] = {}
    todo = [path]
    while todo and len(out) < 1024:  # a loop of links ends here, as the kernel's own call fails
        prefix = ""
        for part in todo.pop().split(os.sep):
            if not part:
                continue
            prefix = os.path.join(prefix or os.sep, part)
            if prefix in out:
                continue
            out[prefix] = state = link_state(prefix)
            if state.startswith("link "):
                todo.append(os.path.join(os.path.dirname(prefix), state.removeprefix("link ")))
    return out


def environment_digest(env: Mapping[str, str]) -> str:
    return hashlib.sha256(repr(sorted(env.items())).encode()).hexdigest()


@dataclasses.dataclass(frozen=True)
class Dependencies:
    """Everything one verification read outside Python and semcheck, with what it read."""

    files: tuple[tuple[str, str], ...] = ()  # (path, digest or MISSING)
    listings: tuple[tuple[str, str], ...] = ()  # (directory, `listing_digest`)
    stats: tuple[tuple[str, str], ...] = ()  # (path, `path_state`)
    links: tuple[tuple[str, str], ...] = ()  # (path, `link_state`)
    env: tuple[tuple[str, str | None], ...] = ()  # (name, value at start, None if unset)
    whole_env: str | None = None  # the environment's digest, if it was enumerated
    uncacheable: str | None = None  # why the answer must not be kept

    def changed(self, env: Mapping[str, str] | None = None) -> str | None:
        """The first dependency that no longer reads as it did (a short description), or None."""
        env = os.environ if env is None else env
        for path, state in self.links:
            if link_state(path) != state:
                return f"link {path}"
        for path, digest in self.files:
            if file_digest(path) != digest:
                return f"file {path}"
        for path, digest in self.listings:
            if listing_digest(path) != digest:
                return f"directory {path}"
        for path, state in self.stats:
            if path_state(path) != state:
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
    """`os.environ` (or `os.environb`) as the kernel sees it while observed: reads are recorded.
    Both share the process's one table of variables, so a write through either shows in both."""

    def __init__(self, real: Any, recorder: Recorder) -> None:
        super().__init__(real._data, real.encodekey, real.decodekey, real.encodevalue, real.decodevalue)
        self._recorder = recorder

    def __getitem__(self, key: Any) -> Any:
        self._recorder.read_env(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        self._recorder.read_env(key)
        return super().__contains__(key)

    def __iter__(self) -> Iterator[Any]:
        self._recorder.enumerated_env()
        return super().__iter__()

    def __len__(self) -> int:
        self._recorder.enumerated_env()
        return super().__len__()

    def copy(self) -> dict[Any, Any]:
        self._recorder.enumerated_env()
        return super().copy()


class Recorder:
    """Collects dependencies while `active`; `dependencies()` says what was read. `covered` are paths
    the cache key holds already (the kernel file: semcheck's own loader asks whether it exists)."""

    def __init__(self, covered: tuple[str, ...] = ()) -> None:
        self.active = False
        self._busy = threading.local()
        self._excluded = _excluded_roots()
        self._covered = frozenset(os.path.abspath(p) for p in covered)
        self._start_env = dict(os.environ)
        self._files: dict[str, str] = {}
        self._listings: dict[str, str] = {}
        self._stats: dict[str, str] = {}
        self._links: dict[str, str] = {}
        self._chained: set[str] = set()
        self._env: set[str] = set()
        self._whole_env = False
        self._uncacheable: str | None = None

    # --- what the hooks see --------------------------------------------------------

    def _relevant(self, path: Any) -> str | None:
        """The path as named, made absolute (not resolved: a later check follows its links as the kernel
        did), or None for a file descriptor, or a path the key covers."""
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if not isinstance(path, (str, os.PathLike)):
            return None  # a file descriptor
        try:
            named = os.fspath(path)
            if isinstance(named, bytes):
                named = os.fsdecode(named)
            named = named if os.path.isabs(named) else os.path.join(os.getcwd(), named)
            real = os.path.realpath(named)
        except (OSError, ValueError, TypeError):
            return None
        if (real.startswith(self._excluded) or f"{os.sep}__pycache__{os.sep}" in real
                or os.path.normpath(named) in self._covered):
            return None
        if named not in self._chained:
            self._chained.add(named)
            for p, state in link_chain(named).items():
                self._links.setdefault(p, state)
        return named

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
        """`os.stat`, `os.lstat`, `os.access` or `os.readlink` asked about `path` (the link chain
        `_relevant` records says what `lstat` and `readlink` see)."""
        if self._quiet():
            return
        with self._own_io():
            p = self._relevant(path)
            if p is not None and p not in self._stats:
                self._stats[p] = path_state(p)

    def read_env(self, name: object) -> None:
        if isinstance(name, bytes):
            name = os.fsdecode(name)
        if isinstance(name, str) and not self._quiet():
            self._env.add(name)

    def enumerated_env(self) -> None:
        if not self._quiet():
            self._whole_env = True

    def threads_left(self) -> None:
        """Threads the kernel started are still running when its code returns."""
        if self._uncacheable is None:
            self._uncacheable = THREADS

    # --- the answer ----------------------------------------------------------------

    def dependencies(self) -> Dependencies:
        files = dict(self._files)
        with self._own_io():
            for module in list(sys.modules.values()):
                f = getattr(module, "__file__", None)
                p = self._relevant(f) if isinstance(f, str) else None
                if p is not None and p not in files:
                    files[p] = file_digest(p)
        return Dependencies(
            files=tuple(sorted(files.items())),
            listings=tuple(sorted(self._listings.items())),
            stats=tuple(sorted(self._stats.items())),
            links=tuple(sorted(self._links.items())),
            env=tuple(sorted((n, self._start_env.get(n)) for n in self._env)),
            whole_env=environment_digest(self._start_env) if self._whole_env else None,
            uncacheable=self._uncacheable,
        )


def install(covered: tuple[str, ...] = ()) -> Recorder:
    """Start observing this process (once: audit hooks cannot be removed); `observe` turns it on."""
    rec = Recorder(covered)
    # The hook stays for the process's life and Python audits every `id()` call: the checks after the
    # build make millions of them, so the hook drops every event `audit` does not read before a call.
    watched = frozenset({"open", "os.listdir", "os.scandir", *_UNOBSERVABLE})

    def hook(event: str, args: tuple[Any, ...], watched: frozenset = watched, rec: Recorder = rec) -> None:
        if event in watched and rec.active:
            rec.audit(event, args)

    sys.addaudithook(hook)
    # No audit event tells of a stat, an access check or a readlink: these four are wrapped.
    for name in ("stat", "lstat", "access", "readlink"):
        setattr(os, name, _recorded(getattr(os, name), rec))
    try:  # multiprocessing starts programs through this, which raises no audit event (subprocess's does)
        import _posixsubprocess
    except ImportError:
        pass
    else:
        _posixsubprocess.fork_exec = _starts_a_program(_posixsubprocess.fork_exec, rec)
    os.environ = _RecordingEnviron(os.environ, rec)
    if hasattr(os, "environb"):
        os.environb = _RecordingEnviron(os.environb, rec)
    return rec


def _recorded(real: Any, rec: Recorder) -> Any:
    def recorded(path: Any, *args: Any, **kwargs: Any) -> Any:
        rec.stat(path)
        return real(path, *args, **kwargs)

    recorded.__name__, recorded.__doc__ = real.__name__, real.__doc__
    return recorded


def _starts_a_program(real: Any, rec: Recorder) -> Any:
    def recorded(*args: Any, **kwargs: Any) -> Any:
        rec.audit("os.posix_spawn", ())
        return real(*args, **kwargs)

    return recorded


@contextlib.contextmanager
def observe(rec: Recorder) -> Iterator[None]:
    """Record what the kernel's import and `build` read inside this block; a thread started in it
    that is still running at its end makes the answer uncacheable."""
    before = set(threading.enumerate())
    raw = _thread._count()
    rec.active = True
    try:
        yield
    finally:
        rec.active = False
        # threads made through `_thread` directly are not in `threading.enumerate`: counted instead
        if any(t.is_alive() for t in set(threading.enumerate()) - before) or _thread._count() > raw:
            rec.threads_left()
