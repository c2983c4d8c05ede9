"""The programmatic API: `semcheck.check` verifies kernel files as `semcheck verify` does, and
`semcheck.check_program` checks a program of the model's IR. Tests, the bench and tools built on
semcheck use these instead of the checker's modules."""

from __future__ import annotations

import inspect
import os
from collections.abc import Iterable, Sequence
from typing import Any

from semcheck._target import DEFAULT_DEVICES


def resolve(path_or_target: Any) -> tuple[str, str | None]:
    """(absolute kernel file, target selector or None) of a path, `file.py::name` or a target function."""
    if isinstance(path_or_target, (str, os.PathLike)):
        text = os.fspath(path_or_target)
        file, sep, name = text.partition("::")
        return os.path.abspath(file), (name or None) if sep else None
    if callable(path_or_target):
        fn = inspect.unwrap(path_or_target)
        qualname = getattr(fn, "__qualname__", "")
        name = getattr(fn, "__name__", "")
        if not name or qualname != name:
            raise TypeError(
                f"semcheck needs a module-level function (its file is imported afresh in another "
                f"process), not {qualname or fn!r}"
            )
        file = inspect.getsourcefile(fn)
        if file is None:
            raise TypeError(f"cannot find the source file of {name}")
        return os.path.abspath(file), name
    raise TypeError(f"expected a kernel file path, 'file.py::target' or a target function, not {path_or_target!r}")


def check(
    path_or_target: Any,
    devices: int | Iterable[int] = DEFAULT_DEVICES,
    dma_mode: str | Sequence[str] = "all",
    properties: Sequence[str] | None = None,
    *,
    timeout: float = 300.0,
    cores: int | None = None,
    entry: str | None = None,
    jobs: int = 1,
    cache: bool = True,
    fold: bool = True,
) -> Any:
    """Verify a kernel file (a path, `file.py::target`, or a module-level target function) at each
    device count under `dma_mode` (hardware, eager, on_wait, all, or a list of them), as
    `semcheck verify` does.

    Returns the `Findings` (`.results`: one `Result` per target x device count x mode, each with
    its `Verdict`s; `.notes`: timeouts, unsupported constructs, and
    why an answer was not kept in the cache). `cache`: answer from, and
    keep answers in, the result cache `semcheck verify` uses. Raises `semcheck.InputError` when
    the kernel file cannot be verified at all, `ValueError` / `TypeError` for bad arguments.
    """
    from semcheck.checker.run.cli import find_config
    from semcheck.checker.run.planning import precheck_file
    from semcheck.checker.properties.registry import IDS
    from semcheck.checker.run.request import InputError, Request, check_devices, check_timeout, modes_for
    from semcheck.checker.run.runs import run_sweep

    path, target = resolve(path_or_target)
    try:
        counts = check_devices(list(devices) if not isinstance(devices, int) else devices)
        modes = modes_for(dma_mode) if isinstance(dma_mode, str) else tuple(
            m for mode in dma_mode for m in modes_for(mode))
        check_timeout(timeout)
    except InputError as e:
        raise ValueError(e.message) from None
    props = tuple(IDS) if properties is None else tuple(properties)
    unknown = [p for p in props if p not in IDS]
    if unknown or not props:
        raise ValueError(f"properties must be a non-empty subset of {', '.join(IDS)}; "
                         f"got {', '.join(unknown) or 'none'}")
    precheck_file(path)
    reqs = [Request(path, target, entry, n, cores, modes, float(timeout), props, fold=fold) for n in counts]
    result_cache = None
    if cache:
        from semcheck._cache import ResultCache, default_directory

        found = find_config(os.getcwd())
        result_cache = ResultCache(default_directory(found[0] if found else None))
    return run_sweep(reqs, jobs=jobs, cache=result_cache)


def check_program(program: Any, dma_mode: str, properties: Sequence[str] | None = None, *,
                  timeout_ms: int = 30_000, fold: bool = True) -> list[Any]:
    """Every requested property (all by default) of one program of the model's IR
    (`semcheck.model.ops.Program`) under one DMA mode: a `Verdict` each, in order."""
    from semcheck.checker.properties.checking import check_program as check
    from semcheck.checker.properties.registry import IDS

    return check(program, dma_mode, tuple(IDS) if properties is None else tuple(properties),
                 timeout_ms=timeout_ms, fold=fold)
