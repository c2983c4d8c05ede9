"""Every format names devices and semaphores as the kernel does (specs/deciding/report.md REP-34, REP-24).

A finding's message, its sites' notes (the related locations of SARIF, the diagrams' notes) and its
details say `device 1` (`device 0 core 1` in a multi-core kernel), never the model's global core
index (`core 1`), and `recv_sem[0] (id 2001)`, never the interpreter's id alone (`semaphore 2001`).
What stays as it is: jax's own messages, quoted word for word (its exit warning, EXIT-1, and its
fixed/internal collision, ERR-1), the kernel's source lines, and a core inside its device (a
timeline's `core 1:` under `device 0:`, `core 0 of the target device`).

The cheap test verifies a few buggy examples that between them reach every message that named a
core or an id (exit-balance, dma-bytes with a plain signal and with a wrong size, id-int16, a
two-core kernel, an id collision) once, in every DMA mode at 2 devices, and renders every format
from the result cache; the slow one does the same for every buggy example.
"""

from __future__ import annotations

import html
import json
import re

import pytest

from ._support import BUGGY, REPO, semcheck, semcheck_many

pytestmark = pytest.mark.jax

FORMATS = ("text", "concise", "github", "json", "sarif", "markdown", "html")
CHEAP = ("exit_leak_two_semaphores.py", "cross_device_id_disagreement.py", "dma_byte_mismatch_wait_larger.py",
         "int16_overflow.py", "two_core_missing_core_index.py", "fixed_id_collision.py")

# jax's own messages that name a semaphore by its id, as jax's interpreter words them (the exit warning
# is also predicted under hardware, with the semaphore's name where jax would print an id)
JAX_SAYS = re.compile(r"Semaphore -?\d+ occurs as both fixed-id and internal\."
                      r"|Semaphore [^\n]{1,300}? has non-zero count for \d+ \(global core \d+\) at kernel exit: -?\d+")
BARE_ID = re.compile(r"\bsemaphore -?\d+", re.IGNORECASE)
# a core the words place on its device (as checker/properties/timeline.py's `humanize` leaves it), a
# timeline's line under its device's heading, or a core of a device named right after
CORE = re.compile(r"(?P<placed>\b(?:device(?: \d+)?|devices [\d, \-]*\d|neighbour|right|left) )?"
                  r"(?P<core>\bcore \d+\b)(?P<after>:| of (?:the|its|this|that)\b)?")


_SPACES = re.compile(r"[ \t]+")


def _strings(x):
    if isinstance(x, str):
        yield x
    elif isinstance(x, dict):
        for v in x.values():
            yield from _strings(v)
    elif isinstance(x, list):
        for v in x:
            yield from _strings(v)


def _source_lines(report: dict) -> set[str]:
    """The kernel's own lines a JSON report quotes (a site's or location's `text`): the kernel's words."""
    out: set[str] = set()

    def walk(x):
        if isinstance(x, dict):
            if isinstance(x.get("text"), str) and "line" in x:
                out.add(x["text"])
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(report)
    return {s for s in out if s.strip()}


def wrong_words(text: str, source: set[str]) -> list[str]:
    """The places in `text` that name a semaphore by its id alone or a device by a global core."""
    text = _SPACES.sub(" ", text)  # as a diagram's wrapped lines are read back (`_in_words`)
    for line in sorted({_SPACES.sub(" ", x) for x in source}, key=len, reverse=True):
        text = text.replace(line, " ")
    text = JAX_SAYS.sub(" ", text)
    bad = [m.group(0) for m in BARE_ID.finditer(text)]
    for m in CORE.finditer(text):
        timeline = m["after"] == ":" and text[:m.start("core")].rsplit("\n", 1)[-1].strip() == ""
        of_a_device = m["after"] is not None and m["after"] != ":"
        if not (m["placed"] or timeline or of_a_device):
            bad.append(text[max(0, m.start() - 60):m.end() + 20].replace("\n", " "))
    return bad


def _in_words(fmt: str, out: str) -> list[str]:
    """The texts of one output to read: a JSON or SARIF document's strings, markup unescaped."""
    if fmt in ("json", "sarif"):
        return list(_strings(json.loads(out)))
    if fmt == "html":  # a diagram wraps its notes over <tspan>s: the words, without the markup
        return [html.unescape(re.sub(r"<[^>]*>", " ", out))]
    if fmt == "markdown":
        return [html.unescape(out)]
    return [out]


def _verify_every_format(names, cache) -> dict[str, str]:
    files = [BUGGY / n for n in names]
    env = {"SEMCHECK_CACHE_DIR": str(cache)}
    first = semcheck("verify", *files, "--devices", "2", "--format", "json", cwd=REPO, extra_env=env, timeout=1800)
    assert first.returncode == 1, first.stderr[-2000:]
    runs = semcheck_many([(("verify", *files, "--devices", "2", "--format", fmt), {"cwd": REPO, "extra_env": env})
                          for fmt in FORMATS if fmt != "json"], workers=2)
    out = {"json": first.stdout}
    for fmt, r in zip([f for f in FORMATS if f != "json"], runs):
        assert r.returncode == 1, (fmt, r.stderr[-2000:])
        out[fmt] = r.stdout
    return out


def _problems(outputs: dict[str, str]) -> dict[str, list[str]]:
    source = _source_lines(json.loads(outputs["json"]))
    return {fmt: sorted({w for t in _in_words(fmt, out) for w in wrong_words(t, source)})
            for fmt, out in outputs.items()}


@pytest.fixture(scope="module")
def cheap(tmp_path_factory):
    return _verify_every_format(CHEAP, tmp_path_factory.mktemp("cache"))


@pytest.mark.rule("REP-34")
def test_the_scan_finds_what_it_is_for():
    assert wrong_words("this copy adds to semaphore 2000 on core 1, which receives 4096", set()) != []
    assert wrong_words("send_sem[0] (id 2000) on device 1 core 0; devices 0, 1 core 1 each block", set()) == []
    assert wrong_words("device 0:\n    core 1: k.py:3  barrier 'fork0'", set()) == []
    assert wrong_words("a signal without core_index goes to core 0 of the target device", set()) == []
    assert wrong_words("interpret mode raises ValueError: Semaphore 2000 occurs as both fixed-id and internal.",
                       set()) == []
    assert wrong_words("x  # BUG: meant for core 0", {"x  # BUG: meant for core 0"}) == []
    assert wrong_words("Semaphore send_sem (run_scoped semaphore, k.py:70) has non-zero count for 1 (global core 1) "
                       "at kernel exit: 16", set()) == []
    assert wrong_words("allocation sems of core 1: ids wrap", set()) != []


@pytest.mark.rule("REP-34", "REP-24")
def test_findings_name_devices_and_semaphores_as_the_kernel_does(cheap):
    assert _problems(cheap) == {fmt: [] for fmt in FORMATS}
    rows = json.loads(cheap["json"])["results"]
    notes = [s["note"] for r in rows if r["verdict"] == "violated" for s in r["witness"]["details"].get("sites", [])]
    # the notes name the semaphore and device: the leaked send of exit_leak_two_semaphores.py, under eager
    assert any("send_sem[0] (id 2000) on device 0" in n for n in notes), notes
    assert any("the barrier semaphore (id 0) on device 1" in n for n in notes), notes


@pytest.mark.slow  # every buggy example in every mode and format: minutes on one core
@pytest.mark.rule("REP-34", "REP-24")
def test_every_buggy_example_names_devices_and_semaphores_as_the_kernel_does(tmp_path):
    names = sorted(p.name for p in BUGGY.glob("*.py"))
    assert _problems(_verify_every_format(names, tmp_path / "cache")) == {fmt: [] for fmt in FORMATS}
