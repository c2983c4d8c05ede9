"""Ring all-reduce programs built directly in the IR: fixtures for the Z3 and worker tests.

`ring_allreduce(n)` is the program the interpreter runs for
`examples/ring_allreduce.py` on n devices: 2(n-1) grid steps, each a credit
handshake on the barrier semaphore (signal the left neighbour, wait for one
credit) followed by a remote copy to the right neighbour and its two DMA
waits. `bug` plants one defect:

* "deadlock":   device 0 skips its credit signal in the last step;
* "bytes":      device 0's last receive wait expects half the bytes;
* "unbalanced": device 0 signals one credit too many at the end;
* "collide":    collective_id 2001, an id the scratch semaphores also get.

`bench/encodings.py` measures the deadlock encodings on these programs.
"""

from __future__ import annotations

from semcheck.model.launch import Scratch, launch
from semcheck.model.ops import (
    BARRIER,
    Access,
    DmaStart,
    GetBarrierSem,
    Loc,
    Program,
    Region,
    SemRef,
    Signal,
    Topology,
    Wait,
)

KERNEL = "ring_allreduce.py"
WHOLE = Region(((0, 1024),))


def ring_allreduce(n: int, *, bug: str | None = None, chunk_bytes: int = 4096) -> Program:
    topo = Topology(n)
    steps = 2 * (n - 1)
    bodies = []
    for d in range(n):
        left, right = (d - 1) % n, (d + 1) % n
        ops = []
        for s in range(steps):
            last = s == steps - 1
            ops.append(GetBarrierSem(loc=Loc(KERNEL, 60)))
            if not (bug == "deadlock" and d == 0 and last):
                ops.append(Signal(SemRef(BARRIER), 1, device=left, loc=Loc(KERNEL, 61)))
            ops.append(Wait(SemRef(BARRIER), 1, loc=Loc(KERNEL, 62)))
            ops.append(DmaStart(SemRef("recv"), chunk_bytes, src_sem=SemRef("send"), device=right, loc=Loc(KERNEL, 75),
                                src_buf="hbm0", src_region=WHOLE, dst_buf="landing", dst_region=WHOLE))
            ops.append(Wait(SemRef("send"), chunk_bytes, kind="dma", loc=Loc(KERNEL, 76)))
            want = chunk_bytes // 2 if (bug == "bytes" and d == 0 and last) else chunk_bytes
            ops.append(Wait(SemRef("recv"), want, kind="dma", loc=Loc(KERNEL, 77)))
            if bug == "bytes" and d == 0 and last:
                ops.append(Wait(SemRef("recv"), chunk_bytes - want, kind="dma", loc=Loc(KERNEL, 77)))
            ops.append(Access("landing", WHOLE, loc=Loc(KERNEL, 78)))  # the received chunk is read
        if bug == "unbalanced" and d == 0:
            ops.append(Signal(SemRef(BARRIER), 1, device=right, loc=Loc(KERNEL, 80)))
        bodies.append(ops)
    scratch = [
        Scratch("landing", kind="buffer", nbytes=chunk_bytes, loc=Loc(KERNEL, 112)),
        Scratch("send", loc=Loc(KERNEL, 113)),
        Scratch("recv", loc=Loc(KERNEL, 114)),
    ]
    cid = 2001 if bug == "collide" else 0
    return launch(topo, bodies, collective_id=cid, scratch=scratch, hbm_buffers=2,
                  name=f"ring_allreduce_{n}" + (f"_{bug}" if bug else ""), loc=Loc(KERNEL, 100))
