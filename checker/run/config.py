"""Settings: what a run of semcheck uses, from arguments over `[tool.semcheck]` over the defaults.

One loader (`load_settings`) for every way in: the CLI (`semcheck verify`), `semcheck.check`,
`semcheck.testing.assert_verified` and the pytest plugin, so they read the same project table, check
it the same way and fall back on the same defaults (specs/deciding/report.md REP-2).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Sequence
from typing import Any, Literal, get_args

from semcheck.checker.run.exit_codes import UsageError
from semcheck.model.ops import DMA_MODES, DmaMode

DmaModeOption = DmaMode | Literal["all"]
"""What `--dma-mode`, `dma-mode` in [tool.semcheck] and the API's `dma_mode` take (specs/deciding/report.md REP-4)."""
Format = Literal["text", "concise", "github", "json", "sarif", "markdown", "html"]
"""The report formats (`--format`); `FORMATS` is read from here so the two never differ."""
FORMATS: tuple[Format, ...] = get_args(Format)

CONFIG_KEYS = ("paths", "devices", "dma-mode", "cores", "timeout", "entry", "exclude", "jobs", "examples",
               "select", "ignore", "pythonpath", "every-n")
DEFAULT_TIMEOUT = 300.0
DEFAULT_JOBS = 1


@dataclasses.dataclass
class Settings:
    """What a run uses: arguments over `[tool.semcheck]` over built-in defaults."""

    paths: list[str]
    devices: list[int] | None  # None: each target's own
    default_devices: tuple[int, ...]  # for targets that declare none
    modes: tuple[DmaMode, ...]
    cores: int | None
    timeout: float
    entry: str | None
    jobs: int
    examples: int  # generated inputs per target with inputs=
    exclude: list  # planning.Exclude
    config: str | None  # the pyproject.toml read, if any
    select: list[str] | None = None  # [tool.semcheck] select / ignore, as --select / --ignore values
    ignore: list[str] | None = None
    pythonpath: list[str] = dataclasses.field(default_factory=list)  # absolute directories, imports first
    every_n: bool = False  # also the parametric check (specs/deciding/parametric.md PAR-8)
    select_from: str = "--select"  # where select / ignore were asked for, as suppressions say it
    ignore_from: str = "--ignore on the command line"


def find_config(start: str) -> tuple[str, dict] | None:
    """The nearest pyproject.toml at or above `start` with a [tool.semcheck] table, and that table."""
    import tomllib

    d = os.path.abspath(start)
    while True:
        f = os.path.join(d, "pyproject.toml")
        if os.path.isfile(f):
            try:
                with open(f, "rb") as fh:
                    data = tomllib.load(fh)
            except (OSError, tomllib.TOMLDecodeError) as e:
                raise UsageError(f"{f}: cannot read it: {e}") from None
            except UnicodeDecodeError as e:  # TOML is UTF-8 (tomllib decodes before it parses; REP-3)
                raise UsageError(f"{f}: cannot read it: not UTF-8 (byte {e.start}: {e.reason})") from None
            table = data.get("tool", {}).get("semcheck")
            if table is not None:
                if not isinstance(table, dict):
                    raise UsageError(f"{f}: [tool.semcheck] must be a table")
                return f, table
        parent = os.path.dirname(d)
        if parent == d:
            return None
        d = parent


def config_values(file: str, table: dict) -> dict:
    """[tool.semcheck] checked and normalised (keys with - or _); a bad entry is a usage error naming it."""
    from semcheck.checker.run.request import InputError

    base = os.path.dirname(file)
    out: dict = {}
    for raw, value in table.items():
        key = raw.replace("_", "-")
        where = f"{os.path.relpath(file)}: [tool.semcheck] {raw}"
        if key not in CONFIG_KEYS:
            raise UsageError(f"{where}: unknown setting (known: {', '.join(CONFIG_KEYS)})")
        try:
            out[key] = _value(key, raw, value, where, base)
        except InputError as e:
            raise UsageError(f"{where}: {e.message}") from None
    return out


def _value(key: str, raw: str, value: Any, where: str, base: str) -> Any:
    """One [tool.semcheck] entry, checked and normalised."""
    from semcheck.checker.run.request import check_devices, check_timeout, parse_devices

    if key == "devices":
        if isinstance(value, str):
            return parse_devices(value)
        if isinstance(value, (int, list)) and not isinstance(value, bool):
            return check_devices(value)
        raise UsageError(f"{where}: expected a count, a list of counts or a string like '2..64'")
    if key == "dma-mode":
        return read_modes(value, where)
    if key == "every-n":
        if not isinstance(value, bool):
            raise UsageError(f"{where}: expected true or false")
        return value
    if key in ("cores", "jobs"):
        if not isinstance(value, int) or isinstance(value, bool):
            raise UsageError(f"{where}: expected an integer")
        return value
    if key == "examples":
        return _examples(value, where)
    if key == "timeout":
        if isinstance(value, bool):
            raise UsageError(f"{where}: expected a number of seconds")
        return check_timeout(value)
    if key == "entry":
        if not isinstance(value, str) or not value:
            raise UsageError(f"{where}: expected a function name")
        return value
    # paths, exclude, pythonpath: relative to the pyproject.toml's directory; select, ignore
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(x, str) and x for x in items):
        raise UsageError(f"{where}: expected a list of "
                         + ("properties" if key in ("select", "ignore") else "paths or patterns"))
    if key in ("select", "ignore"):
        from semcheck.checker.report.suppress import parse_properties

        parse_properties(items, raw)  # an unknown property is a usage error naming it
        return list(items)
    if key == "pythonpath":  # as pytest's pythonpath: directories put first on the import path
        dirs = [os.path.abspath(os.path.join(base, x)) for x in items]
        missing = [d for d in dirs if not os.path.isdir(d)]
        if missing:
            raise UsageError(f"{where}: no such directory {os.path.relpath(missing[0])}")
        return dirs
    if key == "paths":
        return [os.path.relpath(os.path.join(base, x)) for x in items]
    for pattern in items:
        check_pattern(pattern, where)
    return list(items)


def read_modes(value: object, where: str) -> tuple[DmaMode, ...]:
    """The DMA modes a mode, `all` or a list of them names, in `DMA_MODES` order (REP-4): the one reading of
    `--dma-mode`, [tool.semcheck] `dma-mode` and the API's `dma_mode`; anything else is a usage error
    naming `where` and the value, never accepted silently."""
    modes = [value] if isinstance(value, str) else list(value) if isinstance(value, Sequence) else None
    if not modes or not all(isinstance(m, str) for m in modes):
        raise UsageError(f"{where}: expected a mode or a list of modes ({', '.join(DMA_MODES)} or all), "
                         f"not {value!r}")
    bad = [m for m in modes if m != "all" and m not in DMA_MODES]
    if bad:
        raise UsageError(f"{where}: {bad[0]!r} is not one of {', '.join(DMA_MODES)} or all")
    return DMA_MODES if "all" in modes else tuple(m for m in DMA_MODES if m in modes)


def check_pattern(pattern: str, where: str) -> str:
    """An exclude glob as fnmatch reads it: a `[` without its `]` is no class but a literal `[`, so
    the pattern would silently match nothing meant (REP-3)."""
    if _unclosed_bracket(pattern):
        raise UsageError(f"{where}: {pattern!r} is not a valid glob (a [ without its ])")
    return pattern


def _unclosed_bracket(pattern: str) -> bool:
    """Whether a `[` opens a character class that no `]` closes (fnmatch then reads `[` literally)."""
    i = 0
    while i < len(pattern):
        if pattern[i] == "[":
            j = i + 1
            if j < len(pattern) and pattern[j] == "!":
                j += 1
            if j < len(pattern) and pattern[j] == "]":
                j += 1
            if pattern.find("]", j) < 0:
                return True
            i = pattern.find("]", j) + 1
        else:
            i += 1
    return False


def _examples(value: Any, where: str) -> int:
    from semcheck.checker.run.generated_inputs import BadExamples, check_examples

    try:
        return check_examples(value)
    except BadExamples as e:
        raise UsageError(f"{where} {e}") from None


def load_settings(
    start: str,
    *,
    paths: Sequence[str] = (),
    devices: str | int | Sequence[int] | None = None,
    dma_mode: object = None,
    cores: int | None = None,
    timeout: float | None = None,
    entry: str | None = None,
    jobs: int | None = None,
    examples: int | None = None,
    exclude: Sequence[str] = (),
    select: list[str] | None = None,
    ignore: list[str] | None = None,
    every_n: bool | None = None,
    no_config: bool = False,
    dma_mode_name: str = "--dma-mode",
) -> Settings:
    """The settings of a run started in directory `start`: each argument given (not None) overrides
    `[tool.semcheck]` of the nearest pyproject.toml at or above `start`, which overrides the
    built-in defaults; `exclude` patterns add to the configured ones. Raises `UsageError`."""
    from semcheck.checker.run.generated_inputs import DEFAULT_EXAMPLES
    from semcheck.checker.run.planning import Exclude
    from semcheck.checker.run.request import DEFAULT_DEVICES, InputError, check_devices, check_timeout, parse_devices

    found = None if no_config else find_config(start)
    cfg = config_values(*found) if found else {}
    base = os.path.dirname(found[0]) if found else start
    try:
        counts = (None if devices is None else parse_devices(devices) if isinstance(devices, str)
                  else check_devices(devices))
        seconds = check_timeout(timeout) if timeout is not None else cfg.get("timeout", DEFAULT_TIMEOUT)
    except InputError as e:
        raise UsageError(e.message) from None
    modes = cfg.get("dma-mode", DMA_MODES) if dma_mode is None else read_modes(dma_mode, dma_mode_name)
    n_examples = _examples(examples, "--examples") if examples is not None else cfg.get("examples", DEFAULT_EXAMPLES)
    n_jobs = jobs if jobs is not None else cfg.get("jobs", DEFAULT_JOBS)
    if n_jobs < 1:
        raise UsageError("--jobs must be at least 1")
    n_cores = cores if cores is not None else cfg.get("cores")
    if n_cores is not None and not 1 <= n_cores <= 8:
        raise UsageError("--cores must be between 1 and 8")
    patterns = [Exclude(x, base) for x in cfg.get("exclude", ())]
    patterns += [Exclude(check_pattern(x, "--exclude"), start) for x in exclude]
    return Settings(
        paths=list(paths) or list(cfg.get("paths", ())),
        devices=counts,
        default_devices=tuple(cfg.get("devices", DEFAULT_DEVICES)),
        modes=tuple(modes),
        cores=n_cores,
        timeout=seconds,
        entry=entry if entry is not None else cfg.get("entry"),
        jobs=n_jobs,
        examples=n_examples,
        exclude=patterns,
        config=found[0] if found else None,
        select=select if select is not None else cfg.get("select"),
        ignore=ignore if ignore is not None else cfg.get("ignore"),
        **({"select_from": "[tool.semcheck] select"} if select is None else {}),
        **({"ignore_from": f"[tool.semcheck] ignore in {os.path.relpath(found[0])}"}
           if ignore is None and found else {}),
        pythonpath=cfg.get("pythonpath", []),
        every_n=every_n if every_n is not None else cfg.get("every-n", False),
    )


def settings(args) -> Settings:
    """The CLI's settings: its flags over [tool.semcheck] (nearest pyproject.toml above the working
    directory) over the built-in defaults; `--exclude` patterns add to the configured ones."""
    st = load_settings(os.getcwd(), paths=args.paths, devices=args.devices, dma_mode=args.dma_mode,
                       cores=args.cores, timeout=args.timeout, entry=args.entry, jobs=args.jobs,
                       examples=args.examples, exclude=args.exclude or (), select=args.select,
                       ignore=args.ignore, every_n=getattr(args, "every_n", None), no_config=args.no_config)
    if not st.paths:
        raise UsageError("the following arguments are required: PATH (a kernel file or directory; "
                         "or set paths in [tool.semcheck])")
    return st


def flag_suppressions(st: Settings, select: Sequence[str] | None = None, select_from: str = "") -> list[Any]:
    """The properties the run's select / ignore leave unchecked (`report.suppress.Suppression`s), for every
    way in alike (REP-5); `select` (the API's `properties`) replaces the settings' own, said as `select_from`.
    Raises `UsageError` for a property that is none, or when nothing is left to check."""
    from semcheck.checker.properties.registry import IDS
    from semcheck.checker.report import suppress
    from semcheck.checker.run.request import InputError

    try:
        chosen = suppress.parse_properties(st.select if select is None else select, select_from or "--select")
        ignore = suppress.parse_properties(st.ignore, "--ignore")
    except InputError as e:
        raise UsageError(e.message) from None
    flags = suppress.from_flags(chosen, ignore, select_from=select_from if select is not None else st.select_from,
                                ignore_from=st.ignore_from)
    if len(flags) == len(IDS):
        raise UsageError(f"{select_from if select is not None else '--select'} / --ignore leave no property to check")
    return flags


def checked_properties(flags: Sequence[Any], path: str) -> tuple[list[Any], tuple[str, ...]]:
    """(suppressions, properties to check) of one kernel file: `flags` and the file's own
    `# semcheck: ignore[...]` comments (REP-5). Raises `InputError` when they leave nothing to check."""
    from semcheck.checker.properties.registry import IDS
    from semcheck.checker.report import suppress
    from semcheck.checker.run.request import InputError

    sups = suppress.combine(flags, suppress.from_file(path))
    checked = tuple(p for p in IDS if p not in {x.property for x in sups})
    if not checked:
        raise InputError("bad-suppression", "every property is suppressed: nothing to check", file=path)
    return sups, checked


def use_pythonpath(dirs: Sequence[str]) -> None:
    """Put `dirs` first on the import path of this process and of the checking processes it starts
    (they inherit PYTHONPATH), as pytest's `pythonpath` does; a directory already there is not added twice."""
    if not dirs:
        return
    old = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join(list(dirs) + [p for p in old if p not in dirs])
    sys.path[:0] = [d for d in dirs if d not in sys.path]


def result_cache(st: Settings):
    """The result cache (`semcheck._cache`): beside the configuring pyproject.toml, else in the working directory."""
    from semcheck._cache import ResultCache, default_directory

    return ResultCache(default_directory(st.config))
