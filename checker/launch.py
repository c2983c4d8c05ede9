"""Verdicts for a launch the interpreter refuses (spec LAUNCH-2, ERR-8; divergence D21).

jax's interpreter builds every output's initial value before any kernel code
runs and fails on a semaphore output, in every run. Under `eager` and
`on_wait` the kernel is then decided without looking at its operations:
`deadlock-free` is violated (no core ever starts, so none finishes: PROP-4
asks that no terminal state has an unfinished core) and every other property
is unknown (nothing runs, so there is nothing to balance, race or collide).
Under `hardware` a TPU launches the program and the checks run as usual.
(A kernel access the interpreter cannot index fails inside the run: ERR-9,
`checker.failing_runs`.)
"""

from __future__ import annotations

from semcheck.checker.verdict import Verdict, Witness
from semcheck.model.launch import launch_failure
from semcheck.model.ops import DmaMode, Program

HINT = ("jax's TPU interpreter cannot run a pallas_call with semaphore outputs: check it under --dma-mode "
        "hardware, or allocate the semaphores as scratch to test it in interpret mode")


def launch_verdict(prop: str, program: Program, mode: DmaMode) -> Verdict | None:
    """LAUNCH-2: the verdict on `prop` when the launch fails under `mode`, or None when it launches."""
    failure = launch_failure(program, mode)
    if failure is None:
        return None
    raised = (f"interpret mode raises {failure.python_type}: {failure.message} at launch, before any kernel "
              f"code runs (output {failure.output!r} is a semaphore array, specs/divergences.md D21)")
    if prop != "deadlock-free":
        return Verdict(prop, "unknown", reason=f"{raised}; the kernel never runs in this mode")
    first = next((ops[0] for ops in program.cores if ops), None)
    locs = (first.loc,) if first is not None and first.loc.line else ()
    details = {"error_type": failure.python_type, "error_message": failure.message, "output": failure.output,
               "rule": "LAUNCH-2"}
    return Verdict(prop, "violated", witness=Witness(message=f"{raised}: no core ever starts", locs=locs,
                                                      details=details, hint=HINT))
