"""ACC-27, ACC-28: a kernel whose values differ between jax's interpreter modes and `hardware` (and ERR-37: one
whose kernel is not lowered while the interpreter refuses its arguments; PRG-208: one whose kernel is not lowered
and which never starts in the interpreter after a call that fails in every run; PRG-217: such a call, or a lowered one
after it, whose interpreter modes differ).

The front end lowers such a kernel twice (`LoweredKernel.hardware`): `program` with the
values XLA on the CPU gives (the interpreter's modes), and a lowering with the values
every implementation gives, for `hardware`, or the reason there is none (a value it
needs is known only on the CPU: every property is then unknown there, with that
reason and its line). So is a kernel that broke a tie inside itself (ACC-28). Kernels whose modes agree keep
one lowering and never come here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from semcheck.checker.properties.verdict import Verdict

HARDWARE = "hardware"


def split_modes(k: Any, req: Any, decide: Callable[[Any, Any], dict]) -> dict:
    """Per mode of `req`, `decide(program, req)`'s verdicts: the interpreter's modes on `k.program`, `hardware` on
    `k.hardware` (or unknown with its reason) when the kernel has one (ACC-27), an interpreter mode on its own program
    (or unknown with its reason) where `k.modes_apart` has one (PRG-217); `k.program` for every mode else."""
    hardware = getattr(k, "hardware", None)
    apart = {m: p for m, p in getattr(k, "modes_apart", ()) if m in req.modes}
    if hardware is not None and HARDWARE in req.modes:
        apart[HARDWARE] = hardware
    if not apart:
        return decide(k.program, req)
    rest = tuple(m for m in req.modes if m not in apart)
    done = decide(k.program, dataclasses.replace(req, modes=rest)) if rest else {}
    for m, program in apart.items():
        if m == HARDWARE:
            continue
        if isinstance(program, str):  # PRG-217: not shown whether the call starts in this mode
            done[m] = ([Verdict(p, "unknown", reason=program, stats={"rule": "PRG-217"}) for p in req.properties], 0.0)
        else:  # PRG-217: a call that never starts, with this mode's error
            done.update(decide(program, dataclasses.replace(req, modes=(m,))))
    if HARDWARE not in apart:
        return {m: done[m] for m in req.modes}
    if isinstance(hardware, str):
        # ERR-37: the kernel is not lowered, the interpreter refuses it; PRG-208: nor does it start there; ERR-56: it
        # loads or stores a ref in HBM or ANY; ACC-88: jax's TPU lowering refuses it
        rule = getattr(hardware, "rule", "ACC-27")
        reason = str(hardware) if rule in ("ERR-37", "PRG-208", "ERR-56", "ACC-88") else (
            f"{hardware}: under hardware the value is not a fact (specs/deciding/frontend.md ACC-27, "
            "ACC-28), while jax's interpreter modes compute it on the CPU")
        done[HARDWARE] = ([Verdict(p, "unknown", reason=reason, stats={"rule": rule}) for p in req.properties],
                          0.0)
    elif isinstance(hardware, tuple):  # ACC-64: one lowering per case of an index whose range is known
        per = [(words, decide(p, dataclasses.replace(req, modes=(HARDWARE,)))[HARDWARE]) for words, p in hardware]
        done[HARDWARE] = (combine_cases(req.properties, [(w, vs) for w, (vs, _) in per]),
                          sum(seconds for _, (_, seconds) in per))
    else:
        done.update(decide(hardware, dataclasses.replace(req, modes=(HARDWARE,))))
    return {m: done[m] for m in req.modes}


def combine_cases(properties: Any, cases: list[tuple[str, list[Verdict]]], *,
                  of: str = "of the indices a TPU may compute", rule: str = "ACC-64", mode: str = "hardware",
                  kernel_runs: bool = False) -> list[Verdict]:
    """ACC-64: per property, its verdict over every case (each a value of the indices a TPU may compute): proved
    where every case proves it (vacuous where every case holds and some only vacuously), violated where every
    case violates it (the first case's witness), unknown otherwise, naming a case of each verdict. With
    `kernel_runs` (ACC-77, whose cases are the schedule's, not the data's), violated only where a case's witness
    is a run of the kernel (`stats["kernel_run"]`), never because every case violates."""
    out = []
    n = len(cases)
    for prop in properties:
        got = [(w, next(v for v in vs if v.property == prop)) for w, vs in cases]
        kinds = {v.verdict for _, v in got}
        stats = {**got[0][1].stats, "rule": rule, "cases": n}
        every = f"for each of the {n} cases {of} ({rule})"
        shown = next(((w, v) for w, v in got if v.stats.get("kernel_run")), None) if kernel_runs else None
        if shown is not None:
            w, v = shown
            out.append(dataclasses.replace(v, reason=f"violated in the case {w}, whose witness run reads those values "
                                           f"(a run of the kernel under {mode}, {rule})"
                                           + (f": {v.reason}" if v.reason else ""), stats=stats))
        elif kinds == {"proved"}:
            first = got[0][1].reason
            out.append(Verdict(prop, "proved", reason=f"proved {every}" + (f"; in the first, {first}" if first else ""),
                               stats=stats))
        elif kinds <= {"proved", "vacuous"}:
            w, v = next((w, v) for w, v in got if v.verdict == "vacuous")
            out.append(Verdict(prop, "vacuous", reason=f"it holds {every}, for {w} only vacuously: {v.reason}",
                               stats=stats))
        elif kinds == {"violated"} and not kernel_runs:
            w, v = got[0]
            out.append(dataclasses.replace(v, reason=f"violated {every}; the witness is the case {w}"
                                           + (f": {v.reason}" if v.reason else ""), stats=stats))
        else:
            out.append(Verdict(prop, "unknown", reason=_undecided(prop, got, rule, mode, kernel_runs), stats=stats))
    return out


def _undecided(prop: str, got: list, rule: str, mode: str, kernel_runs: bool) -> str:
    """Why the cases leave `prop` undecided: a case of each verdict."""
    seen: dict = {}
    for w, v in got:
        seen.setdefault(v.verdict, (w, v))
    parts = "; ".join(f"{k} for the case {w}" + (f" ({v.reason})" if k == "unknown" else "")
                      for k, (w, v) in seen.items())
    if not kernel_runs:
        return f"under {mode}, {prop} is {parts} ({rule}: decided only where every case a TPU may compute agrees)"
    tail = (" (a case's witness is a run of its lowering, which no run of the kernel need be: the value is "
            "the schedule's)") if set(seen) == {"violated"} else ""
    return f"under {mode}, {prop} is {parts}{tail} ({rule}: decided only where every case proves it)"


def mode_program(k: Any, mode: str) -> Any:
    """The program `split_modes` checks kernel `k` on under `mode`, or its reason when it has none (a str)."""
    if mode == HARDWARE and getattr(k, "hardware", None) is not None:
        return k.hardware
    return dict(getattr(k, "modes_apart", ())).get(mode, k.program)


__all__ = ["combine_cases", "mode_program", "split_modes"]
