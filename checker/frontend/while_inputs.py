"""PRG-186: the values of a kernel's scalar operands where it is launched inside a `while_loop`
(specs/deciding/programs.md).

`concrete_inputs`' interpreter runs a `while_loop` around kernel calls as XLA's `while` runs it: the condition
on the carry, then the body, as long as the condition holds, on each device with that device's values, for at
most MAX_SCAN iterations. A launch in the body is kept, reach by reach, as a `scan`'s (PRG-183); a condition it
cannot compute, or more iterations, skips the loop as before (its launches keep no values).
"""

from __future__ import annotations

from typing import Any

from semcheck.checker.frontend.loop_budget import MAX_SCAN
from semcheck.checker.frontend.program_ir import Trips
from semcheck.checker.frontend.trace import eqn_loc
from semcheck.model.ops import NO_LOC


class _TooLong(Exception):
    """The loop runs more than MAX_SCAN iterations, or its condition is not known (PRG-186)."""


class WhileInputs:
    """The `while_loop` part of `scan_inputs.LoopInputs` (which provides `run`, `records`, `_loops`, `_need`,
    `_kernels_in`, `_value`, `reaches`, `compare_reaches` and `mark_varied`)."""

    def _while(self, eqn: Any, invals: list[Any], dev: Any, index: int) -> tuple[list[Any], int]:
        """PRG-186: the loop run iteration by iteration, its condition evaluated on each iteration's carry."""
        p = eqn.params
        cond, body = p["cond_jaxpr"], p["body_jaxpr"]
        c_in, b_in = getattr(cond, "jaxpr", cond), getattr(body, "jaxpr", body)
        nc, nb = p["cond_nconsts"], p["body_nconsts"]
        c_consts, b_consts, carry = invals[:nc], invals[nc:nc + nb], list(invals[nc + nb:])
        need = self._while_carry_need(eqn)
        start, end = index, index + self._kernels_in(eqn)
        lane = dev.lane if dev else 0
        loc = eqn_loc(eqn, NO_LOC)
        trips = Trips()  # the trip count, told to the reaches' words once known
        first: dict[int, list[Any]] = {}
        differs: set[int] = set()
        for i in range(MAX_SCAN + 1):
            (pred,), _ = self.run(c_in, [*(self._value(c) for c in getattr(cond, "consts", ())), *c_consts, *carry],
                                  dev, start, (True,))
            if pred is None:
                raise _TooLong("the condition is not known")
            if not bool(pred):
                break
            if i == MAX_SCAN:
                raise _TooLong(f"more than {MAX_SCAN} iterations")
            self._loops.append((loc, i, trips))
            try:
                outs, end = self.run(b_in, [*(self._value(c) for c in getattr(body, "consts", ())), *b_consts, *carry],
                                     dev, start, need)
            finally:
                self._loops.pop()
            carry = list(outs)
            self.compare_reaches(range(start, end), lane, first, differs)
        trips.n = i
        self.mark_varied(differs, lane, loc)
        return carry, end

    def _while_carry_need(self, eqn: Any) -> tuple[bool, ...]:
        """The carries the condition and the body's kernels' operands depend on, through any iteration."""
        p = eqn.params
        c_in = getattr(p["cond_jaxpr"], "jaxpr", p["cond_jaxpr"])
        b_in = getattr(p["body_jaxpr"], "jaxpr", p["body_jaxpr"])
        nc, nb = p["cond_nconsts"], p["body_nconsts"]
        _, c_sub = self._need(c_in, (True,))
        need = tuple(c_sub[len(c_in.constvars) + nc:])
        while True:
            _, b_sub = self._need(b_in, need)
            grown = tuple(a or b for a, b in zip(need, b_sub[len(b_in.constvars) + nb:]))
            if grown == need:
                return need
            need = grown

    def _while_needs(self, eqn: Any) -> list[Any]:
        """The operands of a `while_loop` around kernel calls its condition and its calls' operands depend on
        (every carry is computed, so the loop's outputs are too)."""
        p = eqn.params
        c_in = getattr(p["cond_jaxpr"], "jaxpr", p["cond_jaxpr"])
        b_in = getattr(p["body_jaxpr"], "jaxpr", p["body_jaxpr"])
        nc, nb = p["cond_nconsts"], p["body_nconsts"]
        need = self._while_carry_need(eqn)
        _, c_sub = self._need(c_in, (True,))
        _, b_sub = self._need(b_in, need)
        c_sub, b_sub = c_sub[len(c_in.constvars):], b_sub[len(b_in.constvars):]
        uses = [*c_sub[:nc], *b_sub[:nb], *need]
        return [v for v, n in zip(eqn.invars, uses) if n]


__all__ = ["WhileInputs"]
