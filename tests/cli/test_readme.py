"""The README shows real output: re-run each command it shows and check that every verdict line
shown (a configuration's line, a finding's title, the summary; every line of `--format concise`) and
the exit code are what the command prints now. `$ .venv/bin/semcheck ...` runs in this checkout;
`$ semcheck ...` (the quick start, REP-30's newcomer path) runs in a fresh directory holding the
README's own kernel files (each python block whose first line is `# NAME.py: ...`), as written, or
with the fix the README describes when a `<!-- ... copy.wait_recv() added -->` comment precedes
the block."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

import pytest

from ._support import REPO, semcheck_many

# the terminal's marks, as a pipe shows them (specs/deciding/report.md REP-22)
PLAIN = {"✓": "ok", "✗": "FAIL", "?": "??", "○": "vac", "⊘": "n/a", "≠": "!="}
VERDICT = re.compile(r"^(✓|✗|\?|○|⊘|≠|ok|FAIL|\?\?|vac|n/a|!=) ")


FIXED = "copy.wait_recv() added"  # the comment that marks a block run on the fixed quick-start kernel


def readme_blocks() -> list[tuple[str, list[str]]]:
    """(the last non-blank line before the block, its lines) per fenced block of the README."""
    out, block, before, last = [], None, "", ""
    for line in (REPO / "README.md").read_text().splitlines():
        if line.lstrip().startswith("```"):
            if block is None:
                block, before = [], last
            else:
                out.append((before, block))
                block = None
        elif block is not None:
            block.append(line)
        elif line.strip():
            last = line.strip()
    return out


def readme_files() -> dict[str, str]:
    """The kernel files the README writes out: python blocks whose first line is `# NAME.py: ...`."""
    out = {}
    for _, lines in readme_blocks():
        m = re.match(r"# (\w+\.py): ", lines[0]) if lines else None
        if m:
            out[m[1]] = "\n".join(lines) + "\n"
    return out


def shown_commands() -> list[tuple[list[str], list[str], int | None, str]]:
    """(argv after `semcheck`, the output lines shown, the exit code shown or None, where it runs:
    "repo", "as-written" or "fixed") per README command."""
    out = []
    for before, lines in readme_blocks():
        for i, line in enumerate(lines):
            if line.startswith("$ .venv/bin/semcheck "):
                where = "repo"
            elif line.startswith("$ semcheck "):
                where = "fixed" if FIXED in before else "as-written"
            else:
                continue
            end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("$ ")), len(lines))
            code = None
            if end < len(lines) and lines[end] == "$ echo $?":
                code = int(lines[end + 1])
            out.append((shlex.split(line[2:])[1:], lines[i + 1:end], code, where))
    return out


def verdict_lines(lines: list[str]) -> list[str]:
    """The verdict lines, with plain marks, no rule after a title, no `(cached)`, spaces collapsed."""
    out = []
    for line in lines:
        if not VERDICT.match(line):
            continue
        mark, rest = line.split(" ", 1)
        text = f"{PLAIN.get(mark, mark)} {rest}".replace("(cached)", "")
        out.append(" ".join(text.rstrip("─- ").split()))
    return out


def is_subsequence(part: list[str], whole: list[str]) -> bool:
    it = iter(whole)
    return all(any(x == y for y in it) for x in part)


def quick_start_dirs(tmp: Path) -> dict[str, Path]:
    """The README's kernel files in a directory as written, and in another with the fix it describes."""
    files = readme_files()
    assert files, "the README writes out no kernel file"
    dirs = {"as-written": tmp / "as-written", "fixed": tmp / "fixed"}
    for d in dirs.values():
        d.mkdir()
    for name, text in files.items():
        (dirs["as-written"] / name).write_text(text)
        fixed = text.replace("    copy.wait_send()\n", "    copy.wait_send()\n    copy.wait_recv()\n")
        assert fixed != text, "the quick start's fix no longer applies"
        (dirs["fixed"] / name).write_text(fixed)
    return {**dirs, "repo": REPO}


@pytest.mark.rule("REP-30")
def test_the_readme_shows_what_semcheck_prints(tmp_path):
    # the commands shown with verdict lines (one shown with only its last, summary-free line is not run)
    commands = [c for c in shown_commands() if verdict_lines(c[1]) or "concise" in c[0]]
    assert len(commands) >= 3, "the README shows too few semcheck commands"
    assert {c[3] for c in commands} >= {"as-written", "fixed"}, "the quick start runs nothing"
    dirs = quick_start_dirs(tmp_path)
    runs = semcheck_many([(tuple(argv), {"cwd": dirs[where]}) for argv, _, _, where in commands])
    for (argv, shown, code, _), run in zip(commands, runs, strict=True):
        if "concise" in argv:  # one line per finding, and the summary: every line as shown
            assert [x.rstrip() for x in shown] == run.stdout.rstrip("\n").splitlines(), (argv, run.stdout)
        else:
            want, got = verdict_lines(shown), verdict_lines(run.stdout.splitlines())
            if "..." in shown:  # an elided listing: the lines shown, in order
                assert is_subsequence(want, got), (argv, want, got)
            else:
                assert want == got, argv
        if code is not None:
            assert run.returncode == code, (argv, run.stderr)


def test_what_the_readme_tells_a_newcomer_to_use_exists():
    text = (REPO / "README.md").read_text()
    makefile = (REPO / "Makefile").read_text()
    assert "make wheel" in text and re.search(r"^wheel:", makefile, re.M)
    assert "semcheck[inputs]" in text and "inputs" in project_optional()
    workflow = REPO / ".github" / "workflows" / "semcheck.yml"
    assert ".github/workflows/semcheck.yml" in text and workflow.is_file()
    hooks = set(re.findall(r"^- id: ([\w-]+)", (REPO / ".pre-commit-hooks.yaml").read_text(), re.M))
    shown = set(re.findall(r"- id: ([\w-]+)", text))
    assert shown and shown <= hooks, (shown, hooks)
    # the two set-up commands come first, before anything is installed by hand
    assert text.index("make demo") < text.index("make test") < text.index("pip install")


def project_urls() -> dict[str, str]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["urls"]


def project_optional() -> dict[str, list[str]]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]


@pytest.mark.rule("REP-28")
def test_the_project_has_one_url_and_sarif_reads_it_from_the_installed_metadata():
    from semcheck.checker.report.render import to_sarif

    urls = project_urls()
    home = urls["Homepage"]
    assert urls["Repository"] == home and urls["Documentation"].startswith(home), urls
    # every page that tells a user where semcheck comes from names that URL, and no placeholder
    for name in ("README.md", ".pre-commit-hooks.yaml", ".github/workflows/semcheck.yml"):
        text = (REPO / name).read_text()
        named = set(re.findall(r"https://github\.com/[\w.-]+/[\w.-]+?(?=[@/\s\"#]|$)", text))
        assert named == {home}, (name, named)
        assert "OWNER" not in text, name
    # SARIF's informationUri comes from the installed package, whose metadata is the pyproject's
    driver = to_sarif("k.py", [], "0")["runs"][0]["tool"]["driver"]
    assert driver["informationUri"] == home
    assert all(r["helpUri"].startswith(f"{home}/blob/") for r in driver["rules"])
