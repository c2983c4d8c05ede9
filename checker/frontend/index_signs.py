"""PRG-202: whether a kernel may index a ref at a negative position.

jax's interpreter hands a load's index to numpy as it is, so a negative one counts from the end of the ref
(`x_ref[i]` with `i == -1` reads the last element, and the run goes on), where a TPU's kernel indexes before the
ref (Mosaic checks bounds unless `disable_bounds_checks`). `negative_index` finds, in a kernel's jaxpr, the first
operation that indexes a ref (a load, a store, a copy, a semaphore operation) with an integer operand it cannot show
is at least 0: an interval analysis of the integer scalars, from constants, `program_id`, iota, comparisons and loop
counters; a value loaded from a ref has no interval (it may be anything its dtype holds, unless unsigned).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from semcheck.checker.frontend.scan_inputs import scan_split
from semcheck.checker.frontend.sync_primitives import SYNC

INT_MAX = 2**31 - 1
MAX_STEPS = 20_000  # equations the analysis evaluates (loop bodies once per iteration) before it gives up

Interval = tuple[int, int] | None

# The operations whose operand after the ref (a stored or added value) is not an index.
_VALUE_SECOND = frozenset({"swap", "addupdate"})
# Operations on refs every integer operand of which indexes (a ref, a semaphore, a device): loads, stores and
# the front end's semaphore and DMA primitives.
_INDEXING = frozenset({"get", "swap", "addupdate", "load", "masked_load", "masked_swap"}) | SYNC


class _GiveUp(Exception):
    pass


def negative_index(jaxpr: Any, grid: tuple[int, ...] = (), held: dict[int, Interval] | None = None) -> Any | None:
    """PRG-202: the first equation of the kernel `jaxpr` (or of its bodies) that indexes a ref with an integer
    operand not shown to be at least 0, or None when every such operand is. `grid`: the kernel's grid (the
    range of `program_id`). PRG-220: `held` gives, per position of a ref among the kernel's operands, the
    interval of the values it holds when the kernel starts; a load from such a ref the kernel never writes
    (`only_loaded`) is in it."""
    inner = getattr(jaxpr, "jaxpr", jaxpr)
    ins: list[Interval] = [None] * len(inner.invars)
    for k, got in (held or {}).items():
        if k < len(ins) and only_loaded(inner, inner.invars[k]):
            ins[k] = got
    walk = _Walk(grid)
    try:
        return walk.run(inner, ins)
    except _GiveUp as stop:  # an equation this walk does not follow: its indices are not shown to be >= 0
        return stop.args[0]


def only_loaded(jaxpr: Any, ref: Any) -> bool:
    """PRG-220: whether every use of `ref` in `jaxpr` is a load of its own dtype, following `cond`s, `while` and
    `scan` loops and calls that hand it on (a store, a copy, a semaphore operation or any other use may change
    what it holds)."""
    for eqn in jaxpr.eqns:
        at = [k for k, x in enumerate(eqn.invars) if x is ref]
        if not at:
            continue
        name, p = eqn.primitive.name, eqn.params
        if name == "get" and at == [0]:
            if not all(getattr(o.aval, "dtype", None) == _inner_dtype(ref) for o in eqn.outvars):
                return False
            continue
        subs = handed_on(eqn, at)
        if subs is None or not all(only_loaded(j, v) for j, v in subs):
            return False
    return True


def _inner_dtype(ref: Any) -> Any:
    aval = getattr(ref, "aval", None)
    return getattr(getattr(aval, "inner_aval", aval), "dtype", None)


def handed_on(eqn: Any, at: list[int]) -> list[tuple[Any, Any]] | None:
    """The (jaxpr, variable) pairs a `cond`, `while`, `scan` or call hands the operands at positions `at` to as
    constants or arguments; None for any other equation, or a loop carrying one."""
    name, p = eqn.primitive.name, eqn.params
    if name == "cond" and 0 not in at:
        return [(b.jaxpr, b.jaxpr.invars[k - 1]) for b in p["branches"] for k in at]
    if name == "while" and all(k < p["cond_nconsts"] + p["body_nconsts"] for k in at):
        cn = p["cond_nconsts"]
        return [(p["cond_jaxpr"].jaxpr, p["cond_jaxpr"].jaxpr.invars[k]) if k < cn
                else (p["body_jaxpr"].jaxpr, p["body_jaxpr"].jaxpr.invars[k - cn]) for k in at]
    if name == "scan":
        if all(k < scan_split(eqn)[0] for k in at):
            return [(p["jaxpr"].jaxpr, p["jaxpr"].jaxpr.invars[k]) for k in at]
        return None
    sub = p.get("jaxpr") if name in ("pjit", "jit", "closed_call") else None
    if sub is not None:
        sub = getattr(sub, "jaxpr", sub)
        return [(sub, sub.invars[k]) for k in at]
    return None


def _is_ref(x: Any) -> bool:
    return "Ref" in type(getattr(x, "aval", None)).__name__


def _is_int(x: Any) -> bool:
    """An integer operand that is not a ref (of any shape: an array of them indexes as a gather)."""
    dtype = getattr(getattr(x, "aval", None), "dtype", None)
    try:
        return not _is_ref(x) and dtype is not None and np.issubdtype(np.dtype(dtype), np.integer)
    except TypeError:  # a dtype numpy does not know (a semaphore's)
        return False


def _is_int_scalar(x: Any) -> bool:
    return _is_int(x) and getattr(x.aval, "shape", None) == ()


def _dtype_range(x: Any) -> Interval:
    """Every value an integer (or bool) scalar's dtype holds; None for any other value."""
    dtype = getattr(getattr(x, "aval", None), "dtype", None)
    try:
        dt = np.dtype(dtype)
    except TypeError:
        return None
    if dt == np.bool_:
        return (0, 1)
    if np.issubdtype(dt, np.integer):
        info = np.iinfo(dt)
        return (int(info.min), int(info.max))
    return None


def _within(got: Interval, x: Any) -> Interval:
    """`got` where the dtype of `x` holds all of it; else (an operation that wraps) every value of the dtype."""
    full = _dtype_range(x)
    if got is None or full is None:
        return full
    return got if full[0] <= got[0] and got[1] <= full[1] else full


def _join(a: Interval, b: Interval) -> Interval:
    return None if a is None or b is None else (min(a[0], b[0]), max(a[1], b[1]))


def _arith(name: str, ins: list[Interval]) -> Interval:
    """The interval of an integer operation's result from its operands' (exact integers: `_within` then keeps it
    only where the result's dtype holds it); None when the operation is not one of these."""
    if name in ("eq", "ne", "lt", "le", "gt", "ge"):
        return (0, 1)
    if any(i is None for i in ins):
        return None
    if name in ("max", "min"):
        pick = max if name == "max" else min
        return (pick(i[0] for i in ins), pick(i[1] for i in ins))
    if name == "clamp":  # clamp(lo, x, hi) = min(max(x, lo), hi)
        lo, x, hi = ins
        return (min(max(x[0], lo[0]), hi[0]), min(max(x[1], lo[1]), hi[1]))
    if name == "select_n":
        return (min(c[0] for c in ins[1:]), max(c[1] for c in ins[1:])) if len(ins) > 1 else None
    if name == "add":
        return (ins[0][0] + ins[1][0], ins[0][1] + ins[1][1])
    if name == "sub":
        return (ins[0][0] - ins[1][1], ins[0][1] - ins[1][0])
    if name == "mul":
        ends = [a * b for a in ins[0] for b in ins[1]]
        return (min(ends), max(ends))
    if name == "neg":
        return (-ins[0][1], -ins[0][0])
    if name == "sign":
        return (int(np.sign(ins[0][0])), int(np.sign(ins[0][1])))
    if name == "and":  # a bitwise and with a value >= 0 is >= 0 and at most that value
        nonneg = [i for i in ins if i[0] >= 0]
        return (0, min(i[1] for i in nonneg)) if nonneg else None
    if name in ("rem", "div"):
        a, b = ins
        if a[0] < 0 or b[0] < 1:
            return None
        # rem: the dividend's sign, below the divisor; div: truncated toward 0
        return (0, min(a[1], b[1] - 1)) if name == "rem" else (0, a[1])
    if name in ("convert_element_type", "copy", "copy_p", "optimization_barrier") and len(ins) == 1:
        return ins[0]
    return None


class _Walk:
    """The interval of each integer scalar of a jaxpr, equation by equation."""

    def __init__(self, grid: tuple[int, ...]) -> None:
        self.steps, self.grid = 0, grid

    def run(self, jaxpr: Any, ins: list[Interval]) -> Any | None:
        self.env: dict[Any, Interval] = {}
        found, _ = self._body(jaxpr, ins)
        return found

    def _read(self, env: dict, x: Any) -> Interval:
        if hasattr(x, "val"):  # a literal
            try:
                v = int(np.asarray(x.val))
            except (TypeError, ValueError):
                return _dtype_range(x)
            return (v, v)
        got = env.get(x)
        return got if got is not None else _dtype_range(x)

    def _body(self, jaxpr: Any, ins: list[Interval]) -> tuple[Any | None, list[Interval]]:
        env: dict[Any, Interval] = dict(zip(jaxpr.invars, ins))
        for c in getattr(jaxpr, "constvars", ()):
            env[c] = None
        for eqn in jaxpr.eqns:
            self.steps += 1
            if self.steps > MAX_STEPS:
                raise _GiveUp(eqn)
            vals = [self._read(env, x) for x in eqn.invars]
            found = self._indexes(eqn, vals)
            if found is not None:
                return found, []
            found, outs = self._eqn(eqn, vals)
            if found is not None:
                return found, []
            for v, o in zip(eqn.outvars, outs):
                env[v] = o
        return None, [self._read(env, x) for x in jaxpr.outvars]

    def _indexes(self, eqn: Any, vals: list[Interval]) -> Any | None:
        name = eqn.primitive.name
        if name not in _INDEXING:
            return None
        skip = {1} if name in _VALUE_SECOND else set()
        for k, (x, v) in enumerate(zip(eqn.invars, vals)):
            # above INT_MAX (an unsigned index) is negative too: Mosaic's `arith.index_cast` sign-extends the i32
            if k not in skip and _is_int(x) and (v is None or v[0] < 0 or v[1] > INT_MAX or not _is_int_scalar(x)):
                return eqn
        return None

    def _eqn(self, eqn: Any, vals: list[Interval]) -> tuple[Any | None, list[Interval]]:
        name, params = eqn.primitive.name, eqn.params
        none = [None] * len(eqn.outvars)
        if name == "get" and vals and vals[0] is not None and _is_ref(eqn.invars[0]):  # PRG-220: a held ref
            return None, [_within(vals[0], o) for o in eqn.outvars]
        if name == "program_id":
            axis = int(params.get("axis", 0))
            size = self.grid[axis] if axis < len(self.grid) and isinstance(self.grid[axis], int) else INT_MAX
            return None, [(0, size - 1)]
        if name in ("num_programs", "axis_index"):
            return None, [(0, INT_MAX - 1)]
        if name == "iota":
            return None, [(0, max(int(d) for d in params.get("shape", (1,))) - 1)]
        if name == "cond":
            found, outs = None, None
            for branch in params["branches"]:
                found, got = self._body(branch.jaxpr, vals[1:])
                if found is not None:
                    return found, none
                outs = got if outs is None else [_join(a, b) for a, b in zip(outs, got)]
            return None, outs or none
        if name == "scan":
            return self._scan(eqn, vals)
        if name == "while":
            return self._while(eqn, vals)
        if name in ("pjit", "jit", "closed_call", "core_call", "custom_jvp_call", "custom_vjp_call", "remat",
                    "checkpoint"):
            sub = params.get("jaxpr") or params.get("call_jaxpr") or params.get("fun_jaxpr")
            a, b = (vals + [None, None])[:2]
            if params.get("name") == "floor_divide" and a is not None and b is not None and a[0] >= 0 and b[0] >= 1:
                return None, [(0, a[1] // b[0])]  # jnp's `//` of a value >= 0 by one >= 1: the truncated quotient
            if sub is None:
                raise _GiveUp(eqn)
            return self._body(getattr(sub, "jaxpr", sub), vals)
        if name == "run_scoped":
            sub = params["jaxpr"]
            sub = getattr(sub, "jaxpr", sub)
            found, outs = self._body(sub, [None] * len(sub.invars))
            return found, outs[: len(eqn.outvars)] + none[len(outs):]
        if any(hasattr(p, "eqns") or hasattr(getattr(p, "jaxpr", None), "eqns") for p in params.values()):
            raise _GiveUp(eqn)  # an operation with a body this walk does not know
        if len(eqn.outvars) == 1 and _is_int_scalar(eqn.outvars[0]):
            return None, [_within(_arith(name, vals), eqn.outvars[0])]
        return None, none

    def _scan(self, eqn: Any, vals: list[Interval]) -> tuple[Any | None, list[Interval]]:
        """Each iteration once, the carry joined over them (exact for a scan of a few hundred iterations)."""
        params = eqn.params
        body = params["jaxpr"].jaxpr
        if "num_consts" in params:  # (jax 0.12 packs the constants, carries and scanned inputs in `ft_in`)
            nc, ncarry = params["num_consts"], params["num_carry"]
        else:
            groups = params["ft_in"].unpack()
            nc, ncarry = len(list(groups[0])), len(list(groups[1]))
        consts, carry, xs = vals[:nc], vals[nc:nc + ncarry], [None] * (len(vals) - nc - ncarry)
        seen = list(carry)
        for _ in range(int(params["length"])):
            found, outs = self._body(body, consts + carry + xs)
            if found is not None:
                return found, []
            carry = outs[:ncarry]
            joined = [_join(a, b) for a, b in zip(seen, carry)]
            if joined == seen:
                break
            seen = joined
            carry = joined
        return None, seen + [None] * (len(eqn.outvars) - ncarry)

    def _while(self, eqn: Any, vals: list[Interval]) -> tuple[Any | None, list[Interval]]:
        """Inside the body: a carry the body passes on unchanged keeps its interval, and a counter the condition
        bounds by `carry < y` (a `fori_loop`'s index; `y` a constant or an unchanged carry) is in [its start's
        lower end, y's upper end - 1] when the body never lowers it below that start; every other carry may be
        anything its dtype holds. The condition is walked on the carries the loop holds (a counter from its
        start's lower end up)."""
        params = eqn.params
        cn, bn = params["cond_nconsts"], params["body_nconsts"]
        cconsts, bconsts, carry = vals[:cn], vals[cn:cn + bn], vals[cn + bn:]
        cond, body = params["cond_jaxpr"].jaxpr, params["body_jaxpr"].jaxpr
        kept = {k for k, (i, o) in enumerate(zip(body.invars[bn:], body.outvars)) if i is o}
        inside: list[Interval] = [carry[k] if k in kept else None for k in range(len(carry))]
        counters: dict[int, tuple[int, int]] = {}
        for k, y in _counted(cond, cn).items():
            bound = carry[y[1]] if y[0] == "carry" and y[1] in kept else (
                cconsts[y[1]] if y[0] == "const" else (y[1], y[1]) if y[0] == "literal" else None)
            if carry[k] is not None and bound is not None and k not in kept:
                counters[k] = (carry[k][0], bound[1] - 1)
        trial = [counters.get(k, x) for k, x in enumerate(inside)]
        found, outs = self._body(body, bconsts + trial)
        if found is None and all(outs[k] is not None and outs[k][0] >= lo for k, (lo, _) in counters.items()):
            top = [(_dtype_range(v) or (0, INT_MAX))[1] for v in eqn.outvars]
            after = [carry[k] if k in kept else (counters[k][0], top[k]) if k in counters else None
                     for k in range(len(carry))]
        else:
            found, _ = self._body(body, bconsts + inside)  # a counter the body may lower: not bounded
            after = [carry[k] if k in kept else None for k in range(len(carry))]
        if found is not None:
            return found, []
        # the condition runs on every carry the loop holds (the start's and each body's), so it is walked too
        found, _ = self._body(cond, cconsts + after)
        return found, after


def _counted(cond: Any, nconsts: int) -> dict[int, tuple[str, Any]]:
    """The carry `k` whose `carry_k < y` is the condition's result (the body runs only with it below `y`), with
    what `y` is: ("carry", j), ("const", i) or ("literal", value)."""
    if len(cond.outvars) != 1:
        return {}
    out, carries = cond.outvars[0], list(cond.invars[nconsts:])
    for eqn in cond.eqns:
        if out in eqn.outvars and eqn.primitive.name == "lt" and eqn.invars[0] in carries:
            y = eqn.invars[1]
            if hasattr(y, "val"):
                return {carries.index(eqn.invars[0]): ("literal", int(np.asarray(y.val)))}
            if y in carries:
                return {carries.index(eqn.invars[0]): ("carry", carries.index(y))}
            if y in cond.invars[:nconsts]:
                return {carries.index(eqn.invars[0]): ("const", list(cond.invars[:nconsts]).index(y))}
    return {}


__all__ = ["handed_on", "negative_index", "only_loaded"]
