"""Real kernels: `semcheck verify` at 2, 4 and 8 devices against one interpret-mode run at 2 (issue 41 item 4).

    .venv/bin/python bench/real_kernels.py                       # the shipped-style kernels, 2 rounds
    .venv/bin/python bench/real_kernels.py --rounds 3 --kernels moe_dispatch_combine,jax_ops/all_gather
    .venv/bin/python bench/run.py --real                         # the same, from the bench's entry point

Per kernel and round, two whole processes one after the other, in alternating order (A B, then B A):

* `semcheck verify FILE --devices 2,4,8 --dma-mode all --format json --no-cache --no-config`: every
  property, every DMA mode, every schedule, at three device counts, process start and jax import included;
* `python tests/kernels/run_interpret.py FILE --devices 2 --dma-mode eager`: the kernel run once in jax's
  Pallas TPU interpret mode on two fake CPU devices, process start and jax import included.

CPU is user + system time of the process and everything it waited for (`os.wait4`: semcheck's warm-start
server and the verify children it reaps included), wall the time from start to exit. The table gives the
median of the rounds and the ratios semcheck / interpret (the target is at most 0.5). Writes
`real_kernels.md` and `real_kernels.json` in `--out` (default bench/results).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ("moe_dispatch_combine", "reduce_scatter_grouped_matmul", "allgather_grouped_matmul",
           "ragged_paged_attention", "kv_cache_update", "moe_counts_ring_allreduce", "masked_row_push",
           *sorted(f"jax_ops/{p.stem}" for p in (ROOT / "examples" / "jax_ops").glob("*.py")))


def timed(cmd: list[str]) -> dict:
    """Run `cmd` from the checkout's root; its CPU (with what it waited for), wall time, exit code."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    return {"cpu": round(usage.ru_utime + usage.ru_stime, 3), "wall": round(wall, 3), "exit": proc.returncode,
            "peak_mb": round(usage.ru_maxrss / 1024)}


def commands(kernel: str) -> dict[str, list[str]]:
    path = f"examples/{kernel}.py"
    exe = Path(sys.executable)
    return {"semcheck": [str(exe.parent / "semcheck"), "verify", path, "--devices", "2,4,8", "--dma-mode", "all",
                         "--format", "json", "--no-cache", "--no-config"],
            "interpret": [str(exe), "tests/kernels/run_interpret.py", path, "--devices", "2", "--dma-mode", "eager"]}


def measure(kernels: list[str], rounds: int) -> list[dict]:
    rows = []
    for kernel in kernels:
        cmds = commands(kernel)
        runs: dict[str, list[dict]] = {"semcheck": [], "interpret": []}
        for r in range(rounds):
            for who in (("semcheck", "interpret") if r % 2 == 0 else ("interpret", "semcheck")):
                runs[who].append(timed(cmds[who]))
        row = {"kernel": kernel, "runs": runs}
        for who in runs:
            row[who] = {k: statistics.median(x[k] for x in runs[who]) for k in ("cpu", "wall")}
        row["ratio_cpu"] = round(row["semcheck"]["cpu"] / row["interpret"]["cpu"], 2)
        row["ratio_wall"] = round(row["semcheck"]["wall"] / row["interpret"]["wall"], 2)
        print(f"{kernel:40s} semcheck {row['semcheck']['cpu']:5.2f} s CPU {row['semcheck']['wall']:5.2f} s wall | "
              f"interpret {row['interpret']['cpu']:5.2f} / {row['interpret']['wall']:5.2f} | "
              f"ratio CPU {row['ratio_cpu']:.2f} wall {row['ratio_wall']:.2f}", flush=True)
        rows.append(row)
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| kernel | semcheck 2,4,8: CPU / wall | interpret at 2: CPU / wall | semcheck / interpret: CPU | wall |",
             "|---|---:|---:|---:|---:|"]
    for r in rows:
        s, i = r["semcheck"], r["interpret"]
        lines.append(f"| `{r['kernel']}` | {s['cpu']:.2f} s / {s['wall']:.2f} s | {i['cpu']:.2f} s / {i['wall']:.2f} s "
                     f"| {r['ratio_cpu']:.2f} | {r['ratio_wall']:.2f} |")
    if rows:
        gm = lambda k: statistics.geometric_mean(r[k] for r in rows)  # noqa: E731
        lines.append(f"| geometric mean | | | {gm('ratio_cpu'):.2f} | {gm('ratio_wall'):.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", default=",".join(KERNELS), help="examples/NAME.py, comma-separated NAMEs")
    ap.add_argument("--rounds", type=int, default=2, help="measurements of each command per kernel (default 2)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args(argv)
    rows = measure([k for k in args.kernels.split(",") if k], args.rounds)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    (out / "real_kernels.json").write_text(json.dumps({"cpus": os.cpu_count(), "load": load, "rows": rows}, indent=1))
    (out / "real_kernels.md").write_text(table(rows))
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
