"""PRG-168: the values of a kernel's scalar operands where it is launched inside a `scan` (spec programs.md).

A `fori_loop` with static bounds is a `scan`; `concrete_inputs`' interpreter (which mixes this class in) runs
its body once per iteration, the carry computed as far as the calls' operands need it, instead of skipping it.
A launch in the body is one equation reached once per iteration, and a program of calls keys its values by
launch equation (PRG-167): it keeps them only where every iteration gives the same, else it has none, with the
reason. A loop that cannot be run is skipped as before (its launches keep no values, never a guess).

PRG-183: every reach of a launch is kept with the loops' iterations around it (`LoopInputs.reached`), so that a
launch whose iterations differ gets each iteration's own values (`iteration_inputs`) and each iteration's call its
own lowering (`lower_iterations`); PRG-182 refuses what is still not told apart.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from semcheck.checker.frontend.loop_budget import MAX_ITERATION_LOWERINGS, MAX_SCAN
from semcheck.checker.frontend.partial_values import same_value
from semcheck.checker.frontend.program_ir import Trips, iteration_words, per_device_trips
from semcheck.checker.frontend.trace import eqn_loc
from semcheck.checker.frontend.while_inputs import WhileInputs
from semcheck.model.ops import NO_LOC

LOOP_DIFFERS_MARK = "whose iterations give it different scalar inputs"
# PRG-184: the reason a launch has no values where the evaluation never reaches it (a loop it does not run)
NOT_EVALUATED = "the kernel is launched inside a construct semcheck does not evaluate concretely"
_LOOP_DIFFERS = ("the kernel is launched in a loop{at} " + LOOP_DIFFERS_MARK + ", which a "
                 "program of calls does not tell apart")


def refuse_regions_a_loop_varies(program: Any) -> None:
    """PRG-182: a copy or access of the kernel whose region depends on a scalar input that PRG-168 found to
    differ between the loop's iterations is unsupported (so every property unknown, with its line): the region
    the front end widens to the whole dimension covers the iterations' in-bounds starts, but not a start past
    the array's end that one iteration may give, where jax's interpreter raises (BUF-10, BUF-11) and a TPU's copy
    is not argued; a proof over the widened region would hide that run."""
    from semcheck.checker.frontend.errors import Unsupported

    from semcheck.model.ops import core_field

    for ops in getattr(program, core_field(program)):  # a program given by one period: its representatives
        for op in ops:
            for region in (getattr(op, "region", None), getattr(op, "src_region", None),
                           getattr(op, "dst_region", None)):
                why = region.why or "" if region is not None and not region.exact else ""
                if LOOP_DIFFERS_MARK in why:
                    raise Unsupported(type(op).__name__, f"the region of {op.describe()} depends on a scalar input "
                                      f"that differs between the iterations of the loop around the call "
                                      f"({why}): each iteration's start may be out of bounds, which is not "
                                      f"checked where PRG-183 does not check each iteration's call (it does for "
                                      f"at most {MAX_SCAN} reaches of a launch in the same iterations on every "
                                      f"device, PRG-198, with at most {MAX_ITERATION_LOWERINGS} distinct inputs, "
                                      "PRG-185) "
                                      "(specs/deciding/programs.md PRG-182)", op.loc)
                if NOT_EVALUATED in why:
                    raise Unsupported(type(op).__name__, f"the region of {op.describe()} depends on a scalar input "
                                      f"the evaluation of the program around the call never computes ({why}): a "
                                      "start it may give past the end of the array is not checked "
                                      "(specs/deciding/programs.md PRG-184)", op.loc)


def lower_iterations(values: Any, lower: Any) -> tuple[tuple[str, Any], ...]:
    """PRG-183: each iteration's program of a call whose loop varies its scalar inputs (`values.iterations`),
    `lower(inputs)` called once per distinct inputs (iterations with equal values share one lowering); () where
    there are none, or where some iteration's own program still has a region that depends on values it lacks.
    PRG-199: lowerings that make the same program (the values differ only where the kernel reads them as data)
    are one program, checked once; PRG-185's budget counts the distinct programs."""
    from semcheck.checker.frontend.errors import Unsupported

    got: dict[int, Any] = {}
    distinct: list[Any] = []
    out = []
    for words, inputs in getattr(values, "iterations", ()) or ():
        if id(inputs) not in got:
            program = lower(inputs)
            same = next((p for p in distinct if same_program(p, program)), None)
            if same is None:
                if len(distinct) == MAX_ITERATION_LOWERINGS:  # PRG-185: over the budget, PRG-182 stands for the call
                    return ()
                try:
                    refuse_regions_a_loop_varies(program)
                except Unsupported:  # PRG-182 stands for the call
                    return ()
                distinct.append(program)
            got[id(inputs)] = program if same is None else same
        out.append((words, got[id(inputs)]))
    return tuple(out)


def same_program(a: Any, b: Any) -> bool:
    """PRG-199: whether two lowerings of one call are the same program to every check: equal operations, ids,
    failures and topology, and equal in what the comparison of programs leaves out (the names reports give labels,
    the values the lowering followed through copies, ACC-9)."""
    return type(a) is type(b) and a == b and getattr(a, "names", None) == getattr(b, "names", None) \
        and getattr(a, "followed", None) == getattr(b, "followed", None)


def scan_split(eqn: Any) -> tuple[int, int]:
    """How many of a scan's operands are constants and how many carries (jax 0.12 packs the three groups,
    constants, carries and scanned inputs, in the `ft_in` tree; older releases count them)."""
    p = eqn.params
    if "num_consts" in p:
        return p["num_consts"], p["num_carry"]
    consts, carry, _ = p["ft_in"].unpack()
    return len(list(consts)), len(list(carry))


def _where(stack: tuple[Any, ...]) -> tuple[Any, ...]:
    """The loops and iterations of a reach, without their trip counts (which a `while_loop` finds per lane)."""
    return tuple((loc, i) for loc, i, _ in stack)


def _trips_by_lane(k: int, per_lane: dict[int, list[Any]]) -> tuple[Any, ...]:
    """PRG-198: the loops of reach `k` (of the lane that reaches the launch most often), each `while_loop` whose
    lanes run different trip counts said with each lane's: a lane's own run of the same loop (the same enclosing
    iterations) found its count, read from its reach `k` or, past its last reach, from its last."""
    stack = max(per_lane.values(), key=len)[k][0]
    out = []
    for j, (loc, i, trips) in enumerate(stack):
        counts = {}
        for d, reaches in per_lane.items():
            mine = reaches[min(k, len(reaches) - 1)][0]
            if len(mine) > j and mine[j][0] == loc and _where(mine[:j]) == _where(stack[:j]) \
                    and isinstance(mine[j][2], Trips):
                counts[d] = mine[j][2].n
        if len(set(counts.values())) > 1:
            trips = Trips()
            trips.n, trips.words = max(counts.values()), per_device_trips(counts)
        out.append((loc, i, trips))
    return tuple(out)


def _same_list(a: list[Any], b: list[Any]) -> bool:
    """Whether two reaches of a launch gave the same operand values (None only equals None)."""
    return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))




class LoopInputs(WhileInputs):
    """The scan part of `concrete_inputs._Interpreter` (which provides `run`, `records`, `reasons`, `calls`,
    `_need`, `_kernels_in`, `_pass_reasons`, `_why`, and `_value` and `_tracks`: a constant's value and
    whether the front end reads an operand's contents)."""

    def start_loops(self) -> None:
        """PRG-183: no launch reached yet, no loop entered."""
        # per launch, per lane: each reach's (the loops' iterations around it, its operands, their reasons)
        self.reaches: dict[int, dict[int, list[tuple[tuple[Any, ...], list[Any], list[Any]]]]] = {}
        self._loops: list[tuple[Any, int, int]] = []  # the scans being run: (line, iteration, trip count)
        self._varied: set[int] = set()  # the launches PRG-168 found the iterations give different values

    def reached(self, index: int, lane: int) -> None:
        """PRG-183: launch `index` reached on `lane` with the operands `records` holds now."""
        self.reaches.setdefault(index, {}).setdefault(lane, []).append(
            (tuple(self._loops), self.records[index][lane], self.reasons[index][lane]))

    def forget_reaches(self, indices: range, lane: int) -> None:
        """PRG-183: a shard_map body run again on `lane` (ACC-8's passes): its earlier reaches go."""
        for k in indices:
            self.reaches.get(k, {}).pop(lane, None)

    def iteration_inputs(self, index: int, made: Any) -> tuple[tuple[str, Any], ...]:
        """PRG-183: for a launch whose loop iterations give it different values (PRG-168), each reach's own
        inputs (`made(per_device, reasons)` builds them), in program order, equal values sharing one object;
        () where the reaches cannot be told apart: other loops around them on different lanes, a reach outside a
        loop, a lane that never reaches the launch, more than MAX_SCAN reaches. PRG-198: where lanes reach it
        different numbers of times (a `while_loop` whose trip count differs between devices), each lane's reaches
        must be the first of the longest lane's (the same loops and iterations); a reach only some lanes make is
        marked with them (`reached_by`), and the other lanes read their own last reach's values there."""
        per_lane = self.reaches.get(index, {})
        if index not in self._varied or not per_lane or set(per_lane) != set(self.records.get(index, {})):
            return ()
        lanes = sorted(per_lane)
        longest = max(lanes, key=lambda d: len(per_lane[d]))
        if len(per_lane[longest]) > MAX_SCAN or any(
                not per_lane[d] or [_where(r[0]) for r in per_lane[d]] !=
                [_where(r[0]) for r in per_lane[longest][:len(per_lane[d])]] for d in lanes):
            return ()
        out: list[tuple[str, Any]] = []
        for k, reach in enumerate(per_lane[longest]):
            if not reach[0]:
                return ()
            by = {d: per_lane[d][min(k, len(per_lane[d]) - 1)] for d in lanes}
            some = frozenset(d for d in lanes if k < len(per_lane[d]))
            got = made({d: r[1] for d, r in by.items()}, {d: r[2] for d, r in by.items()})
            if len(some) < len(lanes):
                got = dataclasses.replace(got, reached_by=some)
            key = [*got.values, *got.grid_bounds]
            got = next((g for _, g in out if g.reached_by == got.reached_by and
                        _same_list([*g.values, *g.grid_bounds], key)), got)  # shared lowering
            out.append((iteration_words(_trips_by_lane(k, per_lane)), got))
        return tuple(out)

    def evaluates(self, eqn: Any) -> bool:
        """Whether a loop around kernel calls is run by the evaluation: a `scan` of at most MAX_SCAN iterations
        (PRG-168, PRG-185), a `while_loop` (PRG-186, its trip count found as it runs)."""
        name = eqn.primitive.name
        return (name == "scan" and eqn.params["length"] <= MAX_SCAN) or name == "while"

    def loop_needs(self, eqn: Any, need: set[Any]) -> list[Any]:
        """The operands of a loop `evaluates` runs that its calls' operands (and its outputs in `need`) need."""
        return self._scan_needs(eqn, need) if eqn.primitive.name == "scan" else self._while_needs(eqn)

    def loop_or_skip(self, eqn: Any, invals: list[Any], dev: Any, index: int) -> tuple[list[Any] | None, int]:
        """A loop `evaluates` runs, or skipped as before PRG-168 (its launches keep no values) when it cannot be
        run."""
        records = {k: dict(v) for k, v in self.records.items()}
        reasons = {k: dict(v) for k, v in self.reasons.items()}
        reaches = {k: {d: list(r) for d, r in v.items()} for k, v in self.reaches.items()}
        loops = list(self._loops)
        try:
            if eqn.primitive.name == "while":
                outs, end = self._while(eqn, invals, dev, index)
                for v in eqn.outvars:
                    self._why.setdefault(v, "the output of a loop around kernel calls, which semcheck does not follow")
                return [None] * len(eqn.outvars), end
            return self._scan(eqn, invals, dev, index)
        except Exception:  # noqa: BLE001 - no value, never a guess
            self.records, self.reasons, self.reaches, self._loops = records, reasons, reaches, loops
            return None, index + self._kernels_in(eqn)

    def _scan(self, eqn: Any, invals: list[Any], dev: Any, index: int) -> tuple[list[Any], int]:
        """PRG-168: a `scan` (a `fori_loop` with static bounds) around kernel calls runs its body once per
        iteration, the carry computed as far as the calls' operands need it. A launch in the body is one
        equation reached once per iteration: it keeps its values only where every iteration gives the same
        (the program of calls keys values by launch equation, PRG-167); else it has none, with the reason."""
        p = eqn.params
        body = p["jaxpr"]
        inner = getattr(body, "jaxpr", body)
        nc, nk = scan_split(eqn)
        consts, carry, xs = invals[:nc], list(invals[nc:nc + nk]), invals[nc + nk:]
        carry_need = self._carry_need(eqn)
        out_needed = carry_need + (False,) * (len(inner.outvars) - nk)
        start, end = index, index + self._kernels_in(eqn)
        lane = dev.lane if dev else 0
        self._pass_reasons(eqn.invars, inner.invars[len(inner.invars) - len(invals):])
        first: dict[int, list[Any]] = {}
        differs: set[int] = set()
        steps = range(p["length"] - 1, -1, -1) if p["reverse"] else range(p["length"])
        loc = eqn_loc(eqn, NO_LOC)
        for i in steps:
            x_i = [None if x is None else x[i] for x in xs]
            self._loops.append((loc, i, p["length"]))  # PRG-183: the reaches in this iteration are its own
            try:
                outs, end = self.run(inner, [*(self._value(c) for c in getattr(body, "consts", ())), *consts,
                                             *carry, *x_i], dev, start, out_needed)
            finally:
                self._loops.pop()
            carry = list(outs[:nk])
            self.compare_reaches(range(start, end), lane, first, differs)
        self.mark_varied(differs, lane, loc)
        for v in eqn.outvars:
            self._why.setdefault(v, "the output of a loop around kernel calls, which semcheck does not follow")
        return [*carry, *(None,) * (len(eqn.outvars) - nk)], end

    def compare_reaches(self, launches: range, lane: int, first: dict[int, list[Any]], differs: set[int]) -> None:
        """After one iteration of a loop: the launches whose values differ from their first iteration's."""
        for k in launches:
            got = self.records.get(k, {}).get(lane)
            if got is None:
                continue
            got = self._tracked(k, got)
            if k not in first:
                first[k] = got
            elif not _same_list(first[k], got):
                differs.add(k)

    def mark_varied(self, differs: set[int], lane: int, loc: Any) -> None:
        """PRG-168: a launch the loop's iterations give different values has none as one launch (PRG-183 may
        still give each reach its own)."""
        self._varied |= differs
        for k in differs:  # never the last iteration's values for every iteration
            self.records[k][lane] = [None] * len(self.records[k][lane])
            self.reasons.setdefault(k, {})[lane] = [_LOOP_DIFFERS.format(at=f" at {loc}" if loc.line else "")] * len(
                self.records[k][lane])

    def _tracked(self, k: int, values: list[Any]) -> list[Any]:
        """A launch's recorded values where the front end reads them (dynamic grid bounds, scalar operands)."""
        call = self.calls[k]
        nb = len(call.dynamic_grid_dims)
        return [v if i < nb or (i - nb < len(call.operands) and self._tracks(call.operands[i - nb])) else None
                for i, v in enumerate(values)]

    def _scan_needs(self, eqn: Any, need: set[Any]) -> list[Any]:
        """The operands of a scan around kernel calls that the calls' operands, and the scan's outputs in `need`,
        depend on (the backward slice of `concrete_inputs`, through the loop)."""
        inner = getattr(eqn.params["jaxpr"], "jaxpr", eqn.params["jaxpr"])
        nk = scan_split(eqn)[1]
        carry = tuple(a or (v in need) for a, v in zip(self._carry_need(eqn), eqn.outvars))
        _, sub_in = self._need(inner, carry + (False,) * (len(inner.outvars) - nk))
        return [v for v, n in zip(eqn.invars, sub_in[len(inner.constvars):]) if n]

    def _carry_need(self, eqn: Any) -> tuple[bool, ...]:
        """Which carries of a scan the kernels' operands in its body depend on, through any iteration (a fixpoint)."""
        p = eqn.params
        inner = getattr(p["jaxpr"], "jaxpr", p["jaxpr"])
        nc, nk = scan_split(eqn)
        rest = (False,) * (len(inner.outvars) - nk)
        need = (False,) * nk
        while True:
            _, sub_in = self._need(inner, need + rest)
            binders = sub_in[len(inner.constvars):]
            grown = tuple(a or b for a, b in zip(need, binders[nc:nc + nk]))
            if grown == need:
                return need
            need = grown
