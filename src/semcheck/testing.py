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
them). The kernel files under `[tool.semcheck] paths` are collected too,
with no test module: `semcheck[ring.py-devices=2]` (with no path arguments
also where pytest does not look, e.g. `src/`; given paths, those under
them). Settings come from `[tool.semcheck]` (its `pythonpath`, `select`
and `ignore` too) and the defaults, loaded once as for `semcheck verify`. Without `--semcheck` the plugin adds
nothing. Options:

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
from typing import TYPE_CHECKING, Any

from semcheck._target import TARGET_ATTR

if TYPE_CHECKING:
    from semcheck._api import PathOrTarget
    from semcheck.checker.run.config import DmaModeOption, Settings


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
    path_or_target: PathOrTarget,
    devices: int | Iterable[int] | None = None,
    dma_mode: DmaModeOption | Sequence[DmaModeOption] | None = None,
    properties: Sequence[str] | None = None,
    *,
    timeout: float | None = None,
    cores: int | None = None,
    entry: str | None = None,
    jobs: int | None = None,
    cache: bool = True,
) -> tuple[dict[str, Any], str, int]:
    """Verify and return (JSON report, text report, exit code as the CLI would give it).

    Settings not given come from `[tool.semcheck]`, else the CLI's defaults, as for `semcheck.check`.

    `cache`: answer from `semcheck verify`'s result cache (`.semcheck_cache/` beside the
    `pyproject.toml` that configures semcheck, else in the working directory) and keep new
    answers there; a cached answer is one whose observed dependencies are all unchanged.
    Raises `VerificationError` when the kernel file cannot be verified at all, and
    `semcheck.InputError` (code "usage") for bad arguments or a bad `[tool.semcheck]`.
    """
    from semcheck._api import settings

    st = settings(os.getcwd(), devices, dma_mode, timeout=timeout, cores=cores, entry=entry, jobs=jobs)
    return _verify_with(st, path_or_target, properties, cache=cache)


def _verify_with(st: Settings, path_or_target: PathOrTarget, properties: Sequence[str] | None = None, *,
                 cache: bool = True) -> tuple[dict[str, Any], str, int]:
    """`verify_target` with settings already loaded (the plugin's, REP-2)."""
    from semcheck._api import check_with, file_reports_of, resolve
    from semcheck.checker.report import render as report
    from semcheck.checker.run.exit_codes import exit_code
    from semcheck.checker.run.request import InputError

    path, target = resolve(path_or_target)
    label = path + (f"::{target}" if target else "")
    try:
        outcome = check_with(st, path_or_target, properties, cache=cache)
    except InputError as e:
        if e.code == "usage":  # the caller's arguments or settings: not the kernel's failure
            raise
        raise VerificationError(f"semcheck could not verify {label}: {e.one_line()}", code=e.code) from None
    files = file_reports_of(outcome, path)
    data = report.to_json_files(path, files)
    buf = io.StringIO()
    from semcheck.checker.report.console import LineConsole

    console = LineConsole(file=buf, width=120, no_color=True, highlight=False, soft_wrap=True)
    for note in outcome.notes:
        console.print(f"semcheck: {note.code}: {note.message}", markup=False)
    for name, e in outcome.errors:
        console.print(f"semcheck: {e.one_line()} (target {name})", markup=False)
    for f in files:
        if f.error is not None:
            console.print(f"semcheck: {f.error.one_line()}", markup=False)
        report.render_text(console, f.path, f.results)
    return data, buf.getvalue(), exit_code(outcome.results,
                                           errors=len(outcome.errors) + sum(f.error is not None for f in files))


def assert_verified(
    path_or_target: PathOrTarget,
    devices: int | Iterable[int] | None = None,
    dma_mode: DmaModeOption | Sequence[DmaModeOption] | None = None,
    properties: Sequence[str] | None = None,
    *,
    timeout: float | None = None,
    cores: int | None = None,
    entry: str | None = None,
    jobs: int | None = None,
    cache: bool = True,
) -> dict[str, Any]:
    """Assert that every property of a kernel is proved; return the JSON report.

    `path_or_target` is a kernel file (`"kernels/ring.py"`), one target of it
    (`"kernels/ring.py::ring"`) or a module-level `@semcheck.target`
    function. `devices` are the device counts (default: each target's own,
    else `[tool.semcheck] devices`, else 2, 4, 8, as `semcheck verify`),
    `dma_mode` one of hardware, eager, on_wait or all (default: the project's,
    else all), `properties` a subset of the property ids (all by default).
    Raises `VerificationError` (an `AssertionError`) carrying the text report
    when anything is violated or unknown, or when the kernel cannot be
    verified at all; `semcheck.InputError` for bad arguments. `cache` as in
    `verify_target`.
    """
    data, text, code = verify_target(path_or_target, devices, dma_mode, properties,
                                     timeout=timeout, cores=cores, entry=entry, jobs=jobs, cache=cache)
    _raise_unless_proved(data, text, code)
    return data


def _raise_unless_proved(data: dict[str, Any], text: str, code: int) -> None:
    if code != 0:
        s = data["summary"]
        head = (f"semcheck did not prove {data['file']}: {s['violated']} violated, "
                f"{s['unknown']} unknown, {s['proved']} proved"
                + (f", {s['unrunnable']} unrunnable in interpret mode" if s.get("unrunnable") else ""))
        raise VerificationError(f"{head}\n\n{text}", report=data,
                                code={1: "violated", 4: "unrunnable"}.get(code, "unknown"))


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
            _settings(config)  # a bad [tool.semcheck] is one usage error now, not a failure of every item

    class SemcheckItem(pytest.Item):
        """One kernel target at one device count."""

        def __init__(self, *, spec: str, devices: int, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.spec = spec
            self.devices = devices
            self.add_marker("semcheck")

        def runtest(self) -> None:
            import dataclasses

            # the run's one set of settings (REP-2), at this item's device count
            st = dataclasses.replace(_settings(self.config), devices=[self.devices])
            _raise_unless_proved(*_verify_with(st, self.spec, cache=not self.config.getoption("semcheck_no_cache")))

        def repr_failure(self, excinfo: Any, style: Any = None) -> Any:
            if isinstance(excinfo.value, VerificationError):
                return str(excinfo.value)
            return super().repr_failure(excinfo)

        def reportinfo(self) -> tuple[Any, int | None, str]:
            return self.path, None, f"semcheck {self.spec} at {self.devices} devices"

    class SemcheckFile(pytest.File):
        """A kernel file under `[tool.semcheck] paths`: its targets, each at its device counts."""

        def collect(self) -> Any:
            path = os.path.abspath(str(self.path))
            return _items(self, path, os.path.basename(path), None)

    def _settings(config: Any) -> Any:
        """The run's settings (`checker.run.config.load_settings`, as `semcheck verify` loads them) from
        the nearest pyproject.toml above pytest's root directory, with the --semcheck-* options over
        them; read once. Its `pythonpath` is put on the import path here, for every item."""
        cached = getattr(config, "_semcheck_settings", None)
        if cached is None:
            from semcheck.checker.run.config import load_settings, use_pythonpath
            from semcheck.checker.run.exit_codes import UsageError

            opt = config.getoption
            try:
                cached = load_settings(str(config.rootpath), devices=opt("semcheck_devices") or None,
                                       dma_mode=opt("semcheck_dma_mode"), timeout=opt("semcheck_timeout"))
            except UsageError as e:
                raise pytest.UsageError(str(e)) from None
            use_pythonpath(cached.pythonpath)
            config._semcheck_settings = cached
        return cached

    def _configured_files(config: Any) -> dict[str, str]:
        """The kernel files under `[tool.semcheck] paths` (real path -> path), discovered as `semcheck verify`
        discovers them; each becomes a `SemcheckFile` when pytest visits it."""
        cached = getattr(config, "_semcheck_files", None)
        if cached is None:
            from semcheck.checker.run.planning import configured_kernels

            cached = config._semcheck_files = configured_kernels(_settings(config))
        return cached

    def _counts(config: Any, declared: Sequence[int] | None) -> list[int]:
        st = _settings(config)
        if st.devices is not None:
            return list(st.devices)
        if declared:
            return sorted(set(declared))
        return list(st.default_devices)

    def _items(collector: Any, path: str, shown_file: str, selector: str | None) -> list[Any]:
        """The items of one kernel file: per target group (`planning.plan`) and device count."""
        from semcheck.checker.run.planning import plan

        st = _settings(collector.config)
        groups = plan(path, selector, None, st.default_devices) if st.devices is None else [(selector, None)]
        items = []
        for sel, declared in groups:
            shown = shown_file + (f":{sel}" if sel else "")
            spec = path + (f"::{sel}" if sel else "")
            for n in _counts(collector.config, declared):
                items.append(SemcheckItem.from_parent(collector, name=f"semcheck[{shown}-devices={n}]",
                                                      spec=spec, devices=n))
        return items

    def _items_for_function(collector: Any, name: str, fn: Callable[..., Any]) -> list[Any]:
        marker = getattr(fn, TARGET_ATTR)
        path = os.path.abspath(str(collector.path))
        return [
            SemcheckItem.from_parent(collector, name=f"{name}[devices={n}]", spec=f"{path}::{fn.__name__}",
                                     devices=n)
            for n in _counts(collector.config, marker.get("devices"))
        ]

    def _items_for_list(collector: Any, entries: Any) -> list[Any]:
        if isinstance(entries, (str, os.PathLike)) or not isinstance(entries, Iterable):
            raise pytest.UsageError(f"{collector.path}: semcheck_targets must be a list of kernel paths")
        base = os.path.dirname(os.path.abspath(str(collector.path)))
        items = []
        for entry in entries:
            file, _, selector = os.fspath(entry).partition("::")
            items += _items(collector, os.path.normpath(os.path.join(base, file)), file, selector or None)
        return items

    def pytest_collect_file(file_path: Any, parent: Any) -> Any:
        if not parent.config.getoption("semcheck", default=False) or file_path.suffix != ".py":
            return None
        real = os.path.realpath(str(file_path))
        if real in _configured_files(parent.config):
            _visited(parent.config).add(real)
            return SemcheckFile.from_parent(parent, path=file_path)
        return None

    def _visited(config: Any) -> set[str]:
        """The configured kernel files pytest's own collection reached (each is collected once)."""
        if not hasattr(config, "_semcheck_visited"):
            config._semcheck_visited = set()
        return config._semcheck_visited

    @pytest.hookimpl(tryfirst=True)  # before -k / -m deselect, so they apply to these items too
    def pytest_collection_modifyitems(session: Any, config: Any, items: list[Any]) -> None:
        """With no path arguments (pytest's `testpaths`, or its directory), the kernel files under
        `[tool.semcheck] paths` are collected even where pytest does not look (`testpaths = ["tests"]`,
        kernels under `src/`): the table says what to verify, with no test module (REP-6). Named paths
        keep pytest's meaning: only what lies under them."""
        if not config.getoption("semcheck", default=False) or config.args_source == pytest.Config.ArgsSource.ARGS:
            return
        from pathlib import Path

        files = _configured_files(config)
        for real in sorted(files.keys() - _visited(config)):
            items.extend(session.genitems(SemcheckFile.from_parent(session, path=Path(files[real]))))

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
