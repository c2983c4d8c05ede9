"""The results of a target checked as one program of kernel calls (spec programs.md).

The verifying child process (`child`) calls `program_results` when the front end composed the target's calls
(`frontend.programs.lower_program`): one program, checked in every requested mode like a single
kernel, with what the composition cannot decide made unknown with its reason (PRG-107, PRG-108).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from semcheck.checker.verdict import Verdict
from semcheck.model.ops import INTERPRETER_MODES


def program_results(composed: Any, name: str, req: Any, deadline: float, t_lower: float) -> list[Any]:
    """Per requested mode, a `request.Result` for the composed program."""
    from semcheck.checker.checking import check_modes, exposures_of
    from semcheck.checker.request import Result

    from semcheck.checker.program_entry import entry_gaps

    program = composed.program
    untrusted = entry_gaps(composed) if "hardware" in req.modes else ()
    modes = tuple(m for m in req.modes if (composed.interpreter_exact or m not in INTERPRETER_MODES)
                  and not (untrusted and m == "hardware"))
    done = check_modes(program, dataclasses.replace(req, modes=modes), deadline) if modes else {}
    exposed = exposures_of(program, req.fold)
    out = []
    for mode in req.modes:
        if mode in done:
            verdicts, seconds = done[mode]
            verdicts = [_gap(v, composed.race_gaps) for v in verdicts]
        else:
            why = "; ".join(untrusted[:2]) if mode == "hardware" else composed.why
            verdicts, seconds = [Verdict(p, "unknown", reason=why) for p in req.properties], 0.0
        out.append(Result(
            target=name, devices=req.devices, dma_mode=mode, verdicts=verdicts,
            program={"ops": program.num_ops, "cores": program.topology.num_cores,
                     "collective_id": program.collective_id, "exposures": exposed,
                     "calls": [inv.describe() for inv in composed.ir.invocations]},
            seconds={"trace_and_lower": round(t_lower, 4), "check": round(seconds, 4)},
        ))
    return out


def _gap(v: Verdict, gaps: tuple[str, ...]) -> Verdict:
    """PRG-108: race-free is not proved over a program whose copies may be in flight at an unmodelled use."""
    if v.property != "race-free" or v.verdict != "proved" or not gaps:
        return v
    return Verdict(v.property, "unknown", reason="; ".join(gaps[:2]), stats=v.stats)


__all__ = ["program_results"]
