"""How a verifying child process is started: warm (jax already imported) where that is safe.

Every (kernel file, device count) is verified in a fresh process (`checker/run/child.py`): jax fixes
the host device count when its backends start. Importing jax, z3 and semcheck is the same in
each of those processes, though, and importing starts no backend. So the children are forked
from one server process that imported them once (multiprocessing's forkserver with a preload
list); each child then provisions its devices (`targets.provision_devices`: `XLA_FLAGS` is read
when the backends start, the platform is set as a jax setting) before anything touches a device.

jax and the kernel's imports read the environment when they are imported, so a warm child is
right only if the server's environment is the one the child would have inherited: the server
keeps the environment of the process at the moment it was started, and once that environment
has changed (a test editing a variable, a library caller changing `JAX_*`), children are
started cold (`spawn`) again. A warm child takes on its parent's environment of the moment
before it runs anything, so the variables in `VARYING` are current too. The working directory
and `sys.path` travel with every child either way (multiprocessing sends them).
`SEMCHECK_COLD_START=1` always starts cold, and so does a temporary directory whose path leaves no
room for the server's socket name (a Unix socket path has at most 107 bytes on Linux).
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import sys
import tempfile
import threading
from typing import Any

from semcheck.checker.frontend.compile_cache import ENV as COMPILE_CACHE

PRELOAD = (
    "jax",
    "jax.experimental.pallas",
    "jax.experimental.pallas.tpu",
    "z3",
    "semcheck.checker.properties.checking",
    "semcheck.checker.frontend",
    "semcheck.checker.frontend.programs",
    "semcheck.checker.programs.results",
    "semcheck.checker.properties.registry",
    # what every child imported again on its own: the lowering, the program walk, the properties' and the
    # child's own modules (0.3 s CPU a child; none of them reads the environment or starts a backend)
    "semcheck.checker.run.child",
    "semcheck.checker.run.mode_worker",
    "semcheck._dependencies",
    "semcheck.checker.frontend.api",
    "semcheck.checker.frontend.lower",
    "semcheck.checker.frontend.lowerer",
    "semcheck.checker.frontend.symmetric_lowering",
    "semcheck.checker.frontend.rotation_certificate",
    "semcheck.checker.frontend.interpreter_lowering",
    "semcheck.checker.frontend.collective_ids",
    "semcheck.checker.frontend.size_bound",
    "semcheck.checker.frontend.concrete_inputs",
    "semcheck.checker.frontend.program_walk",
    "semcheck.checker.frontend.staged_trace",
    "semcheck.checker.programs.interpreter",
    "semcheck.checker.properties.races",
    "semcheck.checker.properties.deadlock",
    "semcheck.checker.properties.deadlock_explanation",
    "semcheck.checker.properties.confined",
    "semcheck.checker.properties.id_agreement",
    "semcheck.checker.properties.differences",
    "semcheck.checker.properties.followed_values",
    "semcheck.checker.parametric.int32_terms",
    "semcheck.checker.z3.ids",
    # what jax imports on a child's first compile and first device_put onto a mesh (0.02 to 0.05 s a child)
    "jaxlib.mlir.dialects.mhlo",
    "jax.experimental.multihost_utils",
)
"""What every child imports before it reads the kernel file (an import that fails is skipped)."""

VARYING = frozenset({"PYTEST_CURRENT_TEST", COMPILE_CACHE})
"""Variables that change from one call to the next in one process (pytest names the running test, the
command line its compile cache, `checker/frontend/compile_cache.py`) and that nothing imported when the server
starts reads: a change of them alone keeps children warm."""

SOCKET_PATH_MAX = 107
"""The longest Unix socket path Linux takes (sun_path holds 108 bytes with the terminating NUL)."""
SOCKET_NAME_ROOM = 40
"""What multiprocessing adds to the temporary directory for the server's socket: a `pymp-` directory
and a `listener-` file, 8 random characters each, with slashes (32 bytes), and a margin."""

_lock = threading.Lock()
_server: dict[str, Any] = {}  # the environment the forkserver started with, once it has


def context() -> tuple[Any, dict[str, str] | None]:
    """The multiprocessing context to start the next child with, and for a warm child the
    environment to take on (its server's differs from this process's at most in `VARYING`)."""
    if (os.environ.get("SEMCHECK_COLD_START") or not sys.platform.startswith("linux")
            or len(os.fsencode(tempfile.gettempdir())) + SOCKET_NAME_ROOM > SOCKET_PATH_MAX):
        return mp.get_context("spawn"), None
    env = dict(os.environ)
    key = ({k: v for k, v in env.items() if k not in VARYING}, sys.executable)
    with _lock:
        if not _server:
            ctx = mp.get_context("forkserver")
            ctx.set_forkserver_preload(list(PRELOAD))
            _server["key"] = key
            return ctx, env
        if _server["key"] == key:
            return mp.get_context("forkserver"), env
    return mp.get_context("spawn"), None


def shutdown() -> None:
    """Stop the server, and multiprocessing's resource tracker, before semcheck's command exits. Left
    alone each notices that semcheck is gone and exits by itself, the server only after finalising
    jax, about a second later: a harness that waits for the command's process group to empty would
    see them. The server keeps nothing worth a clean exit (every child it started has answered or
    been killed), so it is killed and reaped at once; the tracker is asked to stop (it then frees
    what a killed child left behind) and reaped. Both are CPython's private handles: there are no
    public ones."""
    from multiprocessing import forkserver, resource_tracker

    server = forkserver._forkserver
    pid = getattr(server, "_forkserver_pid", None)
    if pid is not None:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            server._stop()  # closes its end of the pipe and reaps it
        with _lock:
            _server.clear()
    with contextlib.suppress(OSError, AttributeError):
        resource_tracker._resource_tracker._stop()
