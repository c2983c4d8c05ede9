"""Running SPIN on a Promela rendering (`oracles/spin/promela.py`) and reading pan's answer.

`run_spin` needs of a rendering only its `text`, `max_steps` (a bound on any run's length, for
pan's depth) and `vector_bytes` (a bound on the state vector).
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import shutil
import subprocess
import tempfile
import time


# --- running SPIN ---------------------------------------------------------------------------


@dataclasses.dataclass
class SpinResult:
    """What SPIN said about one rendering.

    `verdict`: "deadlock" (an invalid end state was found), "error" (an
    assertion, a static failure, was reached: some run fails), "deadlock-free"
    (the search completed without errors: every run completes), or "unknown"
    (out of memory, time, or depth; `reason` says which). pan stops at its
    first error, so a program with runs of both kinds gets either answer.
    """

    verdict: str
    reason: str = ""
    states_stored: int | None = None
    transitions: int | None = None
    depth: int | None = None
    memory_mb: float | None = None
    seconds: dict[str, float] = dataclasses.field(default_factory=dict)
    output: str = ""


def spin_available() -> bool:
    """Whether `spin` and a C compiler are on PATH."""
    return shutil.which("spin") is not None and shutil.which(os.environ.get("CC", "gcc")) is not None


def _run(cmd: list[str], cwd: str, timeout: float | None) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def _num(pattern: str, text: str, cast=int):
    m = re.search(pattern, text)
    return cast(m.group(1)) if m else None


def run_spin(
    rendering: "Rendering",  # noqa: F821 - oracles.spin.promela.Rendering, by its fields
    *,
    workdir: str | None = None,
    timeout: float | None = None,
    memlim_mb: int = 8192,
    cflags: tuple[str, ...] = ("-O2",),
    pan_flags: tuple[str, ...] = (),
) -> SpinResult:
    """Check `rendering` with SPIN in safety mode (default partial-order reduction).

    `spin -a`, then `cc -O2 -DSAFETY -DMEMLIM=memlim_mb -DVECTORSZ=...`, then
    `./pan -m<depth>` with a depth bound no run can exceed. `timeout` bounds
    the three steps together (subprocess.TimeoutExpired propagates).
    """
    own = workdir is None
    wd = tempfile.mkdtemp(prefix="semcheck-spin-") if own else workdir
    deadline = None if timeout is None else time.monotonic() + timeout

    def left() -> float | None:
        return None if deadline is None else max(0.1, deadline - time.monotonic())

    secs: dict[str, float] = {}
    try:
        with open(os.path.join(wd, "model.pml"), "w", encoding="utf-8") as f:
            f.write(rendering.text)
        t = time.perf_counter()
        p = _run(["spin", "-a", "model.pml"], wd, left())
        secs["spin_a"] = round(time.perf_counter() - t, 4)
        if p.returncode != 0:
            return SpinResult("unknown", f"spin -a failed: {(p.stdout + p.stderr).strip()[-500:]}", seconds=secs,
                              output=p.stdout + p.stderr)
        vectorsz = max(1024, 1 << math.ceil(math.log2(rendering.vector_bytes * 2)))
        cc = os.environ.get("CC", "gcc")
        t = time.perf_counter()
        p = _run([cc, *cflags, "-DSAFETY", f"-DMEMLIM={int(memlim_mb)}", f"-DVECTORSZ={vectorsz}",
                  "-o", "pan", "pan.c"], wd, left())
        secs["compile"] = round(time.perf_counter() - t, 4)
        if p.returncode != 0:
            return SpinResult("unknown", f"compiling pan.c failed: {p.stderr.strip()[-500:]}", seconds=secs,
                              output=p.stdout + p.stderr)
        depth = 2 * rendering.max_steps + 1000
        t = time.perf_counter()
        p = _run(["./pan", f"-m{depth}", *pan_flags], wd, left())
        secs["pan"] = round(time.perf_counter() - t, 4)
        return _parse_pan(p.stdout + p.stderr, secs)
    finally:
        if own:
            shutil.rmtree(wd, ignore_errors=True)


def _parse_pan(text: str, secs: dict[str, float]) -> SpinResult:
    r = SpinResult("unknown", seconds=secs, output=text)
    r.states_stored = _num(r"(\d+) states, stored", text)
    r.transitions = _num(r"(\d+) transitions \(= stored\+matched\)", text)
    r.depth = _num(r"depth reached (\d+)", text)
    r.memory_mb = _num(r"([\d.]+)\s+total actual memory usage", text, float)
    errors = _num(r"errors: (\d+)", text)
    if "assertion violated" in text and errors:
        r.verdict = "error"  # a run reaches a static failure (the rendering's assert(false))
    elif "invalid end state" in text and errors:
        r.verdict = "deadlock"
    elif "out of memory" in text or "MEMLIM" in text or "memory limit" in text.lower():
        r.reason = "pan ran out of memory (-DMEMLIM)"
    elif "max search depth too small" in text:
        r.reason = "pan's search depth bound was too small"
    elif errors:
        r.reason = "pan reported an error other than an invalid end state"
    elif errors == 0:
        r.verdict = "deadlock-free"
    else:
        r.reason = "could not read pan's output"
    return r
