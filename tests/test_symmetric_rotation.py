"""RUN-23: a Symmetric's rotation by its own period is read off its representatives, and the cores it
rotates are kept, with the answers of comparing every operation with its rotation and of rotating
every core afresh.

The truth is the operation-by-operation check (`symmetry.compare`, which `Rotation.certified` stands
in for) and the cores `Symmetric._built` rotates out of the representatives, on Symmetrics
made of drawn programs at any divisor of their device count, with the shifts DR-5 reads off them or
with drawn ones, so that many do not repeat as claimed and the check must refuse them.
"""

from __future__ import annotations

import os
import sys

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from semcheck.model import symmetry as symmetry_module
from semcheck.model import symmetric as symmetric_module
from semcheck.model.fold import find_fold, race_symmetry
from semcheck.model.symmetry import Rotation, divisors
from semcheck.model.ops import Access, DmaStart, Program, Signal
from semcheck.model.symmetric import Symmetric
from test_races import programs_with_accesses, symmetric_rings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "z3"))
from z3_strategies import symmetric_programs  # noqa: E402


def _labels(program: Program) -> list[str]:
    out = set()
    for ops in program.cores:
        for op in ops:
            if type(op) is Access:
                out.add(op.buf)
            elif type(op) is DmaStart:
                out.update(label for label in (op.src_buf, op.dst_buf) if label is not None)
    return sorted(out)


@st.composite
def claimed(draw) -> Symmetric:
    """A Symmetric of a drawn program's first `k` devices, `k` any proper divisor of its device count,
    with DR-5's shifts or drawn ones; now and then a named device of a representative is moved out of
    range. Its rotation may well not map it onto itself: that is for the check to find."""
    program = draw(st.one_of(symmetric_rings(), programs_with_accesses(),
                             symmetric_programs(max_cores=8, foldable=True).map(lambda x: x[0])))
    topo = program.topology
    k = draw(st.sampled_from(divisors(topo.num_devices)[:-1] or [topo.num_devices]))
    assume(k < topo.num_devices)
    rot = Rotation.observe(program, shifted=True)
    found_k, found = rot.devices, dict(rot.shifts)
    labels = _labels(program)
    if draw(st.booleans()) or not labels:
        shifts = dict(found) if found_k == k else {}
    else:
        shifts = {label: (draw(st.integers(0, 16)), draw(st.sampled_from([8, 16, 24, 32, 48, 64])))
                  for label in labels if draw(st.booleans())}
    reps = [list(ops) for ops in program.cores[: k * topo.cores_per_device]]
    if draw(st.integers(0, 4)) == 0:
        named = [(c, i) for c, ops in enumerate(reps) for i, op in enumerate(ops)
                 if type(op) in (Signal, DmaStart) and op.device is not None]
        if named:
            c, i = draw(st.sampled_from(named))
            reps[c][i] = symmetric_module.replaced(reps[c][i], device=draw(st.sampled_from([-1, topo.num_devices])))
    try:
        sym = Symmetric(topo, k, shifts, tuple(map(tuple, reps)), collective_id=program.collective_id)
        sym.materialise()  # a shift that wraps a region round is no rotation (DR-5): not drawn
    except ValueError:
        assume(False)
    return Symmetric(topo, k, shifts, tuple(map(tuple, reps)), collective_id=program.collective_id)


def _compared(sym: Symmetric, infer: bool):
    """What the operation-by-operation check answers on `sym` at its period (as `Rotation.observe` asks it)."""
    return symmetry_module.compare(sym, sym.period, infer=infer, upto=sym.period * sym.topology.cores_per_device)


@pytest.mark.rule("RUN-23")
@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(claimed(), st.booleans())
def test_the_rotation_read_off_the_representatives_is_the_compared_one(sym, infer):
    """Names, shifts and refusals: the same as comparing each representative with its predecessor."""
    if not symmetry_module._certifiable(sym, infer):
        return
    got = Rotation.certified(sym, shifted=infer)
    event("repeats" if got is not None else "refused")
    assert got == _compared(sym, infer)


@pytest.mark.rule("RUN-23")
@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(claimed())
def test_the_symmetry_and_folds_are_those_of_the_compared_rotation(sym):
    """DR-5's period, DR-8's fold and RUN-7's fold of the skeleton, with and without RUN-23."""
    read_off = (race_symmetry(sym, within=sym.period), find_fold(sym.skeleton(), within=sym.period))
    with pytest.MonkeyPatch.context() as m:
        m.setattr(symmetry_module, "_certifiable", lambda program, shifted: False)
        fresh = Symmetric(sym.topology, sym.period, sym.shifts, sym.representatives, collective_id=sym.collective_id)
        compared = (race_symmetry(fresh, within=fresh.period), find_fold(fresh.skeleton(), within=fresh.period))
    assert read_off == compared


@pytest.mark.rule("RUN-23")
@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(claimed(), st.lists(st.integers(0, 10_000), min_size=1, max_size=40), st.integers(1, 40))
def test_kept_cores_are_the_rotated_ones_whatever_is_dropped(sym, asked, bound):
    """However few operations the cache may keep, every core asked for is the one rotated afresh."""
    whole = sym.materialise()
    with pytest.MonkeyPatch.context() as m:
        m.setattr(symmetric_module, "MAX_CACHED_OPS", bound)
        for c in asked:
            c %= sym.topology.num_cores
            assert sym.core(c) == whole.cores[c] == sym.cores[c - sym.topology.num_cores]
        assert sym._made.ops <= bound or len(sym._made.cores) == 1
