"""Verification runs: kernel file -> configurations -> verdicts.

Importing and tracing run the user's code, so each device count is handled
in a fresh child process (jax must be provisioned with enough host devices
before it initialises) with a time limit; the child sends back plain data.
"""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import time
import traceback
from typing import Any

from semcheck.checker.verdict import PROPERTIES, Verdict, Witness
from semcheck.model.ops import DMA_MODES, Loc


@dataclasses.dataclass(frozen=True)
class Request:
    path: str
    target: str | None
    entry: str | None
    devices: int
    cores: int | None
    modes: tuple[str, ...]
    timeout: float
    properties: tuple[str, ...] = PROPERTIES


@dataclasses.dataclass
class Result:
    """Verdicts of one target x devices x mode, or the input error that prevented them."""

    target: str
    devices: int
    dma_mode: str
    verdicts: list[Verdict]
    program: dict[str, Any] = dataclasses.field(default_factory=dict)
    seconds: dict[str, float] = dataclasses.field(default_factory=dict)


class InputError(Exception):
    """Bad input: the CLI prints one line and exits 2 (or 3 for `timeout`)."""

    def __init__(self, code: str, message: str, loc: Loc | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.loc = code, message, loc


def check_program(program, mode: str, properties=PROPERTIES, *, timeout_ms: int = 30_000) -> list[Verdict]:
    """All requested properties of one lowered program under one DMA mode."""
    from semcheck.checker.properties import CHECKS

    return [CHECKS[p](program, mode, timeout_ms=timeout_ms) for p in properties]


def _child(req: Request, conn) -> None:
    """Runs in a fresh process: provision devices, trace, lower, check."""
    try:
        from semcheck.checker.frontend import load, provision_devices

        provision_devices(req.devices)
        t0 = time.perf_counter()
        kernels = load(req.path, target=req.target, entry=req.entry, devices=req.devices, cores=req.cores)
        t_lower = time.perf_counter() - t0
        out = []
        for k in kernels:
            for mode in req.modes:
                t1 = time.perf_counter()
                verdicts = check_program(k.program, mode, req.properties,
                                         timeout_ms=int(req.timeout * 1000))
                out.append(Result(
                    target=k.target if len(kernels) == 1 else f"{k.target}#{k.index}",
                    devices=req.devices,
                    dma_mode=mode,
                    verdicts=verdicts,
                    program={"ops": k.program.num_ops, "cores": k.program.topology.num_cores,
                             "collective_id": k.program.collective_id},
                    seconds={"trace_and_lower": round(t_lower, 4), "check": round(time.perf_counter() - t1, 4)},
                ))
        conn.send(("ok", out))
    except BaseException as e:  # noqa: BLE001 - everything goes back to the parent as data
        from semcheck.checker.frontend.errors import FrontendError

        if isinstance(e, FrontendError):
            conn.send(("input", (e.code, str(e), e.loc), traceback.format_exc()))
        else:
            conn.send(("crash", (type(e).__name__, str(e)), traceback.format_exc()))
    finally:
        conn.close()


def verify(req: Request, *, debug: bool = False) -> list[Result]:
    """Verify one kernel file at one device count, in a child process with a time limit."""
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(req, child), daemon=True)
    proc.start()
    child.close()
    try:
        if not parent.poll(req.timeout):
            raise InputError("timeout", f"tracing and checking took longer than --timeout {req.timeout:g}s")
        msg = parent.recv()
    except EOFError:
        proc.join(1)
        raise InputError(
            "crashed", f"the process importing {req.path} died (exit code {proc.exitcode}) before answering"
        ) from None
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(5)
    if msg[0] == "ok":
        return msg[1]
    if debug:
        print(msg[2])
    if msg[0] == "input":
        code, text, loc = msg[1]
        raise InputError(code, text, loc)
    name, text = msg[1]
    raise InputError("internal-error", f"internal error: {name}: {text} (rerun with --debug for the traceback)")


def modes_for(arg: str) -> tuple[str, ...]:
    if arg == "all":
        return DMA_MODES
    if arg not in DMA_MODES:
        raise InputError("usage", f"--dma-mode must be one of {', '.join(DMA_MODES)} or all, not {arg!r}")
    return (arg,)


__all__ = ["Request", "Result", "InputError", "verify", "check_program", "modes_for", "Witness"]
