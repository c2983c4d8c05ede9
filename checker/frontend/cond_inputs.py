"""PRG-170: the values of a kernel's scalar operands where it is launched inside a `cond` (spec programs.md).

`concrete_inputs`' interpreter (which mixes this class in) evaluates a `cond` around kernel calls on a device
whose branch index it knows: it runs that branch only, as jax does, so the calls there read the values that
branch gives; the calls of the other branches are not reached on that device. A device whose index is not
known skips the cond as before (its calls keep no values, never a guess).
"""

from __future__ import annotations

from typing import Any

import numpy as np


class CondInputs:
    """The cond part of `concrete_inputs._Interpreter` (which provides `run`, `_need`, `_kernels_in`,
    `_kernels_of`, `_pass_reasons`, `_why` and `_value`)."""

    def _cond_or_skip(self, eqn: Any, invals: list[Any], dev: Any, index: int,
                      out_needed: tuple[bool, ...]) -> tuple[list[Any] | None, int]:
        """PRG-170: the taken branch of `eqn` evaluated on this device, or the cond skipped."""
        end = index + self._kernels_in(eqn)
        branches = eqn.params["branches"]
        which = invals[0]
        if which is None or np.size(which) != 1:
            for v in eqn.outvars:
                self._why.setdefault(v, "the output of a cond around kernel calls whose branch semcheck could not "
                                        "tell on this device")
            return None, end
        # lax.switch clamps its index into range before the cond; a cond's own index is in range
        b = min(max(int(np.asarray(which).reshape(())), 0), len(branches) - 1)
        start = index + sum(self._kernels_of(br) for br in branches[:b])
        sub = branches[b]
        inner = getattr(sub, "jaxpr", sub)
        self._pass_reasons(eqn.invars[1:], inner.invars)
        consts = [self._value(c) for c in getattr(sub, "consts", ())]
        outs, _ = self.run(inner, [*consts, *invals[1:]], dev, start, out_needed)
        return outs, end

    def _cond_needs(self, eqn: Any, need: set[Any]) -> list[Any]:
        """The operands of a cond around kernel calls that its branches' calls (and its outputs in `need`) depend
        on: the index, and what any branch needs."""
        out_needed = tuple(v in need for v in eqn.outvars)
        got = [eqn.invars[0]]
        for br in eqn.params["branches"]:
            inner = getattr(br, "jaxpr", br)
            _, sub_in = self._need(inner, out_needed)
            got.extend(v for v, n in zip(eqn.invars[1:], sub_in[len(inner.constvars):]) if n)
        return got


__all__ = ["CondInputs"]
