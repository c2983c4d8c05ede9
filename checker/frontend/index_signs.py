"""PRG-202: whether a kernel may index a ref at a negative position.

jax's interpreter hands a load's index to numpy as it is, so a negative one counts from the end of the ref
(`x_ref[i]` with `i == -1` reads the last element, and the run goes on), where a TPU's kernel indexes before the
ref (Mosaic checks bounds unless `disable_bounds_checks`). `negative_index` finds, in a kernel's jaxpr, the first
operation that indexes a ref (a load, a store, a copy, a semaphore operation) with an integer operand it cannot show
is at least 0: an interval analysis of the integer scalars, from constants, `program_id`, iota and comparisons, with
the carries of loops from `loop_intervals` (PRG-228, PRG-229); a value loaded from a ref has no interval (it may be
anything its dtype holds, unless unsigned), except from an input the kernel never writes (PRG-220: the values it
holds; PRG-230: those of the elements the load may read).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from semcheck.checker.frontend.intervals import INT_MAX, Interval, dtype_range, join, within
from semcheck.checker.frontend.loop_intervals import walk_scan, walk_while
from semcheck.checker.frontend.scan_inputs import scan_split
from semcheck.checker.frontend.sync_primitives import SYNC

MAX_STEPS = 60_000  # equations the analysis evaluates (loop bodies once per trip walked) before it gives up

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


def _is_bool_scalar(x: Any) -> bool:
    aval = getattr(x, "aval", None)
    return not _is_ref(x) and getattr(aval, "dtype", None) == np.bool_ and getattr(aval, "shape", None) == ()


def _arith(name: str, ins: list[Interval]) -> Interval:
    """The interval of an integer operation's result from its operands' (exact integers: `_within` then keeps it
    only where the result's dtype holds it); None when the operation is not one of these."""
    if name in _COMPARE:
        return _compare(name, ins)
    if name == "select_n":
        return _selected(ins)
    if any(i is None for i in ins):
        return None
    if name in ("max", "min"):
        pick = max if name == "max" else min
        return (pick(i[0] for i in ins), pick(i[1] for i in ins))
    if name == "clamp":  # clamp(lo, x, hi) = min(max(x, lo), hi)
        lo, x, hi = ins
        return (min(max(x[0], lo[0]), hi[0]), min(max(x[1], lo[1]), hi[1]))
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
    if name == "div":  # PRG-228: truncated toward 0, monotone in each operand where the divisor is >= 1
        return _quotients(ins, lambda a, b: abs(a) // b if a >= 0 else -(abs(a) // b))
    if name == "rem":
        a, b = ins
        if a[0] == a[1] and b[0] == b[1] and b[0] != 0:  # PRG-228: known operands, C's remainder
            v = abs(a[0]) % abs(b[0])
            return (v, v) if a[0] >= 0 else (-v, -v)
        if a[0] >= 0 and b[0] > a[1]:
            return a
        # the dividend's sign, below the divisor
        return (0, min(a[1], b[1] - 1)) if a[0] >= 0 and b[0] >= 1 else None
    if name in ("convert_element_type", "copy", "copy_p", "optimization_barrier") and len(ins) == 1:
        return ins[0]
    if name in _ELEMENTS_KEPT:
        return ins[0]
    return None


_COMPARE = {"lt": (lambda a, b: a[1] < b[0], lambda a, b: a[0] >= b[1]),
            "le": (lambda a, b: a[1] <= b[0], lambda a, b: a[0] > b[1]),
            "gt": (lambda a, b: a[0] > b[1], lambda a, b: a[1] <= b[0]),
            "ge": (lambda a, b: a[0] >= b[1], lambda a, b: a[1] < b[0]),
            "eq": (lambda a, b: a[0] == a[1] == b[0] == b[1], lambda a, b: a[1] < b[0] or b[1] < a[0]),
            "ne": (lambda a, b: a[1] < b[0] or b[1] < a[0], lambda a, b: a[0] == a[1] == b[0] == b[1])}


def _compare(name: str, ins: list[Interval]) -> Interval:
    """PRG-228: a comparison's result, 1 where it holds of every pair of values, 0 where of none, else either."""
    if len(ins) != 2 or any(i is None for i in ins):
        return (0, 1)
    always, never = _COMPARE[name]
    return (1, 1) if always(*ins) else (0, 0) if never(*ins) else (0, 1)


def _quotients(ins: list[Interval], q: Any) -> Interval:
    """A quotient's interval by a divisor >= 1: its least and greatest value over the operands' ends (it is
    monotone in each operand there); None for any other divisor."""
    a, b = ins
    if b[0] < 1:
        return None
    ends = [q(x, y) for x in a for y in b]
    return None if None in ends else (min(ends), max(ends))


def _selected(ins: list[Interval]) -> Interval:
    """`select_n(p, *cases)`: the cases its predicate may pick, joined (PRG-228: one case where it is known)."""
    if len(ins) < 2:
        return None
    p, cases = ins[0], ins[1:]
    if p is not None and p[0] == p[1] and 0 <= p[0] < len(cases):
        return cases[p[0]]
    if any(c is None for c in cases):
        return None
    return (min(c[0] for c in cases), max(c[1] for c in cases))


def _logic(name: str, ins: list[Interval]) -> Interval:
    """PRG-228: a bool's `not`, `and`, `or` (1 where it holds in every case, 0 where in none)."""
    if any(i is None for i in ins):
        return (0, 1)
    if name == "not" and len(ins) == 1:
        return (1 - ins[0][1], 1 - ins[0][0])
    pick = min if name == "and" else max
    return (pick(i[0] for i in ins), pick(i[1] for i in ins))


# Operations every element of whose result is an element of their first operand (an interval of an array's
# elements carries over; a scalar result of one of them too).
_ELEMENTS_KEPT = frozenset({"slice", "squeeze", "reshape", "dynamic_slice", "reduce_max", "reduce_min",
                            "broadcast_in_dim", "copy", "copy_p"})


class _Walk:
    """The interval of each integer scalar of a jaxpr, equation by equation."""

    def __init__(self, grid: tuple[int, ...]) -> None:
        self.steps, self.grid = 0, grid
        self.unroll = True  # whether a loop may be walked trip by trip (PRG-228; off inside a summary, PRG-229)

    def run(self, jaxpr: Any, ins: list[Interval]) -> Any | None:
        self.env: dict[Any, Interval] = {}
        found, _ = self.body(jaxpr, ins)
        return found

    def _read(self, env: dict, x: Any) -> Interval:
        if hasattr(x, "val"):  # a literal
            try:
                v = int(np.asarray(x.val))
            except (TypeError, ValueError):
                return dtype_range(x)
            return (v, v)
        got = env.get(x)
        return got if got is not None else dtype_range(x)

    def body(self, jaxpr: Any, ins: list[Interval], extra: Any = ()) -> tuple[Any | None, list[Interval]]:
        """The first equation of `jaxpr` (or its bodies) indexing at a position not shown to be at least 0, or
        None, and the intervals of its outputs followed by those of the variables `extra` (loop_intervals)."""
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
        return None, [self._read(env, x) for x in (*jaxpr.outvars, *extra)]

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
            return None, [within(_loaded(eqn, vals), o) for o in eqn.outvars]
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
            for branch in _taken(params["branches"], vals[0]):
                found, got = self.body(branch.jaxpr, vals[1:])
                if found is not None:
                    return found, none
                outs = got if outs is None else [join(a, b) for a, b in zip(outs, got)]
            return None, outs or none
        if name == "scan":
            return walk_scan(self, eqn, vals)  # PRG-228, PRG-229
        if name == "while":
            return walk_while(self, eqn, vals)
        if name in ("pjit", "jit", "closed_call", "core_call", "custom_jvp_call", "custom_vjp_call", "remat",
                    "checkpoint"):
            sub = params.get("jaxpr") or params.get("call_jaxpr") or params.get("fun_jaxpr")
            a, b = (vals + [None, None])[:2]
            if params.get("name") == "floor_divide" and a is not None and b is not None and b[0] >= 1:
                return None, [within(_quotients([a, b], lambda x, y: x // y), eqn.outvars[0])]  # jnp's `//`
            if sub is None:
                raise _GiveUp(eqn)
            return self.body(getattr(sub, "jaxpr", sub), vals)
        if name == "run_scoped":
            sub = params["jaxpr"]
            sub = getattr(sub, "jaxpr", sub)
            found, outs = self.body(sub, [None] * len(sub.invars))
            return found, outs[: len(eqn.outvars)] + none[len(outs):]
        if any(hasattr(p, "eqns") or hasattr(getattr(p, "jaxpr", None), "eqns") for p in params.values()):
            raise _GiveUp(eqn)  # an operation with a body this walk does not know
        if len(eqn.outvars) == 1 and _is_int_scalar(eqn.outvars[0]):
            return None, [within(_arith(name, vals), eqn.outvars[0])]
        if name in _ELEMENTS_KEPT and len(eqn.outvars) == 1 and _is_int(eqn.outvars[0]) and vals:
            return None, [within(vals[0], eqn.outvars[0])]  # PRG-230: every element is one of its operand's
        if len(eqn.outvars) == 1 and _is_bool_scalar(eqn.outvars[0]):
            if name in _COMPARE:
                return None, [_compare(name, vals)]
            return None, [_logic(name, vals) if name in ("not", "and", "or") else (0, 1)]
        return None, none


def _taken(branches: Any, index: Interval) -> Any:
    """PRG-228: the branches of a `cond` its index may pick (jax clamps the index into the branches' range)."""
    if index is None:
        return branches
    top = len(branches) - 1
    return branches[min(max(index[0], 0), top):min(max(index[1], 0), top) + 1]


def _loaded(eqn: Any, vals: list[Interval]) -> Interval:
    """PRG-220, PRG-230: the interval of a load from a ref the kernel never writes: the values its indexed
    elements hold, where the load is one plain indexing whose every index lies within the ref's shape; else
    every value the ref holds."""
    values = getattr(vals[0], "values", None)
    held = (vals[0][0], vals[0][1])
    if values is None:
        return held
    try:
        (ix,) = eqn.params["tree"].unflatten(list(eqn.invars[1:]))
        indices, shape = tuple(ix.indices), tuple(ix.shape)
    except Exception:  # noqa: BLE001 - a load through a transform: every value the ref holds
        return held
    if shape != values.shape or len(indices) != len(shape):
        return held
    at = {id(x): v for x, v in zip(eqn.invars[1:], vals[1:])}
    box = []
    for i, n in zip(indices, shape):
        start = getattr(i, "start", i)
        size = getattr(i, "size", 1) if hasattr(i, "start") else 1
        got = (start, start) if isinstance(start, (int, np.integer)) else at.get(id(start))
        if got is None or not isinstance(size, (int, np.integer)) or getattr(i, "stride", 1) != 1:
            return held
        lo, hi = got[0], got[1] + size - 1
        if lo < 0 or hi >= n or size < 1:
            return held
        box.append(slice(lo, hi + 1))
    part = values[tuple(box)]
    return (int(part.min()), int(part.max()))


__all__ = ["handed_on", "negative_index", "only_loaded"]
