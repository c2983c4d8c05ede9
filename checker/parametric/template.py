"""The kernel's jaxpr as one template in N (specs/deciding/parametric.md PAR-3 .. PAR-5): the traced jaxprs
aligned up to numbers affine in N, and their synchronisation evaluated symbolically (Z3) in N, my_id and
the grid step. `checker/parametric/every_n.py` draws the claims from it."""

from __future__ import annotations

import dataclasses
import re
from fractions import Fraction
from typing import Any

from semcheck.checker.frontend.sync_primitives import SYNC_OR_SCOPE
from semcheck.checker.parametric.int32_terms import INT32_MAX, scalar_kind, trunc_div, within_int32

MIN_TRACED = 6
"""Fewer traced N cannot fit the template's numbers with a check to spare (PAR-3)."""

# --- PAR-3: the jaxpr template ----------------------------------------------------------------

_NUMBER = re.compile(r"-?\d+")


class NotTemplate(Exception):
    """The kernel is not one jaxpr template over the traced N (PAR-3 .. PAR-5); the message says why."""


def _closed(j):
    return getattr(j, "jaxpr", j)


def _sub_jaxprs(eqn) -> list:
    out = []
    for v in eqn.params.values():
        for x in (v if isinstance(v, (tuple, list)) else (v,)):
            if hasattr(x, "eqns") or hasattr(getattr(x, "jaxpr", None), "eqns"):
                out.append(_closed(x))
    return out


def _skeleton(jaxpr, path=()):
    """A jaxpr's structure with every number taken out: (structure string, [(path, number)])."""
    parts: list[str] = []
    numbers: list[tuple[tuple, int]] = []
    names: dict = {}

    def name(v) -> str:
        if type(v).__name__ == "Literal":
            val = v.val
            try:
                numbers.append((path + ("lit", id_of[0]), int(val)))
            except (TypeError, ValueError):
                parts.append(repr(val))
            id_of[0] += 1
            return "L" + _NUMBER.sub("#", str(v.aval))
        if v not in names:
            names[v] = f"v{len(names)}"
        return names[v]

    id_of = [0]

    def text(s: str, where: tuple) -> str:
        for k, m in enumerate(_NUMBER.finditer(s)):
            numbers.append((where + (k,), int(m.group())))
        return _NUMBER.sub("#", s)

    parts.append(" ".join(name(v) + ":" + text(str(v.aval), path + ("in", i)) for i, v in enumerate(jaxpr.invars)))
    for i, eqn in enumerate(jaxpr.eqns):
        here = path + (i,)
        ins = " ".join(name(v) for v in eqn.invars)
        outs = " ".join(name(v) + ":" + text(str(v.aval), here + ("out", k)) for k, v in enumerate(eqn.outvars))
        params = []
        for key in sorted(eqn.params):
            val = eqn.params[key]
            if key in ("branches", "jaxpr", "call_jaxpr", "body_jaxpr", "cond_jaxpr"):
                params.append(key)
                continue
            params.append(key + "=" + text(str(val), here + ("p", key)))
        parts.append(f"{outs} = {eqn.primitive.name}[{' '.join(params)}] {ins}")
        for b, sub in enumerate(_sub_jaxprs(eqn)):
            s, nums = _skeleton(sub, here + ("sub", b))
            parts.append("{" + s + "}")
            numbers.extend(nums)
    return "\n".join(parts), numbers


@dataclasses.dataclass(frozen=True)
class Affine:
    """a * N + b."""

    a: int
    b: int

    def __call__(self, n: int) -> int:
        return self.a * n + self.b

    def __str__(self) -> str:
        if self.a == 0:
            return str(self.b)
        head = "N" if self.a == 1 else f"{self.a}N"
        return head if self.b == 0 else f"{head} {'+' if self.b > 0 else '-'} {abs(self.b)}"


def fit(points: list[tuple[int, int]]) -> Affine | None:
    """The affine function through every (N, value), with integer coefficients, or None."""
    (n1, v1), (n2, v2) = points[0], points[-1]
    a = Fraction(v2 - v1, n2 - n1)
    b = v1 - a * n1
    if a.denominator != 1 or b.denominator != 1:
        return None
    f = Affine(int(a), int(b))
    return f if all(f(n) == v for n, v in points) else None


def align(jaxprs: dict[int, Any]) -> dict[tuple, Affine]:
    """PAR-3: the traced jaxprs' one structure, and every number as an affine function of N."""
    ns = sorted(jaxprs)
    skel = {n: _skeleton(jaxprs[n]) for n in ns}
    ref = skel[ns[-1]][0]
    for n in ns:
        if skel[n][0] != ref or len(skel[n][1]) != len(skel[ns[-1]][1]):
            raise NotTemplate(f"the kernel's jaxpr at N = {n} differs from the one at N = {ns[-1]} "
                              "beyond its numbers")
    out: dict[tuple, Affine] = {}
    for k, (where, _) in enumerate(skel[ns[-1]][1]):
        f = fit([(n, skel[n][1][k][1]) for n in ns])
        if f is None:
            values = ", ".join(f"{skel[n][1][k][1]} at N = {n}" for n in ns[:4])
            raise NotTemplate(f"a number of the kernel's jaxpr is not affine in N ({values}, ...)")
        out[where] = f
    return out


# --- PAR-4 / PAR-5: the symbolic kernel ---------------------------------------------------------


class _Sym:
    """Z3 terms of a jaxpr's int32 scalars over N, my_id and the grid step (PAR-4)."""

    def __init__(self, numbers: dict[tuple, Affine], grid: Affine, cut: int):
        import z3

        self.z3 = z3
        self.numbers = numbers
        self.N = z3.Int("N")
        self.me = z3.Int("my_id")
        self.step = z3.Int("step")
        g = self.lit(grid)
        self.domain = z3.And(self.N >= 2, self.me >= 0, self.me < self.N, self.step >= 0, self.step < g,
                             self.N <= N_MAX, g >= 1, g <= INT32_MAX)
        self.grid = g
        self.cut = z3.IntVal(cut)
        self.prove = True  # False: signatures only (the proofs are made once, on one traced N)
        self.kernel: dict[int, Any] = {}  # id -> term: the kernel's int32 operations (PAR-4; kept alive so
        # that Z3 does not hand their ids to other terms)
        self.checks: list[str] = []
        self.axis: str | None = None  # the mesh's one axis: my_id is its axis_index (PAR-4)
        self.recorder = None  # PAR-11: called on every equation walked, in program order (the accesses)

    def lit(self, f: Affine):
        return self.z3.IntVal(f.a) * self.N + self.z3.IntVal(f.b)

    def proved(self, claim, path, hyp=None) -> tuple[bool, Any]:
        """Whether `domain and path and hyp => claim` for every N, my_id, step; else a counterexample.

        PAR-4: the claim includes that no int32 operation it reads wraps (Z3's integers are then jax's
        int32), under the same hypotheses."""
        z3 = self.z3
        if not self.prove:
            return True, None
        hyp = z3.BoolVal(True) if hyp is None else hyp
        claim = z3.And(claim, *_in_int32(z3, z3.And(claim, path, hyp), self.kernel))
        s = z3.Solver()
        s.set("timeout", 10_000)
        s.add(self.domain, path, hyp, z3.Not(claim))
        r = s.check()
        if r == z3.unsat:
            return True, None
        if r == z3.sat:
            m = s.model()
            return False, {k: m.eval(v, model_completion=True).as_long()
                           for k, v in (("N", self.N), ("my_id", self.me), ("step", self.step))}
        return False, "the solver gave up"


N_MAX = 2 ** 30
"""PAR-4 proves for every N from 2 to N_MAX = 2^30 devices (a pod has 8,960; N - 1 + N still fits int32):
that no int32 operation on the way wraps is part of what is proved, not assumed."""
_SCALARS = ("int32[]", "bool[]")


_kind = scalar_kind  # PAR-4's reading of jax's int32 in Z3 (shared with RUN-18)
_tdiv = trunc_div
_in_int32 = within_int32


def has_run_scoped(jaxpr) -> str:
    """Where the first `run_scoped` of a jaxpr (or of a sub-jaxpr) is, or '' (PAR-9: the only allocation
    a kernel's body can make)."""
    for e in jaxpr.eqns:
        if e.primitive.name == "run_scoped":
            return _line(e)
        for sub in _sub_jaxprs(e):
            where = has_run_scoped(sub)
            if where:
                return where
    return ""


def _has_sync(jaxpr) -> bool:
    return any(e.primitive.name in SYNC_OR_SCOPE or any(_has_sync(s) for s in _sub_jaxprs(e)) for e in jaxpr.eqns)


def _evaluate(sym: _Sym, jaxpr, env: dict, path, where: tuple, signature: list, sources: dict) -> None:
    """Walk one jaxpr: Z3 terms for its scalars, PAR-4/PAR-5 checks at each synchronising operation,
    and the erased signature of the synchronisation it performs (appended to `signature`)."""
    z3 = sym.z3
    lit_count = [0]

    def val(v):
        if type(v).__name__ == "Literal":
            k = lit_count[0]
            lit_count[0] += 1
            f = sym.numbers.get(where + ("lit", k))
            kind = _kind(v.aval)
            if f is None or kind not in _SCALARS:
                return None  # only int32 and bool scalars are modelled (PAR-4)
            return z3.BoolVal(f.b != 0) if kind == "bool[]" and f.a == 0 else (None if kind == "bool[]" else sym.lit(f))
        return env.get(v)

    for i, eqn in enumerate(jaxpr.eqns):
        here = where + (i,)
        name = eqn.primitive.name
        args = [val(v) for v in eqn.invars]
        out = None
        line = _line(eqn)
        if name in ("add", "sub", "mul", "rem", "div", "max", "min", "and", "or") and None not in args and len(args) == 2:
            x, y = args
            if z3.is_bool(x) and z3.is_bool(y):
                out = {"and": z3.And, "or": z3.Or}.get(name, lambda a, b: None)(x, y)
            elif not z3.is_bool(x) and not z3.is_bool(y):
                out = {"add": lambda: x + y, "sub": lambda: x - y, "mul": lambda: x * y,
                       "rem": lambda: x - y * _tdiv(z3, x, y), "div": lambda: _tdiv(z3, x, y),
                       "max": lambda: z3.If(x >= y, x, y), "min": lambda: z3.If(x <= y, x, y),
                       "and": lambda: None, "or": lambda: None}[name]()
                if name in ("rem", "div"):
                    sym.checks.append((y != 0, path, f"a divisor at {line} may be 0"))
                if out is not None and name in ("add", "sub", "mul", "div"):
                    sym.kernel[out.get_id()] = out
        elif name in ("eq", "ne", "lt", "le", "gt", "ge") and None not in args and not any(map(z3.is_bool, args)):
            x, y = args
            out = {"eq": x == y, "ne": x != y, "lt": x < y, "le": x <= y, "gt": x > y, "ge": x >= y}[name]
        elif name == "not" and args[0] is not None and z3.is_bool(args[0]):
            out = z3.Not(args[0])
        elif name == "neg" and args[0] is not None and not z3.is_bool(args[0]):
            out = -args[0]
            sym.kernel[out.get_id()] = out
        elif name in ("multiple_of", "convert_element_type") and args and args[0] is not None \
                and _kind(eqn.invars[0].aval) in _SCALARS:
            x = args[0]
            aval = eqn.outvars[0].aval
            to_bool = _kind(aval) == "bool[]"
            if _kind(aval) in _SCALARS:
                out = (x if z3.is_bool(x) else x != 0) if to_bool else (z3.If(x, z3.IntVal(1), z3.IntVal(0)) if z3.is_bool(x) else x)
        elif name == "axis_index":
            if sym.axis is not None and str(eqn.params.get("axis_name")) != str(sym.axis):
                raise NotTemplate(f"the index of another mesh axis than the kernel's ring ({line})")
            out = sym.me
        elif name == "program_id":
            if eqn.params.get("axis") != 0:
                raise NotTemplate(f"a grid of more than one axis ({line})")
            out = sym.step
        elif name == "select_n" and None not in args:
            which, *cases = args
            if len(cases) == 2 and not any(map(z3.is_bool, cases)):
                w = which if z3.is_bool(which) else which != 0
                out = z3.If(w, cases[1], cases[0])
        elif name == "cond":
            _cond(sym, eqn, args, env, path, here, signature, sources, line)
        elif name in ("scan", "while", "for", "fori_loop") or _sub_jaxprs(eqn):
            if any(_has_sync(s) for s in _sub_jaxprs(eqn)):
                raise NotTemplate(f"a loop or call with semaphore operations inside ({line})")
        elif name == "get_barrier_semaphore":
            sources[eqn.outvars[0]] = ("barrier",)
            signature.append((path, ("get_barrier_semaphore",)))
        elif name in SYNC_OR_SCOPE:
            signature.append((path, _sync_op(sym, eqn, args, path, sources, line)))
        if sym.recorder is not None and name != "cond":
            sym.recorder(eqn, args, path, sources, line, signature[-1][1] if name in SYNC_OR_SCOPE and signature else None)
        if out is not None and len(eqn.outvars) == 1 and _kind(eqn.outvars[0].aval) in _SCALARS:
            env[eqn.outvars[0]] = out


def _line(eqn) -> str:
    """Where an equation comes from, as `file:line`, for the reasons PAR-3 .. PAR-5 give."""
    import os

    from jax._src import source_info_util

    frame = source_info_util.user_frame(eqn.source_info.traceback)
    if frame is None:
        return "an unknown line"
    return f"{os.path.basename(frame.file_name)}:{frame.start_line}"


def _cond(sym, eqn, args, env, path, here, signature, sources, line) -> None:
    """A `cond`: each branch walked under the condition that it runs (its items carry it, PAR-5)."""
    z3 = sym.z3
    index, operands = args[0], eqn.invars[1:]
    branches = [_closed(b) for b in eqn.params["branches"]]
    if index is None and any(_has_sync(br) for br in branches):
        raise NotTemplate(f"a branch with semaphore operations, on a condition semcheck cannot read ({line})")
    for b, br in enumerate(branches):
        benv = {bv: env.get(ov) for bv, ov in zip(br.invars, operands) if env.get(ov) is not None}
        bsrc = {bv: sources[ov] for bv, ov in zip(br.invars, operands) if ov in sources}
        if index is None:
            taken = z3.BoolVal(True)
        else:
            idx = z3.If(index, z3.IntVal(1), z3.IntVal(0)) if z3.is_bool(index) else index
            last = len(branches) - 1  # lax.cond clamps the index into range
            taken = (idx <= 0) if b == 0 else ((idx >= last) if b == last else (idx == b))
        _evaluate(sym, br, benv, z3.And(path, taken), here + ("sub", b), signature, bsrc)


MAX_SHAPES = 64
"""PAR-5 enumerates the combinations of branches a step can take; more than this many: unknown."""


def step_classes(sym: _Sym, signature: list) -> dict[str, tuple]:
    """PAR-5: the synchronisation one grid step performs, per class of step (the first, the last, one
    between), for every N >= the cutoff and every device; raises NotTemplate when it depends on more.

    `signature` holds (condition, item) in program order. Every combination of the conditions that
    some (N, my_id, step) of a class satisfies is enumerated (Z3); the items whose condition holds
    must be the same sequence for each."""
    z3 = sym.z3
    guards, order = {}, []
    for g, _ in signature:
        g = z3.simplify(g)
        if g.get_id() not in guards:
            guards[g.get_id()] = (z3.Bool(f"g{len(guards)}"), g)
            order.append(g.get_id())
    out = {}
    classes = {"first": sym.step == 0, "last": z3.And(sym.step == sym.grid - 1, sym.step != 0),
               "between": z3.And(sym.step != 0, sym.step != sym.grid - 1)}
    for name, cls in classes.items():
        s = z3.Solver()
        s.set("timeout", 10_000)
        s.add(sym.domain, sym.N >= sym.cut, cls)
        for b, g in guards.values():
            s.add(b == g)
        seen = None
        for _ in range(MAX_SHAPES + 1):
            r = s.check()
            if r == z3.unsat:
                break
            if r != z3.sat:
                raise NotTemplate("the solver gave up on which branches a grid step takes")
            m = s.model()
            truth = {k: z3.is_true(m.eval(guards[k][0], model_completion=True)) for k in order}
            items = tuple(item for g, item in signature if truth[z3.simplify(g).get_id()])
            if seen is None:
                seen = items
            elif items != seen:
                at = {k: m.eval(v, model_completion=True).as_long()
                      for k, v in (("N", sym.N), ("my_id", sym.me), ("step", sym.step))}
                raise NotTemplate(f"a grid step other than the first and the last synchronises differently "
                                  f"from another of its kind: e.g. N = {at['N']}, my_id = {at['my_id']}, "
                                  f"step = {at['step']}" if name == "between" else
                                  f"the {name} grid step synchronises differently at different N or devices: "
                                  f"e.g. N = {at['N']}, my_id = {at['my_id']}")
            s.add(z3.Or([guards[k][0] != z3.BoolVal(truth[k]) for k in order]) if order else z3.BoolVal(False))
        else:
            raise NotTemplate(f"more than {MAX_SHAPES} combinations of branches in a grid step")
        if seen is not None:
            out[name] = seen
    return out


def _source(sources, v, line):
    s = sources.get(v)
    if s is None:
        raise NotTemplate(f"a semaphore semcheck cannot trace back to the kernel's arguments ({line})")
    return s


def _sync_op(sym, eqn, args, path, sources, line) -> tuple:
    """PAR-4: a synchronising operation's target is (my_id + c) mod N and its amounts are constants."""
    z3 = sym.z3
    name = eqn.primitive.name
    if name in ("semaphore_read", "run_scoped"):
        raise NotTemplate(f"{name} is outside the parametric argument ({line})")
    tree = eqn.params.get("args_tree", eqn.params.get("tree"))
    idx = tree.unflatten(list(range(len(eqn.invars))))
    avals = tree.unflatten([v.aval for v in eqn.invars])

    def const(k, what):
        x = args[k]
        if x is None:
            raise NotTemplate(f"{what} semcheck cannot read symbolically ({line})")
        c = z3.simplify(z3.substitute(x, (sym.N, z3.IntVal(1009)), (sym.me, z3.IntVal(0))))
        if not z3.is_int_value(c):
            raise NotTemplate(f"{what} depends on the grid step ({line})")
        ok, cex = sym.proved(x == c, path)
        if not ok:
            raise NotTemplate(f"{what} is not the same for every N ({line}): {cex}")
        return c.as_long()

    def target(dev):
        if dev is None:
            return None
        if isinstance(dev, dict):
            raise NotTemplate(f"a device id given by mesh axis names ({line})")
        parts = dev if isinstance(dev, tuple) else (dev,)
        if len(parts) != 1 or not isinstance(parts[0], int):
            raise NotTemplate(f"a device id of {len(parts)} mesh axes ({line})")
        x = args[parts[0]]
        if x is None:
            raise NotTemplate(f"a device id semcheck cannot read symbolically ({line})")
        at = {n: z3.simplify(z3.substitute(x, (sym.N, z3.IntVal(n)), (sym.me, z3.IntVal(0))))
              for n in (1009, 1013)}
        if not all(map(z3.is_int_value, at.values())):
            raise NotTemplate(f"a device id that depends on the grid step ({line})")
        v = {n: t.as_long() for n, t in at.items()}
        c = v[1009] if v[1009] == v[1013] else v[1009] - 1009
        # (my_id + c) mod N, written without a division: |c| < N at every N the claim is about
        # (N >= the cutoff > |c| is checked here), so one wrap either way is enough
        if abs(c) >= sym.cut.as_long():
            raise NotTemplate(f"a device offset ({c}) as large as the cutoff ({line})")
        d = sym.me + c
        want = z3.If(d >= sym.N, d - sym.N, z3.If(d < 0, d + sym.N, d))
        ok, cex = sym.proved(x == want, path, sym.N >= sym.cut)
        if not ok:
            raise NotTemplate(f"the device id at {line} is not (my_id {'+' if c >= 0 else '-'} {abs(c)}) mod N "
                              f"for every N: at N = {cex['N']}, my_id = {cex['my_id']}, step = {cex['step']}"
                              if isinstance(cex, dict) else f"the device id at {line}: {cex}")
        return c

    def sem(ref, transforms=()):
        if not isinstance(ref, int):
            raise NotTemplate(f"a semaphore taken through a view ({line})")
        if transforms not in ((), None, []):
            # an element of a semaphore array (`sems.at[i]`), whose index may be computed: outside PAR-4
            raise NotTemplate(f"a semaphore taken through a view ({line})")
        return _source(sources, eqn.invars[ref], line)

    def nbytes(aval_ref):
        shape = getattr(aval_ref, "shape", None)
        dtype = getattr(aval_ref, "dtype", None)
        if shape is None or dtype is None:
            raise NotTemplate(f"a copy whose size semcheck cannot read ({line})")
        if len(shape) + 1 > MIN_TRACED:  # PAR-4: a size is a polynomial of degree <= rank in N
            raise NotTemplate(f"a copy of rank {len(shape)}: too few traced N to pin its size ({line})")
        if not all(isinstance(d, int) for d in shape):
            raise NotTemplate(f"a copy whose size is not static ({line})")
        return ("bytes", tuple(shape), str(dtype))

    if name == "semaphore_signal":
        s, transforms, inc, dev, core = idx
        if core is not None:
            raise NotTemplate(f"a signal with core_index ({line})")
        return ("signal", sem(s, transforms), const(inc, "a signal's increment"), target(dev))
    if name == "semaphore_wait":
        s, transforms, value, dec = idx
        return ("wait", sem(s, transforms), const(value, "a wait's value"))
    if name == "dma_start":
        src, dst, dst_sem, src_sem, dev = idx
        return ("dma", target(dev), sem(src_sem) if src_sem is not None else None, sem(dst_sem), nbytes(avals[0]))
    if name == "dma_wait":
        src, dst, s, src_sem, dev = idx
        return ("dma_wait", sem(s), sem(src_sem) if src_sem is not None else None, nbytes(avals[0]),
                str(sorted((k, str(v)) for k, v in eqn.params.items() if k not in ("tree",))))
    raise NotTemplate(f"{name} is outside the parametric argument ({line})")


def low_cut(ns: tuple[int, ...], grid: Affine) -> int:
    """PAR-5's N_0: from here on every traced N is an instance of the step template (three step
    classes apart when the grid grows), so the totals per step are read off the traced N >= N_0."""
    if grid.a == 0:
        return 2
    return next((n for n in ns if grid(n) >= 3), ns[-1] + 1)


def template_guard(jaxprs: dict[int, Any], grids: dict[int, int], axis: str | None = None) -> tuple[Affine, list]:
    """PAR-3 .. PAR-5 over the jaxprs traced at each N: the grid's extent as a function of N and the
    kernel's erased synchronisation signature; raises NotTemplate with the reason otherwise."""
    ns = sorted(jaxprs)
    if len(ns) < MIN_TRACED:
        raise NotTemplate(f"fewer than {MIN_TRACED} device counts traced")
    grid = fit([(n, grids[n]) for n in ns])
    if grid is None or grid.a < 0:
        raise NotTemplate("the grid's extent is not a nondecreasing affine function of N")
    numbers = align(jaxprs)
    cut = low_cut(ns, grid)
    sigs = {}
    for n in reversed(ns):
        sym = _Sym(numbers, grid, cut=cut)
        sym.axis = axis
        sym.prove = n == ns[-1]  # the proofs are about N, not about the traced jaxpr: made once
        sources = {v: ("arg", i) for i, v in enumerate(jaxprs[n].invars)}
        sig: list = []
        _evaluate(sym, jaxprs[n], {}, sym.z3.BoolVal(True), (), sig, sources)
        for claim, path, why in sym.checks:
            ok, _ = sym.proved(claim, path)
            if not ok:
                raise NotTemplate(why)
        if sym.prove:
            step_classes(sym, sig)
        sig = [item for _, item in sig]
        sigs[n] = sig
        # a copy's size is a product of at most rank numbers affine in N: equal at more than rank
        # traced N, it is the same at every N (PAR-4)
        if sig != sigs[ns[-1]]:
            raise NotTemplate(f"the kernel's synchronisation at N = {n} differs from N = {ns[-1]} "
                              "(a copy's size or a semaphore changes with N)")
    return grid, sigs[ns[-1]]


# PAR-11 walks the template with a recorder of its own (`race_template.py`): the walk and its vocabulary
Sym = _Sym
evaluate = _evaluate
sub_jaxprs = _sub_jaxprs
