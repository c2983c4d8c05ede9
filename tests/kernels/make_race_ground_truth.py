"""Record what jax's own race detector says about every example: race_ground_truth.json.

    python tests/kernels/make_race_ground_truth.py                  # everything
    python tests/kernels/make_race_ground_truth.py --only buggy/race_ --devices 2

Every example file (every .py under examples/, jax_ops/ included; default
build kwargs) runs in Pallas TPU interpret mode with
``InterpretParams(dma_execution_mode=MODE, detect_races=True, on_race="warn")``
at each device count and in each interpreter DMA mode, `--repeats` times
(threads interleave differently from run to run, and DMAs get random
vector-clock slots, see below).  Each run is a fresh subprocess with its own
process group, killed after `--timeout` seconds, exactly as in
run_interpret.py: a kernel that deadlocks in interpret mode is recorded as
"hang" and does not stop the script.  A configuration whose first run hangs
or fails is not repeated.

``on_race="warn"`` instead of the default "raise": the run goes on after the
first race, so every race of the run is recorded along with the run's own
outcome (completed / hang / error) and whether its output matches the
example's `reference`.  The child forwards each "RACE DETECTED" log record
to its stdout behind a marker line as it happens, so the races reported
before a hang are kept too.

Vector clocks: jax gives every DMA a random slot in a vector clock of
`vector_clock_size` entries (default: twice the number of cores), so two
DMAs that share a slot look ordered and a race between them, or one ordered
through them, can be missed on that run.  We use a wide clock
(`--vector-clock-size`, default 256) so that this almost never happens; 0
selects jax's default.  A wider clock only removes spurious orderings, so it
never adds a race that a narrower one would not report on the same schedule.

The output keeps, per (file, devices, mode), every distinct race (the two
accesses: read/write, memory space, owner device/core, index range, whether
a core or a DMA made it, and the kernel line -- for a DMA, the line that
started it), how many runs reported it, and each run's outcome.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import hashlib
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import run_interpret as ri  # noqa: E402

REPO_ROOT = ri.REPO_ROOT
RACE_GROUND_TRUTH_PATH = Path(__file__).resolve().with_name("race_ground_truth.json")
RACE_MARKER = "@@SEMCHECK_RACE@@ "
RESULT_MARKER = "@@SEMCHECK_RACE_RESULT@@ "
DMA_MODES = ("eager", "on_wait")
DEFAULT_VECTOR_CLOCK_SIZE = 256

# jax numbers DMAs from 100 upwards and uses the DMA's number as the "device"
# of its accesses; cores are (device, local core).
_FIRST_DMA_ID = 100

# Examples that take longer than the rest get a longer timeout (the detector
# slows every access down a little).
SLOW = {"examples/buggy/int16_overflow.py": 4.0}


def example_files(root: Path = REPO_ROOT) -> list[str]:
    """Every example kernel, relative to the repository root, sorted."""
    files = (root / "examples").rglob("*.py")  # examples/jax_ops/ too; programs: tests/programs/
    return sorted(str(p.relative_to(root)) for p in files
                  if p.name != "__init__.py" and "programs" not in p.relative_to(root / "examples").parts)


def file_sha256(path: str, root: Path = REPO_ROOT) -> str:
    """The recorded runs hold for this content of the example (lines included)."""
    return hashlib.sha256((root / path).read_bytes()).hexdigest()


def example_kind(path: str) -> str:
    """What the example is meant to be, as far as races go."""
    parts = Path(path).parts
    if "buggy" in parts[:-1]:
        # another bug; whether it also races is what we record
        return "race" if parts[-1].startswith("race_") else "buggy"
    if "jax_ops" in parts[:-1] and "pallas.ops.tpu" in (REPO_ROOT / path).read_text():
        return "shipped"  # jax's own kernel as it ships: what the detector says is the record
    return "clean"  # (a kernel written in the style of jax's ops, e.g. jax_ops/ragged_all_to_all.py)


# --------------------------------------------------------------------------
# race messages
# --------------------------------------------------------------------------

_ACCESS_RE = re.compile(
    r"^\s*(?P<access>read|write) of \('(?P<space>\w+)', (?P<buffer>-?\d+), "
    r"(?P<device>-?\d+), (?P<core>-?\d+)\)\[(?P<range>.*)\] from "
    r"\((?P<t0>-?\d+), (?P<t1>-?\d+)\), (?P<where>.*)$"
)
_SLICE_RE = re.compile(r"slice\((-?\d+|None), (-?\d+|None)(?:, (?:1|None))?\)")


def _short_range(text: str) -> str:
    """'(0, slice(0, 8, 1), slice(0, 128, 1))' -> '[0, 0:8, 0:128]'; '()' -> '[...]'."""
    text = text.strip()
    if text in ("()", ""):
        return "[...]"
    text = _SLICE_RE.sub(
        lambda m: f"{'' if m.group(1) == 'None' else m.group(1)}:"
                  f"{'' if m.group(2) == 'None' else m.group(2)}", text)
    if text.startswith("(") and text.endswith(")"):
        text = text[1:-1].rstrip(",")
    return f"[{text}]"


def short_where(where: str, root: Path = REPO_ROOT) -> str:
    """A source location without this machine's paths: 'examples/x.py:63 (fn)'."""
    where = where.strip()
    m = re.match(r"^(?P<file>.*?):(?P<line>\d+)(?::\d+)?(?P<rest>\s.*)?$", where)
    if not m:
        return where
    file = m.group("file")
    parts = Path(file).parts
    installed = parts[parts.index("site-packages"):] if "site-packages" in parts else ()
    if "jax" in installed:  # jax's own ops (examples/jax_ops/), wherever jax is installed
        file = str(Path(*installed[installed.index("jax"):]))
    else:
        try:
            file = str(Path(file).resolve().relative_to(root))
        except ValueError:
            file = str(Path(*parts[parts.index("jax"):])) if "jax" in parts else Path(file).name
    return f"{file}:{m.group('line')}{m.group('rest') or ''}"


def parse_race(message: str, root: Path = REPO_ROOT) -> dict[str, Any] | None:
    """The two accesses of one 'RACE DETECTED' message (clocks dropped)."""
    accesses = []
    for line in message.splitlines():
        m = _ACCESS_RE.match(line)
        if not m:
            continue
        thread = int(m.group("t0"))
        accesses.append({
            "access": m.group("access"),
            "memory_space": m.group("space"),
            "buffer_id": int(m.group("buffer")),
            "device": int(m.group("device")),
            "core": int(m.group("core")),
            "range": _short_range(m.group("range")),
            "by": "dma" if thread >= _FIRST_DMA_ID else "core",
            "thread": [thread, int(m.group("t1"))],
            "where": short_where(m.group("where"), root),
        })
    if len(accesses) != 2:
        return None
    return {"new": accesses[0], "earlier": accesses[1]}


_ACCESS_KEYS = ("where", "access", "by", "memory_space")


def race_signature(race: dict[str, Any]) -> tuple:
    """What identifies a race across runs and devices: the two accesses
    (where in the kernel, read or write, by a core or a DMA, memory space), as
    an unordered pair -- which one the detector saw second depends on the run."""
    return tuple(sorted(tuple(race[k][f] for f in _ACCESS_KEYS) for k in ("new", "earlier")))


def trimmed_message(race: dict[str, Any]) -> str:
    def one(x):
        who = f"dma {x['thread'][0]}" if x["by"] == "dma" else \
            f"core {x['thread'][0]}/{x['thread'][1]}"
        return (f"{x['access']} of {x['memory_space']} buffer {x['buffer_id']} "
                f"(device {x['device']}, core {x['core']}){x['range']} by {who} at {x['where']}")
    return f"{one(race['new'])} || {one(race['earlier'])}"


# --------------------------------------------------------------------------
# child side
# --------------------------------------------------------------------------


def _child_main(path: str, devices: int, dma_mode: str, vector_clock_size: int) -> int:
    flags = re.sub(r"--xla_force_host_platform_device_count=\d+", "",
                   os.environ.get("XLA_FLAGS", ""))
    os.environ["XLA_FLAGS"] = (flags + f" --xla_force_host_platform_device_count={devices}").strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")

    import logging

    class _Forward(logging.Handler):
        def emit(self, record):
            try:
                msg = record.getMessage()
            except Exception:  # noqa: BLE001
                return
            if "RACE DETECTED" in msg:
                sys.stdout.write(RACE_MARKER + json.dumps(msg) + "\n")
                sys.stdout.flush()

    logging.getLogger().addHandler(_Forward(level=logging.WARNING))

    result: dict[str, Any] = {"phase": "import"}
    t0 = time.monotonic()
    try:
        import jax
        import numpy as np
        from jax.experimental.pallas import tpu as pltpu

        kw: dict[str, Any] = dict(dma_execution_mode=dma_mode, detect_races=True, on_race="warn")
        if vector_clock_size:
            kw["vector_clock_size"] = vector_clock_size
        params = pltpu.InterpretParams(**kw)
        mod = ri._load_module(path)
        result["phase"] = "build"
        fn, args = mod.build(devices, dma_mode=dma_mode, interpret=params)
        result["phase"] = "run"
        out = jax.block_until_ready(fn(*args))
        result["phase"] = "check"
        ref_fn = getattr(mod, "reference", None)
        if ref_fn is not None:
            expected = ref_fn(*[np.asarray(a) for a in args], num_devices=devices)
            outs = out if isinstance(out, (tuple, list)) else (out,)
            exps = expected if isinstance(expected, (tuple, list)) else (expected,)
            # as in run_interpret.py: `build` may loosen it (a reordered softmax is not bit-exact)
            tol = getattr(mod.build, "reference_tolerance", 1e-5)
            result["output_matches_reference"] = bool(len(outs) == len(exps) and all(
                np.allclose(np.asarray(o), np.asarray(e), rtol=tol, atol=tol)
                for o, e in zip(outs, exps)))
        else:
            result["output_matches_reference"] = None
        try:
            from jax._src.pallas.mosaic.interpret import interpret_pallas_call as ipc
            result["races_found_flag"] = bool(ipc.races is not None and ipc.races.races_found)
        except Exception:  # noqa: BLE001 - a cross-check only
            result["races_found_flag"] = None
        result["phase"] = "done"
        result["status"] = "completed"
    except BaseException as e:  # noqa: BLE001 - we report everything
        import traceback

        text = "".join(traceback.format_exception(e))
        etype, msg = ri.innermost_error(text)
        result["status"] = "error"
        result["error_type"] = etype or type(e).__name__
        result["error_message"] = msg
    result["child_seconds"] = round(time.monotonic() - t0, 3)
    sys.stdout.flush()
    print(RESULT_MARKER + json.dumps(result), flush=True)
    os._exit(0)


# --------------------------------------------------------------------------
# parent side
# --------------------------------------------------------------------------


def run_with_race_detection(
    path: str | os.PathLike, devices: int, dma_mode: str, timeout: float = 30.0, *,
    vector_clock_size: int = DEFAULT_VECTOR_CLOCK_SIZE, python: str | None = None,
) -> dict[str, Any]:
    """One interpret-mode run with jax's race detector, in a subprocess.

    Returns {"outcome": completed | hang | error, "error_type", "error_message",
    "races": [parsed races], "unparsed_races": [...], "output_matches_reference",
    "races_found_flag", "seconds"}.
    """
    if dma_mode not in DMA_MODES:
        raise ValueError(f"dma_mode must be one of {DMA_MODES}, got {dma_mode!r}")
    cmd = [python or sys.executable, str(Path(__file__).resolve()), "--child",
           str(Path(path).resolve()), "--devices", str(int(devices)),
           "--dma-mode", dma_mode, "--vector-clock-size", str(int(vector_clock_size))]
    env = dict(os.environ)
    flags = re.sub(r"--xla_force_host_platform_device_count=\d+", "", env.get("XLA_FLAGS", ""))
    env["XLA_FLAGS"] = (flags + f" --xla_force_host_platform_device_count={int(devices)}").strip()
    env["JAX_PLATFORMS"] = "cpu"
    env.setdefault("PYTHONUNBUFFERED", "1")

    t0 = time.monotonic()
    with tempfile.TemporaryFile("w+") as out_f, tempfile.TemporaryFile("w+") as err_f:
        proc = subprocess.Popen(cmd, stdout=out_f, stderr=err_f, stdin=subprocess.DEVNULL,
                                env=env, start_new_session=True)
        timed_out = False
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
        ri._kill_group(proc)
        seconds = round(time.monotonic() - t0, 3)
        out_f.seek(0)
        stdout = out_f.read()
        err_f.seek(0)
        stderr = err_f.read()

    child = None
    messages: list[str] = []
    for line in stdout.splitlines():
        if line.startswith(RESULT_MARKER):
            child = json.loads(line[len(RESULT_MARKER):])
        elif line.startswith(RACE_MARKER):
            messages.append(json.loads(line[len(RACE_MARKER):]))

    races, unparsed = [], []
    for m in messages:
        r = parse_race(m)
        if r is None:
            unparsed.append(m[:500])
        else:
            races.append(r)
    report: dict[str, Any] = {
        "outcome": None, "error_type": None, "error_message": None,
        "races": races, "unparsed_races": unparsed,
        "output_matches_reference": None, "races_found_flag": None,
        "seconds": seconds,
    }
    if child is not None:
        report["outcome"] = child["status"]
        report["error_type"] = child.get("error_type")
        report["error_message"] = child.get("error_message")
        report["output_matches_reference"] = child.get("output_matches_reference")
        report["races_found_flag"] = child.get("races_found_flag")
    elif timed_out:
        report["outcome"] = "hang"
    else:
        report["outcome"] = "error"
        report["error_type"] = "ChildProcessDied"
        etype, msg = ri.innermost_error(stderr)
        report["error_message"] = f"exit code {proc.returncode}" + (
            f"; {etype}: {msg}" if etype else (f"; {msg}" if msg else ""))
    return report


def race_reported(report: dict[str, Any]) -> bool:
    return bool(report["races"] or report["unparsed_races"] or report.get("races_found_flag"))


def summarise(path: str, devices: int, mode: str, reports: list[dict[str, Any]],
              timeout: float) -> dict[str, Any]:
    """One ground-truth case from the runs of one configuration."""
    distinct: dict[tuple, dict[str, Any]] = {}
    for i, rep in enumerate(reports):
        for race in rep["races"]:
            sig = race_signature(race)
            entry = distinct.setdefault(sig, {
                "accesses": [dict(zip(_ACCESS_KEYS, acc)) for acc in sig],
                "runs": set(), "owner_devices": set(), "reports": 0,
                "example": trimmed_message(race),
            })
            entry["runs"].add(i)
            entry["owner_devices"].add(race["new"]["device"])
            entry["reports"] += 1
    races = []
    for entry in distinct.values():
        entry["runs"] = len(entry["runs"])
        entry["owner_devices"] = sorted(entry["owner_devices"])
        races.append(entry)
    races.sort(key=lambda e: [tuple(a.values()) for a in e["accesses"]])
    outcomes = [r["outcome"] for r in reports]
    errors = sorted({f"{r['error_type']}: {r['error_message']}" for r in reports
                     if r["outcome"] == "error"})
    return {
        "path": path,
        "devices": devices,
        "dma_mode": mode,
        "kind": example_kind(path),
        "runs": len(reports),
        "outcomes": outcomes,
        "outcome": outcomes[0] if len(set(outcomes)) == 1 else "mixed",
        "hung": "hang" in outcomes,
        "raised": bool(errors),
        "errors": errors,
        "race_reported": any(race_reported(r) for r in reports),
        "runs_with_race": sum(race_reported(r) for r in reports),
        "race_messages": [len(r["races"]) + len(r["unparsed_races"]) for r in reports],
        "races": races,
        "unparsed_races": sorted({m for r in reports for m in r["unparsed_races"]}),
        "output_matches_reference": [r["output_matches_reference"] for r in reports],
        "seconds": max(r["seconds"] for r in reports),
        "timeout": timeout,
    }


def run_case(path: str, devices: int, mode: str, *, repeats: int, timeout: float,
             vector_clock_size: int, hang_repeats: int = 1) -> dict[str, Any]:
    """`repeats` runs of one configuration; once a run hangs or fails, at most
    `hang_repeats` runs in all (each hang costs the whole timeout)."""
    t = round(timeout * SLOW.get(path, 1.0), 1)
    reports = []
    for _ in range(max(repeats, 1)):
        rep = run_with_race_detection(REPO_ROOT / path, devices, mode, t,
                                      vector_clock_size=vector_clock_size)
        reports.append(rep)
        if any(r["outcome"] != "completed" for r in reports) and len(reports) >= hang_repeats:
            break
    return summarise(path, devices, mode, reports, t)


def load_race_ground_truth(path: str | os.PathLike | None = None) -> dict[str, Any]:
    with open(path or RACE_GROUND_TRUTH_PATH) as f:
        return json.load(f)


NOTES = [
    "jax's detector treats every DMA as a thread of its own (ids from 100 up, "
    "'by': 'dma'), in both DMA modes: with 'eager' the copy has already happened "
    "inside its start, yet a later access to its source or destination that no "
    "wait on the copy's semaphore orders is still reported as a race.",
    "Orderings come from semaphores only (a wait takes the vector clock of all "
    "signals so far on that semaphore), from the device barrier and from the "
    "kernel's start and end. A semaphore does not say which copy signalled it, so "
    "a wait satisfied by a later copy can hide the race with an earlier one on "
    "some schedules: see runs_with_race.",
    "A DMA's 'where' is the line that started it; for the copies a pallas_call "
    "makes for its BlockSpecs the detector has no kernel line and says 'pallas_call'.",
    "Kernels that deadlock in interpret mode hang with the detector on too; "
    "races reported before the hang are kept.",
    "buggy/two_core_missing_core_index races before it hangs: both signals reach "
    "core 0, which can take its own as the other core's and copy core 1's half of "
    "y out of HBM (line 58) while core 1's copy into it (line 51) is unordered.",
    "Every race_* example is reported in every run at 2 and 4 devices in both "
    "modes, including eager mode, where the wrong-slot, send-buffer and local-copy "
    "kernels still return the right numbers.",
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--devices", default="2,4")
    ap.add_argument("--modes", default="eager,on_wait")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=20.0,
                    help="seconds before a run counts as hung (scaled up for slow examples)")
    ap.add_argument("--hang-repeats", type=int, default=1,
                    help="runs of a configuration that hangs or fails (default 1)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--vector-clock-size", type=int, default=DEFAULT_VECTOR_CLOCK_SIZE,
                    help="jax's vector_clock_size; 0 = jax's default (2 x cores)")
    ap.add_argument("--only", action="append", default=[],
                    help="substring of example paths to (re)run; repeatable; other cases are kept")
    ap.add_argument("--out", default=str(RACE_GROUND_TRUTH_PATH))
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("path", nargs="?", help=argparse.SUPPRESS)
    ap.add_argument("--dma-mode", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return _child_main(args.path, int(args.devices), args.dma_mode, args.vector_clock_size)

    devices = [int(d) for d in args.devices.split(",")]
    modes = args.modes.split(",")
    files = [p for p in example_files() if not args.only or any(o in p for o in args.only)]
    configs = [(p, n, m) for p in files for n in devices for m in modes]

    out = Path(args.out)
    existing: dict[tuple, dict] = {}
    examples: dict[str, dict] = {}
    if args.only and out.exists():
        old = load_race_ground_truth(out)
        for c in old["cases"]:
            existing[(c["path"], c["devices"], c["dma_mode"])] = c
        examples.update(old.get("examples", {}))
    current = set(example_files())
    existing = {k: c for k, c in existing.items() if k[0] in current}
    examples = {p: e for p, e in examples.items() if p in current}
    for p in files:
        examples[p] = {"kind": example_kind(p), "sha256": file_sha256(p)}

    print(f"{len(configs)} configurations x up to {args.repeats} runs, "
          f"{args.workers} workers", file=sys.stderr)
    t0 = time.monotonic()
    with cf.ThreadPoolExecutor(max_workers=args.workers) as pool:
        futs = {pool.submit(run_case, p, n, m, repeats=args.repeats, timeout=args.timeout,
                            vector_clock_size=args.vector_clock_size,
                            hang_repeats=args.hang_repeats): (p, n, m)
                for p, n, m in configs}
        for fut in cf.as_completed(futs):
            p, n, m = futs[fut]
            case = fut.result()
            existing[(p, n, m)] = case
            print(f"[{time.monotonic() - t0:7.1f}s] {p} n={n} {m}: {case['outcome']} "
                  f"race={case['race_reported']} ({case['runs_with_race']}/{case['runs']} runs, "
                  f"{len(case['races'])} distinct) {'; '.join(case['errors'])[:80]}",
                  file=sys.stderr)
    elapsed = time.monotonic() - t0

    import jax
    import numpy as np

    doc = {
        "schema_version": 1,
        "description": (
            "What jax's interpret-mode race detector (InterpretParams(detect_races=True, "
            "on_race='warn')) reports for every example kernel, per (path, devices, "
            "dma_mode), over `runs` runs, each in a fresh process "
            "(--xla_force_host_platform_device_count=devices). race_reported: some run "
            "reported a race; runs_with_race: how many. races: the distinct races, each "
            "an unordered pair of accesses (kernel line, read|write, core or dma, memory "
            "space), with how many runs and reports had it, the devices owning the "
            "buffer, and one trimmed message (detector's second access first). "
            "outcomes: completed | hang (no exit within timeout) | error, per run; a "
            "configuration with a run that does not complete gets hang_repeats runs. "
            "examples: each file's kind (race | clean | buggy: another bug | shipped: "
            "jax's own op, recorded as it is) and the "
            "sha256 of the content the runs were made from."
        ),
        "notes": NOTES,
        "parameters": {
            "repeats": args.repeats,
            "vector_clock_size": args.vector_clock_size,  # 0: jax's default, 2 x cores
            "on_race": "warn",
            "build_kwargs": {},
            "hang_repeats": args.hang_repeats,
        },
        "environment": {
            "jax": jax.__version__,
            "numpy": np.__version__,
            "python": platform.python_version(),
        },
        "last_run_seconds": round(elapsed),
        "examples": dict(sorted(examples.items())),
        "cases": sorted(existing.values(),
                        key=lambda c: (c["path"], c["devices"], c["dma_mode"])),
    }
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {len(doc['cases'])} cases to {out.name} in {elapsed:.0f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
