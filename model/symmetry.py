"""One rotation of the devices that maps a program onto itself (spec RUN-36).

"Device d + k does what device d does" is one object, `Rotation`: the device count N and cores per
device C (`topology`), the period k (`devices`, a divisor of N; k = N is the identity), each buffer
label's cyclic shift of its first dimension (DR-5) and the barrier names the rotation maps onto each
other (RUN-7). It has two producers and every use reads it:

* `Rotation.observe(program)` compares the cores operation by operation (RUN-7's repetition, DR-5's
  with shifts); of a `Symmetric` it compares one period (RUN-20 (a)) and reads the rotation at the
  period itself off the representatives (RUN-23: `Rotation.certified`), which the front end's
  certificate made (RUN-18, RUN-22);
* the Z3 encoding's check on the lowered system (`checker/static/symmetry.py`, RUN-6) yields the
  same object for the same data.

The uses: the fold and the class run (RUN-7, DR-41: `model/fold.py`), a `Symmetric`'s cores (RUN-20:
`region`, `barrier_name`), the Z3 orbits (RUN-6: `reps`, `rep`, `image`), the race pass's orbit
representatives (DR-5: `representative_pairs`, `pair_images`) and the held runs of one period
(PRG-131).
"""

from __future__ import annotations

import dataclasses
import itertools
import operator
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from semcheck.model.ops import Access, Barrier, DmaStart, ExitCheck, Op, Program, Region, Signal, Topology

Shifts = Mapping[str, tuple[int, int]]  # buffer label -> (rows a rotation by k moves its regions by, modulus)

NAMED_DEVICE = (Signal, DmaStart, ExitCheck, Barrier)
"""Operations that name devices or cores; everything else must repeat unchanged."""


def divisors(n: int) -> list[int]:
    """The divisors of n, ascending."""
    return [d for d in range(1, n + 1) if n % d == 0]


def shift_region(r: Region | None, by: tuple[int, int] | None, times: int = 1) -> Region | None:
    """DR-5: `r` with its first dimension shifted cyclically `times` times by `by` = (rows, modulus).

    A region over the label's whole extent maps onto itself, and so does one made of several boxes each
    over the whole extent (stripes along the other dimensions, ACC-16); one made of other boxes there, or
    one whose image would wrap round the extent (no box), has no image: ValueError."""
    if r is None or by is None or not r.box or by[0] == 0:
        return r
    if r.window is not None:  # ERR-28: the detector's window moves with the elements
        moved = shift_region(dataclasses.replace(r, window=None), by, times)
        return dataclasses.replace(moved, window=shift_region(r.window, by, times))  # type: ignore[arg-type]
    d, m = by
    lo, hi = r.box[0]
    if lo == 0 and hi >= m:
        if any(p[0][0] > 0 or p[0][1] < m for p in r.parts):  # its boxes would move within the extent
            raise ValueError("a region of several boxes over its label's whole extent does not shift (DR-5)")
        return r
    lo2 = (lo + times * d) % m
    if lo2 + (hi - lo) > m:
        raise ValueError("a shifted region wraps round its label's extent (DR-5)")
    parts = tuple(((p[0][0] + lo2 - lo, p[0][1] + lo2 - lo),) + p[1:] for p in r.parts)
    return Region(((lo2, lo2 + hi - lo),) + r.box[1:], r.exact, r.why, parts)


def shifts_onto(r: Region | None, by: tuple[int, int] | None, image: Region | None) -> bool:
    """DR-5: whether `image` is `r` shifted once by `by` (`shift_region`'s image, the one definition)."""
    try:
        return shift_region(r, by) == image
    except ValueError:
        return False


def rotated_barrier_name(name: str, participants: frozenset[int], by_cores: int, num_cores: int, per: int) -> str:
    """RUN-20: the name of barrier `name` under a rotation by `by_cores` cores. A barrier whose participants
    rotate onto themselves keeps it; one of device `d`'s cores only (`fork{d}`, `join{d}`, LAUNCH-1) ends in
    the image device; any other has none (ValueError)."""
    image = frozenset((p + by_cores) % num_cores for p in participants)
    if image == participants:
        return name
    devices = {p // per for p in participants}
    if len(devices) == 1:
        (d,) = devices
        tail = str(d)
        if name.endswith(tail) and not name[: -len(tail)][-1:].isdigit():
            return name[: -len(tail)] + str((d + by_cores // per) % (num_cores // per))
    raise ValueError(f"barrier {name!r} has no name the rotation can derive (RUN-20)")


@dataclasses.dataclass(frozen=True)
class Rotation:
    """RUN-36: rotating the devices of `topology` by `devices` (k) maps the program onto itself: device
    `d + k` runs device `d`'s operations with every named device moved by k, each label's regions shifted
    by `shifts`, barrier names mapped by `names`. `devices == num_devices` is the identity (no smaller one)."""

    topology: Topology
    devices: int
    shifts: Shifts = dataclasses.field(default_factory=dict)
    names: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @staticmethod
    def identity(topology: Topology) -> Rotation:
        return Rotation(topology, topology.num_devices)

    @property
    def trivial(self) -> bool:
        """Whether this is the identity: the program repeats only every device count."""
        return self.devices >= self.topology.num_devices

    @property
    def shift(self) -> int:
        """The rotation in cores."""
        return self.devices * self.topology.cores_per_device

    @property
    def num_cores(self) -> int:
        return self.topology.num_cores

    @property
    def reps(self) -> range:
        """The orbit representatives: the cores of devices `0 .. k-1` (k divides N)."""
        return range(self.shift)

    def rep(self, core: int) -> int:
        """The representative of `core`'s orbit."""
        return core % self.shift

    def image(self, core: int, times: int = 1) -> int:
        """`core` rotated `times` times."""
        return (core + times * self.shift) % self.num_cores

    def orbit(self, core: int) -> Iterator[int]:
        """`core` and its images, `core` first."""
        return (self.image(core, j) for j in range(self.topology.num_devices // self.devices))

    def region(self, r: Region | None, label: str | None, times: int = 1) -> Region | None:
        """DR-5: region `r` of buffer `label` rotated `times` times."""
        return shift_region(r, self.shifts.get(label) if label is not None else None, times)

    def barrier_name(self, name: str, participants: frozenset[int], times: int = 1) -> str:
        """RUN-20: barrier `name`'s name rotated `times` times."""
        topo = self.topology
        return rotated_barrier_name(name, participants, times * self.shift, topo.num_cores, topo.cores_per_device)

    def keeps(self, participants: frozenset[int]) -> bool:
        """Whether the rotation maps a barrier's participants onto themselves (its name is kept, RUN-7 (c))."""
        n, s = self.num_cores, self.shift
        return frozenset((p + s) % n for p in participants) == participants

    def representative_pairs(self, pairs: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
        """DR-5: one pair of accesses (`core`, `pc`, `half`) per orbit: the one whose first access lies on
        devices `0 .. k-1` (a pair races iff its image does)."""
        topo, k = self.topology, self.devices
        if self.trivial:
            return pairs

        def key(e: Any) -> tuple:
            return (e.pc, e.half or "", topo.local_core_of(e.core), topo.device_of(e.core) % k)

        out = []
        for a, b in pairs:
            ka, kb = key(a), key(b)
            if ka == kb:
                keep = topo.device_of(a.core) < k or topo.device_of(b.core) < k
            else:
                keep = topo.device_of((a if ka < kb else b).core) < k
            if keep:
                out.append((a, b))
        return out

    def pair_images(self, a: Any, b: Any, every: Mapping[tuple[int, int, str | None], Any]) -> Iterator[tuple[Any, Any]]:
        """DR-5: the other pairs of the orbit of (a, b), looked up in `every` by (core, pc, half)."""
        for j in range(1, self.topology.num_devices // self.devices):
            x = every.get((self.image(a.core, j), a.pc, a.half))
            y = every.get((self.image(b.core, j), b.pc, b.half))
            if x is not None and y is not None:
                yield x, y

    @staticmethod
    def observe(program: Any, *, shifted: bool = False, within: int | None = None) -> Rotation:
        """RUN-7 (DR-5 with `shifted`): the smallest rotation that maps `program` onto itself, compared core
        by core; the identity when none does. `within`: a period the program is known to repeat with (a
        `Symmetric`'s, RUN-20 (a)): only its divisors are tried, on one period's cores, and the period
        itself is read off the representatives where it may be (RUN-23)."""
        n = program.topology.num_devices
        candidates = divisors(n)[:-1] if within is None else [p for p in divisors(within) if p < n]
        upto = None if within is None else within * program.topology.cores_per_device
        for period in candidates:
            if period == within and _certifiable(program, shifted):
                found = Rotation.certified(program, shifted=shifted)
            else:
                found = compare(program, period, infer=shifted, upto=upto)
            if found is not None:
                return found
        return Rotation.identity(program.topology)

    @staticmethod
    def certified(sym: Any, *, shifted: bool) -> Rotation | None:
        """RUN-23: a `Symmetric`'s own rotation (the front end's certificate, RUN-18, RUN-22), checked on
        what the core-by-core comparison could still refuse, read off the representatives."""
        return _certified_rotation(sym, infer=shifted)


def _certifiable(program: Any, shifted: bool) -> bool:
    """RUN-23: whether `program` is a `Symmetric` (given by its representatives) whose own rotation
    `Rotation.certified` may read off: its rotation moves no region that the comparison without `shifted`
    would compare as a kept field."""
    return hasattr(program, "representatives") and (shifted or not any(d for d, _ in program.shifts.values()))


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
    program is among them (they sit where their chain's first core has them). `compare` then checks
    every triple against these shifts."""
    extent: dict[str, int] = {}
    for label, i, j in named:
        for r in (regions[i], regions[j]):
            if label is not None and r is not None and r.box:
                extent[label] = max(extent.get(label, 0), r.box[0][1], r.window.box[0][1] if r.window else 0)
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


_REGIONS = {Access: ((operator.attrgetter("buf"), operator.attrgetter("region")),),
            DmaStart: ((operator.attrgetter("src_buf"), operator.attrgetter("src_region")),
                       (operator.attrgetter("dst_buf"), operator.attrgetter("dst_region")))}
"""The (label, region) pairs of an operation that the rotation check compares with shifts (DR-5)."""


def _certified_rotation(sym: Any, *, infer: bool) -> Rotation | None:
    """RUN-23: `compare(sym, sym.period, infer=infer, upto=...)` of a `Symmetric`, without comparing its
    cores operation by operation.

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
    kinds = NAMED_DEVICE + (Access,) if infer else NAMED_DEVICE  # what the comparison reads column by column
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
        return Rotation(topo, sym.period, {}, names)
    shifts = _infer_shifts(sym, sym.period, objects, met)
    if not all(shifts_onto(objects[i], shifts.get(label) if label is not None else None, objects[j])
               for label, i, j in met):
        return None
    return Rotation(topo, sym.period, shifts, names)


_MOVED = {Signal: ("device",), DmaStart: ("device", "src_region", "dst_region"), ExitCheck: ("device",),
          Access: ("region",)}
"""The fields a rotation moves (DR-5, RUN-7); every other field of these operations must be equal."""


def _kept(t: type, moves_regions: bool) -> operator.attrgetter:
    """The fields of `t` a rotation keeps, read in C (new fields of an operation are kept by default)."""
    moved = _MOVED[t] if moves_regions else ("device",)
    return operator.attrgetter(*(f.name for f in dataclasses.fields(t) if f.name not in moved))


def compare(program: Program, period: int, shifts: Shifts | None = None, *, infer: bool = False,
            upto: int | None = None) -> Rotation | None:
    """RUN-7, DR-5: the rotation by `period` devices if it maps the program onto itself, compared operation
    by operation, else None. Operations naming no device must be equal; the others equal up to the
    rotation, barrier names mapped one to one. With `shifts`, each buffer's regions move by its label's
    shift too; with `infer`, the shifts are read off the program (`_infer_shifts`) once everything but
    the regions has been checked, then the regions are. `upto`: compare only the cores below it with
    their predecessors (`Rotation.observe`'s `within`)."""
    topo = program.topology
    n, per = topo.num_devices, topo.cores_per_device
    shift_cores = period * per
    num = topo.num_cores
    names: dict[str, str] = {}
    preimage: dict[str, str] = {}
    parties: dict[str, frozenset[int]] = {}
    same_parties: dict[tuple[str, int], bool] = {}  # (name, id of a participant set) -> whether it is the image
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
            moved[(label, i, j)] = shifts_onto(objects[i], by, objects[j])
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
        # the front end shares one participant set among the cores of a barrier: compared once per name,
        # not once per core (a set of N cores compared at each of N cores was quadratic)
        key = (x.name, id(y.participants))
        same = same_parties.get(key)
        if same is None:
            same = same_parties[key] = y.participants == want
        return same

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
    named = NAMED_DEVICE + (Access,) if moves_regions else NAMED_DEVICE
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
        if not all(shifts_onto(objects[i], shifts.get(label) if label is not None else None, objects[j])
                   for label, i, j in met):
            return None
    # a name the rotation keeps must have rotation-invariant participants (checked above: the
    # map sends it to itself only if its participants rotate onto themselves)
    return Rotation(topo, period, shifts or {}, names)


__all__ = ["NAMED_DEVICE", "Rotation", "Shifts", "compare", "divisors", "rotated_barrier_name", "shift_region",
           "shifts_onto"]
