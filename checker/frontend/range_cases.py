"""ACC-64: an index whose range is known whatever a TPU's rounding, decided under `hardware` by cases.

An `argmax` or `argmin` of float values semcheck cannot compute under `hardware` (a softmax's, whose last bits
are a TPU's own, ACC-37) still gives, on a TPU, an index along the reduced axis: Mosaic lowers both to
`tpu.reduce_index`, whose result is a position on that axis (and `top_k` to iterated `argmax`); a comparison of
such values is true or false (ACC-65). In the lowering for `hardware` (and only there: `KernelInputs.cases`), each
evaluation of such a primitive is an *occurrence*, numbered in the order the
lowering reaches them; `lower_by_cases` lowers the kernel with the occurrences it has values for
(`RangeCases.values`) and, where that lowering is unsupported and reached an occurrence it has none for,
lowers it again once per value of that occurrence (every lane and element in its range, independently: a
superset of what a TPU computes), within `MAX_CASES` lowerings in all. Everything else is computed from the
chosen values exactly, as from any known value, so what the kernel derives from one pick (a count, a table the
pick is copied into) agrees. The verdicts of the cases are combined by `per_mode_values.split_modes`.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from semcheck.checker.frontend import pick_choices
from semcheck.checker.frontend.errors import Unsupported
from semcheck.checker.frontend.evaluator import SubsetRefused
from semcheck.checker.frontend.values import Bounded, Unknown
from semcheck.model.ops import Loc

# The primitives whose result's range is known whatever their float operands' values: an index (ACC-64), a
# comparison's truth (ACC-65).
INDEX_PRIMS = frozenset({"argmax", "argmin", "top_k"})
COMPARISONS = frozenset({"lt", "le", "gt", "ge", "eq", "ne"})
CASE_PRIMS = INDEX_PRIMS | COMPARISONS

# How many cases (lowerings of the kernel, each decided) one kernel's `hardware` verdicts may take (ACC-64).
MAX_CASES = 64


@dataclasses.dataclass(frozen=True)
class CaseSite:
    """One occurrence: the primitive, its line, its lane array's shape (lanes, *result) and its range
    `[0, size)`."""

    prim: str
    loc: Loc
    shape: tuple[int, ...]
    size: int
    # ACC-75: where a TPU's pick excludes positions, the positions each row may pick (`pick_choices.row_choices`)
    # and, for a `top_k`, the lane-array axis of its picks (`width` of them)
    rows: tuple[pick_choices.Row, ...] | None = None
    axis: int | None = None
    width: int = 1

    def count(self) -> int:
        """How many values the occurrence may take (each lane and element independently, or each row among its
        choices)."""
        return self.size ** math.prod(self.shape) if self.rows is None else pick_choices.count(self.rows, self.width)

    def count_words(self) -> str:
        """The number of values, written out up to a million, else as a power."""
        n = self.count()
        return f"{n:,}" if n <= 10 ** 6 else f"{self.size}^{math.prod(self.shape)}"

    def words(self) -> str:
        lanes, elements = self.shape[0], math.prod(self.shape[1:])
        each = "true or false" if self.prim in COMPARISONS else f"in [0, {self.size})"
        if self.rows is not None:
            each += ", never a position padded with an infinity while a number remains (ACC-75)"
        return (f"the {self.prim} at {self.loc} ({elements} element{'s' * (elements != 1)} on each of {lanes} "
                f"lane{'s' * (lanes != 1)}, each {each})")


@dataclasses.dataclass(eq=False)
class RangeCases:
    """The values of the first occurrences (lane arrays, in order) and, filled in by the lowering, every
    occurrence it reached (by number)."""

    values: tuple[np.ndarray, ...] = ()
    seen: dict[int, CaseSite] = dataclasses.field(default_factory=dict)


class HardwareCases(tuple):
    """ACC-64: `hardware`'s lowerings, one per case: (the case in words, its program) pairs."""

    def replace_programs(self, f: Callable[[Any], Any]) -> HardwareCases:
        return HardwareCases((w, f(p)) for w, p in self)


def case_value(ev: Any, eqn: Any, invals: list[Any], loc: Loc) -> list[Any] | None:
    """The result of `eqn` in a lowering by cases (`KernelInputs.cases`) where its operand is a plain unknown
    float value and its range is known: the case's value of this occurrence, or, past the values the case has,
    an unknown naming it; None where the rule does not apply."""
    cases = getattr(getattr(ev, "_inputs", None), "cases", None)
    prim = eqn.primitive.name
    if cases is None or prim not in CASE_PRIMS:
        return None
    operands = invals[:1] if prim in INDEX_PRIMS else invals
    # a float operand plainly unknown (a mark asks for a lowering that computes it: ACC-41, ACC-57, RUN-22)
    if not all(type(x) is np.ndarray or type(x) in (Unknown, Bounded) for x in operands) or not any(
            type(x) is not np.ndarray for x in operands) or any(
            np.dtype(v.aval.dtype).kind != "f" for v in eqn.invars[:len(operands)]):
        return None
    if getattr(ev, "subset", False):  # another device's occurrence is its own: every device is lowered
        raise SubsetRefused(prim, "a value taken case by case (ACC-64)", loc)
    x = next(x for x in operands if type(x) is not np.ndarray)
    out = eqn.outvars[-1]  # the index (top_k's second result), or the comparison's truth
    axis = int(eqn.params.get("axis", -1)) if prim == "top_k" else int(eqn.params.get("axes", (0,))[0])
    size = 2 if prim in COMPARISONS else int(eqn.invars[0].aval.shape[axis])
    n = ev.range_occurrences = getattr(ev, "range_occurrences", 0) + 1
    width = int(eqn.params.get("k", 1)) if prim == "top_k" else 1
    rows = None if prim in COMPARISONS else pick_choices.row_choices(prim, x, ev.L, axis % len(x_shape(eqn)), width)
    out_axis = (axis % len(x_shape(eqn))) + 1 if prim == "top_k" else None
    site = CaseSite(prim, loc, (ev.L, *out.aval.shape), size, rows, out_axis, width)
    cases.seen[n - 1] = site
    rest = [Unknown(x.why, x.loc) for _ in eqn.outvars[:-1]]  # top_k's values: the TPU's own floats
    if n - 1 < len(cases.values) and cases.values[n - 1].shape == site.shape:
        return [*rest, cases.values[n - 1].astype(out.aval.dtype)]
    rule = "ACC-65" if prim in COMPARISONS else "ACC-64"
    return [*rest, Unknown(f"a {prim} of {x.why}" + (f" at {x.loc}" if x.loc.line else "")
                           + f", a value taken case by case under hardware ({rule})", loc)]


def x_shape(eqn: Any) -> tuple[int, ...]:
    return tuple(eqn.invars[0].aval.shape)


def values_of(site: CaseSite) -> list[np.ndarray]:
    """Every value of `site`, each lane and element independently, or each row among its choices (ACC-75)."""
    if site.rows is not None:
        return [pick_choices.assemble(combo, site.shape, site.axis)
                for combo in itertools.product(*(pick_choices.row_values(r, site.width) for r in site.rows))]
    return [np.asarray(v, dtype=np.int64).reshape(site.shape)
            for v in itertools.product(range(site.size), repeat=math.prod(site.shape))]


def lower_by_cases(lower: Callable[[RangeCases], Any], budget: int = MAX_CASES) -> Any:
    """`lower(cases)`'s program where it needs no occurrence's value; else `HardwareCases`, one program per
    value of the occurrences it needs (depth first), or, past `budget` lowerings or where a case is
    unsupported for another reason, that refusal's words (a str), naming the occurrence and its line."""
    done: list[tuple[str, Any]] = []
    todo: list[tuple[tuple[np.ndarray, ...], tuple[str, ...]]] = [((), ())]
    lowerings = 0
    while todo:
        values, words = todo.pop()
        rec = RangeCases(values)
        lowerings += 1
        try:
            program = lower(rec)
        except Unsupported as e:
            site = rec.seen.get(len(values))
            if site is None:
                return str(e) + (f" (the case {'; '.join(words)}, ACC-64)" if words else "")
            if lowerings + len(todo) + site.count() > budget:
                return (f"{e}; {site.words()} may take {site.count_words()} values, past the {budget} cases semcheck "
                        "decides one by one under hardware (ACC-64)")
            todo.extend((values + (v,), words + (f"{site.prim} at {site.loc} = {v[:, ...].tolist()}",))
                        for v in reversed(values_of(site)))
            continue
        if not values:
            return program
        done.append(("; ".join(words), program))
    return HardwareCases(done)


__all__ = ["CASE_PRIMS", "COMPARISONS", "INDEX_PRIMS", "MAX_CASES", "CaseSite", "HardwareCases", "RangeCases", "case_value", "lower_by_cases",
           "values_of"]
