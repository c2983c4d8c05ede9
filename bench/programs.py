"""Benchmark rows for programs of kernel calls: k calls cost about k times one call.

    .venv/bin/python bench/programs.py                      # 1, 2 and 4 calls at 2 .. 256 devices
    .venv/bin/python bench/programs.py --sizes 2,4,8 --calls 1,2

For each device count and each program of bench/kernels/program_calls.py (the shift kernel called
1, 2 and 4 times in a row, specs/deciding/programs.md PRG-115), `semcheck verify TARGET --devices N --dma-mode
all --format json --no-cache --no-config` runs in its own process; its wall time, peak memory and
verdicts are recorded. A program of k calls is one composed program under `hardware` and k calls
checked alone under `eager` and `on_wait`. The table gives, per size, each program's time and its
ratio to the one-call program's (`k calls / 1 call`; semcheck's start-up, a few seconds, is in
both); the folded runs decide every device from a few (RUN-7), which PRG-104 argues carries over to a program
whose devices all run the same call sequence. No timed assertion: the numbers are for reading.

Results: bench/results/programs.md and programs.json (--out to write elsewhere).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FILE = "bench/kernels/program_calls.py"


def measure(calls: int, n: int, timeout: float) -> dict:
    cli = str(Path(sys.executable).parent / "semcheck")
    cmd = [cli, "verify", f"{FILE}::calls_{calls}", "--devices", str(n), "--dma-mode", "all", "--format", "json",
           "--no-cache", "--no-config", "--timeout", str(timeout)]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, JAX_PLATFORMS="cpu"))
    try:
        out, err = proc.communicate(timeout=timeout + 60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return {"calls": calls, "devices": n, "status": "timeout", "wall_s": round(time.monotonic() - t0, 3)}
    wall = time.monotonic() - t0
    rec = {"calls": calls, "devices": n, "wall_s": round(wall, 3), "exit_code": proc.returncode}
    try:
        results = json.loads(out)["results"]
    except (ValueError, KeyError):
        rec.update(status="error", error=(err or out).strip()[-400:])
        return rec
    counts: dict[str, int] = {}
    for r in results:
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    rec.update(status="ok", verdicts=counts)
    return rec


def table(records: list[dict], calls: list[int]) -> str:
    by = {(r["calls"], r["devices"]): r for r in records}
    sizes = sorted({r["devices"] for r in records})
    head = ["devices"] + [f"{k} call{'s' if k > 1 else ''} (s)" for k in calls]
    head += [f"{k} calls / 1 call" for k in calls if k > 1]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for n in sizes:
        row = [str(n)]
        times = {k: by.get((k, n), {}) for k in calls}
        for k in calls:
            r = times[k]
            row.append(f"{r['wall_s']:.1f}" if r.get("status") == "ok" else r.get("status", "·"))
        one = times.get(1, {})
        for k in [k for k in calls if k > 1]:
            r = times[k]
            ok = r.get("status") == "ok" and one.get("status") == "ok"
            row.append(f"{r['wall_s'] / one['wall_s']:.2f}" if ok else "·")
        lines.append("| " + " | ".join(row) + " |")
    verdicts = sorted({json.dumps(r.get("verdicts", {}), sort_keys=True) for r in records if r.get("status") == "ok"})
    return "\n".join(lines) + "\n\nVerdict counts seen (every run): " + "; ".join(verdicts) + "\n"


def write(records: list[dict], calls: list[int], out: Path) -> str:
    out.mkdir(parents=True, exist_ok=True)
    (out / "programs.json").write_text(json.dumps({"records": records}, indent=1) + "\n")
    text = ("# Programs of kernel calls: k calls against one\n\n`python bench/programs.py` (bench/README.md, "
            "section \"Programs of calls\"); wall time of `semcheck verify --dma-mode all` per run, "
            "each in its own process, on this machine.\n\n" + table(records, calls))
    (out / "programs.md").write_text(text)
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="2,4,8,16,32,64,128,256")
    ap.add_argument("--calls", default="1,2,4")
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    calls = [int(k) for k in args.calls.split(",")]
    records = []
    for n in sizes:
        for k in calls:
            rec = measure(k, n, args.timeout)
            print(json.dumps(rec), flush=True)
            records.append(rec)
            write(records, calls, Path(args.out))  # after every run: a stopped sweep keeps what it measured
    print(write(records, calls, Path(args.out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
