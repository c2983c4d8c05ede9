"""A rotation certificate (specs/deciding/symmetry.md RUN-18, DR-39): that a kernel's program repeats every k
devices, proved from its jaxpr, symbolically in the device id, without building the program.

The kernel body (and its BlockSpec index maps) is evaluated once with Z3 terms for its int32 and bool
scalars, over a symbolic device `me`, symbolic grid coordinates, core index and loop counters, with N
and the grid fixed. Every value the front end turns into an operation becomes an *obligation*:

* `inv`: a branch condition that decides what runs, a semaphore index, an amount, a size, a non-first
  index of a region: the same at `me` and at `me2 = (me + k) mod N`;
* `dev`: a named device: in range, and `t(me2) = (t(me) + k) mod N`;
* `row`: a buffer's first-dimension start: moved by one fixed cyclic shift per label (DR-39).

The front end's operations for an equation are a function of the values it reads and of the branches
taken (RUN-18 gives the argument), so when every obligation holds for every device and grid point,
device `me2`'s core is device `me`'s rotated: RUN-7's repetition and DR-5's symmetry. A value the
evaluation cannot follow (a load, a float, a loop carry that names the device) that reaches an
obligation: `NotCertified`.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable

from semcheck.checker.frontend.rotation_obligations import NotCertified, Ob
from semcheck.checker.frontend.rotation_walk import Walk, block_obligations, call_line, kernel_args
from semcheck.checker.frontend.trace import KernelCall
from semcheck.checker.parametric.int32_terms import within_int32

__all__ = ["Certificate", "NotCertified", "certify_rotation"]


@dataclasses.dataclass(frozen=True)
class Certificate:
    """RUN-18: device d+k runs device d's operations rotated (RUN-7), each label's regions moved by its
    shift (DR-39)."""

    period: int
    # label -> (rows per rotation by k, modulus), as `Rotation.shifts`; a label whose regions do not
    # move is left out (`symmetry.compare` then compares its regions as they are)
    shifts: dict[str, tuple[int, int]]


MAX_SECONDS = 20.0
"""RUN-18: past this much CPU time on one kernel the certificate gives up (the caller builds the program)."""
_SOLVER_MS = 5_000


class _Prover:
    """The obligations' proofs for one candidate period k."""

    def __init__(self, w: Walk, k: int, deadline: float) -> None:
        z3 = w.z3
        self.w, self.z3, self.k, self.deadline = w, z3, k, deadline
        n = w.N
        self.rot = w.me2 == z3.If(w.me + k >= n, w.me + k - n, w.me + k)
        self.base = [*w.domain, self.rot]
        self.unsure = False  # a shift was guessed without a model: a failure here is no counterexample (RUN-42)

    def at2(self, t: Any) -> Any:
        return self.z3.substitute(t, (self.w.me, self.w.me2))

    def claim(self, ob: Ob) -> Any:
        z3, w, n, k = self.z3, self.w, self.w.N, self.k
        if ob.kind == "true":
            return ob.term
        if ob.kind == "inv":
            return ob.term == self.at2(ob.term)
        if ob.kind == "dev":
            t = ob.term
            return z3.And(t >= 0, t < n, self.at2(t) == z3.If(t + k >= n, t + k - n, t + k))
        raise AssertionError(ob.kind)

    def free(self) -> list:
        w = self.w
        return [w.me, *w.pids.values(), w.core, *w.iterations]

    def refuted(self, claim: Any) -> bool:
        """Whether a counterexample met for an earlier k, or device 0 or N - k at the first grid point, is one
        for this k (a cheap first try: every such point is in the domain, so a claim false there is false)."""
        z3, w = self.z3, self.w
        # device 0 and its preimage first (the device a kernel most often treats apart), at step 0
        corners = [{**{v.get_id(): 0 for v in self.free()}, w.me.get_id(): me} for me in (0, w.N - self.k)]
        for point in corners + w.points:
            me = point[w.me.get_id()]
            pairs = [(v, z3.IntVal(point[v.get_id()])) for v in self.free()]
            pairs.append((w.me2, z3.IntVal((me + self.k) % w.N)))
            if z3.is_false(z3.simplify(z3.substitute(claim, *pairs))):
                return True
        return False

    def side(self, ob: Ob) -> list:
        if ob.side is None:
            z3 = self.z3
            ob.side = within_int32(z3, z3.And(ob.path, *([] if ob.term is None else [ob.term == ob.term])),
                                self.w.kernel)
        return ob.side

    def holds(self, claims: list[tuple[Ob, Any]], quick: bool = False) -> tuple[bool, Any]:
        """Whether every `path => claim` holds (with no int32 wrap on the way, PAR-4's reading); else a model."""
        z3 = self.z3
        if time.process_time() > self.deadline:
            raise NotCertified(f"the certificate ran out of time ({MAX_SECONDS:.0f} s of CPU)")
        full = [z3.Implies(ob.path, z3.And(c, *self.side(ob))) for ob, c in claims]
        claim = z3.And(*full)
        if quick and self.refuted(claim):
            return False, None
        s = z3.Solver()
        s.set("timeout", _SOLVER_MS)
        s.add(*self.base, z3.Not(claim) if full else z3.BoolVal(False))
        r = s.check()
        if r == z3.unsat:
            return True, None
        if r == z3.sat:
            m = s.model()
            self.w.points.append({v.get_id(): m.eval(v, model_completion=True).as_long() for v in self.free()})
            return False, m
        raise NotCertified("the solver gave up on the certificate")

    def where(self, m: Any) -> str:
        w = self.w
        me = m.eval(w.me, model_completion=True).as_long()
        steps = [m.eval(p, model_completion=True).as_long() for p in w.pids.values()]
        at = f" at grid step {tuple(steps) if len(steps) > 1 else steps[0]}" if steps else ""
        return f"device {me} and device {(me + self.k) % w.N}{at}"

    def check(self, explain: bool) -> tuple[str | None, dict[str, tuple[int, int]]]:
        """None and the shifts, or why the program does not repeat every k devices."""
        w, z3 = self.w, self.z3
        plain = [ob for ob in w.obs if ob.kind != "row"]
        todo = [ob for ob in plain if ob.kind != "inv" or w.reads_me(ob)]
        todo_side = todo + w.divisor_obs
        ok, _ = self.holds([(ob, self.claim(ob)) for ob in todo_side], quick=not explain)
        if not ok:
            if not explain:
                return "", {}
            for ob in todo_side:
                ok, m = self.holds([(ob, self.claim(ob))])
                if not ok:
                    return self.explain(ob, m), {}
            return "the obligations hold one by one but not together", {}
        shifts: dict[str, tuple[int, int]] = {}
        by_label: dict[str | None, list[Ob]] = {}
        for ob in w.obs:
            if ob.kind == "row":
                by_label.setdefault(ob.label, []).append(ob)
        for label, obs in by_label.items():
            why, shift = self.label_shift(label, obs, explain)
            if why is not None:
                return why, {}
            if shift:
                shifts[label] = shift
        return None, shifts

    def label_shift(self, label: str | None, obs: list[Ob], explain: bool) -> tuple[str | None, Any]:
        z3, w = self.z3, self.w
        fixed = label is None or any(ob.term is None for ob in obs)
        moving = [ob for ob in obs if ob.term is not None and w.reads_me(ob)]
        if not moving:
            return None, None
        m = max(ob.extent for ob in obs)
        delta = 0
        if not fixed:
            for ob in moving:
                s = z3.Solver()
                s.set("timeout", _SOLVER_MS)
                s.add(*self.base, ob.path)
                r = s.check()
                self.unsure = self.unsure or r == z3.unknown  # delta stays 0: a guess
                if r == z3.sat:
                    mod = s.model()
                    lo = mod.eval(ob.term, model_completion=True).as_long()
                    lo2 = mod.eval(self.at2(ob.term), model_completion=True).as_long()
                    delta = (lo2 - lo) % m if m else 0
                    break
        claims = []
        for ob in obs:
            if ob.term is None:
                continue
            lo, lo2 = ob.term, self.at2(ob.term)
            if delta == 0:
                c = lo2 == lo
            elif ob.size >= m:
                c = z3.And(lo == 0, lo2 == 0)  # the whole extent maps onto itself
            else:
                moved = z3.If(lo + delta >= m, lo + delta - m, lo + delta)
                c = z3.And(lo >= 0, lo + ob.size <= m, lo2 == moved)  # a region it would wrap: not a box
            claims.append((ob, c))
        ok, _ = self.holds(claims, quick=not explain)
        if ok:
            return None, (delta, m) if delta else None
        if not explain:
            return "", None
        for ob, c in claims:
            ok, mod = self.holds([(ob, c)])
            if not ok:
                how = "does not move by one fixed number of rows" if delta else "is not the same"
                if fixed and label is None:
                    how = "of a run_scoped buffer is not the same"
                elif fixed:
                    how = "is not the same (another access of its buffer is placed only in part)"
                return (f"the first index of {ob.what} at {ob.where} {how} on {self.where(mod)}"
                        if mod is not None else f"{ob.what} at {ob.where}"), None
        return "the regions of a buffer do not move together", None

    def explain(self, ob: Ob, m: Any) -> str:
        where = self.where(m) if m is not None else "some device"
        if ob.kind == "dev":
            return f"{ob.what} at {ob.where} is not the issuing device's shifted by {self.k} (mod N) on {where}"
        if ob.kind == "true":
            return f"{ob.what} at {ob.where} may be out of range" if ob.where else f"{ob.what} may be 0"
        return f"{ob.what} at {ob.where} differs between {where}"


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def smallest_period(candidates: list[int], holds: Callable[[int], bool | None]) -> int | None:
    """RUN-42: the smallest of `candidates` (the divisors of N below N, ascending) for which `holds` is True,
    or None, asking `holds` of the largest candidates first and of no divisor of one that failed with a
    counterexample (False): the obligations that hold for k hold for every multiple of k, so such a k
    rules out its divisors. None from `holds`: failed without a counterexample, which rules out only k.
    The smallest candidate is asked first: when it holds it is the answer and nothing else is asked (a kernel
    that repeats every device costs one question, not one more per prime dividing N)."""
    if candidates and holds(candidates[0]):
        return candidates[0]
    refuted: list[int] = []
    for k in candidates:
        if k > 1 and not any(m != k and m % k == 0 for m in candidates) and holds(k) is False:
            refuted.append(k)  # a largest candidate N/p: when all are refuted, so is every candidate
    for k in candidates:
        if any(f % k == 0 for f in refuted):
            continue
        answer = holds(k)
        if answer:
            return k
        if answer is False:
            refuted.append(k)
    return None


def certify_rotation(call: KernelCall, num_devices: int) -> Certificate:
    """RUN-18: the smallest period k (a divisor of N below N) whose rotation the kernel's jaxpr proves
    to map its program onto itself, and the shifts of DR-39; raises NotCertified with the reason."""
    try:
        return _certify(call, int(num_devices))
    except NotCertified:
        raise
    except Exception as e:  # never an internal error: the caller then builds the program
        raise NotCertified(f"semcheck cannot certify this kernel's symmetry ({type(e).__name__}: "
                           f"{str(e).splitlines()[0][:200] if str(e) else ''}; {call_line(call)})") from e


def _certify(call: KernelCall, n: int) -> Certificate:
    if n < 2:
        raise NotCertified("one device: nothing to rotate")
    if call.mesh.num_devices != n:
        raise NotCertified(f"the kernel's mesh has {call.mesh.num_devices} devices, not {n}")
    if call.num_index_operands:
        raise NotCertified(f"a kernel with scalar-prefetch operands ({call_line(call)}): their values are each "
                           "device's own input, which the certificate does not read")
    if call.vmapped_dims:
        raise NotCertified(f"a vmapped kernel ({call_line(call)})")
    deadline = time.process_time() + MAX_SECONDS
    w = Walk(call, n)
    w.run(call.jaxpr, kernel_args(call), w.z3.BoolVal(True))
    block_obligations(w)
    w.divisor_obs = [Ob("true", y != 0, p, "", "a divisor") for y, p in w.divisors]
    tried: dict[int, tuple[str | None, dict]] = {}
    unsure: set[int] = set()

    def holds(k: int) -> bool | None:
        if k not in tried:
            prover = _Prover(w, k, deadline)
            tried[k] = prover.check(explain=k == 1)
            if prover.unsure:
                unsure.add(k)
        if tried[k][0] is None:
            return True
        return None if k in unsure else False

    holds(1)

    k = smallest_period(_divisors(n)[:-1], holds)
    if k is not None:
        return Certificate(k, tried[k][1])
    first = tried[1][0]  # the reason is k = 1's, as when every candidate was tried in order
    raise NotCertified(f"the program is not proved to repeat: {first}")
