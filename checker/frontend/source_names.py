"""What a jaxpr's debug info says of the user's source: argument names and source lines.

Below `trace` and `closed_refs`, which both read them, so that neither imports the other for them.
"""

from __future__ import annotations

import linecache
from typing import Any

from semcheck.model.ops import NO_LOC, Loc


def jaxpr_arg_names(jaxpr: Any) -> list[str]:
    info = getattr(jaxpr, "debug_info", None)
    names = getattr(info, "arg_names", None) if info is not None else None
    if not names:
        return []
    return [_clean_name(n) for n in names]


def _clean_name(name: Any) -> str:
    text = str(name or "")
    return "".join(c if (c.isalnum() or c == "_") else "_" for c in text).strip("_")


def eqn_loc(eqn: Any, default: Loc = NO_LOC) -> Loc:
    """The user's source line of a jaxpr equation (jax's own frames skipped)."""
    return frame_loc(getattr(eqn, "source_info", None), default)


def frame_loc(source_info: Any, default: Loc = NO_LOC) -> Loc:
    from jax._src import source_info_util  # lazy: see trace's module docstring

    tb = getattr(source_info, "traceback", None)
    if tb is None:
        return default
    frame = source_info_util.user_frame(tb)
    if frame is None:
        return default
    return make_loc(frame.file_name, frame.start_line)


_loc_cache: dict[tuple[str, int], Loc] = {}


def make_loc(file: str, line: int) -> Loc:
    key = (file, line)
    loc = _loc_cache.get(key)
    if loc is None:
        loc = Loc(file, int(line), linecache.getline(file, int(line)).strip())
        _loc_cache[key] = loc
    return loc
