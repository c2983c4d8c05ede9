"""RUN-36: one rotation object, made by comparing cores or from a certificate, read by every use."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ring_programs import ring_allreduce
from semcheck.checker.static.lowering import lower
from semcheck.checker.static.symmetry import find_rotation
from semcheck.model.fold import find_fold, race_symmetry
from semcheck.model.ops import DmaStart, Region
from semcheck.model.symmetric import Symmetric
from semcheck.model.symmetry import Rotation, shift_region, shifts_onto
from test_races import _chunk_ring, symmetric_rings

pytestmark = pytest.mark.rule("RUN-36")


def _elements(r: Region) -> set[tuple[int, ...]]:
    boxes = r.parts or (r.box,)
    return {x for b in boxes for x in itertools.product(*(range(lo, hi) for lo, hi in b))}


@st.composite
def regions(draw) -> tuple[Region, tuple[int, int]]:
    m = draw(st.integers(1, 12))
    lo = draw(st.integers(0, m - 1))
    hi = draw(st.integers(lo + 1, m))
    rest = ((0, draw(st.integers(1, 2))),)
    parts: tuple = ()
    shape = draw(st.sampled_from(["box", "rows", "stripes"]))
    if shape == "rows" and hi - lo >= 2:  # two boxes, the second one row further on
        mid = draw(st.integers(lo + 1, hi - 1))
        parts = (((lo, mid),) + rest, ((mid, hi),) + ((0, 1),))
    elif shape == "stripes":  # two boxes over the same rows: columns 0 and 2 (a stride, ACC-16)
        rest = ((0, 3),)
        parts = (((lo, hi), (0, 1)), ((lo, hi), (2, 3)))
    return Region(((lo, hi),) + rest, parts=parts), (draw(st.integers(0, 2 * m)), m)


@settings(max_examples=300, deadline=None)
@given(regions())
def test_a_region_shifts_onto_the_cyclic_shift_of_its_elements(drawn):
    """DR-5's image, one definition: a region's image holds exactly its elements' rows moved cyclically,
    and a region whose moved rows are no box (they wrap round, or its boxes cover the whole extent) has
    none: then no region is its image."""
    r, (d, m) = drawn
    moved = {((x[0] + d) % m,) + x[1:] for x in _elements(r)}
    try:
        image = shift_region(r, (d, m))
    except ValueError:
        rows = sorted({x[0] for x in moved})
        whole = r.box[0] == (0, m)
        assert whole and any(p[0] != (0, m) for p in r.parts) or rows != list(range(rows[0], rows[0] + len(rows)))
        assert not shifts_onto(r, (d, m), r)  # no image: the check answers no, it does not raise
        return
    assert _elements(image) == moved
    assert shifts_onto(r, (d, m), image)
    assert shifts_onto(r, (d, m), r) == (image == r)


@pytest.fixture(scope="module")
def ring():
    return ring_allreduce(8)


def test_every_use_reads_the_one_rotation(ring):
    """The rotation compared core by core, the one a Symmetric is made with and reads off itself, and the
    one RUN-6 checks on the lowering are one object; the folds and the Z3 orbits read its period."""
    rot = Rotation.observe(ring, shifted=True)
    assert rot.devices == 1 and not rot.trivial
    assert race_symmetry(ring)[0] == rot.devices
    sym = Symmetric.of(ring, 2, rot.shifts)
    assert sym.rotation == Rotation(ring.topology, 2, rot.shifts)
    assert Rotation.certified(sym, shifted=True).devices == 2
    assert Rotation.observe(sym, shifted=True, within=2).devices == 1
    assert find_fold(sym, within=2) == find_fold(ring)
    static = find_rotation(lower(ring, "hardware"))
    assert static == Rotation(ring.topology, 1)
    assert list(static.reps) == [0] and {static.rep(c) for c in range(8)} == {0}
    assert sorted(rot.orbit(3)) == list(range(8))
    # one region object, one image: the Symmetric's cores are the program's
    assert sym.materialise().cores == ring.cores


def test_a_program_out_of_step_has_the_identity():
    broken = ring_allreduce(8, bug="deadlock")
    rot = Rotation.observe(broken)
    assert rot.trivial and rot == Rotation.identity(broken.topology)
    assert find_fold(broken) is None


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(symmetric_rings())
def test_one_pair_per_orbit_is_kept(program):
    """DR-5: every orbit of conflicting pairs keeps a pair (two where a pair's accesses are each other's
    images), and the orbit's other pairs are the kept one's images."""
    from semcheck.model.access import accesses, conflicting_pairs

    rot = Rotation.observe(program, shifted=True)
    events = accesses(program, "hardware")[0]
    pairs = conflicting_pairs(events, "hardware")
    kept = rot.representative_pairs(pairs)
    every = {(e.core, e.pc, e.half): e for e in events}

    def orbit(a, b):
        return frozenset(frozenset(((x.core, x.pc, x.half), (y.core, y.pc, y.half)))
                         for x, y in [(a, b), *rot.pair_images(a, b, every)])

    orbits = {orbit(a, b) for a, b in pairs}
    assert {orbit(a, b) for a, b in kept} == orbits
    assert set(kept) <= set(pairs) and len(kept) <= 2 * len(orbits)


def test_a_ring_on_shifted_chunks_has_its_shift():
    program = _chunk_ring(8, guarded=True)
    rot = Rotation.observe(program, shifted=True)
    assert rot.devices == 1 and rot.shifts["src"] == (8, 64)
    assert Rotation.observe(program).trivial  # without shifts its regions are compared as they are
    first, second = ([op for op in program.cores[c] if isinstance(op, DmaStart)][0] for c in (0, 1))
    assert rot.region(first.src_region, "src") == second.src_region
    assert rot.region(first.src_region, "src", times=8) == first.src_region  # round the ring


@pytest.mark.rule("RUN-37")
def test_the_quotients_are_read_off_the_first_devices(ring):
    """Both quotients of one ring: devices `0 .. m-1` of the program with named devices taken modulo m,
    the faithful one where offsets stay distinct (four devices for the two-neighbour ring of eight), the
    class one wherever the rotation allows; a Symmetric's are its program's, read off one period."""
    from semcheck.model.quotient import class_quotient, faithful_quotient

    rot = Rotation.observe(ring)
    fold = faithful_quotient(ring, rot)
    assert fold is not None and fold.faithful and (fold.devices, fold.of_devices) == (4, 8)
    one = class_quotient(ring, 2)
    assert one is not None and not one.faithful and one.devices == 2
    for q in (fold, one):
        m = q.devices
        for c in range(m):
            for op, mine in zip(ring.cores[c], q.program.cores[c]):
                device = getattr(op, "device", None)
                assert getattr(mine, "device", None) == (None if device is None else device % m)
    sym = Symmetric.of(ring, 2, Rotation.observe(ring, shifted=True).shifts)
    assert faithful_quotient(sym, Rotation.observe(sym, within=2)) == fold
    assert class_quotient(sym, 2) == one
    assert faithful_quotient(ring, Rotation.identity(ring.topology)) is None
    assert class_quotient(ring_allreduce(8, bug="deadlock"), 8) is None
