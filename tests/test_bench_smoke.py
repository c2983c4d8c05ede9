"""The benchmark script runs end to end at tiny sizes and writes its three results files.

No timing assertions: only that every contender produces a record, the
baselines agree that the clean kernel is deadlock-free, and the tables,
JSON and plot come out. SPIN is included only where it is installed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from semcheck.checker.promela import spin_available

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytestmark = pytest.mark.jax


def test_bench_quick(tmp_path):
    contenders = "semcheck,phases,interpret,explorer,z3ts" + (",spin" if spin_available() else "")
    p = subprocess.run(
        [sys.executable, os.path.join(ROOT, "bench", "run.py"), "--quick", "--kernels", "permute",
         "--sizes", "2", "--contenders", contenders, "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=240, cwd=ROOT,
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    data = json.loads((tmp_path / "results.json").read_text())
    got = {r["contender"]: r for r in data["records"]}
    assert set(got) == set(contenders.split(","))
    for name in ("explorer", "spin", "z3ts"):
        r = got.get(name)
        if r is not None and r["status"] == "ok":
            assert r["verdict"] in ("deadlock-free", "proved"), r
    assert got["phases"]["status"] == "ok", got["phases"]
    assert got["phases"]["fast_run"] == {"eager": "completed", "on_wait": "completed", "hardware": "completed"}
    md = (tmp_path / "results.md").read_text()
    assert "| barrier + permute | 2 |" in md and "ratio" in md
    if (tmp_path / "time_vs_devices.png").exists():
        assert (tmp_path / "time_vs_devices.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    else:
        assert "no plot: matplotlib missing" in p.stdout
    # nothing from this machine leaks into the results
    assert str(tmp_path) not in md and ROOT not in (tmp_path / "results.json").read_text()
