"""The jaxpr of a target's staged build, traced once per target and device count.

Lowering a target (`api.lower_target`) and following the program of its calls (`programs.py`: PRG-115,
PRG-163) both start from `jax.make_jaxpr` of the staged build (`Target.build_shapes`). Within one check
of one target (`sharing()`, as the verify child checks each target) the second asks for the first's
trace instead of tracing the kernel again: on the expert-parallel MoE example that trace was a tenth of
a device count's time. Outside it every call traces: a caller may change what the builder reads between
two calls (a test patching a module's constant), and a kept trace would then be stale.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from semcheck.checker.frontend.errors import FrontendError

if TYPE_CHECKING:
    from semcheck.checker.frontend.targets import Target

_kept: list[list[tuple[tuple, Any, Any]]] = []  # one list per open `sharing()`: [(key, build, jaxpr or error)]


@contextlib.contextmanager
def sharing() -> Iterator[None]:
    """Within it, a target's staged trace is made once per device count and keyword arguments."""
    _kept.append([])
    try:
        yield
    finally:
        _kept.pop()


def staged_trace(t: Target, devices: int, kwargs: dict[str, Any]) -> tuple[tuple[Any, Any], Any] | None:
    """((fn, args), closed jaxpr) of `t`'s staged build at `devices`; None when the builder needs concrete
    values (`Target.build_shapes`). Raises the `FrontendError` that tracing it raised, every time it is
    asked: the callers then build for real, as they did when each traced on its own."""
    # the builder itself, not its name: `Target.with_input` binds each generated input under one name
    key = (t.builder, t.path, t.name, devices, repr(sorted(kwargs.items())))
    kept = _kept[-1] if _kept else None
    hit = next((e for e in kept if e[0] == key), None) if kept is not None else None
    if hit is None:
        hit = (key, *_trace(t, devices, kwargs))
        if kept is not None:
            kept[:] = [hit]  # one target at a time
    _, built, got = hit
    if built is None:
        return None
    if isinstance(got, FrontendError):
        raise got
    return built, got


def _trace(t: Target, devices: int, kwargs: dict[str, Any]) -> tuple[Any, Any]:
    from semcheck.checker.frontend.trace import make_jaxpr  # lazy: imports jax

    built = t.build_shapes(devices, **kwargs)
    if built is None:
        return None, None
    try:
        return built, make_jaxpr(*built, path=t.path)
    except FrontendError as e:
        return built, e
