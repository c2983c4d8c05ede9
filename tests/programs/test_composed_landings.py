"""`composed_landings` is linear in a program of calls and finds what the quadratic one found (PRG-153).

The function as it was before PRG-153 is kept here (`quadratic_landings`): for every landing it looked
up each call's position with `order.index` over every operation of the target's core 0. Generated
composed programs (random call orders, per-core call sequences that need not follow the order,
kernel-local and carried labels, barrier semaphores, remote signals and copies to every core) must
give the same landings, in the same order, from both; so must every example program of calls.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from semcheck.checker.properties.confined import Landing, composed_landings
from semcheck.checker.frontend import program_lower
from semcheck.model.ops import BARRIER, AllocBuffer, AllocSem, DmaStart, Program, SemRef, Signal, Topology, Wait
from semcheck.model.step import target_core


def quadratic_landings(composed):
    """`confined.composed_landings` before PRG-153, verbatim but for its name."""
    from semcheck.checker.frontend.program_lower import program_label, call_prefix, call_renames, operand_labels

    program, calls, ir = composed.program, composed.calls, composed.ir
    topo = program.topology
    invs = ir.invocations
    renames = []
    operands = {}
    for inv in invs:
        r, _ = call_renames(inv, ir, renames)
        renames.append(r)
        for local in operand_labels(inv).values():
            operands.setdefault(program_label(local, call_prefix(inv), r), set()).add(inv.index)
    owner = {}
    for ops, ks in zip(program.cores, calls):
        for op, k in zip(ops, ks):
            if type(op) in (AllocSem, AllocBuffer):
                owner.setdefault(op.label, k)
    pos = composed.position

    def window(label, k):
        if label in operands:
            at = [pos(c) for c in operands[label]]
            return min(at), max(at), True
        own = pos(owner.get(label, k))
        return own, own, False

    out = []
    for g, (ops, ks) in enumerate(zip(program.cores, calls)):
        for i, (op, k) in enumerate(zip(ops, ks)):
            if type(op) not in (Signal, DmaStart) or op.device is None:
                continue
            sem = op.sem if type(op) is Signal else op.dst_sem
            if sem.label == BARRIER or sem.label in composed.barrier_labels:
                continue
            tg = target_core(program, "hardware", g, op.device, op.core, dma=type(op) is DmaStart)
            if not isinstance(tg, int):
                continue
            labels = [sem.label] + ([op.dst_buf] if type(op) is DmaStart and op.dst_buf is not None else [])
            spans = [window(lb, k) for lb in labels]
            first, last = max(s[0] for s in spans), min(s[1] for s in spans)
            carried = any(s[2] for s in spans)
            core0 = topo.global_core(topo.device_of(tg), 0)
            mine = calls[core0]
            entry = next((j for j, c in enumerate(mine) if pos(c) >= first), len(mine))
            exit_at = next((j for j, c in enumerate(mine) if pos(c) > last), len(mine))
            first_call, last_call = invs[composed.order[first]], invs[composed.order[last]]
            out.append(Landing(g, i, core0, entry, exit_at, first_call.describe(), last_call.describe(), carried,
                               first_call.loc))
    return out


@dataclasses.dataclass(frozen=True)
class FakeInvocation:
    """What `composed_landings` asks of an invocation: its index, words, line and operand labels."""

    index: int
    operands: tuple[str, ...]

    def describe(self) -> str:
        return f"k (call {self.index}, f.py:{10 + self.index})"

    @property
    def loc(self) -> str:
        return f"f.py:{10 + self.index}"


def fake_lowering():
    """program_lower's label helpers over `FakeInvocation`: an operand keeps its program label."""
    return mock.patch.multiple(
        program_lower,
        call_renames=lambda inv, ir, renames: ({}, None),
        call_prefix=lambda inv: "",
        program_label=lambda local, prefix, r: local,
        operand_labels=lambda inv: {j: lb for j, lb in enumerate(inv.operands)})


class Composed(SimpleNamespace):
    def position(self, call):
        return self.order.index(call)


@st.composite
def composed_programs(draw):
    n = draw(st.integers(2, 4))
    per = draw(st.sampled_from([1, 1, 2]))
    topo = Topology(n, per)
    k = draw(st.integers(1, 5))
    order = tuple(draw(st.permutations(range(k))))
    carried = ["c0", "c1", "c2"]
    invs = tuple(FakeInvocation(j, tuple(draw(st.lists(st.sampled_from(carried), max_size=2, unique=True))))
                 for j in range(k))
    barrier_labels = frozenset(draw(st.lists(st.sampled_from(["bar0", "bar1"]), max_size=1)))
    labels = carried + [f"k{j}.s" for j in range(k)] + ["bar0", "bar1", BARRIER, "nowhere"]
    cores, calls = [], []
    for _g in range(topo.num_cores):
        # a core's calls usually follow `order`; sometimes not, which the running maximum must survive
        if draw(st.booleans()):
            seq = sorted(draw(st.lists(st.sampled_from(order), max_size=8)), key=order.index)
        else:
            seq = draw(st.lists(st.sampled_from(order), max_size=8))
        ops = []
        for c in seq:
            what = draw(st.sampled_from(["alloc", "buf", "signal", "copy", "local", "wait"]))
            label = draw(st.sampled_from(labels))
            device = draw(st.none() | st.integers(-1, n))
            core = draw(st.none() | st.integers(0, per))
            if what == "alloc":
                ops.append(AllocSem(f"k{c}.s", 1, f"k{c}.s", "device"))
            elif what == "buf":
                ops.append(AllocBuffer(draw(st.sampled_from([f"k{c}.b"] + carried))))
            elif what == "signal":
                ops.append(Signal(SemRef(label), 1, device=device, core=core))
            elif what == "copy":
                buf = draw(st.none() | st.sampled_from(carried + [f"k{c}.b"]))
                ops.append(DmaStart(SemRef(label), 4, src_sem=SemRef("t"), device=device, core=core, dst_buf=buf))
            elif what == "local":
                ops.append(Signal(SemRef(label), 1))
            else:
                ops.append(Wait(SemRef(label), 1))
        cores.append(tuple(ops))
        calls.append(tuple(seq))
    program = Program(topo, tuple(cores))
    return Composed(program=program, calls=tuple(calls), ir=SimpleNamespace(invocations=invs), order=order,
                    barrier_labels=barrier_labels)


@pytest.mark.rule("PRG-153")
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(composed_programs())
def test_linear_landings_are_the_quadratic_ones(composed):
    with fake_lowering():
        assert composed_landings(composed) == quadratic_landings(composed)


@pytest.mark.rule("PRG-153")
def test_landings_of_a_long_program_of_calls_cost_about_its_length():
    """1,600 calls on 4 devices, each core signalling its right neighbour in every call: the quadratic
    search looked at every earlier operation of the target for each of the 6,400 landings."""
    topo = Topology(4, 1)
    k = 1600
    cores = tuple(tuple(op for c in range(k) for op in (AllocSem(f"k{c}.s", 1, f"k{c}.s", "device"),
                                                      Signal(SemRef(f"k{c}.s"), 1, device=(d + 1) % 4)))
                  for d in range(4))
    calls = tuple(tuple(c for c in range(k) for _ in range(2)) for _ in range(4))
    composed = Composed(program=Program(topo, cores), calls=calls,
                        ir=SimpleNamespace(invocations=tuple(FakeInvocation(j, ()) for j in range(k))),
                        order=tuple(range(k)), barrier_labels=frozenset())
    with fake_lowering():
        t = time.process_time()
        got = composed_landings(composed)
        took = time.process_time() - t
        assert [(la.entry, la.exit) for la in got[:3]] == [(0, 2), (2, 4), (4, 6)]
        assert len(got) == 4 * k
    assert took < 2.0, f"{took:.2f} s for {4 * k} landings"


EXAMPLES = ["async_remote_copy.py", "repeated_shift_double_barrier.py", "buggy/repeated_shift_single_barrier.py",
            "buggy/shared_collective_id_two_patterns.py", "bidi_permute_loop.py"]

COMPARE = """
import sys
sys.path.insert(0, {here!r})
from semcheck.checker.frontend.targets import provision_devices
provision_devices(5)
from semcheck.checker.frontend import lower_target
from semcheck.checker.frontend.programs import lower_program
from semcheck.checker.frontend.targets import load_targets
from semcheck.checker.frontend.errors import FrontendError
from semcheck.checker.properties.confined import composed_landings
from test_composed_landings import quadratic_landings
n = 0
for path in sys.argv[1:]:
    for t in load_targets(path):
        for devices in (4, 5):
            try:
                orders = lower_program(t, devices, lower_target(t, devices)) or ()
            except FrontendError:
                continue  # e.g. a pairwise kernel at 5 devices
            for composed in orders:
                new, old = composed_landings(composed), quadratic_landings(composed)
                assert new == old, (path, devices)
                n += len(new)
print("landings", n)
"""


@pytest.mark.rule("PRG-153")
def test_examples_give_the_same_landings():
    """The example programs of calls, composed at 4 and 5 devices, in a fresh process (its own devices)."""
    here = Path(__file__).resolve().parent
    paths = [str(here.parents[1] / "examples" / "programs" / e) for e in EXAMPLES]
    out = subprocess.run([sys.executable, "-c", COMPARE.format(here=str(here)), *paths], capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert int(out.stdout.split()[-1]) > 0
