"""S''s end computed on the lowering (`least_stuck_vector`) against the model's fast run of S' (RUN-3)."""

from __future__ import annotations

import pytest
from hypothesis import event, given

from z3_strategies import examples, programs, symmetric_programs

from semcheck.checker.static.least_stuck import least_stuck_vector, s_prime_end, s_prime_run
from semcheck.checker.static.lowering import lower
from semcheck.model import DMA_MODES


def _agrees(p) -> None:
    for mode in DMA_MODES:
        low = lower(p, mode)
        if not low.ok:
            continue
        kind, pcs = least_stuck_vector(low)
        sp = s_prime_run(low)  # the model's fast run of the program truncated at its failing positions
        event(f"{mode} {kind}")
        assert (kind, pcs) == (sp.kind, sp.state.pcs), (mode, kind, pcs, sp.kind, sp.state.pcs)
        held = s_prime_end(low).allocs
        assert set(held) == set(sp.state.allocs)
        for k, a in held.items():  # what id-agreement reads of an allocation
            b = sp.state.allocs[k]
            assert (a.site, a.count, tuple(a.ids or ())) == (b.site, b.count, tuple(b.ids or ()))


@pytest.mark.rule("RUN-3")
@examples(300, 5000)
@given(programs())
def test_the_least_stuck_vector_on_the_lowering_is_where_the_fast_run_of_s_prime_ends(p) -> None:
    _agrees(p)


@pytest.mark.rule("RUN-3")
@examples(150, 2000)
@given(symmetric_programs(perturb=True))
def test_the_least_stuck_vector_agrees_on_programs_with_barriers_and_rings(case) -> None:
    _agrees(case[0])
