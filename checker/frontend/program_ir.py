"""A traced target as a program of kernel calls: invocations in order and the links between them.

`program_ir(jaxpr)` walks the whole traced function (spec programs.md, PRG-101): every
`pallas_call` (and `core_map`) in the order the program runs them, inside `jit`, `shard_map`
and custom-derivative calls, and inside `scan` bodies (`fori_loop` with static bounds becomes
a `scan`) unrolled once per iteration. Each run of a kernel is an `Invocation` (kernel, call
index, the pallas_call's line). The walk follows jaxpr values through those boundaries, so an
operand of a call that is an output of an earlier call is a `Link` (PRG-102), including through
the call's own `input_output_aliases`.

What the walk cannot follow it does not guess (PRG-103): a kernel call under a `cond` branch
or a `while_loop`, a scan longer than `MAX_UNROLL`, or a semaphore that reaches a call through
anything but another call's output leaves the program `unknown` with the reason and the line.

Imports of jax sit in the functions (see `trace`'s docstring).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from semcheck.checker.frontend.trace import KernelCall, eqn_loc
from semcheck.model.ops import NO_LOC, Loc

MAX_UNROLL = 64
"""The most iterations of a `scan` around a kernel call the walk unrolls (PRG-103)."""

_CALL_PRIMITIVES = frozenset({"jit", "pjit", "closed_call", "core_call", "remat", "checkpoint",
                              "custom_jvp_call", "custom_vjp_call", "custom_vjp_call_jaxpr", "named_call"})


@dataclasses.dataclass(frozen=True)
class Produced:
    """Output `output` of invocation `call`."""

    call: int
    output: int


@dataclasses.dataclass(frozen=True)
class Outside:
    """A value no kernel call produced: a program input, a literal or an XLA op's result.

    `deps` are the calls whose outputs it was computed from (an XLA op runs after them); `ident`
    tells values apart (0: a literal).
    """

    what: str
    loc: Loc = NO_LOC
    deps: frozenset[int] = frozenset()
    ident: int = 0


Value = Produced | Outside


@dataclasses.dataclass(frozen=True)
class Invocation:
    """One run of a kernel in the program (PRG-101)."""

    call: KernelCall  # what the kernel is (shared by the invocations of one pallas_call)
    index: int  # the call index: position in the traced order of kernel runs
    inputs: tuple[Value, ...]  # per input operand (role "input"), in order
    after: frozenset[int] = frozenset()  # the calls whose outputs its operands are computed from

    @property
    def name(self) -> str:
        return self.call.name

    @property
    def loc(self) -> Loc:
        return self.call.loc

    def describe(self) -> str:
        """How reports name the call: kernel name, call index and the pallas_call's line."""
        return f"{self.name} (call {self.index}, {self.loc})"


@dataclasses.dataclass(frozen=True)
class Link:
    """Output `output` of call `producer` is input `input` of the later call `consumer` (PRG-102)."""

    producer: int
    output: int
    consumer: int
    input: int
    kind: str  # "semaphore" | "buffer"


@dataclasses.dataclass(frozen=True)
class Use:
    """A use of a call's result outside kernel calls (PRG-121): an XLA operation, a scalar operand of a
    later call, or the program's return of it.

    `after` are the calls whose outputs the use needs (the operation runs after their exits);
    `entry` is the call whose entry reads it (a scalar operand), None otherwise; `kind` is "xla" or
    "result".
    """

    value: Produced
    what: str
    loc: Loc
    after: frozenset[int]
    kind: str = "xla"
    entry: int | None = None


@dataclasses.dataclass(frozen=True)
class ProgramIR:
    """The kernel calls of a traced target, in order, and their links.

    `unknown` is (reason, line) when the walk could not follow the program (PRG-103); the
    invocations found before that point are kept for the report.
    `escapes` are the produced values used outside kernel calls, each with how (an XLA op and its
    line, or the program's result); `uses` are the same uses with where they happen (PRG-121).
    """

    invocations: tuple[Invocation, ...]
    links: tuple[Link, ...]
    unknown: tuple[str, Loc] | None = None
    escapes: tuple[tuple[Produced, str], ...] = ()
    uses: tuple[Use, ...] = ()

    @property
    def semaphore_links(self) -> tuple[Link, ...]:
        return tuple(link for link in self.links if link.kind == "semaphore")

    def links_into(self, consumer: int) -> dict[int, Link]:
        """Input position -> the link feeding it, for one call."""
        return {link.input: link for link in self.links if link.consumer == consumer}

    def orders(self, limit: int) -> list[tuple[int, ...]] | None:
        """PRG-101: every order of the calls their data dependences allow (XLA keeps only those), the
        traced order first; None when there are more than `limit`."""
        n = len(self.invocations)
        after = [inv.after for inv in self.invocations]
        found: list[tuple[int, ...]] = []

        def extend(order: list[int], placed: set[int]) -> bool:
            if len(order) == n:
                found.append(tuple(order))
                return len(found) <= limit
            for k in range(n):
                if k not in placed and after[k] <= placed:
                    order.append(k)
                    placed.add(k)
                    ok = extend(order, placed)
                    order.pop()
                    placed.discard(k)
                    if not ok:
                        return False
            return True

        return found if extend([], set()) else None

    @property
    def carries_semaphores(self) -> bool:
        """Whether some call takes or returns a semaphore (then calls cannot be checked alone)."""
        return any(o.kind == "semaphore" and o.role in ("input", "output")
                   for inv in self.invocations for o in inv.call.operands)


class _Stop(Exception):
    def __init__(self, reason: str, loc: Loc) -> None:
        super().__init__(reason)
        self.reason, self.loc = reason, loc


def program_ir(jaxpr: Any) -> ProgramIR:
    """The program of `jaxpr` (a traced target's `Jaxpr`): see the module docstring."""
    w = _Walker()
    env = {v: w.outside("a program input") for v in jaxpr.invars}
    try:
        outs = w.walk(jaxpr, env, axes={}, physical=1)
        for v in outs:
            if isinstance(v, Produced):
                w.result(v)
    except _Stop as stop:
        return ProgramIR(tuple(w.invocations), tuple(w.links), (stop.reason, stop.loc), tuple(w.escapes),
                         tuple(w.uses))
    return ProgramIR(tuple(w.invocations), tuple(w.links), None, tuple(w.escapes), tuple(w.uses))


class _Walker:
    def __init__(self) -> None:
        self.invocations: list[Invocation] = []
        self.links: list[Link] = []
        self.escapes: list[tuple[Produced, str]] = []
        self.uses: list[Use] = []
        self._calls: dict[int, KernelCall] = {}  # id(eqn) -> its KernelCall (one per pallas_call)
        self._has_kernel: dict[int, bool] = {}
        self._launched: dict[tuple, int] = {}  # (kernel, line, operands) -> the call that launched it
        self._values = 0

    def outside(self, what: str, loc: Loc = NO_LOC, deps: frozenset[int] = frozenset()) -> Outside:
        """A new value no call produced."""
        self._values += 1
        return Outside(what, loc, deps, self._values)

    def escape(self, v: Produced, how: str) -> None:
        if (v, how) not in self.escapes:
            self.escapes.append((v, how))

    def walk(self, jaxpr: Any, env: dict, *, axes: dict[str, int], physical: int) -> list[Value]:
        from jax._src import core as jax_core  # lazy: see the module docstring

        def read(x: Any) -> Value:
            if isinstance(x, jax_core.Literal):
                return Outside("a literal")
            return env.get(x) or self.outside("a value the walk did not see")

        for eqn in jaxpr.eqns:
            name = eqn.primitive.name
            ins = [read(x) for x in eqn.invars]
            if name in ("pallas_call", "mpmd_map"):
                outs = self._kernel(eqn, ins, axes, physical)
            elif name == "shard_map":
                sub_axes, sub_physical = _shard_map_axes(eqn, axes, physical)
                outs = self._call(eqn, ins, sub_axes, sub_physical)
            elif name == "scan" and self._contains_kernel(eqn):
                outs = self._scan(eqn, ins, axes, physical)
            elif self._contains_kernel(eqn):
                if _single_sub(eqn) is not None and (name in _CALL_PRIMITIVES or _is_call_shaped(eqn)):
                    outs = self._call(eqn, ins, axes, physical)
                else:
                    what = "a cond branch" if name == "cond" else f"a {name}"
                    raise _Stop(f"a kernel call inside {what}: the program's call sequence is not followed "
                                "there yet", eqn_loc(eqn))
            else:
                loc = eqn_loc(eqn)
                for v in ins:
                    if isinstance(v, Produced):
                        self._xla_use(v, name, loc, _deps(ins))
                outs = [self.outside(f"the result of {name}", loc, _deps(ins)) for _ in eqn.outvars]
            for var, v in zip(eqn.outvars, outs):
                env[var] = v
        return [read(x) for x in jaxpr.outvars]

    # --- kernel calls ---------------------------------------------------------------

    def _kernel(self, eqn: Any, ins: list[Value], axes: dict[str, int], physical: int) -> list[Value]:
        from semcheck.checker.frontend.trace import _from_mpmd_map, _from_pallas_call

        call = self._calls.get(id(eqn))
        if call is None:
            make = _from_pallas_call if eqn.primitive.name == "pallas_call" else _from_mpmd_map
            call = make(eqn, axes, physical, len(self._calls))
            self._calls[id(eqn)] = call
        k = len(self.invocations)
        skip = len(call.dynamic_grid_dims) + call.num_index_operands
        inputs = tuple(ins[skip:skip + call.num_inputs])
        roles = [o for o in call.operands if o.role == "input"]
        for j, v in enumerate(inputs):
            if isinstance(v, Produced):
                kind = roles[j].kind if j < len(roles) else "buffer"
                self.links.append(Link(v.call, v.output, k, j, kind))
            elif j < len(roles) and roles[j].kind == "semaphore":
                raise _Stop(f"semaphore input {roles[j].name!r} of {call.name} comes from {v.what}, not from an "
                            "earlier kernel call: the front end cannot tell which semaphore it is", call.loc)
        for v in ins[:skip]:
            if isinstance(v, Produced):
                self._xla_use(v, f"a scalar operand of {call.name}", call.loc, _deps(ins), entry=k)
        same = (call.name, call.loc, tuple(ins))
        if same in self._launched and not _side_effecting(call):
            earlier = self.invocations[self._launched[same]]
            raise _Stop(f"{call.name} (call {k}) is {earlier.describe()} again, on the same operands and without "
                        "has_side_effects: XLA may merge the two calls into one (CSE)", call.loc)
        self._launched.setdefault(same, k)
        self.invocations.append(Invocation(call, k, inputs, _deps(ins)))
        return [Produced(k, o) for o in range(len(eqn.outvars))]

    def _xla_use(self, v: Produced, what: str, loc: Loc, after: frozenset[int], entry: int | None = None) -> None:
        sem = self._semaphore(v)
        if sem is not None:
            raise _Stop(f"semaphore output {sem!r} of {self.invocations[v.call].describe()} is used by {what}, "
                        "not by a kernel call: the front end cannot follow it", loc)
        self.escape(v, f"in {what} at {loc}")
        self.uses.append(Use(v, what, loc, after | {v.call}, "xla", entry))

    def result(self, v: Produced) -> None:
        """A produced value the program returns: a semaphore may be waited on by whatever runs next."""
        sem = self._semaphore(v)
        if sem is not None:
            inv = self.invocations[v.call]
            raise _Stop(f"the program returns semaphore output {sem!r} of {inv.describe()}: what waits on it "
                        "after the program is not part of it", inv.loc)
        self.escape(v, "as the program's result")
        inv = self.invocations[v.call]
        self.uses.append(Use(v, "the program's result", inv.loc, frozenset({v.call}), "result"))

    def _semaphore(self, v: Produced) -> str | None:
        outs = [o for o in self.invocations[v.call].call.operands if o.role == "output"]
        return outs[v.output].name if v.output < len(outs) and outs[v.output].kind == "semaphore" else None

    # --- structure --------------------------------------------------------------------

    def _call(self, eqn: Any, ins: list[Value], axes: dict[str, int], physical: int) -> list[Value]:
        sub = _single_sub(eqn)
        if sub is None or len(sub.invars) != len(ins):
            raise _Stop(f"a kernel call inside {eqn.primitive.name} whose operands the walk cannot match",
                        eqn_loc(eqn))
        outs = self.walk(sub, dict(zip(sub.invars, ins)), axes=axes, physical=physical)
        if len(outs) != len(eqn.outvars):
            raise _Stop(f"a kernel call inside {eqn.primitive.name} whose results the walk cannot match",
                        eqn_loc(eqn))
        return outs

    def _scan(self, eqn: Any, ins: list[Value], axes: dict[str, int], physical: int) -> list[Value]:
        p = eqn.params
        length = int(p["length"])
        loc = eqn_loc(eqn)
        if length > MAX_UNROLL:
            raise _Stop(f"a kernel call inside a loop of {length} iterations: the walk unrolls at most "
                        f"{MAX_UNROLL}", loc)
        body = getattr(p["jaxpr"], "jaxpr", p["jaxpr"])
        consts, carry, xs = (list(g) for g in p["ft_in"].update(ins).unpack())
        ncarry = len(carry)
        for v in xs:
            if isinstance(v, Produced):
                self._xla_use(v, "a loop's sliced input", loc, _deps(xs))
        slices = [self.outside("a slice of a loop's input", loc, _deps(xs)) for _ in xs]
        ys: list[Value] = []
        every_y: list[Value] = []  # the stacked results are computed from every iteration's
        for _ in range(length):  # a reversed scan runs the same body: only the slices' order differs
            outs = self.walk(body, dict(zip(body.invars, [*consts, *carry, *slices])), axes=axes, physical=physical)
            carry, ys = (list(g) for g in p["ft_out"].update(outs).unpack())
            every_y.extend(ys)
            for v in ys:
                if isinstance(v, Produced):
                    self._xla_use(v, "a loop's stacked result", loc, frozenset())
        stacked = [self.outside("a loop's stacked result", loc, _deps(every_y)) for _ in ys]
        if len(carry) != ncarry:
            raise _Stop("a loop whose carried values the walk cannot match", loc)
        return [*carry, *stacked]

    def _contains_kernel(self, eqn: Any) -> bool:
        key = id(eqn)
        if key not in self._has_kernel:
            self._has_kernel[key] = any(_jaxpr_has_kernel(s) for s in _subs(eqn))
        return self._has_kernel[key]


# --- jaxpr helpers ---------------------------------------------------------------------


def _side_effecting(call: KernelCall) -> bool:
    """Whether XLA must keep every launch of the call (`CompilerParams.has_side_effects`: "set to True to
    prevent kernel being CSEd by XLA"): True or a side-effect type other than pure."""
    effects = getattr(call.compiler_params, "has_side_effects", False)
    if isinstance(effects, bool):
        return effects
    return str(getattr(effects, "name", effects)).upper() != "PURE"


def _deps(values: list[Value]) -> frozenset[int]:
    """The calls `values` are computed from."""
    out: set[int] = set()
    for v in values:
        if isinstance(v, Produced):
            out.add(v.call)
        else:
            out |= v.deps
    return frozenset(out)


def _subs(eqn: Any) -> list[Any]:
    from semcheck.checker.frontend.trace import _sub_jaxprs

    return list(_sub_jaxprs(eqn.params))


def _single_sub(eqn: Any) -> Any:
    subs = _subs(eqn)
    return subs[0] if len(subs) == 1 else None


def _is_call_shaped(eqn: Any) -> bool:
    sub = _single_sub(eqn)
    return sub is not None and len(sub.invars) == len(eqn.invars) and len(sub.outvars) == len(eqn.outvars) \
        and eqn.primitive.name not in ("cond", "while", "scan")


def _jaxpr_has_kernel(jaxpr: Any) -> bool:
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in ("pallas_call", "mpmd_map"):
            return True
        if any(_jaxpr_has_kernel(s) for s in _subs(eqn)):
            return True
    return False


def _shard_map_axes(eqn: Any, axes: dict[str, int], physical: int) -> tuple[dict[str, int], int]:
    mesh = eqn.params["mesh"]
    manual = set(eqn.params.get("newly_manual_axes", ())) | set(getattr(mesh, "manual_axes", ()) or ())
    sub_axes = dict(axes)
    for k, v in mesh.shape.items():
        if k in manual:
            sub_axes[k] = int(v)
    return sub_axes, max(physical, int(math.prod(mesh.shape.values())))


__all__ = ["Invocation", "Link", "Outside", "Produced", "ProgramIR", "Use", "program_ir", "MAX_UNROLL"]
