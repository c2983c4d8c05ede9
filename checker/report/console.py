"""The rich Console of the line outputs (the text report, the one-liners and progress on stderr)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.rule import Rule
from rich.text import Text

from semcheck.checker.report.escape import line

_PLAIN_KWARGS = frozenset({"soft_wrap", "highlight"})
"""The print options under which a guarded Text is written as its characters and a newline (RUN-51)."""


class LineConsole(Console):
    """A Console whose every printed line is `escape.line`d (specs/deciding/report.md REP-1): what a kernel
    names (a file, a target, an exception's text) can neither break a line nor start a workflow
    command. Each print of the reports is one line (`soft_wrap`), so guarding each print guards
    each line; `line` keeps lengths, so the styles of a Text stay on their characters."""

    def print(self, *objects: Any, **kwargs: Any) -> None:  # type: ignore[override]
        if len(objects) == 1 and type(objects[0]) is Text and self._writes_plain(objects[0], kwargs):
            text = line(objects[0].plain) + "\n"
            try:
                with self._lock:
                    self.file.write(text)
                    self.file.flush()
                return
            except UnicodeEncodeError:  # nothing was written: rich's own print says why
                pass
        super().print(*(_guard(o) for o in objects), **kwargs)

    def _writes_plain(self, text: Text, kwargs: dict) -> bool:
        """RUN-51: whether rich would write `text` as exactly its characters and a newline: one line
        (`soft_wrap`: no wrapping, cropping or justifying; `line` leaves no newline or tab in it) with
        no colour system (no style is written), nothing recorded, buffered or hooked, no console style,
        and no print option but `soft_wrap` and `highlight` (which a Text ignores)."""
        if not _PLAIN_KWARGS.issuperset(kwargs):
            return False
        soft_wrap = kwargs.get("soft_wrap")
        if not (self.soft_wrap if soft_wrap is None else soft_wrap):
            return False
        return (text.overflow in (None, "ignore") and self.color_system is None and not self.record
                and not self.is_jupyter and self.style is None and not self._render_hooks
                and self._buffer_index == 0)


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
