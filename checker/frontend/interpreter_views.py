"""Ref views jax's TPU interpreter cannot load or store through (ACC-6, ERR-9, divergence D22).

The interpreter's load and store callbacks turn the access's transforms into
an index range by reading each transform's `indices`, after converting every
pytree leaf of the transforms to `int`. Only an indexer has `indices`: a
reshape, bitcast, transpose or memory-space view (transforms whose fields are
all static, so the conversion passes) makes the callback raise
`AttributeError: '<class>' object has no attribute 'indices'` when a core
reaches the access. Mosaic lowers these views on a TPU, where the access
reads or writes the elements the view names (`regions`).

`blind_transform` finds such a transform in a load's or store's view;
`view_error` is the failure (`model.errors.InterpreterView`) the lowered
operation carries: the model raises it where a core runs the operation.
A transform with data leaves is not predicted here (which error comes first
depends on the leaves); it keeps the treatment `regions` gives it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from semcheck.model.errors import InterpreterView
from semcheck.model.ops import Loc


def blind_transform(transforms: Sequence[Any]) -> Any | None:
    """The first transform of `transforms` the interpreter's load/store path raises on, or None."""
    import jax  # lazy: see trace's docstring
    from jax._src.state.indexing import NDIndexer

    for t in transforms:
        if t is None or isinstance(t, NDIndexer) or hasattr(t, "indices"):
            continue
        if not jax.tree.leaves(t):
            return t
    return None


def view_error(loc: Loc, transform: Any, access: str, side: str = "") -> InterpreterView:
    """ERR-9: what the interpreter raises at the `access` ("load", "store" or "copy") at `loc` made
    through `transform`; the lowered op carries it (`Access.view_error`, `DmaStart.view_error`). A copy's
    `side` ("source" or "destination") says which half raises when an on_wait waiter runs it (ACC-11)."""
    return InterpreterView(type(transform).__name__, access, f"{loc.file}:{loc.line}" if loc.line else "",
                           side=side)


__all__ = ["blind_transform", "view_error"]
