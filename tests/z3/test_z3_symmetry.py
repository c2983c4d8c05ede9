"""RUN-6: device-rotation symmetry, and the deadlock query restricted to invariant vectors."""

from __future__ import annotations

import pytest
from hypothesis import event, given

import z3_truth as truth
from z3_strategies import examples, programs, symmetric_programs

from semcheck.checker.z3 import deadlock_free
from semcheck.checker.static import symmetry as symmetry_module
from ring_programs import ring_allreduce
from semcheck.checker.z3.deadlock import BlockCondition, Conditions
from semcheck.checker.static.lowering import lower
from semcheck.checker.static.symmetry import find_rotation
from semcheck.model.symmetry import Rotation
from semcheck.model import DMA_MODES, Signal, Topology, Wait, SemRef, Scratch, launch

pytestmark = pytest.mark.rule("RUN-6")


def _image(b: BlockCondition, rot: Rotation) -> BlockCondition:
    """The blocking condition `b` with every core id rotated."""
    if b.kind == "sum":
        terms = tuple(sorted((rot.image(o), p, a) for o, p, a in b.terms))
    elif b.kind == "barrier":
        terms = tuple(sorted((rot.image(p), pos) for p, pos in b.terms))
    else:
        terms = b.terms
    owner = rot.image(b.owner) if b.owner >= 0 else b.owner
    return b._replace(core=rot.image(b.core), owner=owner, terms=terms)


def _assert_automorphism(low, rot: Rotation) -> None:
    """Independently of `find_rotation`: every core's blocking conditions are its preimage's, rotated."""
    cond = Conditions(low)
    n = low.program.topology.num_cores
    for c in range(n):
        assert low.lengths[rot.image(c)] == low.lengths[c] and low.held_at(rot.image(c)) == low.held_at(c)
        mine = [_image(b, rot) for b in cond.at[c]]
        theirs = cond.at[rot.image(c)]
        canon = lambda bs: sorted((b.pos, b.kind, b.owner, b.pos_of, tuple(sorted(b.terms)), b.need) for b in bs)  # noqa: E731
        assert canon(mine) == canon(theirs), (c, rot)


@pytest.mark.parametrize("n", [2, 3, 8])
def test_a_ring_is_symmetric_under_rotating_by_one_device(n):
    for mode in DMA_MODES:
        rot = find_rotation(lower(ring_allreduce(n), mode))
        assert rot == Rotation(Topology(n), 1) and list(rot.reps) == [0]


def test_a_ring_with_one_device_out_of_step_has_no_symmetry():
    for mode in DMA_MODES:
        assert find_rotation(lower(ring_allreduce(4, bug="deadlock"), mode)) is None


def test_pairs_of_devices_are_symmetric_under_rotating_by_two():
    # even devices signal their right neighbour, odd devices wait: a rotation by one device
    # maps a signaller onto a waiter, by two onto a signaller
    n = 6
    bodies = [[Signal(SemRef("s"), 1, device=(d + 1) % n)] if d % 2 == 0 else [Wait(SemRef("s"), 1)]
              for d in range(n)]
    p = launch(Topology(n), bodies, scratch=[Scratch("s", 1)])
    for mode in DMA_MODES:
        low = lower(p, mode)
        rot = find_rotation(low)
        assert rot is not None and rot.devices == 2 and list(rot.reps) == [0, 1]
        _assert_automorphism(low, rot)
        v = deadlock_free(p, mode)
        assert v.verdict == "proved" and v.stats["symmetry"] == {"rotate_devices": 2, "orbits": 2}


@examples(40, 4000)
@given(symmetric_programs())
def test_an_unperturbed_template_is_found_symmetric_and_the_rotation_is_an_automorphism(drawn):
    p, perturbed = drawn
    for mode in DMA_MODES:
        low = lower(p, mode)
        rot = find_rotation(low)
        event(f"{mode} perturbed={perturbed} symmetric={rot is not None}")
        if rot is not None:
            _assert_automorphism(low, rot)
        elif not perturbed and low.ok:
            pytest.fail(f"the template's rotation was not recognised under {mode}")


@examples(40, 2000)
@given(programs())
def test_a_rotation_found_in_any_program_is_an_automorphism(p):
    for mode in DMA_MODES:
        low = lower(p, mode)
        rot = find_rotation(low)
        if rot is not None:
            event("symmetric")
            _assert_automorphism(low, rot)


@examples(80, 4000)
@given(symmetric_programs())
@pytest.mark.rule("PROP-4")
def test_the_symmetric_query_decides_as_the_full_query_and_the_explorer(drawn):
    p, perturbed = drawn
    for mode in DMA_MODES:
        ex = truth.explored(p, mode)
        reduced = deadlock_free(p, mode)
        full = deadlock_free(p, mode, symmetry=False)
        assert reduced.verdict == full.verdict, (reduced, full)
        event(f"{mode} {reduced.verdict} symmetric={'symmetry' in reduced.stats}")
        if reduced.verdict != "unknown":
            assert (reduced.verdict == "violated") == ("deadlock" in ex.kinds())


def test_claiming_symmetry_that_is_not_there_is_caught(monkeypatch):
    """The cross-check has teeth: with the automorphism check switched off, some perturbed
    program gets a wrong answer, which the fast-run guard or the explorer exposes."""
    from hypothesis import HealthCheck, Phase, settings

    monkeypatch.setattr(symmetry_module, "_automorphism", lambda low, rot: True)
    wrong = []

    @settings(max_examples=1000, phases=[Phase.generate], deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(symmetric_programs())
    def search(drawn):
        p, perturbed = drawn
        if wrong or not perturbed:
            return
        for mode in DMA_MODES:
            try:
                v = deadlock_free(p, mode)
            except AssertionError:  # EncodingBug: the fast run contradicts the query
                wrong.append(p)
                return
            try:
                ex = truth.explored(p, mode)
            except Exception:  # noqa: BLE001 - hypothesis rejection outside a test: skip it
                return
            if v.verdict != "unknown" and (v.verdict == "violated") != ("deadlock" in ex.kinds()):
                wrong.append(p)
                return

    search()
    assert wrong, "no perturbed program exposed a false symmetry claim"
