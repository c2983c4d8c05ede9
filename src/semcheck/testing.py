"""semcheck in a test suite: `assert_verified`, and a pytest plugin.

In a test::

    from semcheck.testing import assert_verified

    def test_ring_kernel():
        assert_verified("kernels/ring.py", devices=(2, 4))

Or let pytest collect kernels itself (`pytest --semcheck`): in any test
module, every module-level function decorated with `@semcheck.target`
becomes one test per device count, and a module-level list

    semcheck_targets = ["../kernels/ring.py", "../kernels/pipeline.py::fast"]

(paths relative to that test module) adds the targets of those files. The
tests are named `ring[devices=2]` and `semcheck[kernels/ring.py-devices=2]`
and carry the marker `semcheck` (`pytest --semcheck -m semcheck` runs only
them). Without `--semcheck` the plugin adds nothing. Options:

    --semcheck                 collect semcheck targets as tests
    --semcheck-devices 2,4     device counts (default, as `semcheck verify`:
                               each target's own `devices=`, else 2,4,8)
    --semcheck-dma-mode MODE   hardware | eager | on_wait | all (default all)
    --semcheck-timeout S       seconds per device count (default 300)

Each device count is verified in its own process (as the CLI does), so the
test process's jax is never touched.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from semcheck._target import DEFAULT_DEVICES as CLI_DEFAULT_DEVICES
from semcheck._target import TARGET_ATTR

DEFAULT_DEVICES = (2, 4)


class VerificationError(AssertionError):
    """A kernel was not proved: something violated or unknown, or it could not be verified at all.

    `report` is the JSON report (specs/report-schema.json), or None when the
    kernel file could not be verified (`code` then says why, e.g.
    "kernel-raised", "no-targets", "crashed").
    """

    def __init__(self, message: str, report: dict[str, Any] | None = None, code: str | None = None):
        super().__init__(message)
        self.report = report
        self.code = code


def verify_target(
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
) -> tuple[dict[str, Any], str, int]:
    """Verify and return (JSON report, text report, exit code as the CLI would give it).

    `cache`: answer from `semcheck verify`'s result cache (`.semcheck_cache/` beside the
    `pyproject.toml` that configures semcheck, else in the working directory) and keep new
    answers there; a cached answer is one whose observed dependencies are all unchanged.
    Raises `VerificationError` when the kernel file cannot be verified at all,
    and `ValueError` / `TypeError` for bad arguments.
    """
    from semcheck._api import check, resolve
    from semcheck.checker.report import render as report
    from semcheck.checker.run.cli import exit_code
    from semcheck.checker.run.request import InputError

    path, target = resolve(path_or_target)
    label = path + (f"::{target}" if target else "")
    try:
        outcome = check(path_or_target, devices, dma_mode, properties, timeout=timeout, cores=cores,
                        entry=entry, jobs=jobs, cache=cache)
    except InputError as e:
        raise VerificationError(f"semcheck could not verify {label}: {e.one_line()}", code=e.code) from None
    data = report.to_json_files(path, [report.FileReport(path, outcome.results, target_errors=outcome.errors)])
    buf = io.StringIO()
    from rich.console import Console

    console = Console(file=buf, width=120, no_color=True, highlight=False, soft_wrap=True)
    for note in outcome.notes:
        console.print(f"semcheck: {note.code}: {note.message}", markup=False)
    for name, e in outcome.errors:
        console.print(f"semcheck: {e.one_line()} (target {name})", markup=False)
    report.render_text(console, path, outcome.results)
    return data, buf.getvalue(), exit_code(outcome.results, errors=len(outcome.errors))


def assert_verified(
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
) -> dict[str, Any]:
    """Assert that every property of a kernel is proved; return the JSON report.

    `path_or_target` is a kernel file (`"kernels/ring.py"`), one target of it
    (`"kernels/ring.py::ring"`) or a module-level `@semcheck.target`
    function. `devices` are the device counts, `dma_mode` one of hardware,
    eager, on_wait or all, `properties` a subset of the property ids (all by
    default). Raises `VerificationError` (an `AssertionError`) carrying the
    text report when anything is violated or unknown, or when the kernel
    cannot be verified at all. `cache` as in `verify_target`.
    """
    data, text, code = verify_target(path_or_target, devices, dma_mode, properties,
                                     timeout=timeout, cores=cores, entry=entry, jobs=jobs, cache=cache)
    if code != 0:
        s = data["summary"]
        head = (f"semcheck did not prove {data['file']}: {s['violated']} violated, "
                f"{s['unknown']} unknown, {s['proved']} proved")
        raise VerificationError(f"{head}\n\n{text}", report=data, code="violated" if code == 1 else "unknown")
    return data


# --- the pytest plugin --------------------------------------------------------------

try:
    import pytest
except ImportError:  # pragma: no cover - the plugin needs pytest, assert_verified does not
    pytest = None  # type: ignore[assignment]


if pytest is not None:

    def pytest_addoption(parser: Any) -> None:
        group = parser.getgroup("semcheck", "semcheck: verify Pallas TPU kernels")
        group.addoption("--semcheck", action="store_true", default=False,
                        help="collect @semcheck.target functions and semcheck_targets lists as tests")
        group.addoption("--semcheck-devices", default=None, metavar="COUNTS",
                        help="device counts, e.g. 2,4 or 2..16 (default: each target's own, else 2,4,8)")
        group.addoption("--semcheck-dma-mode", default=None, choices=["hardware", "eager", "on_wait", "all"],
                        help="DMA semantics to verify under (default: [tool.semcheck] dma-mode, else all)")
        group.addoption("--semcheck-timeout", type=float, default=None, metavar="S",
                        help="seconds per device count (default: [tool.semcheck] timeout, else 300)")
        group.addoption("--semcheck-no-cache", action="store_true", default=False,
                        help="verify afresh: neither read nor write semcheck's result cache")

    def pytest_configure(config: Any) -> None:
        config.addinivalue_line("markers", "semcheck: a kernel verified by semcheck (collected by --semcheck)")
        if config.getoption("semcheck", default=False):
            _project(config)  # a bad [tool.semcheck] is one usage error now, not a failure of every item

    class SemcheckItem(pytest.Item):
        """One kernel target at one device count."""

        def __init__(self, *, spec: str, devices: int, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.spec = spec
            self.devices = devices
            self.add_marker("semcheck")

        def runtest(self) -> None:
            opt = self.config.getoption
            project = _project(self.config)
            modes = opt("semcheck_dma_mode") or project.get("dma-mode", "all")
            assert_verified(self.spec, devices=(self.devices,),
                            dma_mode=modes,
                            timeout=opt("semcheck_timeout") or project.get("timeout", 300.0),
                            cores=project.get("cores"), cache=not opt("semcheck_no_cache"))

        def repr_failure(self, excinfo: Any, style: Any = None) -> Any:
            if isinstance(excinfo.value, VerificationError):
                return str(excinfo.value)
            return super().repr_failure(excinfo)

        def reportinfo(self) -> tuple[Any, int | None, str]:
            return self.path, None, f"semcheck {self.spec} at {self.devices} devices"

    def _project(config: Any) -> dict[str, Any]:
        """[tool.semcheck] of the nearest pyproject.toml above pytest's root directory, read once,
        as `semcheck verify` reads it (`checker.run.cli`)."""
        cached = getattr(config, "_semcheck_project", None)
        if cached is None:
            from semcheck.checker.run.cli import UsageError, _config_values, find_config

            found = find_config(str(config.rootpath))
            try:
                cached = _config_values(*found) if found else {}
            except UsageError as e:
                raise pytest.UsageError(str(e)) from None
            config._semcheck_project = cached
        return cached

    def _counts(config: Any, declared: Sequence[int] | None) -> list[int]:
        from semcheck.checker.run.request import InputError, parse_devices

        text = config.getoption("semcheck_devices")
        if text:
            try:
                return parse_devices(text)
            except InputError as e:
                raise pytest.UsageError(f"--semcheck-devices: {e.message}") from None
        if declared:
            return sorted(set(declared))
        return list(_project(config).get("devices", CLI_DEFAULT_DEVICES))

    def _items_for_function(collector: Any, name: str, fn: Callable[..., Any]) -> list[Any]:
        marker = getattr(fn, TARGET_ATTR)
        path = os.path.abspath(str(collector.path))
        return [
            SemcheckItem.from_parent(collector, name=f"{name}[devices={n}]", spec=f"{path}::{fn.__name__}",
                                     devices=n)
            for n in _counts(collector.config, marker.get("devices"))
        ]

    def _items_for_list(collector: Any, entries: Any) -> list[Any]:
        from semcheck.checker.run.planning import plan

        if isinstance(entries, (str, os.PathLike)) or not isinstance(entries, Iterable):
            raise pytest.UsageError(f"{collector.path}: semcheck_targets must be a list of kernel paths")
        base = os.path.dirname(os.path.abspath(str(collector.path)))
        items = []
        for entry in entries:
            text = os.fspath(entry)
            file, _, selector = text.partition("::")
            path = os.path.normpath(os.path.join(base, file))
            explicit = collector.config.getoption("semcheck_devices")
            default = _project(collector.config).get("devices", CLI_DEFAULT_DEVICES)  # as `semcheck verify`
            groups = plan(path, selector or None, None, default) if not explicit else [(selector or None, None)]
            for sel, declared in groups:
                shown = file + (f":{sel}" if sel else "")
                spec = path + (f"::{sel}" if sel else "")
                for n in _counts(collector.config, declared):
                    items.append(SemcheckItem.from_parent(collector, name=f"semcheck[{shown}-devices={n}]",
                                                          spec=spec, devices=n))
        return items

    @pytest.hookimpl(tryfirst=True)
    def pytest_pycollect_makeitem(collector: Any, name: str, obj: Any) -> Any:
        if not collector.config.getoption("semcheck", default=False) or not isinstance(collector, pytest.Module):
            return None
        if name == "semcheck_targets":
            return _items_for_list(collector, obj)
        marker = getattr(obj, TARGET_ATTR, None) if callable(obj) else None
        if isinstance(marker, dict) and getattr(obj, "__module__", None) == collector.obj.__name__:
            return _items_for_function(collector, name, obj)
        return None


__all__ = ["assert_verified", "verify_target", "VerificationError"]
