"""Verdicts for a launch the interpreter refuses (spec LAUNCH-2, LAUNCH-3, ERR-8, ERR-10; D12, D21).

jax's interpreter fails some kernels before any kernel code runs, in every
run: it builds every output's initial value first and fails on a semaphore
output (LAUNCH-2), and it compiles the kernel for the CPU and fails on a
primitive it has no rule for, `pl.semaphore_read` (LAUNCH-3). Under `eager`
and `on_wait` the kernel is then decided without looking at its operations:
`deadlock-free` is violated (no core ever starts, so none finishes: PROP-4
asks that no terminal state has an unfinished core) and every other property
is unknown (nothing runs, so there is nothing to balance, race or collide).
Under `hardware` a TPU launches the program and the checks run as usual.
(A kernel access the interpreter cannot index fails inside the run: ERR-9,
`checker.failing_runs`.)
"""

from __future__ import annotations

from semcheck.checker.verdict import Verdict, Witness
from semcheck.model.errors import EarlierFailure, Untranslatable, Violation
from semcheck.model.launch import launch_failure
from semcheck.model.ops import DmaMode, Loc, Program

HINT = ("jax's TPU interpreter cannot run a pallas_call with semaphore outputs: check it under --dma-mode "
        "hardware, or allocate the semaphores as scratch to test it in interpret mode")
CPU_HINT = ("jax's TPU interpreter compiles the kernel for the CPU and has no rule for this primitive: check "
            "the kernel under --dma-mode hardware, or keep the primitive out of the kernel you interpret")
EARLIER_HINT = ("fix the earlier call's failure: in interpret mode the computation after a failed one re-raises "
                "its error at dispatch and runs nothing (the one after that runs again)")
REF_HINT = ("jax's TPU interpreter cannot apply this primitive to a kernel ref: write it as a load and a store "
            "(`ref[...] += x` for addupdate) to test the kernel in interpret mode; --dma-mode hardware checks "
            "it as a TPU runs it")


def _why(failure: Violation) -> tuple[str, str, dict[str, str]]:
    """(when the interpreter raises and why, the hint, the rule's details) for a launch failure."""
    if isinstance(failure, EarlierFailure):  # PRG-11: an earlier call's error, re-raised at this dispatch
        return (f"at the dispatch of this call's computation, before any core starts: the error of {failure.after}, "
                "which fails in every run, rides on jax's ordered-effect token into the next computation "
                "(specs/programs.md PRG-11, specs/divergences.md D28)", EARLIER_HINT,
                {"after": failure.after, "rule": "PRG-11"})
    if isinstance(failure, Untranslatable):
        where = f" at {failure.where}" if failure.where else ""
        if failure.stage == "compile":
            when = (f"while compiling the kernel for the CPU, before any kernel code runs (the {failure.primitive} "
                    f"primitive{where} has no CPU rule, specs/divergences.md D12)")
            hint = CPU_HINT
        else:
            when = (f"while translating the kernel for the CPU, before any kernel code runs (it binds the "
                    f"{failure.primitive} primitive{where} on a ref's id, specs/divergences.md D12)")
            hint = REF_HINT
        return when, hint, {"primitive": failure.primitive, "rule": "LAUNCH-3"}
    return (f"at launch, before any kernel code runs (output {failure.output!r} is a semaphore array, "
            "specs/divergences.md D21)", HINT, {"output": failure.output, "rule": "LAUNCH-2"})


def launch_verdict(prop: str, program: Program, mode: DmaMode) -> Verdict | None:
    """LAUNCH-2, LAUNCH-3: the verdict on `prop` when the launch fails under `mode`, or None when it launches."""
    failure = launch_failure(program, mode)
    if failure is None:
        return None
    when, hint, extra = _why(failure)
    raised = f"interpret mode raises {failure.python_type}: {failure.message} {when}"
    if prop != "deadlock-free":
        return Verdict(prop, "unknown", reason=f"{raised}; the kernel never runs in this mode")
    locs: tuple[Loc, ...] = ()
    if isinstance(failure, Untranslatable) and failure.line:
        locs = (Loc(failure.file, failure.line, failure.text),)
    if not locs:
        first = next((ops[0] for ops in program.cores if ops), None)
        locs = (first.loc,) if first is not None and first.loc.line else ()
    details = {"error_type": failure.python_type, "error_message": failure.message, **extra}
    return Verdict(prop, "violated", witness=Witness(message=f"{raised}: no core ever starts", locs=locs,
                                                      details=details, hint=hint))
