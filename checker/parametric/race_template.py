"""The accesses of the kernel's template, symbolic in N, my_id and the grid step (specs/deciding/parametric.md
PAR-11): what each load, store and copy half touches, in program order with the synchronisation
items of PAR-4, each under the condition of the branches it sits in. `checker/parametric/races.py`
orders them (PAR-12 .. PAR-14)."""

from __future__ import annotations

import dataclasses
from typing import Any

from semcheck.checker.parametric.template import Affine, NotTemplate, Sym, evaluate, fit, sub_jaxprs

_ACCESS = {"get": False, "swap": True, "addupdate": True}
"""A kernel load or store and whether it writes (`x[...] += y` is a get and a swap, ACC-1)."""


@dataclasses.dataclass(frozen=True)
class Region:
    """Rows [start, start + size) of dimension 0 of a kernel argument; the other dimensions are taken
    whole (an over-approximation: more pairs overlap, never fewer). `start` is a Z3 term or an Affine
    (a number of the jaxpr, PAR-3), `size` and `extent` (the argument's dimension 0) Affine; a region
    semcheck does not read is the whole argument (`start` None)."""

    arg: int
    start: Any
    size: Affine | None
    extent: Affine


@dataclasses.dataclass(frozen=True)
class Event:
    """One position of a grid step's body (PAR-11): a synchronisation item of PAR-4 and the accesses
    it makes (a copy's two halves), or a kernel access; `guard` is the condition that it runs."""

    pos: int
    guard: Any
    item: tuple | None  # PAR-4's item: ("signal", sem, inc, c), ("wait", ...), ("dma", c, ...), ("dma_wait", ...)
    reads: tuple[Region, ...] = ()
    writes: tuple[Region, ...] = ()
    line: str = ""


class _Leaf:
    """A position among an equation's operands, told apart from the static numbers of its indexers."""

    def __init__(self, k: int):
        self.k = k


def _ref_uses(jaxpr) -> bool:
    """Whether a (sub-)jaxpr touches a ref at all: a loop body with accesses is outside PAR-11."""
    for e in jaxpr.eqns:
        if any("Ref" in type(v.aval).__name__ for v in e.invars):
            return True
        if any(_ref_uses(s) for s in sub_jaxprs(e)):
            return True
    return False


def _dim0(aval) -> int:
    shape = getattr(aval, "shape", None)
    if not shape:
        raise NotTemplate("an access to a scalar ref")
    return int(shape[0])


class Recorder:
    """Collects PAR-11's events while PAR-4's walk (`template._evaluate`) goes through one traced jaxpr.

    Static numbers (slice sizes, constant starts, a ref's dimension 0) are kept per traced N, to be
    fitted as affine in N (`events`); the dynamic starts are the walk's Z3 terms."""

    def __init__(self):
        self.rows: list[tuple] = []  # (guard, item, [(arg, start, size, extent, write)], line)

    def __call__(self, eqn, args, path, sources, line, item) -> None:
        name = eqn.primitive.name
        if name in ("dma_wait", "semaphore_signal", "semaphore_wait", "get_barrier_semaphore"):
            if name != "get_barrier_semaphore":
                self.rows.append((path, item, [], line))
            return
        if name in _ACCESS:
            tree = eqn.params["tree"]
            base = len(eqn.invars) - tree.num_leaves
            transforms = tree.unflatten([_Leaf(base + i) for i in range(tree.num_leaves)])
            region = self._region(eqn.invars[0], transforms, args, sources, line)
            touched = [region + (False,)]
            if _ACCESS[name]:
                # a swap reads the old value as it writes (jax returns it); an addupdate reads and writes
                touched = [region + (False,), region + (True,)]
            self.rows.append((path, None, touched, line))
            return
        if name == "dma_start":
            tree = eqn.params["tree"]
            src, dst = tree.unflatten([_Leaf(i) for i in range(len(eqn.invars))])[:2]
            touched = [self._view(src, args, eqn, sources, line) + (False,),
                       self._view(dst, args, eqn, sources, line) + (True,)]
            self.rows.append((path, item, touched, line))
            return
        if any("Ref" in type(v.aval).__name__ for v in eqn.invars) or any(_ref_uses(s) for s in sub_jaxprs(eqn)):
            raise NotTemplate(f"{name} touches a ref in a way semcheck does not read symbolically ({line})")

    def _view(self, view, args, eqn, sources, line):
        if isinstance(view, _Leaf):
            return self._region(eqn.invars[view.k], (), args, sources, line)
        ref = getattr(view, "ref", None)
        if not isinstance(ref, _Leaf):
            raise NotTemplate(f"a copy of a view semcheck does not read ({line})")
        return self._region(eqn.invars[ref.k], tuple(getattr(view, "transforms", ())), args, sources, line)

    def _region(self, var, transforms, args, sources, line):
        src = sources.get(var)
        if src is None or src[0] != "arg":
            raise NotTemplate(f"a ref semcheck cannot trace back to the kernel's arguments ({line})")
        extent = _dim0(var.aval)
        whole = (src[1], None, extent, extent)
        if len(transforms) != 1 or type(transforms[0]).__name__ != "NDIndexer":
            return whole  # no view, or one semcheck does not read: the whole argument (PAR-11)
        first = transforms[0].indices[0]
        if type(first).__name__ == "Slice":
            if getattr(first, "stride", 1) != 1:
                return whole
            start, size = first.start, first.size
        elif isinstance(first, (_Leaf, int)):
            start, size = first, 1
        else:
            return whole
        if isinstance(start, _Leaf):
            term = args[start.k]
            if term is None:
                raise NotTemplate(f"an index semcheck cannot read symbolically ({line})")
            start = ("term", term)
        elif isinstance(start, int):
            start = ("number", start)
        else:
            return whole
        if not isinstance(size, int):
            return whole
        return (src[1], start, size, extent)


def record(sym: Sym, jaxpr) -> list[tuple]:
    """PAR-4's walk of one traced jaxpr with PAR-11's recorder: the rows in program order."""
    rec = Recorder()
    sym.recorder = rec
    sym.prove = False  # PAR-4's proofs are `template_guard`'s, made once
    sources = {v: ("arg", i) for i, v in enumerate(jaxpr.invars)}
    evaluate(sym, jaxpr, {}, sym.z3.BoolVal(True), (), [], sources)
    return rec.rows


def events(rows_by_n: dict[int, list[tuple]]) -> list[Event]:
    """PAR-11: the events of the template, from the rows recorded at every traced N: the same rows at
    every N, each static number fitted as affine in N (else the region is the whole argument)."""
    ns = sorted(rows_by_n)
    last = rows_by_n[ns[-1]]
    if any(len(rows_by_n[n]) != len(last) for n in ns):
        raise NotTemplate("the kernel's accesses differ in number between device counts")
    out = []
    for pos, (guard, item, touched, line) in enumerate(last):
        reads, writes = [], []
        for k, (arg, start, size, extent, write) in enumerate(touched):
            at = [rows_by_n[n][pos][2][k] for n in ns]
            if any(a[0] != arg or a[4] != write or (a[1] is None) != (start is None) for a in at):
                raise NotTemplate(f"an access changes between device counts ({line})")
            ext = fit([(n, a[3]) for n, a in zip(ns, at)])
            if ext is None:
                raise NotTemplate(f"a ref's dimension 0 is not affine in N ({line})")
            region = Region(arg, None, ext, ext)
            if start is not None:
                sz = fit([(n, a[2]) for n, a in zip(ns, at)])
                if start[0] == "term":
                    st = start[1]
                elif all(a[1][0] == "number" for a in at):
                    st = fit([(n, a[1][1]) for n, a in zip(ns, at)])
                else:
                    st = None
                if sz is not None and st is not None:
                    region = Region(arg, st, sz, ext)
            (writes if write else reads).append(region)
        out.append(Event(pos, guard, item, tuple(reads), tuple(writes), line))
    return out
