"""-q / -v, --color and NO_COLOR / FORCE_COLOR, and progress lines in a CI log."""

from __future__ import annotations

import re

from ._support import BUGGY, CLEAN, EXAMPLES, semcheck, semcheck_many
from .test_reports import run_on_terminal

ANSI_COLOUR = re.compile(r"\x1b\[[0-9;]*3[0-9]m|\x1b\[[0-9;]*9[0-7]m")  # a foreground colour, not bold
SWEEP = ("verify", CLEAN, "--devices", "2,4", "--dma-mode", "eager")


def test_a_sweep_off_a_terminal_prints_a_line_per_verified_device_count():
    loud, quiet = semcheck_many([(SWEEP, {"cwd": EXAMPLES.parent}), ((*SWEEP, "-q"), {"cwd": EXAMPLES.parent})])
    assert loud.returncode == quiet.returncode == 0, loud.stderr
    assert loud.stderr_lines == []
    assert loud.progress == ["semcheck: [1/2] examples/ring_permute.py: 2 devices verified",
                                 "semcheck: [2/2] examples/ring_permute.py: 4 devices verified"]
    assert quiet.stderr == ""
    one = semcheck("verify", CLEAN, "--devices", "2", "--dma-mode", "eager", cwd=EXAMPLES.parent)
    assert one.returncode == 0 and one.stderr == ""  # nothing to follow in a single device count


def test_quiet_keeps_the_findings_and_verbose_adds_every_property():
    args = ("verify", BUGGY / "fixed_id_collision.py", "--devices", "2", "--dma-mode", "eager")
    normal, quiet, verbose = semcheck_many([(args, {"cwd": EXAMPLES.parent}),
                                            ((*args, "-q"), {"cwd": EXAMPLES.parent}),
                                            ((*args, "-v"), {"cwd": EXAMPLES.parent})])
    assert normal.returncode == quiet.returncode == verbose.returncode == 1
    rows = [line for line in normal.stdout.splitlines() if "devices=2" in line]
    assert len(rows) == 1
    assert not any("devices=" in line for line in quiet.stdout.splitlines())
    assert "FAIL id-disjoint violated: build, 2 devices, eager" in quiet.stdout
    assert quiet.stdout.splitlines()[-1] == normal.stdout.splitlines()[-1]
    # -v: under the configuration's line, each property with its verdict and why
    lines = verbose.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if "devices=2" in line)  # "(cached)" or not, run to run
    below = lines[at + 1:at + 8]
    assert [line.split()[1].rstrip(":") for line in below] == [
        "id-disjoint", "id-int16", "id-agreement", "deadlock-free", "exit-balance", "dma-bytes", "race-free"]
    assert below[0].split()[0] == "FAIL" and below[1].split()[0] == "ok" and below[3].split()[0] == "FAIL"
    assert all(": " in line for line in below)


def test_color_flag_and_environment():
    args = ("verify", CLEAN, "--devices", "2", "--dma-mode", "eager")
    always, forced, plain = semcheck_many([
        ((*args, "--color", "always"), {"cwd": EXAMPLES.parent, "extra_env": {"NO_COLOR": "1"}}),
        (args, {"cwd": EXAMPLES.parent, "extra_env": {"FORCE_COLOR": "1"}}),
        (args, {"cwd": EXAMPLES.parent}),
    ])
    assert ANSI_COLOUR.search(always.stdout), "--color always wins over NO_COLOR"
    assert ANSI_COLOUR.search(forced.stdout), "FORCE_COLOR colours a pipe"
    assert "\x1b[" not in plain.stdout and plain.stdout.startswith("examples/ring_permute.py: ")
    code, text = run_on_terminal(*args, "--color", "never", cwd=EXAMPLES.parent)
    assert code == 0 and "all 8 properties proved" in text
    assert not ANSI_COLOUR.search(text), "--color never on a terminal"
    code, text = run_on_terminal(*args, cwd=EXAMPLES.parent)
    assert code == 0 and ANSI_COLOUR.search(text), "auto on a terminal"
