"""Race freedom for every N (specs/deciding/parametric.md PAR-11 .. PAR-15): the ring kernels proved, the odd-N
mutant refuted at its smallest N, and the argument at one N held to the per-N check on generated rings.

The kernels are traced at N = 2 .. 7 (PAR-3 needs six) in one worker process, whose jax has 8 host
devices; the per-N checks run there too.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
SLOTS = "tests/parametric_kernels/ring_slots.py"
MUTANT = "examples/buggy/race_two_hop_ring_slot_by_parity.py"
TRACED = tuple(range(2, 8))

pytestmark = pytest.mark.jax


@pytest.fixture(scope="module")
def worker():
    """One fresh process for the module's jax work (jax fixes its device count when it first starts)."""
    import concurrent.futures
    import multiprocessing

    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                                initializer=_boot) as pool:
        yield pool


def _boot():
    from semcheck.checker.frontend.targets import provision_devices

    provision_devices(8)
    import jax

    jax.devices()


def _argue(path, build_kwargs=None, at_n=None, per_n=()):
    """PAR-11 .. PAR-14 on the kernel traced at TRACED (at one N with `at_n`), and the per-N race-free
    verdicts at `per_n` (N, mode) pairs: plain data for the test process."""
    from semcheck.checker.frontend.api import load
    from semcheck.checker.parametric.races import argue
    from semcheck.checker.parametric.template import template_guard
    from semcheck.checker.properties.checking import check_program

    calls = {n: load(str(ROOT / path), devices=n, build_kwargs=build_kwargs)[0].call for n in TRACED}
    grid, _ = template_guard({n: c.jaxpr for n, c in calls.items()},
                             {n: c.grid[0] if c.grid else 1 for n, c in calls.items()}, axis="x")
    arg = argue({n: c.jaxpr for n, c in calls.items()}, grid, "x", at_n=at_n)
    verdicts = {}
    for n, mode in per_n:
        program = load(str(ROOT / path), devices=n, build_kwargs=build_kwargs)[0].program
        (v,) = check_program(program, mode, ("race-free",))
        verdicts[(n, mode)] = v.verdict
    return {"proved": arg.proved, "reason": arg.reason, "at": arg.at, "low": arg.low, "per_n": verdicts}


def _run(worker, *args, **kwargs):
    return worker.submit(_argue, *args, **kwargs).result()


@pytest.mark.rule("PAR-11", "PAR-12", "PAR-14")
@pytest.mark.parametrize("path", ["examples/ring_allgather.py", "examples/ring_permute.py"])
def test_the_ring_kernels_are_race_free_for_every_n(worker, path):
    got = _run(worker, path)
    assert got["proved"], got["reason"]
    assert got["low"] <= TRACED[-1] + 1  # every N below the argument's is traced


@pytest.mark.slow
@pytest.mark.rule("PAR-11", "PAR-12", "PAR-14", "PAR-15")
@pytest.mark.parametrize("path", ["examples/ring_allreduce.py", "examples/bidirectional_reduce_scatter.py",
                                  "examples/dma_count_without_read.py", "examples/whole_copy_wait.py"])
def test_every_ring_kernel_of_par_15_is_race_free_for_every_n(worker, path):
    got = _run(worker, path)
    assert got["proved"], got["reason"]


@pytest.mark.rule("PAR-14", "PAR-15")
def test_the_odd_n_mutant_is_refuted_at_its_smallest_n(worker):
    got = _run(worker, MUTANT, per_n=((3, "hardware"), (3, "eager"), (4, "hardware")))
    assert not got["proved"] and got["at"]["N"] == 3, got["reason"]
    assert got["at"]["device"] == 1 and "first at N = 3" in got["reason"]  # devices 0 and 2 both feed 1
    # the per-N check agrees at that N, and the even N after it is race-free
    assert got["per_n"] == {(3, "hardware"): "violated", (3, "eager"): "violated", (4, "hardware"): "proved"}
    assert _run(worker, MUTANT, at_n=4)["proved"]  # no pair left unordered at an even N


@pytest.mark.rule("PAR-12")
def test_a_ring_without_its_credit_is_not_proved(worker):
    got = _run(worker, SLOTS, {"credit": False, "slots": 2})
    assert not got["proved"] and "no order the semaphores force" in got["reason"]


@pytest.mark.rule("PAR-11")
def test_accesses_the_argument_cannot_read_withhold_the_claim(worker):
    got = _run(worker, SLOTS, {"loop": True})
    assert not got["proved"] and "ring_slots.py:" in got["reason"] and "PAR-11" in got["reason"]


RINGS = st.fixed_dictionaries({"slots": st.integers(1, 3), "off": st.integers(0, 2), "skew": st.integers(0, 1),
                               "credit": st.booleans(), "early": st.booleans()})


def _held(worker, kwargs, n):
    got = _run(worker, SLOTS, kwargs, at_n=n, per_n=((n, "hardware"), (n, "eager")))
    if got["proved"]:  # sound: what the argument proves the per-N check proves, in every mode
        assert set(got["per_n"].values()) == {"proved"}, (kwargs, n, got)
    else:  # on these rings its orders are the per-N check's: a pair it leaves unordered is a race
        assert got["at"]["N"] == n and got["per_n"][(n, "hardware")] == "violated", (kwargs, n, got)


@pytest.mark.rule("PAR-13", "PAR-14")
@settings(max_examples=3, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(kwargs=RINGS, n=st.integers(3, 8))
def test_the_argument_at_one_n_is_held_to_the_per_n_check(worker, kwargs, n):
    _held(worker, kwargs, n)


@pytest.mark.slow
@pytest.mark.rule("PAR-13", "PAR-14")
@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(kwargs=RINGS, n=st.integers(3, 8))
def test_the_argument_at_one_n_is_held_to_the_per_n_check_on_many_rings(worker, kwargs, n):
    _held(worker, kwargs, n)


@pytest.mark.slow
@pytest.mark.rule("PAR-12", "PAR-14")
@pytest.mark.parametrize("variant", ["one_credit", "late_wait"])
def test_bidirectional_mutants_are_refused_where_the_per_n_check_finds_the_race(worker, variant):
    path = "tests/parametric_kernels/bidirectional_variants.py"
    got = _run(worker, path, {"variant": variant})
    assert not got["proved"], variant
    n = got["at"]["N"]
    assert _run(worker, path, {"variant": variant}, at_n=n, per_n=((n, "hardware"),))["per_n"] == {
        (n, "hardware"): "violated"}
    assert _run(worker, path, {"variant": "clean"}, at_n=n)["proved"]
