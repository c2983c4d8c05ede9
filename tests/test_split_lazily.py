"""DR-31 .. DR-33: DR-9's split program is split lazily, from the representatives and the checked
symmetry, and decides `race-free` under `hardware` exactly as the split of the whole program does."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from semcheck.checker.properties import analysis as analysis_module
from semcheck.checker.properties import race_order, races
from semcheck.checker.properties.analysis import Analysis
from semcheck.checker.frontend.grid_copies import hardware_overlap
from semcheck.model.access import accesses
from semcheck.model.ops import Access, DmaStart, Loc, Region, SemRef, Topology, Wait
from semcheck.model.partial_arrivals import split, split_lazily, split_position
from semcheck.model.launch import launch
from test_races import SCRATCH, programs_with_accesses, symmetric_rings


def _eager_race_free(program, monkeypatch) -> object:
    """race-free under hardware as it was decided before DR-31: the whole program split, its accesses
    listed off the split program, GRID-4 read off the split program."""
    with monkeypatch.context() as m:
        m.setattr(analysis_module, "split_lazily", lambda p, k: split(p))
        m.setattr(race_order, "access_lister", lambda facts: None)
        m.setattr(Analysis, "grid_overlap", property(lambda self: hardware_overlap(self.program)))
        return races.race_free(program, "hardware")


def _key(v) -> tuple:
    w = v.witness
    return (v.verdict, v.reason, None if w is None else (w.schedule, w.blocked))


@pytest.mark.rule("DR-31", "DR-32", "DR-9")
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(program=st.one_of(symmetric_rings(), programs_with_accesses()))
def test_the_lazy_split_decides_race_freedom_as_the_whole_split(program, monkeypatch):
    assert _key(races.race_free(program, "hardware")) == _key(_eager_race_free(program, monkeypatch))


@pytest.mark.rule("DR-31")
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(symmetric_rings(), programs_with_accesses()))
def test_the_lazy_split_is_the_split(program):
    """Core by core, forerunner by forerunner, and in what it calls mixed, the lazy split read off one
    period of the symmetry is the split of the whole program."""
    k, _ = Analysis(program).symmetry
    whole, lazy = split(program), split_lazily(program, k)
    assert (whole.program is program) == (lazy.program is program)
    assert bool(whole.mixed) == bool(lazy.mixed)
    if whole.mixed:
        assert whole.mixed[0] is lazy.mixed[0]
    assert [tuple(c) for c in lazy.program.cores] == list(whole.program.cores)
    assert [tuple(f) for f in lazy.forerunners] == [tuple(f) for f in whole.forerunners]


@pytest.mark.rule("DR-32")
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(symmetric_rings(), programs_with_accesses()))
def test_the_split_programs_accesses_are_the_programs_moved_past_the_forerunners(program):
    parts = split(program)
    k, _ = Analysis(program).symmetry
    near = k if k < program.topology.num_devices else None
    events, unrecorded = accesses(program, "hardware", near=near)
    want_events, want_unrecorded = accesses(parts.program, "hardware", near=near)
    moved = [(e.core, split_position(parts.forerunners[e.core], e.pc), e.half, e.buffer, e.region, e.write, e.where)
             for e in events]
    assert moved == [(e.core, e.pc, e.half, e.buffer, e.region, e.write, e.where) for e in want_events]
    # the race pass moves each access with `at_pc`, held to `dataclasses.replace` (equal, same hash, frozen)
    at = [split_position(parts.forerunners[e.core], e.pc) for e in events]
    fast, slow = [e.at_pc(p) for e, p in zip(events, at)], [dataclasses.replace(e, pc=p) for e, p in zip(events, at)]
    assert fast == slow and [hash(e) for e in fast] == [hash(e) for e in slow]
    assert all(type(e) is type(s) and vars(e) == vars(s) for e, s in zip(fast, slow))
    assert [(u.core, split_position(parts.forerunners[u.core], u.pc)) for u in unrecorded] == \
        [(u.core, u.pc) for u in want_unrecorded]
    for c, f in enumerate(parts.forerunners):  # the inverse of Split.origin on the program's positions
        assert all(parts.origin(c, split_position(f, pc)) == pc for pc in range(len(program.cores[c])))


def _ring(n: int, wait_bytes: int) -> object:
    """Each device copies a 64-byte chunk to its right neighbour, waits for `wait_bytes` of it and reads it."""
    def chunk(i: int) -> Region:
        return Region(((16 * (i % n), 16 * (i % n) + 16),))

    bodies = []
    for d in range(n):
        ops = [DmaStart(SemRef("sems", 0), 64, device=(d + 1) % n, src_buf="src", src_region=chunk(d),
                        dst_buf="src", dst_region=chunk(d + n // 2), loc=Loc("k.py", 10)),
               Wait(SemRef("sems", 0), wait_bytes, kind="dma", loc=Loc("k.py", 11)),
               Access("src", chunk(d + n // 2 - 1), False, Loc("k.py", 12))]
        if wait_bytes < 64:
            ops.append(Wait(SemRef("sems", 0), 64 - wait_bytes, kind="dma", loc=Loc("k.py", 13)))
        bodies.append(ops)
    return launch(Topology(n), bodies, scratch=SCRATCH)


@pytest.mark.rule("DR-31", "DR-32")
@pytest.mark.parametrize("wait_bytes", [64, 32])
def test_a_ring_is_split_only_where_the_race_pass_reads_it(wait_bytes, monkeypatch):
    """A race-free ring splits the cores of the fold and the copies landing on them, not all 64; a ring
    that reads after part of a copy is still violated, with the witness of the whole split."""
    program = _ring(64, wait_bytes)
    analysis = Analysis(program)
    v = races.race_free(program, "hardware", facts=analysis.mode("hardware"))
    parts, _ = analysis.partial_arrivals
    assert v.verdict == ("proved" if wait_bytes == 64 else "violated")
    assert _key(v) == _key(_eager_race_free(program, monkeypatch))
    if wait_bytes == 64:
        assert parts.program.cores.cores_split < 8


@st.composite
def grid_programs(draw):
    """One core: grid copies of an HBM buffer at some steps, and kernel accesses and byte-counted copies
    of it in between (GRID-4's windows), with rows anywhere in the buffer."""
    from semcheck.checker.frontend.grid_copies import GridCopyLoc
    from semcheck.model.launch import Scratch

    rows = st.tuples(st.integers(0, 6), st.integers(1, 3), st.integers(0, 2)).map(
        lambda r: Region(((r[0], r[0] + r[1]),) + (((r[2], 4),) if r[2] < 2 else ())))
    body = []
    for step in range(draw(st.integers(1, 4))):
        for _ in range(draw(st.integers(0, 3))):
            kind = draw(st.sampled_from(["in", "out", "access", "copy", "wait"]))
            if kind in ("in", "out"):
                loc = GridCopyLoc("k.py", 3, what=f"{kind} {step}", kind=kind, step=step, hbm=True)
                body.append(Access("hbm0", draw(rows), kind == "out", loc))
            elif kind == "access":
                body.append(Access("hbm0", draw(rows), draw(st.booleans()), Loc("k.py", 9)))
            elif kind == "copy":
                to_hbm = draw(st.booleans())
                r = draw(rows)
                body.append(DmaStart(SemRef("sems", 0), 16, src_buf="o" if to_hbm else "hbm0", src_region=r,
                                     dst_buf="hbm0" if to_hbm else "o", dst_region=r, loc=Loc("k.py", 10)))
            else:
                body.append(Wait(SemRef("sems", 0), 16, kind="dma", loc=Loc("k.py", 11)))
    return launch(Topology(1, 1), [body], scratch=[Scratch("sems", 1), Scratch("o", kind="buffer", nbytes=4096)],
                  hbm_buffers=1)


@pytest.mark.rule("DR-33", "GRID-4")
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(grid_programs())
def test_grid_4_reads_the_same_off_the_program_as_off_its_split(program):
    assert hardware_overlap(program) == hardware_overlap(split(program).program)


@st.composite
def grid_rings(draw):
    """Every device runs one template of grid copies, kernel accesses and copies of an HBM buffer on its
    own chunk (moved one chunk along per device), some copies remote; sometimes one device out of step."""
    from semcheck.checker.frontend.grid_copies import GridCopyLoc
    from semcheck.model.launch import Scratch

    n = draw(st.sampled_from([2, 4, 6]))
    template = []
    for step in range(draw(st.integers(1, 4))):
        for _ in range(draw(st.integers(0, 3))):
            template.append((draw(st.sampled_from(["in", "out", "access", "copy", "wait"])), step,
                             draw(st.integers(0, 6)), draw(st.integers(1, 2)), draw(st.booleans()),
                             draw(st.sampled_from([None, 0, 1]))))
    odd = draw(st.one_of(st.none(), st.integers(0, n - 1)))
    bodies = []
    for d in range(n):
        body = []
        for kind, step, lo, width, flag, off in template:
            base = 8 * d + (1 if d == odd and kind == "access" else 0)
            r = Region(((base + lo, base + lo + width),))
            if kind in ("in", "out"):
                loc = GridCopyLoc("k.py", 3, what=f"{kind} {step}", kind=kind, step=step, hbm=True)
                body.append(Access("hbm0", r, kind == "out", loc))
            elif kind == "access":
                body.append(Access("hbm0", r, flag, Loc("k.py", 9)))
            elif kind == "copy":
                body.append(DmaStart(SemRef("sems", 0), 16, device=None if off is None else (d + off) % n,
                                     src_buf="o" if flag else "hbm0", src_region=Region(((lo, lo + width),)) if flag else r,
                                     dst_buf="hbm0" if flag else "o", dst_region=r if flag else Region(((lo, lo + width),)),
                                     loc=Loc("k.py", 10)))
            else:
                body.append(Wait(SemRef("sems", 0), 16, kind="dma", loc=Loc("k.py", 11)))
        bodies.append(body)
    return launch(Topology(n), bodies, scratch=[Scratch("sems", 1), Scratch("o", kind="buffer", nbytes=4096)],
                  hbm_buffers=1)


@pytest.mark.rule("DR-34", "GRID-4")
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(grid_rings())
def test_grid_4_reads_the_same_off_the_representatives_as_off_every_device(program):
    assert Analysis(program).grid_overlap == hardware_overlap(program)


def _examples() -> list[str]:
    import pathlib

    root = pathlib.Path(__file__).resolve().parent.parent
    return sorted(str(p) for p in (root / "examples").rglob("*.py"))


def sweep(paths: list[str], sizes: tuple[int, ...]) -> tuple[int, list[str]]:
    """(kernels compared, differences) over the examples at these device counts, in a fresh process."""
    from semcheck.checker.frontend.targets import provision_devices

    provision_devices(max(sizes))
    from semcheck.checker.frontend import load
    from semcheck.checker.frontend.errors import FrontendError

    compared, differences = 0, []
    with pytest.MonkeyPatch.context() as monkeypatch:
        for path in paths:
            for n in sizes:
                try:
                    kernels = load(path, devices=n)
                except FrontendError:
                    continue
                for k in kernels:
                    program = k.program
                    compared += 1
                    if hardware_overlap(program) != hardware_overlap(split(program).program):
                        differences.append(f"{path} at {n}: GRID-4")
                    if Analysis(program).grid_overlap != hardware_overlap(program):
                        differences.append(f"{path} at {n}: GRID-4 on one period")
                    if _key(races.race_free(program, "hardware")) != _key(_eager_race_free(program, monkeypatch)):
                        differences.append(f"{path} at {n}: race-free")
    return compared, differences


@pytest.mark.slow
@pytest.mark.rule("DR-31", "DR-32", "DR-33", "DR-34")
def test_every_example_is_decided_under_hardware_as_with_the_whole_split():
    """Every example at 2, 4 and 8 devices: race-free under hardware, reason and witness included, is what
    splitting the whole program gives, and GRID-4 reads the same off the program as off its split."""
    import concurrent.futures
    import multiprocessing

    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        compared, differences = pool.submit(sweep, _examples(), (2, 4, 8)).result()
    assert compared > 50 and differences == []


@pytest.mark.rule("DR-35", "DR-5")
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(symmetric_rings(), programs_with_accesses(), grid_rings()))
def test_the_accesses_near_the_representatives_are_read_off_the_cores_that_make_them(program):
    analysis = Analysis(program)
    k, _ = analysis.symmetry
    near = k if k < program.topology.num_devices else None
    want = accesses(program, "hardware", near=near)
    assert race_order.listed(analysis, near) == want
    if near is not None:  # a Symmetric of the same program rotates only the copies that land there (RUN-20)
        from semcheck.model.symmetry import Rotation
        from semcheck.model.symmetric import Symmetric

        rot = Rotation.observe(program, shifted=True)

        period, shifts = rot.devices, dict(rot.shifts)
        sym = Symmetric.of(program, period, shifts)
        assert race_order.listed(Analysis(sym), near) == want


@pytest.mark.rule("DR-36")
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(symmetric_rings(), st.integers(0, 7), st.one_of(st.none(), st.integers(0, 7)))
def test_the_operations_through_a_blind_view_are_found_on_one_period(program, at, only):
    """With the symmetry known, a program with no operation through a view the interpreter cannot index
    on its first k devices has none (ERR-9): `Analysis.view_ops` is what a scan of every core gives."""
    import dataclasses

    from semcheck.checker.properties.failing_facts import view_ops
    from semcheck.model.errors import InterpreterView

    view = InterpreterView("ReshapeTransform", "copy", "k.py:7")
    cores = []
    for d, ops in enumerate(program.cores):
        ops = list(ops)
        if at < len(ops) and type(ops[at]) in (Access, DmaStart) and (only is None or only % len(program.cores) == d):
            ops[at] = dataclasses.replace(ops[at], view_error=view)
        cores.append(tuple(ops))
    program = dataclasses.replace(program, cores=tuple(cores))
    analysis = Analysis(program)
    analysis.symmetry  # as the checks have it before they ask (the fold reads it first)
    assert analysis.view_ops == view_ops(program)
