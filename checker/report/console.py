"""The rich Console of the line outputs (the text report, the one-liners and progress on stderr)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.rule import Rule
from rich.text import Text

from semcheck.checker.report.escape import line, unescaped

_PLAIN_KWARGS = frozenset({"soft_wrap", "highlight"})
"""The print options under which a guarded Text is written as its characters and a newline (RUN-51)."""
_ONE_LINE = {"soft_wrap": True, "highlight": False}  # how the reports print each line


class LineConsole(Console):
    """A Console whose every printed line is `escape.line`d (specs/deciding/report.md REP-1): what a kernel
    names (a file, a target, an exception's text) can neither break a line nor start a workflow
    command. Each print of the reports is one line (`soft_wrap`), so guarding each print guards
    each line; `line` keeps lengths, so the styles of a Text stay on their characters."""

    def print(self, *objects: Any, **kwargs: Any) -> None:  # type: ignore[override]
        if len(objects) == 1 and type(objects[0]) is Text and self._writes_plain(objects[0], kwargs):
            if self._written(line(objects[0].plain)):
                return
        super().print(*(_guard(o) for o in objects), **kwargs)

    def say(self, text: str, style: str = "") -> None:
        """One line of a report: `text` as a Text in `style`, printed as one line. RUN-51: a text without
        control characters is what that Text holds (rich strips only control characters from a Text)."""
        if unescaped(text) and self._writes_plain(None, _ONE_LINE) and self._written(text):
            return
        self.print(Text(text, style=style), soft_wrap=True, highlight=False)

    def _written(self, text: str) -> bool:
        """RUN-51: `text` and a newline written and flushed, as rich writes a print; False when the file
        cannot encode it (nothing is written: rich's own print then says why)."""
        with self._lock:
            try:
                self.file.write(text + "\n")
            except UnicodeEncodeError:
                return False
            self.file.flush()
        return True

    def _writes_plain(self, text: Text | None, kwargs: dict) -> bool:
        """RUN-51: whether rich would write `text` as exactly its characters and a newline: one line
        (`soft_wrap`: no wrapping, cropping or justifying; `line` leaves no newline or tab in it) with
        no colour system (no style is written), nothing recorded, buffered or hooked, no console style,
        and no print option but `soft_wrap` and `highlight` (which a Text ignores)."""
        if not _PLAIN_KWARGS.issuperset(kwargs):
            return False
        soft_wrap = kwargs.get("soft_wrap")
        if not (self.soft_wrap if soft_wrap is None else soft_wrap):
            return False
        return ((text is None or text.overflow in (None, "ignore")) and self.color_system is None and not self.record
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
