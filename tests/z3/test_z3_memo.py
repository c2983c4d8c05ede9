"""The per-program memo: shared work within one program, bounded memory across many."""

from __future__ import annotations

import gc

import pytest
from hypothesis import given
from z3_strategies import examples, programs

from semcheck import check_program
from ring_programs import ring_allreduce
from semcheck.checker.z3.counters import EncodingBug, lower, s_prime_end, s_prime_run
from semcheck.checker.z3.memo import MEMO


def test_checks_of_one_program_share_its_lowering_and_interpreter_modes_share_one() -> None:
    p = ring_allreduce(3)
    assert lower(p, "hardware") is lower(p, "hardware")
    eager, on_wait = lower(p, "eager"), lower(p, "on_wait")
    assert (eager.mode, on_wait.mode) == ("eager", "on_wait")
    assert eager.contributions is on_wait.contributions  # one lowering, two mode labels


def test_checking_many_programs_keeps_only_a_few_memo_tables() -> None:
    for n in range(2, 2 + 3 * MEMO.capacity):
        check_program(ring_allreduce(n), "eager")
        assert len(MEMO) <= MEMO.capacity


def test_a_collected_program_leaves_no_memo_table() -> None:
    MEMO.clear()
    p = ring_allreduce(2)
    assert MEMO.get(p, "answer", lambda: 42) == 42  # a value that does not refer to the program
    assert MEMO.get(p, "answer", lambda: 0) == 42  # computed once
    assert len(MEMO) == 1
    del p
    gc.collect()
    assert len(MEMO) == 0


@examples(300)
@given(program=programs())
@pytest.mark.rule("RUN-3")
def test_eager_and_on_wait_runs_of_s_prime_end_alike(program) -> None:
    """What `s_prime_end` shares between the interpreter's modes: S''s kind, positions and allocations."""
    low = lower(program, "eager")
    if not low.ok:
        return
    ends = []
    for mode in ("eager", "on_wait"):
        try:
            sp = s_prime_run(lower(program, mode))
        except EncodingBug:
            return  # a failing S' run: the lowering's own guard, no sharing is attempted
        ends.append((sp.kind, sp.state.pcs, held(sp.state.allocs)))
    assert ends[0] == ends[1]
    MEMO.clear()
    first = s_prime_end(lower(program, "on_wait"))
    assert s_prime_end(lower(program, "eager")) is first
    assert (first.kind, first.pcs, held(first.allocs)) == ends[1]


def held(allocs) -> dict:
    """What id-agreement reads of each allocation a core holds."""
    return {k: (a.site, a.count, tuple(a.ids or ())) for k, a in allocs.items()}
