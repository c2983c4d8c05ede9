"""RUN-22: a kernel call lowered as one period of its devices, never materialising the others.

When the rotation certificate (RUN-18) proves from the jaxpr that the program repeats every `k`
devices, only devices `0 .. k-1` are evaluated (`lower_kernel(devices=...)`) and the program is a
`Symmetric` (RUN-20): any other core is the rotation of one of theirs. Where the certificate or the
subset lowering declines, the program is built for every device as before, if it may be (RUN-13),
and the refusal then says why the program could not be lowered by one period.
"""

from __future__ import annotations

from typing import Any

from semcheck.checker.frontend.trace import KernelCall

SYMMETRIC_FROM = 257
"""RUN-22: the device count from which a certified call is lowered as one period. Below it every device
is built, as the recorded ground truth of interpret mode was (RUN-14 traces on real devices there too)."""


def lower_call(call: KernelCall, *, cores: int | None, name: str, stats: Any, inputs: Any,
               symmetric_from: int | None = SYMMETRIC_FROM) -> Any:
    """The program of `call`: a `Symmetric` of one period when certified and `N >= symmetric_from`, else the
    materialised `Program` (refused past RUN-13's bound, with the reason one period did not do).
    `symmetric_from=None`: always materialised (a call of a target with several calls, RUN-22)."""
    from semcheck.checker.frontend.evaluator import SubsetRefused
    from semcheck.checker.frontend.lower import lower_kernel
    from semcheck.checker.frontend.rotation_certificate import NotCertified, certify_rotation
    from semcheck.checker.frontend.size_bound import ProgramTooLarge, check_materialisable

    n = call.mesh.num_devices
    why = None if symmetric_from is not None else "it is one of several kernel calls of its target"
    if symmetric_from is not None and n >= max(2, symmetric_from):
        try:
            cert = certify_rotation(call, n)
            if cert.period < n:
                part = lower_kernel(call, cores=cores, name=name, stats=stats, inputs=inputs,
                                    devices=range(cert.period))
                return _symmetric(part, cert)
            why = "the program repeats only every device count"
        except (NotCertified, SubsetRefused) as e:
            why = str(e)
    try:
        check_materialisable(call, cores)  # RUN-13: refused before it is built when too large
    except ProgramTooLarge as e:
        if why is None:
            raise
        raise ProgramTooLarge(f"{e.message}; nor can it be lowered by one "
                              f"period of its devices (RUN-22): {why}", loc=call.loc) from None
    return lower_kernel(call, cores=cores, name=name, stats=stats, inputs=inputs)


def _symmetric(part: Any, cert: Any) -> Any:
    """RUN-22: the Symmetric of a subset lowering of devices `0 .. k-1` and the certificate's (k, shifts)."""
    from semcheck.model.symmetric import Symmetric

    topo = part.topology
    launched = part.cores()
    reps = tuple(launched[topo.global_core(d, c)] for d in range(cert.period) for c in range(topo.cores_per_device))
    args = part.launch_args
    return Symmetric(topo, cert.period, dict(cert.shifts), reps, collective_id=args.get("collective_id"),
                     name=args.get("name", "program"), launch_failure=args.get("launch_failure"),
                     names=tuple(args.get("names", ())), detect_races=args.get("detect_races", False))
