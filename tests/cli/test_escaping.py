"""Hostile names through every format and stream (specs/deciding/report.md REP-1).

A kernel controls file names, target names and the text of its exceptions. Drawn from the
characters that mean something to markdown, HTML, a table row, a line-oriented log or GitHub's
workflow commands, a name must come out of each format as exactly its characters: markdown and
HTML with the same structure as for a plain name, JSON and SARIF holding it exactly, and no line
of text, concise, github or stderr that the name starts or breaks."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import urllib.parse
from html.parser import HTMLParser

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from semcheck.checker.properties.registry import IDS
from semcheck.checker.properties.verdict import Verdict, Witness
from semcheck.checker.report import render
from semcheck.checker.report.console import LineConsole
from semcheck.checker.run.request import InputError, Result
from semcheck.model.ops import Loc

pytestmark = pytest.mark.rule("REP-1")

DANGEROUS = ["<", ">", "&", '"', "'", "`", "|", "*", "_", "[", "]", "(", ")", "\n", "\r", "::", ":", "%", ",",
             "#", "-", " ", "\t", "\x1b", "\u2028", "é", "→", "😀", "a", "k", "::error file=x,line=1::boom\n"]
# a valid Linux file name: no `/`, no NUL, not `.` or `..`, at most 255 bytes with ".py"
names = (st.lists(st.sampled_from(DANGEROUS), min_size=1, max_size=12).map("".join)
         .filter(lambda s: s not in (".", "..") and len(s.encode()) <= 240))
FORMATS = ("json", "sarif", "concise", "github", "markdown", "html")
ANNOTATION = re.compile(r"^::(error|warning|notice) ([^:\n]*)::")


def _files(name: str, target: str) -> list[render.FileReport]:
    """Two kernel files named `name`: one with a violation, an unknown and proofs of target
    `target` (witness and reason quoting the name), one that could not be verified."""
    path = f"kernels/{name}.py"
    loc = Loc(os.path.abspath(path), 3, f"pl.semaphore_wait({target})")
    witness = Witness(message=f"deadlock: {target} blocks at {path}:3", locs=(loc,),
                      details={"explanation": [f"{target} waits", f"in {name}"]})
    verdicts = [Verdict("deadlock-free", "violated", witness=witness),
                Verdict("exit-balance", "unknown", reason=f"unsupported construct in {name}: {target}")]
    verdicts += [Verdict(p, "proved") for p in IDS if p not in ("deadlock-free", "exit-balance")]
    broken = InputError("kernel-raised", f"kernel raised: ValueError: {name}", file=f"other/{name}.py")
    return [render.FileReport(path, [Result(target, 2, "hardware", verdicts)]),
            render.FileReport(f"other/{name}.py", [], error=broken)]


def _text(files) -> str:
    buf = io.StringIO()
    render.render_files(LineConsole(file=buf, width=80, no_color=True, highlight=False, soft_wrap=True), files)
    return buf.getvalue()


def _outputs(name: str, target: str) -> dict[str, str]:
    files = _files(name, target)
    out = {fmt: render.render(fmt, "kernels", files, "0") for fmt in FORMATS}
    out["text"] = _text(files)
    return out


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.data: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)

    def handle_endtag(self, tag):
        self.tags.append("/" + tag)

    def handle_data(self, data):
        self.data.append(data)


def _html(page: str) -> _Tags:
    p = _Tags()
    p.feed(page)
    p.close()
    return p


def _outside_fences(md: str) -> list[str]:
    """The markdown's lines that are not inside a fenced code block."""
    out, fence = [], None
    for x in md.split("\n"):
        m = re.match(r"^(`{3,})", x)
        if fence is None and m:
            fence = m.group(1)
        elif fence is not None and x.startswith(fence) and not x.strip("`"):
            fence = None
        elif fence is None:
            out.append(x)
    return out


def _starts_a_command(x: str) -> bool:
    return x.lstrip().startswith("::")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=names, target=names)
def test_hostile_names_keep_every_format_whole(name, target):
    plain = _outputs("ring", "build")
    out = _outputs(name, target)
    # HTML: the same elements as for a plain name; the name is in the text, exactly
    page = _html(out["html"])
    assert page.tags == _html(plain["html"]).tags
    assert name in "".join(page.data) and target in "".join(page.data)
    # markdown: no raw `<` from the name outside code blocks (only semcheck's <code>), no broken row
    md = out["markdown"]
    assert len(md.split("\n")) == len(plain["markdown"].split("\n"))
    for x in _outside_fences(md):
        assert "<" not in re.sub(r"</?code>", "", x), x
        if x.startswith("|"):
            assert x.count("|") == 7, x
    # JSON and SARIF hold the exact name
    data = json.loads(out["json"])
    assert {f"kernels/{name}.py", f"other/{name}.py"} <= {r.get("file") for r in data["results"] + data["errors"]}
    assert target in {r["target"] for r in data["results"]}
    sarif = json.loads(out["sarif"])
    results = sarif["runs"][0]["results"]
    uris = {urllib.parse.unquote(loc["physicalLocation"]["artifactLocation"]["uri"])
            for r in results for loc in r["locations"]}
    assert f"kernels/{name}.py" in uris and f"other/{name}.py" in uris
    assert all(":" not in u.split("/")[0] for r in results for loc in r["locations"]
               for u in [loc["physicalLocation"]["artifactLocation"]["uri"]])  # no scheme read into a path
    assert target in {r["properties"].get("target") for r in results}
    # line outputs: as many lines as for a plain name, none starting a workflow command but
    # semcheck's own annotations, whose properties hold no `::` and whose data no raw newline
    for fmt in ("text", "concise", "github"):
        assert len(out[fmt].split("\n")) == len(plain[fmt].split("\n")), fmt
        for x in out[fmt].split("\n"):
            if fmt == "github" and ANNOTATION.match(x):
                assert "::" not in ANNOTATION.match(x).group(2)
                continue
            assert not _starts_a_command(x), (fmt, x)
    # every output: no line the name starts with `::` (json, sarif, markdown and html included)
    for fmt in ("json", "sarif", "markdown", "html"):
        assert not any(_starts_a_command(x) for x in out[fmt].split("\n")), fmt


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=names)
def test_hostile_file_names_on_stderr_and_in_every_format_of_the_cli(tmp_path_factory, name):
    """A kernel file that cannot be verified (a syntax error): one line on stderr, the file named."""
    from semcheck.checker.run.cli import main

    root = tmp_path_factory.mktemp("hostile")
    (root / f"{name}.py").write_text("def (:\n")
    for fmt in ("text", *FORMATS):
        stdout, stderr = io.StringIO(), io.StringIO()
        with contextlib.chdir(root), contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            code = main(["verify", "--no-config", "--no-cache", "--format", fmt, "--color", "never", "--",
                             f"{name}.py"])  # `--`: a name may start with `-`
        assert code == 2, stderr.getvalue()
        err = stderr.getvalue().split("\n")
        assert len(err) == 2 and err[0].startswith("semcheck: syntax-error"), err
        for x in err + stdout.getvalue().split("\n"):
            if fmt == "github" and ANNOTATION.match(x):
                continue
            assert not _starts_a_command(x), (fmt, x)
        if fmt == "json":
            assert json.loads(stdout.getvalue())["errors"][0]["file"] == f"{name}.py"


def test_a_file_named_like_a_selector_is_a_path_in_directory_mode(tmp_path):
    """Discovery yields `a::b.py` as a path; it is not read as file `a`, target `b.py`."""
    from semcheck.checker.run.planning import discover

    (tmp_path / "a::b.py").write_text("import semcheck\n\n@semcheck.target\ndef k(n):\n    return None\n")
    files, _ = discover([str(tmp_path)])
    assert files == [str(tmp_path / "a::b.py")]
    from semcheck._api import resolve

    assert resolve(str(tmp_path / "a::b.py")) == (str(tmp_path / "a::b.py"), None)
    assert resolve(str(tmp_path / "a.py::k")) == (str(tmp_path / "a.py"), "k")


@pytest.mark.parametrize("text, expected", [
    ("a\nb", "a\u240ab"), ("x\r", "x\u240d"), ("::error::x", ":\ua789error::x"), ("  ::e", "  :\ua789e"),
    ("a::b", "a::b"), ("\x1b[31m", "\u241b[31m"),
])
def test_line_shows_control_characters_and_breaks_a_leading_command(text, expected):
    from semcheck.checker.report.escape import line

    assert line(text) == expected and len(line(text)) == len(text)
