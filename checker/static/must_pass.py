"""What every run must have done to reach a position: a lower bound on each core's progress.

Read by exit-balance (which exit warnings must be printed, EXIT-1) and by the id checks (the
shortest prefix of a witness).
"""

from __future__ import annotations

import heapq
from typing import Any
from bisect import bisect_left, bisect_right
from collections import defaultdict, deque

from semcheck.checker.static.system import Lowered
from semcheck.model.barrier import instance

def _prefix(items: list[tuple[int, int]]) -> tuple[list[int], list[int]]:
    """(positions, running totals) of (position, amount) pairs sorted by position."""
    pos, acc, t = [], [], 0
    for p, a in items:
        t += a
        pos.append(p)
        acc.append(t)
    return pos, acc


def _upto(table: tuple[list[int], list[int]] | None, q: int) -> int:
    """The total of the entries at positions < q."""
    if table is None:
        return 0
    j = bisect_left(table[0], q)
    return table[1][j - 1] if j else 0


class Feeds:
    """Per counter: its total, its feeds per contributing core in program order, and its waits.

    `own[k][h]`: every contribution core h makes to k (signals, and DMA halves at their start's
    position); `sig[k][h]`: those that happen with their operation (signals; every half under
    eager). `streams[(k, h)]`: the DMAs core h starts into k (their write halves), for the
    knock-on bound: a write half that must have happened forces its read half.
    """

    def __init__(self, low: Lowered) -> None:
        eager = low.mode == "eager"
        self.total: dict = defaultdict(int)
        own: dict = defaultdict(lambda: defaultdict(list))
        sig: dict = defaultdict(lambda: defaultdict(list))
        for x in low.contributions:
            self.total[x.counter] += x.amount
            own[x.counter][x.owner].append((x.pos, x.amount))
            if eager or x.kind == "signal":
                sig[x.counter][x.owner].append((x.pos, x.amount))
        self.own = {k: {h: _prefix(sorted(v)) for h, v in d.items()} for k, d in own.items()}
        self.half_sizes = {(k, h): [a for _, a in v] for k, d in own.items() for h, v in d.items()}
        self.sig = {k: {h: _prefix(sorted(v)) for h, v in d.items()} for k, d in sig.items()}
        self.waits = {k: _prefix(sorted((w.pos, w.value) for w in ws)) for k, ws in low.waits_by_counter.items()}
        self.reads_from: dict = defaultdict(set)  # src counter -> {(dst counter, issuer)}
        streams: dict = defaultdict(list)
        if not eager:
            for d in low.dmas:
                streams[(d.dst_counter, d.core)].append(d)
                if d.src_counter is not None:
                    self.reads_from[d.src_counter].add((d.dst_counter, d.core))
        self.streams = dict(streams)

    def need(self, k, q: int) -> int:
        """What k's core has waited for on k once it has passed its operations before q."""
        return _upto(self.waits.get(k), q)

    def arrived_at_most(self, k, pcs) -> int:
        """Everything that can have arrived at k while each core h is at or before pcs[h]."""
        return sum(_upto(t, pcs[h]) for h, t in self.own.get(k, {}).items())

    def arrived_at_least(self, k, m) -> int:
        """A lower bound on what has arrived at k once each core h has passed its operations before m[h].

        Per contributing core h (disjoint parts): what h's operations before m[h] add with the
        operation itself; at least what the waits on k before m need from h (need - what all
        others can give), rounded up to what h's DMA halves can give (they come whole); and, for
        k's own core, the read halves forced by the write halves its DMAs' targets must have
        received (a write half follows its read half).
        """
        need = self.need(k, int(m[k[1]]))
        total = self.total.get(k, 0)
        sig = self.sig.get(k, {})
        lb = 0
        for h, (pos, acc) in self.own.get(k, {}).items():
            s = _upto(sig.get(h), int(m[h]))
            if h == k[1]:
                s += self._forced_reads(k, m)
            r = need - (total - acc[-1])
            if r > 0 and h not in sig:  # only DMA halves: some of them, whole
                sizes = self.half_sizes[(k, h)]
                r = -(-r // sizes[0]) * sizes[0] if len(set(sizes)) == 1 else max(r, min(sizes))
            lb += max(s, r)
        return max(lb, need)

    def _forced_reads(self, k, m) -> int:
        a = 0
        for k2, h in self.reads_from.get(k, ()):
            dmas = self.streams[(k2, h)]
            feed = self.own[k2][h][1][-1]
            # k2 must hold need(k2); the most everyone else can give is total - feed, and h's
            # contributions other than these write halves count too
            r = self.need(k2, int(m[k2[1]])) - (self.total[k2] - feed) - (feed - sum(x.dst_amount for x in dmas))
            if r <= 0:
                continue
            j, got = 0, 0
            for b in sorted((x.dst_amount for x in dmas), reverse=True):  # the fewest write halves that can give r
                if got >= r:
                    break
                got += b
                j += 1
            mine = [x.src_amount for x in dmas if x.src_counter == k]
            forced = j - (len(dmas) - len(mine))
            if forced > 0:
                a += forced * min(mine)
        return a


def _joined(new, ds, pts_pos, pts_vec):
    """`new` joined with each (h, q)'s vector at q, and h's entry at least q."""
    import numpy as np

    for h, q in ds:
        j = bisect_right(pts_pos[h], q) - 1
        if j >= 0:
            np.maximum(new, pts_vec[h][j], out=new)
        if new[h] < q:
            new[h] = q
    return new


_VC_CELLS = 40_000_000  # lower-bound vectors kept (cells); beyond, "must" is left undecided


def must_have_passed(low: Lowered, targets: dict, feeds: Feeds | None = None) -> dict | None:
    """For each target (core c, position x): m, a vector with m[h] <= h's position in every reachable
    state in which c is at x, m[c] = x; None when not computed (too large, or the program cannot
    complete, which the callers' preconditions exclude).

    One pass over the program in an order that respects the bounds (each wait after the
    contributions it cannot do without, each barrier after its partners reach it), keeping per
    core the vector of positions every run must have passed (vector clocks of the "must happen
    before" relation): a wait of cumulative need N on k needs, from each contributing core h,
    the shortest program-order prefix of h's contributions that gives N - (what all others can
    give); a barrier needs every participant at it. Linear in operations times cores (numpy).
    """
    import numpy as np

    feeds = feeds if feeds is not None else Feeds(low)
    n = low.program.topology.num_cores
    lengths = low.lengths
    deps_at: list[dict] = [dict() for _ in range(n)]
    seen: dict = defaultdict(int)
    for (g, i), w in sorted(low.waits.items()):
        k = w.counter
        seen[k] += w.value
        need, total = seen[k], feeds.total.get(k, 0)
        if need > total:
            deps_at[g][i] = [(g, i + 1)]  # never passes (it waits for itself): g stops here
            continue
        ds = []
        for h, (pos, acc) in feeds.own.get(k, {}).items():
            r = need - (total - acc[-1])
            if r > 0:
                ds.append((h, pos[bisect_left(acc, r)] + 1))
        if ds:
            deps_at[g][i] = ds
    # a barrier's partners once per instance (barrier.instance), shared by its participants: every
    # participant at its own barrier, itself included (its own entry at the barrier is a true bound
    # once it passes). Listing each core's partners was N^2 entries at a barrier of N cores
    members: dict[tuple, list] = {}
    barrier_key: dict[tuple[int, int], tuple] = {}
    for (g, i), b in low.barriers.items():
        key = instance(b.name, b.k, b.participants)
        ds = members.get(key)
        if ds is None:
            ds = []
            for p in sorted(b.participants):
                q = low.barrier_pos.get((p, b.name, b.k))
                if q is None:  # a partner that never gets there: no participant passes
                    ds = None
                    break
                ds.append((p, q))
            members[key] = ds
        if ds is None:
            deps_at[g][i] = [(g, i + 1)]  # g stops here
        elif len(ds) > 1 or ds[0][0] != g:
            deps_at[g][i] = ds
            barrier_key[(g, i)] = key
    joined: dict[tuple, Any] = {}  # instance -> its participants' vectors at it, joined (once)
    cursor: dict[tuple, int] = {}  # instance -> how many of its members are known to be there
    stops = [sorted(d) for d in deps_at]
    if sum(map(len, stops)) * n > _VC_CELLS:
        return None
    done = [0] * n
    cur = [np.zeros(n, dtype=np.int64) for _ in range(n)]
    pts_pos: list[list[int]] = [[] for _ in range(n)]
    pts_vec: list[list] = [[] for _ in range(n)]
    nxt = [0] * n
    parked: list[list] = [[] for _ in range(n)]
    ready = deque(range(n))
    pending: dict = {}  # core -> the furthest target position on it not reached yet
    for c0, x in targets.values():
        pending[c0] = max(x, pending.get(c0, 0))

    def advance(g: int, to: int) -> None:
        done[g] = to
        heap = parked[g]
        while heap and heap[0][0] <= to:
            ready.append(heapq.heappop(heap)[1])
        if pending.get(g, to + 1) <= to:
            del pending[g]

    while ready and pending:  # a vector, once computed, is final: stop when every target has its own
        g = ready.popleft()
        while True:
            if nxt[g] == len(stops[g]):
                if done[g] < lengths[g]:
                    advance(g, lengths[g])
                break
            i = stops[g][nxt[g]]
            if done[g] < i:
                advance(g, i)
            ds = deps_at[g][i]
            key = barrier_key.get((g, i))
            if key is None:
                late = next(((h, q) for h, q in ds if done[h] < q), None)
            elif key in joined:
                late = None
            else:  # a member once there stays there: the scan goes on from where it stopped
                at = cursor.get(key, 0)
                while at < len(ds) and done[ds[at][0]] >= ds[at][1]:
                    at += 1
                cursor[key] = at
                late = ds[at] if at < len(ds) else None
            if late is not None:
                heapq.heappush(parked[late[0]], (late[1], g))
                break
            if key is None:
                new = _joined(cur[g].copy(), ds, pts_pos, pts_vec)
            else:
                if key not in joined:
                    joined[key] = _joined(np.zeros(n, dtype=np.int64), ds, pts_pos, pts_vec)
                new = np.maximum(cur[g], joined[key])
            cur[g] = new
            pts_pos[g].append(i + 1)
            pts_vec[g].append(new)
            nxt[g] += 1
            advance(g, i + 1)
    out = {}
    for d, (c0, x) in targets.items():
        if done[c0] < x:
            return None  # the bounds are not consistent with a completing run: decide nothing from them
        j = bisect_right(pts_pos[c0], x) - 1
        m = pts_vec[c0][j].copy() if j >= 0 else np.zeros(n, dtype=np.int64)
        m[c0] = x
        out[d] = m
    return out
