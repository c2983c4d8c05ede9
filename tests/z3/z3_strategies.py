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


@st.composite
def symmetric_programs(draw, max_cores: int = 4, max_ops: int = 4, perturb: bool = True,
                       foldable: bool = False, counts: tuple[int, ...] = ()) -> tuple[Program, bool]:
    """A program whose devices run one template, targets relative to the device (a ring), and
    whether one device was then knocked out of step (an op dropped or a count changed).

    Every device d runs its local core l's template with remote targets `(d + offset) % devices`;
    barriers span all cores or one local core index on every device, so rotating the device index
    maps the program onto itself unless it was perturbed. With `foldable`, the device count has
    small divisors and the offsets are near neighbours (or half-way round), so that most
    unperturbed programs have a fold (RUN-7). `counts`: the device counts to draw from (any offsets), as
    for DR-41's class runs, where offsets that coincide modulo the fold are the point.
    """
    per = draw(st.sampled_from([1, 1, 2]))
    if foldable or counts:
        devices = draw(st.sampled_from([d for d in counts or (4, 6, 8, 9, 12, 16) if d * per <= max_cores]))
    else:
        devices = draw(st.integers(2, max_cores // per))
    topo = Topology(devices, per)
    n = topo.num_cores
    collective_id = draw(st.sampled_from([None, 0, 2000, 2001]))
    scratch = [Scratch(f"s{i}", draw(st.integers(1, 2)), loc=Loc("k.py", 1 + i)) for i in range(draw(st.integers(1, 2)))]
    parties = {"all": frozenset(range(n)), **{f"lane{l}": frozenset(d * per + l for d in range(devices))
                                             for l in range(per)}}
    if foldable:
        offset = st.none() | st.sampled_from(sorted({0, 1, devices - 1, 2, devices // 2}))
    else:
        offset = st.none() | st.integers(0, devices - 1)
    core = st.none() | st.integers(0, per - 1)
    templates = []
    for lane in range(per):
        refs = [SemRef(s.label, i) for s in scratch for i in range(s.count)]
        steps = []
        for k in range(draw(st.integers(1, max_ops))):
            line = 10 + 10 * lane + k
            choice = draw(st.sampled_from(["signal", "signal", "wait", "wait", "dma", "scoped", "barrier_sem",
                                           "barrier"]))
            if choice == "signal":
                steps.append(("signal", draw(st.sampled_from(refs)), draw(st.integers(1, 2)), draw(offset),
                              draw(core), line))
            elif choice == "wait":
                steps.append(("wait", draw(st.sampled_from(refs)), draw(st.integers(1, 3)),
                              draw(st.sampled_from(["semaphore", "dma"])), line))
            elif choice == "dma":
                steps.append(("dma", draw(st.sampled_from(refs)), draw(st.sampled_from([1, 2])),
                              draw(st.none() | st.sampled_from(refs)), draw(offset), draw(core), line))
            elif choice == "scoped":
                label, cnt = f"l{lane}k{k}", draw(st.integers(1, 2))
                steps.append(("scoped", label, cnt, line))
                refs = refs + [SemRef(label, i) for i in range(cnt)]
            elif choice == "barrier_sem":
                steps.append(("barrier_sem", line))
                refs = refs + [SemRef(BARRIER)]
            else:
                steps.append(("barrier", draw(st.sampled_from(["all", f"lane{lane}"])), line))
        templates.append(steps)

    def instantiate(step, d: int):
        kind, *args = step
        loc = Loc("k.py", args[-1])
        if kind == "signal":
            ref, inc, off, c, _ = args
            return Signal(ref, inc, device=None if off is None else (d + off) % devices, core=c, loc=loc)
        if kind == "wait":
            ref, value, wkind, _ = args
            return Wait(ref, value, kind=wkind, loc=loc)
        if kind == "dma":
            dst, nbytes, src, off, c, _ = args
            return DmaStart(dst, nbytes, src_sem=src, device=None if off is None else (d + off) % devices, core=c,
                            loc=loc)
        if kind == "scoped":
            label, cnt, _ = args
            return AllocSem(label, cnt, site=label, loc=loc)
        if kind == "barrier_sem":
            return GetBarrierSem(loc=loc)
        return Barrier(args[0], parties[args[0]], loc=loc)

    bodies = [[instantiate(s, g // per) for s in templates[g % per]] for g in range(n)]
    perturbed = perturb and draw(st.integers(0, 2)) == 0
    if perturbed:
        g = draw(st.integers(0, n - 1))
        i = draw(st.integers(0, len(bodies[g]) - 1))
        op = bodies[g][i]
        if isinstance(op, Wait):
            value = op.value + 1 if op.value == 1 or draw(st.booleans()) else op.value - 1
            bodies[g][i] = Wait(op.sem, value, kind=op.kind, loc=op.loc)
        elif isinstance(op, Signal):
            bodies[g][i] = Signal(op.sem, op.inc + 1, device=op.device, core=op.core, loc=op.loc)
        elif not isinstance(op, (AllocSem, Barrier, GetBarrierSem)):
            del bodies[g][i]
        else:
            perturbed = False
    return launch(topo, bodies, collective_id=collective_id, scratch=scratch, loc=Loc("k.py", 0)), perturbed
