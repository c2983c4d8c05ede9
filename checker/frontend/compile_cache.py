"""PRG-188: the checking processes share XLA's compiles through jax's persistent compilation cache.

PRG-169 runs an earlier kernel call in jax's interpreter three times, each a compile of the whole interpreted
kernel (about a minute of CPU for a planning kernel with a grid and a few hundred scalar steps, even at REP-37's
level), and every device count is checked in its own process. The command line names a private directory of its
own (`private_directory`; `ENV`, set for its checking processes only); a checking process hands it to jax before it compiles
anything, so a compile that took at least jax's threshold (one second), and every compile of a PRG-169 run (`kept`: each is
compiled again by every process that runs the kernel), is written there and read back by the next process of the
command that compiles the same module; nothing outlives the command. jax keys an entry by the module's text, jaxlib's version,
the platform's, the XLA flags and the compile options; the host callbacks an interpreted kernel calls are
referred to by their position in the module and bound to the loading process's own (its lowering's), so a hit is
the executable the compile would have given, run with the callbacks it would have run with.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterator

ENV = "SEMCHECK_COMPILE_CACHE"
"""The directory a checking process hands to jax's persistent compilation cache ('' or unset: none)."""

PREFIX = "semcheck-xla-"
_OWNED = re.compile(re.escape(PREFIX) + r"([1-9][0-9]*)-[a-z0-9_]{8}")
"""The whole name of a folder `private_directory` makes: the prefix, a process id as `str` writes it, and the 8
characters `tempfile` draws (a name `tempfile` ever draws otherwise is left alone: never a folder removed that
it did not make)."""


@contextlib.contextmanager
def private_directory() -> Iterator[str]:
    """A folder for one command's compiles: made afresh, readable by this user only (`mkdtemp`), named after the
    command's process (`semcheck-xla-<pid>-...`), and removed when the command ends. Never a folder of the result
    cache: a compiled executable is code that runs when loaded, so a folder another process could write would let
    it plant what PRG-169's runs compute (PRG-188). The folders earlier commands of this user left when they were
    killed outright are removed first (`remove_abandoned`, RUN-53)."""
    remove_abandoned(tempfile.gettempdir())
    with tempfile.TemporaryDirectory(prefix=f"{PREFIX}{os.getpid()}-") as directory:
        yield directory


def remove_abandoned(parent: str) -> list[str]:
    """Remove the compile folders in `parent` whose command is gone (RUN-53): a folder whose whole name is of the
    form `private_directory` makes (`_OWNED`), after a process id no process has, that is a directory (not a link to one) and this user's. A folder whose process lives (or may:
    one of another user's, which this user may not signal) is kept, as is every other user's folder and every
    name of another form. Returns the folders removed."""
    removed = []
    try:
        names = os.listdir(parent)
    except OSError:
        return removed
    for name in names:
        owner = _OWNED.fullmatch(name)
        if owner is None or _alive(int(owner.group(1))):
            continue
        path = os.path.join(parent, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    """Whether a process `pid` may exist (signal 0: no such process is the only answer that says it does not)."""
    if pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):
        return True
    return True


@contextlib.contextmanager
def shared_compiles(directory: str | None) -> Iterator[None]:
    """The checking processes started inside this block use `directory` (None: none) for their compiles."""
    old = os.environ.get(ENV)
    if directory:
        os.environ[ENV] = directory
    else:
        os.environ.pop(ENV, None)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = old


def use_shared_compiles() -> None:
    """In a checking process, before it compiles: jax's persistent cache in `ENV`'s directory, unless jax's own
    setting (`JAX_COMPILATION_CACHE_DIR`) names one already."""
    directory = os.environ.get(ENV)
    if not directory:
        return
    import jax  # lazy: the command line itself never imports jax

    if jax.config.jax_compilation_cache_dir is None:
        jax.config.update("jax_compilation_cache_dir", directory)


@contextlib.contextmanager
def kept() -> Iterator[None]:
    """The compiles inside this block are written to the shared cache however quick they were (where a checking
    process has one, `use_shared_compiles`)."""
    from jax._src import config  # lazy, as above; the setting is thread-local and restored on leaving

    with config.persistent_cache_min_compile_time_secs(0.0):
        yield


__all__ = ["ENV", "PREFIX", "kept", "private_directory", "remove_abandoned", "shared_compiles", "use_shared_compiles"]
