"""A second process that checks some DMA modes of a large program while this one checks the rest.

Machines have two cores and the checks are single-threaded Python, so on a
large kernel `semcheck verify` hands the hardware mode to this worker and
checks the interpreter's modes itself (those two share their lowering and
deadlock query, so they stay together). The worker is a plain subprocess
(the verify child is a daemonic multiprocessing process, which may not start
multiprocessing children); request and answer are pickles over its stdin and
stdout.

    python -m semcheck.checker.mode_worker   # reads (program, modes, properties, timeout_ms, deadline, known)
"""

from __future__ import annotations

import gc
import os
import pickle
import subprocess
import sys
import threading
from typing import IO, Any

# Below this many operations the checks take well under a second and a second
# process costs more (start-up, imports, pickling) than it saves.
MIN_OPS = 20_000

SHARED = (("symmetry",),)
"""Memo entries (`semcheck.checker.z3.memo`) handed to the worker: small, and independent of the mode."""


class ModeWorker:
    """One started worker, checking the given modes of one program."""

    def __init__(self, program: Any, modes: tuple[str, ...], properties: tuple[str, ...], *,
                 timeout_ms: int, deadline: float | None) -> None:
        from semcheck.checker.z3.memo import MEMO

        self.modes = modes
        # what this process computed of the program already and the worker's checks read too (the
        # program's symmetry, DR-5/DR-8): sent along rather than recomputed there
        known = {k: v for k, v in MEMO.table(program).items() if k in SHARED}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "semcheck.checker.mode_worker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        )
        assert self.proc.stdin is not None
        request = pickle.dumps((program, modes, tuple(properties), timeout_ms, deadline, known),
                               protocol=pickle.HIGHEST_PROTOCOL)
        # Written from a thread: the pipe takes the request only as fast as the worker, still
        # importing, reads it, and this process has its own modes to check meanwhile.
        self._feeder = threading.Thread(target=_feed, args=(self.proc.stdin, request), daemon=True)
        self._feeder.start()

    def result(self) -> dict[str, list]:
        """mode -> verdicts; raises RuntimeError if the worker failed."""
        assert self.proc.stdout is not None
        data = self.proc.stdout.read()
        code = self.proc.wait()
        self._feeder.join()
        if code != 0 or not data:
            raise RuntimeError(f"the mode worker exited with code {code}")
        status, payload = pickle.loads(data)
        if status != "ok":
            raise RuntimeError(f"the mode worker failed: {payload}")
        return payload


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


def main() -> int:
    from semcheck.checker.verify import check_program

    gc.disable()  # as in the verify child: short-lived, allocation-heavy
    from semcheck.checker.z3.memo import MEMO

    program, modes, properties, timeout_ms, deadline, known = pickle.load(sys.stdin.buffer)
    MEMO.table(program).update(known)
    try:
        # the verify child has tried the fold already: these modes are decided on the program itself
        out = ("ok", {m: check_program(program, m, properties, timeout_ms=timeout_ms, deadline=deadline, fold=False)
                      for m in modes})
    except Exception as e:  # noqa: BLE001 - reported to the verify child, which reports a crash
        out = ("error", f"{type(e).__name__}: {e}")
    sys.stdout.buffer.write(pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL))
    sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    code = main()
    # The verify child reads the answer up to end of file, which comes when this process exits;
    # freeing a large program's objects one by one at interpreter exit took a second at 256 devices.
    os._exit(code)
