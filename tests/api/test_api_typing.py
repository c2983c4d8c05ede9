"""The public API is typed (specs/deciding/report.md REP-4): `mypy --strict` accepts a user script that uses
all of it, and rejects one that passes a DMA mode that is none; at run time that mode is an
`InputError` with one message."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import get_args

import pytest
from hypothesis import given
from hypothesis import strategies as st

import semcheck

# A user's script: every public name, each result's fields, the decorator's kept type. It is only
# type-checked, never run. `assert_type` fails on `Any`, so a result type that erodes to Any fails.
GOOD = '''
from __future__ import annotations

from typing import Any, assert_type

import semcheck
from semcheck.model.ops import Program
from semcheck.testing import VerificationError, assert_verified, verify_target


@semcheck.target
def ring(num_devices: int) -> tuple[object, tuple[int, ...]]:
    return object(), (num_devices,)


@semcheck.target(devices=[2, 4], cores=1, name="pipe")
def pipe(num_devices: int, value: list[int]) -> tuple[object, tuple[int, ...]]:
    return object(), (num_devices, *value)


assert_type(ring(2), tuple[object, tuple[int, ...]])
assert_type(pipe(2, [1]), tuple[object, tuple[int, ...]])

mode: semcheck.DmaMode = "on_wait"
choice: semcheck.DmaModeOption = "all"
fmt: semcheck.Format = "sarif"
version: str = semcheck.__version__


def summarise(found: semcheck.Findings) -> list[str]:
    lines = []
    for result in found.results:
        assert_type(result, semcheck.Result)
        assert_type(result.dma_mode, semcheck.DmaMode)
        for v in result.verdicts:
            kind: semcheck.VerdictKind = v.verdict
            where = ""
            if v.witness is not None:
                assert_type(v.witness, semcheck.Witness)
                where = ", ".join(f"{loc.file}:{loc.line}" for loc in v.witness.locs)
            if v.input is not None:
                assert_type(v.input, semcheck.GeneratedInput)
            lines.append(f"{result.target} {result.devices} {result.dma_mode} {v.property} {kind} {v.reason} {where}")
    for note in found.notes:
        assert_type(note, semcheck.Note)
        loc: semcheck.Loc | None = note.loc
        lines.append(f"{note.code}: {note.message} {loc}")
    return lines


def main() -> None:
    try:
        found = semcheck.check("kernels/ring.py", devices=[2], dma_mode=["eager", "hardware"],
                               properties=["deadlock-free"], timeout=60.0, jobs=1, cache=False)
    except semcheck.InputError as e:
        print(e.code, e.message, e.one_line())
        return
    assert_type(found, semcheck.Findings)
    print(summarise(found), semcheck.check(ring, devices=2, dma_mode=choice))
    text: str = semcheck.render(found, "kernels/ring.py", fmt) + semcheck.render(found, "kernels/ring.py")
    print(text)
    try:
        report = assert_verified("kernels/ring.py::ring", devices=(2, 4), dma_mode=mode)
        assert_type(report, dict[str, Any])
    except VerificationError as e:
        print(e.code, e.report)
    data, text, code = verify_target(pipe)
    print(data, text + str(code))


def one_program(program: Program) -> list[semcheck.Verdict]:
    return semcheck.check_program(program, "hardware", ["deadlock-free"], timeout_ms=1000)
'''

# The same, with a DMA mode that is none, a target called with what it does not take, a format that is none.
BAD = '''
import semcheck


@semcheck.target(devices=[2])
def ring(num_devices: int) -> tuple[object, tuple[int, ...]]:
    return object(), (num_devices,)


found = semcheck.check("kernels/ring.py", dma_mode="hardwre")
ring("two")
semcheck.render(found, "kernels/ring.py", "xml")
'''


def _site(root: Path) -> Path:
    """The package as installed (semcheck, semcheck.model, semcheck.checker), as a tree mypy can read.

    An editable install maps `semcheck.model` to `model/` with an import hook, which mypy does not
    follow; symlinks to where the packages load from work for a wheel's install and an editable one."""
    import semcheck.checker
    import semcheck.model

    pkg = root / "semcheck"
    pkg.mkdir(parents=True)
    src = Path(semcheck.__path__[0])
    for entry in src.iterdir():
        if entry.name != "__pycache__":
            (pkg / entry.name).symlink_to(entry)
    (pkg / "model").symlink_to(semcheck.model.__path__[0])
    (pkg / "checker").symlink_to(semcheck.checker.__path__[0])
    return root


# semcheck's own modules are read (silently: the user's script is what is checked); every other
# package, numpy's stubs included, is skipped: the public API exposes none of their types, and
# reading numpy's stubs alone takes longer than the rest
MYPY_INI = """
[mypy]
strict = True
mypy_path = {site}
follow_imports = skip
[mypy-numpy,numpy.*]
follow_imports_for_stubs = True
[mypy-semcheck,semcheck.*]
follow_imports = silent
"""


def _readme_example() -> str:
    """The README's Python example of the API (its section "In your own CI")."""
    text = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## In your own CI"):]
    return section[section.index("```python\n") + len("```python\n"):section.index("\n```\n")] + "\n"


SCRIPTS = ("good.py", "bad.py", "readme.py")


@pytest.fixture(scope="module")
def mypy_lines(tmp_path_factory) -> dict[str, list[str]]:
    """mypy --strict on both scripts, in one run: each script's error lines."""
    pytest.importorskip("mypy", reason="the typing test needs mypy (pip install -e '.[test]')")
    root = tmp_path_factory.mktemp("typing")
    site = _site(root / "site")
    (root / "good.py").write_text(textwrap.dedent(GOOD))
    (root / "bad.py").write_text(textwrap.dedent(BAD))
    (root / "readme.py").write_text(_readme_example())
    (root / "mypy.ini").write_text(MYPY_INI.format(site=site))
    run = subprocess.run([sys.executable, "-m", "mypy", "--config-file", "mypy.ini", "--cache-dir",
                          str(root / "cache"), "--no-error-summary", "--hide-error-context", *SCRIPTS],
                         cwd=root, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
                         env={k: v for k, v in os.environ.items() if k != "MYPYPATH"})
    assert run.returncode in (0, 1), run.stdout + run.stderr  # 2: mypy itself could not run
    out: dict[str, list[str]] = {name: [] for name in SCRIPTS}
    for line in run.stdout.splitlines():
        name = line.split(":", 1)[0]
        assert name in out, run.stdout  # an error in semcheck's own files would be one here
        out[name].append(line)
    return out


@pytest.mark.rule("REP-4")
def test_mypy_strict_accepts_a_script_that_uses_the_whole_api(mypy_lines):
    assert mypy_lines["good.py"] == []
    assert mypy_lines["readme.py"] == []  # the README's example too


@pytest.mark.rule("REP-4")
def test_mypy_strict_rejects_a_dma_mode_that_is_none_and_a_wrong_target_call(mypy_lines):
    bad = mypy_lines["bad.py"]
    lines = textwrap.dedent(BAD).splitlines()
    mode_line = 1 + next(i for i, x in enumerate(lines) if "hardwre" in x)
    call_line = 1 + next(i for i, x in enumerate(lines) if 'ring("two")' in x)
    assert len(bad) == 3, bad
    assert bad[0].startswith(f"bad.py:{mode_line}: error: ") and '"dma_mode"' in bad[0] and "hardwre" in bad[0], bad
    # the decorator kept `ring`'s signature: a str where an int goes is an error
    assert bad[1].startswith(f"bad.py:{call_line}: error: ") and '"ring"' in bad[1] and '"int"' in bad[1], bad
    assert bad[2].startswith(f"bad.py:{call_line + 1}: error: ") and '"render"' in bad[2] and "xml" in bad[2], bad


@pytest.mark.rule("REP-4")
@pytest.mark.parametrize("kwargs, says", [
    ({"dma_mode": "hardwre"}, "dma_mode: 'hardwre' is not one of eager, on_wait, hardware or all"),
    ({"dma_mode": ["eager", "lazy"]}, "dma_mode: 'lazy' is not one of"),
    ({"dma_mode": 3}, "dma_mode: expected a mode or a list of modes"),
    ({"devices": 0}, "device count 0"),
    ({"properties": ["no-such-property"]}, "no-such-property: not a property"),
    ({"properties": "deadlock-free"}, "a non-empty list of property ids"),
])
def test_a_bad_argument_is_an_input_error_with_one_message(tmp_path, monkeypatch, kwargs, says):
    monkeypatch.chdir(tmp_path)  # no project table: only the argument is wrong
    (tmp_path / "k.py").write_text("def build(n):\n    return None\n")
    with pytest.raises(semcheck.InputError) as info:
        semcheck.check("k.py", **kwargs)
    assert info.value.code == "usage" and says in info.value.message
    assert "\n" not in info.value.one_line()


MODE_WORDS = st.sampled_from(["eager", "on_wait", "hardware", "all", "hardwre", "", "Eager", "on-wait"])


@pytest.mark.rule("REP-4")
@given(value=MODE_WORDS | st.lists(MODE_WORDS, max_size=4) | st.sampled_from([None, 3, ("eager",), [1]]))
def test_a_dma_mode_is_read_one_way_by_the_api(tmp_path_factory, value):
    """The API's `dma_mode` goes through the loader's one reader: the modes named, in the checker's order
    (all of them for `all`), or one usage error naming the argument and the first value that is none."""
    from semcheck._api import settings
    from semcheck.model.ops import DMA_MODES

    items = [value] if isinstance(value, str) else list(value) if isinstance(value, (list, tuple)) else None
    try:
        got = settings(str(tmp_path_factory.getbasetemp()), dma_mode=value).modes  # type: ignore[arg-type]
    except semcheck.InputError as e:
        assert e.code == "usage" and e.message.startswith("dma_mode: ") and "\n" not in e.message
        bad = [m for m in items or () if m not in (*DMA_MODES, "all")]
        assert not items or (bad and repr(bad[0]) in e.message), e.message
        return
    assert value is None or (items and all(m in (*DMA_MODES, "all") for m in items))
    want = DMA_MODES if value is None or "all" in items else tuple(m for m in DMA_MODES if m in items)
    assert got == want


@pytest.mark.rule("REP-4")
def test_findings_render_in_every_format_and_a_format_that_is_none_is_an_input_error():
    import json

    empty = semcheck.Findings([])
    assert json.loads(semcheck.render(empty, "k.py", "json"))["summary"] == {"proved": 0, "violated": 0, "unknown": 0}
    for fmt in get_args(semcheck.Format):
        assert semcheck.render(empty, "k.py", fmt).endswith("\n")
    with pytest.raises(semcheck.InputError, match="format: 'xml' is not one of text, concise"):
        semcheck.render(empty, "k.py", "xml")  # type: ignore[arg-type]


def test_program_checks_take_one_mode():
    from semcheck.model.ops import Program

    with pytest.raises(semcheck.InputError, match="one mode of a program at a time"):
        semcheck.check_program(Program.__new__(Program), "all")  # type: ignore[arg-type]


def test_the_literals_are_the_modes_and_formats_the_checker_knows():
    from semcheck.checker.run.cli import FORMATS
    from semcheck.model.ops import DMA_MODES

    assert get_args(semcheck.DmaMode) == DMA_MODES
    assert list(get_args(semcheck.Format)) == FORMATS
    assert (Path(semcheck.__file__).parent / "py.typed").is_file()
