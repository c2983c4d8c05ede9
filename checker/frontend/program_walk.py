"""The walk of a traced target that makes its `ProgramIR` (spec PRG-101 .. PRG-103, PRG-126).

`program_ir(jaxpr)` follows every kernel call in the order the program runs them, through `jit`,
`shard_map`, custom-derivative calls and unrolled `scan` bodies, and the values between them (the
links); `program_irs` gives one program per combination of the undecided conds' branches. What the
walk makes is `program_ir`'s data (`checker/frontend/program_ir.py`).

Imports of jax sit in the functions (see `trace`'s docstring).
"""

from __future__ import annotations

import dataclasses
from typing import Any


from semcheck.checker.frontend.program_devices import PerDevice
from semcheck.checker.frontend.program_ir import (
    CALL_PRIMITIVES,
    MAX_BRANCH_PROGRAMS,
    MAX_UNROLL,
    UNKNOWN_TRIPS,
    PER_DEVICE,
    Invocation,
    Link,
    Outside,
    Produced,
    ProgramIR,
    Trips,
    per_device_trips,
    Use,
    WINDOW,
    Value,
    deps_of,
    Stop,
)
from semcheck.checker.frontend.program_jaxpr import (
    MAX_FOLD,
    concrete,
    device_dependent,
    is_call_shaped,
    jaxpr_has_kernel,
    mesh_lanes,
    shard_map_axes,
    shard_values,
    side_effecting,
    single_sub,
    subs,
    varying_calls,
)
from semcheck.checker.frontend.pre_kernel_order import ORDERED, has_ordered, order_refusal
from semcheck.checker.frontend.trace import KernelCall, eqn_loc
from semcheck.model.ops import NO_LOC, Loc

def program_ir(jaxpr: Any, args: Any = None, choices: tuple[int, ...] = ()) -> ProgramIR:
    """The program of `jaxpr` (a traced target's `Jaxpr`): see the module docstring. `args` are the
    concrete values of its inputs when the target's build gave them; `choices` the branches the
    undecided conds take, in the order the walk meets them (0 past the end, PRG-126)."""
    w = _Walker(choices)
    env = {v: w.outside("a program input") for v in jaxpr.invars}
    for k, v in enumerate(jaxpr.invars):  # outside shard_map a value is one for every device
        w.know(env[v], None if args is None or len(args) != len(jaxpr.invars) else concrete(args[k]))
    for v in getattr(jaxpr, "constvars", ()):
        env[v] = w.outside("a constant of the program")
        w.know(env[v])
    try:
        outs = w.walk(jaxpr, env, axes={}, physical=1, top=True)
        for v in outs:
            if isinstance(v, Produced):
                w.result(v)
        if w.state_calls and len(w.invocations) > 1:  # PRG-129
            raise Stop("a kernel call inside a run_state, in a program of several calls: the refs it closes "
                        "over are not followed as links between calls", w.state_calls[0][1])
    except Stop as stop:
        return ProgramIR(_with_ids(w.invocations, jaxpr), tuple(w.links), (stop.reason, stop.loc),
                         tuple(w.escapes), tuple(w.uses), tuple(w.points), tuple(w.windows), unlowerable(jaxpr))
    return ProgramIR(_with_ids(w.invocations, jaxpr), tuple(w.links), None, tuple(w.escapes), tuple(w.uses),
                     tuple(w.points), tuple(w.windows), unlowerable(jaxpr))


def unlowerable(jaxpr: Any) -> tuple[int, Any] | None:
    """PRG-221, PRG-222: the first top-level computation of `jaxpr` that jax's interpreter cannot lower, and its
    error: that of its first kernel call whose lowering fails (`lowering_failure`: a semaphore result, LAUNCH-2; a
    typed argument, ERR-36; a vmapped call's semantics, ERR-43; an untranslatable kernel, LAUNCH-3) in the order jax
    lowers them, every branch of every cond and every loop body included (branch 0 first), whichever a device takes
    and however often a loop runs. PRG-223: the error carries that call's line."""
    from semcheck.checker.frontend.lower import at_call, lowering_failure
    from semcheck.checker.frontend.trace import find_kernels

    for call in find_kernels(jaxpr):
        failure = lowering_failure(call)
        if failure is not None:
            return call.unit, at_call(failure, call)
    return None


def program_irs(jaxpr: Any, args: Any = None, limit: int = MAX_BRANCH_PROGRAMS) -> list[ProgramIR]:
    """PRG-126: one program per combination of branches of the conds around kernel calls whose branch
    the walk cannot tell (each the same on every device), the first branches first; one unknown program
    when there are more than `limit`."""
    out: list[ProgramIR] = []
    pending: list[tuple[int, ...]] = [()]
    while pending:
        choices = pending.pop(0)
        ir = program_ir(jaxpr, args, choices)
        out.append(ir)
        for j in range(len(choices), len(ir.branches)):  # the conds this walk met first took branch 0
            taken = tuple(b for _, _, b in ir.branches[:j])
            pending.extend(taken + (b,) for b in range(1, ir.branches[j][0]))
        if len(out) + len(pending) > limit:
            loc = ir.branches[-1][1] if ir.branches else NO_LOC
            return [dataclasses.replace(out[0], unknown=(
                f"the conds around its kernel calls give more than {limit} programs (one per combination of "
                "branches): not explored", loc))]
    return out


def _with_ids(invocations: list[Invocation], jaxpr: Any = None) -> tuple[Invocation, ...]:
    """PRG-125: each invocation with the collective id jax gives its call for a TPU (PRG-123), under the
    auto-assignment mode jax is configured with while the target is traced. PRG-146: jax assigns ids over
    every kernel it lowers, both branches of every cond included (branch 0 first), whichever a device takes:
    the assignment runs over every kernel call of `jaxpr` in that order, and each invocation gets the id of
    the first of those that is its call (the same line, module and own id)."""
    from semcheck.checker.frontend.collective_ids import module_key, assign, config
    from semcheck.checker.frontend.trace import find_kernels

    every = find_kernels(jaxpr) if jaxpr is not None else []
    got = assign([*every, *(inv.call for inv in invocations)], *config())
    same: dict[int, Any] = {}
    for inv in invocations:
        if id(inv.call) not in same:
            mine = (inv.call.loc, inv.call.collective_id, module_key(inv.call))
            same[id(inv.call)] = next((e for e in every if (e.loc, e.collective_id, module_key(e)) == mine),
                                      inv.call)
    return tuple(dataclasses.replace(inv, collective_id=got[id(same[id(inv.call)])].collective_id,
                                     id_picked=got[id(same[id(inv.call)])].auto,
                                     id_error=got[id(same[id(inv.call)])].error)
                 for inv in invocations)


class _Walker(PerDevice):
    def __init__(self, choices: tuple[int, ...] = ()) -> None:
        self.choices = choices
        self.points: list[tuple[int, Loc, int]] = []  # PRG-126: the undecided conds met, in order
        self._uniform: set[int] = set()  # idents of values that are the same on every device
        self._const: dict[int, Any] = {}  # ident -> its value, where the walk knows it
        self._shard_of: dict[tuple, Outside] = {}
        self.state_calls: list[tuple[frozenset[int], Loc]] = []  # PRG-129: calls inside a run_state, its line
        self.windows: list[tuple[Loc, int, int, int]] = []  # PRG-130
        self._in_window = False
        self._loops: list[tuple[Loc, int, Any]] = []  # PRG-187: the unrolled loops' iterations the walk is in
        self._computation = 0  # PRG-127: the top-level computation the walk is in
        self.invocations: list[Invocation] = []
        self.links: list[Link] = []
        self.escapes: list[tuple[Produced, str]] = []
        self.uses: list[Use] = []
        self._calls: dict[int, KernelCall] = {}  # id(eqn) -> its KernelCall (one per pallas_call)
        self._has_kernel: dict[int, bool] = {}
        self._launched: dict[tuple, int] = {}  # (kernel, line, operands) -> the call that launched it
        self._values = 0
        # PRG-145: inside a shard_map, each device's coordinates; the values known device by device; the devices
        # that run the branch the walk is in (None: every device)
        self._lanes: list[dict[str, int]] | None = None
        self._per: dict[int, list[Any]] = {}
        self._devices: frozenset[int] | None = None

    def outside(self, what: str, loc: Loc = NO_LOC, deps: frozenset[int] = frozenset()) -> Outside:
        """A new value no call produced."""
        self._values += 1
        return Outside(what, loc, deps, self._values)

    def know(self, v: Value, value: Any = None, uniform: bool = True) -> None:
        """Record that `v` is the same on every device (PRG-126), and its value when known."""
        if isinstance(v, Outside) and v.ident:
            if uniform:
                self._uniform.add(v.ident)
            if value is not None:
                self._const[v.ident] = value

    def _literal(self, x: Any) -> Outside:
        v = self.outside("a literal")
        self.know(v, x.val)
        return v

    def _about(self, x: Any, v: Value) -> tuple[bool, Any]:
        """(whether the value is the same on every device, its value or None)."""
        from jax._src import core as jax_core

        if isinstance(x, jax_core.Literal):
            return True, x.val
        if isinstance(v, Outside) and v.ident:
            return v.ident in self._uniform, self._const.get(v.ident)
        return False, None

    def _fold(self, eqn: Any, about: list[tuple[bool, Any]], outs: list[Value]) -> None:
        """PRG-126: an XLA op's results are the same on every device when its operands are (`device_dependent`
        aside), and known when its operands are (evaluated by jax, for small values)."""
        import numpy as np

        if not all(u for u, _ in about) or device_dependent(eqn) or has_ordered(eqn):
            return  # (ACC-33: a call holding a scatter or a sort is not bound whole)
        value = None
        if all(c is not None for _, c in about) and (not subs(eqn) or eqn.primitive.name in CALL_PRIMITIVES) and \
                all(int(np.size(c)) <= MAX_FOLD for _, c in about):
            try:
                import jax

                with jax.ensure_compile_time_eval():
                    got = eqn.primitive.bind(*[c for _, c in about], **eqn.params)
                got = got if eqn.primitive.multiple_results else [got]
                value = [np.asarray(g) for g in got]
            except Exception:  # noqa: BLE001 - a value the walk cannot compute is only not known
                value = None
        if eqn.primitive.name in ORDERED and value is not None and order_refusal(eqn, [c for _, c in about], value):
            return  # ACC-33: which update wins is the implementation's, on each device: neither known nor uniform
        for k, v in enumerate(outs):
            self.know(v, None if value is None or k >= len(value) else value[k])

    def escape(self, v: Produced, how: str) -> None:
        if (v, how) not in self.escapes:
            self.escapes.append((v, how))

    def walk(self, jaxpr: Any, env: dict, *, axes: dict[str, int], physical: int, top: bool = False) -> list[Value]:
        from jax._src import core as jax_core  # lazy: see the module docstring

        def read(x: Any) -> Value:
            if isinstance(x, jax_core.Literal):
                return Outside("a literal")
            return env.get(x) or self.outside("a value the walk did not see")

        for i, eqn in enumerate(jaxpr.eqns):
            if top:  # PRG-127: each operation of the traced function is dispatched on its own
                self._computation = i
            name = eqn.primitive.name
            ins = [read(x) for x in eqn.invars]
            if name not in ("pallas_call", "mpmd_map") and subs(eqn):  # PRG-126: a literal into a body is known there
                ins = [self._literal(x) if isinstance(x, jax_core.Literal) else v for x, v in zip(eqn.invars, ins)]
            if name in ("pallas_call", "mpmd_map"):
                outs = self._kernel(eqn, ins, axes, physical)
            elif name == "shard_map":
                sub_axes, sub_physical = shard_map_axes(eqn, axes, physical)
                outer = self._lanes
                self._lanes = mesh_lanes(eqn, sub_physical) if outer is None else None
                try:
                    outs = self._call(eqn, self._shards(eqn, ins, sub_axes), sub_axes, sub_physical)
                finally:
                    self._lanes = outer
                outs = self._gathered(eqn, outs)
            elif name == "scan" and self._contains_kernel(eqn):
                outs = self._scan(eqn, ins, axes, physical)
            elif name == "while" and self._contains_kernel(eqn):
                outs = self._while(eqn, ins, axes, physical)
            elif name == "run_state" and self._contains_kernel(eqn):
                outs = self._run_state(eqn, ins, axes, physical)
            elif name == "cond" and self._contains_kernel(eqn):
                about = self._about(eqn.invars[0], ins[0])
                lanes = None if about[0] else self._lane_values(eqn.invars[0], ins[0])
                if lanes is not None:  # PRG-145: known on each device
                    outs = self._cond_per_device(eqn, ins, lanes, axes, physical)
                else:
                    outs = self._cond(eqn, ins, about, axes, physical)
            elif self._contains_kernel(eqn):
                if single_sub(eqn) is not None and (name in CALL_PRIMITIVES or is_call_shaped(eqn)):
                    outs = self._call(eqn, ins, axes, physical)
                else:
                    what = "a cond branch" if name == "cond" else f"a {name}"
                    raise Stop(f"a kernel call inside {what}: the program's call sequence is not followed "
                                "there yet", eqn_loc(eqn))
            elif self._lanes is not None and name in CALL_PRIMITIVES and is_call_shaped(eqn) and \
                    (device_dependent(eqn) or not all(self._about(x, v)[0] for x, v in zip(eqn.invars, ins))):
                outs = self._call(eqn, ins, axes, physical)  # PRG-145: a jit's operations device by device
            else:
                self._split_collective(eqn, ins)  # PRG-201
                loc = eqn_loc(eqn)
                for v in ins:
                    if isinstance(v, Produced):
                        self._xla_use(v, name, loc, deps_of(ins))
                outs = [self.outside(f"the result of {name}", loc, deps_of(ins)) for _ in eqn.outvars]
                self._fold(eqn, [self._about(x, v) for x, v in zip(eqn.invars, ins)], outs)
                self._fold_lanes(eqn, ins, outs)
                self._reduced_everywhere(eqn, outs, axes)
            for var, v in zip(eqn.outvars, outs):
                env[var] = v
        return [read(x) for x in jaxpr.outvars]

    # --- kernel calls ---------------------------------------------------------------

    def _kernel(self, eqn: Any, ins: list[Value], axes: dict[str, int], physical: int) -> list[Value]:
        from semcheck.checker.frontend.trace import from_mpmd_map, from_pallas_call

        call = self._calls.get(id(eqn))
        if call is None:
            make = from_pallas_call if eqn.primitive.name == "pallas_call" else from_mpmd_map
            # PRG-221: the top-level computation the call is lowered in, as `trace.find_kernels` numbers it
            call = dataclasses.replace(make(eqn, axes, physical, len(self._calls)), unit=self._computation)
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
                raise Stop(f"semaphore input {roles[j].name!r} of {call.name} comes from {v.what}, not from an "
                            "earlier kernel call: the front end cannot tell which semaphore it is", call.loc)
        for v in ins[:skip]:
            if isinstance(v, Produced):
                self._xla_use(v, f"a scalar operand of {call.name}", call.loc, deps_of(ins), entry=k)
        # PRG-127: XLA merges within one computation; PRG-145: devices in different branches run apart
        same = (call.name, call.loc, tuple(ins), self._computation, self._devices)
        if same in self._launched and not side_effecting(call):
            earlier = self.invocations[self._launched[same]]
            raise Stop(f"{call.name} (call {k}) is {earlier.describe()} again, on the same operands and without "
                        "has_side_effects: XLA may merge the two calls into one (CSE)", call.loc)
        self._launched.setdefault(same, k)
        self.invocations.append(Invocation(call, k, inputs, deps_of(ins), devices=self._devices, eqn=eqn,
                                           loops=tuple(self._loops)))
        return [Produced(k, o) for o in range(len(eqn.outvars))]

    def _xla_use(self, v: Produced, what: str, loc: Loc, after: frozenset[int], entry: int | None = None) -> None:
        sem = self._semaphore(v)
        if sem is not None:
            raise Stop(f"semaphore output {sem!r} of {self.invocations[v.call].describe()} is used by {what}, "
                        "not by a kernel call: the front end cannot follow it", loc)
        self.escape(v, f"in {what} at {loc}")
        self.uses.append(Use(v, what, loc, after | {v.call}, "xla", entry, self._devices))

    def result(self, v: Produced) -> None:
        """A produced value the program returns: a semaphore may be waited on by whatever runs next."""
        sem = self._semaphore(v)
        if sem is not None:
            inv = self.invocations[v.call]
            raise Stop(f"the program returns semaphore output {sem!r} of {inv.describe()}: what waits on it "
                        "after the program is not part of it", inv.loc)
        self.escape(v, "as the program's result")
        inv = self.invocations[v.call]
        self.uses.append(Use(v, "the program's result", inv.loc, frozenset({v.call}), "result"))

    def _semaphore(self, v: Produced) -> str | None:
        outs = [o for o in self.invocations[v.call].call.operands if o.role == "output"]
        return outs[v.output].name if v.output < len(outs) and outs[v.output].kind == "semaphore" else None

    # --- structure --------------------------------------------------------------------

    def _call(self, eqn: Any, ins: list[Value], axes: dict[str, int], physical: int) -> list[Value]:
        sub = single_sub(eqn)
        if sub is None or len(sub.invars) != len(ins):
            raise Stop(f"a kernel call inside {eqn.primitive.name} whose operands the walk cannot match",
                        eqn_loc(eqn))
        outs = self.walk(sub, dict(zip(sub.invars, ins)), axes=axes, physical=physical)
        if len(outs) != len(eqn.outvars):
            raise Stop(f"a kernel call inside {eqn.primitive.name} whose results the walk cannot match",
                        eqn_loc(eqn))
        return outs

    def _run_state(self, eqn: Any, ins: list[Value], axes: dict[str, int], physical: int) -> list[Value]:
        """PRG-129: the calls of a `run_state` body, whose kernels close over the body's refs (LAUNCH-4). The
        refs' final values are computed from those calls; as links to other calls they are not followed, so
        such a call is followed only as the program's one invocation (checked at the end of the walk)."""
        sub = single_sub(eqn)
        loc = eqn_loc(eqn)
        if sub is None or len(sub.invars) != len(ins):
            raise Stop("a kernel call inside a run_state whose refs the walk cannot match", loc)
        first = len(self.invocations)
        self.walk(sub, dict(zip(sub.invars, ins)), axes=axes, physical=physical)
        made = frozenset(range(first, len(self.invocations)))
        self.state_calls.append((made, loc))
        return [self.outside("the final value of a run_state ref", loc, deps_of(ins) | made) for _ in eqn.outvars]

    def _shards(self, eqn: Any, ins: list[Value], axes: dict[str, int]) -> list[Value]:
        """PRG-126: inside a shard_map an input split over a manual axis differs between devices (a new
        value, neither uniform nor known); a replicated one is the caller's."""
        out = []
        for v, spec in zip(ins, eqn.params.get("in_specs", ())):
            named = {a for part in spec if part is not None
                     for a in (part if isinstance(part, tuple) else (part,))}
            if isinstance(v, Outside) and named:  # one value per input and split, so PRG-103's CSE still sees it
                # (the split is the spec, dimension by dimension, over the mesh's sizes: another is other blocks)
                key = (v, tuple(tuple(p) if isinstance(p, (tuple, list)) else p for p in spec),
                       tuple(dict(eqn.params["mesh"].shape).items()))
                if key not in self._shard_of:
                    self._shard_of[key] = self.outside(v.what, v.loc, v.deps)
                    known = self._const.get(v.ident) if v.ident in self._uniform else None
                    if known is not None and self._lanes is not None:  # PRG-145: each device's block
                        blocks = shard_values(eqn, known, spec, self._lanes)
                        if blocks is not None:
                            self._per[self._shard_of[key].ident] = blocks
                v = self._shard_of[key]
            out.append(v)
        return out + list(ins[len(out):])

    def _gathered(self, eqn: Any, outs: list[Value]) -> list[Value]:
        """PRG-126: a shard_map result whose out_spec names a mesh axis is the devices' blocks put side by side,
        a value of its own (its block's known value, uniform or device by device, is not the whole's)."""
        got = []
        for v, spec in zip(outs, eqn.params.get("out_specs", ())):
            if isinstance(v, Outside) and any(part is not None for part in spec):
                new = self.outside(f"the result of {eqn.primitive.name}", eqn_loc(eqn), v.deps)
                self.know(new, None, uniform=v.ident in self._uniform)
                v = new
            got.append(v)
        return got + list(outs[len(got):])

    def _cond(self, eqn: Any, ins: list[Value], about: tuple[bool, Any], axes: dict[str, int],
              physical: int) -> list[Value]:
        """PRG-126: the branch the cond takes when the walk knows its index, one of each undecided cond's
        branches (the same on every device) per program otherwise, unknown when devices may differ."""
        import numpy as np

        branches = eqn.params["branches"]
        loc = eqn_loc(eqn)
        uniform, value = about
        if value is not None:
            b = int(np.clip(int(np.asarray(value).reshape(-1)[0]), 0, len(branches) - 1))
        elif uniform:
            if self._devices is not None:
                raise Stop("a kernel call inside a cond whose branch the walk cannot tell, inside a branch that only "
                            "some devices take: not followed", loc)
            j = len(self.points)
            b = self.choices[j] if j < len(self.choices) else 0
            self.points.append((len(branches), loc, b))
        else:
            raise Stop(f"a kernel call inside a cond whose branch {PER_DEVICE} (its predicate depends on the "
                        "device or on a sharded value, and the walk cannot compute it on each device: PRG-145)", loc)
        return self._branch(eqn, branches[b], ins, loc, axes, physical)

    def _branch(self, eqn: Any, sub: Any, ins: list[Value], loc: Loc, axes: dict[str, int],
                physical: int) -> list[Value]:
        """The walk of one branch of a cond on its operands."""
        jaxpr = getattr(sub, "jaxpr", sub)
        consts = [self.outside("a constant of a cond branch", loc) for _ in getattr(jaxpr, "constvars", ())]
        env = dict(zip(jaxpr.constvars, consts)) if consts else {}
        operands = ins[1:]
        if len(jaxpr.invars) != len(operands):
            raise Stop("a kernel call inside a cond whose operands the walk cannot match", loc)
        env.update(zip(jaxpr.invars, operands))
        outs = self.walk(jaxpr, env, axes=axes, physical=physical)
        if len(outs) != len(eqn.outvars):
            raise Stop("a kernel call inside a cond whose results the walk cannot match", loc)
        return outs

    def _scan(self, eqn: Any, ins: list[Value], axes: dict[str, int], physical: int) -> list[Value]:
        p = eqn.params
        length = int(p["length"])
        loc = eqn_loc(eqn)
        body = getattr(p["jaxpr"], "jaxpr", p["jaxpr"])
        window = None
        if length > MAX_UNROLL:
            varying = varying_calls(body)
            if varying is not None or self.points or self._in_window or self._devices is not None:  # PRG-144, PRG-145
                raise Stop(f"a kernel call inside a loop of {length} iterations: the walk unrolls at most "
                            f"{MAX_UNROLL}, and checks a window of {WINDOW} iterations (PRG-130) only for a loop "
                            "whose every iteration runs the same calls, not inside another such loop nor after "
                            "an undecided cond" + (f" (its calls depend on {varying})" if varying else ""), loc)
            window = (loc, length, len(self.invocations))
            length = WINDOW
        consts, carry, xs = (list(g) for g in p["ft_in"].update(ins).unpack())
        ncarry = len(carry)
        for v in xs:
            if isinstance(v, Produced):
                self._xla_use(v, "a loop's sliced input", loc, deps_of(xs))
        slices = [self.outside("a slice of a loop's input", loc, deps_of(xs)) for _ in xs]
        ys: list[Value] = []
        every_y: list[Value] = []  # the stacked results are computed from every iteration's
        self._in_window = self._in_window or window is not None
        trips = p["length"] if window is None else f"the {WINDOW} iterations of PRG-130's window over {p['length']}"
        for i in range(length):  # a reversed scan runs the same body: only the slices' order differs
            self._loops.append((loc, i, trips))  # PRG-187
            try:
                outs = self.walk(body, dict(zip(body.invars, [*consts, *carry, *slices])), axes=axes,
                                 physical=physical)
            finally:
                self._loops.pop()
            carry, ys = (list(g) for g in p["ft_out"].update(outs).unpack())
            every_y.extend(ys)
            for v in ys:
                if isinstance(v, Produced):
                    self._xla_use(v, "a loop's stacked result", loc, frozenset())
        stacked = [self.outside("a loop's stacked result", loc, deps_of(every_y)) for _ in ys]
        if len(carry) != ncarry:
            raise Stop("a loop whose carried values the walk cannot match", loc)
        if window is not None:
            self._in_window = False
            per = (len(self.invocations) - window[2]) // WINDOW
            if per == 0 or (len(self.invocations) - window[2]) % WINDOW:
                raise Stop("a loop whose iterations do not run the same calls", loc)
            self.windows.append((*window, per))
        return [*carry, *stacked]

    def _while(self, eqn: Any, ins: list[Value], axes: dict[str, int], physical: int) -> list[Value]:
        """PRG-171: a `while_loop` around kernel calls, unrolled where the walk knows its condition on every
        iteration's carry, the same on every device, for at most MAX_UNROLL iterations; PRG-197: or known on each
        device, each iteration's calls run by the devices whose condition still holds; unknown otherwise."""
        import numpy as np

        p = eqn.params
        loc = eqn_loc(eqn)
        nc, nb = p["cond_nconsts"], p["body_nconsts"]
        cconsts, bconsts, carry = ins[:nc], ins[nc:nc + nb], list(ins[nc + nb:])

        def run(closed: Any, operands: list[Value]) -> list[Value]:
            jaxpr = getattr(closed, "jaxpr", closed)
            env = {}
            for var, c in zip(jaxpr.constvars, getattr(closed, "consts", ())):
                env[var] = self.outside("a constant of a loop", loc)
                self.know(env[var], concrete(c))
            env.update(zip(jaxpr.invars, operands))
            return self.walk(jaxpr, env, axes=axes, physical=physical)

        outer = self._devices
        # the devices the walk is in (one stands for all outside a shard_map, where only uniform values are known)
        everyone = outer if outer is not None else frozenset(range(len(self._lanes) if self._lanes else 1))
        active, finals, counts = everyone, {}, {}
        trips = Trips()  # PRG-187: the iterations' words read the trip count once it is known
        cond = getattr(p["cond_jaxpr"], "jaxpr", p["cond_jaxpr"])
        try:
            for done in range(MAX_UNROLL + 1):
                trips.n = done
                self._devices = outer if active == everyone else active
                (flag,) = run(p["cond_jaxpr"], [*cconsts, *carry])
                uniform, value = self._about(cond.outvars[0], flag)
                if uniform and value is not None:
                    running = active if bool(np.asarray(value).reshape(-1)[0]) else frozenset()
                else:  # PRG-197: the condition on each device
                    running = None if self._lanes is None else self._running(cond.outvars[0], flag, active)
                    if running is None:
                        raise Stop(f"a kernel call inside {UNKNOWN_TRIPS}, the same on every device or on each "
                                   "device, from the loop's carry (PRG-171, PRG-197)", loc)
                for d in active - running:
                    finals[d], counts[d] = carry, done
                active = running
                if not active:
                    break
                if done == MAX_UNROLL:
                    raise Stop(f"a kernel call inside a while loop of more than {MAX_UNROLL} iterations: the walk "
                               f"unrolls at most {MAX_UNROLL} (PRG-171)", loc)
                self._devices = outer if active == everyone else active
                self._loops.append((loc, done, trips))
                try:
                    carry = run(p["body_jaxpr"], [*bconsts, *carry])
                finally:
                    self._loops.pop()
                if len(carry) != len(eqn.outvars):
                    raise Stop("a loop whose carried values the walk cannot match", loc)
        finally:
            self._devices = outer
        if len(set(counts.values())) > 1:  # PRG-197: the words say each device's count
            trips.words = per_device_trips(counts)
        return self._merge_devices(finals, loc, "a while loop whose trip count differs between devices")

    def _contains_kernel(self, eqn: Any) -> bool:
        key = id(eqn)
        if key not in self._has_kernel:
            self._has_kernel[key] = any(jaxpr_has_kernel(s) for s in subs(eqn))
        return self._has_kernel[key]


__all__ = ["program_ir", "program_irs"]
