"""Generators of small multi-core programs in the model IR, for the threaded differential tests.

Programs are built from *events*, each a matched pair of operations:

* a signal from one core to a semaphore of another (any device, any core)
  and the target core's wait for it;
* a DMA from one core to another (local or remote), with its receive
  semaphore waited on by the destination and, when it has one, its send
  semaphore waited on by the source;
* a barrier-semaphore signal to a core of another device and its wait
  (kernels with a collective id);
* a `run_scoped` semaphore allocation on one core with a signal to itself
  and its wait;
* a `run_scoped` buffer copied out by its core, the copy waited inside the
  scope or (now and then) after it (BUF-13, BUF-14);
* a semaphore read;
* a *lonely* signal or DMA that nobody waits for (it leaves counts behind for
  the exit check, and under on_wait a lonely DMA runs only if a waiter of the
  same semaphore happens to pop its task, so final counts depend on the
  schedule).

When the kernel has a collective id, some cores also get the barrier
semaphore (so a collective id equal to an internal id collides on lookup).

Each event happens in a round; every core does its rounds in order, and in
each round its signals, DMA starts and allocations before its waits. Such a
program cannot deadlock (every wait is preceded, in round order, by the
signal it consumes), so most generated programs complete. *Defects* break
the construction on purpose: a wait nobody signals, a wait for more than is
signalled, two cores that wait for each other first, or a signal without a
core index to a core other than 0 (which the interpreter delivers to core 0).
"""

from __future__ import annotations

from hypothesis import strategies as st

from semcheck.model import (
    BARRIER,
    AllocBuffer,
    AllocSem,
    DmaStart,
    FreeBuffer,
    GetBarrierSem,
    Read,
    Scratch,
    SemRef,
    Signal,
    Topology,
    Wait,
    launch,
)

TOPOLOGIES = ((2, 1), (3, 1), (4, 1), (1, 2), (2, 2), (1, 3), (1, 4))
COLLECTIVE_IDS = (0, 3, 2000, 2001, 2002)
ROUNDS = 3


def _target(topo: Topology, src: int, dst: int, *, explicit_core: bool) -> dict:
    """Signal/DMA target arguments naming global core `dst` from `src`."""
    d_src, d_dst = topo.device_of(src), topo.device_of(dst)
    local = topo.local_core_of(dst)
    return {
        "device": None if d_src == d_dst else d_dst,
        "core": local if (explicit_core or local != 0) else None,
    }


@st.composite
def programs(draw, *, defect_rate: int = 8, max_events: int = 6):
    """A launched program and a short description of how it was built.

    About one program in `defect_rate` carries a defect.
    """
    nd, cpd = draw(st.sampled_from(TOPOLOGIES), label="topology")
    topo = Topology(nd, cpd)
    n = topo.num_cores
    cid = draw(st.one_of(st.none(), st.none(), st.none(), st.sampled_from(COLLECTIVE_IDS)), label="collective id")
    nsems = draw(st.integers(1, 3), label="semaphores")
    scratch = [Scratch("s", nsems), Scratch("d", 2)]
    items: list[list] = [[] for _ in range(n)]  # per core: (round, phase, sub, tiebreak, op)
    uses_barrier: set[int] = set()
    desc: list[str] = []
    cores = st.integers(0, n - 1)
    scoped = 0

    def put(core, rnd, phase, op, sub=1):
        items[core].append((rnd, phase, sub, draw(st.integers(0, 99)), op))

    kinds = ["sig", "sig", "dma", "dma", "read", "scoped", "scoped_copy", "lonely"]
    kinds += ["barrier"] if cid is not None and nd > 1 else []
    for _ in range(draw(st.integers(1, max_events), label="events")):
        kind = draw(st.sampled_from(kinds), label="event")
        rnd = draw(st.integers(0, ROUNDS - 1))
        a, b = draw(cores, label="from"), draw(cores, label="to")
        if kind == "sig":
            i = draw(st.integers(0, nsems - 1))
            k = draw(st.integers(0, 3))  # a wait for 0 may come before any signal: RACE-1 with race detection
            tgt = _target(topo, a, b, explicit_core=draw(st.booleans()))
            put(a, rnd, 0, Signal(SemRef("s", i), k, **tgt))
            put(b, rnd, 1, Wait(SemRef("s", i), k))
            desc.append(f"r{rnd}: {a} signals s[{i}]+{k} on {b}")
        elif kind == "dma":
            j = draw(st.integers(0, 1))
            nbytes = draw(st.sampled_from([4, 8, 16, 32]))
            with_src = draw(st.booleans())
            tgt = _target(topo, a, b, explicit_core=True)
            if topo.local_core_of(a) == topo.local_core_of(b) and draw(st.booleans()):
                tgt["core"] = None  # same local core: the default
            src = SemRef("d", 1 - j) if with_src else None
            put(a, rnd, 0, DmaStart(SemRef("d", j), nbytes, src, **tgt))
            if src is not None:
                put(a, rnd, 1, Wait(src, nbytes, kind="dma"))
            put(b, rnd, 1, Wait(SemRef("d", j), nbytes, kind="dma"))
            desc.append(f"r{rnd}: {a} DMAs {nbytes}B to {b} on d[{j}]" + (" (send sem)" if src else ""))
        elif kind == "barrier":
            if topo.device_of(a) == topo.device_of(b):
                b = topo.global_core((topo.device_of(a) + 1) % nd, topo.local_core_of(b))
            uses_barrier.update((a, b))
            put(a, rnd, 0, Signal(SemRef(BARRIER), 1, **_target(topo, a, b, explicit_core=True)))
            put(b, rnd, 1, Wait(SemRef(BARRIER), 1))
            desc.append(f"r{rnd}: {a} signals the barrier semaphore of {b}")
        elif kind == "scoped":
            label = f"rs{scoped}"
            scoped += 1
            count = draw(st.integers(1, 2))
            put(a, rnd, 0, AllocSem(label, count, site="scoped", scope="core"), sub=0)
            local = topo.local_core_of(a)
            put(a, rnd, 0, Signal(SemRef(label, count - 1), 2, core=local), sub=2)
            put(a, rnd, 1, Wait(SemRef(label, count - 1), 2))
            desc.append(f"r{rnd}: {a} run_scoped {count} semaphores")
        elif kind == "scoped_copy":
            # a run_scoped buffer copied out locally, the copy waited inside the scope or, now and then,
            # after it (BUF-13, BUF-14: on_wait then runs it at a freed buffer)
            label = f"buf@gen.py:{scoped}#0/{scoped}"
            scoped += 1
            j = draw(st.integers(0, 1))
            nbytes = draw(st.sampled_from([4, 8, 16]))
            late = draw(st.integers(0, 3)) == 0
            put(a, rnd, 0, AllocBuffer(label, nbytes, "vmem", "core"), sub=0)
            put(a, rnd, 0, DmaStart(SemRef("d", j), nbytes, None, core=topo.local_core_of(a), src_buf=label))
            put(a, ROUNDS if late else rnd, 1, Wait(SemRef("d", j), nbytes, kind="dma"))
            put(a, rnd, 1, FreeBuffer(label), sub=9)
            desc.append(f"r{rnd}: {a} copies run_scoped {label} out on d[{j}]" + (", waited after" if late else ""))
        elif kind == "lonely":
            if draw(st.booleans()):
                i = draw(st.integers(0, nsems - 1))
                put(a, rnd, 0, Signal(SemRef("s", i), 1, **_target(topo, a, b, explicit_core=True)))
                desc.append(f"r{rnd}: {a} signals s[{i}] on {b}, unwaited")
            else:
                j = draw(st.integers(0, 1))
                nbytes = draw(st.sampled_from([4, 8, 16, 32]))
                put(a, rnd, 0, DmaStart(SemRef("d", j), nbytes, None, **_target(topo, a, b, explicit_core=True)))
                desc.append(f"r{rnd}: {a} DMAs {nbytes}B to {b} on d[{j}], unwaited")
        else:
            i = draw(st.integers(0, nsems - 1))
            put(a, rnd, draw(st.integers(0, 1)), Read(SemRef("s", i)))
            desc.append(f"r{rnd}: {a} reads s[{i}]")

    if draw(st.integers(0, defect_rate - 1), label="defect?") == 0:
        defect = draw(st.sampled_from(["unsignalled", "over", "cycle", "no_core_index"]), label="defect")
        a = draw(cores)
        if defect == "unsignalled":
            put(a, ROUNDS, 1, Wait(SemRef("s", nsems - 1), 1))
        elif defect == "over":
            b = draw(cores)
            put(a, ROUNDS, 0, Signal(SemRef("s", 0), 1, **_target(topo, a, b, explicit_core=True)))
            put(b, ROUNDS, 1, Wait(SemRef("s", 0), 2))
        elif defect == "cycle" and n > 1:
            b = (a + 1) % n
            put(a, ROUNDS, 0, Wait(SemRef("s", 0), 1), sub=0)
            put(a, ROUNDS, 0, Signal(SemRef("s", 0), 1, **_target(topo, a, b, explicit_core=True)), sub=1)
            put(b, ROUNDS, 0, Wait(SemRef("s", 0), 1), sub=0)
            put(b, ROUNDS, 0, Signal(SemRef("s", 0), 1, **_target(topo, b, a, explicit_core=True)), sub=1)
        elif defect == "no_core_index" and cpd > 1:
            d = topo.device_of(a)
            b = topo.global_core(d, 1)
            put(a, ROUNDS, 0, Signal(SemRef("s", 0), 1))  # core_index omitted: goes to core 0
            put(b, ROUNDS, 1, Wait(SemRef("s", 0), 1))
        else:
            put(a, ROUNDS, 1, Wait(SemRef("s", 0), 1))
        desc.append(f"defect {defect} at core {a}")

    if cid is not None:
        for g in range(n):
            if g not in uses_barrier and draw(st.integers(0, 2)) == 0:
                put(g, draw(st.integers(0, ROUNDS - 1)), 0, GetBarrierSem(), sub=0)
                desc.append(f"{g} gets the barrier semaphore")

    bodies = []
    for g in range(n):
        ops = [op for *_, op in sorted(items[g], key=lambda t: t[:4])]
        if g in uses_barrier:
            ops.insert(0, GetBarrierSem())
        bodies.append(tuple(ops))
    name = f"{nd}x{cpd} cid={cid}: " + "; ".join(desc)
    program = launch(topo, bodies, collective_id=cid, scratch=scratch, name=name)
    return program
