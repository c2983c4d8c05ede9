"""ACC-88: a kernel operation jax's TPU (Mosaic) lowering refuses, wherever it sits in the kernel.

jax lowers a kernel for a TPU whole: every equation of its jaxpr and of the jaxprs its equations carry (a `cond`'s
branches, a loop's body), taken or not. `_top_k_lowering_rule` of `pallas/mosaic/lowering.py` raises
`NotImplementedError: is_stable=True is not supported in Pallas top_k` for a `top_k` with `is_stable=True`, which is
`lax.top_k`'s default; only `is_stable=False` is lowered (to `_top_k_impl`'s iterated argmax). So no TPU runs such a
kernel, and nothing semcheck derives from that iterated argmax (ACC-64, ACC-75) or from an exact top-k (ACC-25)
describes a TPU's run.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from semcheck.checker.frontend.source_names import eqn_loc
from semcheck.checker.frontend.trace import sub_jaxprs
from semcheck.model.ops import Loc

STABLE_TOP_K = "is_stable=True is not supported in Pallas top_k. For efficiency, only is_stable=False is supported"


def stable_top_k(jaxpr: Any, parent: Loc) -> Loc | None:
    """The line of the first `top_k` with `is_stable=True` in `jaxpr` or a jaxpr it carries, or None."""
    return next(_stable_top_ks(jaxpr, parent), None)


def _stable_top_ks(jaxpr: Any, parent: Loc) -> Iterator[Loc]:
    for eqn in getattr(jaxpr, "jaxpr", jaxpr).eqns:
        loc = eqn_loc(eqn, parent)
        if eqn.primitive.name == "top_k" and eqn.params.get("is_stable", False):
            yield loc
        for sub in sub_jaxprs(eqn.params):
            yield from _stable_top_ks(sub, loc)


__all__ = ["STABLE_TOP_K", "stable_top_k"]
