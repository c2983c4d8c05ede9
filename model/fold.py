"""Folding (spec RUN-7): an SPMD program whose devices repeat is decided on a few of them.

When rotating the device index by `period` maps a program onto itself (every
device runs its predecessor's operations with every device it names shifted
by `period`), the devices `0 .. M-1`, for a suitable multiple `M` of the
period, with every named device taken modulo `M`, form the *fold*: a program
of `M` devices whose runs are the full program's runs in which each class
of devices `d, d+M, d+2M, ...` moves in step. Every step of the fold is a
round of steps of the full program (one per device of the class), so the
fold's maximal run lifts to a maximal run of the full program and, by RUN-3,
to *the* final state of every run of its lowered system. The properties'
"proved" answers depend only on that final state and on each core's
operations (spec RUN-7 gives the argument per property), so a proof on the
fold is a proof on the program. Anything else the fold says (a violation's
witness, an unknown) is not carried over: the checker then decides the full
program.

The fold exists only when it is faithful:

* every device a signal or DMA names is in range and every named local core
  is in range (so that no out-of-range target is hidden by the modulus);
* the device offsets the program uses (target minus issuer, modulo the
  device count; zero for "this device") stay distinct modulo `M`, so a remote
  target never folds onto its issuer and two neighbours never fold onto one;
* every barrier the fold keeps either has its name kept by the rotation (its
  participants are rotation-invariant: the device barriers) or has all its
  participants among the fold's cores (a device's fork and join).

Nothing is taken from the kernel's intent: the rotation is checked operation
by operation, and a single device out of step leaves the program unfolded.
"""

from __future__ import annotations

import dataclasses
import itertools
import operator
from collections.abc import Iterable

from semcheck.model.ops import Access, Barrier, DmaStart, ExitCheck, Op, Program, Region, Signal, Topology
from semcheck.model.symmetric import replaced

_NAMED_DEVICE = (Signal, DmaStart, ExitCheck, Barrier)
"""Operations that name devices or cores; everything else must repeat unchanged."""


@dataclasses.dataclass(frozen=True)
class Fold:
    """The fold of a program (RUN-7): `program` has `devices` of the original's `of_devices`."""

    program: Program
    devices: int
    of_devices: int
    period: int
    faithful: bool = True  # RUN-7 (b) holds; False: DR-41's class fold, which proves less (RUN-31)

    def describe(self) -> str:
        """Where a proof on the fold was made, for verdict reasons."""
        every = "every device" if self.period == 1 else f"every {self.period} devices"
        if not self.faithful:
            return (f"proved on the run of {self.devices} of the {self.of_devices} devices, each class of devices "
                    f"moving in step (the program repeats {every}; RUN-31)")
        return f"proved on a fold onto {self.devices} of the {self.of_devices} devices (the program repeats {every}; RUN-7)"


def divisors(n: int) -> list[int]:
    """The divisors of n, ascending."""
    return [d for d in range(1, n + 1) if n % d == 0]


def rotation_period(program: Program) -> int:
    """The smallest `k` such that rotating the devices by `k` maps the program onto itself (RUN-6, RUN-7).

    The device count when no smaller rotation does.
    """
    n = program.topology.num_devices
    return next((k for k in divisors(n)[:-1] if _rotation(program, k) is not None), n)


Shifts = dict[str, tuple[int, int]]  # buffer label -> (rows the rotation moves its regions by, modulus)


def race_period(program: Program) -> tuple[int, Shifts]:
    """DR-5: the smallest `k` such that rotating the devices by `k`, and each buffer's first dimension
    cyclically by a fixed amount per label, maps the program onto itself, and those amounts.

    A ring whose device `d` works on chunk `d - s` at step `s` repeats only so: its device `d + 1`
    runs the same operations on the next chunk. The cyclic shift (modulo the largest extent any
    region of the label reaches) is a bijection of the elements regions name, so it keeps which
    regions overlap; a region it would wrap round is not a box, and then the rotation fails.
    """
    first = _first_rotation(program, True)
    return (program.topology.num_devices, {}) if first is None else (first[0], first[1] or {})


def _labelled_regions(op: Op) -> list[tuple[str, Region]]:
    t = type(op)
    if t is Access:
        return [(op.buf, op.region)]
    if t is DmaStart and op.dst_buf is not None:
        return [(op.src_buf, op.src_region), (op.dst_buf, op.dst_region)]
    return []


def _infer_shifts(program: Program, period: int, regions: dict[int, Region | None],
                  named: Iterable[tuple[str | None, int, int]]) -> Shifts:
    """The per-label shifts that would map device 0's regions onto device `period`'s, read off the first
    region of each label that differs; the modulus of a label is the largest extent its regions reach.

    `regions` holds every region object the rotation check met (by id) and `named` the (label, region,
    image) triples it met: once the rest of the rotation holds, every access and every copy of the
    program is among them (they sit where their chain's first core has them). `_rotation_shifting` then checks
    every triple against these shifts."""
    extent: dict[str, int] = {}
    for label, i, j in named:
        for r in (regions[i], regions[j]):
            if label is not None and r is not None and r.box:
                extent[label] = max(extent.get(label, 0), r.box[0][1])
    per = program.topology.cores_per_device
    shifts: Shifts = {label: (0, m) for label, m in extent.items()}
    seen: set[str] = set()
    for lane in range(per):
        a, b = program.cores[lane], program.cores[period * per + lane]
        for x, y in zip(a, b):
            if x is y:
                continue
            for (label, r), (_, q) in zip(_labelled_regions(x), _labelled_regions(y)):
                if label in seen or r is None or q is None or not r.box or not q.box or r == q:
                    continue
                seen.add(label)
                m = extent[label]
                shifts[label] = ((q.box[0][0] - r.box[0][0]) % m, m)
    return shifts


def _shifted(r: Region | None, by: tuple[int, int] | None, image: Region | None) -> bool:
    """Whether `image` is `r` with its first dimension shifted cyclically by `by` (DR-5)."""
    if r is None or image is None or by is None or not r.box or by[0] == 0:
        return r == image
    if r.exact != image.exact or r.why != image.why or r.box[1:] != image.box[1:]:
        return False
    d, m = by
    lo, hi = r.box[0]
    if lo == 0 and hi >= m:  # the whole extent maps onto itself (boxes inside it would move: no rotation)
        return image.box[0] == r.box[0] and not r.parts and not image.parts
    lo2 = (lo + d) % m
    moved = tuple(((p[0][0] + lo2 - lo, p[0][1] + lo2 - lo),) + p[1:] for p in r.parts)
    # a wrapped image is not a box
    return lo2 + (hi - lo) <= m and image.box[0] == (lo2, lo2 + hi - lo) and image.parts == moved


def find_fold(program: Program, *, min_devices: int = 2, shifted: bool = False, within: int | None = None
              ) -> Fold | None:
    """RUN-7: the smallest faithful fold of `program`, or None when it has none smaller than itself.

    With `shifted`, the rotation may also move each buffer label's regions (DR-5): the fold then
    keeps every access, and its run is a run of the whole program (DR-8), not only of its skeleton.
    `within`: a period the program is known to repeat with (a `Symmetric`'s, RUN-20): only its
    divisors are tried, each on the cores of one such period.
    """
    if program.topology.num_devices < 2 * min_devices:
        return None
    first = _first_rotation(program, shifted, within)
    return None if first is None else _fold_at(program, first[0], first[2], min_devices)


def race_symmetry(program: Program, *, min_devices: int = 2, within: int | None = None) -> tuple[int, Fold | None]:
    """DR-5 and DR-8 from one rotation check: `race_period`'s period, and `find_fold(shifted=True)`
    (`within`: as `find_fold`'s)."""
    n = program.topology.num_devices
    first = _first_rotation(program, True, within)
    if first is None:
        return n, None
    fold = _fold_at(program, first[0], first[2], min_devices) if n >= 2 * min_devices else None
    return first[0], fold


def _first_rotation(program: Program, shifted: bool, within: int | None = None
                    ) -> tuple[int, Shifts | None, dict[str, str]] | None:
    """The smallest period whose rotation maps `program` onto itself (with `shifted`, moving each
    buffer's regions as `_infer_shifts` reads them off), its shifts and its barrier-name map.

    `within`: a period `k` the program repeats with. Its rotations form a group: the smallest period
    divides `k`, and a rotation by a divisor `p` of `k` that maps the cores of devices `0 .. k-1` onto
    their images maps every core so (rotations commute: RUN-20), so only those cores are compared."""
    n = program.topology.num_devices
    candidates = divisors(n)[:-1] if within is None else [p for p in divisors(within) if p < n]
    upto = None if within is None else within * program.topology.cores_per_device
    for period in candidates:
        if period == within and _certified(program, shifted):
            found = _certified_rotation(program, infer=shifted)
        else:
            found = _rotation_shifting(program, period, infer=shifted, upto=upto)
        if found is not None:
            names, shifts = found
            return period, shifts, names
    return None


_REGIONS = {Access: ((operator.attrgetter("buf"), operator.attrgetter("region")),),
            DmaStart: ((operator.attrgetter("src_buf"), operator.attrgetter("src_region")),
                       (operator.attrgetter("dst_buf"), operator.attrgetter("dst_region")))}
"""The (label, region) pairs of an operation that the rotation check compares with shifts (DR-5)."""


def _certified(program: Program, shifted: bool) -> bool:
    """RUN-23: whether `program` is a `Symmetric` whose own rotation `_certified_rotation` may read off: its
    rotation moves no region that the check without `shifted` would compare as a kept field."""
    from semcheck.model.symmetric import Symmetric

    return isinstance(program, Symmetric) and (shifted or not any(d for d, _ in program.shifts.values()))


def _certified_rotation(sym, *, infer: bool) -> tuple[dict[str, str], Shifts | None] | None:
    """RUN-23: `_rotation_shifting(sym, sym.period, infer=infer, upto=...)` of a `Symmetric`, without
    comparing its cores operation by operation.

    That check compares each representative with its predecessor one period back, which is the
    representative rotated by `N/k - 1` periods; the rotation changes only devices, regions and
    barriers (RUN-20), so every kept field, type and length agrees by construction, and what the
    check can still refuse is read off the representatives: a named device out of range (rotated
    twice, it comes back reduced modulo N), a barrier participant out of range, two barrier names
    that the rotation does not map one to one, and, with `infer`, DR-5's shifts as `_infer_shifts`
    reads them off, checked on every distinct (label, region, image) triple."""
    topo = sym.topology
    n, num = topo.num_devices, topo.num_cores
    back = n // sym.period - 1
    names: dict[str, str] = {}
    preimage: dict[str, str] = {}
    met: set[tuple[str | None, int, int]] = set()
    objects: dict[int, Region | None] = {}
    seen: set[tuple[str | None, int, bool]] = set()
    kinds = _NAMED_DEVICE + (Access,) if infer else _NAMED_DEVICE  # what the comparison reads column by column
    for ops in sym.representatives:
        for t in set(map(type, ops)).intersection(kinds):
            for y in (op for op in ops if type(op) is t):
                if t is Barrier:
                    if min(y.participants, default=0) < 0 or max(y.participants, default=0) >= num:
                        return None
                    x = sym.rotated(y, back)
                    if names.setdefault(x.name, y.name) != y.name or preimage.setdefault(y.name, x.name) != x.name:
                        return None
                    continue
                if t is not Access and y.device is not None and not 0 <= y.device < n:
                    return None
                if not infer or t not in _REGIONS:
                    continue
                moves = t is Access or y.dst_buf is not None  # what `Symmetric` shifts (RUN-20)
                # the check reads both regions of a copy, with its labels, whatever it moves
                for label, r in ((lg(y), rg(y)) for lg, rg in _REGIONS[t]):
                    key = (label, id(r), moves)
                    if key in seen:
                        continue
                    seen.add(key)
                    image = sym.rotated_region(r, label, back) if moves else r
                    objects[id(r)], objects[id(image)] = r, image
                    met.add((label, id(image), id(r)))
    if not infer:
        return names, None
    shifts = _infer_shifts(sym, sym.period, objects, met)
    if not all(_shifted(objects[i], shifts.get(label) if label is not None else None, objects[j])
               for label, i, j in met):
        return None
    return names, shifts


def _fold_at(program: Program, period: int, names: dict[str, str], min_devices: int) -> Fold | None:
    """The smallest faithful fold under the rotation by `period`: a rotation by `period` implies one
    by each of its multiples, so only its multiples can fold, and the first faithful one is it."""
    n = program.topology.num_devices
    offsets = _offsets(program, period)
    if offsets is None:
        return None
    for m in divisors(n)[:-1]:
        if m % period or m < min_devices:
            continue
        if len({o % m for o in offsets}) != len(offsets):
            continue
        if not _barriers_fold(program, names, m):
            continue
        return Fold(_folded(program, m), m, n, period)
    return None


_MOVED = {Signal: ("device",), DmaStart: ("device", "src_region", "dst_region"), ExitCheck: ("device",),
          Access: ("region",)}
"""The fields a rotation moves (DR-5, RUN-7); every other field of these operations must be equal."""


def _kept(t: type, moves_regions: bool) -> operator.attrgetter:
    """The fields of `t` a rotation keeps, read in C (new fields of an operation are kept by default)."""
    moved = _MOVED[t] if moves_regions else ("device",)
    return operator.attrgetter(*(f.name for f in dataclasses.fields(t) if f.name not in moved))


def _rotation(program: Program, period: int, shifts: Shifts | None = None) -> dict[str, str] | None:
    """The barrier-name map under which rotating the devices by `period` maps the program onto
    itself, or None. Operations naming no device must be equal; the others equal up to the shift.
    With `shifts`, each buffer's regions move by its label's shift too (DR-5)."""
    found = _rotation_shifting(program, period, shifts)
    return None if found is None else found[0]


def _rotation_shifting(program: Program, period: int, shifts: Shifts | None = None, *,
                       infer: bool = False, upto: int | None = None) -> tuple[dict[str, str], Shifts | None] | None:
    """`_rotation`, and the shifts it checked; with `infer`, the shifts are read off the program
    (`_infer_shifts`) once everything but the regions has been checked, then the regions are.
    `upto`: compare only the cores below it with their predecessors (`_first_rotation`'s `within`)."""
    topo = program.topology
    n, per = topo.num_devices, topo.cores_per_device
    shift_cores = period * per
    num = topo.num_cores
    names: dict[str, str] = {}
    preimage: dict[str, str] = {}
    parties: dict[str, frozenset[int]] = {}
    moves_regions = infer or bool(shifts)
    kept = {t: _kept(t, moves_regions) for t in (Signal, DmaStart, ExitCheck, Access)}
    get_device = operator.attrgetter("device")

    # The front end shares Region objects (a ring at 256 devices names a few hundred), so whether one
    # region shifts onto another is decided once per pair of objects, not once per operation.
    moved: dict[tuple[str | None, int, int], bool] = {}
    met: set[tuple[str | None, int, int]] = set()  # with `infer`: the (label, region, image) triples, by id
    objects: dict[int, Region | None] = {}

    def pairs_shift(labels: list, rs: list, images: list) -> bool:
        keys = set(zip(labels, map(id, rs), map(id, images)))
        new = keys.difference(met if infer else moved)
        if new:
            objects.update(zip(map(id, rs), rs))
            objects.update(zip(map(id, images), images))
        if infer:  # decided once the shifts are known, after every other check
            met.update(new)
            return True
        for label, i, j in new:
            by = shifts.get(label) if shifts and label is not None else None
            moved[(label, i, j)] = _shifted(objects[i], by, objects[j])
        return all(map(moved.__getitem__, keys))

    def barrier_same(x: Op, y: Op) -> bool:
        if type(y) is not Barrier or not (x.loc is y.loc or x.loc == y.loc):
            return False
        # names map one to one (the k-th meeting of a barrier is counted per name),
        # participants rotate with the devices
        if names.setdefault(x.name, y.name) != y.name or preimage.setdefault(y.name, x.name) != x.name:
            return False
        want = parties.get(x.name)
        if want is None:
            want = parties[x.name] = frozenset((p + shift_cores) % num for p in x.participants)
        return y.participants == want

    labels_and_regions = _REGIONS

    def columns(t: type, ops: tuple) -> tuple:
        """What `same_columns` compares of one core's operations of type `t`, read in C."""
        types = set(map(type, ops))
        if t is Barrier or types != {t}:  # another type here: `same_columns` reads nothing else
            return types, ops
        devices = list(map(get_device, ops)) if t is not Access else None
        regions = [(list(map(lg, ops)), list(map(rg, ops))) for lg, rg in labels_and_regions.get(t, ())] \
            if moves_regions else []
        return types, list(map(kept[t], ops)), devices, regions

    def same_columns(t: type, x: tuple, y: tuple) -> bool:
        """Whether every operation of `y` is the image of the one at its position in `x`, all of type `t`."""
        if x[0] != {t} or y[0] != {t}:
            return False
        if t is Barrier:
            return all(map(barrier_same, x[1], y[1]))
        if x[1] != y[1]:  # every field the rotation keeps
            return False
        if x[2] is not None and [None if d is None else (d + period) % n for d in x[2]] != y[2]:
            return False
        return all(pairs_shift(labels, rs, images) for (labels, rs), (_, images) in zip(x[3], y[3]))

    # Every core is checked against its predecessor `period` devices back, device 0 against the
    # last ones (the rotation wraps round). The cores `c, c + shift_cores, ...` form a chain whose
    # cores must all be alike; the positions of a chain holding operations that name devices (or
    # regions, with shifts) are read off its first core pair and compared per type, column by
    # column; every other position must hold the same operation, compared by identity first, at C
    # speed (the front end shares operation objects). Chains may differ from one another (even
    # and odd devices under a rotation by two), so positions are kept per chain, not per lane.
    named = _NAMED_DEVICE + (Access,) if moves_regions else _NAMED_DEVICE
    marked: dict[int, tuple[list[tuple[type, operator.itemgetter]], set[int]]] = {}
    pending: dict[int, dict[type, tuple]] = {}
    for c in range(num if upto is None else upto):
        a, b = program.cores[c - shift_cores], program.cores[c]  # c - shift_cores < 0 wraps round
        if len(a) != len(b):
            return None
        chain = c % shift_cores
        if chain not in marked:
            at: dict[type, list[int]] = {}
            for i, op in enumerate(a):
                if type(op) in named:
                    at.setdefault(type(op), []).append(i)
            # an itemgetter of one position returns the operation itself: ask for it twice to get a tuple
            marked[chain] = ([(t, operator.itemgetter(*pos, *pos[:1] if len(pos) == 1 else ())) for t, pos in at.items()],
                            {i for pos in at.values() for i in pos})
        groups, special_set = marked[chain]
        # core c's columns are core c + shift_cores's predecessor columns: read once, used twice
        cols_a = pending.pop(c - shift_cores, None) if c >= shift_cores else None
        cols_b = {}
        for t, pick in groups:
            x = cols_a[t] if cols_a is not None else columns(t, pick(a))
            y = cols_b[t] = columns(t, pick(b))
            if not same_columns(t, x, y):
                return None
        if c + shift_cores < num:
            pending[c] = cols_b
        differ = set(itertools.compress(range(len(a)), map(operator.is_not, a, b)))
        differ.difference_update(special_set)
        for i in differ:
            x, y = a[i], b[i]
            if type(x) in named or x != y:
                return None
    if infer:
        shifts = _infer_shifts(program, period, objects, met)
        if not all(_shifted(objects[i], shifts.get(label) if label is not None else None, objects[j])
                   for label, i, j in met):
            return None
    # a name the rotation keeps must have rotation-invariant participants (checked above: the
    # map sends it to itself only if its participants rotate onto themselves)
    return names, shifts


def _offsets(program: Program, period: int) -> set[int] | None:
    """Device offsets (target - issuer, mod the device count) of the first `period` devices' ops
    (the rest repeat them), with 0 for the issuer itself; None if a target is out of range."""
    topo = program.topology
    n, per = topo.num_devices, topo.cores_per_device
    out = {0}
    for c in range(period * per):
        me = topo.device_of(c)
        for op in program.cores[c]:
            t = type(op)
            if t is Signal or t is DmaStart:
                if op.core is not None and not 0 <= op.core < per:
                    return None
                if op.device is not None:
                    if not 0 <= op.device < n:
                        return None
                    out.add((op.device - me) % n)
            elif t is ExitCheck:
                if not 0 <= op.device < n:
                    return None
                out.add((op.device - me) % n)
    return out


def _barriers_fold(program: Program, names: dict[str, str], m: int) -> bool:
    """Every barrier of the first `m` devices is kept by the rotation or lies within them."""
    per = program.topology.cores_per_device
    inside = m * per
    if _certified(program, True):
        # RUN-23: the barriers of core c are those of its representative rotated by c's periods (RUN-20)
        span = program.period * per
        for r, ops in enumerate(program.representatives):
            if Barrier not in set(map(type, ops)):
                continue
            bars = [op for op in ops if type(op) is Barrier]
            for c in range(r, inside, span):
                for op in (bars if c < span else [program.rotated(y, c // span) for y in bars]):
                    if names.get(op.name) != op.name and max(op.participants) >= inside:
                        return False
        return True
    for c in range(inside):
        for op in program.cores[c]:
            if type(op) is Barrier and names.get(op.name) != op.name and max(op.participants) >= inside:
                return False
    return True


def _folded(program: Program, m: int) -> Program:
    """Devices 0..m-1 of `program`, every named device taken modulo m."""
    topo = program.topology
    per = topo.cores_per_device
    inside = m * per
    memo: dict[int, tuple[Op, Op]] = {}
    get = memo.get
    named = frozenset(_NAMED_DEVICE)

    def fold_op(op: Op) -> Op:
        # an operation the fold leaves as it is stays the program's object (most name a device below m)
        if type(op) is Barrier:
            kept = frozenset(p for p in op.participants if p < inside)
            new: Op = op if len(kept) == len(op.participants) else replaced(op, participants=kept)
        elif op.device is None or op.device % m == op.device:
            new = op
        else:
            new = replaced(op, device=op.device % m)
        memo[id(op)] = (op, new)  # the original is kept so that its id is not reused
        return new

    # most operations name no device: only the others are looked up
    cores = tuple(tuple([op if type(op) not in named else got[1] if (got := get(id(op))) is not None else fold_op(op)
                         for op in program.cores[c]]) for c in range(inside))
    return Program(Topology(m, per), cores, collective_id=program.collective_id, name=program.name,
                   launch_failure=program.launch_failure, tpu_failure=program.tpu_failure)
