"""Float values computed before a kernel, per DMA mode (ACC-26, ACC-27, ACC-28).

`concrete_inputs` binds the program around a call on the example arguments. A float
value is followed where every operation of its slice gives the same bits wherever it
runs (`float_exact.rounds_floats`: exact operations). Some values are the same only
where XLA on the CPU computes them, which is where jax's interpreter modes compute
the program around a call: a division whose exact quotient is representable (the
CPU divides correctly rounded, a TPU is not documented to), a tie an argmax or a
top-k breaks (jax's rule: the lowest index first), a subnormal (flushed to zero by
the CPU, as semcheck's bind is). `FloatValues` (a mixin of the evaluator) follows
those in an evaluation made for the interpreter's modes and notes the first; the
evaluation for `hardware` refuses them. `per_mode` keeps one set of values where the
two agree, and hangs the hardware set on the interpreter's where they differ.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from semcheck.checker.frontend.int_overflow import int_overflow
from semcheck.checker.frontend.float_exact import CPU_CHECKED, is_float, rounds_floats
from semcheck.checker.frontend.partial_values import same_value
from semcheck.checker.frontend.trace import eqn_loc
from semcheck.model.ops import NO_LOC


def _at(why: str, eqn: Any, rule: str, outer: Any = NO_LOC) -> str:
    loc = eqn_loc(eqn, outer)
    return f"{why}{f' at {loc}' if loc.line else ''} (specs/deciding/frontend.md {rule})"


class FloatValues:
    """The float rule of the program around a call, for one evaluation (module docstring)."""

    # ACC-27: follow what XLA on the CPU gives (an evaluation for the interpreter's modes)
    on_cpu: bool = False
    # the first value followed only there (its reason and line), "" while none
    cpu_only: str = ""
    # the line of the call (`jit`, ...) being entered, for equations of jax's own code inside it
    float_outer: Any = NO_LOC

    def enter_float_call(self, eqn: Any, enter: Callable[[], Any]) -> Any:
        """`enter()`, the body of call `eqn` evaluated equation by equation, its line standing for theirs."""
        before = self.float_outer
        self.float_outer = eqn_loc(eqn, before)
        try:
            return enter()
        finally:
            self.float_outer = before

    def float_refusal(self, eqn: Any, invals: Sequence[Any], outs: Sequence[Any]) -> str | None:
        """Why an equation's float results are not followed in this evaluation, at its line; None when they are."""
        name = eqn.primitive.name
        if name == "call_hi_primitive":  # jax's higher-level primitives (jnp.searchsorted's) name themselves by class
            name = type(eqn.params.get("_prim")).__name__
        why = rounds_floats(name, invals, outs, eqn.params)
        if why is None:
            over = int_overflow(name, invals)  # ACC-34: an integer value only XLA on the CPU gives alike
            if over is None:
                return None
            if self.on_cpu:
                self.cpu_only = self.cpu_only or _at(over, eqn, "ACC-34", self.float_outer)
                return None
            return _at(f"{over}: the value XLA on the CPU gives, as in jax's interpreter modes", eqn, "ACC-34",
                       self.float_outer)
        if rounds_floats(name, invals, outs, eqn.params, interpreter=True) is None:  # the same only on the CPU
            if self.on_cpu:
                self.cpu_only = self.cpu_only or _at(why, eqn, "ACC-27", self.float_outer)
                return None
            what = "a division whose exact quotient only a correctly rounded division gives" if name in CPU_CHECKED \
                else why
            return _at(f"{what}: the same bits only where XLA on the CPU computes it, as in jax's interpreter modes",
                       eqn, "ACC-27" if name in CPU_CHECKED else "ACC-28", self.float_outer)
        return _at(why, eqn, "ACC-26", self.float_outer)


def float_call(eqn: Any) -> bool:
    """Whether a call equation (`jit`, ...) moves floats: the evaluation then enters its body, so that each of its
    equations meets the float rule, rather than binding it whole."""
    return any(is_float(getattr(getattr(v, "aval", None), "dtype", None)) for v in (*eqn.invars, *eqn.outvars))


def same_values(a: Any, b: Any) -> bool:
    """Whether two `KernelInputs` give every operand and grid bound the same value (or none; PRG-193: the same
    known elements)."""
    return (len(a.values) == len(b.values) and len(a.grid_bounds) == len(b.grid_bounds)
            and all(same_value(x, y) for x, y in zip(a.values, b.values))
            and all(same_value(x, y) for x, y in zip(a.grid_bounds, b.grid_bounds)))


def per_mode(cpu: Sequence[Any], hardware: Sequence[Any] | None) -> list[Any]:
    """ACC-27: per call, the interpreter modes' `KernelInputs` (marked `on_cpu`, ACC-28) with the hardware ones as
    its `hardware` where they differ (`hardware` None: they differ nowhere); the hardware ones alone, unmarked,
    where either carries loop iterations or earlier calls' outputs (PRG-183, PRG-169), which are decided on one
    lowering for every mode."""
    out = []
    for i, c in enumerate(cpu):
        h = c if hardware is None else hardware[i]
        if c.iterations or c.producers or h.iterations or h.producers:
            out.append(h)
        elif same_values(c, h):
            out.append(dataclasses.replace(c, on_cpu=True))
        else:
            out.append(dataclasses.replace(c, hardware=h, on_cpu=True))
    return out


__all__ = ["FloatValues", "float_call", "per_mode", "same_values"]
