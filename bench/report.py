"""Tables, plot and exponent fits for `bench/run.py`'s records."""

from __future__ import annotations

import json
import math
from pathlib import Path

KERNEL_TITLES = {"allreduce": "ring all-reduce", "allgather": "ring all-gather", "permute": "barrier + permute",
                 "deadlock": "cyclic-wait deadlock", "leak": "exit leak (unwaited send)", "tree": "tree reduction",
                 "torus2d": "2-D torus halo", "alltoall": "all-to-all"}
# the bug each buggy kernel has, and the baselines' verdicts that report it (they decide deadlock freedom only)
BUGGY = {"deadlock": ("deadlock-free", {"deadlock", "violated"}), "leak": ("exit-balance", set())}
RING_KERNELS = ("allreduce", "allgather")
BASELINES = ("interpret", "explorer", "z3ts", "spin")
SHORT = {
    "semcheck": "semcheck verify",
    "semcheck_nofold": "semcheck verify --no-fold",
    "check": "semcheck check",
    "interpret": "interpret",
    "explorer": "explorer",
    "z3ts": "Z3 timestamps",
    "spin": "SPIN",
}
LONG = {
    "semcheck": "semcheck verify, end to end (all properties, all 3 DMA modes)",
    "semcheck_nofold": "the same command with `--no-fold`: every device checked, none decided on the fold "
                       "(spec RUN-7), the cost for a kernel whose devices do not repeat; run for the kernels "
                       "whose devices repeat, and its verdicts must be the folded run's",
    "check": "semcheck in-process: trace + lower + all checks, all modes",
    "interpret": "jax interpret mode, one run (eager DMAs)",
    "explorer": "exhaustive explorer without reduction (hardware mode)",
    "z3ts": "Z3 per-event timestamp encoding (hardware mode)",
    "spin": "SPIN on the Promela rendering (hardware mode)",
}


def _index(records):
    """(kernel, devices, contender) -> record; auxiliary lowering-only runs are not measurements."""
    return {(r["kernel"], r["devices"], r["contender"]): r for r in records if not r.get("auxiliary")}


def _ops(records) -> dict:
    return {(r["kernel"], r["devices"]): r["ops"] for r in records if r.get("contender") == "phases" and r.get("ops")}


def check_time(rec: dict | None) -> float | None:
    """semcheck's verification work inside one process: trace + lower, then every check in every mode."""
    if not rec or rec.get("status") != "ok":
        return None
    ph = rec.get("phases", {})
    if "trace_lower" not in ph:
        return None
    if "all_checks" in ph:
        return ph["trace_lower"] + ph["all_checks"]
    return ph["trace_lower"] + ph.get("fast_run", 0) + ph.get("z3_deadlock", 0)


def series(records, kernel: str, who: str, *, by_ops: bool = False) -> list[tuple[int, float]]:
    """(devices, seconds) of one measure's answered runs; with `by_ops`, (program ops, seconds)."""
    ops = _ops(records)
    pts = []
    for r in records:
        if r["kernel"] != kernel or r.get("auxiliary"):
            continue
        if who == "check" and r["contender"] == "phases":
            t = check_time(r)
        elif r["contender"] == who and r.get("status") == "ok":
            t = r.get("time_s")
        else:
            continue
        if t:
            x = ops.get((kernel, r["devices"])) if by_ops else r["devices"]
            if x:
                pts.append((x, t))
    return sorted(pts)


def _fit(pts):
    if len(pts) < 2:
        return None
    xs = [math.log(n) for n, _ in pts]
    ys = [math.log(t) for _, t in pts]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return None
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return round(slope, 2)


def fit_exponents(records) -> dict:
    """Least-squares slope of log(time) against log(devices), per kernel and semcheck measure.

    `all`: every size measured; `large`: sizes >= 16 only, where process start
    and the jax import no longer dominate; `vs_ops`: against the lowered
    program's op count instead (runs of at least a second), which separates
    the kernel's growth (a ring's ops grow as devices squared) from semcheck's.
    """
    out = {}
    for kernel in sorted({r["kernel"] for r in records}):
        for who in ("semcheck", "semcheck_nofold", "check"):
            pts = series(records, kernel, who)
            if who == "semcheck_nofold" and not pts:
                continue  # not run for this kernel
            large = [p for p in pts if p[0] >= 16]
            by_ops = series(records, kernel, who, by_ops=True)
            big = [p for p in by_ops if p[1] >= 1.0]  # past the fixed start-up cost
            out[f"{kernel}:{who}"] = {
                "all": _fit(pts),
                "large": _fit(large) if len(large) >= 2 else None,
                "sizes": [n for n, _ in pts],
                "vs_ops": _fit(big) if len(big) >= 2 and who == "check" else None,
            }
    return out


def fits_text(fits: dict) -> str:
    lines = ["Fitted exponent b of time ~ devices^b (least squares on log-log):"]
    for key, f in fits.items():
        kernel, who = key.split(":")
        if f["all"] is None:
            continue
        tag = " (ring)" if kernel in RING_KERNELS else ""
        large = f", sizes >= 16: {f['large']}" if f["large"] is not None else ""
        ops = f"; against program ops (runs >= 1 s): {f['vs_ops']}" if f.get("vs_ops") is not None else ""
        lines.append(f"  {KERNEL_TITLES.get(kernel, kernel)}{tag}, {SHORT[who]}: {f['all']} over "
                     f"{f['sizes'][0]}..{f['sizes'][-1]} devices{large}{ops}")
    return "\n".join(lines)


# --- cells ------------------------------------------------------------------------------------


def _secs(t: float) -> str:
    if t >= 100:
        return f"{t:.0f} s"
    if t >= 10:
        return f"{t:.1f} s"
    if t >= 0.01:
        return f"{t:.2f} s"
    return f"{t * 1000:.2g} ms"


def _time_cell(r: dict | None, settings: dict, t: float | None = None) -> str:
    if r is None:
        return ""
    st = r.get("status")
    if st == "ok":
        t = r.get("time_s") if t is None else t
        return _secs(t) if t is not None else "?"
    if st == "timeout" and r.get("contender") == "interpret" and r.get("kernel") in BUGGY \
            and r.get("wall_s", settings["time_cap_s"]) < settings["time_cap_s"]:
        return f"hangs (> {r['wall_s']:.0f} s)"  # stopped at the hang cap: interpret mode never answers
    if st == "timeout":
        return f"> {settings['time_cap_s']:g} s"
    if st == "memory":
        return f"> {settings['mem_cap_gib']:g} GiB"
    if st == "skipped":
        return "·" if "budget" in (r.get("error") or "") else "—"
    if st in ("unsupported", "unavailable"):
        return "n/a"
    if st == "unknown":
        return "unknown"
    return "error"


PHASES = ("import", "trace_lower", "fast_run", "all_checks", "all_checks_unfolded")  # disjoint, in order


def _ratio_header(c: str) -> str:
    """A ratio column says which way it reads: semcheck verify's time over the contender's."""
    return f"semcheck / {SHORT[c]} (< 1: semcheck faster)"


def _ratio_cell(sem: float | None, r: dict | None) -> str:
    if sem is None or r is None:
        return ""
    st = r.get("status")
    if st == "ok" and r.get("time_s"):
        return f"{sem / r['time_s']:.2g}"
    if st in ("timeout", "memory") and r.get("wall_s"):
        return f"< {sem / r['wall_s']:.2g}"  # it ran at least that long without an answer
    return ""


def _mem_cell(r: dict | None, settings: dict) -> str:
    if r is None or r.get("status") in ("skipped", "unsupported", "unavailable", None):
        return "" if r is None else ("—" if r.get("status") == "skipped" else "n/a")
    mb = r.get("peak_rss_mb")
    if not mb:
        return "?"
    pre = "> " if r.get("status") == "memory" else ""
    return pre + (f"{mb / 1024:.2f} GiB" if mb >= 1024 else f"{mb:.0f} MB")


def _table(header, rows) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" if i < 2 else "---:" for i in range(len(header))) + "|"]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return out


def _provenance(data: dict) -> str:
    runs = data.get("runs") or {}
    distinct: dict[str, list[str]] = {}
    for k, run in runs.items():
        distinct.setdefault(json.dumps(run, sort_keys=True), []).append(k)
    if len(distinct) <= 1:
        return (f"Produced by `make bench` (`.venv/bin/python bench/run.py`), command `{data['command'].strip()}`, "
                f"started {data['started']}, {data['total_s']:.0f} s in all.")
    parts = []
    for text, kernels in distinct.items():
        run = json.loads(text)
        parts.append(f"the rows of {', '.join(KERNEL_TITLES.get(k, k) for k in kernels)} by `{run['command'].strip()}`, "
                     f"started {run['started']}, {run['total_s']:.0f} s")
    return ("Produced by `.venv/bin/python bench/run.py` in several runs (`--merge`), every row of a kernel in one run "
            "(so every ratio compares two measurements of one run): " + "; ".join(parts) + ".")


def _disagreements(recs) -> list[str]:
    """Runs whose verdicts with and without the fold differ, or a no-fold run that still used a fold:
    each a bug in the fold (spec RUN-7: its proofs carry over, so the verdicts must be the same)."""
    lines = []
    for r in recs:
        where = f"{KERNEL_TITLES.get(r['kernel'], r['kernel'])}, {r['devices']} devices"
        if r.get("contender") == "semcheck_nofold" and r.get("verdicts_agree") is False:
            lines.append(f"* {where}: `semcheck verify` and `semcheck verify --no-fold` differ on "
                         + ", ".join(f"`{k}`" for k in r.get("verdicts_differ", [])))
        if r.get("contender") == "semcheck_nofold" and r.get("folded_results"):
            lines.append(f"* {where}: `semcheck verify --no-fold` decided {r['folded_results']} result(s) on a fold")
        if r.get("contender") == "phases" and r.get("unfolded_verdicts_agree") is False:
            lines.append(f"* {where}: the `phases` process's checks differ with and without the fold")
    if not lines:
        return []
    return ["", "**VERDICTS DIFFER WITH AND WITHOUT THE FOLD** (they must not: a proof on the fold carries over to "
            "every device, spec RUN-7, and a violation is never decided on it):", ""] + lines


def markdown(data: dict) -> str:
    """The results page: the set-up, then one section per table (time, buggy kernels, phases, memory, the
    baselines' state spaces, runs without a result, scaling)."""
    recs = data["records"]
    ix = _index(recs)
    s = data["settings"]
    kernels, sizes = s["kernels"], s["sizes"]
    present = [c for c in BASELINES if c in s["contenders"]]
    nofold = "semcheck_nofold" in s["contenders"]
    out = _intro(data, present, nofold)
    out += _time_section(recs, ix, s, present, nofold)
    out += _buggy_section(ix, s, present)
    out += _phases_section(recs, ix, s)
    out += _memory_section(ix, s, present, nofold)
    out += _details(recs, ix, kernels, sizes)
    out += ["", "## Scaling", "", "```", fits_text(data.get("fits", {})), "```", ""]
    return "\n".join(out)


def _intro(data: dict, present: list[str], nofold: bool) -> list[str]:
    """The provenance, the machine, the caps and the contenders."""
    s = data["settings"]
    env = data["environment"]
    out = [
        "# semcheck benchmark",
        "",
        _provenance(data),
        "",
        f"Machine: {env.get('cpus')} CPUs, {env.get('memory_gib')} GiB, {env.get('machine')}; Python "
        f"{env.get('python')}, jax {env.get('jax')}, z3 {env.get('z3')}, {env.get('spin') or 'SPIN not installed'}, "
        f"{env.get('gcc') or 'no gcc'}."
        + (f" Load average (5 min) {env['load_5min'][0]:g} at the start and {env['load_5min'][1]:g} at the end"
           f" on {env.get('cpus')} CPUs: wall times grow with it." if env.get("load_5min") else ""),
        "",
        f"Caps per run: {s['time_cap_s']:g} s and {s['mem_cap_gib']:g} GiB; once a run exceeds one, the contender "
        "runs no larger size of that kernel (`—`)"
        + (", nor does it when its last doubling extrapolates past the time cap" if s.get("extrapolate") else "")
        + ". Every contender runs in its own process; peak memory is the largest resident set of that process "
        "tree. semcheck and interpret mode run one at a time"
        + (f"; the single-threaded baselines run {s['jobs']} at a time (one chain of sizes per kernel and "
           "baseline)" if s.get("jobs", 1) > 1 else "")
        + (f"; after {s['budget_min']:g} minutes, baseline runs still to go are skipped" if s.get("budget_min") else "")
        + (f"; semcheck verify ran with `--ignore {s['ignore']}` (those properties not checked)" if s.get("ignore") else "")
        + ".",
        "",
        "Contenders:",
        "",
    ]
    for k in ("semcheck",) + (("semcheck_nofold",) if nofold else ()) + ("check",) + tuple(present):
        out.append(f"* **{SHORT[k]}**: {LONG[k]}")
    out += [
        "",
        "The baselines decide deadlock freedom only, in one DMA mode, and are handed the lowered program "
        "(their times exclude tracing and lowering); semcheck verify decides every property in all three "
        "modes and includes process start, the jax import and tracing. The ratio columns are semcheck verify's "
        "time over the contender's: below 1, semcheck is faster; `< x` means the contender was stopped at a cap "
        "without an answer, so the true ratio is smaller still. `—`: not run, because a smaller size exceeded a "
        "cap (or its growth predicted it would); `·`: not run, because the sweep's time budget ran out."
        + (" `semcheck verify --no-fold` is the same end-to-end run checking every device: it is run for the "
           "kernels whose devices repeat (blank for the others, whose `semcheck verify` time already checks every "
           "device), and a `≠` after its time would mean its verdicts differ from the folded run's (listed below "
           "the table)." if nofold else ""),
        "",
        "## Time",
        "",
    ]
    return out


def _time_section(recs: list[dict], ix: dict, s: dict, present: list[str], nofold: bool) -> list[str]:
    """The time table, with its notes."""
    ops = _ops(recs)
    kernels, sizes = s["kernels"], s["sizes"]
    header = ["kernel", "devices", "ops", SHORT["semcheck"]] + ([SHORT["semcheck_nofold"]] if nofold else []) \
        + [SHORT["check"]]
    for c in present:
        header += [SHORT[c], _ratio_header(c)]
    rows = []
    fallback_used: list = []
    for k in kernels:
        for n in sizes:
            sem = ix.get((k, n, "semcheck"))
            ph = ix.get((k, n, "phases"))
            sem_t = sem.get("time_s") if sem and sem.get("status") == "ok" else None
            if sem_t is None and ph and ph.get("status") == "ok":
                sem_t = ph.get("time_s")  # the same work in one process, when the CLI gave no answer
                fallback_used.append((k, n))
            ct = check_time(ph)
            sem_cell = _time_cell(sem, s) + (" ‡" if sem and sem.get("race_free_over_budget") else "")
            row = [KERNEL_TITLES.get(k, k), str(n), str(ops.get((k, n), "")), sem_cell]
            if nofold:
                nf = ix.get((k, n, "semcheck_nofold"))
                row.append(_time_cell(nf, s) + (" ‡" if nf and nf.get("race_free_over_budget") else "")
                           + (" ≠" if nf and nf.get("verdicts_agree") is False else ""))
            row.append(_secs(ct) if ct is not None else _time_cell(ph, s))
            for c in present:
                r = ix.get((k, n, c))
                row += [_time_cell(r, s), _ratio_cell(sem_t, r)]
            rows.append(row)
    for row, (k, n) in zip(rows, [(k, n) for k in kernels for n in sizes]):
        if (k, n) in fallback_used:
            first_ratio = 6 + int(nofold)
            row[first_ratio::2] = [c + " †" if c else c for c in row[first_ratio::2]]
    out = _table(header, rows)
    out += _disagreements(recs)
    if any(r.get("race_free_over_budget") for r in recs):
        out += ["", "‡ race-free answered `unknown` at once: its happens-before run could not certify its "
                "order (spec DR-6), and restricted runs for every pair would pass a work budget (`work_estimate` "
                "in `model/race.py`: two restricted runs over the whole program per copy), so semcheck gives up "
                "rather than run for minutes. The time is that of the other six properties, all decided, in all "
                "three modes; `semcheck verify` exits 3 there, never 0."]
    if fallback_used:
        out += ["", "† semcheck verify gave no answer here; the ratio uses the `phases` process instead "
                "(process start, jax import, trace + lower and every check that was importable, "
                "in one process)."]

    return out


def _buggy_section(ix: dict, s: dict, present: list[str]) -> list[str]:
    """Buggy kernels: the time to the first violation."""
    kernels, sizes = s["kernels"], s["sizes"]
    out: list[str] = []
    buggy = [k for k in kernels if k in BUGGY]
    if buggy:
        out += ["", "## Buggy kernels: time to the first violation", "",
                "`semcheck verify` is the whole run (every property in all three modes, each violation with its "
                "witness); `first violation` is the `phases` process's time from its start (jax import, trace + "
                "lower, fast run, then the checks in order: eager, on_wait, hardware) to the first violated "
                "property, with its witness. Interpret mode runs the kernel once (eager DMAs): a deadlock hangs it "
                "(stopped at the hang cap, no answer), a leak completes and prints a warning per device. The "
                "baselines decide deadlock freedom only (hardware mode), so they cannot see an exit leak: "
                "their answer there is `deadlock-free`.", ""]
        header = ["kernel", "devices", SHORT["semcheck"], "violated (x modes)", "first violation",
                  SHORT["interpret"], _ratio_header("interpret")] + [SHORT[c] for c in present if c != "interpret"]
        rows = []
        for k in buggy:
            for n in sizes:
                sem = ix.get((k, n, "semcheck"))
                ph = ix.get((k, n, "phases"))
                if sem is None and ph is None:
                    continue
                found = ""
                if sem and sem.get("violated") is not None:
                    props: dict[str, int] = {}
                    for x in sem["violated"]:
                        props[x.split(":", 1)[1]] = props.get(x.split(":", 1)[1], 0) + 1
                    found = ", ".join(f"{p} ×{c}" for p, c in props.items()) or "none"
                    found += f"; {sem.get('violated_with_witness', 0)} with a witness"
                first = ""
                if ph and ph.get("first_violation_s") is not None:
                    first = (f"{_secs(ph['first_violation_s'])} ({ph['first_violation'].replace(':', ' ')}"
                             + (", witness" if ph.get("first_violation_witness") else "") + ")")
                sem_t = sem.get("time_s") if sem and sem.get("status") == "ok" else None
                r = ix.get((k, n, "interpret"))
                row = [KERNEL_TITLES.get(k, k), str(n), _time_cell(sem, s), found, first,
                       _time_cell(r, s), _ratio_cell(sem_t, r)]
                for c in present:
                    if c == "interpret":
                        continue
                    r = ix.get((k, n, c))
                    cell = _time_cell(r, s)
                    if r and r.get("status") == "ok" and r.get("verdict"):
                        cell += f": {r['verdict']}"
                    row.append(cell)
                rows.append(row)
        out += _table(header, rows)

    return out


def _phases_section(recs: list[dict], ix: dict, s: dict) -> list[str]:
    """semcheck's phases, one process per row."""
    kernels, sizes = s["kernels"], s["sizes"]
    out: list[str] = []
    out += ["", "## semcheck's phases", "",
            "One process per row (`phases`): the jax import, tracing + lowering, the model's fast run "
            "(3 modes), then every property in every mode timed one by one (`all checks`, including finding "
            "the fold of a program whose devices repeat, spec RUN-7); `Z3 deadlock` is "
            "the deadlock-freedom share of that (or, where the checks were not importable, "
            "`deadlock_free` alone in 3 modes). `all checks, no fold` checks every device again, as "
            "`semcheck verify --no-fold` does: the cost for a program whose devices do not repeat. "
            "`total` is the process's time without the program's hand-over to the baselines: the columns "
            "before it add up to it (`other`: what is between the phases). `all checks, no fold` is part of "
            "this process's total but not of `semcheck verify`, which folds: it can exceed the end-to-end "
            "time of the Time table. `Z3 deadlock` is part of `all checks`, shown after the total.", ""]
    cols = [("import", "jax import"), ("trace_lower", "trace + lower"), ("fast_run", "fast run"),
            ("all_checks", "all checks"), ("all_checks_unfolded", "all checks, no fold"),
            ("other", "other"), ("total_in_process", "total"), ("z3_deadlock", "of which Z3 deadlock")]
    rows = []
    for k in kernels:
        for n in sizes:
            ph = ix.get((k, n, "phases"))
            if ph is None:
                continue
            p = dict(ph.get("phases", {}))
            if "total_in_process" in p:  # the phases add up to the total (PHASES: the additive ones)
                p["other"] = max(0.0, p["total_in_process"] - sum(p.get(c, 0.0) for c in PHASES))
            if ph.get("status") != "ok":
                z3 = _secs(p["z3_deadlock"]) if "z3_deadlock" in p else ""
                if not p:
                    rows.append([KERNEL_TITLES.get(k, k), str(n)] + [""] * (len(cols) - 2)
                                + [_time_cell(ph, s), z3, _mem_cell(ph, s)])
                    continue
                # stopped at a cap: the phases it finished, then where it was stopped (cols[:-2]: up to `other`)
                cells = [_secs(p[c]) if c in p else "" for c, _ in cols[:-2]]
                for i, (c, _) in enumerate(cols[:-2]):
                    if c not in p:
                        cells[i] = _time_cell(ph, s) + " (stopped)"
                        break
                else:
                    cells[-1] = (cells[-1] + " (stopped)") if cells[-1] else _time_cell(ph, s)
                rows.append([KERNEL_TITLES.get(k, k), str(n)] + cells + [_time_cell(ph, s), z3, _mem_cell(ph, s)])
                continue
            rows.append([KERNEL_TITLES.get(k, k), str(n)]
                        + [_secs(p[c]) if c in p else "n/a" for c, _ in cols] + [_mem_cell(ph, s)])
    out += _table(["kernel", "devices"] + [t for _, t in cols] + ["peak memory"], rows)
    notes = sorted({r.get("z3_unavailable") or r.get("checks_unavailable") for r in recs
                    if r.get("contender") == "phases" and (r.get("z3_unavailable") or r.get("checks_unavailable"))})
    if notes:
        out += ["", "n/a: not importable when this ran (" + "; ".join(notes) + ")."]

    return out


def _memory_section(ix: dict, s: dict, present: list[str], nofold: bool) -> list[str]:
    """Peak memory per contender."""
    kernels, sizes = s["kernels"], s["sizes"]
    out: list[str] = []
    out += ["", "## Peak memory", ""]
    mem_cols = ["semcheck"] + (["semcheck_nofold"] if nofold else []) + present
    header = ["kernel", "devices"] + [SHORT[c] for c in mem_cols]
    rows = []
    for k in kernels:
        for n in sizes:
            rows.append([KERNEL_TITLES.get(k, k), str(n)] + [_mem_cell(ix.get((k, n, c)), s) for c in mem_cols])
    out += _table(header, rows)

    return out


def _details(recs: list[dict], ix: dict, kernels: list, sizes: list) -> list[str]:
    """The baselines' state spaces and the runs without a result."""
    out: list[str] = []
    detail = []
    for k in kernels:
        for n in sizes:
            bits = []
            for c in ("explorer", "spin"):
                r = ix.get((k, n, c))
                if r and r.get("status") == "ok" and r.get("states") is not None:
                    bits.append(f"{SHORT[c]} {r['states']:,} states")
            r = ix.get((k, n, "z3ts"))
            if r and r.get("status") == "ok":
                bits.append(f"Z3 timestamps: {r.get('verdict')}")
            if bits:
                detail.append(f"* {KERNEL_TITLES.get(k, k)}, {n} devices: " + "; ".join(bits))
    if detail:
        out += ["", "## Baselines' state spaces", ""] + detail

    problems = []
    for r in recs:
        if r.get("status") in ("error", "unavailable", "unsupported", "unknown"):
            problems.append(f"* {KERNEL_TITLES.get(r['kernel'], r['kernel'])}, {r['devices']} devices, "
                            f"{r['contender']}: {r['status']}: {(r.get('error') or '').strip()[:300]}")
        elif r.get("status") == "ok" and r.get("verdict") not in (None, "deadlock-free", "proved") \
                and r["contender"] not in ("semcheck", "semcheck_nofold") \
                and r.get("verdict") not in BUGGY.get(r["kernel"], ("", ()))[1]:
            problems.append(f"* {KERNEL_TITLES.get(r['kernel'], r['kernel'])}, {r['devices']} devices, "
                            f"{r['contender']}: verdict {r.get('verdict')}")
    if problems:
        out += ["", "## Runs without a result", ""] + problems

    return out


def plot(data: dict, path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    recs = data["records"]
    s = data["settings"]
    kernels = s["kernels"]
    cap = s["time_cap_s"]
    who_list = ["semcheck"] + (["semcheck_nofold"] if "semcheck_nofold" in s["contenders"] else []) \
        + ["check"] + [c for c in BASELINES if c in s["contenders"]]
    styles = {"semcheck": ("C0", "o", "-"), "semcheck_nofold": ("C9", "o", ":"), "check": ("C0", "s", "--"),
              "interpret": ("C1", "^", "-"),
              "explorer": ("C2", "v", "-"), "z3ts": ("C3", "D", "-"), "spin": ("C4", "P", "-")}
    ncols = min(4, len(kernels))
    nrows = -(-len(kernels) // ncols)
    fig, grid = plt.subplots(nrows, ncols, figsize=(5.2 * ncols, 4.2 * nrows + 0.6), sharey=True, squeeze=False)
    axes = [[ax for row in grid for ax in row]]
    for ax in axes[0][len(kernels):]:
        ax.set_visible(False)
    for ax, k in zip(axes[0], kernels):
        for who in who_list:
            color, marker, ls = styles[who]
            pts = series(recs, k, who)
            if pts:
                ax.plot([n for n, _ in pts], [t for _, t in pts], color=color, marker=marker, linestyle=ls,
                        label=SHORT[who], markersize=5)
            if who in BASELINES:
                failed = [(r["devices"], min(cap, r.get("wall_s") or cap)) for r in recs if r["kernel"] == k
                          and r["contender"] == who and r.get("status") in ("timeout", "memory")]
                if failed:  # where it was stopped (a hang cap is below the time cap)
                    ax.scatter([n for n, _ in failed], [t for _, t in failed], color=color, marker="x", s=60,
                               zorder=5)
        ax.axhline(cap, color="grey", linestyle=":", linewidth=1)
        ax.set_xscale("log", base=2)
        ax.set_xticks(s["sizes"], [str(n) for n in s["sizes"]])
        ax.minorticks_off()
        ax.set_yscale("log")
        ax.set_title(KERNEL_TITLES.get(k, k))
        ax.set_xlabel("devices")
        ax.grid(True, which="major", alpha=0.3)
    for row in grid:
        row[0].set_ylabel("wall time (s)")
    handles, labels = [], []
    for ax in axes[0]:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), frameon=False)
    fig.suptitle(f"Time to an answer (x: stopped at the {cap:g} s / {s['mem_cap_gib']:g} GiB cap)")
    fig.tight_layout(rect=(0, 0.07 / nrows, 1, 1 - 0.05 / nrows))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
