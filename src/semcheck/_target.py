"""The `@semcheck.target` decorator that marks verification targets in kernel files."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar, overload

F = TypeVar("F", bound=Callable[..., Any])

TARGET_ATTR = "__semcheck_target__"
DEFAULT_DEVICES = (2, 4, 8)
"""Device counts verified when neither the command line, the project nor the target names any."""


@overload
def target(fn: F, /) -> F: ...


@overload
def target(
    fn: None = None,
    /,
    *,
    devices: Sequence[int] | None = None,
    cores: int | None = None,
    name: str | None = None,
    inputs: Any = None,
) -> Callable[[F], F]: ...


def target(
    fn: F | None = None,
    /,
    *,
    devices: Sequence[int] | None = None,
    cores: int | None = None,
    name: str | None = None,
    inputs: Any = None,
) -> F | Callable[[F], F]:
    """Mark `fn(num_devices) -> (jitted_fn, example_args)` as a verification target.

    Usable bare (`@semcheck.target`) or with options
    (`@semcheck.target(devices=[2, 4])`). The function is returned unchanged, and so is its type
    (REP-4).
    Without `devices`, the project's `[tool.semcheck] devices` apply, else `DEFAULT_DEVICES`.

    `inputs`, a hypothesis strategy, makes the target's inputs generated:
    the function then takes `(num_devices, value)`, one value the strategy
    drew (a list of lengths, a dict of tables, ...), and builds the kernel
    for it. semcheck verifies the kernel for `--examples N` drawn values,
    stops at the first violation and shrinks it to a minimal value with
    hypothesis (README, "Generated inputs").
    """
    if inputs is not None:
        try:
            from hypothesis.strategies import SearchStrategy
        except ImportError as e:  # pragma: no cover - a strategy object implies hypothesis is installed
            raise TypeError("@semcheck.target(inputs=...) needs hypothesis installed") from e
        if not isinstance(inputs, SearchStrategy):
            raise TypeError(f"@semcheck.target(inputs=...) takes a hypothesis strategy, not "
                            f"{type(inputs).__name__}")

    def mark(f: F) -> F:
        marker: dict[str, Any] = {"devices": None if devices is None else tuple(int(d) for d in devices),
                                  "cores": cores,
                                  "name": name or f.__name__}
        if inputs is not None:
            marker["inputs"] = inputs
        setattr(f, TARGET_ATTR, marker)
        return f

    return mark(fn) if fn is not None else mark
