"""Verdict equality: every property's verdict, reason and witness over a fixed corpus, for A/B checks.

A refactor must leave every verdict unchanged. This script records, for a corpus of programs,
each property's verdict under every DMA mode, with and without the fold (RUN-7), so that two
checkouts can be compared line by line:

    python bench/verdict_equality.py generate corpus.pickle   # once, in either checkout
    python bench/verdict_equality.py run corpus.pickle out.jsonl
    python bench/verdict_equality.py examples out-examples.jsonl
    python bench/verdict_equality.py diff a.jsonl b.jsonl
    python bench/verdict_equality.py examples out-8.jsonl 8 ring_permute,two_core   # some examples
    python bench/verdict_equality.py folds out.jsonl                 # fold against no fold, one checkout

The corpus is the Z3 tests' generated programs (`programs()` and `symmetric_programs()` of
tests/z3/z3_strategies.py, drawn derandomized, pickled so both checkouts read the same
programs); `examples` runs `semcheck verify --format json` over every example at 2 and 4
devices, with and without `--no-fold`. A program without a fold is checked once: with the fold
asked for, `check_program` then does exactly what it does without it.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path.cwd()  # run from the checkout's root
MODES = ("eager", "on_wait", "hardware")


def generate(path: str, plain: int = 600, symmetric: int = 300, foldable: int = 150) -> None:
    sys.path.insert(0, str(ROOT / "tests" / "z3"))
    from hypothesis import HealthCheck, given, settings
    from z3_strategies import programs, symmetric_programs

    corpus: list = []

    def draw(strategy, n: int, unpack: bool) -> None:
        @settings(max_examples=n, derandomize=True, database=None, deadline=None,
                  suppress_health_check=list(HealthCheck))
        @given(strategy)
        def collect(x) -> None:
            corpus.append(x[0] if unpack else x)

        collect()

    draw(programs(), plain, False)
    draw(symmetric_programs(), symmetric, True)
    draw(symmetric_programs(max_cores=16, foldable=True), foldable, True)
    with open(path, "wb") as f:
        pickle.dump(corpus, f)
    print(f"{len(corpus)} programs -> {path}")


def _verdict_row(v) -> dict:
    w = v.witness
    return {"property": v.property, "verdict": v.verdict, "reason": v.reason,
            "witness": None if w is None else [w.message, list(w.schedule), [list(b) for b in w.blocked],
                                               w.details.get("warnings")]}  # exit-balance's per-device warnings


def run(corpus_path: str, out_path: str) -> None:
    from semcheck.checker.properties.analysis import Analysis
    from semcheck.checker.properties.registry import IDS
    from semcheck.checker.properties.checking import check_program

    with open(corpus_path, "rb") as f:
        corpus = pickle.load(f)
    t0 = time.monotonic()
    with open(out_path, "w") as out:
        for i, program in enumerate(corpus):
            folds = (False, True) if Analysis(program).fold is not None else (False,)
            for fold in folds:
                for mode in MODES:
                    try:
                        rows = [_verdict_row(v) for v in check_program(program, mode, IDS, fold=fold)]
                    except Exception as e:  # noqa: BLE001 - an internal error is a result to compare too
                        rows = [{"crash": f"{type(e).__name__}: {e}"}]
                    out.write(json.dumps({"program": i, "mode": mode, "fold": fold, "verdicts": rows}) + "\n")
    print(f"{len(corpus)} programs in {time.monotonic() - t0:.0f} s -> {out_path}")


def examples(out_path: str, devices: str = "2,4", only: str = "") -> None:
    """`only`: comma-separated substrings of the example paths to run (all when empty)."""
    files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "examples").rglob("*.py"))
    files = [f for f in files if not only or any(o in f for o in only.split(","))]
    exe = Path(sys.executable).parent / "semcheck"
    with open(out_path, "w") as out:
        for path in files:
            for fold in (True, False):
                cmd = [str(exe), "verify", path, "--devices", devices, "--format", "json", "--no-cache"]
                if not fold:
                    cmd.append("--no-fold")
                p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=dict(os.environ))
                try:
                    report = json.loads(p.stdout)
                except json.JSONDecodeError:
                    out.write(json.dumps({"file": path, "fold": fold, "exit": p.returncode,
                                          "stderr": p.stderr[-500:]}) + "\n")
                    continue
                for r in report.get("results", []):  # one per (target, devices, mode, property)
                    row = {k: r.get(k) for k in ("target", "devices", "dma_mode", "property", "verdict", "reason")}
                    row["witness"] = (r.get("witness") or {}).get("schedule")
                    line = json.dumps({"file": path, "fold": fold, "verdicts": [row]})
                    out.write(line.replace(str(ROOT) + os.sep, "") + "\n")  # the same in any checkout
                out.write(json.dumps({"file": path, "fold": fold, "exit": p.returncode}) + "\n")
    print(f"{len(files)} example files -> {out_path}")


def diff(a_path: str, b_path: str) -> int:
    a = Path(a_path).read_text().splitlines()
    b = Path(b_path).read_text().splitlines()
    bad = [(i, x, y) for i, (x, y) in enumerate(zip(a, b)) if x != y]
    verdicts = sum(len(json.loads(x).get("verdicts", [])) for x in a)
    print(f"{len(a)} vs {len(b)} lines, {verdicts} verdicts; {len(bad)} lines differ")
    for i, x, y in bad[:20]:
        print(f"line {i}:\n  A {x[:600]}\n  B {y[:600]}")
    return int(bool(bad) or len(a) != len(b))


def folds(path: str) -> int:
    """Within one output of `run` or `examples`: every verdict with the fold (RUN-7) against the same
    check without it. A verdict that differs is a bug; a witness that differs is printed apart (the
    folded check may find another run, as long as it is a run of the same verdict)."""
    by: dict[tuple, dict[bool, dict]] = {}
    exits: dict[str, dict[bool, int]] = {}  # `examples`: each file's exit code, with and without the fold
    for line in Path(path).read_text().splitlines():
        rec = json.loads(line)
        where = rec.get("file", rec.get("program"))
        if "exit" in rec:
            exits.setdefault(where, {})[rec["fold"]] = rec["exit"]
        for k, row in enumerate(rec.get("verdicts", [])):
            key = (where, rec.get("mode"), row.get("target"), row.get("devices"), row.get("dma_mode"),
                   row.get("property", f"#{k}"))
            by.setdefault(key, {})[rec["fold"]] = row
    pairs = [(k, v[True], v[False]) for k, v in by.items() if len(v) == 2]
    verdicts = [(k, a, b) for k, a, b in pairs if (a.get("verdict"), a.get("crash")) != (b.get("verdict"), b.get("crash"))]
    witnesses = [(k, a, b) for k, a, b in pairs if a.get("witness") != b.get("witness") and (k, a, b) not in verdicts]
    print(f"{len(pairs)} verdicts compared, fold against no fold: {len(verdicts)} verdicts differ, "
          f"{len(witnesses)} more witnesses differ; {len(by) - len(pairs)} without a pair")
    for k, a, b in verdicts:
        print(f"VERDICT {k}:\n  fold    {a.get('verdict') or a.get('crash')}: {str(a.get('reason'))[:300]}"
              f"\n  no fold {b.get('verdict') or b.get('crash')}: {str(b.get('reason'))[:300]}")
    codes = {f: e for f, e in exits.items() if len(set(e.values())) > 1}
    if exits:
        print(f"{len(exits)} example files, {len(codes)} with another exit code without the fold: {codes}")
    for k, a, b in witnesses[:20]:
        print(f"witness {k}:\n  fold    {str(a.get('witness'))[:300]}\n  no fold {str(b.get('witness'))[:300]}")
    return int(bool(verdicts) or bool(codes))


if __name__ == "__main__":
    cmd, *args = sys.argv[1:]
    sys.exit({"generate": generate, "run": run, "examples": examples, "diff": diff, "folds": folds}[cmd](*args) or 0)
