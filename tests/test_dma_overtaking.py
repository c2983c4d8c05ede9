"""Why `examples/ring_allgather.py` waits for its right neighbour only (a regression from the
interpret-mode matrix: wrong output at 8 devices under `on_wait`).

A ring all-gather step: handshake, one remote copy to the right neighbour, wait for the send
and for the block from the left. With a handshake of "signal both neighbours, wait for two", a
count cannot tell who signalled, so a device can run ahead of its right neighbour: its next copy
is queued on the neighbour's receive semaphore before the neighbour waited for the previous one,
and `on_wait` runs queued copies last in first out (SEM-5), so that wait runs the newer copy.
Waiting for the right neighbour alone rules it out. The model shows both: freezing a device
at a receive wait and running the others as far as they can (RUN-3) leaves two copies queued.
"""

from __future__ import annotations

import pytest

from semcheck.model import DmaStart, Scratch, SemRef, Signal, Topology, Wait, fast_run, launch
from semcheck.model.step import step

BYTES = 4096


def _allgather(n: int, *, both_neighbours: bool):
    bodies = []
    for d in range(n):
        left, right = (d - 1) % n, (d + 1) % n
        ops = []
        for _ in range(n - 1):
            ops.append(Signal(SemRef("ready"), 1, device=left))
            if both_neighbours:
                ops.append(Signal(SemRef("ready"), 1, device=right))
            ops.append(Wait(SemRef("ready"), 2 if both_neighbours else 1))
            ops.append(DmaStart(SemRef("recv"), BYTES, src_sem=SemRef("send"), device=right))
            ops.append(Wait(SemRef("send"), BYTES, kind="dma"))
            ops.append(Wait(SemRef("recv"), BYTES, kind="dma"))
        bodies.append(ops)
    scratch = [Scratch("ready", 1), Scratch("send", 1), Scratch("recv", 1)]
    return launch(Topology(n), bodies, scratch=scratch)


def _overtaken_waits(program):
    """(core, position, queued copies) for every receive wait that can find two copies queued."""
    out = []
    for c, ops in enumerate(program.cores):
        for i, op in enumerate(ops):
            if isinstance(op, Wait) and op.kind == "dma" and op.sem == SemRef("recv"):
                frozen = fast_run(program, "on_wait", hold={c: i}, record=False)
                for (key, core), tasks in frozen.state.queues.items():
                    copies = [t for t in tasks if t[1] == "read_write"]
                    if core == c and len(copies) >= 2:
                        out.append((c, i, copies, frozen))
    return out


def test_two_neighbour_handshake_lets_a_copy_overtake_the_one_a_wait_is_for():
    program = _allgather(8, both_neighbours=True)
    found = _overtaken_waits(program)
    assert found
    c, i, copies, frozen = found[0]
    # the frozen device now takes its wait: it runs the newest copy first (SEM-5, last in first
    # out), and the wait is satisfied while the copy it was meant for has not written its block
    state = frozen.state
    for _ in range(8):
        if state.pcs[c] > i:
            break
        state = step(program, "on_wait", state, ("core", c))
    assert state.pcs[c] == i + 1
    newest, older = copies[-1][0], copies[0][0]
    assert state.dmas[newest].phase == 2 and state.dmas[older].phase < 2
    assert fast_run(program, "on_wait").kind == "completed"  # counts and deadlock are fine all along


@pytest.mark.parametrize("n", [3, 8])
def test_waiting_for_the_right_neighbour_alone_keeps_one_copy_in_flight(n):
    assert _overtaken_waits(_allgather(n, both_neighbours=False)) == []


def test_a_short_ring_cannot_run_far_enough_ahead_to_overtake():
    # each device passes a handshake only when its two neighbours together caught up,
    # so a device can lead its right neighbour by a step only on longer rings
    assert _overtaken_waits(_allgather(4, both_neighbours=True)) == []
