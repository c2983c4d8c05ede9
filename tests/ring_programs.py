"""Ring all-reduce programs built directly in the IR, and the scaling benchmark of the encodings.

`ring_allreduce(n)` is the program the interpreter runs for
`examples/ring_allreduce.py` on n devices: 2(n-1) grid steps, each a credit
handshake on the barrier semaphore (signal the left neighbour, wait for one
credit) followed by a remote copy to the right neighbour and its two DMA
waits. `bug` plants one defect:

* "deadlock":   device 0 skips its credit signal in the last step;
* "bytes":      device 0's last receive wait expects half the bytes;
* "unbalanced": device 0 signals one credit too many at the end;
* "collide":    collective_id 2001, an id the scratch semaphores also get.

Run `python -m semcheck.checker.z3.bench [max_devices]` for the table of
encoding size and time against the device count.
"""

from __future__ import annotations

import sys
import time

from semcheck.model.launch import Scratch, launch
from semcheck.model.ops import (
    BARRIER,
    DmaStart,
    GetBarrierSem,
    Loc,
    Program,
    SemRef,
    Signal,
    Topology,
    Wait,
)

KERNEL = "ring_allreduce.py"


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
            ops.append(DmaStart(SemRef("recv"), chunk_bytes, src_sem=SemRef("send"), device=right, loc=Loc(KERNEL, 75)))
            ops.append(Wait(SemRef("send"), chunk_bytes, kind="dma", loc=Loc(KERNEL, 76)))
            want = chunk_bytes // 2 if (bug == "bytes" and d == 0 and last) else chunk_bytes
            ops.append(Wait(SemRef("recv"), want, kind="dma", loc=Loc(KERNEL, 77)))
            if bug == "bytes" and d == 0 and last:
                ops.append(Wait(SemRef("recv"), chunk_bytes - want, kind="dma", loc=Loc(KERNEL, 77)))
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


LIMITS = {"order": 10**9, "compact": 128, "plain": 64, "timestamped": 16}


def measure(n: int, *, bug: str | None = None, mode: str = "hardware", limits: dict = LIMITS,
            timeout_ms: int = 120_000) -> dict:
    """One row of the table: size and time of each encoding on `ring_allreduce(n, bug=bug)`.

    An encoding is skipped above its size limit (where it no longer answers
    within the timeout).
    """
    from semcheck.checker.z3.deadlock import deadlock_free
    from semcheck.checker.z3.timestamped import deadlock_free_timestamped

    t0 = time.perf_counter()
    p = ring_allreduce(n, bug=bug)
    row: dict = {"devices": n, "ops": p.num_ops, "build_s": round(time.perf_counter() - t0, 3)}
    for enc in ("order", "compact", "plain", "timestamped"):
        if n > limits.get(enc, 0):
            continue
        t1 = time.perf_counter()
        if enc == "timestamped":
            v = deadlock_free_timestamped(p, mode, timeout_ms=timeout_ms)
        else:
            v = deadlock_free(p, mode, encoding=enc, timeout_ms=timeout_ms)
        st = v.stats
        size = st.get("clauses") if enc == "order" else (st.get("ite_terms") or 0) + (st.get("threshold_atoms") or 0)
        row[enc] = {
            "verdict": v.verdict if v.verdict != "unknown" else "timeout" if "gave up" in v.reason else "unknown",
            "size": size,
            "total_s": round(time.perf_counter() - t1, 3),
            **{k: st.get(k) for k in ("lower_s", "s_prime_s", "encode_s", "solve_s")},
        }
    return row


def table(sizes=(2, 4, 8, 16, 32, 64, 128, 256), *, bug: str | None = None, mode: str = "hardware",
          limits: dict = LIMITS, out=sys.stdout) -> list[dict]:
    """Print (and return) the scaling table. size = clauses (order) or If-terms + comparisons (others)."""
    rows = []
    print(f"ring all-reduce, mode={mode}, bug={bug}; each cell: verdict size solve_s/total_s", file=out)
    encs = ("order", "compact", "plain", "timestamped")
    print(f"{'dev':>4} {'ops':>7} | " + " | ".join(f"{e:^30}" for e in encs), file=out)
    for n in sizes:
        r = measure(n, bug=bug, mode=mode, limits=limits)
        rows.append(r)
        cells = []
        for e in encs:
            c = r.get(e)
            cells.append(f"{'-':^30}" if c is None else
                         f"{c['verdict']:>8} {c['size']:>8} {c['solve_s'] if c['solve_s'] is not None else '-':>6}/{c['total_s']:<6}")
        print(f"{n:>4} {r['ops']:>7} | " + " | ".join(cells), file=out, flush=True)
    return rows


if __name__ == "__main__":
    top = int(sys.argv[1]) if len(sys.argv) > 1 else 256
    sizes = [s for s in (2, 4, 8, 16, 32, 64, 128, 256, 512) if s <= top]
    table(sizes)
