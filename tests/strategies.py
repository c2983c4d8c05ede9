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
    AllocBuffer,
    AllocSem,
    Barrier,
    DmaStart,
    FreeBuffer,
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


# --- run_scoped lifetimes (BUF-13, BUF-14) ------------------------------------------------------

SCOPE_OUT, SCOPE_IN = SemRef("out"), SemRef("in")
SCOPE_SIZE = 8  # bytes: the scoped buffer's and every copy's (jax's manager is given buffers of this size)


def _buf(k: int) -> str:
    return f"buf@gen.py:1#0/{k}"


@st.composite
def scope_programs(draw) -> Program:
    """One to three scopes of a run_scoped buffer per device: a local write-back of it waited inside the scope,
    after it or never, or (two devices) a copy into the neighbour's scoped buffer with its receipt waited
    inside or after, and a handshake on the barrier semaphore before the scope, inside it or none."""
    devices = draw(st.integers(1, 2))
    remote = devices == 2 and draw(st.booleans())
    shake = draw(st.sampled_from(["none", "before", "inside"])) if remote else "none"
    steps = draw(st.integers(1, 3 if devices == 1 else 2))
    bodies, words = [], []
    for d in range(devices):
        ops: list = [GetBarrierSem()] if shake != "none" else []
        owed: list = []  # waits left for after the scope
        for k in range(1, steps + 1):
            token = SemRef(BARRIER)
            handshake = [Signal(token, 1, device=1 - d), Wait(token, 1)] if shake != "none" else []
            ops += handshake if shake == "before" else []
            ops.append(AllocBuffer(_buf(k), SCOPE_SIZE, "vmem", "core"))
            ops += handshake if shake == "inside" else []
            if remote:
                ops += [DmaStart(SCOPE_IN, SCOPE_SIZE, src_sem=SCOPE_OUT, device=1 - d, src_buf="hbm0",
                                 dst_buf=_buf(k)), Wait(SCOPE_OUT, SCOPE_SIZE, "dma")]
                where = draw(st.sampled_from(["inside", "after"]))
                wait = Wait(SCOPE_IN, SCOPE_SIZE, "dma")
            else:
                ops.append(DmaStart(SCOPE_OUT, SCOPE_SIZE, src_buf=_buf(k), dst_buf="hbm1"))
                where = draw(st.sampled_from(["inside", "after", "never"]))
                wait = Wait(SCOPE_OUT, SCOPE_SIZE, "dma")
            words.append(f"d{d} scope {k}: {'remote' if remote else 'local'} copy waited {where}")
            ops += [wait] if where == "inside" else []
            ops.append(FreeBuffer(_buf(k)))
            ops += owed
            owed = [wait] if where == "after" else []
        bodies.append(ops + owed)
    name = f"{devices} device(s), handshake {shake}: " + "; ".join(words)
    # the launch's HBM operands hbm0, hbm1, its scratch semaphores, its exit check and clean-up barrier
    return launch(Topology(devices), bodies, collective_id=0 if shake != "none" else None, hbm_buffers=2,
                  scratch=[Scratch("out"), Scratch("in")], name=name)
