"""The verifying child process: one kernel file at one device count, with a time limit.

Importing and tracing run the user's code, so each device count is handled
in a fresh child process (jax must be provisioned with enough host devices
before it initialises, and a kernel that hangs or crashes must not take
semcheck with it). The child sends plain data back over a pipe, as it goes:

    ("ready",)                      jax, z3 and semcheck are imported
    ("targets", [name, ...])        the kernel file is imported
    ("result", Result)              one target x DMA mode, all properties
    ("unsupported", name, msg, loc) a target the front end cannot lower
    ("target-error", name, (code, msg, loc), traceback)  a target whose build raised
    ("deps", Dependencies)          what the import and `build` read (for the result cache)
    ("done",)
    ("input" | "crash", ..., traceback)   and nothing after it

`--timeout` counts from "ready": semcheck's own start-up (importing jax) is
not the user's time. When it runs out the child is killed and every
(target, mode) it had not answered for becomes `unknown` -- never proved.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from semcheck.checker.run.planning import guess_targets
from semcheck.checker.run.request import Findings, InputError, Note, Request, Result, unknown_results
from semcheck.checker.properties.verdict import unknown_kind
from semcheck.checker.run.warm_start import context

STARTUP_LIMIT = 300.0
"""Seconds a child may take to import jax, z3 and semcheck (not counted in --timeout)."""
GRACE = 2.0
"""At most this many seconds past --timeout (a tenth of it, at least half a second) the child
gets to send the verdicts z3 gave up on before it is killed."""

def _watch_parent(semcheck_pid: int) -> None:
    """A child whose semcheck process died (killed -9, say) must not linger.

    A cold child's parent is semcheck's process; a warm one's is the warm-start server
    (`checker/run/warm_start.py`), which lives on while any child of it does, so the child watches
    semcheck's process itself."""
    parent = os.getppid()
    while True:
        time.sleep(1.0)
        if os.getppid() != parent or not _running(semcheck_pid):
            os._exit(3)


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"  # a zombie has exited
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: the parent check above is all there is
        return True


def _child(req: Request, conn, semcheck_pid: int, env: dict[str, str] | None = None) -> None:
    """Runs in a fresh process: provision devices, import, trace, lower, check."""
    # The kernel's own prints must not end up in a JSON/SARIF report on stdout,
    # and importing its neighbours must not leave __pycache__ in the user's tree.
    if env is not None:  # started warm: the parent's environment of the moment (checker/run/warm_start.py)
        os.environ.clear()
        os.environ.update(env)
    captured = _capture_output()
    sys.dont_write_bytecode = True
    try:
        os.setpgrp()  # so that the parent can kill whatever the kernel spawned too
    except OSError:
        pass
    threading.Thread(target=_watch_parent, args=(semcheck_pid,), daemon=True).start()
    from semcheck._dependencies import install, observe

    # before semcheck sets any variable: the kernel's environment is the parent's; the kernel file's
    # bytes are in the cache key, so semcheck's own look at it is no dependency
    recorder = install(covered=(req.path,))
    signalled = _note_sigint()
    try:
        from semcheck.checker.properties.checking import generated_results, kernel_results
        from semcheck.checker.frontend import lower_target, provision_devices
        from semcheck.checker.frontend.errors import FrontendError, Unsupported
        from semcheck.checker.frontend.programs import (calls_some_devices_skip, communicating_program, lower_program,
                                                        refuse_collective_hang)
        from semcheck.checker.frontend.staged_trace import sharing as sharing_staged_trace
        from semcheck.checker.frontend.targets import compile_quickly, load_targets
        from semcheck.checker.frontend.compile_cache import use_shared_compiles

        provision_devices(req.devices)
        compile_quickly()  # REP-37
        use_shared_compiles()  # PRG-188
        import jax  # noqa: F401 - start-up, not the user's time
        import z3  # noqa: F401

        import semcheck.checker.properties.registry  # noqa: F401

        # This process lives for one device count; the cyclic collector stays off
        # (bench/README.md, "Costs the code relies on").
        gc.disable()
        conn.send(("ready",))
        start = time.monotonic()
        deadline = start + req.timeout
        with observe(recorder):
            targets = load_targets(req.path, entry=req.entry, target=req.target, selector=False)
        conn.send(("targets", [t.name for t in targets]))
        if req.every_n:  # the parametric check in place of the per-N checks (specs/deciding/parametric.md PAR-8)
            from semcheck.checker.parametric.every_n import target_claims

            for t in targets:
                with observe(recorder):
                    conn.send(("claims", target_claims(t, req, deadline)))
            targets = []
        # one staged trace per target, for its lowering and for the program of its calls
        with sharing_staged_trace():
            for t in targets:
                try:
                    if t.inputs is not None:  # inputs drawn from a hypothesis strategy
                        for r in generated_results(t, req, deadline, recorder):
                            conn.send(("result", r))
                        continue
                    t0 = time.monotonic()
                    with observe(recorder):
                        kernels = lower_target(t, req.devices, cores=req.cores, per_mode=True)  # ACC-27
                        composed = lower_program(t, req.devices, kernels, cores=req.cores)  # specs/deciding/programs.md: None alone
                        unconfined, alone, skipped = "", req, None
                        if composed is None:  # communicating calls in a row: one program too (PRG-115)
                            composed, unconfined = communicating_program(t, req.devices, kernels, cores=req.cores)
                            if composed is not None:  # the interpreter runs each call alone (PRG-115)
                                alone = dataclasses.replace(req, modes=tuple(m for m in req.modes if m != "hardware"))
                                req_program = dataclasses.replace(req, modes=tuple(m for m in req.modes if m == "hardware"))
                        if composed is None:  # PRG-201: calls checked alone after a collective some devices skip
                            refuse_collective_hang(t, req.devices, kernels)
                        if composed is None and any(m != "hardware" for m in req.modes):
                            skipped = calls_some_devices_skip(t, req.devices, kernels)  # PRG-163
                except Unsupported as e:
                    conn.send(("unsupported", t.name, str(e), e.loc))
                    continue
                except FrontendError as e:  # this target's build raised: the file's other targets go on
                    conn.send(("target-error", t.name, (e.code, str(e), e.loc, e.related), traceback.format_exc()))
                    continue
                from semcheck.checker.properties.unpredicted_windows import (
                    past_end_reason,
                    unpredicted,
                    unpredicted_reason,
                )

                unseen = unpredicted_reason([*kernels, *(composed or ())])  # ERR-32
                past = past_end_reason([*kernels, *(composed or ())])  # ERR-62
                if composed is not None:  # calls that hand semaphores on: one program (specs/deciding/programs.md)
                    from semcheck.checker.programs.results import program_results

                    on = req if alone is req else req_program
                    if on.modes:
                        for r in program_results(composed, t.name, on, deadline, time.monotonic() - t0):  # per order
                            conn.send(("result", unpredicted(r, unseen, past)))
                    if alone is req or not alone.modes:
                        continue
                from semcheck.checker.programs.results import interpreter_alone, interpreter_skipped

                from semcheck.checker.properties.checking import kernel_label

                by_label = {kernel_label(t.name, kernels, k): k for k in kernels}
                for r in kernel_results(t.name, kernels, alone, deadline, time.monotonic() - t0):
                    k = by_label.get(r.target)
                    r = interpreter_alone(_unconfined(r, unconfined), composed, unconfined, k)  # PRG-145, PRG-180
                    conn.send(("result", unpredicted(interpreter_skipped(r, skipped, k), unseen, past)))  # PRG-163, PRG-180
        conn.send(("deps", recorder.dependencies()))
        conn.send(("output", captured()))
        conn.send(("done",))
    except BaseException as e:  # noqa: BLE001 - everything goes back to the parent as data
        try:
            conn.send(("output", captured()))
            conn.send(_failure(e, req.path, signalled, traceback.format_exc()))
        except OSError:  # the parent is gone (killed -9): nobody to tell, and nothing to say on stderr
            os._exit(3)
    finally:
        with contextlib.suppress(OSError):
            conn.close()


OUTPUT_LIMIT = 64 * 1024  # bytes of the kernel's own output kept for -v
OUTPUT = "output"  # the Note code of that output


def _capture_output() -> Callable[[], str]:
    """REP-27: what the kernel prints and jax logs while it is imported and traced (`print`, `ERROR:root:
    AsyncCopyDescriptor was not used ...`) goes to a pipe, not to semcheck's stderr nor into a report on
    stdout; the returned function ends the capture and gives the text (its first OUTPUT_LIMIT bytes), which
    the parent shows under -v. A pipe and a thread, not a file: semcheck writes nothing in TMPDIR."""
    read, write = os.pipe()
    saved = os.dup(2)
    os.dup2(write, 1)
    os.dup2(write, 2)
    os.close(write)
    got = bytearray()

    def drain() -> None:
        while chunk := os.read(read, 65536):
            if len(got) < OUTPUT_LIMIT:
                got.extend(chunk[: OUTPUT_LIMIT - len(got)])

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()

    def end() -> str:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os.dup2(saved, 1)  # the pipe's last writers gone, the reader sees its end
        os.dup2(saved, 2)
        reader.join(2)  # (a process the kernel started may hold the pipe open: what came so far)
        return got.decode("utf-8", "replace")

    return end


def _note_sigint() -> list[bool]:
    """A SIGINT that reaches this process, told apart from a `KeyboardInterrupt` the kernel's code raises
    itself (the child is in a process group of its own, so a ^C at the terminal reaches semcheck only,
    which stops its children; a SIGINT here was sent to this process on purpose)."""
    signalled = [False]

    def on_sigint(signum: int, frame: Any) -> None:
        signalled[0] = True
        raise KeyboardInterrupt

    with contextlib.suppress(ValueError):  # not the main thread: a test calling `_child` directly
        signal.signal(signal.SIGINT, on_sigint)
    return signalled


def _failure(e: BaseException, path: str, signalled: list[bool], tb: str) -> tuple:
    """The message that says why the child stopped: the kernel's own failure is an input error, with
    the kernel line where it was raised; anything else is semcheck's (a crash)."""
    from semcheck.checker.frontend.errors import FrontendError
    from semcheck.checker.frontend.targets import user_loc

    if isinstance(e, FrontendError):
        return ("input", (e.code, str(e), e.loc, e.related), tb)
    if isinstance(e, SystemExit):
        return ("input", ("kernel-exited", f"the kernel file called sys.exit({e.code!r})", None), tb)
    if isinstance(e, KeyboardInterrupt) and signalled[0]:
        return ("input", ("interrupted", "interrupted", None), tb)
    loc = user_loc(e, path)
    # semcheck raises no KeyboardInterrupt of its own; another BaseException is the kernel's when it
    # was raised through the kernel file's code
    if isinstance(e, KeyboardInterrupt) or (loc is not None and not isinstance(e, Exception)):
        return ("input", ("kernel-raised", f"the kernel raised {type(e).__name__}: {e}".rstrip(": "), loc), tb)
    return ("crash", (type(e).__name__, str(e)), tb)


def _unconfined(r, why: str):
    """PRG-115: calls checked alone because their program could not be composed: under hardware barrier
    counts and landings cross the calls, so no verdict of a call alone is the program's: unknown, with why."""
    if not why or r.dma_mode != "hardware":
        return r
    from semcheck.checker.properties.verdict import Verdict

    why = f"{why}: its calls communicate, and on a TPU barrier counts and landings cross the calls (specs/deciding/programs.md PRG-115)"
    return dataclasses.replace(r, verdicts=[Verdict(v.property, "unknown", reason=why) for v in r.verdicts])


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
    ctx, env = context()
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(req, child, os.getpid(), env), daemon=True)
    with _live_lock:
        proc.start()
        _live.add(proc)
        _live_by_path.setdefault(req.path, set()).add(proc)
    child.close()
    names: list[str] | None = None
    results: list[Result] = []
    notes: list[Note] = []
    deps = None
    target_errors: list[tuple[str, InputError]] = []
    claims: list = []  # parametric.TargetClaims, of an every_n request
    output = ""
    try:
        deadline = time.monotonic() + STARTUP_LIMIT
        started = False
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not parent.poll(left):
                if not started:
                    notes.append(Note("timeout", f"semcheck's checker process did not start within "
                                                 f"{STARTUP_LIMIT:g}s (is the machine overloaded?)", req.devices))
                elif names is None:  # one line for the file: the other device counts are not tried (runs.py)
                    notes.append(Note("timeout", f"{os.path.basename(req.path)}: importing the kernel file did not "
                                                 f"finish within --timeout {req.timeout:g}s; the process was stopped, "
                                                 "and nothing else of the file is tried (its import would hang "
                                                 "again)", req.devices))
                else:
                    at = "for every N (PAR-8)" if req.every_n else f"at {req.devices} devices"
                    notes.append(Note("timeout", f"{os.path.basename(req.path)} {at}: "
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
            elif kind == "claims":
                claims.append(msg[1])
            elif kind == "unsupported":
                _, name, text, loc = msg
                text = text.removeprefix("unsupported ")
                notes.append(Note("unsupported", text, req.devices, loc))
                results.extend(unknown_results(req, [name], f"unsupported {text}"))
            elif kind == "target-error":
                _, name, (code, text, loc, *related), tb = msg
                target_errors.append((name, InputError(code, text, loc, debug_text=tb, file=req.path,
                                                       related=related[0] if related else None)))
            elif kind == "deps":
                deps = msg[1]
            elif kind == "output":  # REP-27: the kernel's prints and jax's log lines, for -v
                output = msg[1]
            elif kind == "done":
                break
            elif kind == "input":
                code, text, loc, *related = msg[1]
                raise InputError(code, text, loc, debug_text=msg[2], file=req.path,
                                 related=related[0] if related else None)
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
        pending = names if names is not None else guess_targets(req)
        reason = (f"timeout: not decided within --timeout {req.timeout:g}s" if names is not None else
                  f"timeout: importing the kernel file did not finish within --timeout {req.timeout:g}s")
        for name in pending:
            missing = tuple(m for m in req.modes if (name, m) not in answered)
            if req.every_n:  # no per-N rows: the claim is missing, and says so (PAR-8)
                if name not in {c.target for c in claims}:
                    claims.append(_claims_timed_out(name, req))
            elif missing:
                results.extend(unknown_results(dataclasses.replace(req, modes=missing), [name], reason))
        deps = None
    else:
        late = sum(v.verdict == "unknown" and unknown_kind(v.reason or "") == "timeout"
                   for r in results for v in r.verdicts)
        if late:  # the child answered, but ran out of time inside some checks
            notes.append(Note("timeout", f"{os.path.basename(req.path)} at {req.devices} devices: {late} "
                                         f"{'property' if late == 1 else 'properties'} not decided within "
                                         f"--timeout {req.timeout:g}s", req.devices))
        if any(c.timed_out for c in claims):  # a rerun may decide more: the cache keeps no timeout
            notes.append(Note("timeout", f"{os.path.basename(req.path)}: the check for every N was not decided "
                                         f"within --timeout {req.timeout:g}s", req.devices))
    if target_errors and names is not None and {n for n, _ in target_errors} >= set(names):
        raise target_errors[0][1]  # no target could be built: the file is bad input, as before
    if output.strip():
        notes.append(Note(OUTPUT, f"{os.path.basename(req.path)} at {req.devices} devices printed (while "
                                  f"imported, built and traced):\n{output.rstrip()}", req.devices))
    return Findings(results, notes, deps, target_errors, imported=names is not None, claims=claims)


def _claims_timed_out(name: str, req: Request):
    from semcheck.checker.parametric.every_n import TargetClaims

    return TargetClaims(name, reason=f"not decided within --timeout {req.timeout:g}s (PAR-8)", timed_out=True,
                        modes=req.modes)
