"""The programmatic API: `semcheck.check` verifies kernel files as `semcheck verify` does, and
`semcheck.check_program` checks a program of the model's IR. Tests, the bench and tools built on
semcheck use these instead of the checker's modules."""

from __future__ import annotations

import inspect
import os
from collections.abc import Iterable, Sequence
from typing import Any


def resolve(path_or_target: Any) -> tuple[str, str | None]:
    """(absolute kernel file, target selector or None) of a path, `file.py::name` or a target function."""
    if isinstance(path_or_target, (str, os.PathLike)):
        text = os.fspath(path_or_target)
        if os.path.isfile(text):  # a file's own name may hold `::`: a path that exists is a path
            return os.path.abspath(text), None
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
    devices: int | Iterable[int] | None = None,
    dma_mode: str | Sequence[str] | None = None,
    properties: Sequence[str] | None = None,
    *,
    timeout: float | None = None,
    cores: int | None = None,
    entry: str | None = None,
    jobs: int | None = None,
    cache: bool = True,
    fold: bool = True,
) -> Any:
    """Verify a kernel file (a path, `file.py::target`, or a module-level target function) at each
    device count under `dma_mode` (hardware, eager, on_wait, all, or a list of them), as
    `semcheck verify` does, with its settings: what is not given comes from `[tool.semcheck]` of
    the nearest pyproject.toml above the working directory (its `pythonpath` too), else from the
    CLI's defaults (each target's own devices, else 2, 4, 8; all modes; 300 s).

    Returns the `Findings` (`.results`: one `Result` per target x device count x mode, each with
    its `Verdict`s; `.notes`: timeouts, unsupported constructs, and
    why an answer was not kept in the cache). `cache`: answer from, and
    keep answers in, the result cache `semcheck verify` uses. Raises `semcheck.InputError` when
    the kernel file cannot be verified at all, `ValueError` / `TypeError` for bad arguments or a
    bad `[tool.semcheck]`.
    """
    from semcheck.checker.properties.registry import IDS
    from semcheck.checker.run.config import load_settings, result_cache, use_pythonpath
    from semcheck.checker.run.exit_codes import UsageError
    from semcheck.checker.run.planning import plan, precheck_file
    from semcheck.checker.run.request import Request
    from semcheck.checker.run.runs import run_sweep

    path, target = resolve(path_or_target)
    try:
        st = load_settings(os.getcwd(), devices=None if devices is None else
                           devices if isinstance(devices, int) else list(devices),
                           dma_mode=dma_mode, timeout=timeout, cores=cores, entry=entry, jobs=jobs)
    except UsageError as e:
        raise ValueError(str(e)) from None
    if properties is None:  # the project's select / ignore, as `semcheck verify` applies them
        props = tuple(p for p in IDS if (not st.select or p in _listed(st.select)) and p not in _listed(st.ignore))
    else:
        props = tuple(properties)
    unknown = [p for p in props if p not in IDS]
    if unknown or not props:
        raise ValueError(f"properties must be a non-empty subset of {', '.join(IDS)}; "
                         f"got {', '.join(unknown) or 'none'}")
    use_pythonpath(st.pythonpath)
    precheck_file(path)
    reqs = [Request(path, sel if not st.entry else target, st.entry, n, st.cores, st.modes, st.timeout, props,
                    fold=fold, examples=st.examples)
            for sel, counts in plan(path, target or st.entry, st.devices, st.default_devices) for n in counts]
    return run_sweep(reqs, jobs=st.jobs, cache=result_cache(st) if cache else None)


def _listed(values: Sequence[str] | None) -> set[str]:
    """`["a,b", "c"]` (select / ignore as written) -> {a, b, c}."""
    return {p.strip() for v in values or () for p in v.split(",") if p.strip()}


def check_program(program: Any, dma_mode: str, properties: Sequence[str] | None = None, *,
                  timeout_ms: int = 30_000, fold: bool = True) -> list[Any]:
    """Every requested property (all by default) of one program of the model's IR
    (`semcheck.model.ops.Program`) under one DMA mode: a `Verdict` each, in order."""
    from semcheck.checker.properties.checking import check_program as check
    from semcheck.checker.properties.registry import IDS

    return check(program, dma_mode, tuple(IDS) if properties is None else tuple(properties),
                 timeout_ms=timeout_ms, fold=fold)
