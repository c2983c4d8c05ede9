"""RUN-58: a kernel allocation with one core in scope, handed out without the mappings per scope, is what
BUF-1 and BUF-8 give through the mappings (`buffer.handout`, `kernel_buffer.buffer_key`, `handed_id`)."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from semcheck.model import buffer, kernel_buffer
from semcheck.model.errors import Violation
from semcheck.model.ids import FIRST_BUFFER_ID
from semcheck.model.ops import AllocBuffer, Program, Topology
from semcheck.model.step import buffer_allocation

SPACES = ("hbm", "any", "vmem", "smem", "semaphore_mem")


def _through_the_mappings(per: int, core: int, scope: str, space: str, next_id: dict, mode: str):
    """`step.buffer_allocation` as it was for every scope: every core in scope through `handout`, each key by
    `buffer_key`, the handed id by `handed_id` (the slow path RUN-58 is held to)."""
    device, mine = divmod(core, per)
    local = None if scope == "device" else mine
    cores = range(per) if local is None else (local,)
    ids = buffer.handout(next_id, [(device, c) for c in cores])
    keys = {c: kernel_buffer.buffer_key(space, ids[(device, c)], device, c) for c in cores}
    bound = {device * per + c: key for c, key in keys.items()}
    if mode == "hardware":
        return ids, bound, None
    handed = kernel_buffer.handed_id(keys, local)
    return ids, bound, handed if isinstance(handed, Violation) else None


@st.composite
def allocations(draw):
    per = draw(st.sampled_from((1, 1, 2, 4)))
    devices = draw(st.integers(1, 3))
    core = draw(st.integers(0, devices * per - 1))
    threads = st.tuples(st.integers(0, devices - 1), st.integers(0, per - 1))
    # ids near int16's end too, where the handed id overflows (IDS-2, ERR-3)
    next_id = draw(st.dictionaries(threads, st.one_of(st.integers(FIRST_BUFFER_ID, 140), st.integers(32_760, 32_780)),
                                   max_size=6))
    return per, core, draw(st.sampled_from(("device", "core"))), draw(st.sampled_from(SPACES)), next_id


@settings(max_examples=300, deadline=None)
@given(allocations(), st.sampled_from(("eager", "on_wait", "hardware")))
@example((1, 0, "device", "hbm", {(0, 0): 32_767}), "eager")  # the last id int16 holds: handed as it is
@example((1, 0, "device", "vmem", {(0, 0): 32_768}), "eager")  # one past it: the handed id overflows
@example((2, 1, "core", "hbm", {(0, 1): 32_768}), "on_wait")  # a run_scoped buffer of a device's second core
@example((2, 3, "device", "hbm", {(1, 0): 104, (1, 1): 101}), "eager")  # two cores: not one core in scope
@pytest.mark.rule("RUN-58")
def test_a_one_core_allocation_is_what_the_mappings_give(drawn, mode):
    per, core, scope, space, next_id = drawn
    topo = Topology(num_devices=core // per + 1, cores_per_device=per)
    program = Program(topology=topo, cores=((),) * topo.num_cores)
    op = AllocBuffer(label="buf", memory_space=space, scope=scope)
    assert buffer_allocation(program, mode, core, op, next_id) == _through_the_mappings(per, core, scope, space,
                                                                                         next_id, mode)


@given(st.dictionaries(st.tuples(st.integers(0, 3), st.integers(0, 3)), st.integers(FIRST_BUFFER_ID, 500)),
       st.tuples(st.integers(0, 3), st.integers(0, 3)), st.sampled_from(SPACES), st.integers(1, 4))
@pytest.mark.rule("RUN-58")
def test_kernel_keys_of_one_core_are_handouts_of_one_thread(next_id, thread, space, per):
    device, local = thread
    assert buffer.handout_one(next_id, thread) == buffer.handout(next_id, (thread,))[thread]
    ids, keys = kernel_buffer.kernel_keys(next_id, device, local, space, max(per, local + 1))
    assert ids == buffer.handout(next_id, (thread,))
    assert keys == {local: kernel_buffer.buffer_key(space, ids[thread], device, local)}
    # a device-wide allocation of a device of one core: its one core, 0
    first = (device, 0)
    assert kernel_buffer.kernel_keys(next_id, device, None, space, 1) == (
        buffer.handout(next_id, (first,)), {0: kernel_buffer.buffer_key(space, buffer.handout_one(next_id, first), device, 0)})
