"""A rotation certificate (specs/semantics.md RUN-18, DR-39): that a kernel's program repeats every k
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
evaluation cannot follow (a load, a float, a loop carry) that reaches an obligation: `NotCertified`.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
import time
from typing import Any

from semcheck.checker.frontend.trace import KernelCall, eqn_loc
from semcheck.checker.parametric_template import INT32_MAX, _in_int32, _kind, _tdiv


@dataclasses.dataclass(frozen=True)
class Certificate:
    """RUN-18: device d+k runs device d's operations rotated (RUN-7), each label's regions moved by its
    shift (DR-39)."""

    period: int
    shifts: dict[str, tuple[int, int]]  # label -> (rows per rotation by k, modulus), as fold.race_period's


class NotCertified(Exception):
    """The kernel's program is not certified to repeat; str(e) says why, with the kernel's line."""


MAX_SECONDS = 20.0
"""RUN-18: past this much CPU time on one kernel the certificate gives up (the caller builds the program)."""
_SOLVER_MS = 5_000

_SYNC = {"dma_start", "dma_wait", "semaphore_signal", "semaphore_wait", "semaphore_read",
         "get_barrier_semaphore"}
_ACCESS = {"get": 1, "swap": 2, "addupdate": 2}  # primitive -> where its indexer leaves start
_MASKED = {"masked_load", "masked_swap"}
_CALLS = {"jit", "pjit", "closed_call", "core_call", "custom_jvp_call", "custom_vjp_call",
          "custom_vjp_call_jaxpr", "checkpoint", "remat2", "eval_jaxpr"}
_IDENTITY_TRANSFORMS = ("MemorySpaceCastTransform", "AccessAssumptionTransform")


class _Leaf:
    """A position among an equation's operands, put into its pytree to tell operands from static ints."""

    __slots__ = ("i",)

    def __init__(self, i: int) -> None:
        self.i = i


@dataclasses.dataclass(frozen=True, eq=False)
class _Ref:
    """A ref the kernel names: its label in the program (None: a run_scoped buffer, whose label changes
    with every allocation, so its regions may not move) and its shape."""

    label: str | None
    shape: tuple[int, ...]
    semaphore: bool = False


@dataclasses.dataclass
class _Ob:
    kind: str  # "inv" | "dev" | "row"
    term: Any
    path: Any
    where: str
    what: str
    label: str | None = None
    size: int = 0
    extent: int = 0
    side: Any = None  # PAR-4's no-wrap conditions of the kernel terms it reads (the same for every k)


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


def _emits(jaxpr: Any, memo: dict) -> bool:
    """Whether a jaxpr holds an equation the front end turns into operations (RUN-18)."""
    jaxpr = _closed(jaxpr)
    hit = memo.get(id(jaxpr))
    if hit is None:
        hit = any(e.primitive.name in _SYNC or e.primitive.name in _ACCESS or e.primitive.name in _MASKED
                  or e.primitive.name in ("run_scoped", "emit_pipeline", "pipeline_body")
                  or any(_emits(s, memo) for s in _subs(e)) for e in jaxpr.eqns)
        memo[id(jaxpr)] = (hit, jaxpr)
        return hit
    return hit[0]


class _Walk:
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
        self.obs: list[_Ob] = []
        self.kernel: dict[int, Any] = {}  # ids of the kernel's int32 terms (kept alive), for `_in_int32`
        self.divisors: list[tuple[Any, Any]] = []  # (divisor, path): nonzero wherever it is computed
        self.memo: dict = {}
        self.sizes = dict(zip(call.mesh.axis_names, call.mesh.axis_sizes))
        self.names = list(call.mesh.axis_names)

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
            return [_Ref("barrier", (), True)]
        elif name in _SYNC:
            self.sync(eqn, args, path)
            return none
        elif name in _ACCESS or name in _MASKED:
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
            if any(v is None or isinstance(v, _Ref) for v in vals) or len({z3.is_bool(v) for v in vals}) != 1:
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
        probe = [z3.Int(f"carry{self.loops}_{k}") if isinstance(a, z3.ExprRef) and not z3.is_bool(a) else None
                 for k, a in enumerate(init)]
        saved = (self.obs, self.divisors)
        self.obs, self.divisors = [], []
        try:
            ret = self.run(body, [*consts, *probe, *([None] * nxs)], inner)
        finally:
            self.obs, self.divisors = saved
        outs, _ = (list(g) for g in p["ft_out"].update(ret).unpack())
        carries = []
        for k, (x, a) in enumerate(zip(probe, init)):
            step = None
            if x is not None and isinstance(outs[k], z3.ExprRef) and not z3.is_bool(outs[k]):
                d = z3.simplify(outs[k] - x)
                if z3.is_int_value(d):
                    step = d.as_long()
            if step is None:
                carries.append(None)
            else:
                t = self.mark(a + z3.IntVal(step) * it) if step else a
                if step:  # the counter's last value is init + step * (length - 1): within int32
                    last = a + step * (length - 1)
                    self.obs.append(_Ob("true", z3.And(last <= INT32_MAX, last >= -INT32_MAX - 1),
                                        path, self.line(eqn), "a loop counter"))
                carries.append(t)
        self.run(body, [*consts, *carries, *([None] * nxs)], inner)
        return [None] * len(eqn.outvars)

    def run_scoped(self, eqn: Any, args: list, path: Any) -> list:
        jaxpr = eqn.params["jaxpr"]
        allocs = []
        for v in jaxpr.invars:
            aval = v.aval
            sem = "sem" in str(getattr(aval, "dtype", "")) or "semaphore" in str(getattr(aval, "memory_space", ""))
            allocs.append(_Ref(None, tuple(int(s) for s in getattr(aval, "shape", ())), sem))
        self.run(jaxpr, [*args, *allocs], path)
        return [None] * len(eqn.outvars)

    # --- obligations ------------------------------------------------------------------

    def invariant(self, x: Any, path: Any, eqn: Any, what: str) -> None:
        if isinstance(x, _Ref) or x is _STATIC:
            return
        if x is None:
            raise NotCertified(f"{what} at {self.line(eqn)} depends on a value semcheck cannot follow "
                               f"symbolically {_UNFOLLOWED}")
        self.obs.append(_Ob("inv", x, path, self.line(eqn), what))

    def leaf(self, x: Any, args: list) -> Any:
        if isinstance(x, _Leaf):
            return args[x.i]
        if isinstance(x, numbers.Integral) and not isinstance(x, bool):
            return self.z3.IntVal(int(x))
        if x is None:
            return _STATIC
        return _STATIC if isinstance(x, (bool, str)) else None

    def leaves(self, tree: Any) -> list:
        import jax

        return jax.tree_util.tree_leaves(tree, is_leaf=lambda t: isinstance(t, _Leaf))

    def all_invariant(self, part: Any, args: list, path: Any, eqn: Any, what: str) -> None:
        for x in self.leaves(part):
            if isinstance(x, _Leaf):
                self.invariant(args[x.i], path, eqn, what)

    def ref_of(self, part: Any, args: list) -> tuple[Any, tuple]:
        if type(part).__name__ == "TransformedRef":
            base, chain = self.ref_of(part.ref, args)
            return base, (*chain, *part.transforms)
        if isinstance(part, _Leaf):
            return args[part.i], ()
        return None, ()

    def region(self, part: Any, transforms: tuple, args: list, path: Any, eqn: Any, what: str) -> None:
        """A region's obligations: its first dimension's start moves by its label's shift (DR-39), every
        other index is the same on every device."""
        z3 = self.z3
        ref, chain = self.ref_of(part, args)
        chain = (*chain, *transforms)
        if not isinstance(ref, _Ref):
            raise NotCertified(f"{what} at {self.line(eqn)} is a ref semcheck cannot trace back to the "
                               "kernel's operands")
        if ref.semaphore:
            for t in chain:
                self.all_invariant(t, args, path, eqn, f"the index of {what}")
            return
        dims = [(z3.IntVal(0), s) for s in ref.shape]  # per buffer dimension: (start, size)
        view = list(range(len(ref.shape)))  # view dimension -> buffer dimension
        simple = True
        for t in chain:
            tname = type(t).__name__
            if tname in _IDENTITY_TRANSFORMS:
                continue
            if tname != "NDIndexer" or tuple(getattr(t, "int_indexer_shape", ()) or ()) != () \
                    or len(t.indices) != len(view):
                simple = False
                break
            new_view = []
            for bd, idx in zip(view, t.indices):
                if type(idx).__name__ == "Slice":
                    start, size = self.leaf(idx.start, args), idx.size
                    if not isinstance(size, int) or idx.stride != 1 or start is None or start is _STATIC:
                        simple = False
                        break
                    dims[bd] = (self.mark(dims[bd][0] + start), size)
                    new_view.append(bd)
                else:
                    i = self.leaf(idx, args)
                    if i is None or i is _STATIC:
                        simple = False
                        break
                    dims[bd] = (self.mark(dims[bd][0] + i), 1)
            if not simple:
                break
            view = new_view
        if not simple:
            # a view the certificate does not place: its indices the same everywhere, its label unmoved
            for t in chain:
                self.all_invariant(t, args, path, eqn, f"an index of {what}")
            self.obs.append(_Ob("row", None, path, self.line(eqn), what, ref.label, 0, 0))
            return
        for d, (start, _) in enumerate(dims):
            if d:
                self.invariant(start, path, eqn, f"an index of {what}")
        if dims:
            start, size = dims[0]
            self.obs.append(_Ob("row", start, path, self.line(eqn), what, ref.label, size, ref.shape[0]))

    def device(self, part: Any, args: list, id_type: Any, path: Any, eqn: Any, what: str) -> None:
        z3 = self.z3
        if part is None or (isinstance(part, tuple) and not part):
            return
        if isinstance(part, dict):
            raise NotCertified(f"{what} given by mesh axis names ({self.line(eqn)}) is outside the certificate")
        parts = part if isinstance(part, tuple) else (part,)
        vals = [args[p.i] if isinstance(p, _Leaf) else self.leaf(p, args) for p in parts]
        if any(v is None or v is _STATIC for v in vals):
            raise NotCertified(f"{what} at {self.line(eqn)} depends on a value semcheck cannot follow "
                               f"symbolically {_UNFOLLOWED}")
        if "LOGICAL" in str(id_type):
            if len(vals) != 1:
                raise NotCertified(f"{what} at {self.line(eqn)}: a logical id of {len(vals)} parts")
            logical = vals[0]
        else:
            if len(vals) != len(self.names):
                raise NotCertified(f"{what} at {self.line(eqn)} names {len(vals)} coordinates of a mesh of "
                                   f"{len(self.names)} axes")
            logical = z3.IntVal(0)
            for k, c in enumerate(vals):
                logical = logical + c * math.prod(self.call.mesh.axis_sizes[k + 1:])
            if not self.names:
                logical = z3.IntVal(0)
        self.obs.append(_Ob("dev", logical, path, self.line(eqn), what))

    def sync(self, eqn: Any, args: list, path: Any) -> None:
        name = eqn.primitive.name
        tree = eqn.params.get("args_tree", eqn.params.get("tree"))
        if tree is None:
            raise NotCertified(f"{name} without operands semcheck can read ({self.line(eqn)})")
        parts = tree.unflatten([_Leaf(i) for i in range(len(eqn.invars))])
        id_type = eqn.params.get("device_id_type")
        if name == "semaphore_signal":
            sem, transforms, inc, dev, core = parts
            self.region(sem, tuple(transforms or ()), args, path, eqn, "the signalled semaphore")
            self.all_invariant(inc, args, path, eqn, "a signal's increment")
            self.all_invariant(core, args, path, eqn, "a signal's core index")
            self.device(dev, args, id_type, path, eqn, "the signalled device")
        elif name == "semaphore_wait":
            sem, transforms, value, dec = parts
            self.region(sem, tuple(transforms or ()), args, path, eqn, "the awaited semaphore")
            self.all_invariant((value, dec), args, path, eqn, "a wait's value")
        elif name == "semaphore_read":
            sem, transforms = parts
            self.region(sem, tuple(transforms or ()), args, path, eqn, "the read semaphore")
        elif name in ("dma_start", "dma_wait"):
            src, dst, dst_sem, src_sem, dev = parts
            self.region(src, (), args, path, eqn, "a copy's source")
            self.region(dst, (), args, path, eqn, "a copy's destination")
            for s in (dst_sem, src_sem):
                if s is not None:
                    self.region(s, (), args, path, eqn, "a copy's semaphore")
            self.device(dev, args, id_type, path, eqn, "a copy's target device")

    def access(self, eqn: Any, args: list, path: Any) -> None:
        name = eqn.primitive.name
        if name in _MASKED:
            tree = eqn.params["args_tree"]
            parts = tree.unflatten([_Leaf(i) for i in range(len(eqn.invars))])
            mask = parts[2] if name == "masked_load" else parts[3]
            if mask is not None:
                raise NotCertified(f"a masked load or store ({self.line(eqn)}) is outside the certificate")
            self.region(parts[0], tuple(parts[1] or ()), args, path, eqn, "a load or store")
            return
        at = _ACCESS[name]
        transforms = eqn.params["tree"].unflatten([_Leaf(i) for i in range(at, len(eqn.invars))])
        self.region(_Leaf(0), tuple(transforms or ()), args, path, eqn, "a load or store")


_UNFOLLOWED = "(a value loaded from memory, a float, a semaphore read or a loop carry)"
_STATIC = object()  # a static operand of a tree (None, a flag): the same on every device


def _kernel_args(call: KernelCall) -> list:
    """The kernel's refs as the program labels them (the launch's operands, LAUNCH-1)."""
    from semcheck.checker.frontend.grid import launch_operands
    from semcheck.checker.frontend.values import BufRef, SemArray

    _, args, _ = launch_operands(call)
    jaxpr = call.jaxpr
    if len(jaxpr.invars) != len(args):
        raise NotCertified(f"the kernel's parameters do not line up with its operands ({_call_line(call)})")
    out = []
    for v, a in zip(jaxpr.invars, args):
        shape = tuple(int(s) for s in getattr(v.aval, "shape", ()))
        if type(a) is BufRef:
            out.append(_Ref(a.name, shape))
        elif type(a) is SemArray:
            out.append(_Ref(a.label, shape, True))
        else:
            out.append(None)
    return out


def _call_line(call: KernelCall) -> str:
    loc = call.loc
    return f"{os.path.basename(loc.file)}:{loc.line}" if loc.line else "the kernel's call"


def _block_obligations(w: _Walk) -> None:
    """GRID-1's block copies: each BlockSpec's block index the same on every device (its index map is
    evaluated over the symbolic grid point), and an HBM label a copy touches only in part never moves."""
    call = w.call
    if call.kind != "pallas_call" or not call.block_mappings:
        return
    from semcheck.checker.frontend.grid import _hbm_labels

    hbm = _hbm_labels(call)
    roles = [op for op in call.operands if op.role in ("input", "output")]
    if len(roles) != len(call.block_mappings):
        raise NotCertified(f"the kernel's BlockSpecs do not line up with its operands ({_call_line(call)})")
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
                                   f"symbolically ({_call_line(call)})")
            w.obs.append(_Ob("inv", x, w.z3.BoolVal(True), _call_line(call), f"the block index of {op.name}"))
        block = tuple(getattr(b, "block_size", b) for b in bm.block_shape)
        if tuple(int(s) if isinstance(s, int) else -1 for s in block) != tuple(op.shape) and op.memory_space != "hbm":
            label = hbm.get((op.role, j))
            w.obs.append(_Ob("row", None, w.z3.BoolVal(True), _call_line(call), f"the block copies of {op.name}",
                             label, 0, 0))


def _mentions(z3: Any, t: Any, v: Any) -> bool:
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


class _Prover:
    """The obligations' proofs for one candidate period k."""

    def __init__(self, w: _Walk, k: int, deadline: float) -> None:
        z3 = w.z3
        self.w, self.z3, self.k, self.deadline = w, z3, k, deadline
        n = w.N
        self.rot = w.me2 == z3.If(w.me + k >= n, w.me + k - n, w.me + k)
        self.base = [*w.domain, self.rot]

    def at2(self, t: Any) -> Any:
        return self.z3.substitute(t, (self.w.me, self.w.me2))

    def claim(self, ob: _Ob) -> Any:
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
        """Whether a counterexample met for an earlier k is one for this k too (a cheap first try: the
        point is in the domain, so a claim false there is false)."""
        z3, w = self.z3, self.w
        for point in w.points:
            me = point[w.me.get_id()]
            pairs = [(v, z3.IntVal(point[v.get_id()])) for v in self.free()]
            pairs.append((w.me2, z3.IntVal((me + self.k) % w.N)))
            if z3.is_false(z3.simplify(z3.substitute(claim, *pairs))):
                return True
        return False

    def side(self, ob: _Ob) -> list:
        if ob.side is None:
            z3 = self.z3
            ob.side = _in_int32(z3, z3.And(ob.path, *([] if ob.term is None else [ob.term == ob.term])),
                                self.w.kernel)
        return ob.side

    def holds(self, claims: list[tuple[_Ob, Any]], quick: bool = False) -> tuple[bool, Any]:
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
        todo = [ob for ob in plain if ob.kind != "inv" or _mentions(z3, ob.term, w.me)]
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
        by_label: dict[str | None, list[_Ob]] = {}
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

    def label_shift(self, label: str | None, obs: list[_Ob], explain: bool) -> tuple[str | None, Any]:
        z3, w = self.z3, self.w
        fixed = label is None or any(ob.term is None for ob in obs)
        moving = [ob for ob in obs if ob.term is not None and _mentions(z3, ob.term, w.me)]
        if not moving:
            return None, None
        m = max(ob.extent for ob in obs)
        delta = 0
        if not fixed:
            for ob in moving:
                s = z3.Solver()
                s.set("timeout", _SOLVER_MS)
                s.add(*self.base, ob.path)
                if s.check() == z3.sat:
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

    def explain(self, ob: _Ob, m: Any) -> str:
        where = self.where(m) if m is not None else "some device"
        if ob.kind == "dev":
            return f"{ob.what} at {ob.where} is not the issuing device's shifted by {self.k} (mod N) on {where}"
        if ob.kind == "true":
            return f"{ob.what} at {ob.where} may be out of range" if ob.where else f"{ob.what} may be 0"
        return f"{ob.what} at {ob.where} differs between {where}"


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def certify_rotation(call: KernelCall, num_devices: int) -> Certificate:
    """RUN-18: the smallest period k (a divisor of N below N) whose rotation the kernel's jaxpr proves
    to map its program onto itself, and the shifts of DR-39; raises NotCertified with the reason."""
    try:
        return _certify(call, int(num_devices))
    except NotCertified:
        raise
    except Exception as e:  # never an internal error: the caller then builds the program
        raise NotCertified(f"semcheck cannot certify this kernel's symmetry ({type(e).__name__}: "
                           f"{str(e).splitlines()[0][:200] if str(e) else ''}; {_call_line(call)})") from e


def _certify(call: KernelCall, n: int) -> Certificate:
    if n < 2:
        raise NotCertified("one device: nothing to rotate")
    if call.mesh.num_devices != n:
        raise NotCertified(f"the kernel's mesh has {call.mesh.num_devices} devices, not {n}")
    if call.num_index_operands:
        raise NotCertified(f"a kernel with scalar-prefetch operands ({_call_line(call)}): their values are each "
                           "device's own input, which the certificate does not read")
    if call.vmapped_dims:
        raise NotCertified(f"a vmapped kernel ({_call_line(call)})")
    deadline = time.process_time() + MAX_SECONDS
    w = _Walk(call, n)
    w.run(call.jaxpr, _kernel_args(call), w.z3.BoolVal(True))
    _block_obligations(w)
    w.divisor_obs = [_Ob("true", y != 0, p, "", "a divisor") for y, p in w.divisors]
    first = None
    for k in _divisors(n)[:-1]:
        why, shifts = _Prover(w, k, deadline).check(explain=first is None)
        if why is None:
            return Certificate(k, shifts)
        if first is None:
            first = why
    raise NotCertified(f"the program is not proved to repeat: {first}")
