"""The rich Console of the line outputs (the text report, the one-liners and progress on stderr)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.rule import Rule
from rich.text import Text

from semcheck.checker.report.escape import line


class LineConsole(Console):
    """A Console whose every printed line is `escape.line`d (specs/deciding/report.md REP-1): what a kernel
    names (a file, a target, an exception's text) can neither break a line nor start a workflow
    command. Each print of the reports is one line (`soft_wrap`), so guarding each print guards
    each line; `line` keeps lengths, so the styles of a Text stay on their characters."""

    def print(self, *objects: Any, **kwargs: Any) -> None:  # type: ignore[override]
        super().print(*(_guard(o) for o in objects), **kwargs)


def _guard(o: Any) -> Any:
    if isinstance(o, Text):
        t = o.copy()
        t.plain = line(o.plain)
        return t
    if isinstance(o, str):
        return line(o)
    if isinstance(o, Rule) and isinstance(o.title, (Text, str)):  # console.rule(title)
        o.title = _guard(o.title)
    return o
