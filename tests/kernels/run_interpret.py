"""Run an example kernel under Pallas TPU interpret mode and report what happened.

Usage as a script::

    python tests/kernels/run_interpret.py examples/ring_permute.py \
        --devices 4 --dma-mode on_wait --timeout 30

prints exactly one JSON line on stdout::

    {"outcome": "completed" | "hang" | "error",
     "error_type": ..., "error_message": ...,
     "nonzero_count_warnings": [...], "seconds": ..., ...}

Usage as a module: ``run_kernel(path, devices, dma_mode, timeout) -> dict``, or
``run_kernels(cases, devices, timeout)`` for several runs expected to complete, one after
another in one subprocess (jax starts once; the first run that does not complete ends it).

Every run happens in a subprocess, not the caller's, because

* the number of fake CPU devices is fixed by ``XLA_FLAGS`` before jax is
  imported, and
* a deadlocked kernel spins forever inside the interpreter; the only reliable
  way to stop it is to kill the whole process group.

The child loads the example file by path, calls ``build(devices,
dma_mode=...)`` (or, for a path ``file.py::name``, the file's builder ``name``
called the same way, e.g. a ``@semcheck.target`` that takes ``dma_mode``), runs ``fn(*args)`` and ``jax.block_until_ready`` on the
result, and reports back through a marker line on its stdout.  Lines the
interpreter prints for semaphores that are left with a non-zero count at
kernel exit are collected from the child's stdout, even when the run hangs or
fails afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

RESULT_MARKER = "@@SEMCHECK_INTERPRET_RESULT@@ "
RUN_MARKER = "@@SEMCHECK_INTERPRET_RUNNING@@"  # the child is past import and build: the kernel call starts
CASE_MARKER = "@@SEMCHECK_INTERPRET_CASE@@ "  # a batch child starts its case of this index

# The interpreter prints one line per device whose semaphores are not all zero
# when the kernel exits.
NONZERO_RE = re.compile(
    r"Semaphore (?P<sem>-?\d+) has non-zero count for (?P<device>\d+) "
    r"\(global core (?P<core>\d+)\) at kernel exit: (?P<count>-?\d+)"
)

# "SomeError: message" lines inside (possibly nested) tracebacks.
_EXC_LINE_RE = re.compile(
    r"^\s*(?:[\w.]+\.)?(?P<type>[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Warning))"
    r"(?::\s?(?P<msg>.*))?$"
)

# Wrapper exceptions that only say "something failed somewhere else".
_WRAPPER_TYPES = {"JaxRuntimeError", "XlaRuntimeError"}
_WRAPPER_MESSAGE_PREFIXES = (
    "Computation failed",
    "INTERNAL:",
    "CpuCallback error",
)

DMA_MODES = ("eager", "on_wait")


# --------------------------------------------------------------------------
# message helpers (pure functions, also used by tests)
# --------------------------------------------------------------------------


def innermost_error(text: str) -> tuple[str | None, str | None]:
    """Returns (type, message) of the innermost meaningful exception in `text`.

    Exceptions raised inside interpreter callbacks reach the caller wrapped in
    several layers (the XLA runtime error, a RuntimeError "Computation failed
    ... with exception:" carrying a formatted traceback, ...).  The original
    cause is the deepest "Type: message" line that is not one of the wrapper
    layers; when nothing else is found the outermost line is returned.
    """
    candidates: list[tuple[str, str]] = []
    for line in text.splitlines():
        m = _EXC_LINE_RE.match(line)
        if not m:
            continue
        etype, msg = m.group("type"), (m.group("msg") or "").strip()
        candidates.append((etype, msg))
    if not candidates:
        stripped = text.strip().splitlines()
        return None, (stripped[-1] if stripped else None)

    def is_wrapper(etype: str, msg: str) -> bool:
        if etype in _WRAPPER_TYPES:
            return True
        return any(msg.startswith(p) for p in _WRAPPER_MESSAGE_PREFIXES)

    meaningful = [c for c in candidates if not is_wrapper(*c)]
    # a device barrier another device's failure broke (ERR-7) is a consequence: the failure is the cause
    caused = [c for c in meaningful if c[0] != "BrokenBarrierError"]
    meaningful = caused or meaningful
    if meaningful:
        # Later lines are deeper in the chained traceback text.
        return meaningful[-1]
    return candidates[0]


def nonzero_count_warnings(stdout: str) -> list[str]:
    """The interpreter's exit-time 'non-zero count' lines, in print order."""
    return [m.group(0) for m in NONZERO_RE.finditer(stdout)]


def parse_nonzero_warning(line: str) -> dict[str, int] | None:
    m = NONZERO_RE.search(line)
    if not m:
        return None
    return {k: int(v) for k, v in m.groupdict().items()}


# --------------------------------------------------------------------------
# ground truth helpers (shared by make_ground_truth.py and the tests)
# --------------------------------------------------------------------------

GROUND_TRUTH_PATH = Path(__file__).resolve().with_name("ground_truth.json")
REPO_ROOT = Path(__file__).resolve().parents[2]


def load_ground_truth(path: str | os.PathLike | None = None) -> dict[str, Any]:
    with open(path or GROUND_TRUTH_PATH) as f:
        return json.load(f)


def case_key(path: str, devices: int, dma_mode: str, kwargs: dict | None = None) -> str:
    """Stable identifier of one run configuration, e.g.
    'examples/ring_permute.py|4|eager|{}'."""
    return f"{path}|{int(devices)}|{dma_mode}|{json.dumps(kwargs or {}, sort_keys=True)}"


def leak_pairs(warnings: list[str]) -> list[dict[str, int]]:
    """Unique (semaphore, count) pairs named by non-zero-count lines."""
    pairs = set()
    for w in warnings:
        d = parse_nonzero_warning(w)
        if d is not None:
            pairs.add((d["sem"], d["count"]))
    return [{"semaphore": s, "count": c} for s, c in sorted(pairs)]


def compare_to_ground_truth(
    report: dict[str, Any], case: dict[str, Any], example: dict[str, Any] | None = None
) -> list[str]:
    """Differences between a fresh `run_kernel` report and a ground-truth case.

    Warnings are compared loosely, because the interpreter's exit check is
    racy: each device checks only its own counts when *it* exits (a signal
    from a slower device may land later), and it prints only the first
    non-zero semaphore it finds, in set-iteration order.  So a report matches
    when it has warnings iff the ground truth has them, and every
    (semaphore, count) it names is one the ground truth saw or the example
    declares as a leak.
    """
    problems = []
    if report["outcome"] != case["outcome"]:
        problems.append(f"outcome {report['outcome']!r} != {case['outcome']!r}")
        return problems
    if case["outcome"] == "error":
        # Where several devices fail, which exception jax surfaces first can vary: the example declares the
        # root one and the others a run may surface instead (`also_surfaces`); any of them is the same run.
        same = {case.get("error_type")}
        if example and case.get("error_type") in (example.get("error_type"), *example.get("also_surfaces", ())):
            same |= {example.get("error_type"), *example.get("also_surfaces", ())}
        if report.get("error_type") not in same:
            problems.append(
                f"error_type {report.get('error_type')!r} != {case.get('error_type')!r}"
            )
        frag = case.get("error_fragment") or case.get("error_message") or ""
        if report.get("error_type") == case.get("error_type") and frag not in (report.get("error_message") or ""):
            problems.append(f"error message {report.get('error_message')!r} lacks {frag!r}")
    seen = leak_pairs(report.get("nonzero_count_warnings", []))
    allowed = {(p["semaphore"], p["count"]) for p in case.get("leaks_observed", [])}
    if example:
        allowed |= {(p["semaphore"], p["count"]) for p in example.get("expected_leaks", [])}
    if bool(seen) != bool(case.get("leaks_observed")):
        problems.append(
            f"non-zero-count warnings {report.get('nonzero_count_warnings')!r}, "
            f"ground truth {case.get('nonzero_count_warnings')!r}"
        )
    extra = [p for p in seen if (p["semaphore"], p["count"]) not in allowed]
    if extra:
        problems.append(f"unexpected leaked semaphores {extra!r}")
    if (
        case["outcome"] == "completed"
        and case.get("output_matches_reference") is not None
        and report.get("output_matches_reference") != case["output_matches_reference"]
    ):
        problems.append(
            f"output_matches_reference {report.get('output_matches_reference')!r} "
            f"!= {case['output_matches_reference']!r}"
        )
    return problems


# --------------------------------------------------------------------------
# child side
# --------------------------------------------------------------------------


def _load_module(path: str):
    import importlib.util

    p = Path(path).resolve()
    name = "semcheck_example_" + re.sub(r"\W", "_", p.stem)
    spec = importlib.util.spec_from_file_location(name, p)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def split_selector(path: str) -> tuple[str, str | None]:
    """`"file.py::name"` -> `("file.py", "name")`; a plain path selects `build`."""
    if "::" in str(path):
        file, _, name = str(path).rpartition("::")
        return file, (name or None)
    return str(path), None


def _set_device_count(devices: int) -> None:
    # Must happen before jax is imported anywhere in this process.
    flags = os.environ.get("XLA_FLAGS", "")
    flags = re.sub(r"--xla_force_host_platform_device_count=\d+", "", flags)
    os.environ["XLA_FLAGS"] = (
        flags + f" --xla_force_host_platform_device_count={devices}"
    ).strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")


def _child_main(path: str, devices: int, dma_mode: str, kwargs: dict[str, Any]) -> int:
    _set_device_count(devices)
    print(RESULT_MARKER + json.dumps(_run_case(path, devices, dma_mode, kwargs)), flush=True)
    # Threads of a failed interpreter run may still be blocked on barriers;
    # do not wait for them at interpreter shutdown.
    os._exit(0)


def _batch_child_main(cases: list[dict[str, Any]], devices: int) -> int:
    """Runs `cases` (each {"path", "dma_mode", "kwargs"}) one after another, each after a CASE_MARKER line.
    The first that does not complete ends the batch: a failed run may leave interpreter threads blocked."""
    _set_device_count(devices)
    for i, case in enumerate(cases):
        print(f"{CASE_MARKER}{i}", flush=True)
        result = _run_case(case["path"], devices, case["dma_mode"], case["kwargs"])
        print(RESULT_MARKER + json.dumps(result), flush=True)
        if result["status"] != "completed":
            break
    os._exit(0)


def _run_case(path: str, devices: int, dma_mode: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The child's run of one kernel: its RESULT_MARKER record."""
    result: dict[str, Any] = {"phase": "import"}
    t0 = time.monotonic()
    try:
        import jax
        import numpy as np

        file, name = split_selector(path)
        mod = _load_module(file)
        result["phase"] = "build"
        builder = getattr(mod, name or "build")
        fn, args = builder(devices, dma_mode=dma_mode, **kwargs)
        result["phase"] = "run"
        print(RUN_MARKER, flush=True)
        t_run = time.monotonic()
        out = jax.block_until_ready(fn(*args))
        result["run_seconds"] = round(time.monotonic() - t_run, 3)
        result["phase"] = "check"
        # a builder's own `reference` attribute, else the file's `reference` (for `build`)
        ref_fn = getattr(builder, "reference", None) or (
            None if name else getattr(mod, "reference", None))
        # a builder may loosen it (a reordered softmax is not bit-exact)
        tol = getattr(builder, "reference_tolerance", 1e-5)
        if ref_fn is not None:
            expected = ref_fn(*[np.asarray(a) for a in args], num_devices=devices)
            outs = out if isinstance(out, (tuple, list)) else (out,)
            exps = expected if isinstance(expected, (tuple, list)) else (expected,)
            ok = len(outs) == len(exps) and all(
                np.allclose(np.asarray(o), np.asarray(e), rtol=tol, atol=tol)
                for o, e in zip(outs, exps)
            )
            result["output_matches_reference"] = bool(ok)
        else:
            result["output_matches_reference"] = None
        result["phase"] = "done"
        result["status"] = "completed"
    except BaseException as e:  # noqa: BLE001 - we report everything
        import traceback

        text = "".join(traceback.format_exception(e))
        etype, msg = innermost_error(text)
        result["status"] = "error"
        result["outer_error_type"] = type(e).__name__
        result["error_type"] = etype or type(e).__name__
        result["error_message"] = msg
        result["traceback_tail"] = text[-4000:]
    result["child_seconds"] = round(time.monotonic() - t0, 3)
    sys.stdout.flush()
    return result


# --------------------------------------------------------------------------
# parent side
# --------------------------------------------------------------------------


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def _cpu_ticks(pid: int) -> int | None:
    """User + system CPU of process `pid` in clock ticks (Linux /proc), None where unreadable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return None


def _wait(proc: subprocess.Popen, out_f, timeout: float, idle: float | None) -> bool:
    """Waits for the child; True when it did not finish. With `idle`, a child that is running the
    kernel (past RUN_MARKER) and has used no CPU for `idle` seconds is taken to hang: every thread of
    a deadlocked interpreter sleeps on a lock, so this ends a hang without waiting out `timeout`."""
    if idle is None or _cpu_ticks(proc.pid) is None:
        try:
            proc.wait(timeout=timeout)
            return False
        except subprocess.TimeoutExpired:
            return True
    start = time.monotonic()
    running, ticks, since = False, None, start
    while time.monotonic() - start < timeout:
        try:
            proc.wait(timeout=0.2)
            return False
        except subprocess.TimeoutExpired:
            pass
        if not running:
            # pread: the child writes through the same open file, so moving its offset could clobber its output
            fd = out_f.fileno()
            running = RUN_MARKER.encode() in os.pread(fd, os.fstat(fd).st_size, 0)
            continue
        now, t = time.monotonic(), _cpu_ticks(proc.pid)
        if t != ticks:
            ticks, since = t, now
        elif now - since >= idle:
            return True
    return True


def _spawn(args: list[str], devices: int, timeout: float, idle: float | None,
           python: str | None = None) -> tuple[str, str, bool, int | None, float]:
    """Runs this file as a child with `args` in its own process group, `devices` host devices: its stdout,
    stderr, whether it timed out (or hung, see `_wait`), its exit code and the seconds it took."""
    cmd = [python or sys.executable, str(Path(__file__).resolve()), *args]
    env = dict(os.environ)
    flags = re.sub(
        r"--xla_force_host_platform_device_count=\d+", "", env.get("XLA_FLAGS", "")
    )
    env["XLA_FLAGS"] = (
        flags + f" --xla_force_host_platform_device_count={int(devices)}"
    ).strip()
    env["JAX_PLATFORMS"] = "cpu"
    env.setdefault("PYTHONUNBUFFERED", "1")

    t0 = time.monotonic()
    with tempfile.TemporaryFile("w+") as out_f, tempfile.TemporaryFile("w+") as err_f:
        proc = subprocess.Popen(
            cmd,
            stdout=out_f,
            stderr=err_f,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # own process group, so we can kill it all
        )
        timed_out = _wait(proc, out_f, timeout, idle)
        # Kill the group in all cases: stray helper processes must not survive.
        _kill_group(proc)
        seconds = round(time.monotonic() - t0, 3)
        out_f.seek(0)
        stdout = out_f.read()
        err_f.seek(0)
        stderr = err_f.read()
    return stdout, stderr, timed_out, proc.returncode, seconds


def _report(path: str, devices: int, dma_mode: str, timeout: float, stdout: str, stderr: str,
            timed_out: bool, returncode: int | None, seconds: float) -> dict[str, Any]:
    """The report of one run from the child's output about it."""
    child: dict[str, Any] | None = None
    for line in stdout.splitlines():
        if line.startswith(RESULT_MARKER):
            child = json.loads(line[len(RESULT_MARKER):])

    report: dict[str, Any] = {
        "path": path,
        "devices": int(devices),
        "dma_mode": dma_mode,
        "timeout": timeout,
        "outcome": None,
        "error_type": None,
        "error_message": None,
        "nonzero_count_warnings": nonzero_count_warnings(stdout),
        "seconds": seconds,
    }
    if child is not None:
        report["outcome"] = child["status"]
        report["error_type"] = child.get("error_type")
        report["error_message"] = child.get("error_message")
        report["output_matches_reference"] = child.get("output_matches_reference")
        report["phase"] = child.get("phase")
        if child["status"] == "error":
            report["outer_error_type"] = child.get("outer_error_type")
            report["traceback_tail"] = child.get("traceback_tail")
    elif timed_out:
        report["outcome"] = "hang"
    else:
        # The child died without reporting (crash, abort, os-level kill).
        report["outcome"] = "error"
        report["error_type"] = "ChildProcessDied"
        etype, msg = innermost_error(stderr)
        report["error_message"] = (
            f"exit code {returncode}"
            + (f"; {etype}: {msg}" if etype else (f"; {msg}" if msg else ""))
        )
    report["stderr_tail"] = stderr[-2000:]
    return report


def _child_path(path: str | os.PathLike) -> str:
    file, name = split_selector(str(path))
    return str(Path(file).resolve()) + (f"::{name}" if name else "")


def run_kernel(
    path: str | os.PathLike,
    devices: int,
    dma_mode: str = "eager",
    timeout: float = 30.0,
    *,
    kwargs: dict[str, Any] | None = None,
    python: str | None = None,
    idle: float | None = None,
) -> dict[str, Any]:
    """Runs one example in a subprocess and classifies the outcome.

    Returns a dict with at least: outcome ("completed" | "hang" | "error"),
    error_type, error_message, nonzero_count_warnings, seconds. `idle`: see `_wait` (for runs
    expected to hang; a run expected to complete waits out `timeout`).
    """
    if dma_mode not in DMA_MODES:
        raise ValueError(f"dma_mode must be one of {DMA_MODES}, got {dma_mode!r}")
    path = _child_path(path)
    args = ["--child", path, "--devices", str(int(devices)), "--dma-mode", dma_mode,
            "--kwargs", json.dumps(kwargs or {})]
    return _report(path, devices, dma_mode, timeout, *_spawn(args, devices, timeout, idle, python))


def run_kernels(cases: list[tuple[str | os.PathLike, str, dict[str, Any]]], devices: int,
                timeout: float = 30.0) -> list[dict[str, Any]]:
    """Runs `cases` ((path, dma_mode, kwargs), each expected to complete) one after another in one child
    (jax starts once), each reported as `run_kernel` reports it, its stdout the lines printed during its
    run. A case the batch did not reach, because one before it did not complete, runs on its own.
    Not for runs that may hang: a hang would take the rest of the batch with it."""
    for _, mode, _ in cases:
        if mode not in DMA_MODES:
            raise ValueError(f"dma_mode must be one of {DMA_MODES}, got {mode!r}")
    batch = [{"path": _child_path(p), "dma_mode": m, "kwargs": kw or {}} for p, m, kw in cases]
    args = ["--child-batch", json.dumps(batch), "--devices", str(int(devices))]
    stdout, stderr, timed_out, returncode, seconds = _spawn(args, devices, timeout * len(cases), None)
    parts = stdout.split(CASE_MARKER)[1:]
    reports = []
    for i, (case, (path, mode, kw)) in enumerate(zip(batch, cases)):
        part = parts[i].partition("\n")[2] if i < len(parts) else ""
        if RESULT_MARKER not in part:  # not reached, or the child died in it: on its own
            reports.append(run_kernel(path, devices, mode, timeout, kwargs=kw))
            continue
        reports.append(_report(case["path"], devices, mode, timeout, part, "", False, returncode, seconds))
    return reports


def _main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("path", nargs="?")
    ap.add_argument("--devices", type=int, default=2)
    ap.add_argument("--dma-mode", choices=DMA_MODES, default="eager")
    ap.add_argument("--timeout", type=float, default=30.0)
    ap.add_argument("--kwargs", default="{}", help="JSON dict of extra build() kwargs")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--child-batch", help=argparse.SUPPRESS)
    ap.add_argument("--verbose", action="store_true",
                    help="also print traceback/stderr tails")
    ns = ap.parse_args(argv)
    if ns.child_batch:
        return _batch_child_main(json.loads(ns.child_batch), ns.devices)
    kwargs = json.loads(ns.kwargs)
    if ns.child:
        return _child_main(ns.path, ns.devices, ns.dma_mode, kwargs)
    rep = run_kernel(ns.path, ns.devices, ns.dma_mode, ns.timeout, kwargs=kwargs)
    if not ns.verbose:
        rep.pop("traceback_tail", None)
        rep.pop("stderr_tail", None)
    print(json.dumps(rep))
    return 0


if __name__ == "__main__":
    sys.exit(_main())
