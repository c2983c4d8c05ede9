"""jax's int32 scalars as Z3 integers: the reading PAR-4 (specs/deciding/parametric.md) and RUN-18
(specs/deciding/symmetry.md) share. Z3's integers compute what jax's int32 do as long as no operation on the
way wraps, so what is proved includes that; division truncates towards zero, as int32 division does.
The Z3 module is passed in: importing this module needs no solver."""

from __future__ import annotations

from typing import Any

INT32_MAX = 2 ** 31 - 1


def scalar_kind(aval: Any) -> str:
    """A scalar's type as `int32[]` / `bool[]`, weakly typed or not (a literal's `~int32[]`)."""
    return str(aval).lstrip("~")


def trunc_div(z3: Any, x: Any, y: Any) -> Any:
    """jax's integer division (and so `rem`): truncation towards zero, as int32 division does."""
    q = z3.If(y > 0, x / y, -(x / -y))  # Z3's `/` floors for a positive divisor
    return z3.If(z3.Or(x >= 0, x - y * q == 0), q, z3.If(y > 0, q + 1, q - 1))


def within_int32(z3: Any, term: Any, kernel: dict) -> list:
    """Every subterm of `term` that is one of the kernel's int32 operations (`kernel`: their ids) lies in
    int32 (then Z3's integers compute what jax's int32 do); semcheck's own terms are exact."""
    seen, out, todo = set(), [], [term]
    while todo:
        t = todo.pop()
        if t.get_id() in seen:
            continue
        seen.add(t.get_id())
        if kernel.get(t.get_id()) is not None and z3.is_arith(t):
            out.append(z3.And(t >= -INT32_MAX - 1, t <= INT32_MAX))
        todo.extend(t.children())
    return out
