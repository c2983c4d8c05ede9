"""GRID-4: `hardware_overlap` compares each grid copy only with the accesses of its own device (and
the remote copies that may land there), and must find the reason comparing it with every access
finds, the same one first (`grid_overlap_reference`)."""

from __future__ import annotations

import grid_overlap_reference as reference
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_split_lazily import grid_programs, grid_rings

from semcheck.checker.frontend.grid_copies import GridCopyLoc, hardware_overlap
from semcheck.model.launch import Scratch, launch
from semcheck.model.ops import Access, DmaStart, Loc, Region, SemRef, Topology, Wait


@st.composite
def grid_meshes(draw):
    """Devices of one or two cores, each with its own grid copies, kernel accesses and copies (some
    remote) of one HBM buffer, their rows drawn from a few so that devices and cores meet often."""
    topo = Topology(draw(st.integers(1, 4)), draw(st.sampled_from([1, 2])))
    rows = st.tuples(st.integers(0, 4), st.integers(1, 3)).map(lambda r: Region(((r[0], r[0] + r[1]),)))
    bodies = []
    for _ in range(topo.num_cores):
        body = []
        for step in range(draw(st.integers(0, 3))):
            for _ in range(draw(st.integers(0, 3))):
                kind = draw(st.sampled_from(["in", "out", "out", "access", "copy", "wait"]))
                if kind in ("in", "out"):
                    loc = GridCopyLoc("k.py", 3, what=f"{kind} {step}", kind=kind, step=step, hbm=True,
                                      parallel=(draw(st.integers(0, 1)),), call=draw(st.sampled_from([0, 0, 1])))
                    body.append(Access("hbm0", draw(rows), kind == "out", loc))
                elif kind == "access":
                    body.append(Access("hbm0", draw(rows), draw(st.booleans()), Loc("k.py", 9)))
                elif kind == "copy":
                    to_hbm = draw(st.booleans())
                    r = draw(rows)
                    body.append(DmaStart(SemRef("sems", 0), 16, device=draw(st.none() | st.integers(0, topo.num_devices - 1)),
                                         src_buf="o" if to_hbm else "hbm0", src_region=r,
                                         dst_buf="hbm0" if to_hbm else "o", dst_region=r, loc=Loc("k.py", 10)))
                else:
                    body.append(Wait(SemRef("sems", 0), 16, kind="dma", loc=Loc("k.py", 11)))
        bodies.append(body)
    return launch(topo, bodies, scratch=[Scratch("sems", 1), Scratch("o", kind="buffer", nbytes=4096)],
                  hbm_buffers=1)


@pytest.mark.rule("GRID-4")
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(grid_meshes(), grid_rings(), grid_programs()))
def test_comparing_a_copy_with_its_devices_accesses_finds_what_comparing_it_with_all_finds(program):
    assert hardware_overlap(program) == reference.hardware_overlap(program)
