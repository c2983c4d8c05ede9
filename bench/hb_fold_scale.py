"""The happens-before pass on the ring all-reduce's fold at any device count (DR-8, DR-42), without
tracing it (bench/README.md "The race pass at scale").

    python bench/hb_fold_scale.py --fold 256 8960    # CPU seconds and peak memory per mode, one JSON line each
    python bench/hb_fold_scale.py --class 256 8960   # the same on DR-41's run of one device
    python bench/hb_fold_scale.py --check 4 8 16     # the generated program is the traced one, op for op

`examples/ring_allreduce.py` is traced once at 4 devices; its device 0 gives the templates of the
prologue, of one reduce-scatter step, of one all-gather step and of the epilogue, and the program at
`N` devices is those templates with the devices, chunks and sizes moved as the kernel moves them.
Only the cores the pass reads are built (the fold's four devices and device `N - 1`, whose copies
land on device 0's buffers); every other core is left empty. `--check` compares the generated
program, every core, with the traced one.
"""

from __future__ import annotations

import dataclasses
import json
import resource
import sys
import time

from semcheck.model.ops import Access, AllocBuffer, Barrier, DmaStart, ExitCheck, Program, Region, Signal, Topology

KERNEL = "examples/ring_allreduce.py"
CHUNK = 8  # rows per device's chunk


def _templates(devices: int = 4) -> tuple[list, list, list, list]:
    from semcheck.checker.frontend import load, provision_devices

    provision_devices(devices)
    import jax

    jax.devices()  # initialised with `devices`, so that loads at fewer devices follow
    ops = load(KERNEL, devices=4)[0].program.cores[0]
    n0 = 4
    step_rs, step_ag = 9, 6
    rs0 = 11
    ag0 = rs0 + step_rs * (n0 - 1)
    end = ag0 + step_ag * (n0 - 1)
    return list(ops[:rs0]), list(ops[rs0:rs0 + step_rs]), list(ops[ag0:ag0 + step_ag]), list(ops[end:])


def _rows(r: Region, lo: int, hi: int) -> Region:
    return dataclasses.replace(r, box=((lo, hi), *r.box[1:]))


def ring_core(templates, n: int, d: int) -> tuple:
    """Device `d`'s operations in the ring all-reduce at `n` devices."""
    pro, rs, ag, epi = templates
    whole = (0, CHUNK * n)

    def chunk(i: int) -> tuple[int, int]:
        i %= n
        return (CHUNK * i, CHUNK * i + CHUNK)

    def moved(op, s: int = 0, phase: str = ""):
        t = type(op)
        if t is AllocBuffer and op.label in ("x_ref", "acc_ref"):
            return dataclasses.replace(op, nbytes=op.nbytes // 4 * n)
        if t is Access:
            if op.region.box[0] == (0, 32):
                return dataclasses.replace(op, region=_rows(op.region, *whole))
            if op.buf == "acc_ref":  # the chunk received at reduce-scatter step s
                return dataclasses.replace(op, region=_rows(op.region, *chunk(d - s - 1)))
            return op
        if t is Signal:
            return dataclasses.replace(op, device=(d - 1) % n)
        if t is DmaStart:
            c = chunk(d - s) if phase == "rs" else chunk(d + 1 - s)
            dst = op.dst_region if phase == "rs" else _rows(op.dst_region, *c)
            return dataclasses.replace(op, device=(d + 1) % n, src_region=_rows(op.src_region, *c), dst_region=dst)
        if t is ExitCheck:
            return dataclasses.replace(op, device=d)
        if t is Barrier:
            return dataclasses.replace(op, participants=frozenset(range(n)))
        return op

    ops = [moved(op) for op in pro]
    for s in range(n - 1):
        ops += [moved(op, s, "rs") for op in rs]
    for s in range(n - 1):
        ops += [moved(op, s, "ag") for op in ag]
    last = 2 * (n - 1) - 1  # the write-back names the last grid step
    for op in epi:
        op = moved(op)
        if getattr(op.loc, "step", None) is not None:
            loc = dataclasses.replace(op.loc, step=last, what=op.loc.what.replace("(5,)", f"({last},)"))
            op = dataclasses.replace(op, loc=loc)
        ops.append(op)
    return tuple(ops)


def ring(templates, n: int, only: set[int] | None = None) -> Program:
    """The ring all-reduce at `n` devices; with `only`, the other cores are left empty."""
    cores = tuple(ring_core(templates, n, d) if only is None or d in only else () for d in range(n))
    return Program(Topology(n), cores, collective_id=0)


def check(sizes: list[int]) -> None:
    from semcheck.checker.frontend import load, provision_devices

    templates = _templates(max(sizes))
    for n in sizes:
        traced = load(KERNEL, devices=n)[0].program
        made = ring(templates, n)
        assert made.cores == traced.cores, n
        assert made.topology == traced.topology and made.collective_id == traced.collective_id, n
        print(json.dumps({"devices": n, "ops": traced.num_ops, "generated": "equal"}))


def measure(n: int, templates, run: str) -> dict:
    from semcheck.model.access import accesses
    from semcheck.model.quotient import class_quotient
    from semcheck.model import happens_before

    t = time.process_time()
    program = ring(templates, n, {0, 1, 2, 3, n - 1})
    fold = class_quotient(program, 4)  # DR-8's fold (RUN-7: four devices for a ring of 2^j)
    one = class_quotient(program, 1) if run == "class" else None  # DR-41's run of one device
    events = accesses(program, "hardware", near=1)[0]
    out: dict = {"devices": n, "run": run, "fold_ops": (one or fold).program.num_ops, "events": len(events),
                 "build_s": round(time.process_time() - t, 2)}
    for modes in (("eager", "on_wait"), ("hardware",)):
        t = time.process_time()
        if one is None:  # (as a checkout before DR-41 is called too)
            got = happens_before.order_modes(program, dict.fromkeys(modes, events), fold)
        else:
            got = happens_before.order_modes(program, dict.fromkeys(modes, events), one, proof_only=True,
                                             otherwise=fold)
        out["+".join(modes) + "_s"] = round(time.process_time() - t, 2)
        for m in modes:
            out[m] = [got[m].certified, len(got[m].candidates)]
    out["peak_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    return out


if __name__ == "__main__":
    args = sys.argv[1:]
    if args and args[0] == "--check":
        check([int(a) for a in args[1:]])
    else:
        run = "fold"
        if args and args[0] in ("--fold", "--class"):
            run = args.pop(0)[2:]
        templates = _templates()
        for a in args:
            print(json.dumps(measure(int(a), templates, run)), flush=True)
