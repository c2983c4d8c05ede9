"""`--format markdown` and `--format html`: a summary table and, per violation, a Mermaid
sequence diagram of the witness; the diagrams pass a strict structural check of the
sequenceDiagram subset semcheck emits, and round-trip through it unchanged."""

from __future__ import annotations

import html
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from ._support import BUGGY, EXAMPLES, semcheck

ID = r"[A-Za-z][A-Za-z0-9_]*"
TEXT = r"[^;#:\n<>{}\"]+"  # what semcheck's messages and notes may hold
PARTICIPANT = re.compile(rf"^participant ({ID}) as ({TEXT})$")
MESSAGE = re.compile(rf"^({ID})(->>|-->>|->|-->|-x|--x|-\)|--\))({ID}): ({TEXT})$")
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
    env = {"SEMCHECK_MERMAID_JS": str(_mermaid_js())} if _mermaid_js() else {}
    html_run = semcheck("verify", *KERNELS, "--devices", "4", "--dma-mode", "on_wait", "--format", "html",
                        "--output", page, "--jobs", "2", cwd=EXAMPLES.parent, extra_env=env)
    return md, html_run, page


@pytest.mark.jax
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
    violations = text.count(" violated: `")
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
    assert not re.search(r"\('(site|internal|fixed)'", text)


@pytest.mark.jax
def test_html_is_one_page_with_the_same_diagrams(reports):
    md, run, page = reports
    assert run.returncode == 1, run.stderr
    doc = page.read_text()
    assert doc.startswith("<!DOCTYPE html>") and doc.rstrip().endswith("</html>")
    diagrams = [html.unescape(d).strip("\n") for d in re.findall(r"<pre class=mermaid>\n(.*?)\n</pre>", doc, re.S)]
    assert diagrams == mermaid_blocks(md.stdout)
    assert "mermaid.initialize" in doc
    if not _mermaid_js():
        assert 'src="https://cdn.jsdelivr.net/npm/mermaid@11/dist/mermaid.min.js"' in doc


def _mermaid_js() -> Path | None:
    """A local copy of the published mermaid.min.js (SEMCHECK_MERMAID_JS, or an npm install of `mermaid`
    named by SEMCHECK_TEST_NODE_MODULES), for rendering without the network."""
    for p in (os.environ.get("SEMCHECK_MERMAID_JS"),
              os.path.join(os.environ.get("SEMCHECK_TEST_NODE_MODULES", "/nonexistent"), "mermaid/dist/mermaid.min.js")):
        if p and os.path.isfile(p):
            return Path(p)
    return None


def _browser() -> str | None:
    return next((b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)


@pytest.mark.jax
def test_the_html_renders_in_a_headless_browser(reports, tmp_path):
    """The page, with Mermaid inlined, drawn by a real headless browser: every diagram becomes an SVG."""
    browser = _browser()
    if browser is None or _mermaid_js() is None:
        pytest.skip("needs chromium and a local mermaid.min.js (SEMCHECK_MERMAID_JS or SEMCHECK_TEST_NODE_MODULES)")
    _, run, page = reports
    dom = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=10000",
                          "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120).stdout
    drawn = re.findall(r'<svg[^>]*aria-roledescription="sequence"', dom)
    assert len(drawn) == page.read_text().count("<pre class=mermaid>"), dom[-3000:]
    assert 'aria-roledescription="error"' not in dom  # Mermaid draws a parse error as an "error" diagram
    shot = tmp_path / "report.png"
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=10000",
                    "--window-size=1400,3000", f"--screenshot={shot}", page.as_uri()],
                   capture_output=True, timeout=120)
    assert shot.is_file() and shot.stat().st_size > 10_000


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
    finding = text.index("### ❌ deadlock-free violated: `examples/buggy/two_core_signal_hangs_on_tpu.py` build, "
                         "2 devices, hardware")
    differ = text.index("### ❓ modes differ: `examples/buggy/two_core_signal_hangs_on_tpu.py` build")
    table = text.index("| | file | target | devices | DMA mode | result |")
    assert finding < differ < table
    assert text.count("modes differ") == 1
    section = text[differ:table]
    assert "- deadlock-free: violated on hardware; proved under eager, on_wait (2, 4 devices)" in section
    assert "can explain it, **D1**: in interpret mode a signal without core_index goes to core 0" in section
    assert "`examples/buggy/two_core_signal_hangs_on_tpu.py:57`: `pl.semaphore_signal(ready, 1)" in section
    page_text = html.unescape(page.read_text())
    h_finding = page_text.index("deadlock-free violated: <code>examples/buggy/two_core_signal_hangs_on_tpu.py</code>")
    h_differ = page_text.index("modes differ: <code>examples/buggy/two_core_signal_hangs_on_tpu.py</code> build")
    h_table = page_text.index("<table>")
    assert h_finding < h_differ < h_table
    assert "<code>examples/buggy/two_core_signal_hangs_on_tpu.py:57</code>" in page_text[h_differ:h_table]
