"""What jax's interpreter does with the calls after a call that fails (spec programs.md PRG-11, PRG-122).

A target's calls are checked one by one when they hand no semaphore on, each as its own launch
(every interpreted call has a fresh manager). But a call that fails in every run changes
what the calls after it do, through jax's ordered-effect token, not through the interpreter's
state (PRG-11): the rest of its own jitted computation never starts, and the next computation with
an interpreted call raises the failed call's error at its dispatch, before any of its calls starts.
`after_failures` marks those calls with an `EarlierFailure` launch failure, so that under `eager`
and `on_wait` they are decided as a launch that fails (deadlock-free violated with the error, the
rest unknown, LAUNCH-2's treatment); the computation after that one runs as usual. A TPU runs them
all (divergence D28).

"Fails in every run" is decided from one greedy run (RUN-3): the run fails at an operation that its
core reaches in every schedule, its core passing no wait and no barrier before it. A failure of
`get_barrier_semaphore` is not predicted: the interpreter leaves its manager then, and the call
after the next reuses it (PRG-11), which is not modelled: those calls are left as they are.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from semcheck.model.errors import EarlierFailure, Violation
from semcheck.model.ops import Barrier, Program, Wait

_MODES = ("eager", "on_wait")


def certain_failure(program: Program) -> Violation | None:
    """The failure every interpreted run of `program` ends in (the same in both modes), or None."""
    from semcheck.model.fast import fast_run

    seen = []
    for mode in _MODES:
        out = fast_run(program, mode, record=False)
        f = out.failure
        if f is None:
            return None
        ops = program.cores[f.core]
        if not ops[f.pc].propagates_failure or any(type(op) in (Wait, Barrier) for op in ops[:f.pc]):
            return None
        seen.append(f.violation)
    return seen[0] if all(v == seen[0] for v in seen) else None


def after_failures(kernels: list[Any]) -> list[Any]:
    """PRG-11: `kernels` (in program order, each with its `call.unit`, the top-level computation it is
    dispatched in) with the calls that never start after a failed call marked (module docstring); and,
    for `hardware`, the calls jax's TPU lowering refuses (semantics.md LAUNCH-7, which the interpreter
    runs: `collective_ids.mark_refused`)."""
    from semcheck.checker.frontend.collective_ids import mark_refused

    out = mark_refused(list(kernels))
    i = 0
    while i < len(out):
        k = out[i]
        if k.call is None or k.program.launch_failure is not None or i == len(out) - 1:
            i += 1
            continue
        failure = certain_failure(k.program)
        if failure is None:
            i += 1
            continue
        unit = k.call.unit
        later = sorted({o.call.unit for o in out[i + 1:] if o.call is not None and o.call.unit > unit})
        stops = {unit, *later[:1]}
        mark = EarlierFailure(getattr(failure, "python_type", type(failure).__name__), failure.message,
                              f"{k.name} at {k.loc}")
        j = i + 1
        while j < len(out):
            o = out[j]
            if o.call is not None and o.call.unit in stops and o.program.launch_failure is None:
                out[j] = dataclasses.replace(o, program=dataclasses.replace(o.program, launch_failure=mark))
            j += 1
        # the computation after the next runs as usual; a failure there starts the story again
        i = next((j for j in range(i + 1, len(out)) if out[j].call is not None and out[j].call.unit not in stops),
                 len(out))
    return out


__all__ = ["after_failures", "certain_failure"]
