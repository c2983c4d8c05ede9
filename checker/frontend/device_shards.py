"""One device of a shard_map's manual axes and its block of a global value, as the concrete-input
evaluation runs a program device by device (ACC-8)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np


@dataclasses.dataclass(frozen=True)
class Device:
    """One device of a shard_map's manual axes: its lane and coordinates."""

    lane: int
    coords: dict[str, int]


def names_axis(params: dict[str, Any], axes: dict[str, int]) -> bool:
    """Whether an equation's parameters name one of `axes` (a collective over them)."""
    for key in ("axis_name", "axes", "axis_names"):
        v = params.get(key)
        vals = v if isinstance(v, (tuple, list, set, frozenset)) else (v,)
        if any(isinstance(a, str) and a in axes for a in vals):
            return True
    return False


def shard(x: Any, spec: Any, dev: Device, sizes: dict[str, int], manual: set[str]) -> Any:
    """Device `dev`'s block of the global value `x` under the shard_map in_spec `spec`."""
    if x is None:
        return None
    arr = np.asarray(x)
    if spec is None:
        return arr
    key = []
    for d, entry in enumerate(tuple(spec)):
        names = () if entry is None else (entry if isinstance(entry, tuple) else (entry,))
        names = tuple(n for n in names if n in manual)
        if not names:
            key.append(slice(None))
            continue
        count = math.prod(sizes[n] for n in names)
        pos = 0
        for n in names:
            pos = pos * sizes[n] + dev.coords[n]
        if d >= arr.ndim or arr.shape[d] % count:
            return None
        block = arr.shape[d] // count
        key.append(slice(pos * block, (pos + 1) * block))
    return arr[tuple(key)]
