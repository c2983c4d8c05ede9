"""Markdown and HTML reports (`--format markdown`, `--format html`), with sequence diagrams of the
witnesses (`report_diagram`): Mermaid in markdown, inline SVG in HTML (`report_svg`)."""

from __future__ import annotations

from collections.abc import Sequence

from semcheck.checker.report import every_n as report_every_n
from semcheck.checker.properties.differences import CAUSES, differences
from semcheck.checker.run.generated_inputs import coverage, input_line
from semcheck.checker.properties.registry import IDS
from semcheck.checker.report.diagram import diagram, to_mermaid
from semcheck.checker.report.escape import fence, html_text, markdown, md_code
from semcheck.checker.report.svg import to_svg
from semcheck.checker.report.rows import (PLAIN_MARK, FileReport, row_summary, worst_kind, hint_for, overall, summary,
                                          summary_counts)
from semcheck.checker.report.findings import rel, where
from semcheck.checker.run.request import Result
from semcheck.checker.properties.verdict import Verdict, unknown_kind
from semcheck.checker.report.places import places


def mermaid_diagram(v: Verdict) -> str | None:
    """A Mermaid `sequenceDiagram` of a violation's witness (None when there is nothing to draw)."""
    d = diagram(v)
    return None if d is None else to_mermaid(d)


def _md_loc(loc) -> str:
    return md_code(f"{rel(loc.file)}:{loc.line}")


_MD_MARK = {"proved": "✅", "vacuous": "⭕", "violated": "❌", "unknown": "❓", "unrunnable": "🚫", "differ": "🔀"}
_RANK = {"violated": 0, "unknown": 1, "unrunnable": 2, "vacuous": 3}


def _title(kind: str, props: Sequence[str]) -> str:
    """A problem's heading words: `deadlock-free violated`, or what an interpreter cannot run (REP-21)."""
    if kind == "unrunnable":
        return "interpret mode cannot run this kernel"
    return f"{', '.join(props) if len(props) < 3 else f'{len(props)} properties'} {kind}"
_EVERY_N_MARK = dict(_MD_MARK, **{"per-n": "➖"})


def _every_n_by_target(f: FileReport) -> dict[str, list]:
    out: dict[str, list] = {}
    for x in report_every_n.lines(f):
        out.setdefault(x.target, []).append(x)
    return out


def _suppressions(files: Sequence[FileReport]):
    """[(heading, [(file, suppression)])]: the properties not checked, then the findings suppressed (REP-25)."""
    out = []
    for head in ("suppressed (not checked)", "suppressed"):
        sups = [(f, x) for f in files for x in f.suppressed if x.said() == head]
        if sups:
            out.append((head if head != "suppressed" else "findings suppressed", sups))
    return out


def _problems(results: Sequence[Result]):
    """Each violated property once per target (first at the smallest device count), and the unknowns
    grouped by cause: [(kind, target, verdict at first, [(devices, mode) elsewhere], n, mode)]."""
    groups: dict[tuple, list] = {}
    for r in results:
        for v in r.verdicts:
            if v.verdict == "proved":
                continue
            cause = (v.property if v.verdict == "violated" else "" if v.verdict == "vacuous" else v.stats.get("rule", "")
                     if v.verdict == "unrunnable" else unknown_kind(v.reason))
            key = (r.target, v.verdict, cause)
            groups.setdefault(key, []).append((r.devices, r.dma_mode, v))
    order = {p: i for i, p in enumerate(IDS)}
    out = []
    for key in sorted(groups, key=lambda k: (_RANK[k[1]], min(order[v.property] for _, _, v in groups[k]))):
        entries = sorted(groups[key], key=lambda e: e[0])
        n, mode, v = entries[0]
        props = list(dict.fromkeys(e[2].property for e in entries))
        others = list(dict.fromkeys((d, m) for d, m, _ in entries if (d, m) != (n, mode)))
        out.append((key[1], key[0], v, others, n, mode, props))
    return out


def modes_differ(results: Sequence[Result]):
    """Per target, once: [(target, ["deadlock-free: violated on hardware; proved under eager, on_wait
    (2, 4 devices)"], [(code, explanation, locs)])] -- the text report's "modes differ", across device counts."""
    by_target: dict[str, dict[str, list[int]]] = {}
    causes: dict[str, dict] = {}
    for d in differences(results):
        by_target.setdefault(d.target, {}).setdefault(d.describe(), []).append(d.devices)
        for e in d.causes:
            causes.setdefault(d.target, {}).setdefault(e.code, e)
    return [(target, [f"{line} ({', '.join(map(str, sorted(set(ns))))} devices)" for line, ns in lines.items()],
             [(code, CAUSES[code], e.locs) for code, e in causes.get(target, {}).items()])
            for target, lines in by_target.items()]


def to_markdown(label: str, files: Sequence[FileReport]) -> str:
    """GitHub-flavoured markdown: the summary, then per problem its explanation, a Mermaid sequence
    diagram of the witness and the hint, where the DMA modes differ and why, what was suppressed, and
    last the table of configurations (fit for $GITHUB_STEP_SUMMARY and PR comments)."""
    results = [r for f in files for r in f.results]
    s = summary(results)
    errors = [f for f in files if f.error is not None]
    every = report_every_n.tally(files)  # --every-n (PAR-8)
    failed = [(f, name, e) for f in files for name, e in f.target_errors]  # targets whose build raised
    worst = overall(s, bool(errors or failed or every["violated"]), not results or bool(every["unknown"]))
    out = [f"## semcheck {_MD_MARK[worst]} {markdown(rel(label))}", "",
           f"**{summary_counts(s)}**"
           + (f" in {len(files) - len(errors)} kernel files" if len(files) > 1 else "")
           + (f"; {len(errors)} not verified" if errors else "")
           + (f"; {len(failed)} {'target' if len(failed) == 1 else 'targets'} not verified" if failed else "")
           + report_every_n.summary_words(files)]
    for f, name, e in failed:
        out += ["", f"### ❌ not verified: {md_code(f.path)} {markdown(name)}", "", markdown(rel(e.one_line()))]
    for f in files:
        for kind, target, v, others, n, mode, props in _problems(f.results):
            out += ["", f"### {_MD_MARK[kind]} {_title(kind, props)}: {md_code(f.path)} {markdown(target)}, "
                        f"{n} devices, {mode}", ""]
            if kind == "violated" and v.witness is not None:
                text = v.witness.details.get("explanation") or [v.witness.message]
                out += fence("text", [rel(t) for t in text])
                drawn = mermaid_diagram(v)
                if drawn:
                    out += ["", *fence("mermaid", drawn.split("\n"))]
                locs = [loc for loc in dict.fromkeys(places(v).locs) if loc.line]  # REP-10: the line to change first
                if locs:
                    out += [""] + [f"- {_md_loc(loc)}: {md_code(loc.text.strip())}" for loc in locs]
                if v.input is not None:
                    out += ["", f"**{markdown(input_line(v) or '')}**"]
            else:
                out.append(markdown(rel(v.reason)))
                if len(props) >= 3 and kind != "unrunnable":
                    out += ["", f"properties: {', '.join(props)}"]
            if others:
                out += ["", f"also {kind} at: {where(others)}"]
            hint = hint_for(v)
            if hint:
                out += ["", f"**hint:** {markdown(rel(hint))}"]
    for f in files:
        for target, lines, causes in modes_differ(f.results):
            out += ["", f"### {_MD_MARK['differ']} modes differ: {md_code(f.path)} {markdown(target)}", ""]
            out += [f"- {markdown(line)}" for line in lines]
            for code, text, locs in causes:
                out += ["", f"can explain it, **{code}**: {markdown(text)}"]
                out += [f"- {_md_loc(loc)}: {md_code(loc.text.strip())}" for loc in locs]
            if not causes:
                out += ["", "no known interpreter divergence explains it: see specs/semantics/divergences.md"]
            out += ["", "interpret mode (eager, on_wait) predicts jax's interpreter; hardware predicts a TPU"]
    for f in files:  # --every-n (specs/deciding/parametric.md PAR-8)
        by_target = _every_n_by_target(f)
        for target, xs in by_target.items():
            out += ["", f"### every N: {md_code(f.path)} {markdown(target)}", ""]
            out += [f"- {_EVERY_N_MARK[x.kind]} {markdown(rel(report_every_n.text(x)))}" for x in xs]
    for head, sups in _suppressions(files):
        out += ["", f"### ➖ {head}", ""]
        out += [f"- {md_code(f.path)} {markdown(rel(x.describe()))}" for f, x in sups]
    unused = [(f, x) for f in files for x in f.unused]
    if unused:  # REP-26
        out += ["", "### ⚠️ unused suppressions", ""]
        out += [f"- {_md_loc(x.loc)}: {markdown(rel(x.unused()))} ({markdown(rel(x.reason))})" for f, x in unused]
    # the findings first: a reader of a step summary or a PR comment wants the diagnosis, then the detail
    out += ["", "### configurations", "", "| | file | target | devices | DMA mode | result |", "|---|---|---|---|---|---|"]
    for f in files:
        if f.error is not None:
            out.append(f"| ❌ | {md_code(f.path)} | | | | not verified: {markdown(rel(f.error.one_line()))} |")
        for r in f.results:
            worst_r = worst_kind(r.verdicts)
            out.append(f"| {_MD_MARK[worst_r]} | {md_code(f.path)} | {markdown(r.target)} | {r.devices} | "
                       f"{r.dma_mode} | {markdown(rel(row_summary(r)))} |")
    covered = [text for f in files for text in coverage(f.results)]
    if covered:
        out += [""] + [f"- generated inputs: {markdown(text)}" for text in covered]
    return "\n".join(out) + "\n"


# REP-32: HTML marks are words in coloured boxes, not emoji: a browser without an emoji font draws emoji as empty
# boxes. The words are the text report's marks off a terminal (REP-22), so one reading serves both.
_BADGE_WORD = {**PLAIN_MARK, "per-n": "--"}
_BADGE_COLOUR = {"proved": "#1a7f37", "vacuous": "#0969da", "violated": "#cf222e", "unknown": "#9a6700",
                 "unrunnable": "#8250df", "differ": "#bc4c00", "per-n": "#6e7781"}
_BADGE_STYLE = (".mark{display:inline-block;min-width:2.4em;padding:.1em .4em;border-radius:.3em;color:#fff;"
                "font:bold .75em/1.3 ui-monospace,monospace;text-align:center;vertical-align:middle}"
                + "".join(f".mark.{k}{{background:{c}}}" for k, c in _BADGE_COLOUR.items())
                + ".fix{border-left:4px solid #cf222e;padding:.3em .8em;background:#fff5f5}"
                  "ul.related{margin-top:.2em}")


def _badge(kind: str) -> str:
    return f"<span class='mark {kind.replace('_', '-')}'>{html_text(_BADGE_WORD[kind])}</span>"


def _html_places(p) -> list[str]:
    """The line to fix, said as such with what to do there, then each related line with what happens on it."""
    e = html_text
    out = []
    if p.primary is not None:
        loc = p.primary.loc
        out.append(f"<p class=fix><b>fix here</b> <code>{e(rel(loc.file))}:{loc.line}</code>: "
                   f"<code>{e(loc.text.strip())}</code>" + (f"<br>{e(rel(p.primary.message))}" if p.primary.message
                                                            else "") + "</p>")
    if p.related:
        out.append("<ul class=related>" + "".join(
            f"<li><code>{e(rel(x.loc.file))}:{x.loc.line}</code>: <code>{e(x.loc.text.strip())}</code>"
            + (f": {e(rel(x.message))}" if x.message else "") + "</li>" for x in p.related) + "</ul>")
    return out


def to_html(label: str, files: Sequence[FileReport]) -> str:
    """One self-contained HTML page: the markdown report's content, with the diagrams as inline SVG
    (no script, nothing loaded from anywhere)."""
    e = html_text
    results = [r for f in files for r in f.results]
    s = summary(results)
    failed = [(f, name, x) for f in files for name, x in f.target_errors]  # targets whose build raised
    body = [f"<h1>semcheck: {e(rel(label))}</h1>",
            f"<p><b>{e(summary_counts(s))}"
            + (f"; {len(failed)} {'target' if len(failed) == 1 else 'targets'} not verified" if failed else "")
            + f"{e(report_every_n.summary_words(files))}</b></p>"]
    for f, name, x in failed:
        body.append(f"<h2>{_badge('violated')} not verified: <code>{e(f.path)}</code> {e(name)}</h2>"
                    f"<p>{e(rel(x.one_line()))}</p>")
    for f in files:
        for kind, target, v, others, n, mode, props in _problems(f.results):
            shown = _title(kind, props)
            body.append(f"<h2>{_badge(kind)} {e(shown)}: <code>{e(f.path)}</code> {e(target)}, "
                        f"{n} devices, {mode}</h2>")
            if kind == "violated" and v.witness is not None:
                text = v.witness.details.get("explanation") or [v.witness.message]
                body.append("<pre class=text>" + e("\n".join(rel(t) for t in text)) + "</pre>")
                body += _html_places(places(v))  # REP-10: the line to change first, then what happens where
                if v.input is not None:
                    body.append(f"<p><b>{e(input_line(v) or '')}</b></p>")
                drawn = diagram(v)
                if drawn is not None:
                    body.append("<figure>" + to_svg(drawn, title=f"{shown}: {f.path} {target}") + "</figure>")
            else:
                body.append(f"<p>{e(rel(v.reason))}</p>")
            if others:
                body.append(f"<p>also {kind} at: {e(where(others))}</p>")
            hint = hint_for(v)
            if hint:
                body.append(f"<p><b>hint:</b> {e(rel(hint))}</p>")
    for f in files:
        for target, lines, causes in modes_differ(f.results):
            body.append(f"<h2>{_badge('differ')} modes differ: <code>{e(f.path)}</code> {e(target)}</h2><ul>")
            body += [f"<li>{e(line)}</li>" for line in lines]
            body.append("</ul>")
            for code, text, locs in causes:
                body.append(f"<p>can explain it, <b>{e(code)}</b>: {e(text)}</p>")
                body += [f"<p><code>{e(rel(loc.file))}:{loc.line}</code>: <code>{e(loc.text.strip())}</code></p>"
                         for loc in locs]
            if not causes:
                body.append("<p>no known interpreter divergence explains it: see specs/semantics/divergences.md</p>")
    for f in files:  # --every-n (specs/deciding/parametric.md PAR-8)
        for target, xs in _every_n_by_target(f).items():
            body.append(f"<h2>every N: <code>{e(f.path)}</code> {e(target)}</h2><ul>")
            body += [f"<li>{_badge(x.kind)} {e(rel(report_every_n.text(x)))}</li>" for x in xs]
            body.append("</ul>")
    for head, sups in _suppressions(files):
        body.append(f"<h2>{head}</h2><ul>")
        body += [f"<li><code>{e(f.path)}</code> {e(rel(x.describe()))}</li>" for f, x in sups]
        body.append("</ul>")
    unused = [(f, x) for f in files for x in f.unused]
    if unused:  # REP-26
        body.append("<h2>unused suppressions</h2><ul>")
        body += [f"<li><code>{e(rel(x.loc.file))}:{x.loc.line}</code>: {e(rel(x.unused()))} ({e(rel(x.reason))})</li>"
                 for f, x in unused]
        body.append("</ul>")
    # the findings first, the table of configurations after them (as the markdown report)
    body.append("<h2>configurations</h2>")
    body.append("<table><tr><th></th><th>file</th><th>target</th><th>devices</th><th>DMA mode</th>"
                "<th>result</th></tr>")
    for f in files:
        if f.error is not None:
            body.append(f"<tr><td>{_badge('violated')}</td><td><code>{e(f.path)}</code></td><td colspan=3></td>"
                        f"<td>not verified: {e(rel(f.error.one_line()))}</td></tr>")
        for r in f.results:
            body.append(f"<tr><td>{_badge(worst_kind(r.verdicts))}</td><td><code>{e(f.path)}</code></td>"
                        f"<td>{e(r.target)}</td><td>{r.devices}</td><td>{r.dma_mode}</td>"
                        f"<td>{e(rel(row_summary(r)))}</td></tr>")
    body.append("</table>")
    style = ("body{font-family:system-ui,sans-serif;margin:2em;max-width:80em}"
             "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2em .5em;text-align:left}"
             "pre.text{background:#f6f8fa;padding:.8em;white-space:pre-wrap}"
             "figure{margin:1em 0;overflow-x:auto}svg.diagram{display:block}" + _BADGE_STYLE)
    return ("<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8>"
            f"<title>semcheck: {e(rel(label))}</title><style>{style}</style></head><body>\n"
            + "\n".join(body) + "\n</body></html>\n")
