"""ACC-64: an index whose range is known whatever a TPU's rounding (an argmax of a softmax) decided under
`hardware` case by case: proved where every case proves, violated where every case violates, unknown otherwise
or past the budget, naming the argmax."""

from __future__ import annotations

import itertools
import json
import math
import sys
from pathlib import Path

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from cli._support import semcheck_many  # noqa: E402

from semcheck.checker.frontend.errors import Unsupported  # noqa: E402
from semcheck.checker.frontend.range_cases import CaseSite, HardwareCases, lower_by_cases, values_of  # noqa: E402
from semcheck.checker.properties.per_mode_values import combine_cases  # noqa: E402
from semcheck.checker.properties.registry import IDS  # noqa: E402
from semcheck.checker.properties.verdict import Verdict, Witness  # noqa: E402
from semcheck.model.ops import Loc  # noqa: E402

KERNELS = "tests/frontend/kernels/ranged_picks.py"
SOURCE = (ROOT / KERNELS).read_text().splitlines()
ARGMAX = next(i + 1 for i, text in enumerate(SOURCE) if "# the argmax's line" in text)


def _args(target: str, modes: str = "hardware", devices: str = "2"):
    return ("verify", target, "--devices", devices, "--dma-mode", modes, "--format", "json", "--no-cache",
            "--no-config"), {"cwd": ROOT, "timeout": 900}


@pytest.fixture(scope="module")
def hardware() -> dict[str, dict[str, dict]]:
    names = ("own_count", "complement", "wait_one_more", "expert_zero", "lax_top_k", "threshold_count")
    runs = semcheck_many([_args(f"{KERNELS}::{n}", "all") for n in names])
    out = {}
    for n, r in zip(names, runs):
        rows = json.loads(r.stdout)["results"]
        out[n] = {m: {row["property"]: row for row in rows if row["dma_mode"] == m}
                  for m in ("eager", "on_wait", "hardware")}
    return out


@pytest.mark.jax
@pytest.mark.rule("ACC-64")
def test_an_index_whose_range_is_known_is_proved_under_hardware_by_cases(hardware):
    """Each token's argmax over a softmax is in [0, 2) whatever a TPU's `exp` gives: the 16 cases of the picks at
    2 devices each prove every property, so every property is proved under hardware (before: unknown, ACC-37);
    `complement` waits for `TOKENS - count[1 - me]` rows, equal to the rows sent only because both counts come
    from the same picks, which every case keeps; `lax_top_k` picks by `lax.top_k` (an iterated argmax)."""
    for name in ("own_count", "complement", "lax_top_k"):
        rows = hardware[name]["hardware"]
        assert {p: r["verdict"] for p, r in rows.items()} == {p: "proved" for p in IDS}, name
        assert all(r["stats"]["rule"] == "ACC-64" and r["stats"]["cases"] == 16 for r in rows.values())


@pytest.mark.jax
@pytest.mark.rule("ACC-65", "ACC-74")
def test_a_count_over_a_threshold_is_proved_under_hardware_by_cases(hardware):
    """The count of a device's tokens whose probability for expert 0 is at least 1/2: each comparison is true or
    false whatever a TPU's softmax gives, and the count is computed from the chosen truths, so the copy it sizes
    and its wait agree in each of the 16 cases: proved under hardware (before: unknown), as in the interpreter's
    modes. (ACC-74: the softmax's bounds under hardware decide no comparison: still 16 cases.)"""
    got = hardware["threshold_count"]
    assert {p: r["verdict"] for p, r in got["hardware"].items()} == {p: "proved" for p in IDS}
    assert all(r["stats"]["cases"] == 16 for r in got["hardware"].values())
    assert {r["verdict"] for m in ("eager", "on_wait") for r in got[m].values()} == {"proved"}


@pytest.mark.jax
@pytest.mark.rule("ACC-64")
def test_a_property_every_case_violates_is_violated_under_hardware(hardware):
    """`wait_one_more` always waits for one row more than it copies: every case deadlocks and is short of bytes,
    so deadlock-free and dma-bytes are violated under hardware as in the interpreter's modes, the reason saying
    every case violates them; the rest keep the interpreter modes' verdicts."""
    got = hardware["wait_one_more"]
    for prop in IDS:
        assert got["hardware"][prop]["verdict"] == got["eager"][prop]["verdict"], prop
    for prop in ("deadlock-free", "dma-bytes"):
        row = got["hardware"][prop]
        assert row["verdict"] == "violated" and "for each of the 16 cases" in row["reason"], row
        assert f"ranged_picks.py:{ARGMAX}" in row["reason"]


@pytest.mark.jax
@pytest.mark.rule("ACC-64")
def test_cases_that_disagree_are_unknown_naming_each(hardware):
    """`expert_zero`: device 1 waits for expert 0's count. Some picks leave rows unwaited, some wait for rows
    never sent, some agree: under hardware the byte properties are unknown, the reason naming a case of each
    verdict and the argmax's line (the interpreter's own picks agree: proved in its modes)."""
    got = hardware["expert_zero"]
    for prop in ("deadlock-free", "exit-balance", "dma-bytes"):
        row = got["hardware"][prop]
        assert row["verdict"] == "unknown", row
        assert "violated for the case" in row["reason"] and "proved for the case" in row["reason"], row["reason"]
        assert f"ranged_picks.py:{ARGMAX}" in row["reason"] and "ACC-64" in row["reason"]
        assert got["eager"][prop]["verdict"] == "proved"


@pytest.mark.jax
@pytest.mark.rule("ACC-64")
def test_past_the_budget_is_unknown_naming_the_argmax_and_its_values():
    """The softmax MoE example routes 8 tokens a device by an iterated argmax: its first pick alone may take 2^16
    values at 2 devices, past the 64 cases, so every property stays unknown under hardware, naming that argmax's
    line and its number of values."""
    path = "examples/moe_softmax_topk_dispatch.py"
    line = next(i + 1 for i, t in enumerate((ROOT / path).read_text().splitlines()) if "# the pick's line" in t)
    (run,) = semcheck_many([_args(path)])
    rows = json.loads(run.stdout)["results"]
    assert len(rows) == len(IDS) and {r["verdict"] for r in rows} == {"unknown"}
    for r in rows:
        assert f"the argmax at {path}:{line}" in r["reason"] and "65,536 values, past the 64 cases" in r["reason"]


_INTERPRET = r"""
import itertools, json, sys
sys.path.insert(0, "tests/frontend/kernels")
from semcheck.checker.frontend import provision_devices
provision_devices(2)
import jax, numpy as np
import ranged_picks as rp
mode = sys.argv[1]
def run(name, picks):
    table = np.zeros((2 * rp.TOKENS, rp.EXPERTS), np.float32)
    table[np.arange(2 * rp.TOKENS), picks] = 3.0  # the softmax picks `picks`
    fn, (t, x) = getattr(rp, name)(2, dma_mode=mode, table=table)
    print("CASE", name, "".join(map(str, picks)), flush=True)
    out = np.asarray(jax.block_until_ready(fn(t, x)))
    print("END", flush=True)
for name in ("own_count", "complement", "lax_top_k", "threshold_count"):
    for picks in itertools.product(range(rp.EXPERTS), repeat=2 * rp.TOKENS):
        run(name, list(picks))
run("expert_zero", [0, 0, 1, 1])
run("expert_zero", [0, 1, 0, 1])
"""


@pytest.mark.jax
@pytest.mark.rule("ACC-64", "ACC-65")
@pytest.mark.parametrize("dma_mode", ["eager", "on_wait"])
def test_the_interpreter_reaches_every_case_as_semcheck_decides_it(dma_mode):
    """Ground truth: every case is a value the kernel reaches (logits whose softmax picks it), and jax's
    interpreter runs each as semcheck's case says: `own_count`, `complement`, `lax_top_k` and `threshold_count`
    (whose comparisons the same logits decide) complete with no semaphore left non-zero for all 16 picks; `expert_zero` leaves device 1's two rows on its semaphore for one (in eager:
    on_wait performs a copy only at its wait) and completes clean for another, so neither verdict holds for
    every case."""
    import subprocess

    p = subprocess.run([sys.executable, "-c", _INTERPRET, dma_mode], cwd=ROOT, capture_output=True, text=True,
                       timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    cases: dict[str, list[str]] = {}
    for text in (p.stdout + p.stderr).splitlines():
        if text.startswith("CASE"):
            current = cases.setdefault(" ".join(text.split()[1:]), [])
        elif "non-zero count" in text:
            current.append(text)
    assert len(cases) == 66
    leaks = {k for k, v in cases.items() if v}
    if dma_mode == "eager":
        assert leaks == {"expert_zero 0011"}, leaks
        assert any(": 1024" in t for t in cases["expert_zero 0011"]), cases["expert_zero 0011"]
    else:  # on_wait performs a copy at its wait only, and device 1's is never waited
        assert leaks == set(), leaks


_KINDS = st.sampled_from(["proved", "vacuous", "violated", "unknown"])


def _verdict(kind: str) -> Verdict:
    if kind == "violated":
        return Verdict("dma-bytes", kind, witness=Witness("short"))
    return Verdict("dma-bytes", kind, reason="" if kind == "proved" else f"why {kind}")


@pytest.mark.rule("ACC-64")
@given(st.lists(_KINDS, min_size=1, max_size=8))
@example(["proved", "violated"])
@example(["violated", "violated"])
def test_the_combined_verdict_is_the_cases_agreement(kinds):
    """Proved only where every case proves, violated only where every case violates (with the first case's
    witness), vacuous where every case holds and some vacuously; any disagreement is unknown naming the cases."""
    cases = [(f"argmax at k.py:7 = [{i}]", [_verdict(k)]) for i, k in enumerate(kinds)]
    (got,) = combine_cases(["dma-bytes"], cases)
    if set(kinds) == {"proved"}:
        assert got.verdict == "proved"
    elif set(kinds) <= {"proved", "vacuous"}:
        assert got.verdict == "vacuous"
    elif set(kinds) == {"violated"}:
        assert got.verdict == "violated" and got.witness.message == "short" and "[0]" in got.reason
    else:
        assert got.verdict == "unknown"
        for k in set(kinds):
            first = kinds.index(k)
            assert f"{k} for the case argmax at k.py:7 = [{first}]" in got.reason, got.reason
    assert got.stats["cases"] == len(kinds) and got.stats["rule"] == "ACC-64"


@pytest.mark.rule("ACC-64")
@given(st.lists(st.tuples(st.integers(1, 3), st.integers(1, 2), st.integers(1, 3)), min_size=1, max_size=3),
       st.integers(1, 80))
@example([(2, 2, 2)], 64)
@example([(2, 2, 2), (2, 1, 1)], 64)
def test_every_value_is_enumerated_within_the_budget(sites, budget):
    """A lowering needing occurrences of drawn shapes and ranges (lanes, elements, size): within the budget the
    cases are exactly every combination of their values, lane by lane and element by element; past it the
    answer is a refusal naming the occurrence and its number of values; never more lowerings than the budget."""
    made = [CaseSite("argmax", Loc("k.py", 10 + i), (lanes, elements), size)
            for i, (lanes, elements, size) in enumerate(sites)]
    calls = []

    def lower(rec):
        calls.append(len(rec.values))
        for i, site in enumerate(made):
            rec.seen[i] = site
            if i >= len(rec.values):
                raise Unsupported("cond", "needs the pick", Loc("k.py", 99))
        return tuple(tuple(v.ravel().tolist()) for v in rec.values)

    got = lower_by_cases(lower, budget)
    total = math.prod(s.count() for s in made)
    assert len(calls) <= max(budget, 1)
    if isinstance(got, HardwareCases):
        every = {tuple(tuple(v.ravel().tolist()) for v in combo)
                 for combo in itertools.product(*(values_of(s) for s in made))}
        assert len(got) == total and {p for _, p in got} == every
    else:
        assert isinstance(got, str) and "past the" in got and "ACC-64" in got
        assert any(f"k.py:{10 + i}" in got and f"{s.count_words()} values" in got for i, s in enumerate(made))
        assert total + 1 > budget or len(made) > 1


_DRAWN = r"""
import json, sys
sys.path.insert(0, "tests/frontend/kernels")
from semcheck.checker.frontend import provision_devices
provision_devices(2)
import jax, numpy as np
from semcheck.checker.frontend.api import lower_target
from semcheck.checker.frontend.targets import load_targets
from semcheck.checker.properties.checking import check_program
from semcheck.checker.properties.followed_values import settle
from semcheck.checker.properties.per_mode_values import combine_cases
import ranged_picks as rp
table, threshold = json.loads(sys.argv[1])
kw = {"table": np.asarray(table, np.float32), "threshold": threshold}
target = next(t for t in load_targets("tests/frontend/kernels/ranged_picks.py") if t.name == "threshold_count")
(kernel,) = lower_target(target, 2, build_kwargs=kw, per_mode=True)
def verdicts(program, mode):
    got = {v.property: v for v in check_program(program, mode)}
    return list(settle(program, mode, got, lambda: got["race-free"]).values())
cases = [(w, verdicts(p, "hardware")) for w, p in kernel.hardware]
hardware = sorted({v.verdict for v in combine_cases([v.property for v in cases[0][1]], cases)})
fn, args = rp.threshold_count(2, dma_mode="eager", **kw)
jax.block_until_ready(fn(*args))
print(json.dumps({"cases": len(cases), "hardware": hardware}))
"""


@pytest.mark.jax
@pytest.mark.rule("ACC-65")  # each drawn example: 17 lowerings, 16 checked, one interpret-mode run (about 6 s)
@settings(max_examples=2, deadline=None, derandomize=True)
@given(st.lists(st.lists(st.floats(-4, 4, width=32, allow_subnormal=False), min_size=2, max_size=2), min_size=4,
                max_size=4), st.floats(0.05, 0.95))
@example([[0.0, 1.0], [1.0, 0.0], [0.0, 0.0], [2.0, -1.0]], 0.45)
def test_drawn_logits_and_thresholds_are_proved_under_hardware_in_every_case(table, threshold):
    """Whatever the logits and the threshold, the hardware lowering takes the 16 truth values of the 4 comparisons,
    and every property is proved in each: the verdict does not rest on the values the interpreter computes; jax's
    interpreter runs the drawn kernel to completion. (A probability within 1e-3 of the threshold is a near tie the
    interpreter modes' lowering refuses, ACC-36, and the call is then not lowered at all: not drawn.)"""
    import subprocess

    probs = [1 / (1 + math.exp(b - a)) for a, b in table]
    assume(all(abs(p - threshold) > 1e-3 for p in probs))

    p = subprocess.run([sys.executable, "-c", _DRAWN, json.dumps([table, threshold])], cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got == {"cases": 16, "hardware": ["proved"]}, got
    assert "non-zero count" not in p.stdout + p.stderr
