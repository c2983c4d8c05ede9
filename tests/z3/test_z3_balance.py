"""exit-balance (with the interpreter's warning behaviour) and dma-bytes."""

from __future__ import annotations

from typing import get_args

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from z3_strategies import examples, programs

from semcheck.checker.z3 import deadlock_free
from semcheck.checker.properties.dma_bytes import dma_bytes
from semcheck.checker.properties.exit_balance import exit_balance
from ring_programs import ring_allreduce
from semcheck.model import (
    BARRIER,
    DMA_MODES,
    DmaStart,
    GetBarrierSem,
    Scratch,
    SemRef,
    Signal,
    Topology,
    Wait,
    explore,
    launch,
    run,
)
from semcheck.model.ops import SemType


SEM_TYPES = get_args(SemType)


def _warned(outcome, device):
    return any(w.device == device and w.nonzero for w in outcome.state.warnings)


@pytest.mark.parametrize("mode", DMA_MODES)
@pytest.mark.rule("PROP-5")
def test_clean_ring_is_balanced(mode):
    v = exit_balance(ring_allreduce(4), mode)
    assert v.verdict == "proved", v.reason


@pytest.mark.parametrize("mode", DMA_MODES)
@pytest.mark.rule("PROP-5", "EXIT-1")
def test_extra_credit_is_unbalanced_and_the_warning_matches_the_explorer(mode):
    p = ring_allreduce(2, bug="unbalanced")  # device 0 signals its right neighbour once more at the end
    v = exit_balance(p, mode)
    assert v.verdict == "violated"
    c = v.witness.details["counters"]
    assert [(x["core"], x["contributed"], x["waited"]) for x in c] == [(1, 3, 2)]  # 2(n-1) = 2 steps
    out = run(p, mode, v.witness.schedule)
    assert out.kind == "completed" and dict(out.state.counts)
    outs = explore(p, mode).outcomes
    beh = v.witness.details["warnings"]["1"]["behaviour"]
    # the extra credit races with device 1's exit check: printed in some runs, not in others
    assert beh == "may"
    assert any(_warned(o, 1) for o in outs) and not all(_warned(o, 1) for o in outs)
    assert v.witness.details["warnings"]["0"]["behaviour"] == "never"
    key = "barrier" if mode == "hardware" else "0"
    assert v.witness.details["warnings"]["1"]["example"] == f"Semaphore {key} has non-zero count for 1 (global core 1) at kernel exit: 1"


@pytest.mark.parametrize("mode", DMA_MODES)
@pytest.mark.rule("PROP-5", "EXIT-1")
def test_a_signal_that_precedes_the_last_wait_must_be_reported(mode):
    # device 0 adds 2 in one signal, device 1 waits for 1: the surplus arrives before device 1's wait
    # returns, so device 1's exit check sees it in every run
    bodies = [
        [GetBarrierSem(), Signal(SemRef(BARRIER), 2, device=1)],
        [GetBarrierSem(), Wait(SemRef(BARRIER), 1)],
    ]
    p = launch(Topology(2), bodies, collective_id=0)
    v = exit_balance(p, mode)
    assert v.verdict == "violated"
    assert v.witness.details["warnings"]["1"]["behaviour"] == "must"
    assert all(_warned(o, 1) for o in explore(p, mode).outcomes)


@pytest.mark.rule("PROP-5", "DMA-3")
def test_on_wait_leaves_a_dma_pending():
    # the receive semaphore is satisfied by a plain signal, so the DMA's task is never run
    bodies = [[DmaStart(SemRef("r"), 4, device=None), Signal(SemRef("r"), 4), Wait(SemRef("r"), 4)]]
    p = launch(Topology(1), bodies, scratch=[Scratch("r")])
    v = exit_balance(p, "on_wait")
    assert v.verdict == "violated"
    assert v.witness.details["pending_dmas_in_witness"] and v.witness.details["pending_dmas"] == "may"
    assert exit_balance(p, "eager").witness.details["pending_dmas"] == "never"


@pytest.mark.rule("PROP-5")
@pytest.mark.parametrize("mode", DMA_MODES)
def test_a_program_whose_every_device_hangs_before_its_exit_has_no_exit_to_check(mode):
    # each device waits for the other's signal before sending its own; one extra signal is never waited for
    bodies = [[Wait(SemRef("s"), 1), Signal(SemRef("s"), 2, device=1 - d)] for d in range(2)]
    v = exit_balance(launch(Topology(2), bodies, scratch=[Scratch("s")]), mode)
    assert v.verdict == "vacuous" and "no run reaches a kernel exit" in v.reason  # never proved (REP-20)


def _one_device_hangs(sent: int):
    # device 0 signals device 1 `sent` times, then waits for a signal nobody sends; device 1 waits once and exits
    bodies = [[Signal(SemRef("r"), sent, device=1), Wait(SemRef("s"), 1)], [Wait(SemRef("r"), 1)]]
    return launch(Topology(2), bodies, scratch=[Scratch("r"), Scratch("s")])


@pytest.mark.rule("PROP-5")
@pytest.mark.parametrize("mode", DMA_MODES)
def test_the_devices_that_exit_while_others_hang_are_checked(mode):
    ok = exit_balance(_one_device_hangs(1), mode)
    assert ok.verdict == "proved" and "device 1" in ok.reason and "hangs" in ok.reason
    bad = exit_balance(_one_device_hangs(2), mode)
    assert bad.verdict == "violated" and "hangs" in bad.witness.message
    assert [c["core"] for c in bad.witness.details["counters"]] == [1]  # device 0 never exits: not checked
    assert set(bad.witness.details["warnings"]) == {"1"}
    # the surplus is there before its check (on_wait's analysis uses caps only: "may" is its sound answer)
    assert bad.witness.details["warnings"]["1"]["behaviour"] in (("must",) if mode != "on_wait" else ("may", "must"))


# --- dma-bytes -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", DMA_MODES)
@pytest.mark.rule("PROP-6")
def test_ring_dma_bytes(mode):
    assert dma_bytes(ring_allreduce(4), mode).verdict == "proved"
    v = dma_bytes(ring_allreduce(4, bug="bytes"), mode)  # device 0 waits 2048 + 2048 for a 4096-byte copy
    assert v.verdict == "violated" and v.witness.details["problem"] == "partial"  # the first wait takes half a copy
    assert v.witness.details["delivered"] == [4096] * 6 and sorted(v.witness.details["waited"]) == [2048, 2048] + [4096] * 5


def _local(sizes, waits, *, signal=False):
    ops = [DmaStart(SemRef("r"), n) for n in sizes] + [Wait(SemRef("r"), w, kind="dma") for w in waits]
    if signal:
        ops.insert(0, Signal(SemRef("r"), 1))
        ops.append(Wait(SemRef("r"), 1))
    return launch(Topology(1), [ops], scratch=[Scratch("r")])


@pytest.mark.parametrize("mode", DMA_MODES)
@pytest.mark.rule("PROP-6", "PROP-5")
def test_dma_waits_in_another_order_still_take_whole_copies(mode):
    # Each wait completes on whole copies whichever arrives first; which copy's data a wait
    # stands for is the race property's business (PROP-7), not the byte count's.
    assert dma_bytes(_local([8, 16], [16, 8]), mode).verdict == "proved"
    assert dma_bytes(_local([8, 16], [8, 16]), mode).verdict == "proved"
    assert exit_balance(_local([8, 16], [16, 8]), mode).verdict == "proved"


@pytest.mark.parametrize("mode", DMA_MODES)
@pytest.mark.rule("PROP-6")
def test_a_bulk_wait_covers_several_copies(mode):
    # paged_attention's idiom: page copies signal one semaphore, one wait spans them all
    assert dma_bytes(_local([4096] * 3, [12288]), mode).verdict == "proved"
    assert dma_bytes(_local([4096] * 4, [12288, 4096]), mode).verdict == "proved"
    assert dma_bytes(_local([4096, 8192, 4096], [12288, 4096]), mode).verdict == "proved"


@pytest.mark.parametrize("mode", DMA_MODES)
@pytest.mark.rule("PROP-6")
def test_a_wait_that_splits_a_copy_is_violated(mode):
    v = dma_bytes(_local([4096], [2048, 2048]), mode)
    assert v.verdict == "violated" and v.witness.details["problem"] == "partial"
    v = dma_bytes(_local([8, 8, 16], [12, 20]), mode)
    assert v.verdict == "violated" and v.witness.details["problem"] == "partial"


@pytest.mark.parametrize("mode", DMA_MODES)
@pytest.mark.rule("PROP-6")
def test_bytes_left_at_exit_and_a_wait_that_is_never_met_are_violated(mode):
    v = dma_bytes(_local([4096, 4096], [4096]), mode)
    assert v.verdict == "violated" and "left at exit" in v.witness.message
    v = dma_bytes(_local([4096], [4096, 4096]), mode)
    assert v.verdict == "violated" and "never be met" in v.witness.message


def _all_gather_like(n: int, *, bug: bool = False):
    """Device d: a local copy of S bytes, then n-1 copies of S/2 from device d+1, one semaphore.

    As jax's shipped all_gather: the neighbour starts only after a barrier handshake that
    follows the local copy's wait, so the first wait always gets the local copy.
    `bug`: the handshake comes before the local copy's wait.
    """
    S = 4096
    bodies = []
    for d in range(n):
        right, left = (d + 1) % n, (d - 1) % n
        local = [DmaStart(SemRef("r"), S), Wait(SemRef("r"), S, kind="dma")]
        hand = [Signal(SemRef(BARRIER), 1, device=left), Signal(SemRef(BARRIER), 1, device=right),
                Wait(SemRef(BARRIER), 2)]
        ops = [GetBarrierSem()] + ((hand + local) if bug else (local + hand))
        for _ in range(n - 1):
            ops += [DmaStart(SemRef("r"), S // 2, device=left), Wait(SemRef("r"), S // 2, kind="dma")]
        bodies.append(ops)
    return launch(Topology(n), bodies, collective_id=0, scratch=[Scratch("r")])


@pytest.mark.parametrize("mode", DMA_MODES)
@pytest.mark.parametrize("n", [2, 3, 4])
@pytest.mark.rule("PROP-6")
def test_copies_of_different_sizes_from_several_cores_ordered_by_a_handshake(mode, n):
    v = dma_bytes(_all_gather_like(n), mode)
    assert v.verdict == "proved", v.reason
    # without the ordering the first wait can also complete on two halves from the neighbour:
    # bytes still match (which copy it stands for is the race property's question)
    assert dma_bytes(_all_gather_like(n, bug=True), mode).verdict == "proved"


@pytest.mark.rule("PROP-6")
def test_plain_signal_on_a_dma_semaphore():
    v = dma_bytes(_local([8], [8], signal=True), "eager")
    assert v.verdict == "violated" and v.witness.details["problem"] == "mixed"


def _regular_ring(n: int, *, wait: int):
    """A ring permute whose copy signals REGULAR send/recv semaphores, each awaited with a semaphore wait."""
    s, r = SemRef("send"), SemRef("recv")
    bodies = [[DmaStart(r, 4096, src_sem=s, device=(d + 1) % n, src_sem_type="regular", dst_sem_type="regular"),
               Wait(s, wait), Wait(r, wait)] for d in range(n)]
    return launch(Topology(n), bodies, scratch=[Scratch("send"), Scratch("recv")])


@pytest.mark.parametrize("mode", DMA_MODES)
@pytest.mark.rule("DMA-6", "PROP-5", "PROP-6")
def test_copies_on_regular_semaphores_balance_on_hardware_only(mode):
    # a TPU v6+ kernel waits for one completed copy; the interpreter adds the bytes (D20)
    counting = _regular_ring(3, wait=1)
    balance, dmab = exit_balance(counting, mode), dma_bytes(counting, mode)
    if mode == "hardware":
        assert balance.verdict == "proved", balance.reason
        assert dmab.verdict == "proved", dmab.reason  # a copy counted as 1 is a plain count
    else:
        assert balance.verdict == "violated"
        assert {(c["contributed"], c["waited"]) for c in balance.witness.details["counters"]} == {(4096, 1)}
        assert dmab.verdict == "violated" and dmab.witness.details["problem"] == "mixed"
    # a kernel written for the interpreter's byte counts hangs a TPU and balances in interpret mode
    bytewise = _regular_ring(3, wait=4096)
    # on hardware no device reaches its exit: true, but vacuously (REP-20)
    assert exit_balance(bytewise, mode).verdict == ("vacuous" if mode == "hardware" else "proved")
    assert deadlock_free(bytewise, mode).verdict == ("violated" if mode == "hardware" else "proved")


@pytest.mark.parametrize("mode", DMA_MODES)
@pytest.mark.rule("PROP-6")
def test_dmas_of_different_sizes_from_two_cores(mode):
    bodies = [
        [DmaStart(SemRef("r"), 8, device=1)],
        [DmaStart(SemRef("r"), 16), Wait(SemRef("r"), 8, kind="dma"), Wait(SemRef("r"), 16, kind="dma")],
    ]
    p = launch(Topology(2), bodies, scratch=[Scratch("r")])
    assert dma_bytes(p, mode).verdict == "proved"
    # a wait of 12 is met by no set of the copies {8, 16}, whichever arrives
    bodies[1][1:] = [Wait(SemRef("r"), 12, kind="dma"), Wait(SemRef("r"), 12, kind="dma")]
    v = dma_bytes(launch(Topology(2), bodies, scratch=[Scratch("r")]), mode)
    assert v.verdict == "violated" and v.witness.details["problem"] == "partial"


@pytest.mark.parametrize("mode", DMA_MODES)
@pytest.mark.rule("PROP-6")
def test_a_wait_needing_a_copy_started_after_it_is_never_met(mode):
    # core 1 waits for 24 bytes first, but core 0 sends its 16 only after core 1's signal that
    # follows that wait: only core 1's own 8 can arrive before it
    bodies = [
        [Wait(SemRef("s"), 1), DmaStart(SemRef("r"), 16, device=1)],
        [DmaStart(SemRef("r"), 8), Wait(SemRef("r"), 24, kind="dma"), Signal(SemRef("s"), 1, device=0)],
    ]
    v = dma_bytes(launch(Topology(2), bodies, scratch=[Scratch("r"), Scratch("s")]), mode)
    assert v.verdict == "violated" and v.witness.details["problem"] == "never-met"


@st.composite
def _typed_copies(draw):
    """A generated program whose copies signal semaphores of any type (DMA-6: on hardware a non-DMA one counts 1)."""
    import dataclasses

    program = draw(programs())
    cores = tuple(tuple(dataclasses.replace(op, src_sem_type=draw(st.sampled_from(SEM_TYPES)),
                                            dst_sem_type=draw(st.sampled_from(SEM_TYPES)))
                        if type(op) is DmaStart and draw(st.booleans()) else op for op in ops)
                  for ops in program.cores)
    return dataclasses.replace(program, cores=cores)


@examples(150)
@given(_typed_copies())
@pytest.mark.rule("DMA-6", "PROP-6")
def test_copies_counted_in_bytes_by_their_types_are_those_asked_half_by_half(program):
    from unittest import mock

    from semcheck.checker.properties import dma_bytes as module

    for mode in DMA_MODES:
        fast = dma_bytes(program, mode)
        with mock.patch.object(module, "_every_half_in_bytes", lambda program, low: False):
            assert dma_bytes(program, mode) == fast


@pytest.mark.rule("PROP-5", "EXIT-1")
@settings(max_examples=25, deadline=None)
@given(st.lists(st.sampled_from([0, 128, 512]), min_size=2, max_size=4), st.integers(1, 4))
def test_the_message_gives_totals_and_the_count_an_on_wait_run_leaves(sizes, waited):
    """Copies on a REGULAR semaphore add their bytes, so under on_wait a small wait is met by the first copy it
    runs and the rest stay in flight. The message names the totals of every copy and, when copies stay in
    flight, the count the witness run leaves, which is what jax prints (measured: three 512-byte copies and a
    wait for 3 print 509 on tests/frontend/kernels/empty_copy_regular.py)."""
    sem = SemRef("sem")
    body = [DmaStart(sem, n, src_sem_type="regular", dst_sem_type="regular") for n in sizes] + [Wait(sem, waited)]
    p = launch(Topology(1), [body], scratch=[Scratch("sem")])
    v = exit_balance(p, "on_wait")
    total = sum(sizes)
    if total == waited:
        return
    if v.verdict != "violated":  # e.g. every copy empty: the wait hangs, no exit to check
        return
    (c,) = v.witness.details["counters"]
    assert (c["contributed"], c["waited"]) == (total, waited)
    assert f"receives {total}, waits for {waited}" in v.witness.message
    left = c["final_count_in_witness"]
    said = f"({left} left at exit in the witness run, copies in flight adding nothing)"
    assert (said in v.witness.message) == (bool(v.witness.details["pending_dmas_in_witness"]) and left != c["excess"])


@pytest.mark.rule("PROP-5", "EXIT-1")
def test_three_copies_and_a_wait_for_three_leave_509_under_on_wait():
    sem = SemRef("sem")
    body = [DmaStart(sem, 512, src_sem_type="regular", dst_sem_type="regular") for _ in range(3)] + [Wait(sem, 3)]
    v = exit_balance(launch(Topology(1), [body], scratch=[Scratch("sem")]), "on_wait")
    assert v.verdict == "violated"
    assert "receives 1536, waits for 3 (509 left at exit in the witness run" in v.witness.message, v.witness.message
    assert "Semaphore 2000 has non-zero count for 0 (global core 0) at kernel exit: 509" in (
        v.witness.details["warnings"]["0"]["may_print"])


@pytest.mark.rule("RUN-64")
@pytest.mark.parametrize("mode", DMA_MODES)
def test_dma_bytes_names_only_the_counter_it_reports(mode, monkeypatch):
    """A proved dma-bytes names no counter; a violated one names the counter its message is about, in REP-24's
    words (the name, and the id under the interpreter), once for its message and once for its details."""
    from semcheck.checker.properties import dma_bytes as module

    asked = []
    real = module.semaphore_words

    def words(key, low=None, core=None):
        asked.append((key, core))
        return real(key, low, core)

    monkeypatch.setattr(module, "semaphore_words", words)
    assert dma_bytes(ring_allreduce(8), mode).verdict == "proved"
    assert asked == []
    for program, problem in ((ring_allreduce(4, bug="bytes"), "partial"), (_local([8], [8], signal=True), "mixed"),
                             (_local([4096, 4096], [4096]), "bytes"), (_local([4096], [4096, 4096]), "bytes")):
        asked.clear()
        v = dma_bytes(program, mode)
        assert v.verdict == "violated" and v.witness.details["problem"] == problem
        assert len(set(asked)) == 1 and len(asked) <= 2  # the one counter reported
        (key, core), = set(asked)
        name = real(key, program_lowering(program, mode), core)
        assert v.witness.message.startswith(f"{name} on core {core}")
        assert v.witness.details["semaphore"] == name


@pytest.mark.rule("RUN-64")
@examples(40)
@given(st.lists(st.sampled_from([0, 8, 16, 4096]), min_size=1, max_size=4),
       st.lists(st.sampled_from([0, 8, 12, 16, 4096]), min_size=1, max_size=4), st.booleans(),
       st.sampled_from(DMA_MODES))
def test_dma_bytes_words_are_those_of_naming_every_counter(sizes, waits, signal, mode):
    """The message and details of any dma-bytes verdict name its counter as REP-24 names it (the words the check
    gave when it named every counter before judging it)."""
    program = _local(sizes, waits, signal=signal)
    v = dma_bytes(program, mode)
    if v.verdict != "violated":
        return
    from semcheck.checker.properties.exit_balance import semaphore_words

    low = program_lowering(program, mode)
    named = {f"{semaphore_words(k[0], low, k[1])} on core {k[1]}" for k in low.by_counter}
    assert any(v.witness.message.startswith(n) for n in named)
    assert v.witness.details["semaphore"] in {semaphore_words(k[0], low, k[1]) for k in low.by_counter}


def program_lowering(program, mode):
    from semcheck.checker.properties.analysis import analysis_of

    return analysis_of(program, mode, None).lowering
