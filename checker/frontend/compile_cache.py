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
import tempfile
from collections.abc import Iterator

ENV = "SEMCHECK_COMPILE_CACHE"
"""The directory a checking process hands to jax's persistent compilation cache ('' or unset: none)."""

@contextlib.contextmanager
def private_directory() -> Iterator[str]:
    """A folder for one command's compiles: made afresh, readable by this user only (`mkdtemp`), and removed when
    the command ends. Never a folder of the result cache: a compiled executable is code that runs when loaded,
    so a folder another process could write would let it plant what PRG-169's runs compute (PRG-188)."""
    with tempfile.TemporaryDirectory(prefix="semcheck-xla-") as directory:
        yield directory


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


__all__ = ["ENV", "kept", "private_directory", "shared_compiles", "use_shared_compiles"]
