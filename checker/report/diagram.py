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
    """A box over `lanes` (one, or the first and last of a span). `kind`: `blocked`, `race`, `access`, `stop`,
    `more`, `wait` (a race's wait that does not order the pair), `left` (a count left at exit)."""

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
    accesses as notes on their devices, the wait that does not order them (the line to fix) between
    them, and the copy. Exit-balance: the signal or copy nobody waits for, as an arrow, and the count
    it leaves. Other witnesses: where each involved device stops, or reaches the exit, from the timeline.
    """
    w = v.witness
    if w is None:
        return None
    if w.details.get("waits"):
        return _deadlock(w.details["waits"])
    sites = [s for s in w.details.get("sites", ()) if isinstance(s, dict)]
    if w.details.get("accesses"):
        return _race(w.details["accesses"], sites)
    timeline = w.details.get("timeline") or []
    if not timeline:
        return None
    shown = timeline[:MAX_DIAGRAM_WAITS]
    lanes = {f"D{d['device']}" for d in shown}
    steps: list[Message | Note] = [*_unwaited(shown, lanes, [s for s in sites if s.get("role") == "unwaited"])]
    for d in shown:
        stop = next((e for e in reversed(d["events"]) if ">>" in e), None)
        loc, _, what = (stop or (d["events"][-1] if d["events"] else "")).partition("  ")
        line = loc.rsplit(":", 1)[-1]
        at = f"line {line}" if line and line.isdigit() else loc
        # a device whose timeline has no stop mark ran to its end: the kernel's exit, not a stop
        text = f"stops at {at} {what.replace('>>', '').strip()}" if stop is not None else f"reaches the exit, {at}"
        steps.append(Note((f"D{d['device']}",), text.strip(), "stop"))
    return Diagram(tuple(Lane(f"D{d['device']}", f"device {d['device']}") for d in shown), tuple(steps))


def _unwaited(shown: list[dict], lanes: set[str], sites: list[dict]) -> list[Message | Note]:
    """REP-31, exit-balance: each device's signal or copy at a line whose count nobody waits for (an `unwaited`
    site), as an arrow to where it lands, and a note on the lane whose count is left at exit."""
    out: list[Message | Note] = []
    for d in shown:
        src = f"D{d['device']}"
        for step in d.get("steps", ()):
            site = next((s for s in sites if s.get("line") == step.get("line") and s.get("file") == step.get("file")),
                        None)
            if site is None:
                continue
            op = str(step.get("op", ""))
            to = op.partition("-> device ")[2].split(" ")[0]
            dst = f"D{to}" if to.isdigit() and f"D{to}" in lanes else src
            line = step["line"]
            if op.startswith("dma"):  # the copy, and the side of it whose semaphore nobody waits on
                out.append(Message(src, dst, f"{op}, line {line}", "copy"))
                left = src if "send side" in str(site.get("note", "")) else dst
            else:
                out.append(Message(src, dst, f"{op}, line {line}: nothing waits for it", "astray"))
                left = dst
            out.append(Note((left,), f"left at exit: what line {line} added, nobody waits for it", "left"))
    return out


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


def _race(accesses: list[dict], sites: list[dict]) -> Diagram:
    # one lane per device, or per core of a multi-core kernel (`by`: who makes the access)
    names = {a.get("by", f"device {a['device']}") for a in accesses}
    lane = {name: f"L{i}" for i, name in enumerate(sorted(names, key=lambda n: [int(t) for t in n.split() if t.isdigit()]))}
    steps: list[Message | Note] = []
    a, b = accesses[0], accesses[-1]
    copy = next((x for x in accesses if "cop" in x["what"]), None)
    # REP-31: the wait that should order the pair and does not (or where it belongs), between them
    wait = next((s for role in ("wrong-wait", "late-wait", "wait-here") for s in sites if s.get("role") == role), None)
    waiter = b if copy is None or copy is a else a
    for i, x in enumerate(accesses):
        line = str(x.get("line", "")).rsplit(":", 1)[-1]
        kind = "writes" if x.get("write") else "reads"
        steps.append(Note((lane[x.get("by", f"device {x['device']}")],), f"{x['what']} ({kind}), line {line}", "access"))
        if i == 0 and wait is not None:
            steps.append(Note((lane[waiter.get("by", f"device {waiter['device']}")],),
                              f"line {wait['line']}: {wait.get('note', '')}", "wait"))
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
