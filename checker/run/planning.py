"""Planning a run: which kernel files (discovery under directories), which targets and device
counts, and the checks of a kernel file that need no child process. Everything here reads
source text; nothing imports a kernel (jax must not start in this process)."""

from __future__ import annotations

import ast
import dataclasses
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from semcheck.checker.run.request import DEFAULT_DEVICES, InputError, Request
from semcheck.model.ops import Loc

if TYPE_CHECKING:
    from semcheck.checker.run.config import Settings

DEFAULT_EXCLUDE = (".*", "__pycache__", "node_modules", "site-packages", "build", "dist", "venv")
"""Directory names never searched for kernels (hidden ones, virtual environments, build output),
as ruff and mypy skip them; a path given explicitly is searched even so."""


@dataclasses.dataclass(frozen=True)
class Exclude:
    """A glob (`examples/buggy`, `*_test.py`, `**/experimental/*`) relative to the directory `base`.

    It matches a path under `base` when it matches the path relative to
    `base`, any of its leading directories, or its last component.
    """

    pattern: str
    base: str

    def matches(self, path: str) -> bool:
        import fnmatch

        pat = self.pattern.replace(os.sep, "/").rstrip("/")
        if pat.startswith("./"):
            pat = pat[2:]
        rel = os.path.relpath(os.path.abspath(path), os.path.abspath(self.base)).replace(os.sep, "/")
        if rel.startswith("../"):
            return fnmatch.fnmatch(os.path.basename(path), pat) if "/" not in pat else False
        parts = rel.split("/")
        prefixes = ["/".join(parts[: k + 1]) for k in range(len(parts))]
        return any(fnmatch.fnmatch(p, pat) for p in prefixes) or fnmatch.fnmatch(parts[-1], pat)


def defines_kernel(path: str, entry: str | None = None) -> bool:
    """Whether a Python file names something to verify, read from its source (never imported).

    A module-level `@semcheck.target` function, a module-level `build`
    (defined, assigned or imported), or with `entry` a module-level name
    `entry`.
    """
    try:
        with open(path, "rb") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        # a kernel file that does not parse is reported (syntax-error), a non-Python file is not
        return path.endswith(".py") and os.path.isfile(path) and _mentions_build(path, entry)
    wanted = entry or "build"
    for node in tree.body:
        names: list[str] = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if entry is None and _declared_devices_of(node) is not None:
                return True
            names = [node.name]
        elif isinstance(node, ast.Assign):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names = [node.target.id]
        elif isinstance(node, ast.ImportFrom):
            names = [a.asname or a.name for a in node.names]
        if wanted in names:
            return True
    return False


def _mentions_build(path: str, entry: str | None) -> bool:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return False
    return f"def {entry or 'build'}(" in text or (entry is None and "semcheck.target" in text)


def discover(
    paths: Sequence[str],
    *,
    exclude: Sequence[Exclude] = (),
    entry: str | None = None,
    only_kernels: bool = False,
) -> tuple[list[str], list[str]]:
    """The kernel files under `paths` (files and directories), and the Python files skipped.

    A directory is searched recursively, in sorted order, for `.py` files
    that define a kernel (`defines_kernel`), leaving out `DEFAULT_EXCLUDE`
    directories and whatever an `exclude` pattern matches. A file given
    explicitly is verified as it is (an error if it names no kernel) unless
    `only_kernels` (pre-commit hands over every changed file): then it is
    filtered like a discovered one. Missing paths raise `InputError`.
    Duplicates are dropped; paths are returned as given (joined under their
    directory).
    """
    import fnmatch

    files: list[str] = []
    skipped: list[str] = []
    seen: set[str] = set()

    def add(p: str, explicit: bool) -> None:
        key = os.path.realpath(p)
        if key in seen:
            return
        seen.add(key)
        if (not explicit or only_kernels) and (
                any(e.matches(p) for e in exclude) or not p.endswith(".py") or not defines_kernel(p, entry)):
            skipped.append(p)
            return
        files.append(p)

    for given in paths:
        if not os.path.exists(given):
            raise InputError("file-missing", f"no such kernel file: {given}")
        if os.path.isfile(given):
            add(given, explicit=True)
            continue
        if any(e.matches(given) for e in exclude):
            continue
        for root, dirs, names in os.walk(given):
            dirs[:] = sorted(d for d in dirs
                             if not any(fnmatch.fnmatch(d, pat) for pat in DEFAULT_EXCLUDE)
                             and not any(e.matches(os.path.join(root, d)) for e in exclude))
            for name in sorted(names):
                if name.endswith(".py"):
                    add(os.path.normpath(os.path.join(root, name)), explicit=False)
    return files, skipped



def configured_kernels(st: Settings) -> dict[str, str]:
    """The kernel files under the settings' `paths` (real path -> path), discovered as `semcheck verify`
    discovers them: what `pytest --semcheck` collects with no test module (REP-6). A path that does not
    exist adds nothing here; it is `semcheck verify`'s error."""
    present = [p for p in st.paths if os.path.exists(p)]
    files, _ = discover(present, exclude=st.exclude, entry=st.entry) if present else ([], [])
    return {os.path.realpath(f): os.path.abspath(f) for f in files}


def precheck_file(path: str) -> None:
    """Problems that need no child process: a missing, unreadable or unparsable kernel file."""
    if not os.path.exists(path):
        raise InputError("file-missing", f"no such kernel file: {path}")
    if not os.path.isfile(path):
        raise InputError("file-missing", f"not a file: {path}")
    try:
        with open(path, "rb") as f:
            source = f.read()
    except OSError as e:
        raise InputError("file-unreadable", f"cannot read {path}: {e.strerror or e}") from None
    try:
        compile(source, path, "exec", dont_inherit=True)
    except SyntaxError as e:
        text = (e.text or "").strip()
        raise InputError("syntax-error", f"syntax error in kernel file {path}:{e.lineno}: {e.msg}",
                         Loc(path, e.lineno or 0, text)) from None
    except ValueError as e:  # NUL bytes
        raise InputError("syntax-error", f"kernel file {path} is not Python source: {e}") from None


def plan(path: str, target: str | None, devices: Sequence[int] | None,
         default: Sequence[int] = DEFAULT_DEVICES) -> list[tuple[str | None, list[int]]]:
    """Which (target selector, device counts) to verify.

    Explicit `devices` apply to everything selected. Otherwise each
    `@semcheck.target(devices=...)` brings its own counts, read from the
    source without importing it (jax must not start in this process);
    targets whose counts differ are verified separately. `default` (the
    project's `[tool.semcheck] devices`, else 2, 4, 8) is for targets that
    declare none.
    """
    if devices is not None:
        return [(target, list(devices))]
    declared = _declared_devices(path, default)
    if target is not None:
        return [(target, declared.get(target, list(default)))]
    if not declared or len({tuple(v) for v in declared.values()}) == 1:
        return [(None, next(iter(declared.values())) if declared else list(default))]
    return [(name, counts) for name, counts in declared.items()]


def file_requests(path: str, target: str | None, st: Settings, checked: tuple[str, ...], *,
                  fold: bool = True) -> list[Request]:
    """The requests of one kernel file, per target group (`plan`) and device count, as every way in makes
    them from its settings (REP-2). With `st.entry`, only that function is verified: its own
    `@semcheck.target` devices (if any) apply, not those of the file's other targets."""
    return [Request(os.path.abspath(path), target if st.entry else sel, st.entry, n, st.cores, st.modes,
                    st.timeout, properties=checked, fold=fold, examples=st.examples)
            for sel, counts in plan(path, target or st.entry, st.devices, st.default_devices) for n in counts]


def _declared_devices(path: str, default: Sequence[int] = DEFAULT_DEVICES) -> dict[str, list[int]]:
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return {}
    out: dict[str, list[int]] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            counts = _declared_devices_of(node, default)
            if counts is not None:
                out[node.name] = counts
    return out


def _declared_devices_of(node: ast.FunctionDef | ast.AsyncFunctionDef,
                         default: Sequence[int] = DEFAULT_DEVICES) -> list[int] | None:
    """The device counts a `@semcheck.target` decorator on `node` declares (`default` if none); None if undecorated."""
    for dec in node.decorator_list:
        call = dec if isinstance(dec, ast.Call) else None
        func = call.func if call is not None else dec
        if (getattr(func, "attr", None) or getattr(func, "id", None)) != "target":
            continue
        counts = list(default)
        for kw in call.keywords if call is not None else ():
            if kw.arg == "devices":
                try:
                    counts = sorted({int(x) for x in ast.literal_eval(kw.value)})
                except (ValueError, TypeError, SyntaxError):
                    pass
        return counts
    return None


def guess_targets(req: Request) -> list[str]:
    """Target names of a file that timed out while being imported, read from its source."""
    if req.target or req.entry:
        return [req.target or req.entry]
    declared = list(_declared_devices(req.path))
    if declared:
        return declared
    try:
        with open(req.path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        if any(isinstance(n, ast.FunctionDef) and n.name == "build" for n in tree.body):
            return ["build"]
    except (OSError, SyntaxError, ValueError):
        pass
    return ["*"]
