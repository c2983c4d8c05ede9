"""semcheck's `race-free` verdicts against jax's own race detector (issue 13, PROP-7).

tests/kernels/race_ground_truth.json records, for every example kernel at 2
and 4 devices in both interpreter DMA modes, what jax's interpret mode with
``detect_races=True`` reported over several runs
(tests/kernels/make_race_ground_truth.py writes it).  Here:

(i)   soundness: wherever a recorded run reported a race, `semcheck verify
      FILE --devices N --dma-mode MODE --format json` must report
      `race-free` violated for that (devices, mode);
(ii)  wherever semcheck proves `race-free`, no recorded run may have reported
      a race;
(iii) the record is not stale: the example files are the ones it was made
      from, and a live re-run of jax's detector on a few race examples at 2
      devices gives the recorded answer (the full re-run is marked slow).

semcheck runs over the example files in two CLI runs side by side
(`--devices 2 --dma-mode all`, 4 devices too under `slow`; a file's rows
are the same as a run of its own), cached for the module (only the files
the selected tests need).  If semcheck reports no `race-free` row at all,
(i) and (ii) are skipped.
"""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sampling import every_kth
from test_buggy_verdicts import DEVICES

pytestmark = [pytest.mark.jax, pytest.mark.rule("DR-1", "PROP-7", "ERR-27")]

ROOT = Path(__file__).resolve().parent.parent
SEMCHECK = [sys.executable, "-m", "semcheck.checker.run.cli"]
PROPERTY = "race-free"
MODES = ("eager", "on_wait")
SEMCHECK_TIMEOUT = 600


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


mrg = _load("semcheck_tests_make_race_ground_truth",
            ROOT / "tests" / "kernels" / "make_race_ground_truth.py")
GT = mrg.load_race_ground_truth()
CASES = {(c["path"], c["devices"], c["dma_mode"]): c for c in GT["cases"]}
FILES = sorted({c["path"] for c in GT["cases"]})
RACY = sorted(k for k, c in CASES.items() if c["race_reported"])
# path -> the DMA modes whose interpreter runs the example declares failing (tests/kernels/ground_truth.json)
RAISES_IN = {p: tuple(e.get("raises_in", ())) for p, e in
             json.loads((ROOT / "tests" / "kernels" / "ground_truth.json").read_text())["examples"].items()}
# path -> the device count a buggy example's bug needs, from the buggy examples' one table of them
BUG_DEVICES = {f"examples/buggy/{name}": n for name, n in DEVICES.items()}


def _case_id(key) -> str:
    path, n, mode = key
    return f"{path.removeprefix('examples/').removesuffix('.py')}-{n}dev-{mode}"


def _describe(case: dict) -> str:
    lines = [f"jax reported a race in {case['runs_with_race']}/{case['runs']} runs "
             f"(outcomes {case['outcomes']}):"]
    lines += [f"  {r['example']}" for r in case["races"]]
    lines += [f"  {m}" for m in case["unparsed_races"]]
    return "\n".join(lines)


# --------------------------------------------------------------------------
# semcheck, once per file
# --------------------------------------------------------------------------


def _verify(paths: list[str], counts: frozenset[int]) -> dict[str, dict]:
    """semcheck's JSON report for each of `paths` at the device counts `counts`, from one CLI run over
    them all (jax is imported once: about 2 of the 2.8 CPU seconds a file took on its own), each file's
    rows and errors as a report of its own, or {'error': ...}."""
    devices = ",".join(str(n) for n in sorted(counts))
    timeout = SEMCHECK_TIMEOUT * len(paths)
    try:
        proc = subprocess.run(
            [*SEMCHECK, "verify", *paths, "--devices", devices, "--dma-mode", "all", "--format", "json"],
            cwd=ROOT, capture_output=True, text=True, timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {p: {"error": f"semcheck timed out after {timeout} s on {len(paths)} files"} for p in paths}
    if proc.returncode not in (0, 1, 3, 4):  # 4: unrunnable in interpret mode (REP-21), a report all the same
        return {p: {"error": f"exit code {proc.returncode}: {proc.stderr[-2000:]}"} for p in paths}
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        return {p: {"error": f"no JSON report (exit {proc.returncode}): {proc.stderr[-2000:]}"} for p in paths}
    out = {p: {"results": [r for r in report["results"] if r["file"] == p]} for p in paths}
    for e in report.get("errors", []):
        out[e["file"]]["error"] = f"{e['code']}: {e['message']}"
    return out


def _race_rows(report: dict) -> list[dict]:
    return [r for r in report.get("results", []) if r.get("property") == PROPERTY]


@pytest.fixture(scope="module")
def reports(request) -> dict[str, dict]:
    # Only the files and device counts of the selected tests (`-k` picks a few; the cases past the
    # smallest device count of a file are `slow`).
    wanted: dict[str, set[int]] = {}
    for item in request.session.items:
        key = getattr(getattr(item, "callspec", None), "params", {}).get("key")
        if "reports" in getattr(item, "fixturenames", ()) and key is not None:
            wanted.setdefault(key[0], set()).add(key[1])
    if not wanted:
        wanted = {p: {c["devices"] for c in GT["cases"] if c["path"] == p} for p in FILES}
    # One run per set of device counts, split in two halves that run side by side.
    groups: dict[frozenset[int], list[str]] = {}
    for p in sorted(wanted):
        groups.setdefault(frozenset(wanted[p]), []).append(p)
    batches = [(paths[i::2], counts) for counts, paths in groups.items() for i in range(2) if paths[i::2]]
    out: dict[str, dict] = {}
    with cf.ThreadPoolExecutor(max_workers=2) as pool:
        for part in pool.map(lambda b: _verify(*b), batches):
            out.update(part)
    if not any(_race_rows(r) for r in out.values()):
        pytest.skip(f"semcheck reports no {PROPERTY!r} property (no such row in its JSON reports)")
    return out


def _verdict(reports: dict[str, dict], key) -> tuple[str, dict | None]:
    """semcheck's race-free verdict for (path, devices, mode) and the row."""
    path, n, mode = key
    report = reports[path]
    assert "error" not in report, f"semcheck failed on {path}: {report['error']}"
    rows = [r for r in _race_rows(report) if r["devices"] == n and r["dma_mode"] == mode]
    assert rows, f"semcheck's report for {path} has no {PROPERTY} row at {n} devices, {mode}"
    verdicts = {r["verdict"] for r in rows}
    for v in ("violated", "unknown", "proved"):  # the weakest claim over all targets
        if v in verdicts:
            return v, next(r for r in rows if r["verdict"] == v)
    return sorted(verdicts)[0], rows[0]


SMALLEST = {p: min(c["devices"] for c in GT["cases"] if c["path"] == p) for p in FILES}
"""Each file's smallest recorded device count: its cases run by default, the larger ones are `slow`
(`make test-long`), which keeps the default suite inside its time budget."""
DEFAULT_FILES = frozenset(every_kth(FILES, 2, keep=sorted({k[0] for k in RACY})))
"""The files verified by default: every one with a race jax reported (where (i) and (ii) can fail) and
every second of the others (where they check that a race-free row is there); all of them under slow."""


def _params(keys):
    return [pytest.param(k, id=_case_id(k),
                         marks=() if k[1] == SMALLEST[k[0]] and k[0] in DEFAULT_FILES else pytest.mark.slow)
            for k in keys]


@pytest.mark.parametrize("key", _params(RACY))
def test_every_race_jax_reports_is_a_violation(reports, key):
    """(i) soundness: no race that jax's detector reports is missed."""
    verdict, row = _verdict(reports, key)
    assert verdict == "violated", (
        f"{_case_id(key)}: semcheck says {PROPERTY} {verdict}"
        f" ({(row or {}).get('reason', '')}), but\n{_describe(CASES[key])}"
    )


@pytest.mark.parametrize("key", _params(sorted(CASES)))
def test_proved_race_free_means_jax_saw_no_race(reports, key):
    """(ii) a race-free proof never meets a race jax reported."""
    verdict, _ = _verdict(reports, key)
    if verdict == "proved":
        assert not CASES[key]["race_reported"], (
            f"{_case_id(key)}: semcheck proves {PROPERTY}, but\n{_describe(CASES[key])}")


# --------------------------------------------------------------------------
# the record itself (no kernels run)
# --------------------------------------------------------------------------


def _sha256(path: str) -> str:
    return hashlib.sha256((ROOT / path).read_bytes()).hexdigest()


def test_record_covers_every_example_in_both_modes():
    files = mrg.example_files(ROOT)
    assert files == FILES, (
        "examples/ and race_ground_truth.json disagree: "
        f"{sorted(set(files) ^ set(FILES))}; rerun tests/kernels/make_race_ground_truth.py "
        "(--only PATH for one file)")
    for path in files:
        for n in (2, 4):
            for mode in MODES:
                assert (path, n, mode) in CASES, f"no record for {path} at {n} devices, {mode}"


@pytest.mark.parametrize("path", FILES)
def test_record_was_made_from_the_current_file(path):
    recorded = GT["examples"].get(path, {}).get("sha256")
    assert recorded == _sha256(path), (
        f"{path} changed since its race ground truth was recorded; rerun "
        f"`python tests/kernels/make_race_ground_truth.py --only {path}`")


def test_race_examples_race_and_clean_examples_do_not():
    """What the examples are meant to be, as jax's detector sees it."""
    for key, case in sorted(CASES.items()):
        needs = BUG_DEVICES.get(key[0])
        if case["kind"] == "race" and needs is not None and key[1] != needs:
            # its race needs the device count it is verified at (test_buggy_verdicts.DEVICES): the record's
            # other counts are its fix
            assert not case["race_reported"], _case_id(key)
        elif case["kind"] == "race":
            assert case["race_reported"], (
                f"{_case_id(key)}: a race example jax ran without a race report "
                f"(outcomes {case['outcomes']})")
            # a run that fails after reporting the race must be a failure the interpreter record declares
            raises_in = RAISES_IN.get(key[0], ())
            assert case["outcome"] == "completed" or key[2] in raises_in, (
                f"{_case_id(key)}: the race was reported, then the run failed without the interpreter record "
                f"declaring a failure in {key[2]} (outcomes {case['outcomes']})")
        elif case["kind"] == "clean":
            assert case["outcome"] == "completed" and not case["race_reported"], (
                f"{_case_id(key)}: a clean example, but\n{_describe(case)}")


def test_race_messages_parse():
    """Every race message was understood (so none is lost to the tests above)."""
    for key, case in CASES.items():
        assert not case["unparsed_races"], f"{_case_id(key)}: {case['unparsed_races']}"
    msg = (
        "RACE DETECTED\n"
        "  read of ('vmem', 103, 1, 0)[(0, slice(0, 8, 1), slice(0, 128, 1))] from (1, 0),"
        f" {ROOT}/examples/buggy/race_wrong_slot_wait.py:65:12 (_kernel.<locals>.body)\n"
        "  clock: [0 1]\n"
        "  write of ('vmem', 103, 1, 0)[()] from (102, 0),"
        f" {ROOT}/examples/buggy/race_wrong_slot_wait.py:55:4 (_kernel)\n"
        "  clock: [1 0]\n"
    )
    race = mrg.parse_race(msg, ROOT)
    assert race["new"] == {
        "access": "read", "memory_space": "vmem", "buffer_id": 103, "device": 1, "core": 0,
        "range": "[0, 0:8, 0:128]", "by": "core", "thread": [1, 0],
        "where": "examples/buggy/race_wrong_slot_wait.py:65 (_kernel.<locals>.body)",
    }
    assert race["earlier"]["by"] == "dma" and race["earlier"]["range"] == "[...]"
    assert str(ROOT) not in json.dumps(GT), "the record names this machine's paths"


# --------------------------------------------------------------------------
# (iii) live: jax still says what the record says
# --------------------------------------------------------------------------

LIVE = [
    ("examples/buggy/race_wrong_slot_wait.py", 2, "on_wait"),
    ("examples/buggy/race_read_before_wait_recv.py", 2, "eager"),
    ("examples/buggy/race_two_cores_one_hbm_region.py", 2, "on_wait"),
    ("examples/buggy/race_local_copy_read_before_wait.py", 2, "eager"),
    ("examples/double_buffered_pipeline.py", 2, "on_wait"),  # and one that does not race
]
LIVE_TIMEOUT = float(os.environ.get("SEMCHECK_RACE_LIVE_TIMEOUT", "60"))


def _live(key, timeout: float) -> dict:
    """One fresh run of jax's detector, summarised like a recorded case."""
    path, n, mode = key
    rep = mrg.run_with_race_detection(
        ROOT / path, n, mode, timeout,
        vector_clock_size=GT["parameters"]["vector_clock_size"])
    return mrg.summarise(path, n, mode, [rep], timeout)


def _signatures(case: dict) -> set:
    return {tuple(tuple(a[f] for f in mrg._ACCESS_KEYS) for a in r["accesses"])
            for r in case["races"]}


def _stale(key, live: dict, *, signatures: bool) -> list[str]:
    """How a fresh run contradicts the record.  A race the record saw in every
    one of several runs must be seen again, and one it never saw must not
    appear; with `signatures`, every race must be one the record has (same
    accesses at the same lines)."""
    rec = CASES[key]
    problems = []
    if live["outcome"] != rec["outcome"]:
        problems.append(f"outcome {live['outcome']} (recorded {rec['outcome']})")
    if rec["runs"] > 1 and rec["runs_with_race"] == rec["runs"] and not live["race_reported"]:
        problems.append(f"no race reported; all {rec['runs']} recorded runs reported one")
    if rec["runs"] > 1 and rec["runs_with_race"] == 0 and live["race_reported"]:
        problems.append(f"no recorded run had a race, but\n{_describe(live)}")
    new = _signatures(live) - _signatures(rec)
    if signatures and new:
        problems.append(f"races not in the record: {sorted(new)}")
    return problems


@pytest.mark.parametrize("key", LIVE, ids=[_case_id(k) for k in LIVE])
def test_live_detector_agrees_with_record(key):
    """(iii) a few examples at 2 devices, about 3 s each."""
    assert key in CASES, f"no record for {key}"
    rec = CASES[key]
    assert rec["runs"] > 1 and rec["runs_with_race"] in (0, rec["runs"]), "pick a steady case"
    problems = _stale(key, _live(key, LIVE_TIMEOUT), signatures=True)
    assert not problems, (f"{_case_id(key)}: jax's detector now says something else; rerun "
                          f"make_race_ground_truth.py --only {key[0]}:\n" + "\n".join(problems))


@pytest.mark.slow
def test_full_live_rerun_agrees_with_record():
    """Every recorded configuration once more, one run each (several minutes:
    the deadlocking examples take their whole timeout)."""
    keys = sorted(CASES)
    with cf.ThreadPoolExecutor(max_workers=2) as pool:
        lives = dict(zip(keys, pool.map(lambda k: _live(k, CASES[k]["timeout"]), keys)))
    failures = [f"{_case_id(k)}: {p}" for k in keys
                for p in _stale(k, lives[k], signatures=CASES[k]["kind"] == "race")]
    assert not failures, "\n".join(failures)
