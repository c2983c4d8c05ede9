"""A plain text report's lines are written as their characters (specs/deciding/runs.md RUN-51).

`LineConsole` writes a guarded Text printed as one line on a console without colour directly, rather
than through rich's rendering (at 8,960 devices a witness's timeline is about 63,000 lines). Held
here to rich's own output for the same Text on the same console, over drawn texts, styles, widths and
console settings, and shown to leave rich's rendering out where it applies."""

from __future__ import annotations

import io
import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from rich.console import Console
from rich.text import Text

from semcheck.checker.report.console import LineConsole
from semcheck.checker.report.escape import line

pytestmark = pytest.mark.rule("RUN-51")

PIECES = [" ", "  ", "\t", "\n", "\r", "\x1b[31m", "\u2028", "::", "[bold]x[/bold]", ":smile:", "é", "→", "😀",
          "漢字", "a", "word", "\x85", "\xa0", "line 41", " (HBM)[0:8, 0:128]"]
texts = st.lists(st.sampled_from(PIECES), max_size=30).map("".join)
STYLES = ["", "bold", "dim", "red", "bold red", "underline green"]


@st.composite
def styled(draw) -> Text:
    t = Text(draw(texts), style=draw(st.sampled_from(STYLES)))
    for _ in range(draw(st.integers(0, 3))):
        a = draw(st.integers(0, len(t.plain)))
        b = draw(st.integers(a, len(t.plain)))
        t.stylize(draw(st.sampled_from(STYLES)) or "italic", a, b)
    return t


CONSOLES = [  # the text report's consoles: --output, --color never, a pipe under auto, and colour
    dict(no_color=True, color_system=None, force_terminal=False, soft_wrap=True),
    dict(no_color=True, color_system=None),
    dict(force_terminal=False),
    dict(force_terminal=False, soft_wrap=True),
    dict(force_terminal=True, no_color=False),
    dict(force_terminal=True, color_system=None),
]


def _out(cls, options: dict, width: int, objects: tuple, kwargs: dict) -> str:
    buf = io.StringIO()
    cls(file=buf, width=width, highlight=False, **options).print(*objects, **kwargs)
    return buf.getvalue()


@settings(max_examples=300, deadline=None)
@given(t=styled(), options=st.sampled_from(CONSOLES), width=st.integers(1, 200),
       kwargs=st.sampled_from([dict(soft_wrap=True, highlight=False), dict(soft_wrap=True), {},
                               dict(soft_wrap=False, highlight=False), dict(soft_wrap=True, end="")]))
def test_a_printed_line_is_what_rich_writes_of_the_guarded_text(t, options, width, kwargs):
    guarded = t.copy()
    guarded.plain = line(t.plain)  # what the console guards before rich renders it (REP-1)
    assert _out(LineConsole, options, width, (t,), kwargs) == _out(Console, options, width, (guarded,), kwargs)


def test_a_plain_line_is_written_without_rich_rendering(monkeypatch):
    def never(*a, **k):
        raise AssertionError("rendered by rich")

    monkeypatch.setattr(Console, "_collect_renderables", never)
    buf = io.StringIO()
    c = LineConsole(file=buf, width=20, highlight=False, soft_wrap=True, no_color=True, color_system=None)
    c.print(Text("device 8959: \x1b[2J a line longer than the width   ", style="bold"), soft_wrap=True)
    assert buf.getvalue() == "device 8959: \u241b[2J a line longer than the width   \n"
    with pytest.raises(AssertionError, match="rendered by rich"):  # a colour console renders with rich
        LineConsole(file=io.StringIO(), force_terminal=True).print(Text("x", style="bold"), soft_wrap=True)


def _line_reference(text: str) -> str:
    """REP-1's `line` as written before RUN-51: translate every character, then break a leading `::`."""
    table = {c: chr(0x2400 + c) for c in range(0x20)} | {0x7F: "\u2421"}
    table |= {c: "\ufffd" for c in range(0x80, 0xA0)}
    table |= {0x2028: "\u2424", 0x2029: "\u2424", 0x85: "\u2424"}
    return re.sub(r"^(\s*)::", lambda m: m.group(1) + ":\ua789", text.translate(table), count=1)


# the controls, line breaks, blanks and colons `line` reads; the examples hold a control character alone
LINE_CHARS = st.sampled_from([chr(c) for c in [*range(0x21), 0x7F, *range(0x80, 0xA1), 0x2028, 0x2029, 0x2424]]
                             + [":", "::", " ::", "a", "é", "😀", "\u3000"])


@settings(max_examples=500, deadline=None)
@given(text=st.one_of(st.lists(LINE_CHARS, max_size=20).map("".join), st.text(max_size=30)))
@example(text='\x85')
@example(text='a\x85b')
@example(text='é\x9f')
@example(text='\u2029')
@example(text='x\x7f')
@example(text='  ::x')
@example(text='\u3000::')
@example(text='a::')
def test_a_line_without_control_characters_is_left_as_it_is_and_every_line_as_before(text):
    assert line(text) == _line_reference(text)


@settings(max_examples=300, deadline=None)
@given(text=texts, style=st.sampled_from(STYLES), options=st.sampled_from(CONSOLES), width=st.integers(1, 200))
def test_a_said_line_is_what_rich_writes_of_its_text_guarded(text, style, options, width):
    t = Text(text, style=style)  # what the report printed before RUN-51 (rich's Text strips some controls)
    guarded = t.copy()
    guarded.plain = line(t.plain)
    said, printed = io.StringIO(), io.StringIO()
    LineConsole(file=said, width=width, highlight=False, **options).say(text, style)
    Console(file=printed, width=width, highlight=False, **options).print(guarded, soft_wrap=True, highlight=False)
    assert said.getvalue() == printed.getvalue()
