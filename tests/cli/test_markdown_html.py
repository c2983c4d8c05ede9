"""`--format markdown` and `--format html`: a summary table and, per violation, a sequence diagram
of the witness: Mermaid in markdown (the diagrams pass a strict structural check of the
sequenceDiagram subset semcheck emits, and round-trip through it unchanged), inline SVG in HTML
(drawn by headless Chromium with no script and no network, when it is installed)."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from ._support import BUGGY, EXAMPLES, semcheck

ID = r"[A-Za-z][A-Za-z0-9_]*"
TEXT = r"(?:[^;#:\n<>{}\"]|#\d+;)+"  # what semcheck's messages and notes may hold: those characters as entity codes
PARTICIPANT = re.compile(rf"^participant ({ID}) as ({TEXT})$")
MESSAGE = re.compile(rf"^({ID})(->>|-->>|->|-->|-x|--x|-\)|--\))({ID}): ({TEXT})$")
ENTITY = re.compile(r"#(\d+);")


def unentity(text: str) -> str:
    """A Mermaid text as Mermaid draws it: `#58;` is `:`."""
    return ENTITY.sub(lambda m: chr(int(m[1])), text)
NOTE = re.compile(rf"^Note (over|left of|right of) ({ID})(?:,({ID}))?: ({TEXT})$")


def parse_sequence_diagram(block: str) -> list[tuple]:
    """The statements of a sequenceDiagram, strictly: anything else raises AssertionError."""
    lines = block.split("\n")
    assert lines[0] == "sequenceDiagram", lines[0]
    declared: list[str] = []
    out: list[tuple] = []
    for line in lines[1:]:
        assert line.startswith("    ") and not line[4:].startswith(" "), repr(line)
        body = line[4:]
        if m := PARTICIPANT.match(body):
            assert m[1] not in declared, f"participant {m[1]} declared twice"
            assert not out or out[-1][0] == "participant", "participants come first"
            declared.append(m[1])
            out.append(("participant", m[1], m[2]))
        elif m := MESSAGE.match(body):
            assert m[1] in declared and m[3] in declared, f"undeclared participant in {body!r}"
            out.append(("message", m[1], m[2], m[3], m[4]))
        elif m := NOTE.match(body):
            assert m[2] in declared and (m[3] is None or m[3] in declared), body
            out.append(("note", m[1], m[2], m[3], m[4]))
        else:
            raise AssertionError(f"not a statement of the sequenceDiagram subset: {body!r}")
        assert out[-1][-1] == out[-1][-1].strip() and out[-1][-1], body
    assert declared, "no participants"
    return out


def emit_sequence_diagram(statements: list[tuple]) -> str:
    lines = ["sequenceDiagram"]
    for s in statements:
        if s[0] == "participant":
            lines.append(f"    participant {s[1]} as {s[2]}")
        elif s[0] == "message":
            lines.append(f"    {s[1]}{s[2]}{s[3]}: {s[4]}")
        else:
            lines.append(f"    Note {s[1]} {s[2]}{',' + s[3] if s[3] else ''}: {s[4]}")
    return "\n".join(lines)


def mermaid_blocks(markdown: str) -> list[str]:
    return re.findall(r"```mermaid\n(.*?)\n```", markdown, flags=re.S)


KERNELS = [BUGGY / "recv_before_send_deadlock.py", BUGGY / "race_wrong_slot_wait.py",
           BUGGY / "two_core_missing_core_index.py", BUGGY / "exit_leak_extra_signal.py"]


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    out = tmp_path_factory.mktemp("reports")
    md = semcheck("verify", *KERNELS, "--devices", "4", "--dma-mode", "on_wait", "--format", "markdown",
                  "--jobs", "2", cwd=EXAMPLES.parent)
    page = out / "report.html"
    html_run = semcheck("verify", *KERNELS, "--devices", "4", "--dma-mode", "on_wait", "--format", "html",
                        "--output", page, "--jobs", "2", cwd=EXAMPLES.parent)
    return md, html_run, page


@pytest.mark.jax
@pytest.mark.rule("REP-31")
def test_markdown_has_a_summary_table_and_a_diagram_per_violation(reports):
    md, _, _ = reports
    assert md.returncode == 1, md.stderr
    text = md.stdout
    table = [line for line in text.splitlines() if line.startswith("|")]
    assert table[0] == "| | file | target | devices | DMA mode | result |"
    columns = {len(re.split(r"(?<!\\)\|", row)) for row in table}
    assert columns == {8}, columns  # every row as wide as the header (pipes in cells escaped)
    assert len(table) == 2 + len(KERNELS)
    blocks = mermaid_blocks(text)
    violations = text.count(" violated: <code>")
    assert len(blocks) == violations >= len(KERNELS)
    for block in blocks:
        assert emit_sequence_diagram(parse_sequence_diagram(block)) == block  # strict, and round-trips
    deadlock = next(b for b in blocks if "BLOCKED" in b)
    statements = parse_sequence_diagram(deadlock)
    never = [s for s in statements if s[0] == "message" and s[2] == "--x"]
    assert never and all("never runs" in s[4] and "line 66" in s[4] for s in never)
    assert {s[2] for s in statements if s[0] == "note"} == {"C0", "C1", "C2", "C3"}
    race = next(b for b in blocks if "RACE" in b)
    assert "line 55" in race and "line 65" in race  # the copy's start and the load
    # REP-31: between them, the wait that does not order them, the line to fix
    notes = [unentity(st[4]) for st in parse_sequence_diagram(race) if st[0] == "note"]
    assert notes[1].startswith("line 64: waits on sems[1], not on sems[0]"), notes
    # and the signal nobody waits for, as a dashed arrow to where it lands, with the count it leaves
    leak = next(b for b in blocks if "left at exit" in b)
    astray = [st for st in parse_sequence_diagram(leak) if st[0] == "message"]
    assert astray and all(st[2] == "-->>" and "line 59" in st[4] and st[1] != st[3] for st in astray), astray
    assert not re.search(r"\('(site|internal|fixed)'", text)


def svg_texts(svg: str) -> list[str]:
    """The texts of an SVG diagram, each as one line (its wrapped lines joined)."""
    return [" ".join(html.unescape(t) for t in re.findall(r"<tspan[^>]*>(.*?)</tspan>", text))
            for text in re.findall(r"<text[^>]*>(.*?)</text>", svg)]


def diagram_texts(block: str) -> list[str]:
    """The texts of a Mermaid diagram as drawn: participants, then messages and notes in order."""
    statements = parse_sequence_diagram(block)
    return ([unentity(s[2]) for s in statements if s[0] == "participant"]
            + [unentity(s[-1]) for s in statements if s[0] != "participant"])


@pytest.mark.jax
@pytest.mark.rule("REP-32")
def test_html_is_one_page_with_the_same_diagrams_as_svg(reports):
    md, run, page = reports
    assert run.returncode == 1, run.stderr
    doc = page.read_text()
    assert doc.startswith("<!DOCTYPE html>") and doc.rstrip().endswith("</html>")
    assert "<script" not in doc and "http" not in doc.lower() and "mermaid" not in doc  # nothing to load or run
    svgs = re.findall(r"<svg class=diagram.*?</svg>", doc, re.S)
    blocks = mermaid_blocks(md.stdout)
    assert len(svgs) == len(blocks) >= len(KERNELS)
    for svg, block in zip(svgs, blocks):  # the same lanes, arrows and notes, in the same order
        texts = svg_texts(svg)
        lanes = [s for s in parse_sequence_diagram(block) if s[0] == "participant"]
        assert texts == diagram_texts(block)
        arrows = [s for s in parse_sequence_diagram(block) if s[0] == "message"]
        assert svg.count("class='arrow ") == len(arrows)
    race = next(svg for svg in svgs if "RACE" in svg)
    assert "buf[0:1, 0:8, 0:128]" in " ".join(svg_texts(race))  # regions as the text report writes them
    # REP-32: marks are words any font draws (REP-22's), not emoji; the line to fix says so, with what to do
    assert not re.search("[\u2700-\u27bf\u2b00-\u2bff\U0001f000-\U0001faff]", doc), "an emoji mark"
    assert doc.count("<span class='mark violated'>FAIL</span>") >= len(KERNELS) * 2  # each heading and row
    fix = re.findall(r"<p class=fix><b>fix here</b> <code>([^<]*)</code>", doc)
    assert "examples/buggy/race_wrong_slot_wait.py:64" in fix, fix
    assert "buf[0:1, 0:8, 0:128]" in md.stdout


def _browser() -> str | None:
    return next((b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)


# Run in the page after it has loaded (a test-only copy of the report: the report itself has no script):
# each diagram's size and its texts' boxes as laid out, what was fetched, and the text a reader sees.
_MEASURE = """<script>
const diagrams = [...document.querySelectorAll("svg.diagram")].map(svg => {
  const r = svg.getBoundingClientRect();
  return {w: r.width, h: r.height, vw: svg.viewBox.baseVal.width, vh: svg.viewBox.baseVal.height,
          shapes: svg.querySelectorAll("line, path, rect").length,
          texts: [...svg.querySelectorAll("text")].map(t => { const b = t.getBBox();
                                                             return [b.x, b.y, b.width, b.height]; })};
});
const pre = document.createElement("pre");
pre.id = "measured";
pre.textContent = JSON.stringify({diagrams, fetched: performance.getEntriesByType("resource").map(e => e.name),
                                  seen: document.body.innerText});
document.body.appendChild(pre);
</script>"""


def render(page: Path, tmp_path: Path) -> dict:
    """`page` laid out by headless Chromium, offline: what `_MEASURE` reports."""
    browser = _browser()
    if browser is None:
        pytest.skip("chromium is not installed: `make chromium` installs it (apt-get install chromium)")
    probe = tmp_path / f"measured-{page.name}"
    probe.write_text(page.read_text().replace("</body>", _MEASURE + "</body>"))
    profile = tmp_path / "profile"
    run = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={profile}", "--proxy-server=127.0.0.1:9",  # any request would fail, and show
         "--window-size=1200,900", "--dump-dom", probe.as_uri()],
        capture_output=True, text=True, timeout=60)
    m = re.search(r'<pre id="measured">(.*?)</pre>', run.stdout, re.S)
    assert m, (run.returncode, run.stderr[-2000:])
    return json.loads(html.unescape(m[1]))


def assert_drawn(measured: dict, n: int) -> None:
    assert len(measured["diagrams"]) == n > 0
    for d in measured["diagrams"]:
        assert d["w"] > 100 and d["h"] > 50 and d["shapes"] > 2, d
        assert (d["w"], d["h"]) == (d["vw"], d["vh"])  # drawn at its own size
        assert d["texts"]
        for x, y, w, h in d["texts"]:  # every text has a size and lies inside its diagram
            assert w > 0 and h > 0
            assert x >= 0 and y >= 0 and x + w <= d["vw"] + 1 and y + h <= d["vh"] + 1, (x, y, w, h, d["vw"], d["vh"])
    assert measured["fetched"] == []
    seen = measured["seen"]
    assert not re.search(r"sequenceDiagram|participant |->>|--x|Note over|```", seen)  # no diagram source


@pytest.mark.jax
def test_the_html_renders_offline_in_a_headless_browser(reports, tmp_path):
    """Every diagram of the page, drawn by a real browser with no network and no script: each SVG has a
    size, every text in it a box inside it, nothing was fetched and no diagram source shows."""
    _, run, page = reports
    assert_drawn(render(page, tmp_path), page.read_text().count("<svg class=diagram"))


@pytest.mark.jax
def test_markdown_and_html_lead_with_the_findings_and_say_where_the_modes_differ(tmp_path):
    """The TPU-only hang: its diagnosis, then where interpret mode and a TPU differ (once per target,
    over both device counts) with the line that explains it, and only then the table."""
    args = ("verify", "examples/buggy/two_core_signal_hangs_on_tpu.py", "--devices", "2,4")
    md = semcheck(*args, "--format", "markdown", cwd=EXAMPLES.parent)
    page = tmp_path / "report.html"
    html_run = semcheck(*args, "--format", "html", "--output", page, cwd=EXAMPLES.parent)
    assert md.returncode == html_run.returncode == 1, (md.stderr, html_run.stderr)
    text = md.stdout
    finding = text.index("### ❌ deadlock-free violated: <code>examples/buggy/two_core_signal_hangs_on_tpu.py</code> build, "
                         "2 devices, hardware")
    differ = text.index("### 🔀 modes differ: <code>examples/buggy/two_core_signal_hangs_on_tpu.py</code> build")
    table = text.index("| | file | target | devices | DMA mode | result |")
    assert finding < differ < table
    assert text.count("modes differ") == 1
    section = text[differ:table]
    assert "- deadlock-free: violated on hardware; proved under eager, on_wait (2, 4 devices)" in section
    assert "can explain it, **D1**: in interpret mode a signal without core_index goes to core 0" in section
    # kernel text is <code> (REP-1)
    assert ("<code>examples/buggy/two_core_signal_hangs_on_tpu.py:57</code>: <code>pl.semaphore_signal(ready, 1)"
            in section)
    page_text = html.unescape(page.read_text())
    h_finding = page_text.index("deadlock-free violated: <code>examples/buggy/two_core_signal_hangs_on_tpu.py</code>")
    h_differ = page_text.index("modes differ: <code>examples/buggy/two_core_signal_hangs_on_tpu.py</code> build")
    h_table = page_text.index("<table>")
    assert h_finding < h_differ < h_table
    assert "<code>examples/buggy/two_core_signal_hangs_on_tpu.py:57</code>" in page_text[h_differ:h_table]
    # the misrouted signal is an arrow: core 1's signal at line 57 goes back to core 1, not to core 0
    block = next(b for b in mermaid_blocks(text) if "BLOCKED" in b)
    astray = [s for s in parse_sequence_diagram(block) if s[0] == "message" and s[2] == "-->>"]
    assert astray and all(s[1] == s[3] and "line 57" in s[4] and "core 0" in unentity(s[4]) for s in astray)
    lanes = {s[1]: s[2] for s in parse_sequence_diagram(block) if s[0] == "participant"}
    assert {lanes[s[1]] for s in astray} >= {"device 0 core 1"}
    svg = re.search(r"<svg class=diagram.*?</svg>", page.read_text(), re.S)[0]
    assert svg.count("class='arrow astray'") == len(astray)
    assert "signal +1, line 57, goes to itself, not to device 0 core 0" in " ".join(svg_texts(svg))
    assert_drawn(render(page, tmp_path), 1)
