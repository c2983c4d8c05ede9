"""A second process that checks some DMA modes of a large program while this one checks the rest.

Machines have two cores and the checks are single-threaded Python, so on a
large kernel `semcheck verify` hands the hardware mode to this worker and
checks the interpreter's modes itself (those two share their lowering and
deadlock query, so they stay together).

On Linux the worker is a fork of this process: it starts with the program's
analysis as computed so far (`checker.properties.analysis`: its symmetry, its fold), with
nothing to import, pickle or unpickle (bench/README.md has what that saves).
It runs only semcheck's own
model and Z3 code, never jax, whose threads a fork does not carry. Elsewhere
(and if fork fails) it is a plain subprocess (the verify child is a daemonic
multiprocessing process, which may not start multiprocessing children), fed
the program as a pickle over its stdin. Either way the answer is a pickle of
the verdicts, read from a pipe.

    python -m semcheck.checker.run.mode_worker_main   # reads (program, modes, properties, timeout_ms, deadline, fold, finish, also, known)

The check itself is handed in (`check`: `checking.check_program`), so that this module, which the
checks use, does not import them back.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import threading
import warnings
from collections.abc import Callable
from typing import IO, Any

# Below this many operations the checks take well under a second and a second
# process costs more (start-up, imports, pickling) than it saves.
MIN_OPS = 20_000

SHARED = ("symmetry",)
"""Facts of the program's analysis a subprocess worker is handed when known: small, independent of the mode."""


class ModeWorker:
    """One started worker, checking the given modes of one program."""

    def __init__(self, analysis: Any, modes: tuple[str, ...], properties: tuple[str, ...], *, check: Callable,
                 timeout_ms: int, deadline: float | None, fork: bool | None = None, fold: bool = False,
                 finish: Callable | None = None, also: Callable | None = None) -> None:
        """`analysis`: the program's (`checker.properties.analysis.Analysis`), or the program itself. `check`:
        `checking.check_program` (a forked worker calls it; a spawned one imports it). `fold`: the
        worker decides its modes as `check_program` does with the fold (a Symmetric's whole check, RUN-15);
        without it, on the program itself (the verify child tried the fold already). `finish(verdict, program)`:
        applied there to each verdict before it is sent (RUN-63: REP-34's naming, off this process's path); a
        module-level function, so that a spawned worker is handed it too. `also(analysis)`: computed there once
        the checks are done, its value kept as `extra` (RUN-65: the program's exposures, off this process's path);
        None there when it raises, for the caller to compute it again (and meet the same error)."""
        from semcheck.checker.properties.analysis import Analysis

        if not isinstance(analysis, Analysis):
            analysis = Analysis(analysis)
        self.modes = modes
        self.check = check
        self.finish = finish  # what the worker applies to each verdict before sending it
        self.extra: Any = None  # what `also` gave there, once `result` has read the answer
        self.proc: subprocess.Popen | None = None
        self.pid: int | None = None
        request = (analysis, modes, tuple(properties), timeout_ms, deadline, fold, finish, also)
        if forks(fork):
            try:
                self._fork(request)
                return
            except OSError:
                pass  # no fork: a subprocess
        self._spawn(analysis, request)

    def _fork(self, request: tuple) -> None:
        read, write = os.pipe()
        with warnings.catch_warnings():
            # Python and jax warn that a fork of a threaded process may deadlock in the child: jax's
            # threads hold locks of jax's own, and the child never calls into jax (module docstring)
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.simplefilter("ignore", RuntimeWarning)
            pid = os.fork()
        if pid == 0:  # the worker: never returns into the caller's code
            code = 1
            try:
                os.close(read)
                answer = pickle.dumps(answer_of(self.check, *request), protocol=pickle.HIGHEST_PROTOCOL)
                with os.fdopen(write, "wb") as out:
                    out.write(answer)
                code = 0
            finally:
                os._exit(code)  # no interpreter teardown: freeing a large program object by object is slow
        os.close(write)
        self.pid = pid
        self._answer = os.fdopen(read, "rb")

    def _spawn(self, analysis: Any, request: tuple) -> None:
        # what this process computed of the program already and the worker's checks read too (the
        # program's symmetry, DR-5/DR-8): sent along rather than recomputed there
        known = {k: analysis.__dict__[k] for k in SHARED if k in analysis.__dict__}
        request = (analysis.program, *request[1:])
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "semcheck.checker.run.mode_worker_main"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        data = pickle.dumps((*request, known), protocol=pickle.HIGHEST_PROTOCOL)
        # Written from a thread: the pipe takes the request only as fast as the worker, still
        # importing, reads it, and this process has its own modes to check meanwhile.
        self._feeder: threading.Thread | None = threading.Thread(
            target=_feed, args=(self.proc.stdin, data), daemon=True)
        self._feeder.start()
        self._answer = self.proc.stdout

    def kill(self) -> None:
        """Stop the worker (its answer is then missing: `result` raises)."""
        if self.proc is not None:
            self.proc.kill()
        elif self.pid is not None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def result(self) -> dict[str, list]:
        """mode -> verdicts; raises RuntimeError if the worker failed."""
        data = self._answer.read()
        self._answer.close()
        if self.proc is not None:
            code = self.proc.wait()
            if self._feeder is not None:
                self._feeder.join()
        else:
            assert self.pid is not None
            _, status = os.waitpid(self.pid, 0)
            code = os.waitstatus_to_exitcode(status)
        if code != 0 or not data:
            raise RuntimeError(f"the mode worker exited with code {code}")
        status_, payload, *extra = pickle.loads(data)
        if status_ != "ok":
            raise RuntimeError(f"the mode worker failed: {payload}")
        self.extra = extra[0]
        return payload


def forks(fork: bool | None = None) -> bool:
    """Whether a worker starts as a fork of this process (`fork` None: on Linux), with what it holds."""
    return fork if fork is not None else sys.platform.startswith("linux")


def answer_of(check: Callable, analysis: Any, modes: tuple[str, ...], properties: tuple[str, ...], timeout_ms: int,
              deadline: float | None, fold: bool = False, finish: Callable | None = None,
              also: Callable | None = None) -> tuple:
    """("ok", mode -> verdicts, what `also` gives), or ("error", what went wrong) for the caller to report as a
    crash. `finish`: applied to each verdict with the program; `also`: to the analysis, after the checks
    (`ModeWorker`)."""
    try:
        analysis.modes = modes
        # without `fold` the verify child has tried the fold already: these modes are decided on the program
        out = {m: check(analysis.program, m, properties, timeout_ms=timeout_ms, deadline=deadline, fold=fold,
                        analysis=analysis) for m in modes}
        if finish is not None:
            out = {m: [finish(v, analysis.program) for v in vs] for m, vs in out.items()}
        extra = None
        if also is not None:
            try:
                extra = also(analysis)
            except Exception:  # noqa: BLE001 - the caller computes it again, and meets what it raises there
                extra = None
        return ("ok", out, extra)
    except Exception as e:  # noqa: BLE001 - reported to the verify child, which reports a crash
        return ("error", f"{type(e).__name__}: {e}")


def _feed(pipe: IO[bytes], data: bytes) -> None:
    try:
        pipe.write(data)
        pipe.close()
    except (OSError, ValueError):
        pass  # the worker died at start-up: result() says so


def split_modes(num_ops: int, modes: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(modes to check here, modes for a worker): hardware goes to a worker on large programs."""
    if num_ops < MIN_OPS or "hardware" not in modes or len(modes) < 2 or (os.cpu_count() or 1) < 2:
        return modes, ()
    return tuple(m for m in modes if m != "hardware"), ("hardware",)
