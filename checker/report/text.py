"""The text report (`--format text`): for a person, on a terminal or in a CI log."""

from __future__ import annotations

from collections.abc import Sequence

from semcheck.checker.run.generated_inputs import coverage, input_line
from semcheck.checker.properties.registry import IDS
from semcheck.checker.report.rows import (MARK, PLAIN_MARK, STYLE, FileReport, configs, header, row_summary,
                                     worst_kind, hint_for, overall, summary, summary_counts)
from semcheck.checker.report.findings import cwd_prefix, rel, where
from semcheck.checker.run.request import Result
from semcheck.checker.properties.verdict import Verdict, unknown_kind
from semcheck.checker.report.places import places


def render_text(console, path: str, results: Sequence[Result]) -> None:
    """What a person reads: one line per configuration, then each problem once, in detail.

    A configuration is a target x device count x DMA mode. A violated or
    unknown property found at several configurations is shown in full at the
    first (smallest) one, with the others listed under it. Colour and
    Unicode marks on a terminal, plain ASCII marks otherwise.
    """
    from rich.text import Text

    plain = not console.is_terminal
    marks = PLAIN_MARK if plain else MARK
    rule_chars = "-" if plain else "─"

    prefix = cwd_prefix()  # REP-40: read once for the report's lines

    def say(text: str, style: str = "") -> None:
        _say(console, rel(text, prefix), style)

    _render_file(console, say, marks, rule_chars, path, results)
    _render_summary(console, marks, plain, results)


def render_files(console, files: Sequence[FileReport], detail: str = "normal") -> None:
    """The text report of a run over several kernel files: each file's section, then one summary.

    One file without an error reads exactly as `render_text`. A file that
    could not be verified gets one line saying why. `detail`: "quiet" leaves out
    the header and the line per configuration, "verbose" adds each property's
    verdict and reason under its configuration's line.
    """
    from rich.text import Text

    plain = not console.is_terminal
    marks = PLAIN_MARK if plain else MARK
    rule_chars = "-" if plain else "─"

    prefix = cwd_prefix()  # REP-40: read once for the report's lines

    def say(text: str, style: str = "") -> None:
        _say(console, rel(text, prefix), style)

    for i, f in enumerate(files):
        if i:
            console.print()
        if f.error is not None:
            line = Text(f"{marks['violated']} ", style=STYLE["violated"])
            line.append(rel(f"{f.path}: not verified: {f.error.one_line()}"))
            console.print(line, soft_wrap=True, highlight=False)
            continue
        _render_file(console, say, marks, rule_chars, f.path, f.results, detail)
        for name, e in f.target_errors:  # a target whose build raised: the others' results stand, it has none
            line = Text(f"{marks['violated']} ", style=STYLE["violated"])
            line.append(rel(f"{f.path}::{name}: not verified: {e.one_line()}"))
            console.print(line, soft_wrap=True, highlight=False)
        if f.claims:  # --every-n (specs/deciding/parametric.md PAR-8)
            _render_every_n(console, marks, rule_chars, f)
        if f.suppressed or f.unused:  # never dropped silently: not checked, so neither proved nor counted
            console.print()
            for x in f.suppressed:
                say(f"{'--' if plain else '–'} {x.property} {x.said()}: {x.describe().split(': ', 1)[1]}", "dim")
            for x in f.unused:  # REP-26
                say(f"{marks['unknown']} {x.unused()} ({x.reason}; at {x.loc.file}:{x.loc.line})", STYLE["unknown"])
    _render_summary(console, marks, plain, [r for f in files for r in f.results], files)


def _render_file(console, say, marks, rule_chars, path: str, results: Sequence[Result],
                 detail: str = "normal") -> None:
    from rich.text import Text

    if results and detail != "quiet":
        say(header(path, results), "bold")
    width = max((len(r.target) for r in results), default=0)
    mark_width = max(len(marks[k]) for k in ("proved", "violated", "unknown"))  # the rows' columns stay put
    for r in results if detail != "quiet" else ():
        worst = worst_kind(r.verdicts)
        line = Text(f"{marks[worst]:<{mark_width}} ", style=STYLE[worst])
        line.append(f"{r.target:<{width}}  devices={r.devices:<4} {r.dma_mode:<8}  ")
        line.append(rel(row_summary(r, rules=detail == "verbose")), style=STYLE[worst] if worst != "proved" else "")
        if r.cached:
            line.append("  (cached)", style="dim")
        console.print(line, soft_wrap=True, highlight=False)
        if detail == "verbose":
            for v in r.verdicts:  # a violation's witness is in its section below
                why = v.reason if v.verdict != "violated" or v.witness is None else v.witness.message.split("\n")[0]
                say(f"    {marks[v.verdict]:<{mark_width}} {v.property}" + (f": {why}" if why else ""),
                    "dim" if v.verdict == "proved" else STYLE[v.verdict])

    # Each problem once. A violation: per (target, property). Unknowns: per
    # (target, kind of reason), listing the properties -- a timeout or a
    # failing run leaves several undecided for the same reason.
    groups: dict[tuple[str, str, str], list[tuple[int, str, Verdict]]] = {}
    for target, n, mode, verdicts in configs(results):
        for v in verdicts:
            if v.verdict == "violated":
                groups.setdefault((target, "violated", v.property), []).append((n, mode, v))
            elif v.verdict == "unknown":
                groups.setdefault((target, "unknown", unknown_kind(v.reason)), []).append((n, mode, v))
            elif v.verdict == "unrunnable":  # REP-21: one section per target and cause, all its properties
                groups.setdefault((target, "unrunnable", v.stats.get("rule", "")), []).append((n, mode, v))
            elif v.verdict == "vacuous":  # REP-20: what no run reaches, once per target
                groups.setdefault((target, "vacuous", ""), []).append((n, mode, v))
    rank = {"violated": 0, "unknown": 1, "unrunnable": 2, "vacuous": 3}
    order = {p: i for i, p in enumerate(IDS)}

    def first_property(key) -> int:
        return min(order.get(v.property, 99) for _, _, v in groups[key])

    for key in sorted(groups, key=lambda k: (rank[k[1]], first_property(k))):
        target, kind, _ = key
        entries = sorted(groups[key], key=lambda c: c[0])  # stable: mode order kept per device count
        n, mode, v = entries[0]
        props = list(dict.fromkeys(e[2].property for e in sorted(entries, key=lambda e: order.get(e[2].property, 99))))
        others = list(dict.fromkeys((m, d) for m, d, _ in entries if (m, d) != (n, mode)))
        console.print()
        shown = ", ".join(props) if len(props) < 3 else f"{len(props)} properties"
        said = f"{shown} {kind}" if kind != "unrunnable" else "interpret mode cannot run this kernel"
        title = Text(f"{marks[kind]} {said}", style=STYLE[kind])
        title.append(f": {target}, {n} devices, {mode}")
        console.rule(title, characters=rule_chars, align="left")
        if kind == "violated" and v.witness is not None:
            _witness(console, say, v.witness, places(v).locs)
            if v.input is not None:
                say(input_line(v) or "", "bold")
        else:
            same = [e[2] for e in entries if (e[0], e[1]) == (n, mode)]
            reasons = list(dict.fromkeys(u.reason for u in same))
            if len(reasons) == 1:
                say(reasons[0])
            else:
                for u in same:
                    say(f"{u.property}: {u.reason}")
        if len(props) >= 3 and kind != "unrunnable":
            say(f"properties: {', '.join(props)}")
        if others:
            say(f"also {kind if kind != 'unrunnable' else 'not run'} at: {where(others)}", "dim")
        hint = hint_for(v)
        if hint:
            line = Text("hint: ", style="bold")
            line.append(rel(hint))
            console.print(line, soft_wrap=True, highlight=False)

    lines = coverage(results)
    if lines:
        console.print()
        for text in lines:
            say(f"generated inputs: {text}")

    # Where the interpreter and the hardware disagree, once per target (the device counts named on each
    # line), with what can explain it: the markdown report's own grouping (issue 26.4)
    from semcheck.checker.report.markdown import modes_differ

    for target, lines, causes in modes_differ(results):
        console.print()
        title = Text(f"{marks['differ']} modes differ", style=STYLE["differ"])
        title.append(f": {target}")
        console.rule(title, characters=rule_chars, align="left")
        for line in lines:
            say(line)
        for code, text, locs in causes:
            say(f"can explain it, {code}: {text}")
            for loc in locs:
                say(f"  at {loc.file}:{loc.line}: {loc.text.strip()}")
        if not causes:
            say("no known interpreter divergence explains it: see specs/semantics/divergences.md")
        say("interpret mode (eager, on_wait) predicts jax's interpreter; hardware predicts a TPU "
            "(specs/semantics/divergences.md)", "dim")


def _render_summary(console, marks, plain: bool, results: Sequence[Result],
                    files: Sequence[FileReport] | None = None) -> None:
    from rich.text import Text

    from semcheck.checker.report import every_n as report_every_n

    s = summary(results)
    errors = sum(f.error is not None for f in files or ())
    failed_targets = sum(len(f.target_errors) for f in files or ())
    every = report_every_n.tally(files or ())  # --every-n (PAR-8): its claims count in the mark, as in the exit code
    worst = overall(s, bool(errors or failed_targets or every["violated"]), not results or bool(every["unknown"]))
    console.print()
    line = Text(f"{marks[worst]} ", style=STYLE[worst])
    text = summary_counts(s)
    text += report_every_n.summary_words(files or ())
    if files is not None and len(files) > 1:
        text += f" in {len(files) - errors} kernel files"
    if errors:
        text += f"; {errors} {'file' if errors == 1 else 'files'} not verified"
    if failed_targets:
        text += f"; {failed_targets} {'target' if failed_targets == 1 else 'targets'} not verified"
    sups = sorted({x.property for f in files or () for x in f.suppressed if x.said().endswith("(not checked)")})
    if sups:  # not checked, so not among the counts: said again where a reader looks last
        text += f"; not checked (suppressed): {', '.join(sups)}"
    line.append(text, style="bold" if not plain else "")
    cached = sum(r.cached for r in results)
    if cached:  # above the summary, which stays the last line
        console.print(Text(f"{cached} of {len(results)} configurations answered from the result cache: "
                           "nothing they read has changed since they were verified (--no-cache verifies afresh)",
                           style="dim"), soft_wrap=True, highlight=False)
    console.print(line, soft_wrap=True, highlight=False)


def _witness(console, say, w, locs) -> None:
    explanation = w.details.get("explanation")
    if explanation:
        # a deadlock, explained per group of blocked cores (one per rotation class) and as a cycle;
        # the per-device timelines, which say the same thing N times, stay in the JSON
        say("deadlock: " + explanation[0] if not explanation[0].startswith("cycle") else explanation[0])
        for line in explanation[1:]:
            say(line)
        for loc in dict.fromkeys(locs):  # REP-10: the line to change first
            if loc is not None and loc.line:
                say(f"  at {loc.file}:{loc.line}: {loc.text.strip()}")
        return
    say(w.message)
    timeline = w.details.get("timeline")
    if timeline:
        say("timeline (last steps of each involved device; >> marks where it stops):")
        for dev in timeline:
            say(f"  device {dev['device']}:")
            for ev in dev["events"]:
                say(f"    {ev}", "dim" if ">>" not in ev else "")
    for _, _, what in w.blocked:  # core and position indices stay in the JSON
        say(f"  stopped: {what}")
    for loc in dict.fromkeys(locs):  # REP-10: the line to change first
        if loc is not None and loc.line:
            say(f"  at {loc.file}:{loc.line}: {loc.text.strip()}")



def _render_every_n(console, marks, rule_chars, f: FileReport) -> None:
    """PAR-8: per target, what holds for every device count N >= 2 and what only per N."""
    from rich.text import Text

    from semcheck.checker.report import every_n as report_every_n

    mark = dict(marks, **{"per-n": "--" if rule_chars == "-" else "–"})
    mark_width = max(len(m) for m in mark.values())
    by_target: dict[str, list] = {}
    for x in report_every_n.lines(f):
        by_target.setdefault(x.target, []).append(x)
    cached = {tc.target for tc in f.claims if tc.cached}
    for target, xs in by_target.items():
        console.print()
        console.rule(Text(f"every N: {target} (specs/deciding/parametric.md)" + (" (cached)" if target in cached else ""),
                          style="bold"), characters=rule_chars, align="left")
        for x in xs:
            line = Text(f"{mark[x.kind]:<{mark_width}} ", style=STYLE.get(x.kind, "dim"))
            line.append(rel(report_every_n.text(x)), style="dim" if x.kind == "per-n" else "")
            console.print(line, soft_wrap=True, highlight=False)


def _say(console, text: str, style: str) -> None:
    """One line of the report: the console's own (`LineConsole.say`, RUN-51), else a Text printed as one line."""
    from rich.text import Text

    say = getattr(console, "say", None)
    if say is not None:
        say(text, style)
    else:
        console.print(Text(text, style=style), soft_wrap=True, highlight=False)
