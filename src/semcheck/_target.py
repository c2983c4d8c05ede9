"""The `@semcheck.target` decorator that marks verification targets in kernel files."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

TARGET_ATTR = "__semcheck_target__"


def target(
    fn: Callable[..., Any] | None = None,
    *,
    devices: Sequence[int] = (2, 4, 8),
    cores: int | None = None,
    name: str | None = None,
) -> Any:
    """Mark `fn(num_devices) -> (jitted_fn, example_args)` as a verification target.

    Usable bare (`@semcheck.target`) or with options
    (`@semcheck.target(devices=[2, 4])`). The function is returned unchanged.
    """

    def mark(f: Callable[..., Any]) -> Callable[..., Any]:
        setattr(
            f,
            TARGET_ATTR,
            {"devices": tuple(int(d) for d in devices), "cores": cores, "name": name or f.__name__},
        )
        return f

    return mark(fn) if fn is not None else mark
