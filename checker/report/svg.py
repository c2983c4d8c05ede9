"""A sequence diagram (`report_diagram.Diagram`) as inline SVG, for the HTML report: one lane per
device or core, the steps top to bottom in order, arrows for signals and copies, boxes for notes.
Drawn here so that the page needs no script and no network; the layout measures text in a
monospace font's average advance, so that nothing needs a browser to lay it out."""

from __future__ import annotations

from semcheck.checker.report.escape import html_text as escape  # one HTML escaping (REP-1)
from textwrap import wrap

from semcheck.checker.report.diagram import Diagram, Message, Note

FONT = 12  # px
CHAR = 7.3  # px: the advance of one character of a 12 px monospace font (DejaVu Sans Mono: 7.22)
LINE = 15  # px between text lines
LANE = 230  # px: the least width of a lane
WIDE = 720  # px: the least width of a diagram
HEAD = 36  # px: the height of a lane's heading box
GAP = 14  # px between steps
LOOP = 28  # px: how far a message to its own lane loops out

# what each kind of step looks like: (stroke, dash, fill of a note)
STYLE = {
    "ran": ("#1f6feb", "", ""),
    "never": ("#6e7781", "6 4", ""),
    "astray": ("#cf222e", "6 4", ""),
    "copy": ("#8250df", "", ""),
    "blocked": ("#cf222e", "", "#ffebe9"),
    "race": ("#bf8700", "", "#fff8c5"),
    "access": ("#6e7781", "", "#f6f8fa"),
    "stop": ("#6e7781", "", "#f6f8fa"),
    "more": ("#6e7781", "", "#ffffff"),
    "wait": ("#cf222e", "", "#ffebe9"),
    "left": ("#cf222e", "", "#ffebe9"),
}


def _lines(text: str, width: float) -> list[str]:
    return wrap(text, max(8, int(width // CHAR)), break_on_hyphens=False) or ["-"]


def _text(x: float, y: float, lines: list[str], anchor: str = "middle", weight: str = "") -> str:
    bold = f" font-weight='{weight}'" if weight else ""
    spans = "".join(f"<tspan x='{x:.1f}' dy='{0 if i == 0 else LINE}'>{escape(t)}</tspan>"
                    for i, t in enumerate(lines))
    return f"<text x='{x:.1f}' y='{y:.1f}' text-anchor='{anchor}'{bold}>{spans}</text>"


def to_svg(d: Diagram, title: str = "") -> str:
    """The diagram as one `<svg>` element, sized to its content (its width and height in px)."""
    least = max(LANE, WIDE / len(d.lanes))  # a diagram of one or two lanes still has room for its notes
    width = {lane.id: max(least, len(lane.label) * CHAR + 40) for lane in d.lanes}
    x: dict[str, float] = {}
    after = {a.id: b.id for a, b in zip(d.lanes, d.lanes[1:])}
    left = 10.0
    for lane in d.lanes:
        x[lane.id] = left + width[lane.id] / 2
        left += width[lane.id]
    right = left + 10
    parts: list[str] = []
    y = 10 + HEAD + GAP
    for s in d.steps:
        if isinstance(s, Message):
            stroke, dash, _ = STYLE[s.kind]
            a, b = x[s.src], x[s.dst]
            sdash = f" stroke-dasharray='{dash}'" if dash else ""
            if s.src == s.dst:  # a loop back to the lane itself, its text beside it
                room = x[after[s.src]] - a - 14 if s.src in after else 200  # up to the next lifeline
                lines = _lines(s.text, room - LOOP - 8)
                top = y + 4
                parts.append(_text(a + LOOP + 8, y + FONT, lines, anchor="start"))
                parts.append(f"<path class='arrow {s.kind}' d='M{a:.1f},{top:.1f} h{LOOP} v{LINE + 6} h{-LOOP + 4}' "
                             f"fill='none' stroke='{stroke}' stroke-width='1.6'{sdash}/>")
                parts.append(_head(a, top + LINE + 6, -1, s.kind, stroke))
                right = max(right, a + LOOP + 8 + max(len(t) for t in lines) * CHAR + 10)
                y += max(len(lines) * LINE, LINE + 6) + GAP + 6
                continue
            lines = _lines(s.text, max(abs(b - a) - 20, LANE - 20))
            parts.append(_text((a + b) / 2, y + FONT, lines))
            y += len(lines) * LINE + 4
            parts.append(f"<line class='arrow {s.kind}' x1='{a:.1f}' y1='{y:.1f}' x2='{b:.1f}' y2='{y:.1f}' "
                         f"stroke='{stroke}' stroke-width='1.6'{sdash}/>")
            parts.append(_head(b, y, 1 if b > a else -1, s.kind, stroke))
            y += GAP
        else:
            stroke, _, fill = STYLE[s.kind]
            lo = min(x[i] - width[i] / 2 for i in s.lanes) + 12
            hi = max(x[i] + width[i] / 2 for i in s.lanes) - 12
            lines = _lines(s.text, hi - lo - 16)
            h = len(lines) * LINE + 10
            parts.append(f"<rect class='note {s.kind}' x='{lo:.1f}' y='{y:.1f}' width='{hi - lo:.1f}' height='{h}' "
                         f"rx='3' fill='{fill}' stroke='{stroke}'/>")
            parts.append(_text((lo + hi) / 2, y + 5 + FONT, lines, weight="bold" if s.kind in ("blocked", "race", "wait", "left") else ""))
            y += h + GAP
    bottom = y + 4
    lanes = []
    for lane in d.lanes:
        cx, w = x[lane.id], width[lane.id]
        lanes.append(f"<line class='lifeline' x1='{cx:.1f}' y1='{10 + HEAD}' x2='{cx:.1f}' y2='{bottom:.1f}' "
                     f"stroke='#afb8c1' stroke-dasharray='3 3'/>")
        lanes.append(f"<rect class='lane' x='{cx - w / 2 + 12:.1f}' y='10' width='{w - 24:.1f}' height='{HEAD - 6}' "
                     f"rx='4' fill='#ddf4ff' stroke='#54aeff'/>")
        lanes.append(_text(cx, 10 + (HEAD - 6) / 2 + FONT / 2 - 1, [lane.label], weight="bold"))
    w_total, h_total = round(right), round(bottom + 6)
    label = f"<title>{escape(title)}</title>" if title else ""
    return (f"<svg class=diagram role=img width='{w_total}' height='{h_total}' "
            f"viewBox='0 0 {w_total} {h_total}' font-family='DejaVu Sans Mono, Menlo, Consolas, monospace' "
            f"font-size='{FONT}'>{label}" + "".join(lanes) + "".join(parts) + "</svg>")


def _head(x: float, y: float, direction: int, kind: str, stroke: str) -> str:
    """The end of an arrow at (x, y) pointing `direction` (1: right): a cross for what never runs,
    an open head for a copy, a filled one otherwise."""
    back = x - 9 * direction
    if kind == "never":
        return (f"<path class='head' d='M{x - 5:.1f},{y - 5:.1f} L{x + 5:.1f},{y + 5:.1f} M{x - 5:.1f},{y + 5:.1f} "
                f"L{x + 5:.1f},{y - 5:.1f}' stroke='{stroke}' stroke-width='1.8'/>")
    if kind == "copy":
        return (f"<path class='head' d='M{back:.1f},{y - 5:.1f} L{x:.1f},{y:.1f} L{back:.1f},{y + 5:.1f}' "
                f"fill='none' stroke='{stroke}' stroke-width='1.6'/>")
    return f"<path class='head' d='M{back:.1f},{y - 5:.1f} L{x:.1f},{y:.1f} L{back:.1f},{y + 5:.1f} Z' fill='{stroke}'/>"
