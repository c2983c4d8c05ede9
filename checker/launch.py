"""Verdicts for a launch the interpreter refuses (spec LAUNCH-2, ERR-8; divergence D21), or a kernel
access it cannot index (ACC-6, ERR-9; divergence D22).

jax's interpreter builds every output's initial value before any kernel code
runs and fails on a semaphore output, in every run. Under `eager` and
`on_wait` the kernel is then decided without looking at its operations:
`deadlock-free` is violated (no core ever starts, so none finishes: PROP-4
asks that no terminal state has an unfinished core) and every other property
is unknown (nothing runs, so there is nothing to balance, race or collide).
Under `hardware` a TPU launches the program and the checks run as usual.
A load or store through a reshape (bitcast, transpose, memory-space) view
raises in the interpreter when a core reaches it; the lowered program puts it
on a core's path, so no run completes: `deadlock-free` violated with the
access's line, the rest unknown, in `eager` and `on_wait` only.
"""

from __future__ import annotations

from semcheck.checker.verdict import Verdict, Witness
from semcheck.model.errors import InterpreterView
from semcheck.model.launch import launch_failure
from semcheck.model.ops import Access, DmaMode, DmaStart, Loc, Program

HINT = ("jax's TPU interpreter cannot run a pallas_call with semaphore outputs: check it under --dma-mode "
        "hardware, or allocate the semaphores as scratch to test it in interpret mode")


VIEW_HINT = ("jax's TPU interpreter indexes a load or store only through indexers (ref.at[...], slices): read "
             "or write the whole ref and reshape or bitcast the value instead to test it in interpret mode; "
             "--dma-mode hardware checks the kernel as a TPU runs it")


def launch_verdict(prop: str, program: Program, mode: DmaMode) -> Verdict | None:
    """LAUNCH-2: the verdict on `prop` when the launch fails under `mode`, or None when it launches."""
    failure = launch_failure(program, mode)
    if failure is None:
        return None
    if isinstance(failure, InterpreterView):
        return _view_verdict(prop, program, failure, mode)
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


def _view_verdict(prop: str, program: Program, failure: InterpreterView, mode: DmaMode) -> Verdict:
    """ACC-6 / ERR-9: every core that reaches the access raises, and the lowered program puts it on
    some core's path, so no interpreter run completes: it stops there, or earlier (a hang or
    another failure). deadlock-free is violated; what the rest of the run would do is not decided.
    A copy raises when it runs: under eager at its start, as an access; under on_wait only if a
    waiter runs its task, so there every property is unknown."""
    others = f" (and {failure.accesses - 1} other line(s))" if failure.accesses > 1 else ""
    raised = (f"interpret mode raises {failure.python_type}: {failure.message} at the {failure.access} at "
              f"{failure.where or 'an access'}{others}: jax's TPU interpreter indexes loads, stores and "
              f"copies only through indexers, not a {failure.transform} view (specs/divergences.md D22)")
    if failure.copies_only and mode == "on_wait":
        return Verdict(prop, "unknown", reason=f"{raised}, when the copy runs: under on_wait only if "
                       "something waits on it, which semcheck does not decide")
    if prop != "deadlock-free":
        return Verdict(prop, "unknown", reason=f"{raised}; every run stops there or earlier in this mode")
    loc = _access_loc(program, failure.where)
    details = {"error_type": failure.python_type, "error_message": failure.message,
               "transform": failure.transform, "rule": "ACC-6"}
    return Verdict(prop, "violated", witness=Witness(message=f"{raised}: no run completes",
                                                      locs=(loc,) if loc is not None else (),
                                                      details=details, hint=VIEW_HINT))


def _access_loc(program: Program, where: str) -> Loc | None:
    for ops in program.cores:
        for op in ops:
            if (type(op) is Access or type(op) is DmaStart) and op.loc.line and str(op.loc) == where:
                return op.loc
    return None
