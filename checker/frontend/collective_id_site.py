"""Where a kernel's `collective_id` is written: the line a user changes to fix an id collision.

jax keeps no source position for a pallas_call's compiler params: the call's equation remembers
where the kernel was called (`call(x)`), not where `CompilerParams(collective_id=...)` was built,
and under `shard_map(call, ...)` not even that (jax itself calls the kernel). The site is found in
the source instead: the `collective_id=` keyword arguments in the user's files along the call's
traceback, searched from the innermost frame's enclosing function outwards, then around the
kernel function's definition (its function, then its module).
A site is kept only when it is the one candidate at the first scope that has any and, when the
keyword's value is a literal, it is the traced id; otherwise there is none (the reports then place
the finding as before), never a guess.
"""

from __future__ import annotations

import ast
import functools
import os
from typing import Any

from semcheck.model.ops import Loc


def collective_id(compiler_params: Any) -> int | None:
    """The id the interpreter gives the kernel's barrier semaphore, as jax reads it from the params."""
    cid = getattr(compiler_params, "collective_id", None)
    return None if cid is None else int(cid)


def collective_id_loc(eqn: Any, compiler_params: Any, kernel: Loc) -> Loc | None:
    """The `collective_id=` argument's line of the kernel launched by `eqn`, or None when not found alone."""
    cid = collective_id(compiler_params)
    if cid is None:
        return None
    from semcheck.checker.frontend.targets import is_user_file

    from jax._src import source_info_util  # lazy: the CLI provisions devices before jax is imported

    tb = getattr(getattr(eqn, "source_info", None), "traceback", None)
    frames = [(f.file_name, f.start_line) for f in source_info_util.user_frames(tb)]  # innermost first
    for name, at in [*frames, (kernel.file, kernel.line)]:
        file = os.path.abspath(name)
        if not at or not is_user_file(file):
            continue
        for scope in _scopes(file, at):
            found = [(line, value) for line, value in _keywords(file) if scope[0] <= line <= scope[1]]
            if not found:
                continue
            lines = {line for line, value in found if value is None or value == cid}
            if len(lines) != 1:
                return None  # two calls' ids in one scope, or a literal that is not this kernel's id
            (line,) = lines
            return Loc(file, line, _text(file, line))
    return None


@functools.lru_cache(maxsize=64)
def _tree(file: str) -> ast.Module | None:
    try:
        with open(file, encoding="utf-8") as f:
            return ast.parse(f.read(), filename=file)
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError, RecursionError, MemoryError):
        return None


@functools.lru_cache(maxsize=64)
def _keywords(file: str) -> tuple[tuple[int, int | None], ...]:
    """(line, literal value or None) of every `collective_id=` keyword argument and `"collective_id"` dict key."""
    tree = _tree(file)
    if tree is None:
        return ()
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "collective_id":
            out.append((node.lineno, _literal(node.value)))
        elif isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values):
                if isinstance(k, ast.Constant) and k.value == "collective_id":
                    out.append((v.lineno, _literal(v)))
    return tuple(out)


def _literal(node: ast.expr) -> int | None:
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _scopes(file: str, line: int) -> list[tuple[int, int]]:
    """The line spans of the functions enclosing `line`, innermost first, then the whole module."""
    tree = _tree(file)
    if tree is None:
        return []
    spans = [(n.lineno, n.end_lineno or n.lineno) for n in ast.walk(tree)
             if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
             and n.lineno <= line <= (n.end_lineno or n.lineno)]
    spans.sort(key=lambda s: s[1] - s[0])
    return [*spans, (1, 1 << 30)]


def _text(file: str, line: int) -> str:
    import linecache

    return linecache.getline(file, line).strip()
