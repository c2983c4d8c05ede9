"""RUN-22: past `SYMMETRIC_FROM` devices a certified kernel call is lowered by one period and decided
without building every device, with the verdicts the whole program gets."""

from __future__ import annotations

import os

import pytest

from semcheck.checker.properties.analysis import Analysis
from semcheck.checker.properties.checking import check_program
from semcheck.checker.properties.registry import IDS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
N = 260  # past the threshold, a multiple of 4 (the ring's fold)


def _calls(path: str, n: int) -> list:
    from semcheck.checker.frontend.concrete_inputs import trace_with_inputs
    from semcheck.checker.frontend.targets import load_targets

    t = load_targets(os.path.join(ROOT, path))[0]
    calls, inputs = trace_with_inputs(*t.build_shapes(n), path=t.path)
    return list(zip(calls, inputs))


def _verdicts(program, skip: tuple = ()) -> dict:
    analysis = Analysis(program, modes=("eager", "on_wait", "hardware"))
    return {(m, v.property): v.verdict for m in ("eager", "on_wait", "hardware")
            for v in check_program(program, m, tuple(p for p in IDS if (m, p) not in skip), analysis=analysis)}


@pytest.mark.rule("RUN-22")
def test_a_ring_past_the_threshold_is_decided_by_one_period(monkeypatch):
    from semcheck.checker.frontend.symmetric_lowering import SYMMETRIC_FROM, lower_call
    from semcheck.model.symmetric import Symmetric

    assert N >= SYMMETRIC_FROM
    (call, values), = _calls("examples/ring_allreduce.py", N)
    sym = lower_call(call, cores=None, name="ring", stats=None, inputs=values)
    assert isinstance(sym, Symmetric) and sym.period == 1
    whole = lower_call(call, cores=None, name="ring", stats=None, inputs=values, symmetric_from=N + 1)
    assert not isinstance(whole, Symmetric)
    assert sym.materialise() == whole
    want = _verdicts(whole)

    def refused(self):
        raise AssertionError("the Symmetric was built")

    # what the fold and one period prove needs no built program; the rest (invocation-confined under
    # hardware, PRG-113's held runs) is decided on it, as RUN-21 says
    monkeypatch.setattr(Symmetric, "materialise", refused)
    held = (("hardware", "invocation-confined"),)
    got = _verdicts(sym, skip=held)
    assert got == {k: v for k, v in want.items() if k not in held}


@pytest.mark.rule("RUN-21", "RUN-31")
def test_an_all_to_all_whose_checks_would_not_fit_in_memory_is_unknown_before_it_is_built(monkeypatch):
    """Unfolded (`--no-fold`), the all-to-all's semaphore properties need its whole program: at 2,048 devices
    16.8 million operations, whose checks keep about 19 GB, so each is unknown with the size and the bound
    and nothing is built (a bound of the operations alone let it grow until it was killed). Folded, the run
    of one class proves them (RUN-31)."""
    from semcheck.checker.frontend.symmetric_lowering import lower_call
    from semcheck.model.symmetric import MAX_MATERIALISED_OPS, Symmetric

    n = 2048
    (call, values), = _calls("bench/kernels/all_to_all.py", n)
    sym = lower_call(call, cores=None, name="a2a", stats=None, inputs=values)
    assert isinstance(sym, Symmetric) and sym.num_ops > MAX_MATERIALISED_OPS

    def refused(self):
        raise AssertionError("the Symmetric was built")

    monkeypatch.setattr(Symmetric, "materialise", refused)
    semaphores = ("id-agreement", "deadlock-free", "dma-bytes")
    for v in check_program(sym, "eager", semaphores, fold=False):
        assert v.verdict == "unknown" and "RUN-21" in v.reason, v
        assert f"{sym.num_ops:,} operations over {n:,} devices" in v.reason
    for v in check_program(sym, "eager", semaphores):
        assert v.verdict == "proved" and "RUN-31" in v.reason, v
