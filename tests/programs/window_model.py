"""An abstract model of one kernel invoked K times in a row on a ring, under the hardware semantics.

It backs the claims of specs/semantics/calls.md about repeated invocations on one collective id (PRG-7,
PRG-15, PRG-16): which barrier patterns let a remote write land in a device that is not inside
the same invocation, at which device counts, and how far apart two neighbours' invocations can
drift.  It is independent of semcheck's model (nothing here imports semcheck): an explicit-state
search over every interleaving, small enough to run exhaustively for a few devices.

Each device runs the same op list per invocation. Between invocations a device is *outside*
(it has left invocation k and not yet entered k + 1); entering is a step of its own, so a device
may stay outside arbitrarily long (devices are not synchronised at call boundaries, PRG-1).

Ops (offsets are ring offsets from the executing device):

* ``("sig", o)`` / ``("bwait", n)``: signal / wait on the **barrier semaphore** (one per device,
  persists across invocations, PRG-3);
* ``("sig2", o)`` / ``("bwait2", n)``: signal / wait on a **kernel-local** REGULAR semaphore (the
  tutorial's run_scoped second barrier): a signal into a device outside the invocation violates
  PRG-15;
* ``("start", o)``: a remote copy into device ``d + o``'s kernel-local landing buffer; its read
  half later signals the sender's send semaphore, its write half lands in the target and signals
  the target's receive semaphore (each half a step of its own, read before write, DMA-5); the
  write half landing in a device outside the invocation that started the copy violates PRG-15;
* ``("wsend", n)`` / ``("wrecv", n)``: wait on the kernel-local send / receive semaphore;
* ``("exit",)``: leave the invocation.
"""

from __future__ import annotations

from typing import NamedTuple

Op = tuple


class Result(NamedTuple):
    violation: tuple | None  # (what, sender, target, invocation, device positions) or None
    states: int
    max_neighbour_lag: int  # max over reachable states of |invocation(d) - invocation(d +- 1)|


# The barrier halves: a single barrier with both neighbours (the tutorial's local_barrier with
# double_barrier=False), and the double barrier (a second, kernel-local one after it).
SINGLE_BARRIER: tuple[Op, ...] = (("sig", -1), ("sig", +1), ("bwait", 2))
DOUBLE_BARRIER: tuple[Op, ...] = SINGLE_BARRIER + (("sig2", -1), ("sig2", +1), ("bwait2", 2))
# The bodies: a one-step shift to the right (the small kernel that a collective repeats), and the
# bidirectional exchange of the tutorial's reduce-scatter (data from both neighbours every call).
SHIFT_RIGHT: tuple[Op, ...] = (("start", +1), ("wsend", 1), ("wrecv", 1), ("exit",))
BIDIRECTIONAL: tuple[Op, ...] = (("start", -1), ("start", +1), ("wsend", 2), ("wrecv", 2),
                                 ("exit",))


def remote_start(direction: int, done_call: int, barrier: int = 0) -> tuple[Op, ...]:
    """The async test's remote copy start kernel: signal the device it receives from, wait for
    the one it sends to, start a copy into that device's destination (a carried result, live
    until its receive-done call `done_call`), exit without waiting."""
    return (("sig", -direction, barrier), ("bwait", 1, barrier),
            ("start", direction, done_call), ("exit",))


def done_kernel(sends: int, receives: int) -> tuple[Op, ...]:
    """Send-done / receive-done kernels: wait on the carried semaphores."""
    return ((("wsend", sends),) if sends else ()) + ((("wrecv", receives),) if receives else ()) \
        + (("exit",),)


def ring_kernel(barrier: int) -> tuple[Op, ...]:
    """Signal the left neighbour, wait for the right one, copy to the right (a ring pattern)."""
    return (("sig", -1, barrier), ("bwait", 1, barrier)) + SHIFT_RIGHT


def pair_kernel(barrier: int) -> tuple[Op, ...]:
    """Signal the partner d ^ 1, wait for it, copy to it (a pairwise pattern)."""
    return (("sig", ("xor", 1), barrier), ("bwait", 1, barrier), ("start", ("xor", 1)),
            ("wsend", 1), ("wrecv", 1), ("exit",))


def search(n: int, k: int, ops: tuple[Op, ...], *, stop_at_violation: bool = True) -> Result:
    """Every interleaving of `n` devices running `ops` `k` times (depth-first, states hashed)."""
    return search_program(n, (ops,) * k, stop_at_violation=stop_at_violation)


def _target(d: int, where, n: int) -> int:
    """A ring offset, or ("xor", m): the partner d ^ m (a pairwise pattern)."""
    if isinstance(where, tuple):
        return d ^ where[1]
    return (d + where) % n


def search_program(n: int, program: tuple[tuple[Op, ...], ...], *,
                   stop_at_violation: bool = True) -> Result:
    """Every interleaving of `n` devices running the invocations of `program` in order.

    ``("sig", o, b)`` / ``("bwait", n, b)`` name barrier semaphore ``b`` (a collective id; 0 when
    omitted): two kernels with different ids use different barrier semaphores.
    """
    k = len(program)
    barriers = 1 + max((op[2] for ops in program for op in ops
                        if op[0] in ("sig", "bwait") and len(op) > 2), default=0)
    # state: positions ((invocation, pc), pc -1 = outside before entering), barrier counts,
    # second-barrier counts, receive counts, send counts, in-flight halves (kind, src, dst, inv)
    start = (tuple((0, -1) for _ in range(n)), (0,) * (n * barriers), (0,) * n, (0,) * n, (0,) * n, ())
    seen = {start}
    stack = [start]
    lag = 0
    first_violation = None
    while stack:
        pos, bar, bar2, rcv, snd, flight = stack.pop()
        lag = max(lag, max(abs(pos[d][0] - pos[(d + 1) % n][0]) for d in range(n)))

        def inside(t, inv):
            return pos[t][0] == inv and pos[t][1] >= 0

        def live(t, span):
            first, last = span
            entered = pos[t][0] > first or (pos[t][0] == first and pos[t][1] >= 0)
            return entered and pos[t][0] <= last

        successors = []
        for d in range(n):
            inv, pc = pos[d]
            if inv >= k:
                continue
            p = list(pos)
            if pc == -1:  # enter invocation `inv`
                p[d] = (inv, 0)
                successors.append((tuple(p), bar, bar2, rcv, snd, flight))
                continue
            op = program[inv][pc]
            p[d] = (inv + 1, -1) if op[0] == "exit" else (inv, pc + 1)
            b, b2, r, s, f = list(bar), list(bar2), list(rcv), list(snd), flight
            if op[0] == "sig":
                b[(op[2] if len(op) > 2 else 0) * n + _target(d, op[1], n)] += 1
            elif op[0] == "bwait":
                slot = (op[2] if len(op) > 2 else 0) * n + d
                if b[slot] < op[1]:
                    continue
                b[slot] -= op[1]
            elif op[0] == "sig2":
                t = _target(d, op[1], n)
                if not inside(t, inv) and first_violation is None:
                    first_violation = ("signal", d, t, inv, pos)
                b2[t] += 1
            elif op[0] == "bwait2":
                if b2[d] < op[1]:
                    continue
                b2[d] -= op[1]
            elif op[0] == "start":
                # a third element: the destination is carried, live on the target from its entry
                # into this call to its exit from call op[2] (PRG-6, PRG-15)
                until = op[2] if len(op) > 2 else inv
                f = tuple(sorted(flight + (("read", d, _target(d, op[1], n), (inv, until)),)))
            elif op[0] == "wsend":
                if s[d] < op[1]:
                    continue
                s[d] -= op[1]
            elif op[0] == "wrecv":
                if r[d] < op[1]:
                    continue
                r[d] -= op[1]
            successors.append((tuple(p), tuple(b), tuple(b2), tuple(r), tuple(s), f))
        for i, (half, src, dst, inv) in enumerate(flight):
            rest = flight[:i] + flight[i + 1:]
            r, s = list(rcv), list(snd)
            if half == "read":
                s[src] += 1
                rest = tuple(sorted(rest + (("write", src, dst, inv),)))
            else:
                if not live(dst, inv) and first_violation is None:
                    first_violation = ("copy", src, dst, inv[0], pos)
                r[dst] += 1
            successors.append((pos, bar, bar2, tuple(r), tuple(s), rest))
        if first_violation is not None and stop_at_violation:
            return Result(first_violation, len(seen), lag)
        for nxt in successors:
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return Result(first_violation, len(seen), lag)


if __name__ == "__main__":
    import sys

    top = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    for name, ops in [("single barrier, shift", SINGLE_BARRIER + SHIFT_RIGHT),
                      ("double barrier, shift", DOUBLE_BARRIER + SHIFT_RIGHT),
                      ("single barrier, bidirectional", SINGLE_BARRIER + BIDIRECTIONAL),
                      ("double barrier, bidirectional", DOUBLE_BARRIER + BIDIRECTIONAL)]:
        for devices in range(2, top + 1):
            for calls in (2, 3):
                res = search(devices, calls, ops, stop_at_violation=False)
                print(f"{name:32} N={devices} K={calls} "
                      f"{'violation ' + str(res.violation[:4]) if res.violation else 'safe':28} "
                      f"lag<={res.max_neighbour_lag} states={res.states}", flush=True)
