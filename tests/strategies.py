"""Hypothesis strategies for small, well-formed kernel programs in the model IR.

Programs are small enough (a few cores, a few ops each) for the exhaustive
explorer, and biased towards what makes semantics interesting: remote
signals, DMAs with send and receive semaphores, barriers, run_scoped
allocations and collective ids that collide with internal ids.
"""

from __future__ import annotations

from hypothesis import strategies as st

from semcheck.model import (
    BARRIER,
    AllocSem,
    Barrier,
    DmaStart,
    GetBarrierSem,
    Program,
    Scratch,
    SemRef,
    Signal,
    Topology,
    Wait,
    launch,
)


@st.composite
def programs(draw, max_devices: int = 3, max_ops: int = 4, allow_multicore: bool = True) -> Program:
    devices = draw(st.integers(1, max_devices))
    cores = draw(st.sampled_from([1, 2])) if allow_multicore and devices <= 2 else 1
    topo = Topology(devices, cores)
    collective_id = draw(st.sampled_from([None, 0, 7, 2000, 2001, 2002, 2003]))
    scratch = [Scratch(f"s{i}", draw(st.integers(1, 2))) for i in range(draw(st.integers(1, 2)))]
    bodies = []
    everyone = frozenset(range(topo.num_cores))
    for g in range(topo.num_cores):
        refs = [SemRef(s.label, i) for s in scratch for i in range(s.count)]
        ops = []
        for k in range(draw(st.integers(0, max_ops))):
            choice = draw(st.sampled_from(["signal", "signal", "wait", "wait", "dma", "scoped", "barrier_sem", "barrier"]))
            if choice == "signal":
                ops.append(
                    Signal(
                        draw(st.sampled_from(refs)),
                        draw(st.integers(1, 2)),
                        device=draw(st.none() | st.integers(0, devices - 1)),
                        core=draw(st.none() | st.integers(0, cores - 1)),
                    )
                )
            elif choice == "wait":
                ops.append(Wait(draw(st.sampled_from(refs)), draw(st.integers(1, 3))))
            elif choice == "dma":
                ops.append(
                    DmaStart(
                        draw(st.sampled_from(refs)),
                        draw(st.sampled_from([1, 2])),
                        src_sem=draw(st.none() | st.sampled_from(refs)),
                        device=draw(st.none() | st.integers(0, devices - 1)),
                        core=draw(st.none() | st.integers(0, cores - 1)),
                    )
                )
            elif choice == "scoped":
                label = f"c{g}k{k}"
                n = draw(st.integers(1, 2))
                ops.append(AllocSem(label, n, site=f"site{k}"))
                refs = refs + [SemRef(label, i) for i in range(n)]
            elif choice == "barrier_sem" and collective_id is not None:
                ops.append(GetBarrierSem())
                if SemRef(BARRIER) not in refs:
                    refs = refs + [SemRef(BARRIER)]
            elif choice == "barrier" and topo.num_cores > 1:
                ops.append(Barrier("user", everyone))
        bodies.append(ops)
    # a barrier that some core skips would deadlock trivially; keep counts equal
    need = max(sum(isinstance(o, Barrier) for o in b) for b in bodies)
    for b in bodies:
        b.extend(Barrier("user", everyone) for _ in range(need - sum(isinstance(o, Barrier) for o in b)))
    return launch(topo, bodies, collective_id=collective_id, scratch=scratch)
