"""Small generated programs for cross-checking the Z3 encodings against the explorer.

2-4 cores (one or two per device), a few body operations each: local and
remote signals, waits (semaphore and DMA kind), DMAs (local and remote, with
and without a send semaphore), barriers (each name over a random set of cores, IR-1),
`run_scoped` allocations, barrier-semaphore use with and without
`get_barrier_semaphore`, reads; collective ids chosen to collide often with
the internal ids 2000.. . Some programs allocate device-scope semaphores in
the kernel body (racy allocation order on two-core devices) or skip a
barrier, so the encodings' "unknown" paths are exercised too.

Tuning knobs are plain module constants, and `SEMCHECK_PROFILE=ci-long`
multiplies the example counts (see `examples()`).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from semcheck.model import (
    BARRIER,
    AllocSem,
    Barrier,
    DmaStart,
    GetBarrierSem,
    Loc,
    Program,
    Read,
    Scratch,
    SemRef,
    Signal,
    Topology,
    Wait,
    launch,
)

LONG = os.environ.get("SEMCHECK_PROFILE") == "ci-long"


def examples(default: int, long: int | None = None) -> settings:
    """Per-test hypothesis settings: `default` examples, or `long` under SEMCHECK_PROFILE=ci-long."""
    return settings(
        max_examples=(long if long is not None else default * 50) if LONG else default,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )


@st.composite
def programs(draw, max_cores: int = 4, max_ops: int = 5, collide: bool = True) -> Program:
    cores_per_device = draw(st.sampled_from([1, 1, 2]))
    devices = draw(st.integers(1 if cores_per_device == 2 else 2, max_cores // cores_per_device))
    topo = Topology(devices, cores_per_device)
    n = topo.num_cores
    cids = [None, 0, 2000, 2001, 2002, 2003] if collide else [None, 0, 7]
    collective_id = draw(st.sampled_from(cids))
    scratch = [Scratch(f"s{i}", draw(st.integers(1, 2)), loc=Loc("k.py", 1 + i)) for i in range(draw(st.integers(1, 2)))]
    racy = cores_per_device == 2 and draw(st.integers(0, 9)) == 0
    barrier_names = ["user", "user2"]
    # IR-1: a barrier name has one participant set, and only participants use it
    parties = {name: frozenset(draw(st.sets(st.integers(0, n - 1), min_size=min(2, n), max_size=n)))
               for name in barrier_names}
    bodies = []
    line = 10
    for g in range(n):
        refs = [SemRef(s.label, i) for s in scratch for i in range(s.count)]
        ops = []
        if racy and draw(st.booleans()):
            ops.append(AllocSem(f"dev{g}", 1, site="dev", scope="device", loc=Loc("k.py", 9)))
        for k in range(draw(st.integers(0, max_ops))):
            line += 1
            loc = Loc("k.py", line)
            choice = draw(st.sampled_from(
                ["signal", "signal", "wait", "wait", "dma", "dma", "scoped", "barrier_sem", "barrier", "read", "use_barrier"]
            ))
            dev = st.none() | st.integers(0, devices - 1)
            core = st.none() | st.integers(0, cores_per_device - 1)
            if choice == "signal":
                ops.append(Signal(draw(st.sampled_from(refs)), draw(st.integers(1, 2)),
                                  device=draw(dev), core=draw(core), loc=loc))
            elif choice == "wait":
                ops.append(Wait(draw(st.sampled_from(refs)), draw(st.integers(1, 3)),
                                kind=draw(st.sampled_from(["semaphore", "dma"])), loc=loc))
            elif choice == "dma":
                ops.append(DmaStart(draw(st.sampled_from(refs)), draw(st.sampled_from([1, 2])),
                                    src_sem=draw(st.none() | st.sampled_from(refs)),
                                    device=draw(dev), core=draw(core), loc=loc))
            elif choice == "scoped":
                label = f"c{g}k{k}"
                cnt = draw(st.integers(1, 2))
                ops.append(AllocSem(label, cnt, site=f"site{k}", loc=loc))
                refs = refs + [SemRef(label, i) for i in range(cnt)]
            elif choice == "barrier_sem":
                ops.append(GetBarrierSem(loc=loc))
                if SemRef(BARRIER) not in refs:
                    refs = refs + [SemRef(BARRIER)]
            elif choice == "use_barrier" and collective_id is not None and draw(st.integers(0, 3)) == 0:
                # the barrier semaphore without this core's own get_barrier_semaphore
                ops.append(Signal(SemRef(BARRIER), 1, device=draw(dev), loc=loc))
            elif choice == "barrier" and n > 1:
                mine = [name for name in barrier_names if g in parties[name]]
                if mine:
                    name = draw(st.sampled_from(mine))
                    ops.append(Barrier(name, parties[name], loc=loc))
            elif choice == "read":
                ops.append(Read(draw(st.sampled_from(refs)), loc=loc))
        bodies.append(ops)
    if draw(st.integers(0, 3)) != 0:
        # usually keep barrier counts equal, so that not every barrier deadlocks trivially
        for name in barrier_names:
            need = max(sum(isinstance(o, Barrier) and o.name == name for o in b) for b in bodies)
            for g, b in enumerate(bodies):
                if g not in parties[name]:
                    continue
                have = sum(isinstance(o, Barrier) and o.name == name for o in b)
                b.extend(Barrier(name, parties[name], loc=Loc("k.py", 99)) for _ in range(need - have))
    return launch(topo, bodies, collective_id=collective_id, scratch=scratch, loc=Loc("k.py", 0))
