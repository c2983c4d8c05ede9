"""The rotation certificate's obligations (specs/deciding/symmetry.md RUN-18, DR-39): what each operation the
front end would emit asks of the values that build it. A mixin of `rotation_walk.Walk`, which evaluates
the kernel's jaxpr symbolically and calls these at each synchronising operation and ref access."""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any


class NotCertified(Exception):
    """The kernel's program is not certified to repeat; str(e) says why, with the kernel's line."""


ACCESS = {"get": 1, "swap": 2, "addupdate": 2}  # primitive -> where its indexer leaves start
MASKED = {"masked_load", "masked_swap"}
_IDENTITY_TRANSFORMS = ("MemorySpaceCastTransform", "AccessAssumptionTransform")


class _Leaf:
    """A position among an equation's operands, put into its pytree to tell operands from static ints."""

    __slots__ = ("i",)

    def __init__(self, i: int) -> None:
        self.i = i


@dataclasses.dataclass(frozen=True, eq=False)
class Ref:
    """A ref the kernel names: its label in the program (None: a run_scoped buffer, whose label changes
    with every allocation, so its regions may not move) and its shape."""

    label: str | None
    shape: tuple[int, ...]
    semaphore: bool = False


@dataclasses.dataclass
class Ob:
    kind: str  # "inv" | "dev" | "row"
    term: Any
    path: Any
    where: str
    what: str
    label: str | None = None
    size: int = 0
    extent: int = 0
    side: Any = None  # PAR-4's no-wrap conditions of the kernel terms it reads (the same for every k)


_UNFOLLOWED = "(a value loaded from memory, a float, a semaphore read or a loop carry)"
_STATIC = object()  # a static operand of a tree (None, a flag): the same on every device


class Obligations:
    """RUN-18's obligations, recorded in `self.obs` (the walk's state: `z3`, `obs`, `line`, `mark`)."""

    z3: Any
    obs: list
    call: Any
    names: list


    def invariant(self, x: Any, path: Any, eqn: Any, what: str) -> None:
        if isinstance(x, Ref) or x is _STATIC:
            return
        if x is None:
            raise NotCertified(f"{what} at {self.line(eqn)} depends on a value semcheck cannot follow "
                               f"symbolically {_UNFOLLOWED}")
        self.obs.append(Ob("inv", x, path, self.line(eqn), what))

    def leaf(self, x: Any, args: list) -> Any:
        if isinstance(x, _Leaf):
            return args[x.i]
        if isinstance(x, numbers.Integral) and not isinstance(x, bool):
            return self.z3.IntVal(int(x))
        if x is None:
            return _STATIC
        return _STATIC if isinstance(x, (bool, str)) else None

    def leaves(self, tree: Any) -> list:
        import jax

        return jax.tree_util.tree_leaves(tree, is_leaf=lambda t: isinstance(t, _Leaf))

    def all_invariant(self, part: Any, args: list, path: Any, eqn: Any, what: str) -> None:
        for x in self.leaves(part):
            if isinstance(x, _Leaf):
                self.invariant(args[x.i], path, eqn, what)

    def ref_of(self, part: Any, args: list) -> tuple[Any, tuple]:
        if type(part).__name__ == "TransformedRef":
            base, chain = self.ref_of(part.ref, args)
            return base, (*chain, *part.transforms)
        if isinstance(part, _Leaf):
            return args[part.i], ()
        return None, ()

    def region(self, part: Any, transforms: tuple, args: list, path: Any, eqn: Any, what: str) -> None:
        """A region's obligations: its first dimension's start moves by its label's shift (DR-39), every
        other index is the same on every device."""
        z3 = self.z3
        ref, chain = self.ref_of(part, args)
        chain = (*chain, *transforms)
        if not isinstance(ref, Ref):
            raise NotCertified(f"{what} at {self.line(eqn)} is a ref semcheck cannot trace back to the "
                               "kernel's operands")
        if ref.semaphore:
            for t in chain:
                self.all_invariant(t, args, path, eqn, f"the index of {what}")
            return
        dims = [(z3.IntVal(0), s) for s in ref.shape]  # per buffer dimension: (start, size)
        view = list(range(len(ref.shape)))  # view dimension -> buffer dimension
        simple = True
        for t in chain:
            tname = type(t).__name__
            if tname in _IDENTITY_TRANSFORMS:
                continue
            if tname != "NDIndexer" or tuple(getattr(t, "int_indexer_shape", ()) or ()) != () \
                    or len(t.indices) != len(view):
                simple = False
                break
            new_view = []
            for bd, idx in zip(view, t.indices):
                if type(idx).__name__ == "Slice":
                    start, size = self.leaf(idx.start, args), idx.size
                    if not isinstance(size, int) or idx.stride != 1 or start is None or start is _STATIC:
                        simple = False
                        break
                    dims[bd] = (self.mark(dims[bd][0] + start), size)
                    new_view.append(bd)
                else:
                    i = self.leaf(idx, args)
                    if i is None or i is _STATIC:
                        simple = False
                        break
                    dims[bd] = (self.mark(dims[bd][0] + i), 1)
            if not simple:
                break
            view = new_view
        if not simple:
            # a view the certificate does not place: its indices the same everywhere, its label unmoved
            for t in chain:
                self.all_invariant(t, args, path, eqn, f"an index of {what}")
            self.obs.append(Ob("row", None, path, self.line(eqn), what, ref.label, 0, 0))
            return
        for d, (start, _) in enumerate(dims):
            if d:
                self.invariant(start, path, eqn, f"an index of {what}")
        if dims:
            start, size = dims[0]
            self.obs.append(Ob("row", start, path, self.line(eqn), what, ref.label, size, ref.shape[0]))

    def device(self, part: Any, args: list, id_type: Any, path: Any, eqn: Any, what: str) -> None:
        z3 = self.z3
        if part is None or (isinstance(part, tuple) and not part):
            return
        if isinstance(part, dict):
            raise NotCertified(f"{what} given by mesh axis names ({self.line(eqn)}) is outside the certificate")
        parts = part if isinstance(part, tuple) else (part,)
        vals = [args[p.i] if isinstance(p, _Leaf) else self.leaf(p, args) for p in parts]
        if any(v is None or v is _STATIC for v in vals):
            raise NotCertified(f"{what} at {self.line(eqn)} depends on a value semcheck cannot follow "
                               f"symbolically {_UNFOLLOWED}")
        if "LOGICAL" in str(id_type):
            if len(vals) != 1:
                raise NotCertified(f"{what} at {self.line(eqn)}: a logical id of {len(vals)} parts")
            logical = vals[0]
        else:
            if len(vals) != len(self.names):
                raise NotCertified(f"{what} at {self.line(eqn)} names {len(vals)} coordinates of a mesh of "
                                   f"{len(self.names)} axes")
            logical = z3.IntVal(0)
            for k, c in enumerate(vals):
                logical = logical + c * math.prod(self.call.mesh.axis_sizes[k + 1:])
            if not self.names:
                logical = z3.IntVal(0)
        self.obs.append(Ob("dev", logical, path, self.line(eqn), what))

    def sync(self, eqn: Any, args: list, path: Any) -> None:
        name = eqn.primitive.name
        tree = eqn.params.get("args_tree", eqn.params.get("tree"))
        if tree is None:
            raise NotCertified(f"{name} without operands semcheck can read ({self.line(eqn)})")
        parts = tree.unflatten([_Leaf(i) for i in range(len(eqn.invars))])
        id_type = eqn.params.get("device_id_type")
        if name == "semaphore_signal":
            sem, transforms, inc, dev, core = parts
            self.region(sem, tuple(transforms or ()), args, path, eqn, "the signalled semaphore")
            self.all_invariant(inc, args, path, eqn, "a signal's increment")
            self.all_invariant(core, args, path, eqn, "a signal's core index")
            self.device(dev, args, id_type, path, eqn, "the signalled device")
        elif name == "semaphore_wait":
            sem, transforms, value, dec = parts
            self.region(sem, tuple(transforms or ()), args, path, eqn, "the awaited semaphore")
            self.all_invariant((value, dec), args, path, eqn, "a wait's value")
        elif name == "semaphore_read":
            sem, transforms = parts
            self.region(sem, tuple(transforms or ()), args, path, eqn, "the read semaphore")
        elif name in ("dma_start", "dma_wait"):
            src, dst, dst_sem, src_sem, dev = parts
            self.region(src, (), args, path, eqn, "a copy's source")
            self.region(dst, (), args, path, eqn, "a copy's destination")
            for s in (dst_sem, src_sem):
                if s is not None:
                    self.region(s, (), args, path, eqn, "a copy's semaphore")
            self.device(dev, args, id_type, path, eqn, "a copy's target device")
        else:  # a primitive of the table without a case here: nothing certified of its operands
            raise NotCertified(f"{name} is outside the certificate ({self.line(eqn)})")

    def access(self, eqn: Any, args: list, path: Any) -> None:
        name = eqn.primitive.name
        if name in MASKED:
            tree = eqn.params["args_tree"]
            parts = tree.unflatten([_Leaf(i) for i in range(len(eqn.invars))])
            mask = parts[2] if name == "masked_load" else parts[3]
            if mask is not None:
                raise NotCertified(f"a masked load or store ({self.line(eqn)}) is outside the certificate")
            self.region(parts[0], tuple(parts[1] or ()), args, path, eqn, "a load or store")
            return
        at = ACCESS[name]
        transforms = eqn.params["tree"].unflatten([_Leaf(i) for i in range(at, len(eqn.invars))])
        self.region(_Leaf(0), tuple(transforms or ()), args, path, eqn, "a load or store")
