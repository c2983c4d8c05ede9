"""No internal keys in any report (issue 26.4): what the lowering and the checks use to tell things
apart -- allocation-site tuples, run_scoped labels with their counters, op indices, renamed labels
of a program's kernel calls, global core numbers in one-core kernels -- never reaches a reader.

Each kernel file is verified once (the CLI's own path, in this process, `--format json`); every
format is then rendered from the same results, so a format cannot leak what another hides. The
default run covers a representative set of examples (every property checked, one file per kind
of label); the slow variant verifies every example directory.
"""

from __future__ import annotations

import html
import io
import json
import re
from pathlib import Path

import pytest

from ._support import EXAMPLES, REPO

FORMATS = ("json", "sarif", "concise", "github", "markdown", "html")

# Each pattern is one kind of internal key, as it showed in the reports of issue 26.
PATTERNS = {
    "site-tuple": r"\('site'|\bsite '",
    "barrier-tuple": r"\('barrier',\)",
    "internal-id": r"\binternal \d+",
    "op-index": r"\bop \d+\b",
    "scoped-label": r"\b(?:scoped|buf)@|#\d+/\d+",
    "call-label": r"\w#\d+\.\w",
    "empty-tuple": r"\bstep \(\)",
    "tuple-of-strings": r"\('\w+',",
    "dataclass-repr": r"\b[A-Z]\w+\(\w+=",
    "hbm-label": r"\bhbm\d+\b",
}
# Patterns known to leak still, each with the reason: a strict xfail, so that the fix shows.
KNOWN: dict[str, str] = {}

B = EXAMPLES / "buggy"
REPRESENTATIVE = [
    B / "cross_device_id_disagreement.py",  # run_scoped labels, allocation sites, cores of one-core kernels
    B / "fixed_id_collision_scoped.py",  # a failing run at an op
    B / "two_core_signal_hangs_on_tpu.py",  # two cores per device
    B / "exit_leak_unwaited_send.py",
    B / "race_two_cores_one_hbm_region.py",
    EXAMPLES / "jax_ops" / "buggy" / "race_all_gather_own_slot_unwaited.py",
    EXAMPLES / "programs" / "buggy" / "async_copy_done_without_start.py",  # a program's renamed labels
    EXAMPLES / "programs" / "async_remote_copy.py",
]
EVERY = [EXAMPLES]  # searched recursively: buggy/, jax_ops/ (and buggy), programs/ (and buggy)
_CODE = re.compile(r"`[^`\n]*`")  # the kernel's own source, quoted
_SOURCE_KEYS = {"text", "file", "uri", "snippet", "partialFingerprints"}


def _verified(paths, monkeypatch, *flags: str):
    """(label, FileReports) of one CLI run over `paths`, as `semcheck verify --format json` makes them."""
    from semcheck.checker.run import cli
    from semcheck.checker.report import render as report

    seen = []
    real = report.render

    def keep(fmt, label, files, version):
        seen.append((label, files))
        return real(fmt, label, files, version)

    monkeypatch.chdir(REPO)
    monkeypatch.setattr(report, "render", keep)
    monkeypatch.setattr(cli, "write", lambda args, text: None)
    code = cli.main(["verify", *map(str, paths), "--format", "json", "-q", "--no-cache", "--jobs", "2", *flags])
    assert code in (0, 1, 3), f"semcheck verify exited {code}"
    (run,) = seen
    return run


def _strings(obj, key=None):
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k not in _SOURCE_KEYS:
                yield from _strings(v, k)
    elif isinstance(obj, list):
        for v in obj:
            yield from _strings(v, key)
    elif isinstance(obj, str):
        yield obj


def rendered(label, files) -> dict[str, str]:
    """Every format's report of the same results (text at each detail level)."""
    from rich.console import Console

    from semcheck.checker.report import render as report

    out = {}
    for fmt in FORMATS:
        text = report.render(fmt, label, files, "0")
        if fmt in ("json", "sarif"):
            text = "\n".join(_strings(json.loads(text)))
        elif fmt == "html":
            text = html.unescape(text)
        out[fmt] = text
    for detail in ("quiet", "normal", "verbose"):
        buf = io.StringIO()
        report.render_files(Console(file=buf, width=200, no_color=True, highlight=False), files, detail=detail)
        out[f"text ({detail})"] = buf.getvalue()
    return out


def leaks(texts: dict[str, str]) -> dict[str, list[str]]:
    """pattern -> the first report lines (with their format) that show it."""
    found: dict[str, list[str]] = {}
    for fmt, text in texts.items():
        for line in text.splitlines():
            prose = _CODE.sub("``", line)
            for name, p in PATTERNS.items():
                if re.search(p, prose) and len(found.setdefault(name, [])) < 5:
                    found[name].append(f"{fmt}: {line.strip()[:240]}")
    return found


def core_of_one_core_kernels(files) -> list[str]:
    """Messages of one-core kernels that say `core N` where they mean device N."""
    bad = []
    for f in files:
        for r in f.results:
            if r.program.get("cores") != r.devices:
                continue
            for v in r.verdicts:
                w = v.witness
                for text in (v.reason, w.message if w else "", w.hint if w else ""):
                    if re.search(r"\bcore \d+\b", re.sub(r"\bdevice \d+ core \d+", "", _CODE.sub("", text))):
                        bad.append(f"{r.target} at {r.devices} devices ({r.dma_mode}): {text[:200]}")
    return bad


def _check(label, files, name):
    from semcheck.checker.properties.registry import REGISTRY

    checked = {v.property for f in files for r in f.results for v in r.verdicts}
    assert checked == {p.id for p in REGISTRY}, "every property the registry lists is checked and reported"
    assert any(v.verdict == "violated" for f in files for r in f.results for v in r.verdicts)
    found = leaks(rendered(label, files)).get(name, [])
    assert not found, f"{name} in the reports:\n" + "\n".join(found)


@pytest.fixture(scope="module")
def representative(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    try:
        return _verified(REPRESENTATIVE, mp, "--devices", "2")
    finally:
        mp.undo()


def _params():
    return [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=KNOWN[n])) if n in KNOWN else n
            for n in PATTERNS]


@pytest.mark.parametrize("name", _params())
def test_no_internal_keys_in_any_format(representative, name):
    _check(*representative, name)


def test_one_core_kernels_name_devices_not_cores(representative):
    bad = core_of_one_core_kernels(representative[1])
    assert not bad, "\n".join(bad[:5])


def test_the_patterns_catch_what_issue_26_saw():
    """Each pattern matches the leak it is for, and not the words reports use instead."""
    seen = {
        "site-tuple": "core 0 signals x (site 'scoped@k.py:70#0' index 0)",
        "barrier-tuple": "('barrier',) on core 0",
        "internal-id": "internal 2000 on core 0",
        "op-index": "at core 0 op 5",
        "scoped-label": "'scoped@fixed_id_collision_scoped.py:61#1/6'",
        "call-label": "a DMA wait on _start_kernel#0.sem[0]",
        "empty-tuple": "after grid step ()",
        "tuple-of-strings": "('site', 'k_sems', 1)",
        "dataclass-repr": "SemRef(label='x', index=0)",
        "hbm-label": "load hbm1[0:8, 0:128]",
    }
    assert set(seen) == set(PATTERNS)
    for name, text in seen.items():
        assert name in leaks({"text": text}), name
    fine = ("sem[0] of _start_kernel (call 1) on device 1; run_scoped semaphore (k.py:70)[0] allocated at "
            "k.py:70, index 0; after grid step (1,); the collective id 2000 is both a fixed id and an internal id; "
            "`pltpu.make_async_copy(src_ref, dst_ref, sem).wait()` blocks on device 0 core 1")
    assert leaks({"text": fine}) == {}


@pytest.mark.slow
@pytest.mark.parametrize("directory", EVERY, ids=lambda p: str(Path(p).relative_to(EXAMPLES.parent)))
def test_every_example_every_format(directory, monkeypatch):
    label, files = _verified([directory], monkeypatch)
    texts = rendered(label, files)
    found = {k: v for k, v in leaks(texts).items() if k not in KNOWN}
    assert not found, "\n".join(f"{k}: {line}" for k, v in found.items() for line in v)
    bad = core_of_one_core_kernels(files)
    assert not bad, "\n".join(bad[:5])


def _run_scoped_params(path: Path) -> dict[int, list[str]]:
    """The line of each `pl.run_scoped(body, ...)` of a kernel file -> `body`'s parameters, from its source."""
    import ast

    tree = ast.parse(path.read_text())
    defs = {d.name: [a.arg for a in d.args.args] for d in ast.walk(tree) if isinstance(d, ast.FunctionDef)}
    out = {}
    for call in ast.walk(tree):
        if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "run_scoped"
                and call.args and isinstance(call.args[0], ast.Name) and call.args[0].id in defs):
            out[call.lineno] = defs[call.args[0].id]
    return out


def test_run_scoped_objects_are_named_by_the_body_parameters(representative):
    """A run_scoped allocation reads as the parameter of the body that receives it, with the line of the
    run_scoped (issue 26.4), in every format: never as `run_scoped semaphore 2 (...)`."""
    label, files = representative
    texts = rendered(label, files)
    checked = 0
    for f in files:
        params = _run_scoped_params(REPO / f.path)
        if not params:
            continue
        base = Path(f.path).name
        for fmt, text in texts.items():
            named = re.findall(rf"([\w.]+)(?:\[[^\]]*\])? \(run_scoped (?:semaphore|buffer), {re.escape(base)}:(\d+)\)", text)
            for name, line in named:
                assert name in params.get(int(line), ()), f"{fmt}: {name} at line {line}, not a parameter of its body"
            assert not re.search(rf"run_scoped (?:semaphore|buffer)(?: \d+)? \({re.escape(base)}:", text), fmt
            checked += len(named)
    assert checked > 0  # the representative files show run_scoped objects


def test_id_disjoint_names_the_semaphore_that_holds_the_id(representative):
    """The id-disjoint message names the semaphore the internal id was handed to as the kernel does (the
    run_scoped body's parameter and the line), not only where it was allocated (issue 26, left over)."""
    label, files = representative
    for fmt, text in rendered(label, files).items():
        if fmt == "sarif":
            continue  # its message is a `text` field, which `rendered` leaves out (the kernel's source is there too)
        assert "both a fixed id" in text, fmt
        assert "the internal id of sem[0] (run_scoped semaphore, fixed_id_collision_scoped.py:61)" in text, fmt
        assert "an internal id (allocated at" not in text, fmt


@pytest.mark.parametrize("label, named", [
    ("scoped@k.py:70#1/9[1]", "s2[1] (run_scoped semaphore, k.py:70)"),
    ("'scoped@k.py:70#1/9'", "s2 (run_scoped semaphore, k.py:70)"),
    ("buf@k.py:60#0/1[0:8, 0:128]", "vbuf[0:8, 0:128] (run_scoped buffer, k.py:60)"),
    ("_k#0.scoped@k.py:70#0/3[0]", "sem[0] (run_scoped semaphore, k.py:70) of _k (call 0)"),
    ("_k#1.scoped@k.py:70#0/3[0]", "run_scoped semaphore (k.py:70)[0] of _k (call 1)"),  # that call's body unnamed
    ("site scoped@k.py:70#1 index 0", "s2 (allocated at k.py:70), index 0"),
    ("scoped@k.py:70.2#0/4", "run_scoped semaphore (k.py:70)"),  # the second run_scoped on the line: no name
])
def test_run_scoped_labels_read_as_their_parameters(label, named):
    from semcheck.checker.properties.timeline import humanize

    names = {"_k#0.scoped@k.py:70#0": "sem", "scoped@k.py:70#1": "s2", "buf@k.py:60#0": "vbuf"}
    assert humanize(label, names=names) == named
    assert leaks({"text": humanize(label, names=names)}) == {}


def test_local_cores_are_not_renamed_as_global_ones(representative):
    """A text that places a core on its device already (`this device core 1`, `devices 0, 1 core 0`) keeps
    it: the naming pass must not make it `this device device 0 core 1`."""
    twice = re.compile(r"\bdevices? (?:[\d, \-]*\d )?device \d+ core \d+")
    found = [f"{fmt}: {line.strip()[:200]}" for fmt, text in rendered(*representative).items()
             for line in text.splitlines() if twice.search(_CODE.sub("``", line))]
    assert not found, "\n".join(found[:5])


@pytest.mark.parametrize("text", ["this device core 1", "devices 0, 1 core 0", "devices 0-3 core 1",
                                  "its left neighbour core 1", "the device 2 to its right core 0", "device 3 core 1"])
def test_a_core_placed_on_its_device_is_left_alone(text):
    from semcheck.checker.properties.timeline import _CORE

    assert _CORE.sub(lambda m: m.group(0) if m.group(1) else "RENAMED", text) == text
