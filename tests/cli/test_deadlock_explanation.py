"""A deadlock is explained as who waits for what and why it never comes, with the cycle in one
sentence, each rotation class of devices once, and no internal representations."""

from __future__ import annotations

import re

import pytest

from ._support import BUGGY, EXAMPLES, semcheck_many

RING = BUGGY / "recv_before_send_deadlock.py"
INTERNAL = re.compile(r"\('(site|internal|fixed|barrier|scoped)'|\(\('|Contribution\(|WaitOp\(")


def section(text: str, title: str) -> list[str]:
    """The lines of the report section whose title starts with `title` (title line included)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].strip()), len(lines))
    return lines[start:end]


@pytest.fixture(scope="module")
def runs():
    calls = [(("verify", RING, "--devices", str(n), "--dma-mode", "eager", "--no-cache"), {"cwd": EXAMPLES.parent})
             for n in (4, 64)]
    calls.append((("verify", RING, "--devices", "4", "--dma-mode", "eager", "--format", "json", "--no-cache"),
                  {"cwd": EXAMPLES.parent}))
    return semcheck_many(calls)


@pytest.mark.jax
def test_the_ring_that_receives_before_it_sends_is_one_cycle_in_a_few_lines(runs):
    four, sixty_four, _ = runs
    assert four.returncode == 1, four.stderr
    lines = section(four.stdout, "FAIL deadlock-free violated")
    assert len(lines) <= 12, "\n".join(lines)
    text = "\n".join(lines)
    assert "cycle: all 4 devices wait for each other at line 65" in text
    assert "each waits for its left neighbour" in text
    assert "devices 0-3 each block at line 65 `rs_copy.wait_recv()`" in text
    assert "started at line 66 `rs_copy.start()` on its left neighbour, which never runs" in text
    assert "recv_before_send_deadlock.py:66" in text  # the line that never runs, with its source
    # identically shaped at 64 devices: the same lines, device numbers aside
    big = section(sixty_four.stdout, "FAIL deadlock-free violated")
    def shape(block):
        return [re.sub(r"-+$", "", line.replace("0-63", "0-3").replace("64", "4")) for line in block]

    assert shape(big) == shape(lines)


@pytest.mark.jax
def test_no_internal_representation_in_any_report(runs):
    four, sixty_four, as_json = runs
    for run in (four, sixty_four, as_json):
        assert not INTERNAL.search(run.stdout), INTERNAL.search(run.stdout)
    w = next(r for r in as_json.json()["results"] if r["verdict"] == "violated")["witness"]
    assert w["message"].startswith("deadlock: cycle: all 4 devices")
    assert w["details"]["explanation"][0].startswith("cycle:")
    assert sorted(w["details"]["cycle"]) == [0, 1, 2, 3]
    assert all(b["semaphore"] == "recv_sems[0]" for b in w["details"]["blocked"])
    assert w["details"]["timeline"]  # the per-device timelines stay in the JSON


def test_the_report_code_prints_no_reprs_of_keys():
    """Counter keys are tuples like ('site', 'recv_sems', 0): the code that words reports never formats one."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "checker"
    for name in ("report/render.py", "report/text.py", "properties/timeline.py", "z3/deadlock.py"):
        source = (root / name).read_text()
        assert not re.search(r"repr\((w|x|key|counter)", source), name
        assert not re.search(r"\{[^}]*counter\[0\][^}]*\}", source), name
