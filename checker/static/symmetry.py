"""Device-rotation symmetry of a lowered system (spec RUN-6).

An SPMD kernel on a ring runs the same program on every device, each
talking to its neighbours by relative offset. Its lowering is then invariant
under rotating the device index: core g's waits, barriers and the feeds of
its counters are those of core g - s*C (C cores per device) with every core
id shifted by the same amount. The least stuck vector is unique (RUN-3), and
an automorphism maps stuck vectors to stuck vectors, so the least one is
invariant: every core of an orbit stops at the same position. The deadlock
query may therefore ask only for invariant vectors, with one variable
family per orbit instead of per core -- exact both ways, since the least
stuck vector is such a vector (`deadlock.OrderEncoding`).

Nothing is assumed about the kernel: `find_rotation` checks, on exactly the
data the deadlock query reads, that the rotation maps the lowering onto
itself, and returns None otherwise (the query then ranges over every core).
What it returns is RUN-36's `Rotation`, the object every other use of the symmetry reads, found here
from what the query reads rather than from the operations.
"""

from __future__ import annotations

from collections import Counter as Tally
from operator import itemgetter

from semcheck.checker.static.system import Lowered
from semcheck.model.symmetry import Rotation


def find_rotation(low: Lowered) -> Rotation | None:
    """The smallest device rotation that is an automorphism of `low`'s stuck-vector data, or None.

    Only the data `deadlock.Conditions` reads is compared: lengths and failing
    positions, each counter's waits (position, value, kind), each counter's
    feed (owner, position, amount, kind), and the barriers (k, and names
    mapped consistently onto names whose participants are the rotated ones).
    """
    topo = low.program.topology
    n, devices = topo.num_cores, topo.num_devices
    if devices < 2:
        return None
    # cheap necessary conditions first, per core: length, failing position, numbers of waits and barriers
    waits_per = Tally(map(_CORE, low.waits))  # (core, pos) keys, read in C
    barriers_per = Tally(map(_CORE, low.barriers))
    shape = [(low.lengths[c], low.held_at(c), waits_per[c], barriers_per[c]) for c in range(n)]
    for s in range(1, devices):
        if devices % s:
            continue
        rot = Rotation(topo, s)  # RUN-36: the one rotation object; its orbits are the cores `c + j s C`
        if all(shape[c] == shape[rot.image(c)] for c in range(n)) and _automorphism(low, rot):
            return rot
    return None


# What the comparisons read, fetched field by field in C (the records are NamedTuples): a
# wait's (pos, value, kind) and a feed's (pos, amount, kind) and owner.
_WAIT = itemgetter(1, 3, 4)
_FEED = itemgetter(1, 2, 4)
_OWNER = itemgetter(0)
_CORE = itemgetter(0)


def _automorphism(low: Lowered, rot: Rotation) -> bool:
    n, shift = rot.num_cores, rot.shift
    image = rot.image
    # each counter's compared fields read once, as the source of one comparison and the image of another
    waits = {k: list(map(_WAIT, ws)) for k, ws in low.waits_by_counter.items()}
    for (key, t), ws in waits.items():
        if ws != waits.get((key, image(t))):
            return False
    feeds = {k: (list(map(_FEED, xs)), list(map(_OWNER, xs))) for k, xs in low.by_counter.items()}
    for (key, t), (xs, owners) in feeds.items():
        other = feeds.get((key, image(t)))
        if other is None or len(other[0]) != len(xs):
            return False
        ys, their_owners = other
        # xs is in (owner, position) order; shifting owners by `shift` wraps the owners
        # >= n - shift to the front, so the image in that order is xs rotated at `split`
        # (whatever the order, the comparison below is with a permutation of xs: a match is a proof)
        split = next((j for j, o in enumerate(owners) if o >= n - shift), len(xs))
        if xs[split:] + xs[:split] != ys:
            return False
        if [(o + shift) % n for o in owners[split:] + owners[:split]] != their_owners:
            return False
    # barrier names may differ between devices (a device's fork/join of its cores): the rotation
    # must map each name to one name whose participants are the rotated participants
    names: dict[str, str] = {}
    for (c, i), b in low.barriers.items():
        o = low.barriers.get((image(c), i))
        if o is None or o.k != b.k:
            return False
        if b.name not in names:
            names[b.name] = o.name
            if frozenset(image(p) for p in b.participants) != o.participants:
                return False
        elif names[b.name] != o.name:
            return False
    return True


__all__ = ["find_rotation"]
