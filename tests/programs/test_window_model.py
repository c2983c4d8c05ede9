"""The abstract window model (window_model.py) against the claims of specs/semantics/calls.md."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import window_model as wm  # noqa: E402

SHIFT_SINGLE = wm.SINGLE_BARRIER + wm.SHIFT_RIGHT
SHIFT_DOUBLE = wm.DOUBLE_BARRIER + wm.SHIFT_RIGHT
BIDI_SINGLE = wm.SINGLE_BARRIER + wm.BIDIRECTIONAL
BIDI_DOUBLE = wm.DOUBLE_BARRIER + wm.BIDIRECTIONAL


@pytest.mark.rule("PRG-15", "PRG-16")
@pytest.mark.parametrize("devices", [2, 3, 4])
def test_single_barrier_shift_is_safe_below_five_devices(devices):
    """PRG-16: below five devices a neighbour cannot finish a call without the victim's partner."""
    res = wm.search(devices, 2, SHIFT_SINGLE)
    assert res.violation is None and res.max_neighbour_lag <= 1


@pytest.mark.rule("PRG-1", "PRG-3", "PRG-15", "PRG-16")  # the hazard exists because of PRG-1 and PRG-3
@pytest.mark.parametrize("devices", [5, 6])
def test_single_barrier_shift_lets_a_copy_land_outside_the_call(devices):
    """PRG-16: from five devices the left neighbour's next-call signal releases the barrier early."""
    res = wm.search(devices, 2, SHIFT_SINGLE)
    assert res.violation is not None
    what, sender, target, invocation, positions = res.violation
    assert what == "copy" and target == (sender + 1) % devices and invocation == 0
    # the target has not entered invocation 0; the sender's left neighbour is already in invocation 1
    assert positions[target] == (0, -1)
    assert positions[(sender - 1) % devices][0] == 1


@pytest.mark.rule("PRG-16")
def test_double_barrier_shift_is_safe_at_five_devices():
    """PRG-16: the second, kernel-local barrier removes the early release (and its own signals land inside)."""
    assert wm.search(5, 2, SHIFT_DOUBLE).violation is None


@pytest.mark.rule("PRG-16")
@pytest.mark.parametrize("ops", [BIDI_SINGLE, BIDI_DOUBLE], ids=["single", "double"])
@pytest.mark.parametrize("devices", [2, 3])
def test_bidirectional_exchange_is_safe_with_either_barrier(ops, devices):
    """PRG-16: data from both neighbours in every call keeps neighbours within one call (the
    tutorial's reduce-scatter called twice with double_barrier=False is not a hazard)."""
    res = wm.search(devices, 3, ops)
    assert res.violation is None and res.max_neighbour_lag <= 1


@pytest.mark.rule("PRG-7")
def test_three_calls_find_no_more_than_two_for_the_shift():
    """PRG-7: where two invocations are safe and neighbours stay within one invocation, a third
    adds no violation (the window argument, checked on the model)."""
    for devices in (2, 3, 4):
        two, three = wm.search(devices, 2, SHIFT_SINGLE), wm.search(devices, 3, SHIFT_SINGLE)
        assert two.violation is None and three.violation is None
        assert three.max_neighbour_lag <= 1


def test_the_search_sees_a_violation_it_is_given():
    """The model is not vacuous: a copy started before any barrier lands outside the call."""
    res = wm.search(2, 1, (("start", +1), ("wsend", 1), ("wrecv", 1), ("exit",)))
    assert res.violation is not None and res.violation[0] == "copy"


@pytest.mark.rule("PRG-17")
@pytest.mark.parametrize("order", ["ring_then_pair", "pair_then_ring"])
def test_one_collective_id_for_two_patterns_mixes_their_signals(order):
    """PRG-17: a pairwise kernel's signal satisfies the ring kernel's wait (or the other way round),
    and a copy lands in a device outside the call; distinct ids keep the counts apart."""
    ring, pair = (wm.ring_kernel, wm.pair_kernel)
    first, second = (ring, pair) if order == "ring_then_pair" else (pair, ring)
    shared = wm.search_program(4, (first(0), second(0)))
    assert shared.violation is not None and shared.violation[0] == "copy"
    assert shared.violation[4][shared.violation[2]] == (0, -1)  # the target had not entered call 0
    assert wm.search_program(4, (first(0), second(1))).violation is None


@pytest.mark.rule("PRG-17")
def test_two_patterns_coincide_on_two_devices():
    """PRG-17: on two devices the left, right and pairwise partner are the same device."""
    assert wm.search_program(2, (wm.ring_kernel(0), wm.pair_kernel(0))).violation is None


def _multi_remote_copy(right_id, left_id):
    """jax's test_multi_remote_copy: start right, start left, two send-dones, two receive-dones."""
    return (wm.remote_start(+1, 3, right_id), wm.remote_start(-1, 3, left_id),
            wm.done_kernel(2, 0), wm.done_kernel(0, 2))


@pytest.mark.rule("PRG-17")
@pytest.mark.parametrize("devices", [3, 4])
def test_remote_copies_in_two_directions_on_one_id_land_before_the_target_starts(devices):
    """PRG-17: the left-going start's signal releases the right-going start's wait; the copy lands
    in a carried destination that is not live yet on its target (PRG-15)."""
    res = wm.search_program(devices, _multi_remote_copy(0, 0))
    assert res.violation is not None and res.violation[0] == "copy"
    assert res.violation[4][res.violation[2]] == (0, -1)


@pytest.mark.rule("PRG-17")
def test_remote_copies_in_two_directions_with_two_ids_or_two_devices_are_confined():
    assert wm.search_program(3, _multi_remote_copy(0, 1)).violation is None
    assert wm.search_program(2, _multi_remote_copy(0, 0)).violation is None
