"""PRG-179 / PRG-180: when the devices of a mesh run different interpreted calls, jax's interpreter completes a
run only if every device runs as many calls and, call by call, all or none of them wait at a start barrier.

The oracle is jax's own barrier code: each device is a thread that runs, per call, the interpreter's
`_initialize_shared_memory`, `_barrier` (a call without a collective id) and `_clean_up_shared_memory`, exactly
the callbacks an interpreted call makes around its kernel; a run that has not finished after a short join hangs.
"""

from __future__ import annotations

import threading
import types

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from semcheck.checker.programs.interpreter_hang import never_starts, no_run_completes, reached

JOIN = 0.4  # seconds: the barrier callbacks alone take microseconds; a run still waiting then never ends


def _run_barriers(seqs: list[list[bool]]) -> bool:
    """Whether jax's interpreter barriers let every device finish `seqs[d]` (per call: whether it has no collective
    id, so waits at the start barrier). Hung threads are released by aborting the barriers they wait on."""
    return _run_barriers_and_bodies(seqs)[0]


def _run_barriers_and_bodies(seqs: list[list[bool]]) -> tuple[bool, set[tuple[int, int]]]:
    """`_run_barriers`, and the (device, position) of every call whose kernel body would run (the device got past
    its start barrier, or it had none)."""
    from jax._src.pallas.mosaic.interpret import interpret_pallas_call as ipc
    from jax.experimental.pallas import tpu as pltpu

    n, params = len(seqs), pltpu.InterpretParams()
    token = np.int32(0)  # not the thread map's top-level token: a released thread does not wait in `set_failed`
    managers, lock, done, bodies = [], threading.Lock(), [False] * n, set()

    def device(d: int) -> None:
        try:
            for j, starts in enumerate(seqs[d]):
                ipc._initialize_shared_memory(token, d, n, 1, interpret_params=params)
                with lock:
                    managers.append(ipc._shared_memory)
                if starts:
                    ipc._barrier(token, d)
                bodies.add((d, j))
                ipc._clean_up_shared_memory(token, d)
            done[d] = True
        except BaseException:  # noqa: BLE001 - the abort below, after the verdict is taken
            pass

    ipc._clear_shared_memory()
    threads = [threading.Thread(target=device, args=(d,), daemon=True) for d in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(JOIN)
    completed, ran = all(done), set(bodies)
    for m in {id(m): m for m in managers if m is not None}.values():
        m.barrier.abort()
        m.clean_up_barrier.abort()
    for t in threads:
        t.join(5)
    ipc._clear_shared_memory()
    return completed, ran


def _ir(seqs: list[list[bool]]):
    """A walked program whose device d runs `seqs[d]`: the calls every device runs first, then each device's own
    (as PRG-145's walk gives a cond on the device's index: each branch's calls on the devices that take it)."""
    n = len(seqs)
    mesh = types.SimpleNamespace(num_devices=n, physical_devices=n)
    invs = []
    shared = 0
    while all(len(s) > shared for s in seqs) and len({s[shared] for s in seqs}) == 1:
        shared += 1
    def inv(starts, devices):
        call = types.SimpleNamespace(collective_id=None if starts else 7, mesh=mesh, name=f"k{len(invs)}",
                                     loc=f"t.py:{len(invs)}", index=len(invs))
        return types.SimpleNamespace(call=call, devices=devices, loc=call.loc,
                                     describe=lambda c=call: f"{c.name} ({c.loc})")
    for j in range(shared):
        invs.append(inv(seqs[0][j], None))
    for d in range(n):
        for starts in seqs[d][shared:]:
            invs.append(inv(starts, frozenset({d})))
    return types.SimpleNamespace(invocations=invs, unknown=None)


CASES = [
    ([[True], []], False),  # examples/programs/buggy/per_device_local_call.py at 2 devices
    ([[False, True, False], [False, False]], False),  # examples/programs/per_device_cond.py at 2 devices
    ([[True], [True]], True),  # one local kernel on device 0, another on device 1: the barriers meet
    ([[True], [False]], False),  # only device 0's call waits at a start barrier
    ([[False, True], [True, False]], False),
    ([[False], [False], [False]], True),
]


@pytest.mark.rule("PRG-179")
@pytest.mark.parametrize("seqs, completes", CASES)
def test_jax_s_barriers_complete_only_where_the_counts_match(seqs, completes):
    assert _run_barriers(seqs) is completes


@pytest.mark.rule("PRG-180")
@pytest.mark.parametrize("seqs, completes", CASES)
def test_a_hang_is_claimed_exactly_where_jax_s_barriers_hang(seqs, completes):
    hang = no_run_completes(_ir(seqs), len(seqs))
    assert (hang is None) is completes
    if hang is not None:
        assert "no run completes" in hang.message and "PRG-180" in hang.message


@pytest.mark.slow
@pytest.mark.rule("PRG-180")
@settings(max_examples=40)
@given(st.integers(2, 4).flatmap(lambda n: st.lists(st.lists(st.booleans(), max_size=3), min_size=n, max_size=n)))
def test_the_claim_agrees_with_jax_s_barriers_on_drawn_call_sequences(seqs):
    assert (no_run_completes(_ir(seqs), len(seqs)) is None) is _run_barriers(seqs)


def _claimed(seqs: list[list[bool]]) -> set[tuple[int, int]]:
    """The (device, position) of the calls whose kernel PRG-181 says never starts (asked of each call's kernel, as
    a row of the report is; each call of `_ir` is a kernel of its own)."""
    ir = _ir(seqs)
    out = set()
    for d, s in enumerate(seqs):
        mine = [inv for inv in ir.invocations if inv.devices is None or d in inv.devices]
        for j, inv in enumerate(mine):
            kernel = types.SimpleNamespace(name=inv.call.name, loc=inv.call.loc, index=inv.call.index)
            if never_starts(ir, len(seqs), kernel) is not None:
                out.add((d, j))
    return out


@pytest.mark.rule("PRG-181")
@pytest.mark.parametrize("seqs, claimed", [
    ([[True], []], {(0, 0)}),  # per_device_local_call
    ([[True], [], [True]], {(0, 0), (2, 0)}),
    ([[False, True, False], [False, False]], {(0, 1), (0, 2)}),  # per_device_cond: the doubling kernel and after
    ([[True], [False]], {(0, 0)}),
    ([[False, True], [False]], {(0, 1)}),
    ([[True, True], [False, True]], {(0, 0), (0, 1)}),  # device 1's later call: not claimed (a failure may trip)
    ([[True], [True]], set()),  # the barriers meet: nothing claimed
])
def test_no_kernel_starts_where_the_claim_says_so(seqs, claimed):
    assert _claimed(seqs) == claimed
    assert not (_run_barriers_and_bodies(seqs)[1] & claimed)


@pytest.mark.slow
@pytest.mark.rule("PRG-181")
@settings(max_examples=30)
@given(st.integers(2, 4).flatmap(lambda n: st.lists(st.lists(st.booleans(), max_size=3), min_size=n, max_size=n)))
def test_no_kernel_starts_where_the_claim_says_so_on_drawn_call_sequences(seqs):
    claimed = _claimed(seqs)
    if claimed:
        assert not (_run_barriers_and_bodies(seqs)[1] & claimed)


def _reached(seqs: list[list[bool]]) -> set[tuple[int, int]] | None:
    """The (device, position) of the calls whose kernel body PRG-211 says some interpreter run reaches, or None
    where it does not decide."""
    ir = _ir(seqs)
    reach = reached(ir, len(seqs))
    if reach is None:
        return None
    out = set()
    for d in range(len(seqs)):
        mine = [i for i, inv in enumerate(ir.invocations) if inv.devices is None or d in inv.devices]
        out |= {(d, j) for j, i in enumerate(mine) if i in reach.ran}
    return out


@pytest.mark.rule("PRG-211")
@pytest.mark.parametrize("seqs, ran", [
    ([[True], []], set()),  # per_device_local_call: device 0 waits at the start barrier, device 1 has finished
    ([[False, True, False], [False, False]], {(0, 0), (1, 0), (1, 1)}),  # per_device_cond: device 1's pairwise call
    ([[True, True], [True, True, True]], {(0, 0), (0, 1), (1, 0), (1, 1)}),  # ragged_chunks_while at 2 devices
    ([[False], [False, False]], {(0, 0), (1, 0), (1, 1)}),  # device 1's second call has an id: it runs
    ([[True, True], [False, True]], None),  # device 1 runs on past its call: a failure could let it (not decided)
    ([[True], [True]], None),  # the calls meet at the barriers (PRG-145)
    ([[True], [False], []], {(1, 0)}),
])
def test_the_calls_that_run_before_the_hang_are_those_jax_s_barriers_let_run(seqs, ran):
    assert _reached(seqs) == ran
    if ran is not None:
        assert _run_barriers_and_bodies(seqs) == (False, ran)


@pytest.mark.rule("PRG-211")
@settings(max_examples=15)
@given(st.integers(2, 4).flatmap(lambda n: st.lists(st.lists(st.booleans(), max_size=3), min_size=n, max_size=n)))
def test_the_calls_that_run_before_the_hang_agree_with_jax_s_barriers_on_drawn_call_sequences(seqs):
    ran = _reached(seqs)
    if ran is not None:
        assert no_run_completes(_ir(seqs), len(seqs)) is not None
        assert _run_barriers_and_bodies(seqs) == (False, ran)
