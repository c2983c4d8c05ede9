"""ACC-74, ACC-75: under `hardware` a pick of rounded floats never takes a position padded with -inf while a
number remains, so an iterated top-k (each pick masked with -inf before the next) never repeats a pick; the bounds
that tell numbers from padding are the exact value's, and nothing is decided from them under `hardware`."""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from cli._support import semcheck_many  # noqa: E402

from semcheck.checker.frontend.pick_choices import assemble, row_choices, row_values  # noqa: E402
from semcheck.checker.frontend.range_cases import CaseSite, values_of  # noqa: E402
from semcheck.checker.frontend.values import Bounded  # noqa: E402
from semcheck.checker.properties.registry import IDS  # noqa: E402
from semcheck.model.ops import Loc  # noqa: E402

KERNELS = "tests/frontend/kernels/iterated_picks.py"
SOURCE = (ROOT / KERNELS).read_text().splitlines()


def _line(mark: str) -> int:
    return next(i + 1 for i, text in enumerate(SOURCE) if mark in text)


@pytest.fixture(scope="module")
def verdicts() -> dict[str, dict[str, dict[str, dict]]]:
    names = ("masked_argmax", "masked_top_k", "unmasked_argmax", "truncated", "stable_top_k")
    runs = semcheck_many([(("verify", f"{KERNELS}::{n}", "--devices", "2", "--dma-mode", "all", "--format", "json",
                            "--no-cache", "--no-config"), {"cwd": ROOT, "timeout": 900}) for n in names])
    out = {}
    for n, r in zip(names, runs):
        rows = json.loads(r.stdout)["results"]
        out[n] = {m: {row["property"]: row for row in rows if row["dma_mode"] == m}
                  for m in ("eager", "on_wait", "hardware")}
    return out


@pytest.mark.jax
@pytest.mark.rule("ACC-88")
def test_a_stable_top_k_is_unknown_under_hardware_where_jax_s_tpu_lowering_refuses_it(verdicts):
    """`stable_top_k` is `masked_top_k` with `lax.top_k`'s default `is_stable=True`: jax's TPU lowering of the kernel
    raises NotImplementedError there (checked by lowering both kernels for a TPU on this machine), so no TPU runs it:
    every property is unknown under hardware, naming the top_k's line and ACC-88 (before: proved, as `masked_top_k`,
    whose `is_stable=False` lowers). The interpreter's modes run it as before (every property proved)."""
    import jax

    line = _line("# the stable top_k's line")
    got = verdicts["stable_top_k"]
    for r in got["hardware"].values():
        assert r["verdict"] == "unknown" and r["stats"]["rule"] == "ACC-88", r
        assert f"iterated_picks.py:{line}" in r["reason"] and "is_stable=True" in r["reason"], r["reason"]
    assert set(got["hardware"]) == set(IDS)
    assert {r["verdict"] for m in ("eager", "on_wait") for r in got[m].values()} == {"proved"}
    assert verdicts["masked_top_k"]["hardware"]["deadlock-free"]["verdict"] == "proved"
    for stable, lowers in ((True, False), (False, True)):
        assert _lowers_for_a_tpu(lambda x, s=stable: jax.lax.top_k(x, 2, is_stable=s)[1]) == lowers


def _lowers_for_a_tpu(pick) -> bool:
    """Whether jax lowers a kernel storing `pick` of its input for a TPU (Mosaic's lowering rules, run here with this
    machine described as a TPU v5e); False where a rule raises NotImplementedError."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    sys.path.insert(0, str(ROOT / "tests" / "frontend" / "kernels"))
    from _common import cpu_as_tpu

    cpu_as_tpu()

    def kernel(x_ref, o_ref):
        o_ref[...] = pick(x_ref[...])

    call = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 2), jnp.int32))
    try:
        jax.jit(call).trace(jax.ShapeDtypeStruct((8, 128), jnp.float32)).lower(lowering_platforms=("tpu",))
    except NotImplementedError:
        return False
    return True


@pytest.mark.jax
@pytest.mark.rule("ACC-75")
def test_an_iterated_top_k_masked_with_minus_inf_is_proved_under_hardware(verdicts):
    """A token's top 2 of 3 experts, the first pick masked with -inf before the second (`masked_argmax`) or by
    `lax.top_k` (`masked_top_k`): the two picks differ on a TPU, so each expert's count is 0 or 1 and every copy
    is waited for: each of the 36 feasible cases (6 ordered pairs a device) proves every property under hardware
    (before: 81 cases, past the 64, unknown; and the 45 with a repeated pick would copy two rows and wait for
    one), as in the interpreter's modes."""
    for name in ("masked_argmax", "masked_top_k"):
        got = verdicts[name]
        assert {p: r["verdict"] for p, r in got["hardware"].items()} == {p: "proved" for p in IDS}, name
        assert all(r["stats"]["cases"] == 36 and r["stats"]["rule"] == "ACC-64" for r in got["hardware"].values())
        assert {r["verdict"] for m in ("eager", "on_wait") for r in got[m].values()} == {"proved"}, name


@pytest.mark.jax
@pytest.mark.rule("ACC-75")
def test_a_pick_masked_by_a_number_may_repeat_and_stays_unknown(verdicts):
    """Masked with 0.0 rather than -inf, the first pick may be chosen again (a TPU's probability may be 0): no
    case is excluded, so the second pick keeps its 9 values and the verdicts stay unknown under hardware, naming
    the pick's line past the budget."""
    line = _line("# the pick's line")
    for row in verdicts["unmasked_argmax"]["hardware"].values():
        assert row["verdict"] == "unknown"
        assert f"the argmax at {KERNELS}:{line}" in row["reason"] and "may take 9 values, past the 64" in row["reason"]


@pytest.mark.jax
@pytest.mark.rule("ACC-74")
def test_the_bounds_under_hardware_decide_nothing(verdicts):
    """`int(2 * p)` of a softmax's probability far from 1/2 is decided from the bounds in the interpreter's modes
    (proved) and not under hardware, where the bounds are only the exact value's: unknown, naming the softmax."""
    got = verdicts["truncated"]
    assert {r["verdict"] for m in ("eager", "on_wait") for r in got[m].values()} == {"proved"}
    softmax = _line("# the softmax's line")
    for row in got["hardware"].values():
        assert row["verdict"] == "unknown" and f"{KERNELS}:{softmax}" in row["reason"], row["reason"]


_ROW = st.lists(st.one_of(st.floats(-8, 8, width=32), st.just(-np.inf), st.just(np.nan)), min_size=1, max_size=5)


def _bounded(rows: list[list[float]]) -> Bounded:
    lo = np.asarray(rows, dtype=np.float64)[None]
    hi = np.where(np.isfinite(lo), lo + 0.5, lo)  # a number's bounds, the padding exactly
    return Bounded("rounded", Loc("k.py", 3), lo, hi, np.dtype("float32"))


@pytest.mark.rule("ACC-75")
@given(_ROW, st.integers(1, 3), st.randoms(use_true_random=False))
@example([0.5, -np.inf, 0.25], 1, None)
@example([-np.inf, -np.inf], 1, None)
@example([0.5, np.nan, -np.inf], 1, None)
@example([1.0, 2.0, -np.inf], 2, None)
def test_every_pick_a_tpu_makes_is_among_the_choices(row, k, rnd):
    """Sound: for any values a TPU may give within a number's bounds (drawn), and the padding exactly, the
    position of the largest value (ties to any of them) is among the argmax's choices, and the iterated top-k's
    picks among the top_k's; a padded position is excluded exactly where every element is a number or padding and
    one is a number."""
    x = _bounded([row])
    choices = row_choices("argmax", x, 1, 1, 1)
    number = np.isfinite(x.lo[0, 0])
    clean = bool((number | (x.lo[0, 0] == -np.inf)).all()) and number.any()
    n = len(row)
    if choices is None:
        assert not clean or number.all()
        allowed = set(range(n))
    else:
        allowed = {c[0] for c in row_values(choices[0], 1)}
        assert clean and allowed == set(np.flatnonzero(number).tolist())
    for _ in range(5 if clean else 0):
        tpu = np.where(number, x.lo[0, 0] + np.asarray([rnd.random() if rnd else 0.25 for _ in row]) * 0.5,
                       x.lo[0, 0])
        assert {int(i) for i in np.flatnonzero(tpu == tpu.max())} <= allowed
    tops = row_choices("top_k", x, 1, 1, k) if k <= n else None
    if tops is not None:
        assert clean and number.sum() >= k
        tpu, picks = np.where(number, x.lo[0, 0] + 0.25, x.lo[0, 0]), []
        for _ in range(k):
            picks.append(int(np.argmax(tpu)))
            tpu[picks[-1]] = -np.inf
        every = set(row_values(tops[0], k))
        assert tuple(picks) in every and all(len(set(t)) == k for t in every)


@pytest.mark.rule("ACC-75")
@given(st.integers(1, 2), st.integers(1, 2), st.integers(2, 4), st.integers(1, 2))
@example(2, 1, 3, 2)
def test_the_cases_are_every_combination_of_each_row_s_choices(lanes, tokens, experts, k):
    """A top_k occurrence over rows whose first expert is padded: its values are exactly every combination of
    each row's k-permutations of the other experts, assembled on the picks' axis."""
    k = min(k, experts - 1)
    lo = np.zeros((lanes, tokens, experts))
    lo[..., 0] = -np.inf
    x = Bounded("rounded", Loc("k.py", 3), lo, np.where(np.isfinite(lo), lo + 1, lo), np.dtype("float32"))
    rows = row_choices("top_k", x, lanes, 1, k)
    site = CaseSite("top_k", Loc("k.py", 5), (lanes, tokens, k), experts, rows, 2, k)
    got = values_of(site)
    per_row = list(itertools.permutations(range(1, experts), k))
    assert site.count() == len(got) == len(per_row) ** (lanes * tokens)
    assert {v.tobytes() for v in got} == {
        assemble(combo, (lanes, tokens, k), 2).tobytes()
        for combo in itertools.product(per_row, repeat=lanes * tokens)}
    assert all((v != 0).all() and v.shape == (lanes, tokens, k) for v in got)


_INTERPRET = r"""
import itertools, sys
sys.path.insert(0, "tests/frontend/kernels")
from semcheck.checker.frontend import provision_devices
provision_devices(2)
import jax, numpy as np
import iterated_picks as ip
mode = sys.argv[1]
pairs = list(itertools.permutations(range(ip.EXPERTS), ip.K))
for name in ("masked_argmax", "masked_top_k"):
    for i, pair in enumerate(pairs):
        table = np.zeros((2, ip.EXPERTS), np.float32)
        for device, (a, b) in enumerate((pair, pairs[(i + 1) % len(pairs)])):
            table[device, a], table[device, b] = 4.0, 2.0  # the softmax ranks a, then b
        fn, (t, x) = getattr(ip, name)(2, dma_mode=mode, table=table)
        print("CASE", name, pair, flush=True)
        out, x = np.asarray(jax.block_until_ready(fn(t, x))), np.asarray(x)
        for device, (a, b) in enumerate((pair, pairs[(i + 1) % len(pairs)])):
            rows = out[device * 8:(device + 1) * 8, 1]
            got = sorted(int(r) // 2 for r in np.flatnonzero(rows == x[device * 8, 1]))
            print("ROWS", device, got, sorted((a, b)), flush=True)
"""


@pytest.mark.jax
@pytest.mark.rule("ACC-75")
@pytest.mark.parametrize("dma_mode", ["eager", "on_wait"])
def test_the_interpreter_reaches_every_feasible_pick_as_semcheck_decides_it(dma_mode):
    """Ground truth: each of a device's 6 ordered pairs of distinct experts is reached (logits ranking them), and
    jax's interpreter copies one row into the slot of each picked expert and completes with no semaphore left
    non-zero, as each case semcheck decides says."""
    import subprocess

    p = subprocess.run([sys.executable, "-c", _INTERPRET, dma_mode], cwd=ROOT, capture_output=True, text=True,
                       timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    text = p.stdout + p.stderr
    assert text.count("CASE") == 12 and "non-zero count" not in text
    rows = [line.split(" ", 2)[2] for line in text.splitlines() if line.startswith("ROWS")]
    assert len(rows) == 24
    for r in rows:
        got, want = r.split("] [")
        assert got + "]" == "[" + want, r
