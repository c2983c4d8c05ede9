"""The README's quick start shows real output: re-run each command it shows and check that every
verdict line shown (a configuration's line, a finding's title, the summary) and the exit code are
what the command prints now."""

from __future__ import annotations

import re
import shlex

import pytest

from ._support import REPO, semcheck_many

# the terminal's marks, as a pipe shows them (specs/deciding/report.md REP-22)
PLAIN = {"✓": "ok", "✗": "FAIL", "?": "??", "○": "vac", "⊘": "n/a", "≠": "!="}
VERDICT = re.compile(r"^(✓|✗|\?|○|⊘|≠|ok|FAIL|\?\?|vac|n/a|!=) ")


def shown_commands() -> list[tuple[list[str], list[str], int | None]]:
    """(argv after `semcheck`, the output lines shown, the exit code shown or None) per README command."""
    out, blocks, block = [], [], None
    for line in (REPO / "README.md").read_text().splitlines():
        if line.startswith("```"):
            if block is None:
                block = []
            else:
                blocks.append(block)
                block = None
        elif block is not None:
            block.append(line)
    for lines in blocks:
        for i, line in enumerate(lines):
            if not line.startswith("$ .venv/bin/semcheck "):
                continue
            end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("$ ")), len(lines))
            code = None
            if end < len(lines) and lines[end] == "$ echo $?":
                code = int(lines[end + 1])
            out.append((shlex.split(line[2:])[1:], lines[i + 1:end], code))
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


def test_the_readme_quick_start_shows_what_semcheck_prints():
    # the commands shown with verdict lines (one shown with only its last, summary-free line is not run)
    commands = [c for c in shown_commands() if verdict_lines(c[1])]
    assert len(commands) >= 2, "the README's quick start shows no semcheck command"
    runs = semcheck_many([(tuple(argv), {"cwd": REPO}) for argv, _, _ in commands])
    for (argv, shown, code), run in zip(commands, runs, strict=True):
        want, got = verdict_lines(shown), verdict_lines(run.stdout.splitlines())
        if "..." in shown:  # an elided listing: the lines shown, in order
            assert is_subsequence(want, got), (argv, want, got)
        else:
            assert want == got, argv
        if code is not None:
            assert run.returncode == code, (argv, run.stderr)


def project_urls() -> dict[str, str]:
    import tomllib

    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["urls"]


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
