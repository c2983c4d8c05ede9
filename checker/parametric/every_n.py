"""Parametric proofs (specs/deciding/parametric.md, PAR-1 .. PAR-10): deadlock-free, exit-balance, the id properties
and dma-bytes for every N.

A ring kernel is a family in the device count N, but the front end traces it at one concrete N at a
time. `every_n` traces it at every N of a range [2, K] and proves deadlock-free and exit-balance for
every N >= 2 when three things hold:

* at each traced N the ordinary checks prove the property, and the lowered system is *uniform*
  (PAR-2): one core per device, a static lowering without failing operations, rotation by one
  device an automorphism, every barrier taken by every device. Its end and totals are then those
  of core 0's events with the targets erased (`erased_run`), which is cross-checked against the
  ordinary least stuck vector;
* the kernel's jaxpr is one template for every N (PAR-3 .. PAR-5, `template_guard`): the traced
  jaxprs agree up to numbers that are affine in N, every remote target is proved (Z3, int32
  arithmetic, N a variable) to be `(my_id + c) mod N`, every signal and wait amount a constant,
  and every branch that changes the synchronisation is taken at the first or the last grid step
  only, so each step between them adds the same erased events;
* the totals grow by a fixed amount per grid step that never lowers a count (PAR-6), so a run that
  completes at K completes at every larger N, and one that balances at two N balances at all.

Anything short of that leaves the ordinary per-N verdicts and says which condition failed. The id
properties (PAR-9) and dma-bytes (PAR-10) are argued in `parametric_ids`; races are not (PAR-7 says why).
"""

from __future__ import annotations

import dataclasses
from collections import Counter as Tally

PROPS = ("id-disjoint", "id-int16", "id-agreement", "deadlock-free", "exit-balance", "dma-bytes", "race-free")
"""The properties argued for every N: PAR-6 (deadlock-free, exit-balance), PAR-9 (ids), PAR-10 (dma-bytes),
PAR-14 (race-free)."""
RULE = {"deadlock-free": "PAR-6", "exit-balance": "PAR-6", "id-disjoint": "PAR-9", "id-int16": "PAR-9",
        "id-agreement": "PAR-9", "dma-bytes": "PAR-10", "race-free": "PAR-14"}
RACES = "race-free"
DEFAULT_RANGE = tuple(range(2, 17))
"""N = 2 .. 16: every N up to the cutoff is traced and checked (PAR-1)."""
DEFAULT_PROBES = (31, 64)
"""Two N past the cutoff, traced and checked too: one odd, one a power of two (PAR-1)."""

# --- PAR-2: the erased run of a uniform system ------------------------------------------------


class NotUniform(Exception):
    """The lowered system is not a uniform ring (PAR-2); the message says why."""


@dataclasses.dataclass(frozen=True)
class ErasedRun:
    """PAR-2: core 0's events with targets erased, run alone; its end and per-key totals."""

    completed: bool
    stop: int  # core 0's position where the erased run ends (its length when it completes)
    totals: dict  # key -> contributed minus waited for, over every event of core 0
    keys: frozenset


def erased_run(low) -> ErasedRun:
    """PAR-2 on one lowered system; raises NotUniform when its premises fail."""
    from semcheck.checker.static.symmetry import find_rotation
    from semcheck.checker.static.system import Contribution, WaitOp
    from semcheck.model.semaphore import shortfall

    topo = low.program.topology
    if topo.cores_per_device != 1:
        raise NotUniform("a device has several cores")
    if topo.num_devices < 2:
        raise NotUniform("one device")
    if not low.ok:
        raise NotUniform("the lowering is not static: " + "; ".join(low.unsupported[:2]))
    if low.failing:
        raise NotUniform("an operation fails")
    rot = find_rotation(low)
    if rot is None or rot.devices != 1:
        raise NotUniform("rotating the devices by one does not map the program onto itself")
    everyone = frozenset(range(topo.num_cores))
    for b in low.barriers.values():
        if b.participants != everyone:
            raise NotUniform(f"barrier {b.name!r} is not taken by every device")
    if low.hb.reach(0) != low.lengths[0]:
        raise NotUniform("a barrier never opens")
    events = [x for x in low.contributions if x.owner == 0] + [w for w in low.waits.values() if w.core == 0]
    events.sort(key=lambda e: e.pos)  # stable: a copy's read half stays before its write half
    counts: dict = {}
    totals: Tally = Tally()
    stop = None
    for e in events:
        if type(e) is Contribution:
            key = e.counter[0]
            totals[key] += e.amount
            if stop is None:
                counts[key] = counts.get(key, 0) + e.amount
        elif type(e) is WaitOp:
            key = e.counter[0]
            if e.counter[1] != 0:
                raise NotUniform("a core waits on another core's semaphore")
            totals[key] -= e.value
            if stop is None:
                short = shortfall(counts.get(key, 0), e.value)
                if short > 0:
                    stop = e.pos
                else:
                    counts[key] = -short
    return ErasedRun(stop is None, low.lengths[0] if stop is None else stop, dict(totals),
                     frozenset(totals))


from semcheck.checker.parametric.template import (  # noqa: E402 - PAR-3..PAR-5
    MIN_TRACED, Affine, NotTemplate, fit, low_cut, template_guard,
)
from semcheck.checker.parametric.ids import (  # noqa: E402 - PAR-9, PAR-10
    BYTES, ID_PROPS, bytes_reason, bytes_summary, id_reasons, id_template,
)


@dataclasses.dataclass(frozen=True)
class Claim:
    """What PAR-6 says of one property in one mode."""

    prop: str
    mode: str
    every_n: bool  # proved for every N >= 2
    proved_at: tuple[int, ...]  # the traced N at which the ordinary check proved it
    traced: tuple[int, ...]
    reason: str
    violated_at: tuple[int, ...] = ()  # the traced N at which the ordinary check found a violation
    timed_out: bool = False  # an ordinary check at some traced N ran out of time (a rerun may decide more)
    rule: str = "PAR-6"  # the rule whose argument makes the claim (RULE)

    def line(self) -> str:
        return f"{self.prop} [{self.mode}]: {self.words()}"

    def words(self) -> str:
        """The claim without its property and mode: what `verify --every-n` prints per property (PAR-8)."""
        if self.every_n:
            bound = "2^20" if self.rule == "PAR-14" else "2^30"  # PAR-14's regions grow with N
            return (f"proved for every N \u2265 2 (N \u2264 {bound}; {self.rule}: the kernel traced at "
                    f"N = {traced_words(self.traced)} is one template in N; {PREMISE})")
        if self.proved_at == self.traced:
            return f"proved for N = {traced_words(self.traced)} only: {self.reason}"
        missing = [n for n in self.traced if n not in self.proved_at]
        head = "violated" if self.violated_at else "not proved"
        shown = self.violated_at or tuple(missing)
        return f"{head} at N = {', '.join(map(str, shown[:6]))}" + (", ..." if len(shown) > 6 else "")

    def as_json(self) -> dict:
        return {"property": self.prop, "mode": self.mode, "every_n": self.every_n,
                "proved_at": list(self.proved_at), "violated_at": list(self.violated_at),
                "traced": list(self.traced), "reason": self.reason, "rule": self.rule}


def every_n(path: str, *, target: str | None = None, ns: tuple[int, ...] = DEFAULT_RANGE,
            probes: tuple[int, ...] = DEFAULT_PROBES,
            modes: tuple[str, ...] = ("eager", "on_wait", "hardware"), timeout_ms: int = 30_000,
            build_kwargs: dict | None = None) -> list[Claim]:
    """PAR-1 .. PAR-6 for one kernel file: per property and mode, whether it is proved for every N >= 2.

    `ns`: every N from 2 to the cutoff K; `probes`: a few N beyond it, traced and checked as well (more
    points for PAR-3's template and PAR-6's totals, the ordinary check at a larger N)."""
    from semcheck.checker.frontend.api import load
    from semcheck.checker.frontend.targets import provision_devices

    ns = tuple(sorted(ns))
    if ns != tuple(range(2, ns[-1] + 1)):
        raise ValueError("the traced device counts must be every N from 2 to the cutoff")
    traced = ns + tuple(sorted(n for n in set(probes) if n > ns[-1]))
    provision_devices(traced[-1])
    import jax

    jax.devices()  # fix the host device count at the largest N, for every N below it
    kernels = {}
    for n in traced:
        ks = load(path, target=target, devices=n, build_kwargs=build_kwargs)
        if len(ks) != 1:
            raise NotTemplate(f"{len(ks)} kernel launches (the argument is for one)")
        kernels[n] = ks[0]
    return claims(kernels, modes=modes, timeout_ms=timeout_ms)


def claims(kernels: dict, *, modes: tuple[str, ...], timeout_ms: int = 30_000,
           props: tuple[str, ...] = PROPS) -> list[Claim]:
    """PAR-6 on kernels lowered at every N of a range: the claims per property (of `props`) and mode."""
    from semcheck.checker.properties.analysis import Analysis
    from semcheck.checker.properties.checking import check_program
    from semcheck.checker.static.least_stuck import least_stuck_vector
    from semcheck.checker.properties.verdict import unknown_kind

    props = tuple(p for p in PROPS if p in props)

    ns = tuple(sorted(kernels))
    race = None
    try:
        calls = {n: k.call for n, k in kernels.items()}
        if any(c is None or len(c.grid) > 1 or None in c.grid for c in calls.values()):
            raise NotTemplate("the kernel's grid is not one axis of a size known at trace time")
        for n, c in calls.items():
            if len(c.mesh.axis_sizes) != 1 or c.mesh.axis_sizes[0] != n or c.mesh.physical_devices != n:
                raise NotTemplate(f"the mesh at N = {n} is not one axis of the N devices")
            if c.cores_per_device != 1:
                raise NotTemplate("a device has several cores")
            for bm in c.block_mappings:
                outs = getattr(getattr(bm, "index_map_jaxpr", None), "jaxpr", None)
                if outs is None or any(type(v).__name__ != "Literal" for v in outs.outvars):
                    # a moving block can be revisited (GRID-3) at some N only: outside the argument
                    raise NotTemplate("a BlockSpec whose block index is not a constant")
        grid, _ = template_guard({n: c.jaxpr for n, c in calls.items()},
                                 {n: c.grid[0] if c.grid else 1 for n, c in calls.items()},
                                 axis=calls[ns[-1]].mesh.axis_names[0])
        guard = ""
        if RACES in props:
            race = _races(calls, grid, ns, timeout_ms / 1000)
    except NotTemplate as e:
        grid, guard = None, f"not one template for every N (PAR-3 .. PAR-5): {e}"
    except Exception as e:  # noqa: BLE001 - a construct the guard does not know: no claim, never a crash
        grid, guard = None, f"not one template for every N: semcheck cannot read the kernel's jaxpr ({type(e).__name__})"
    try:  # PAR-9 has premises of its own: the allocations, wherever the kernel sends
        allocs = id_template(kernels)
    except NotTemplate as e:
        allocs = f"not one allocation template for every N (PAR-9): {e}"
    except Exception as e:  # noqa: BLE001 - the id claims alone are withheld, never a crash
        allocs = f"semcheck cannot read the kernel's allocations for every N ({type(e).__name__}) (PAR-9)"
    out = []
    for mode in modes:
        if mode == "hardware" and (hbm := _hbm_access(kernels)) is not None:  # ERR-56, ACC-88: no per-N check either
            out.extend(Claim(p, mode, False, (), ns, str(hbm), rule=hbm.rule) for p in props)
            continue
        proved: dict[str, list[int]] = {p: [] for p in props}
        violated: dict[str, list[int]] = {p: [] for p in props}
        late: set[str] = set()
        erased: dict[int, ErasedRun] = {}
        summaries: dict = {}
        uniform = ""
        for n in ns:
            program = kernels[n].program
            analysis = Analysis(program, modes=(mode,))
            for v in check_program(program, mode, props, timeout_ms=timeout_ms, analysis=analysis):
                if v.verdict == "proved":
                    proved[v.property].append(n)
                elif v.verdict == "violated":
                    violated[v.property].append(n)
                elif unknown_kind(v.reason or "") == "timeout":
                    late.add(v.property)
            if uniform:
                continue
            low = analysis.mode(mode).lowering
            try:
                er = erased_run(low)
            except NotUniform as e:
                uniform = f"at N = {n} the system is not a uniform ring (PAR-2): {e}"
                continue
            if er.completed != (least_stuck_vector(low)[0] == "completed"):
                uniform = f"at N = {n} the erased run disagrees with the least stuck vector (PAR-2)"
                continue
            erased[n] = er
            summaries[n] = bytes_summary(low)
        pumping = "" if guard or uniform else _pumping(ns, grid, erased)
        why = guard or uniform or pumping
        ids = {}
        if any(p in props for p in ID_PROPS):
            ids = id_reasons(allocs, mode) if not isinstance(allocs, str) else dict.fromkeys(ID_PROPS, allocs)
        for p in props:
            if p in ID_PROPS:  # PAR-9 needs PAR-3's structure and the launch's allocations, not a ring
                reason = ids[p]
            elif p == RACES:  # PAR-14 reads the accesses and the orders of PAR-3 .. PAR-5's template
                reason = guard or _race_reason(race, proved[p])
            elif p == BYTES:
                reason = guard or uniform or bytes_reason(summaries, erased, pumping,
                                                          [n for n in ns if n >= low_cut(ns, grid)])
            else:
                reason = why
            if not reason and p == "exit-balance" and any(any(er.totals.values()) for er in erased.values()):
                reason = "a count is not zero at exit at some traced N"
            every = not reason and tuple(proved[p]) == ns
            if not every and not reason:
                reason = "the ordinary check does not prove it at every traced N"
            late_race = p == RACES and "not decided within" in getattr(race, "reason", "")  # not to be cached
            out.append(Claim(p, mode, every, tuple(proved[p]), ns, reason, tuple(violated[p]), p in late or late_race,
                             RULE[p]))
    return out


def _hbm_access(kernels: dict) -> str | None:
    """ERR-56: why `hardware` claims nothing of a kernel that loads or stores a ref in HBM or ANY directly, at any
    traced N (its ordinary checks run on the program, which does not carry the per-call reason); ACC-88: nor of one
    jax's TPU lowering refuses (a stable top_k); else None. (A `refused_launch.HardwareUnknown`: its words and rule.)"""
    from semcheck.checker.frontend.refused_launch import first_hardware_unknown

    return first_hardware_unknown(getattr(k, "call", None) for k in kernels.values())


# --- PAR-8: the claim in `semcheck verify --every-n` ----------------------------------------------

PREMISE = "premise: the kernel's Python builds this template at every N, PAR-1"
"""Said with every claim for every N: the one thing taken on trust (PAR-1's scope)."""
NOT_ARGUED = ("per N only (PAR-7: the argument for every N covers deadlock-free, exit-balance, the id properties, "
              "dma-bytes and race-free, not invocation-confined)")


def traced_counts() -> tuple[int, ...]:
    """The N `verify --every-n` traces: 2 .. K and the probes (PAR-1's defaults)."""
    return DEFAULT_RANGE + tuple(n for n in DEFAULT_PROBES if n > DEFAULT_RANGE[-1])


@dataclasses.dataclass(frozen=True)
class TargetClaims:
    """PAR-8: what the parametric check says of one target: its claims, or why it does not apply."""

    target: str
    claims: tuple[Claim, ...] = ()
    reason: str = ""  # non-empty: no claim at all (the target is outside the argument, or time ran out)
    timed_out: bool = False
    modes: tuple[str, ...] = ()  # the DMA modes asked for (what a claim-less target is reported under)
    cached: bool = False  # answered from the result cache (an answer of this check, never of a device count)


def target_claims(t, req, deadline: float) -> TargetClaims:
    """PAR-8 on one target of a kernel file (in the verifying child, jax provisioned for the largest
    traced N): lower it at every traced N and make PAR-6's claims for the properties `req` checks.
    Whatever goes wrong is this target's claim not made, with why: never the file's per-N verdicts lost."""
    try:
        return _target_claims(t, req, deadline)
    except Exception as e:  # noqa: BLE001 - a construct or a failure the argument does not know: no claim
        return _none(t, req, f"semcheck cannot follow the kernel for every N ({type(e).__name__}: {str(e)[:200]}) "
                             "(PAR-8)")


def _none(t, req, reason: str, timed_out: bool = False) -> TargetClaims:
    return TargetClaims(t.name, reason=reason, timed_out=timed_out, modes=req.modes)


def _target_claims(t, req, deadline: float) -> TargetClaims:
    import time

    from semcheck.checker.frontend import lower_target
    from semcheck.checker.frontend.errors import FrontendError, Unsupported

    props = tuple(p for p in PROPS if p in req.properties)
    if t.inputs is not None:
        return _none(t, req, "a target with generated inputs is checked per input, not as one family in N (PAR-8)")
    kernels = {}
    for n in traced_counts():
        try:
            ks = lower_target(t, n, cores=req.cores)
        except Unsupported as e:
            return _none(t, req, f"at N = {n} semcheck cannot lower the kernel: {e} (PAR-8)")
        except FrontendError as e:
            return _none(t, req, f"building the target at N = {n} failed: {e} (PAR-8)")
        if len(ks) != 1:
            return _none(t, req, f"{len(ks)} kernel launches at N = {n}: the argument is for one (PAR-7)")
        if getattr(ks[0].program, "followed", None) is not None:  # ACC-9: facts per N and mode, not a template
            return _none(t, req, f"at N = {n} the kernel reads values its copies move (specs/deciding/frontend.md "
                                 "ACC-9): they are facts per N, not one family in N (PAR-8)")
        kernels[n] = ks[0]
    left_ms = int((deadline - time.monotonic()) * 1000)
    if left_ms <= 0:
        return _none(t, req, f"not decided within --timeout {req.timeout:g}s (PAR-8)", timed_out=True)
    out = claims(kernels, modes=req.modes, timeout_ms=max(1000, left_ms // max(1, len(req.modes) * len(kernels))),
                 props=props)
    return TargetClaims(t.name, tuple(out), timed_out=any(c.timed_out for c in out), modes=req.modes)


def cutoff(ns: tuple[int, ...]) -> int:
    """K: the largest N such that every N from 2 to K is traced."""
    return next((n - 1 for n in range(2, ns[-1] + 2) if n not in ns), ns[-1])


def traced_words(ns: tuple[int, ...]) -> str:
    """The traced N in words: `2..16, 31, 64`."""
    k = cutoff(ns)
    return ", ".join([f"{ns[0]}..{k}"] + [str(n) for n in ns if n > k])


def _pumping(ns: tuple[int, ...], grid: Affine, erased: dict[int, ErasedRun]) -> str:
    """PAR-6's conditions on the erased runs; '' when they hold, else why not."""
    k = cutoff(ns)
    if not erased[k].completed:
        return f"the erased run does not complete at N = {k}"
    inner = [n for n in ns if n >= low_cut(ns, grid)]
    keys = erased[k].keys
    if grid.a == 0:
        # the same steps at every N >= N_0: the erased run is the same as at the cutoff
        return "" if all(erased[n].totals == erased[k].totals for n in inner) else \
            "the semaphores' totals change with N although the grid does not"
    if len(inner) < 2:
        return f"fewer than two traced N with at least 3 grid steps"
    if any(erased[n].keys != keys for n in inner):
        return "the semaphores differ between device counts"
    for key in keys:
        pts = [(grid(n), erased[n].totals.get(key, 0)) for n in inner]
        if len({g for g, _ in pts}) < 2:
            return "the grid does not grow with N"
        f = fit(pts)
        if f is None:
            return "a semaphore's total is not the same per grid step at every N (PAR-6)"
        if f.a < 0:
            return "a grid step waits for more than it receives on some semaphore: large N would hang (PAR-6)"
    return ""


def _races(calls: dict, grid: Affine, ns: tuple[int, ...], budget_s: float):
    """PAR-14 on the traced jaxprs: the race argument, or why it could not be made (a string)."""
    from semcheck.checker.parametric.races import argue

    if any(getattr(c, "input_output_aliases", ()) for c in calls.values()):
        # two operands of one array: PAR-11 tells accesses apart by operand
        return "an output aliases an input: semcheck does not read its accesses for every N (PAR-11)"
    try:
        arg = argue({n: c.jaxpr for n, c in calls.items()}, grid, calls[ns[-1]].mesh.axis_names[0],
                    budget_s=max(budget_s, 60.0))
    except NotTemplate as e:
        return f"semcheck cannot read the kernel's accesses for every N (PAR-11): {e}"
    except Exception as e:  # noqa: BLE001 - a construct PAR-11 does not know: no claim, never a crash
        return f"semcheck cannot read the kernel's accesses for every N (PAR-11; {type(e).__name__})"
    if arg.proved and arg.low > cutoff(ns) + 1:
        return f"the argument holds from N = {arg.low}, past the traced N (PAR-14)"
    return arg


def _race_reason(race, proved_at: list[int]) -> str:
    """PAR-14's reason for one mode ('' when the argument holds); a pair the argument leaves unordered at
    an N the per-N check proves says that the argument is weaker there, not that the kernel races."""
    if race is None:
        return "semcheck cannot read the kernel's accesses for every N (PAR-11)"
    if isinstance(race, str):
        return race
    if race.proved:
        return ""
    n = (race.at or {}).get("N")
    if n in proved_at:
        return (f"{race.reason}; the per-N check proves N = {n} race-free: the orders PAR-12 forces are "
                "weaker than the per-N check's there")
    return race.reason
