"""Escaping of kernel-controlled text (file, target, kernel, buffer and semaphore names; messages that
quote kernel source or exception text) for each format it lands in (specs/deciding/report.md REP-1).

One function per format, called where a string enters that format: `markdown`, `html_text`,
`line` (text, concise, stderr and progress lines), `gh_data` / `gh_property` (GitHub workflow
commands). JSON and SARIF are escaped by their serializer. A line format must not let a name start
a line of its own, nor a line that GitHub's runner reads as a workflow command (`::` first, after
blanks: the runner reads them on stdout and stderr alike).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# C0 controls and DEL as their Unicode control pictures (U+2400..U+2421): visible, one character
# each, so a rich Text's styled spans keep their places when its text is replaced.
_PICTURES = {c: chr(0x2400 + c) for c in range(0x20)} | {0x7F: "\u2421"}
_PICTURES |= {c: "\ufffd" for c in range(0x80, 0xA0)}  # C1 controls (a terminal may act on them)
_PICTURES |= {0x2028: "\u2424", 0x2029: "\u2424", 0x85: "\u2424"}  # Unicode line breaks: a line ends there too
_LEADING_COMMAND = re.compile(r"^(\s*)::")
_CONTROL = re.compile("[" + "".join(re.escape(chr(c)) for c in sorted(_PICTURES)) + "]")
"""Any character `line` replaces: a line without one is left as it is."""
MODIFIER_COLON = "\ua789"  # what stands for the second colon of a `::` that would start a line


def line(text: str) -> str:
    """`text` fit for one line of a line-oriented output: every control character (newline,
    carriage return, escape, ...) replaced by its visible control picture, and a leading `::`
    (after blanks) broken, so the line can never be a workflow command. Length-preserving. A line with
    neither (most of a report's) is returned as it is without translating it (RUN-51)."""
    if _CONTROL.search(text) is not None:
        text = text.translate(_PICTURES)
    if "::" not in text:
        return text
    return _LEADING_COMMAND.sub(lambda m: m.group(1) + ":" + MODIFIER_COLON, text, count=1)


def unescaped(text: str) -> bool:
    """Whether `line` leaves `text` as it is and it has no control character at all (RUN-51)."""
    return _CONTROL.search(text) is None and "::" not in text


def lines(text: str) -> str:
    """Multi-line text (a traceback shown with --debug): `line` for each of its lines."""
    return "\n".join(line(x) for x in text.split("\n"))


# Markdown: the characters that can open or close markdown or HTML syntax become numeric character
# references, which CommonMark renders as the characters and never parses as syntax (in a table
# cell too: `&#124;` is not a cell boundary). `_` only where it could be emphasis (not between two
# letters or digits: `core_index` stays as it is), `]` only where a link's `(` follows; what is
# syntax only first on a line (a heading, a list, a quote, a break) there. A newline would end a
# row or a paragraph: `line` shows it as a control picture first.
_MD_SPECIAL = re.compile(r"[\\`*<>&|~]|(?<![^\W_])_|_(?![^\W_])|\](?=\()")
_MD_LEADING = frozenset("#-+=>!:")
_MD_ORDERED = re.compile(r"^(\d+)([.)])")


def markdown(text: str) -> str:
    """`text` as inline markdown (a paragraph, a heading, a table cell, inside `<code>`) showing
    exactly its characters: no markup, no HTML, no link, no line break, no cell boundary, no `::`."""
    out = _MD_SPECIAL.sub(lambda m: f"&#{ord(m.group(0))};", line(text)).replace("::", ":&#58;")
    if out[:1] in _MD_LEADING:
        out = f"&#{ord(out[0])};" + out[1:]
    return _MD_ORDERED.sub(lambda m: f"{m.group(1)}&#{ord(m.group(2))};", out, count=1)


def md_code(text: str) -> str:
    """`text` as inline code: `<code>` with the characters escaped (a backtick code span can hold
    neither entities nor, reliably, a backtick or a `|` in a table)."""
    return f"<code>{markdown(text)}</code>"


def fence(info: str, body: Sequence[str]) -> list[str]:
    """A fenced code block of the lines `body` (each `line`d: a name's newline stays in its line),
    its fence longer than any run of backticks in them, so no line of the body closes it."""
    shown = [line(x) for x in body]
    longest = max((len(m) for x in shown for m in re.findall(r"`+", x)), default=0)
    ticks = "`" * max(3, longest + 1)
    return [ticks + info, *shown, ticks]


def html_text(text: str) -> str:
    """`text` as HTML character data or an attribute value (quotes escaped). A newline or carriage
    return becomes a character reference (the page shows the same), so no line of the HTML output
    comes from a name; a `::` as `:&#58;`, so none starts with a workflow command either."""
    import html

    return (html.escape(text, quote=True).replace("\r", "&#13;").replace("\n", "&#10;")
            .replace("::", ":&#58;"))


def gh_data(text: str) -> str:
    """A workflow command's data (the message), as GitHub's runner unescapes it (`%`, CR, LF)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def gh_property(text: str) -> str:
    """A workflow command's property value (file, title): data escaping, and `:` and `,`."""
    return gh_data(text).replace(":", "%3A").replace(",", "%2C")
