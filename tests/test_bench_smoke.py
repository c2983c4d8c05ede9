"""The benchmark script runs end to end at tiny sizes and writes its three results files, and its
regression guard (`--quick`) appends one well-formed line to the history.

No timing assertions: only that every contender produces a record, the
baselines agree that the clean kernel is deadlock-free, `semcheck verify
--no-fold` gives the folded run's verdicts, the tables, JSON and plot come
out (a verdict that differs with and without the fold is reported loudly),
and the guard's line has its fields and verdicts.
SPIN is included only where it is installed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from oracles.spin import spin_available

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytestmark = pytest.mark.jax


def test_bench_quick(tmp_path):
    contenders = "semcheck,semcheck_nofold,phases,interpret,explorer,z3ts" + (",spin" if spin_available() else "")
    p = subprocess.run(
        [sys.executable, os.path.join(ROOT, "bench", "run.py"), "--smoke", "--kernels", "permute",
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
    nofold = got["semcheck_nofold"]
    assert nofold["status"] == "ok" and nofold["verdicts_agree"] is True, nofold
    assert nofold["verdicts"] == got["semcheck"]["verdicts"] and nofold["folded_results"] == 0
    assert "| semcheck verify | semcheck verify --no-fold |" in md and "DIFFER" not in md
    if (tmp_path / "time_vs_devices.png").exists():
        assert (tmp_path / "time_vs_devices.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    else:
        assert "no plot: matplotlib missing" in p.stdout
    # nothing from this machine leaks into the results
    assert str(tmp_path) not in md and ROOT not in (tmp_path / "results.json").read_text()


def test_quick_guard_appends_one_history_line(tmp_path):
    earlier = {"date": "2000-01-01T00:00:00", "commit": None, "fast_run_ops_per_s": 1, "deadlock_ops_per_s": 1}
    (tmp_path / "history.jsonl").write_text(json.dumps(earlier) + "\n")
    p = subprocess.run(
        [sys.executable, os.path.join(ROOT, "bench", "run.py"), "--quick", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=240, cwd=ROOT,
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    lines = (tmp_path / "history.jsonl").read_text().splitlines()
    assert len(lines) == 2 and json.loads(lines[0]) == earlier  # appended, the history kept as it was
    line = json.loads(lines[1])
    assert set(line) >= {"date", "commit", "dirty", "cpus", "python", "seconds", "fast_run_ops_per_s",
                         "deadlock_ops_per_s", "programs"}
    assert isinstance(line["dirty"], bool)
    assert line["fast_run_ops_per_s"] > 0 and line["deadlock_ops_per_s"] > 0
    for name, prog in line["programs"].items():
        assert prog["ops"] > 0
        for key in ("fast_run_ops_per_s", "deadlock_ops_per_s", "deadlock_verdicts"):
            assert set(prog[key]) == {"eager", "on_wait", "hardware"}, (name, key)
        expected = "violated" if "deadlock" in prog["kernel"] else "proved"
        assert set(prog["deadlock_verdicts"].values()) == {expected}, (name, prog["deadlock_verdicts"])
    assert not (tmp_path / "results.json").exists()  # the guard runs no sweep
    assert ROOT not in lines[1]


def test_report_flags_verdicts_that_differ_without_the_fold():
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_report", os.path.join(ROOT, "bench", "report.py"))
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)

    def rec(contender, **kw):
        return dict({"kernel": "allreduce", "devices": 8, "contender": contender, "status": "ok", "time_s": 1.0,
                     "wall_s": 1.0, "peak_rss_mb": 200.0}, **kw)

    data = {"started": "", "total_s": 1.0, "command": "bench/run.py", "fits": {},
            "settings": {"kernels": ["allreduce"], "sizes": [8], "contenders": ["semcheck", "semcheck_nofold"],
                         "time_cap_s": 120, "mem_cap_gib": 8, "jobs": 1, "budget_min": 0},
            "environment": {},
            "records": [rec("semcheck"), rec("semcheck_nofold", time_s=2.5, verdicts_agree=False,
                                             verdicts_differ=["hardware:deadlock-free"], folded_results=0)]}
    md = report.markdown(data)
    assert "| ring all-reduce | 8 |  | 1.00 s | 2.50 s ≠ |" in md
    assert "VERDICTS DIFFER" in md and "`hardware:deadlock-free`" in md
