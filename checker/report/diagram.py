"""The sequence diagram of a violation's witness, once, for every report that draws one: the markdown
report writes it as Mermaid (GitHub draws it), the HTML report as SVG (`report_svg`, no script and no
network). Texts are the text report's own words (regions as `buf[0:8, 0:128]`); only the Mermaid
writer escapes what Mermaid's grammar reads."""

from __future__ import annotations

from dataclasses import dataclass

from semcheck.checker.properties.verdict import Verdict

MAX_DIAGRAM_WAITS = 4  # blocked cores drawn per deadlock; the rest are the same up to rotation, or listed


@dataclass(frozen=True)
class Lane:
    id: str
    label: str


@dataclass(frozen=True)
class Message:
    """An arrow from lane `src` to lane `dst` (the same lane: a loop back to it). `kind`: `ran` (added
    to a blocked counter), `never` (would add to it, never runs), `astray` (goes to a counter nobody
    waits on: a wrong device_id / core_index), `copy` (a DMA in flight)."""

    src: str
    dst: str
    text: str
    kind: str


@dataclass(frozen=True)
class Note:
    """A box over `lanes` (one, or the first and last of a span). `kind`: `blocked`, `race`, `access`, `stop`, `more`."""

    lanes: tuple[str, ...]
    text: str
    kind: str


@dataclass(frozen=True)
class Diagram:
    lanes: tuple[Lane, ...]
    steps: tuple[Message | Note, ...]  # top to bottom, in the order things happen


def diagram(v: Verdict) -> Diagram | None:
    """The witness of violation `v` as a sequence diagram (None when there is nothing to draw).

    Deadlocks: one lane per core involved; an operation that added to a blocked counter is a solid
    arrow, one that never runs a dashed arrow ending in a cross, one that goes astray (to a counter
    nobody waits on) a dashed arrow to where it goes, each blocked wait a note. Races: the two
    accesses as notes on their devices, and the copy between them. Other witnesses: where each
    involved device stops, from the timeline.
    """
    w = v.witness
    if w is None:
        return None
    if w.details.get("waits"):
        return _deadlock(w.details["waits"])
    if w.details.get("accesses"):
        return _race(w.details["accesses"])
    timeline = w.details.get("timeline") or []
    if not timeline:
        return None
    shown = timeline[:MAX_DIAGRAM_WAITS]
    steps = []
    for d in shown:
        stop = next((e for e in reversed(d["events"]) if ">>" in e), d["events"][-1] if d["events"] else "")
        loc, _, what = stop.partition("  ")
        line = loc.rsplit(":", 1)[-1]
        at = f"line {line}" if line and line.isdigit() else loc
        steps.append(Note((f"D{d['device']}",), f"stops at {at} {what.replace('>>', '').strip()}".strip(), "stop"))
    return Diagram(tuple(Lane(f"D{d['device']}", f"device {d['device']}") for d in shown), tuple(steps))


def _deadlock(waits: list[dict]) -> Diagram:
    drawn = waits[:MAX_DIAGRAM_WAITS]
    cores: dict[int, str] = {}
    for wt in drawn:
        cores.setdefault(wt["core"], wt["name"])
        for nd in wt["needs"]:
            cores.setdefault(nd["core"], nd["name"])
        if wt.get("astray"):
            cores.setdefault(wt["astray"]["core"], wt["astray"]["name"])
            cores.setdefault(wt["astray"]["to"], wt["astray"]["to_name"])
    steps: list[Message | Note] = []
    for wt in drawn:
        arrows: dict[tuple, int] = {}
        for nd in sorted(wt["needs"], key=lambda nd: not nd["runs"]):  # what ran, then what never runs
            key = (nd["core"], nd["what"], nd["line"], nd["runs"])
            arrows[key] = arrows.get(key, 0) + 1
        for (core, what, line, runs), times in arrows.items():
            again = f", {times} times" if times > 1 else ""
            steps.append(Message(f"C{core}", f"C{wt['core']}", f"{what}, line {line}{again}" if runs
                                 else f"{what}, line {line}{again} (never runs)", "ran" if runs else "never"))
        if wt.get("astray"):
            a = wt["astray"]
            to = "itself" if a["to"] == a["core"] else a["to_name"]
            arrow = Message(f"C{a['core']}", f"C{a['to']}",
                            f"{a['what']}, line {a['line']}, goes to {to}, not to {wt['name']}: nothing waits for it",
                            "astray")
            if arrow not in steps:
                steps.append(arrow)
        steps.append(Note((f"C{wt['core']}",), f"BLOCKED at line {wt['line']}, {wt['what']}", "blocked"))
    if len(waits) > len(drawn):
        first, last = min(cores), max(cores)
        span = (f"C{first}", f"C{last}") if first != last else (f"C{first}",)
        steps.append(Note(span, f"{len(waits) - len(drawn)} more blocked cores, the same up to rotation "
                                f"or as the text says", "more"))
    return Diagram(tuple(Lane(f"C{c}", name) for c, name in sorted(cores.items())), tuple(steps))


def _race(accesses: list[dict]) -> Diagram:
    # one lane per device, or per core of a multi-core kernel (`by`: who makes the access)
    names = {a.get("by", f"device {a['device']}") for a in accesses}
    lane = {name: f"L{i}" for i, name in enumerate(sorted(names, key=lambda n: [int(t) for t in n.split() if t.isdigit()]))}
    steps: list[Message | Note] = []
    for a in accesses:
        line = str(a.get("line", "")).rsplit(":", 1)[-1]
        kind = "writes" if a.get("write") else "reads"
        steps.append(Note((lane[a.get("by", f"device {a['device']}")],), f"{a['what']} ({kind}), line {line}", "access"))
    a, b = accesses[0], accesses[-1]
    copy = next((x for x in accesses if "cop" in x["what"]), None)
    if copy is not None:
        other = b if copy is a else a
        steps.append(Message(lane[copy.get("by", f"device {copy['device']}")],
                             lane[other.get("by", f"device {other['device']}")],
                             "the copy, in flight while the other access runs", "copy"))
    ids = list(lane.values())
    steps.append(Note((ids[0], ids[-1]) if len(ids) > 1 else (ids[0],), "RACE, either order is possible", "race"))
    return Diagram(tuple(Lane(i, name) for name, i in lane.items()), tuple(steps))


# Mermaid (the markdown report) ----------------------------------------------------------------------

_ARROW = {"ran": "->>", "never": "--x", "astray": "-->>", "copy": "-)"}
_ESCAPE = set(';#:<>{}"')  # what Mermaid's sequenceDiagram grammar reads inside a text


def _mtext(text: str) -> str:
    """`text` for a Mermaid message or note: one line, and the characters its grammar reads as entity
    codes (`#58;` for `:`), which Mermaid draws as the characters themselves."""
    text = " ".join(text.split()) or "-"
    return "".join(f"#{ord(ch)};" if ch in _ESCAPE else ch for ch in text)


def to_mermaid(d: Diagram) -> str:
    out = ["sequenceDiagram"]
    out += [f"    participant {lane.id} as {_mtext(lane.label)}" for lane in d.lanes]
    for s in d.steps:
        if isinstance(s, Message):
            out.append(f"    {s.src}{_ARROW[s.kind]}{s.dst}: {_mtext(s.text)}")
        else:
            out.append(f"    Note over {','.join(s.lanes)}: {_mtext(s.text)}")
    return "\n".join(out)
