"""The rotation certificate's symbolic evaluation (specs/deciding/symmetry.md RUN-18): the kernel's jaxpr with Z3
terms for its int32 and bool scalars over a symbolic device, grid point, core and loop counters."""

from __future__ import annotations

import math
import os
from typing import Any

from semcheck.checker.frontend.rotation_obligations import (
    ACCESS, MASKED, NotCertified, Obligations, Ob, Ref)
from semcheck.checker.frontend.sync_primitives import SYNC
from semcheck.checker.frontend.trace import KernelCall, eqn_loc
from semcheck.checker.parametric.int32_terms import INT32_MAX
from semcheck.checker.parametric.int32_terms import scalar_kind as _kind
from semcheck.checker.parametric.int32_terms import trunc_div as _tdiv

_CALLS = {"jit", "pjit", "closed_call", "core_call", "custom_jvp_call", "custom_vjp_call",
          "custom_vjp_call_jaxpr", "checkpoint", "remat2", "eval_jaxpr"}


def _is_ref_aval(aval: Any) -> bool:
    return type(aval).__name__ == "AbstractRef" or hasattr(aval, "inner_aval")


def _closed(j: Any) -> Any:
    return getattr(j, "jaxpr", j)


def _subs(eqn: Any) -> list:
    out = []
    for v in eqn.params.values():
        for x in (v if isinstance(v, (tuple, list)) else (v,)):
            if hasattr(x, "eqns") or hasattr(getattr(x, "jaxpr", None), "eqns"):
                out.append(x)
    return out


def mentions(z3: Any, t: Any, v: Any) -> bool:
    """Whether the Z3 term `t` reads the constant `v` (the device id, say)."""
    seen, todo = set(), [t]
    while todo:
        x = todo.pop()
        if x.get_id() in seen:
            continue
        seen.add(x.get_id())
        if z3.is_const(x) and x.eq(v):
            return True
        todo.extend(x.children())
    return False


def _emits(jaxpr: Any, memo: dict) -> bool:
    """Whether a jaxpr holds an equation the front end turns into operations (RUN-18)."""
    jaxpr = _closed(jaxpr)
    hit = memo.get(id(jaxpr))
    if hit is None:
        hit = any(e.primitive.name in SYNC or e.primitive.name in ACCESS or e.primitive.name in MASKED
                  or e.primitive.name in ("run_scoped", "emit_pipeline", "pipeline_body")
                  or any(_emits(s, memo) for s in _subs(e)) for e in jaxpr.eqns)
        memo[id(jaxpr)] = (hit, jaxpr)
        return hit
    return hit[0]

class Walk(Obligations):
    """The symbolic evaluation of one kernel (module docstring): its obligations."""

    def __init__(self, call: KernelCall, n: int) -> None:
        import z3

        self.z3 = z3
        self.call = call
        self.N = n
        self.me = z3.Int("me")
        self.me2 = z3.Int("me2")
        self.domain = [self.me >= 0, self.me < n]
        self.pids: dict[int, Any] = {}
        self.core = z3.Int("core")
        self.domain += [self.core >= 0, self.core < max(1, call.cores_per_device)]
        for a, g in enumerate(call.grid):
            if g is None:
                raise NotCertified(f"a grid whose extent is computed at run time ({self.call_line()})")
            p = self.pids[a] = z3.Int(f"step{a}")
            self.domain += [p >= 0, p < int(g)]
        self.loops = 0
        self.iterations: list[Any] = []
        self.points: list[dict] = []  # counterexamples met so far: a later candidate k is tried on them first
        self.obs: list[Ob] = []
        self.kernel: dict[int, Any] = {}  # ids of the kernel's int32 terms (kept alive), for `within_int32`
        self.divisors: list[tuple[Any, Any]] = []  # (divisor, path): nonzero wherever it is computed
        self.memo: dict = {}
        self.reads_me_memo: dict[int, bool] = {}  # id(obligation) -> whether its term reads `me`
        self.sizes = dict(zip(call.mesh.axis_names, call.mesh.axis_sizes))
        self.names = list(call.mesh.axis_names)

    def reads_me(self, ob: Any) -> bool:
        """Whether obligation `ob`'s term reads the device id: asked once per obligation, not once per
        candidate period (the walk of a large term was a third of a failed certificate's time)."""
        hit = self.reads_me_memo.get(id(ob))
        if hit is None:
            hit = self.reads_me_memo[id(ob)] = mentions(self.z3, ob.term, self.me)
        return hit

    def call_line(self) -> str:
        loc = self.call.loc
        return f"{os.path.basename(loc.file)}:{loc.line}" if loc.line else "the kernel's call"

    def line(self, eqn: Any) -> str:
        loc = eqn_loc(eqn, self.call.loc)
        return f"{os.path.basename(loc.file)}:{loc.line}" if loc.line else self.call_line()

    # --- values -----------------------------------------------------------------------

    def lit(self, v: Any) -> Any:
        z3 = self.z3
        kind = _kind(v.aval)
        try:
            if kind == "bool[]":
                return z3.BoolVal(bool(v.val))
            if kind == "int32[]":
                return z3.IntVal(int(v.val))
        except (TypeError, ValueError):
            return None
        return None

    def const(self, c: Any) -> Any:
        import numpy as np

        try:
            a = np.asarray(c)
        except Exception:
            return None
        if a.shape == () and a.dtype == np.int32:
            return self.z3.IntVal(int(a))
        if a.shape == () and a.dtype == np.bool_:
            return self.z3.BoolVal(bool(a))
        return None

    def value(self, env: dict, v: Any) -> Any:
        if type(v).__name__ == "Literal":
            return self.lit(v)
        return env.get(v)

    def mark(self, t: Any) -> Any:
        self.kernel[t.get_id()] = t
        return t

    # --- the walk ---------------------------------------------------------------------

    def run(self, jaxpr: Any, args: list, path: Any) -> list:
        consts = getattr(jaxpr, "consts", None)
        jaxpr = _closed(jaxpr)
        binders = list(jaxpr.constvars) + list(jaxpr.invars)
        if len(args) == len(jaxpr.invars) and jaxpr.constvars:
            # a closed jaxpr's constants: scalars as terms, anything else unknown
            args = [self.const(c) for c in (consts or [None] * len(jaxpr.constvars))] + list(args)
        if len(args) != len(binders):
            raise NotCertified(f"a jaxpr of {len(binders)} parameters given {len(args)} values")
        env = dict(zip(binders, args))
        for eqn in jaxpr.eqns:
            outs = self.eqn(eqn, [self.value(env, v) for v in eqn.invars], path)
            for v, o in zip(eqn.outvars, outs):
                env[v] = o
        return [self.value(env, v) for v in jaxpr.outvars]

    def eqn(self, eqn: Any, args: list, path: Any) -> list:
        z3 = self.z3
        name = eqn.primitive.name
        none = [None] * len(eqn.outvars)
        out = None
        if name in ("add", "sub", "mul", "rem", "div", "max", "min", "and", "or") and len(args) == 2 \
                and None not in args and all(isinstance(a, z3.ExprRef) for a in args):
            x, y = args
            if z3.is_bool(x) and z3.is_bool(y):
                out = {"and": z3.And, "or": z3.Or}.get(name, lambda a, b: None)(x, y)
            elif not z3.is_bool(x) and not z3.is_bool(y) and _kind(eqn.outvars[0].aval) == "int32[]":
                if name in ("rem", "div"):
                    self.divisors.append((y, path))
                out = {"add": lambda: x + y, "sub": lambda: x - y, "mul": lambda: x * y,
                       "rem": lambda: x - y * _tdiv(z3, x, y), "div": lambda: _tdiv(z3, x, y),
                       "max": lambda: z3.If(x >= y, x, y), "min": lambda: z3.If(x <= y, x, y),
                       "and": lambda: None, "or": lambda: None}[name]()
                if out is not None:
                    self.mark(out)
        elif name in ("eq", "ne", "lt", "le", "gt", "ge") and None not in args \
                and all(isinstance(a, z3.ExprRef) and not z3.is_bool(a) for a in args):
            x, y = args
            out = {"eq": x == y, "ne": x != y, "lt": x < y, "le": x <= y, "gt": x > y, "ge": x >= y}[name]
        elif name in ("eq", "ne", "xor") and len(args) == 2 \
                and all(isinstance(a, z3.ExprRef) and z3.is_bool(a) for a in args):
            x, y = args
            out = x == y if name == "eq" else x != y
        elif name == "not" and isinstance(args[0], z3.ExprRef) and z3.is_bool(args[0]):
            out = z3.Not(args[0])
        elif name == "neg" and isinstance(args[0], z3.ExprRef) and not z3.is_bool(args[0]):
            out = self.mark(-args[0])
        elif name in ("sign", "abs") and isinstance(args[0], z3.ExprRef) and not z3.is_bool(args[0]) \
                and _kind(eqn.outvars[0].aval) == "int32[]":
            x = args[0]
            out = z3.If(x > 0, z3.IntVal(1), z3.If(x < 0, z3.IntVal(-1), z3.IntVal(0))) if name == "sign" \
                else self.mark(z3.If(x >= 0, x, -x))
        elif name == "clamp" and None not in args and all(isinstance(a, z3.ExprRef) and not z3.is_bool(a)
                                                          for a in args):
            lo, x, hi = args
            out = z3.If(x < lo, lo, z3.If(x > hi, hi, x))
        elif name in ("multiple_of", "convert_element_type", "optimization_barrier") and len(args) == 1 \
                and isinstance(args[0], z3.ExprRef):
            x, kind = args[0], _kind(eqn.outvars[0].aval)
            if kind == "bool[]":
                out = x if z3.is_bool(x) else x != 0
            elif kind == "int32[]":
                out = z3.If(x, z3.IntVal(1), z3.IntVal(0)) if z3.is_bool(x) else x
        elif name == "select_n" and None not in args and all(isinstance(a, z3.ExprRef) for a in args):
            which, *cases = args
            if len(cases) >= 1 and len({z3.is_bool(c) for c in cases}) == 1:
                out = cases[-1]
                if z3.is_bool(which):
                    out = z3.If(which, cases[1], cases[0]) if len(cases) == 2 else None
                else:
                    for i in range(len(cases) - 2, -1, -1):  # the index is clipped into range
                        out = z3.If(which <= 0 if i == 0 else which == i, cases[i], out)
        elif name == "axis_index":
            out = self.axis_index(eqn)
        elif name == "program_id":
            a = eqn.params.get("axis")
            if a not in self.pids or self.call.vmapped_dims:
                raise NotCertified(f"a program_id of axis {a} outside the certificate ({self.line(eqn)})")
            out = self.pids[a]
        elif name == "num_programs":
            a = eqn.params.get("axis")
            out = z3.IntVal(int(self.call.grid[a])) if a in self.pids and not self.call.vmapped_dims else None
        elif name == "cond":
            return self.cond(eqn, args, path)
        elif name == "scan":
            return self.scan(eqn, args, path)
        elif name in _CALLS and _subs(eqn):
            sub = _subs(eqn)[0]
            inner = _closed(sub)
            if len(inner.invars) == len(args):
                return self.run(sub, args, path)
            raise NotCertified(f"a call semcheck cannot follow ({self.line(eqn)})")
        elif name == "run_scoped":
            return self.run_scoped(eqn, args, path)
        elif name == "get_barrier_semaphore":
            return [Ref("barrier", (), True)]
        elif name in SYNC:
            self.sync(eqn, args, path)
            return none
        elif name in ACCESS or name in MASKED:
            self.access(eqn, args, path)
            return none
        elif any(_emits(s, self.memo) for s in _subs(eqn)) or name in ("emit_pipeline", "pipeline_body"):
            raise NotCertified(f"a {name} with synchronisation or memory accesses inside is outside the "
                               f"certificate ({self.line(eqn)})")
        elif any(_is_ref_aval(v.aval) for v in eqn.invars):
            # a primitive on a ref the certificate does not model: whatever the front end makes of it is a
            # function of its operands, so they must be the same on every device (RUN-18)
            for k, (v, a) in enumerate(zip(eqn.invars, args)):
                if not _is_ref_aval(v.aval):
                    self.invariant(a, path, eqn, f"an operand of {name}")
        if out is not None and len(eqn.outvars) == 1:
            return [out]
        return none

    def axis_index(self, eqn: Any) -> Any:
        z3 = self.z3
        axis = eqn.params.get("axis_name")
        if self.call.core_axis_name is not None and axis == self.call.core_axis_name:
            return self.core
        if axis in self.sizes:
            i = self.names.index(axis)
            inner = math.prod(self.call.mesh.axis_sizes[i + 1:])
            size = self.sizes[axis]
            # the row-major coordinate of the logical device id (as the front end's `axis_coords`)
            t = self.me if inner == 1 else self.me / z3.IntVal(inner)
            return t if size == self.N and inner == 1 else t % z3.IntVal(size)
        names = self.call.grid_names or ()
        if axis in names:
            return self.pids.get(names.index(axis))
        raise NotCertified(f"the index of axis {axis!r}, which is neither a mesh axis nor a grid axis "
                           f"({self.line(eqn)})")

    def cond(self, eqn: Any, args: list, path: Any) -> list:
        z3 = self.z3
        index, operands = args[0], args[1:]
        branches = eqn.params["branches"]
        emits = any(_emits(b, self.memo) for b in branches)
        if emits:
            # RUN-18: which branch runs decides what is emitted: the same on every device
            self.invariant(index, path, eqn, "the condition of a branch")
        if index is None:
            return [None] * len(eqn.outvars)
        idx = z3.If(index, z3.IntVal(1), z3.IntVal(0)) if z3.is_bool(index) else index
        last = len(branches) - 1  # lax.cond clamps the index into range
        outs = []
        for b, br in enumerate(branches):
            taken = (idx <= 0) if b == 0 else ((idx >= last) if b == last else (idx == b))
            outs.append((taken, self.run(br, list(operands), z3.And(path, taken))))
        merged = []
        for k in range(len(eqn.outvars)):
            vals = [o[k] for _, o in outs]
            if any(v is None or isinstance(v, Ref) for v in vals) or len({z3.is_bool(v) for v in vals}) != 1:
                merged.append(None)
                continue
            m = vals[-1]
            for (taken, _), v in zip(outs[-2::-1], vals[-2::-1]):
                m = z3.If(taken, v, m)
            merged.append(m)
        return merged

    def scan(self, eqn: Any, args: list, path: Any) -> list:
        """A scan: its body for every iteration at once (a fresh counter); a carry that grows by a constant
        each iteration is an induction variable, every other carry unknown (RUN-18)."""
        z3 = self.z3
        p = eqn.params
        body = p["jaxpr"]
        if not _emits(body, self.memo):
            return [None] * len(eqn.outvars)
        length = int(p["length"])
        if p.get("reverse"):
            raise NotCertified(f"a reversed scan with synchronisation inside ({self.line(eqn)})")
        consts, init, xs = (list(g) for g in p["ft_in"].update(list(args)).unpack())
        nxs = len(xs)
        self.loops += 1
        it = z3.Int(f"iteration{self.loops}")
        self.iterations.append(it)
        inner = z3.And(path, it >= 0, it < length)
        # the carries' updates, read off one symbolic iteration (its obligations are discarded)
        symbols = [self.carry_symbol(a, k) for k, a in enumerate(init)]
        outs = self.probe(body, consts, symbols, nxs, inner, p)
        carries: list[Any] = [None] * len(init)
        steady: set[int] = set()
        for k, (x, a) in enumerate(zip(symbols, init)):
            step = None
            if x is not None and not z3.is_bool(x) and isinstance(outs[k], z3.ExprRef) and not z3.is_bool(outs[k]):
                d = z3.simplify(outs[k] - x)
                if z3.is_int_value(d):
                    step = d.as_long()
            if step is not None:
                t = self.mark(a + z3.IntVal(step) * it) if step else a
                if step:  # the counter's last value is init + step * (length - 1): within int32
                    last = a + step * (length - 1)
                    self.obs.append(Ob("true", z3.And(last <= INT32_MAX, last >= -INT32_MAX - 1),
                                        path, self.line(eqn), "a loop counter"))
                carries[k] = t
            elif x is not None and not mentions(z3, a, self.me):
                steady.add(k)
        # RUN-18: a carry whose initial value and update name no device id is the same on every device at
        # every iteration (by induction); it stands for any int32 value. The set shrinks to a fixpoint: an
        # update that reads a carry left out, or the device id, leaves its carry out too.
        while steady:
            trial = [symbols[k] if k in steady else carries[k] for k in range(len(init))]
            outs = self.probe(body, consts, trial, nxs, inner, p)
            keep = {k for k in steady if isinstance(outs[k], z3.ExprRef) and not mentions(z3, outs[k], self.me)}
            if keep == steady:
                break
            steady = keep
        for k in steady:
            carries[k] = symbols[k]
            if not z3.is_bool(symbols[k]):
                self.domain += [symbols[k] >= -INT32_MAX - 1, symbols[k] <= INT32_MAX]
        self.run(body, [*consts, *carries, *([None] * nxs)], inner)
        return [None] * len(eqn.outvars)

    def carry_symbol(self, a: Any, k: int) -> Any:
        z3 = self.z3
        if not isinstance(a, z3.ExprRef):
            return None
        name = f"carry{self.loops}_{k}"
        return z3.Bool(name) if z3.is_bool(a) else z3.Int(name)

    def probe(self, body: Any, consts: list, carries: list, nxs: int, inner: Any, p: dict) -> list:
        """The carries a scan's body returns for these carries (its obligations are discarded)."""
        saved = (self.obs, self.divisors)
        self.obs, self.divisors = [], []
        try:
            ret = self.run(body, [*consts, *carries, *([None] * nxs)], inner)
        except NotCertified:
            ret = [None] * len(_closed(body).outvars)
        finally:
            self.obs, self.divisors = saved
        outs, _ = (list(g) for g in p["ft_out"].update(ret).unpack())
        return outs

    def run_scoped(self, eqn: Any, args: list, path: Any) -> list:
        jaxpr = eqn.params["jaxpr"]
        allocs = []
        for v in jaxpr.invars:
            aval = v.aval
            sem = "sem" in str(getattr(aval, "dtype", "")) or "semaphore" in str(getattr(aval, "memory_space", ""))
            allocs.append(Ref(None, tuple(int(s) for s in getattr(aval, "shape", ())), sem))
        self.run(jaxpr, [*args, *allocs], path)
        return [None] * len(eqn.outvars)


def kernel_args(call: KernelCall) -> list:
    """The kernel's refs as the program labels them (the launch's operands, LAUNCH-1)."""
    from semcheck.checker.frontend.grid import launch_operands
    from semcheck.checker.frontend.values import BufRef, SemArray

    _, args, _ = launch_operands(call)
    jaxpr = call.jaxpr
    if len(jaxpr.invars) != len(args):
        raise NotCertified(f"the kernel's parameters do not line up with its operands ({call_line(call)})")
    out = []
    for v, a in zip(jaxpr.invars, args):
        shape = tuple(int(s) for s in getattr(v.aval, "shape", ()))
        if type(a) is BufRef:
            out.append(Ref(a.name, shape))
        elif type(a) is SemArray:
            out.append(Ref(a.label, shape, True))
        else:
            out.append(None)
    return out


def call_line(call: KernelCall) -> str:
    loc = call.loc
    return f"{os.path.basename(loc.file)}:{loc.line}" if loc.line else "the kernel's call"


def block_obligations(w: Walk) -> None:
    """GRID-1's block copies: each BlockSpec's block index the same on every device (its index map is
    evaluated over the symbolic grid point), and an HBM label a copy touches only in part never moves."""
    call = w.call
    if call.kind != "pallas_call" or not call.block_mappings:
        return
    from semcheck.checker.frontend.grid import hbm_labels

    hbm = hbm_labels(call)
    roles = [op for op in call.operands if op.role in ("input", "output")]
    if len(roles) != len(call.block_mappings):
        raise NotCertified(f"the kernel's BlockSpecs do not line up with its operands ({call_line(call)})")
    counts = {"input": 0, "output": 0}
    for bm, op in zip(call.block_mappings, roles):
        j = counts[op.role]
        counts[op.role] += 1
        closed = bm.index_map_jaxpr
        inner = _closed(closed)
        grid_args = [w.pids[a] for a in range(len(call.grid))]
        args = grid_args + [None] * (len(inner.invars) - len(grid_args))
        outs = w.run(closed, args[:len(inner.invars)], w.z3.BoolVal(True))
        for x in outs:
            if x is None:
                raise NotCertified(f"a BlockSpec index map of {op.name or op.role} that semcheck cannot read "
                                   f"symbolically ({call_line(call)})")
            w.obs.append(Ob("inv", x, w.z3.BoolVal(True), call_line(call), f"the block index of {op.name}"))
        block = tuple(getattr(b, "block_size", b) for b in bm.block_shape)
        if tuple(int(s) if isinstance(s, int) else -1 for s in block) != tuple(op.shape) and not call.sees_array(op):
            label = hbm.get((op.role, j))
            w.obs.append(Ob("row", None, w.z3.BoolVal(True), call_line(call), f"the block copies of {op.name}",
                             label, 0, 0))
