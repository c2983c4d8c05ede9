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
`InterpreterViews` collects the kernel lines that do one, and gives the
program's interpreter failure (`model.errors.InterpreterView`).
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


class InterpreterViews:
    """The kernel lines whose loads or stores go through a view the interpreter cannot index."""

    def __init__(self) -> None:
        self._seen: dict[Loc, tuple[str, str]] = {}

    def note(self, loc: Loc, transform: Any, write: bool, *, copy: bool = False) -> None:
        if loc not in self._seen or self._seen[loc][1] == "copy":
            self._seen[loc] = (type(transform).__name__, "copy" if copy else "store" if write else "load")

    def failure(self) -> InterpreterView | None:
        """The failure interpreter runs meet (ERR-9), named by the first such load or store lowered
        (every run that reaches it raises), else the first such copy."""
        if not self._seen:
            return None
        loc, (name, access) = next((item for item in self._seen.items() if item[1][1] != "copy"),
                                   next(iter(self._seen.items())))
        where = f"{loc.file}:{loc.line}" if loc.line else ""
        return InterpreterView(name, access, where, len(self._seen))


__all__ = ["InterpreterViews", "blind_transform"]
