"""Verification runs: kernel file -> configurations -> verdicts.

Importing and tracing run the user's code, so each device count is handled
in a fresh child process (jax must be provisioned with enough host devices
before it initialises, and a kernel that hangs or crashes must not take
semcheck with it). The child sends plain data back over a pipe, as it goes:

    ("ready",)                      jax, z3 and semcheck are imported
    ("targets", [name, ...])        the kernel file is imported
    ("result", Result)              one target x DMA mode, all properties
    ("unsupported", name, msg, loc) a target the front end cannot lower
    ("deps", Dependencies)          what the import and `build` read (for the result cache)
    ("done",)
    ("input" | "crash", ..., traceback)   and nothing after it

`--timeout` counts from "ready": semcheck's own start-up (importing jax) is
not the user's time. When it runs out the child is killed and every
(target, mode) it had not answered for becomes `unknown` -- never proved.
"""

from __future__ import annotations

import ast
import dataclasses
import gc
import math
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from semcheck.checker.properties import BY_ID, IDS
from semcheck.checker.verdict import Verdict, Witness
from semcheck.model.ops import DMA_MODES, Loc

STARTUP_LIMIT = 300.0
"""Seconds a child may take to import jax, z3 and semcheck (not counted in --timeout)."""
GRACE = 2.0
"""At most this many seconds past --timeout (a tenth of it, at least half a second) the child
gets to send the verdicts z3 gave up on before it is killed."""
MAX_DEVICES = 1024
DEFAULT_DEVICES = (2, 4, 8)


@dataclasses.dataclass(frozen=True)
class Request:
    path: str
    target: str | None
    entry: str | None
    devices: int
    cores: int | None
    modes: tuple[str, ...]
    timeout: float
    properties: tuple[str, ...] = IDS
    fold: bool = True  # decide repeating programs on their fold first (RUN-7)
    examples: int = 20  # inputs generated for a target with `inputs=` (checker/generated_inputs.py)


@dataclasses.dataclass
class Result:
    """Verdicts of one target x devices x mode."""

    target: str
    devices: int
    dma_mode: str
    verdicts: list[Verdict]
    program: dict[str, Any] = dataclasses.field(default_factory=dict)
    seconds: dict[str, float] = dataclasses.field(default_factory=dict)
    examples: int | None = None  # a target with generated inputs: how many were verified in full
    cached: bool = False  # answered from the result cache (`semcheck._cache`), not verified in this run


@dataclasses.dataclass(frozen=True)
class Note:
    """Why some verdicts are unknown without a property saying so: a timeout or an unsupported construct.

    The CLI prints each as one line on stderr; the verdicts carry the reason too.
    """

    code: str  # "timeout" | "unsupported"
    message: str
    devices: int
    loc: Loc | None = None


@dataclasses.dataclass
class Findings:
    """The results and notes one device count (or a merged sweep) produced."""

    results: list[Result]
    notes: list[Note] = dataclasses.field(default_factory=list)
    # what importing the kernel file and running `build` read (`semcheck._dependencies`); None
    # when the child did not finish, so the result cache does not keep the answer
    dependencies: Any = None


class InputError(Exception):
    """Bad input: the CLI prints one line and exits 2."""

    def __init__(self, code: str, message: str, loc: Loc | None = None, *, debug_text: str = "",
                 file: str | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.loc = code, message, loc
        self.debug_text = debug_text  # the child's traceback, shown with --debug
        self.file = file  # the kernel file, named when neither the message nor loc does

    def one_line(self) -> str:
        where = ""
        if self.loc is not None and self.loc.line:
            if f"{self.loc.file}:{self.loc.line}" not in self.message:
                where = f" ({self.loc.file}:{self.loc.line})"
        elif self.file and os.path.basename(self.file) not in self.message:
            where = f" ({self.file})"
        return relpaths(f"{self.code}: {self.message}{where}")


def relpaths(text: str) -> str:
    """Paths under the working directory as the user would type them."""
    cwd = os.getcwd()
    return text.replace(cwd + os.sep, "") if cwd != os.sep else text


# --- the child --------------------------------------------------------------------


def check_program(program, mode: str, properties=IDS, *, timeout_ms: int = 30_000,
                  deadline: float | None = None, fold: bool = True) -> list[Verdict]:
    """All requested properties of one lowered program under one DMA mode.

    With `fold`, a program whose devices repeat is first decided on its fold
    (spec RUN-7): what is proved there is proved; everything else is decided
    on the program itself. With a `deadline` (a `time.monotonic()` value)
    each property gets the time left, and those reached after it are
    unknown without being tried.
    """
    from semcheck.checker.folding import program_fold, proved_on_fold

    from semcheck.checker.failing_runs import fold_unsafe

    folded = program_fold(program) if fold and not fold_unsafe(program, mode) else None
    out = []
    for p in properties:
        budget = _budget(timeout_ms, deadline)
        v = None
        if budget is not None and folded is not None:
            v = proved_on_fold(folded, p, mode, timeout_ms=budget)
            if v is None:
                budget = _budget(timeout_ms, deadline)
        if v is None:
            if budget is None:
                v = Verdict(p, "unknown", reason="timeout: --timeout ran out before this property was checked")
            else:
                v = BY_ID[p].check(program, mode, timeout_ms=budget)
        out.append(v)
    return out


def _budget(timeout_ms: int, deadline: float | None) -> int | None:
    """Milliseconds a check may take: the timeout, or what is left before the deadline (None: nothing)."""
    if deadline is None:
        return timeout_ms
    left = deadline - time.monotonic()
    if left <= 0:
        return None
    return max(1, min(timeout_ms, int(left * 1000)))


def _exposures(program, fold: bool) -> tuple:
    """The interpreter divergences the program exercises (for the report's "modes differ" notes).

    A fold has the same operations as the program on fewer devices, so it is read instead when
    there is one: the skeleton's fold, or (with --no-fold) the fold of the program's symmetry when
    the race check found one (the notes are static; no verdict rests on them). The skeleton drops
    accesses, so the views the interpreter cannot index (ERR-9) are read off the program."""
    from semcheck.checker.differences import exposures
    from semcheck.checker.failing_runs import view_ops
    from semcheck.checker.folding import program_fold
    from semcheck.checker.z3.memo import MEMO

    folded = program_fold(program) if fold else MEMO.table(program).get(("symmetry",), (0, None))[1]
    return exposures(folded.program if folded is not None else program, views=view_ops(program))


def _watch_parent(parent_pid: int) -> None:
    """A child whose parent died (killed -9, say) must not linger."""
    while True:
        time.sleep(1.0)
        if os.getppid() != parent_pid:
            os._exit(3)


def _check_modes(program, req: Request, deadline: float) -> dict[str, tuple[list[Verdict], float]]:
    """mode -> (verdicts, seconds) for every requested mode of one program.

    A program whose devices repeat is first checked on its fold (RUN-7):
    what is proved there is proved; the rest of each mode (a property not
    proved on the fold, or one whose fold proofs do not carry over, such as
    race-free) is checked on the program itself. On a large program the
    hardware mode then goes to a second process
    (`semcheck.checker.mode_worker`) while this one checks the others; if
    that process cannot start or fails, its modes are checked here.
    """
    from semcheck.checker.folding import program_fold, proved_on_fold
    from semcheck.checker.mode_worker import ModeWorker, split_modes

    timeout_ms = int(req.timeout * 1000)
    on_fold: dict[str, dict[str, Verdict]] = {m: {} for m in req.modes}
    spent: dict[str, float] = {m: 0.0 for m in req.modes}
    t = time.monotonic()  # finding the fold counts towards the first mode's time
    fold = program_fold(program) if req.fold else None
    if fold is not None:
        from semcheck.checker.failing_runs import fold_unsafe

        # what the fold does not prove is decided on the program (witnesses name its devices)
        for mode in req.modes:
            if fold_unsafe(program, mode):  # the fold's skeleton lacks the accesses that raise (ERR-9)
                continue
            for p in req.properties:
                budget = _budget(timeout_ms, deadline)
                v = proved_on_fold(fold, p, mode, timeout_ms=budget) if budget is not None else None
                if v is not None:
                    on_fold[mode][p] = v
            spent[mode] = time.monotonic() - t
            t = time.monotonic()
    missing = {m: tuple(p for p in req.properties if p not in on_fold[m]) for m in req.modes}
    rest = tuple(m for m in req.modes if missing[m])
    wanted = tuple(p for p in req.properties if any(p in missing[m] for m in rest))
    here, there = split_modes(program.num_ops, rest)
    t0 = time.monotonic()
    worker = None
    if there:
        try:
            worker = ModeWorker(program, there, wanted, timeout_ms=timeout_ms, deadline=deadline)
        except OSError as e:
            print(f"semcheck: no mode worker ({e}); checking all modes in this process", file=sys.stderr)
            here, there = rest, ()

    def locally(mode: str) -> tuple[list[Verdict], float]:
        t = time.monotonic()
        return check_program(program, mode, missing[mode], timeout_ms=timeout_ms, deadline=deadline,
                             fold=False), time.monotonic() - t

    from semcheck.checker.races import share_modes

    share_modes(program, here)  # the interpreter's modes checked here share race-free's run (DR-7)
    full: dict[str, tuple[list[Verdict], float]] = {mode: locally(mode) for mode in here}
    if worker is not None:
        try:
            # the worker ran alongside since t0
            full.update({mode: (v, time.monotonic() - t0) for mode, v in worker.result().items()})
        except RuntimeError as e:
            print(f"semcheck: {e}; checking {', '.join(there)} in this process", file=sys.stderr)
            full.update({mode: locally(mode) for mode in there})
    done: dict[str, tuple[list[Verdict], float]] = {}
    for mode in req.modes:
        checked, seconds = full.get(mode, ([], 0.0))
        by_prop = {**on_fold[mode], **{v.property: v for v in checked}}
        done[mode] = ([by_prop[p] for p in req.properties], spent[mode] + seconds)
    return done


def _generated_results(t, req: Request, deadline: float, recorder) -> list[Result]:
    """A target with `inputs=`: up to `req.examples` generated inputs, the first violation shrunk
    (`checker/generated_inputs.py`); raises `GeneratedInputRaised` when the kernel raises on one."""
    from semcheck.checker.frontend import lower_target
    from semcheck.checker.frontend.errors import Unsupported
    from semcheck._dependencies import observe
    from semcheck.checker.generated_inputs import aggregate, explore

    def lowered(value, text: str):
        with observe(recorder):
            return lower_target(t.with_input(value, text), req.devices, cores=req.cores)

    def verify_input(value, text: str) -> list[Result]:
        t0 = time.monotonic()
        try:
            kernels = lowered(value, text)
        except Unsupported as e:
            return _unknown_results(req, [t.name], f"unsupported {str(e).removeprefix('unsupported ')}")
        t_lower = time.monotonic() - t0
        out = []
        for k in kernels:
            name = t.name if len(kernels) == 1 else f"{t.name}#{k.index}"
            done = _check_modes(k.program, req, deadline)
            for mode in req.modes:
                verdicts, seconds = done[mode]
                out.append(Result(
                    target=name, devices=req.devices, dma_mode=mode, verdicts=verdicts,
                    program={"ops": k.program.num_ops, "cores": k.program.topology.num_cores,
                             "collective_id": k.program.collective_id,
                             "exposures": _exposures(k.program, req.fold)},
                    seconds={"trace_and_lower": round(t_lower, 4), "check": round(seconds, 4)},
                ))
        return out

    def check_key(value, text: str, key) -> Verdict | None:
        name, mode, prop = key
        try:
            kernels = lowered(value, text)
        except Unsupported:
            return None
        for k in kernels:
            if (t.name if len(kernels) == 1 else f"{t.name}#{k.index}") == name:
                (v,) = check_program(k.program, mode, (prop,), timeout_ms=int(req.timeout * 1000),
                                     deadline=deadline, fold=req.fold)
                return v
        return None

    found = explore(t.inputs, req.examples, verify_input, check_key, deadline)
    if found.raised is not None:
        raise found.raised
    return aggregate(found, req.modes, req.properties)


def _child(req: Request, conn, parent_pid: int) -> None:
    """Runs in a fresh process: provision devices, import, trace, lower, check."""
    # The kernel's own prints must not end up in a JSON/SARIF report on stdout,
    # and importing its neighbours must not leave __pycache__ in the user's tree.
    os.dup2(2, 1)
    sys.dont_write_bytecode = True
    try:
        os.setpgrp()  # so that the parent can kill whatever the kernel spawned too
    except OSError:
        pass
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True).start()
    from semcheck._dependencies import install, observe

    recorder = install()  # before semcheck sets any variable: the kernel's environment is the parent's
    try:
        from semcheck.checker.frontend import lower_target, provision_devices
        from semcheck.checker.frontend.errors import Unsupported
        from semcheck.checker.frontend.targets import load_targets

        provision_devices(req.devices)
        import jax  # noqa: F401 - start-up, not the user's time
        import z3  # noqa: F401

        import semcheck.checker.properties  # noqa: F401

        # This process lives for one device count. Checking allocates millions
        # of small, mostly acyclic objects; the cyclic collector re-scanning
        # them is a third of the time at 256 devices, and peak memory is the
        # same without it (measured: 2.0 GB either way), so it stays off.
        gc.disable()
        conn.send(("ready",))
        start = time.monotonic()
        deadline = start + req.timeout
        with observe(recorder):
            targets = load_targets(req.path, entry=req.entry, target=req.target)
        conn.send(("targets", [t.name for t in targets]))
        for t in targets:
            if t.inputs is not None:  # inputs drawn from a hypothesis strategy
                for r in _generated_results(t, req, deadline, recorder):
                    conn.send(("result", r))
                continue
            t0 = time.monotonic()
            try:
                with observe(recorder):
                    kernels = lower_target(t, req.devices, cores=req.cores)
            except Unsupported as e:
                conn.send(("unsupported", t.name, str(e), e.loc))
                continue
            t_lower = time.monotonic() - t0
            for k in kernels:
                name = t.name if len(kernels) == 1 else f"{t.name}#{k.index}"
                done = _check_modes(k.program, req, deadline)
                exposed = _exposures(k.program, req.fold)
                for mode in req.modes:
                    verdicts, seconds = done[mode]
                    conn.send(("result", Result(
                        target=name,
                        devices=req.devices,
                        dma_mode=mode,
                        verdicts=verdicts,
                        program={"ops": k.program.num_ops, "cores": k.program.topology.num_cores,
                                 "collective_id": k.program.collective_id, "exposures": exposed},
                        seconds={"trace_and_lower": round(t_lower, 4), "check": round(seconds, 4)},
                    )))
        conn.send(("deps", recorder.dependencies()))
        conn.send(("done",))
    except BaseException as e:  # noqa: BLE001 - everything goes back to the parent as data
        from semcheck.checker.frontend.errors import FrontendError

        tb = traceback.format_exc()
        if isinstance(e, FrontendError):
            conn.send(("input", (e.code, str(e), e.loc), tb))
        elif isinstance(e, SystemExit):
            conn.send(("input", ("kernel-exited", f"the kernel file called sys.exit({e.code!r})", None), tb))
        elif isinstance(e, KeyboardInterrupt):
            conn.send(("input", ("interrupted", "interrupted", None), tb))
        else:
            conn.send(("crash", (type(e).__name__, str(e)), tb))
    finally:
        conn.close()


# --- the parent -------------------------------------------------------------------

_live: set[Any] = set()
_live_by_path: dict[str, set[Any]] = {}
_live_lock = threading.Lock()


def kill_all() -> None:
    """Kill every child still running (Ctrl-C, or a sibling's input error)."""
    with _live_lock:
        procs = list(_live)
    for p in procs:
        _kill(p)


def kill_path(path: str) -> None:
    """Kill the children verifying one kernel file (an input error there stops that file only)."""
    with _live_lock:
        procs = list(_live_by_path.get(path, ()))
    for p in procs:
        _kill(p)


def _kill(proc) -> None:
    if proc.pid is None:
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (OSError, AttributeError):
        try:
            proc.kill()
        except (OSError, ValueError):
            pass


def _exit_description(code: int | None) -> str:
    if code is None:
        return "no exit code"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def verify(req: Request, *, debug: bool = False) -> Findings:
    """Verify one kernel file at one device count, in a child process with a time limit.

    Raises `InputError` when the kernel file cannot be verified at all
    (it raised, has no targets, crashed the interpreter, ...). A timeout is
    not an error: what had not been answered is `unknown`.
    """
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(req, child, os.getpid()), daemon=True)
    with _live_lock:
        proc.start()
        _live.add(proc)
        _live_by_path.setdefault(req.path, set()).add(proc)
    child.close()
    names: list[str] | None = None
    results: list[Result] = []
    notes: list[Note] = []
    deps = None
    try:
        deadline = time.monotonic() + STARTUP_LIMIT
        started = False
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not parent.poll(left):
                if not started:
                    notes.append(Note("timeout", f"semcheck's checker process did not start within "
                                                 f"{STARTUP_LIMIT:g}s (is the machine overloaded?)", req.devices))
                else:
                    notes.append(Note("timeout", f"{os.path.basename(req.path)} at {req.devices} devices: "
                                                 f"importing, tracing and checking took longer than --timeout "
                                                 f"{req.timeout:g}s; the process was stopped", req.devices))
                break
            try:
                msg = parent.recv()
            except EOFError:
                proc.join(5)
                raise InputError(
                    "crashed",
                    f"the process verifying {req.path} at {req.devices} devices died "
                    f"({_exit_description(proc.exitcode)}) before answering",
                ) from None
            kind = msg[0]
            if kind == "ready":
                started = True
                deadline = time.monotonic() + req.timeout + min(GRACE, max(0.5, req.timeout / 10))
            elif kind == "targets":
                names = list(msg[1])
            elif kind == "result":
                results.append(msg[1])
            elif kind == "unsupported":
                _, name, text, loc = msg
                text = text.removeprefix("unsupported ")
                notes.append(Note("unsupported", text, req.devices, loc))
                results.extend(_unknown_results(req, [name], f"unsupported {text}"))
            elif kind == "deps":
                deps = msg[1]
            elif kind == "done":
                break
            elif kind == "input":
                code, text, loc = msg[1]
                raise InputError(code, text, loc, debug_text=msg[2], file=req.path)
            else:  # "crash": a semcheck bug, or the kernel broke semcheck's own machinery
                name, text = msg[1]
                raise InputError("internal-error", f"{name}: {text} (rerun with --debug for the traceback)",
                                 debug_text=msg[2], file=req.path)
    finally:
        if proc.is_alive():
            _kill(proc)
        with _live_lock:
            _live.discard(proc)
            _live_by_path.get(req.path, set()).discard(proc)
        proc.join(5)
        parent.close()
    if notes and notes[-1].code == "timeout":
        answered = {(r.target.split("#")[0], r.dma_mode) for r in results}
        pending = names if names is not None else _guess_targets(req)
        reason = f"timeout: not decided within --timeout {req.timeout:g}s"
        for name in pending:
            missing = tuple(m for m in req.modes if (name, m) not in answered)
            if missing:
                results.extend(_unknown_results(dataclasses.replace(req, modes=missing), [name], reason))
        deps = None
    return Findings(results, notes, deps)


def _guess_targets(req: Request) -> list[str]:
    """Target names of a file that timed out while being imported, read from its source."""
    if req.target or req.entry:
        return [req.target or req.entry]
    declared = list(_declared_devices(req.path))
    if declared:
        return declared
    try:
        with open(req.path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        if any(isinstance(n, ast.FunctionDef) and n.name == "build" for n in tree.body):
            return ["build"]
    except (OSError, SyntaxError, ValueError):
        pass
    return ["*"]


def _unknown_results(req: Request, names: Sequence[str], reason: str) -> list[Result]:
    return [
        Result(target=name, devices=req.devices, dma_mode=mode,
               verdicts=[Verdict(p, "unknown", reason=reason) for p in req.properties])
        for name in names
        for mode in req.modes
    ]


# --- sweeps -----------------------------------------------------------------------


def run_sweep(
    requests: Sequence[Request],
    *,
    jobs: int = 1,
    debug: bool = False,
    on_done: Callable[[Request], None] | None = None,
    cache: Any = None,
) -> Findings:
    """Verify several device counts of one kernel file, `jobs` at a time; results in request order.

    The first input error (in request order, so the same one whatever
    `jobs` is) stops the sweep: the other children are killed.
    """
    (run,) = run_files([FileRun("", list(requests))], jobs=jobs, debug=debug, on_done=on_done, cache=cache)
    if run.error is not None:
        raise run.error
    assert run.findings is not None
    return run.findings


@dataclasses.dataclass
class FileRun:
    """One kernel file of a run over many: its requests (device counts, targets) and what came of them."""

    path: str  # as reports show it: as given on the command line, or as discovered under a directory
    requests: list[Request]
    findings: Findings | None = None
    error: InputError | None = None
    cached: int = 0  # requests answered from the result cache


def run_files(
    files: Sequence[FileRun],
    *,
    jobs: int = 1,
    debug: bool = False,
    on_done: Callable[[Request], None] | None = None,
    cache: Any = None,
) -> Sequence[FileRun]:
    """Verify every request of every file, `jobs` child processes at a time over all of them.

    Per file, as for one file: results in request order, and the first input
    error (in request order, whatever `jobs` is) stops that file -- its other
    children are killed and its results dropped (`FileRun.error` says why);
    the other files go on. `cache` (`semcheck.checker.cache.ResultCache`)
    answers requests verified before with the same inputs, and keeps new
    answers that contain no timeout.
    """
    stopped: set[int] = set()

    def one(i: int, req: Request) -> tuple[Findings, bool]:
        if i in stopped:
            return Findings([]), False
        hit = cache.get(req) if cache is not None else None
        if hit is None:
            out = verify(req, debug=debug)
            if cache is not None:
                cache.put(req, out)
        else:
            out = hit
        if on_done is not None:
            on_done(req)
        return out, hit is not None

    pool = ThreadPoolExecutor(max_workers=max(1, jobs))
    try:
        futures = [[pool.submit(one, i, req) for req in f.requests] for i, f in enumerate(files)]
        for i, (f, fs) in enumerate(zip(files, futures, strict=True)):
            found = Findings([])
            for fut in fs:
                try:
                    out, hit = fut.result()
                except InputError as e:
                    stopped.add(i)
                    for g in fs:
                        g.cancel()
                    for path in {r.path for r in f.requests}:
                        kill_path(path)
                    f.error = e
                    break
                f.cached += hit
                found.results.extend(out.results)
                found.notes.extend(out.notes)
            if f.error is None:
                f.findings = found
    except BaseException:
        kill_all()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return files


# --- many files: discovery ------------------------------------------------------------

DEFAULT_EXCLUDE = (".*", "__pycache__", "node_modules", "site-packages", "build", "dist", "venv")
"""Directory names never searched for kernels (hidden ones, virtual environments, build output),
as ruff and mypy skip them; a path given explicitly is searched even so."""


@dataclasses.dataclass(frozen=True)
class Exclude:
    """A glob (`examples/buggy`, `*_test.py`, `**/experimental/*`) relative to the directory `base`.

    It matches a path under `base` when it matches the path relative to
    `base`, any of its leading directories, or its last component.
    """

    pattern: str
    base: str

    def matches(self, path: str) -> bool:
        import fnmatch

        pat = self.pattern.replace(os.sep, "/").rstrip("/")
        if pat.startswith("./"):
            pat = pat[2:]
        rel = os.path.relpath(os.path.abspath(path), os.path.abspath(self.base)).replace(os.sep, "/")
        if rel.startswith("../"):
            return fnmatch.fnmatch(os.path.basename(path), pat) if "/" not in pat else False
        parts = rel.split("/")
        prefixes = ["/".join(parts[: k + 1]) for k in range(len(parts))]
        return any(fnmatch.fnmatch(p, pat) for p in prefixes) or fnmatch.fnmatch(parts[-1], pat)


def defines_kernel(path: str, entry: str | None = None) -> bool:
    """Whether a Python file names something to verify, read from its source (never imported).

    A module-level `@semcheck.target` function, a module-level `build`
    (defined, assigned or imported), or with `entry` a module-level name
    `entry`.
    """
    try:
        with open(path, "rb") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        # a kernel file that does not parse is reported (syntax-error), a non-Python file is not
        return path.endswith(".py") and os.path.isfile(path) and _mentions_build(path, entry)
    wanted = entry or "build"
    for node in tree.body:
        names: list[str] = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if entry is None and _declared_devices_of(node) is not None:
                return True
            names = [node.name]
        elif isinstance(node, ast.Assign):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names = [node.target.id]
        elif isinstance(node, ast.ImportFrom):
            names = [a.asname or a.name for a in node.names]
        if wanted in names:
            return True
    return False


def _mentions_build(path: str, entry: str | None) -> bool:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return False
    return f"def {entry or 'build'}(" in text or (entry is None and "semcheck.target" in text)


def discover(
    paths: Sequence[str],
    *,
    exclude: Sequence[Exclude] = (),
    entry: str | None = None,
    only_kernels: bool = False,
) -> tuple[list[str], list[str]]:
    """The kernel files under `paths` (files and directories), and the Python files skipped.

    A directory is searched recursively, in sorted order, for `.py` files
    that define a kernel (`defines_kernel`), leaving out `DEFAULT_EXCLUDE`
    directories and whatever an `exclude` pattern matches. A file given
    explicitly is verified as it is (an error if it names no kernel) unless
    `only_kernels` (pre-commit hands over every changed file): then it is
    filtered like a discovered one. Missing paths raise `InputError`.
    Duplicates are dropped; paths are returned as given (joined under their
    directory).
    """
    import fnmatch

    files: list[str] = []
    skipped: list[str] = []
    seen: set[str] = set()

    def add(p: str, explicit: bool) -> None:
        key = os.path.realpath(p)
        if key in seen:
            return
        seen.add(key)
        if (not explicit or only_kernels) and (
                any(e.matches(p) for e in exclude) or not p.endswith(".py") or not defines_kernel(p, entry)):
            skipped.append(p)
            return
        files.append(p)

    for given in paths:
        if not os.path.exists(given):
            raise InputError("file-missing", f"no such kernel file: {given}")
        if os.path.isfile(given):
            add(given, explicit=True)
            continue
        if any(e.matches(given) for e in exclude):
            continue
        for root, dirs, names in os.walk(given):
            dirs[:] = sorted(d for d in dirs
                             if not any(fnmatch.fnmatch(d, pat) for pat in DEFAULT_EXCLUDE)
                             and not any(e.matches(os.path.join(root, d)) for e in exclude))
            for name in sorted(names):
                if name.endswith(".py"):
                    add(os.path.normpath(os.path.join(root, name)), explicit=False)
    return files, skipped


def modes_for(arg: str) -> tuple[str, ...]:
    if arg == "all":
        return DMA_MODES
    if arg not in DMA_MODES:
        raise InputError("usage", f"--dma-mode must be one of {', '.join(DMA_MODES)} or all, not {arg!r}")
    return (arg,)


def parse_devices(text: str) -> list[int]:
    """`2,4,8`, `2..64` (the powers of two in the range, and its ends) or one count."""
    text = text.strip()
    try:
        if ".." in text:
            lo, hi = (int(x) for x in text.split("..", 1))
            if lo < 1 or hi < lo:
                raise InputError("usage", f"--devices {text}: a range lo..hi needs 1 <= lo <= hi")
            counts = {lo, hi} | {1 << k for k in range(hi.bit_length()) if lo <= 1 << k <= hi}
        else:
            counts = {int(x) for x in text.split(",") if x.strip()}
    except ValueError:
        raise InputError("usage", f"--devices {text!r}: expected a count, a list like 2,4,8 "
                                  "or a range like 2..64") from None
    if not counts:
        raise InputError("usage", "--devices needs at least one device count")
    for n in sorted(counts):
        if not 1 <= n <= MAX_DEVICES:
            raise InputError("usage", f"--devices {n}: a device count must be between 1 and {MAX_DEVICES}")
    return sorted(counts)


def check_devices(devices: int | Sequence[int]) -> list[int]:
    counts = [devices] if isinstance(devices, int) else list(devices)
    if not counts:
        raise InputError("usage", "no device counts given")
    for n in counts:
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_DEVICES:
            raise InputError("usage", f"device count {n!r}: must be an integer between 1 and {MAX_DEVICES}")
    return sorted(set(counts))


def check_timeout(timeout: float) -> float:
    if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout > 0):
        raise InputError("usage", f"--timeout {timeout!r}: must be a positive number of seconds")
    return float(timeout)


def precheck_file(path: str) -> None:
    """Problems that need no child process: a missing, unreadable or unparsable kernel file."""
    if not os.path.exists(path):
        raise InputError("file-missing", f"no such kernel file: {path}")
    if not os.path.isfile(path):
        raise InputError("file-missing", f"not a file: {path}")
    try:
        with open(path, "rb") as f:
            source = f.read()
    except OSError as e:
        raise InputError("file-unreadable", f"cannot read {path}: {e.strerror or e}") from None
    try:
        compile(source, path, "exec", dont_inherit=True)
    except SyntaxError as e:
        text = (e.text or "").strip()
        raise InputError("syntax-error", f"syntax error in kernel file {path}:{e.lineno}: {e.msg}",
                         Loc(path, e.lineno or 0, text)) from None
    except ValueError as e:  # NUL bytes
        raise InputError("syntax-error", f"kernel file {path} is not Python source: {e}") from None


def plan(path: str, target: str | None, devices: Sequence[int] | None,
         default: Sequence[int] = DEFAULT_DEVICES) -> list[tuple[str | None, list[int]]]:
    """Which (target selector, device counts) to verify.

    Explicit `devices` apply to everything selected. Otherwise each
    `@semcheck.target(devices=...)` brings its own counts, read from the
    source without importing it (jax must not start in this process);
    targets whose counts differ are verified separately. `default` (the
    project's `[tool.semcheck] devices`, else 2, 4, 8) is for targets that
    declare none.
    """
    if devices is not None:
        return [(target, list(devices))]
    declared = _declared_devices(path, default)
    if target is not None:
        return [(target, declared.get(target, list(default)))]
    if not declared or len({tuple(v) for v in declared.values()}) == 1:
        return [(None, next(iter(declared.values())) if declared else list(default))]
    return [(name, counts) for name, counts in declared.items()]


def _declared_devices(path: str, default: Sequence[int] = DEFAULT_DEVICES) -> dict[str, list[int]]:
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return {}
    out: dict[str, list[int]] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            counts = _declared_devices_of(node, default)
            if counts is not None:
                out[node.name] = counts
    return out


def _declared_devices_of(node: ast.FunctionDef | ast.AsyncFunctionDef,
                         default: Sequence[int] = DEFAULT_DEVICES) -> list[int] | None:
    """The device counts a `@semcheck.target` decorator on `node` declares (`default` if none); None if undecorated."""
    for dec in node.decorator_list:
        call = dec if isinstance(dec, ast.Call) else None
        func = call.func if call is not None else dec
        if (getattr(func, "attr", None) or getattr(func, "id", None)) != "target":
            continue
        counts = list(default)
        for kw in call.keywords if call is not None else ():
            if kw.arg == "devices":
                try:
                    counts = sorted({int(x) for x in ast.literal_eval(kw.value)})
                except (ValueError, TypeError, SyntaxError):
                    pass
        return counts
    return None


__all__ = [
    "Request", "Result", "Note", "Findings", "InputError", "verify", "run_sweep", "check_program",
    "modes_for", "parse_devices", "check_devices", "check_timeout", "precheck_file", "plan",
    "kill_all", "kill_path", "relpaths", "Witness", "MAX_DEVICES", "DEFAULT_DEVICES",
    "FileRun", "run_files", "discover", "defines_kernel", "Exclude", "DEFAULT_EXCLUDE",
]
