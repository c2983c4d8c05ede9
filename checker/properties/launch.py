"""Verdicts for a launch the interpreter refuses (spec LAUNCH-2, LAUNCH-3, ERR-8, ERR-10, ERR-36; D12, D21), and for a
call jax's TPU lowering refuses (LAUNCH-7, D31).

jax's interpreter fails some kernels before any kernel code runs, in every
run: it builds every output's initial value first and fails on a semaphore
output (LAUNCH-2), and it compiles the kernel for the CPU and fails on a
primitive it has no rule for, `pl.semaphore_read` (LAUNCH-3). Those are the
interpreter's limitations, not the kernel's bugs: under `eager` and `on_wait`
every property is `unrunnable` (specs/deciding/report.md REP-21), as it is for a
collective id only jax's TPU lowering picks (D30). A launch that fails for
another reason (an earlier call's error, PRG-11) is decided without looking at
the kernel's operations: `deadlock-free` is violated (no core ever starts, so
none finishes: PROP-4 asks that no terminal state has an unfinished core) and
every other property is vacuous (REP-20), saying that every run fails before
any core starts (LAUNCH-5: each of them is about what a run does, and no run
does anything).
Under `hardware` a TPU launches the program and the checks run as usual, unless jax's TPU lowering
refused the call's computation (LAUNCH-7: a collective id and no barrier semaphore): then the same
treatment applies under `hardware` alone, with jax's ValueError, and the interpreter runs the call.
(A kernel access the interpreter cannot index fails inside the run: ERR-9,
`checker.properties.failing_runs`.)
"""

from __future__ import annotations

import dataclasses

from semcheck.checker.properties.verdict import Verdict, Witness, vacuous
from semcheck.model.errors import (EarlierFailure, NoCollectiveId, TpuLoweringFailure, TypedOperand, Untranslatable,
                                   Violation)
from semcheck.model.launch import launch_failure
from semcheck.model.ops import DmaMode, Loc, Program

HINT = ("jax's TPU interpreter cannot run a pallas_call with semaphore outputs: check it under --dma-mode "
        "hardware, or allocate the semaphores as scratch to test it in interpret mode")
CPU_HINT = ("jax's TPU interpreter compiles the kernel for the CPU and has no rule for this primitive: check "
            "the kernel under --dma-mode hardware, or keep the primitive out of the kernel you interpret")
EARLIER_HINT = ("fix the earlier call's failure: in interpret mode the computation after a failed one re-raises "
                "its error at dispatch and runs nothing (the one after that runs again)")
TPU_HINT = ("jax gives this call a collective id (an auto-assigned one under jax_pallas_auto_assign_collective_ids="
            "'yes' or 'override', or its own) and it uses no barrier semaphore: leave the auto-assignment mode at "
            "'no' for a program with such calls and give collective_id only to kernels that call "
            "get_barrier_semaphore, or set `pltpu.CompilerParams(allow_collective_id_without_custom_barrier=True)`")
MASK_HINT = ("jax's TPU interpreter has no masked load: load the window whole and select with the mask "
             "(`jnp.where(mask, ref[...], other)`) to test the kernel in interpret mode; --dma-mode hardware checks "
             "it as a TPU runs it")
SPACE_HINT = ("jax's TPU interpreter runs only calls whose arguments are untyped or typed ANY or HBM: drop the "
              "`with_memory_space_constraint` (or pass the array through a BlockSpec in that space) to test the "
              "kernel in interpret mode; --dma-mode hardware checks it as a TPU runs it")
HBM_HINT = ("jax's TPU interpreter loads and stores only refs in VMEM or SMEM: copy the window into a VMEM "
            "buffer (`pltpu.sync_copy` or `pltpu.async_copy`) and access that, or give the operand a VMEM "
            "BlockSpec")
REF_HINT = ("jax's TPU interpreter cannot apply this primitive to a kernel ref: write it as a load and a store "
            "(`ref[...] += x` for addupdate) to test the kernel in interpret mode; --dma-mode hardware checks "
            "it as a TPU runs it")


# LAUNCH-5: what a property asks of a run, which a run that fails before any core starts never does
NOTHING_RUNS = {
    "id-disjoint": "no semaphore is allocated and no barrier semaphore fetched, so no id is in both tables",
    "id-int16": "no semaphore or buffer id is handed out",
    "id-agreement": "no remote signal or copy names a semaphore",
    "exit-balance": ("no run reaches a kernel exit: nothing is counted and no copy is pending at one, and the "
                     "interpreter prints no exit warning"),
    "dma-bytes": "no copy starts and no wait runs",
    "race-free": "no access and no copy runs, so none races",
    "invocation-confined": "no signal is sent and no copy lands",
}


def _locs(failure: Violation, program: Program) -> tuple[Loc, ...]:
    """The line the launch failure is shown at: the untranslatable equation's, the failing call's where it is not the
    program's (PRG-223), else the kernel's first operation's."""
    if isinstance(failure, Untranslatable) and failure.line:
        return (Loc(failure.file, failure.line, failure.text),)
    if getattr(failure, "loc", None) is not None:  # PRG-223: a call no device runs, whose lowering fails
        return (failure.loc,)
    first = next((ops[0] for ops in program.cores if ops), None)
    return (first.loc,) if first is not None and first.loc.line else ()


def _why(failure: Violation) -> tuple[str, str, dict[str, str]]:
    """(when the interpreter raises and why, the hint, the rule's details) for a launch failure."""
    if isinstance(failure, TpuLoweringFailure):  # LAUNCH-7: jax refuses to lower the computation for a TPU
        where = (f"; the call refused is {failure.after}, in this call's computation or an earlier one"
                 if failure.after else "")
        return (f"while jax lowers the jitted computation for a TPU, before anything of it runs (specs/semantics/kernels.md "
                f"LAUNCH-7, specs/semantics/divergences.md D31){where}", TPU_HINT, {"rule": "LAUNCH-7", "after": failure.after})
    if isinstance(failure, EarlierFailure):  # PRG-11: an earlier call's error, re-raised at this dispatch
        return (f"at the dispatch of this call's computation, before any core starts: the error of {failure.after}, "
                "which fails in every run, rides on jax's ordered-effect token into the next computation "
                "(specs/semantics/calls.md PRG-11, specs/semantics/divergences.md D28)", EARLIER_HINT,
                {"after": failure.after, "rule": "PRG-11"})
    if isinstance(failure, TypedOperand):  # ERR-36: the interpreter's first step refuses the argument
        return (f"at the call, before anything of it runs (argument {failure.operand!r} is an array typed with "
                f"memory space {failure.space}, specs/semantics/kernels.md ERR-36)", SPACE_HINT,
                {"operand": failure.operand, "rule": "ERR-36"})
    if isinstance(failure, Untranslatable):
        where = f" at {failure.where}" if failure.where else ""
        if failure.primitive == "pallas_call" and failure.error_type == "AssertionError":  # ERR-61: HBM scratch
            return (f"while lowering the call, before any kernel code runs (its {failure.text}: the interpreter "
                    "allocates HBM only for inputs and outputs, specs/semantics/kernels.md ERR-61)", SCRATCH_HINT,
                    {"primitive": failure.primitive, "rule": "ERR-61"})
        if failure.primitive == "pallas_call":  # ERR-43: a vmapped call's grid against its dimension_semantics
            return ("while lowering the call, before any kernel code runs (vmap added grid dimensions that its "
                    "dimension_semantics do not name, specs/semantics/kernels.md ERR-43)", VMAP_HINT,
                    {"primitive": failure.primitive, "rule": "ERR-43"})
        if failure.stage == "compile":
            when = (f"while compiling the kernel for the CPU, before any kernel code runs (the {failure.primitive} "
                    f"primitive{where} has no CPU rule, specs/semantics/divergences.md D12)")
            hint = CPU_HINT
        elif failure.error_type == "NotImplementedError":  # a masked load, refused while translating (D12)
            when = (f"while translating the kernel for the CPU, before any kernel code runs (it refuses a load "
                    f"with a mask{where}, specs/semantics/divergences.md D12)")
            hint = MASK_HINT
        elif "HBM or ANY" in failure.message:  # ERR-54: a load or store of a ref in HBM or ANY
            when = (f"while translating the kernel for the CPU, before any kernel code runs (it refuses a "
                    f"{failure.primitive} of a ref in HBM or ANY{where}, specs/semantics/kernels.md ERR-54)")
            return when, HBM_HINT, {"primitive": failure.primitive, "rule": "ERR-54"}
        else:
            when = (f"while translating the kernel for the CPU, before any kernel code runs (it binds the "
                    f"{failure.primitive} primitive{where} on a ref's id, specs/semantics/divergences.md D12)")
            hint = REF_HINT
        return when, hint, {"primitive": failure.primitive, "rule": "LAUNCH-3"}
    return (f"at launch, before any kernel code runs (output {failure.output!r} is a semaphore array, "
            "specs/semantics/divergences.md D21)", HINT, {"output": failure.output, "rule": "LAUNCH-2"})


SCRATCH_HINT = ("jax's interpreter allocates a kernel argument in HBM only for an input or an output: check it under "
                "--dma-mode hardware, or pass the buffer as an input (memory_space=pl.ANY) to run it in interpret mode")


VMAP_HINT = ("jax's interpreter zips the grid with the dimension_semantics it is given, and vmap adds grid "
             "dimensions the semantics do not name (Mosaic names them itself): check it under --dma-mode hardware, "
             "or call the kernel per batch element (or without dimension_semantics) to run it in interpret mode")


NO_ID_HINT = ("jax picks this kernel's collective id only when it lowers the program for a TPU (a barrier-semaphore "
              "tag, or jax_pallas_auto_assign_collective_ids); its interpreter passes none: check it under --dma-mode "
              "hardware, or give the kernel CompilerParams(collective_id=...) to run it in interpret mode")


def no_id_verdict(prop: str, program: Program, mode: DmaMode, decided: Verdict) -> Verdict:
    """REP-21 for D30: under an interpreter mode, `prop` is unrunnable when every interpreted run fails at the
    first get_barrier_semaphore of every device because the kernel's collective id is one only jax's TPU
    lowering picks (PRG-13, PRG-125), or the call never starts after such a failure (PRG-11); else `decided`
    (the property's verdict), which also stands when it is a violation other than the failure itself (a race
    before the barrier fetch happens in the interpreter too, PRG-155)."""
    if mode == "hardware" or decided.verdict == "unrunnable" or (
            decided.verdict == "violated" and prop != "deadlock-free"):
        return decided
    stopped = _no_id(program)
    return decided if stopped is None else dataclasses.replace(stopped, property=prop)


def _no_id(program: Program) -> Verdict | None:
    """D30's unrunnable verdict (of deadlock-free: the caller names the property), else None."""
    from semcheck.checker.programs.interpreter import NO_ID_TEXT, left_manager  # lazy: it imports the model's runs

    failure = getattr(program, "launch_failure", None)  # (a `Symmetric` program has none of these)
    if isinstance(failure, EarlierFailure):
        if (failure.error_type, failure.error) != ("TypeError", NO_ID_TEXT):
            return None
        kind, raised, short = failure.error_type, failure.error, f"{failure.error_type} (the error of {failure.after})"
        at = f" at this call's dispatch (the error of {failure.after}, PRG-11), so no core ever starts"
    elif (failure is None and getattr(program, "collective_id", 0) is None
          and any(op.fetches_barrier for ops in program.cores for op in ops)):
        left = left_manager(program)
        if left is None or not isinstance(left[0], NoCollectiveId):
            return None
        loc = next(op.loc for ops in program.cores for op in ops if op.fetches_barrier)
        kind, raised, at = "TypeError", NO_ID_TEXT, f" at {loc} ({left[0].message})"  # jax's words for ERR-6
        short = f"{kind} at {loc}"
    else:
        return None
    return Verdict("deadlock-free", "unrunnable", stats={"rule": "D30", "hint": NO_ID_HINT, "raises": short},
                   reason=f"interpret mode cannot run this kernel: jax raises {kind}: {raised}{at}, in every run: its "
                   "collective id exists only on a TPU (specs/semantics/divergences.md D30)")


def launch_verdict(prop: str, program: Program, mode: DmaMode) -> Verdict | None:
    """LAUNCH-2, LAUNCH-3, LAUNCH-7: the verdict on `prop` when the launch fails under `mode`, or None when it launches."""
    failure = launch_failure(program, mode)
    if failure is None:
        return None
    when, hint, extra = _why(failure)
    who = "jax's TPU lowering" if isinstance(failure, TpuLoweringFailure) else "interpret mode"
    said = f"{failure.python_type}: {failure.message}" if failure.message else failure.python_type  # (ERR-61: none)
    raised = f"{who} raises {said} {when}"
    locs = _locs(failure, program)
    if mode != "hardware" and not isinstance(failure, (TpuLoweringFailure, EarlierFailure)):
        # REP-21: the interpreter cannot run the kernel at all (LAUNCH-2, LAUNCH-3): its limitation, not a bug
        # of the kernel, which a TPU runs; so no property is decided in this mode, none violated
        at = f" at {locs[0]}" if locs else ""
        stats = {"rule": extra["rule"], "hint": hint, "raises": f"{failure.python_type}{at}"}
        return Verdict(prop, "unrunnable", stats=stats, reason=(
            f"interpret mode cannot run this kernel: jax raises {said}{at}, "
            f"{when}"))
    if prop != "deadlock-free":
        if prop not in NOTHING_RUNS:  # a property LAUNCH-5 does not argue is not proved by it
            return Verdict(prop, "unknown", reason=f"{raised}; the kernel never runs in this mode")
        at = f" (the kernel at {locs[0]})" if locs else ""
        return vacuous(prop, f"every run fails before any core starts{at}: {raised}; {NOTHING_RUNS[prop]} (LAUNCH-5)")
    details = {"error_type": failure.python_type, "error_message": failure.message, **extra}
    return Verdict(prop, "violated", witness=Witness(message=f"{raised}: no core ever starts", locs=locs,
                                                      details=details, hint=hint))
