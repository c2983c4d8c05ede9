"""One `Program` for a program of kernel calls, as a TPU runs it (spec programs.md, PRG-104..F7).

Each invocation of `ProgramIR` is lowered alone (`lower.lower_kernel`, the rules every single
kernel uses), and the per-core operations are then put one after the other in call order
(PRG-104). Per invocation:

* labels are renamed `kernel#call.label`, so the scratch semaphores and buffers of one call are
  its own (PRG-105); a semaphore or HBM buffer that is an input linked to an earlier call's
  output keeps the producer's label and is not allocated again (PRG-105: one semaphore, one
  buffer, across the calls it passes through);
* the interpreter's clean-up barrier goes (devices are not synchronised at call boundaries on a
  TPU, PRG-104), its start barrier stays only for a call that communicates (PRG-104); a device's
  fork and join barriers get the call's index;
* the exit checks go: one check per device at the program's end (PRG-106).

Nothing here decides a property: the composed program goes to the checks every kernel goes to.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from semcheck.checker.frontend.errors import Unsupported
from semcheck.checker.frontend.program_ir import Invocation, ProgramIR
from semcheck.model.ops import (
    BARRIER,
    Access,
    AllocBuffer,
    AllocSem,
    Barrier,
    DmaStart,
    ExitCheck,
    FreeBuffer,
    GetBarrierSem,
    Op,
    Program,
    Read,
    SemRef,
    Signal,
    Wait,
)


@dataclasses.dataclass(frozen=True)
class ComposedProgram:
    """The hardware program of a `ProgramIR` and what the interpreter's modes make of it.

    `interpreter_exact` is False when the interpreter's verdicts cannot be read off `program`
    (its launch failure is not the first call's: the calls before it run first), with `why`; then
    `interpreted` holds, in order, the lowerings of the calls the interpreter runs and, last, of the
    call whose launch fails (PRG-107).
    """

    program: Program
    ir: ProgramIR
    interpreter_exact: bool = True
    why: str = ""
    race_gaps: tuple[str, ...] = ()  # PRG-108: why race-free cannot be proved over the modelled accesses alone
    calls: tuple[tuple[int, ...], ...] = ()  # per core, the call index of each of its operations
    order: tuple[int, ...] = ()  # the calls in the order this program runs them (PRG-101)
    barrier_labels: frozenset[str] = frozenset()  # the barrier semaphores, which outlive the calls (PRG-105)
    interpreted: tuple[Program, ...] = ()

    def position(self, call: int) -> int:
        """Where call `call` runs in `order`."""
        return self.order.index(call)

    def describe_order(self) -> str:
        return ", ".join(f"{self.ir.invocations[k].name} (call {k})" for k in self.order)


MAX_ORDERS = 8
"""The most orders of one program's calls that are composed and checked (PRG-101)."""


def compose_orders(ir: ProgramIR, lowered: list[Program], *, name: str) -> list[ComposedProgram]:
    """One composed program per order of the calls XLA may choose (PRG-101), the traced order first."""
    if ir.unknown is not None:
        reason, loc = ir.unknown
        raise Unsupported("program", reason, loc)
    orders = ir.orders(MAX_ORDERS)
    if orders is None:
        raise Unsupported("program", f"its calls' data dependences leave more than {MAX_ORDERS} orders XLA may run "
                          "them in: not explored", ir.invocations[0].loc)
    return [compose(ir, lowered, name=name, order=order) for order in orders]


def compose(ir: ProgramIR, lowered: list[Program], *, name: str,
            order: tuple[int, ...] | None = None) -> ComposedProgram:
    """The program of `ir` from each invocation's own lowering (`lowered[k]` for invocation `k`), its
    calls run in `order` (default: the traced order)."""
    if ir.unknown is not None:
        reason, loc = ir.unknown
        raise Unsupported("program", reason, loc)
    invs = ir.invocations
    order = tuple(range(len(invs))) if order is None else tuple(order)
    topos = {p.topology for p in lowered}
    if len(topos) != 1:
        raise Unsupported("program", "its kernel calls run on different numbers of devices or cores", invs[0].loc)
    (topo,) = topos
    barriers = _barrier_labels(invs, lowered)
    cid = _collective_id(invs, lowered, barriers)
    renames: list[dict[str, str]] = []
    dropped: list[set[str]] = []
    for k, inv in enumerate(invs):
        r, d = _renames(inv, ir, renames)
        if k in barriers:
            r[BARRIER] = barriers[k]
        renames.append(r)
        dropped.append(d)
    cores: list[list[Op]] = [[] for _ in range(topo.num_cores)]
    calls: list[list[int]] = [[] for _ in range(topo.num_cores)]  # the call of each composed op
    for label in dict.fromkeys(barriers.values()):  # the barrier semaphores outlive every call
        for d in range(topo.num_devices):
            cores[topo.global_core(d, 0)].append(AllocSem(label, 1, site=label, scope="device", loc=invs[0].loc))
            calls[topo.global_core(d, 0)].append(order[0])
    for k in order:
        inv, prog = invs[k], lowered[k]
        communicates = _communicates(prog) and not getattr(inv.call.compiler_params, "skip_device_barrier", False)
        for g, ops in enumerate(prog.cores):
            mine = [_rewrite(op, k, _prefix(inv), renames[k]) for op in ops
                    if _kept(op, dropped[k], communicates, k in barriers)]
            cores[g].extend(mine)
            calls[g].extend([k] * len(mine))
    last = invs[order[-1]].loc
    for d in range(topo.num_devices):
        cores[topo.global_core(d, 0)].append(ExitCheck(d, last))
    failure, exact, why = _interpreter(invs, lowered, order)
    # how reports name each call's HBM buffers (Program.names): the call's own, under its prefix
    names = {_prefix(invs[k]) + label: _prefix(invs[k]) + nm for k in order for label, nm in lowered[k].names
             if _name(label, _prefix(invs[k]), renames[k]) == _prefix(invs[k]) + label}
    program = Program(topo, tuple(tuple(ops) for ops in cores), collective_id=cid, name=name,
                      launch_failure=failure, names=tuple(names.items()))
    ran = () if exact else tuple(lowered[k] for k in order[:order.index(_first_failing(lowered, order)) + 1])
    return ComposedProgram(program, ir, exact, why, _race_gaps(ir, renames, cores, calls, order),
                           tuple(tuple(ks) for ks in calls), order, frozenset(barriers.values()), ran)


def _race_gaps(ir: ProgramIR, renames: list[dict[str, str]], cores: list[list[Op]],
               calls: list[list[int]], order: tuple[int, ...]) -> tuple[str, ...]:
    """PRG-108: a copy whose buffer is used where the composed program does not model the use (an XLA
    op or the program's result, after the producing call; a later call's block copy-in, at that call's
    entry) at a point the calls' waits on the copy's semaphores need not have reached."""
    pos = {k: i for i, k in enumerate(order)}
    last_wait: dict[str, int] = {}  # semaphore -> the position of the last call waiting on it
    for ops, ks in zip(cores, calls):
        for op, k in zip(ops, ks):
            if type(op) is Wait:
                last_wait[op.sem.label] = max(pos[k], last_wait.get(op.sem.label, -1))
    # buffer -> (position of the use, whether a wait in that same call comes too late, how)
    used: dict[str, list[tuple[int, bool, str]]] = {}

    def use(call: int, output: int, at: int, at_entry: bool, how: str) -> None:
        inv = ir.invocations[call]
        local = operand_labels(inv).get(("output", output))
        if local is not None:
            used.setdefault(_name(local, _prefix(inv), renames[call]), []).append((at, at_entry, how))

    for v, how in ir.escapes:
        use(v.call, v.output, pos[v.call], False, how)
    for link in ir.links:
        consumer = ir.invocations[link.consumer]
        in_op = [o for o in consumer.call.operands if o.role == "input"][link.input]
        if link.kind == "buffer" and in_op.memory_space != "hbm":
            use(link.producer, link.output, pos[link.consumer], True, f"copied in as a block by {consumer.describe()}")
    gaps: list[str] = []
    for ops, ks in zip(cores, calls):
        for op, k in zip(ops, ks):
            if type(op) is not DmaStart:
                continue
            # the source is done with once the send semaphore (a local copy: its one semaphore) is waited,
            # the destination once the receive semaphore is
            src_sem = op.src_sem if op.src_sem is not None else op.dst_sem
            for buf, sem in ((op.src_buf, src_sem), (op.dst_buf, op.dst_sem)):
                waited = last_wait.get(sem.label, -1)
                for at, at_entry, how in used.get(buf, ()) if buf is not None else ():
                    if waited < pos[k] or at < waited or (at_entry and at == waited):
                        text = (f"the copy at {op.loc} started by {ir.invocations[k].describe()} may still be in "
                                f"flight when its buffer is used outside what the program models ({how})")
                        if text not in gaps:
                            gaps.append(text)
    return tuple(gaps)


def _prefix(inv: Invocation) -> str:
    return f"{inv.name}#{inv.index}."


def operand_labels(inv: Invocation) -> dict[tuple[str, int], str]:
    """(role, position among the role's operands) -> the label the call's lowering gives it (LAUNCH-1)."""
    from semcheck.checker.frontend.grid import _hbm_labels, launch_operands

    _, args, _ = launch_operands(inv.call)
    hbm = _hbm_labels(inv.call)
    out: dict[tuple[str, int], str] = {}
    seen = {"input": 0, "output": 0}
    for op, arg in zip(inv.call.operands, args):
        if op.role not in seen:
            continue
        j = seen[op.role]
        seen[op.role] += 1
        label = getattr(arg, "label", None)
        if op.kind != "semaphore" and op.memory_space == "hbm":
            label = hbm[(op.role, j)]
        if label is not None:
            out[(op.role, j)] = label
    return out


def _renames(inv: Invocation, ir: ProgramIR, earlier: list[dict[str, str]]) -> tuple[dict[str, str], set[str]]:
    """Local label -> program label for one call, and the labels a linked input brings (not allocated again)."""
    labels = operand_labels(inv)
    renames: dict[str, str] = {}
    dropped: set[str] = set()
    for j, link in ir.links_into(inv.index).items():
        mine = labels.get(("input", j))
        producer = ir.invocations[link.producer]
        theirs = operand_labels(producer).get(("output", link.output))
        if mine is None or theirs is None:
            continue
        in_op = [o for o in inv.call.operands if o.role == "input"][j]
        out_op = [o for o in producer.call.operands if o.role == "output"][link.output]
        if link.kind == "buffer" and not (in_op.memory_space == out_op.memory_space == "hbm"):
            continue  # a block copied in and out by the grid: the call's own buffer (implicit copies)
        renames[mine] = earlier[link.producer].get(theirs, _prefix(producer) + theirs)
        dropped.add(mine)
    return renames, dropped


def _name(label: str, k_prefix: str, renames: dict[str, str]) -> str:
    if label == BARRIER:
        return renames.get(label, label)
    return renames.get(label, k_prefix + label)


def _ref(ref: SemRef | None, p: str, renames: dict[str, str]) -> SemRef | None:
    return None if ref is None else SemRef(_name(ref.label, p, renames), ref.index)


def _kept(op: Op, dropped: set[str], communicates: bool, own_barrier: bool) -> bool:
    t = type(op)
    if t is ExitCheck or (t is GetBarrierSem and own_barrier):
        return False
    if t is Barrier:
        return op.name != "cleanup" and (op.name != "start" or communicates)
    if t in (AllocSem, AllocBuffer):
        return op.label not in dropped
    return True


def _rewrite(op: Op, k: int, p: str, renames: dict[str, str]) -> Op:
    """`op` of call `k` (label prefix `p`) with the program's labels and barrier names."""
    t = type(op)
    return _REWRITE[t](op, k, p, renames) if t in _REWRITE else op


def _rw_alloc_sem(op: AllocSem, k: int, p: str, r: dict[str, str]) -> AllocSem:
    return dataclasses.replace(op, label=_name(op.label, p, r), site=p + op.site)


def _rw_alloc_buffer(op: AllocBuffer, k: int, p: str, r: dict[str, str]) -> AllocBuffer:
    return dataclasses.replace(op, label=_name(op.label, p, r))


def _rw_free(op: FreeBuffer, k: int, p: str, r: dict[str, str]) -> FreeBuffer:
    return dataclasses.replace(op, label=_name(op.label, p, r))


def _rw_sem_op(op: Any, k: int, p: str, r: dict[str, str]) -> Any:
    return dataclasses.replace(op, sem=_ref(op.sem, p, r))


def _rw_dma(op: DmaStart, k: int, p: str, r: dict[str, str]) -> DmaStart:
    return dataclasses.replace(
        op, dst_sem=_ref(op.dst_sem, p, r), src_sem=_ref(op.src_sem, p, r),
        src_buf=None if op.src_buf is None else _name(op.src_buf, p, r),
        dst_buf=None if op.dst_buf is None else _name(op.dst_buf, p, r))


def _rw_access(op: Access, k: int, p: str, r: dict[str, str]) -> Access:
    return dataclasses.replace(op, buf=_name(op.buf, p, r))


def _rw_barrier(op: Barrier, k: int, p: str, r: dict[str, str]) -> Barrier:
    return dataclasses.replace(op, name=f"{op.name}#{k}")


_REWRITE = {AllocSem: _rw_alloc_sem, AllocBuffer: _rw_alloc_buffer, FreeBuffer: _rw_free, Signal: _rw_sem_op,
            Wait: _rw_sem_op, Read: _rw_sem_op, DmaStart: _rw_dma, Access: _rw_access, Barrier: _rw_barrier}


def _communicates(program: Program) -> bool:
    """PRG-104: whether a call sends to another device (a remote signal or copy), as Mosaic's
    `has_communication` asks of the kernel's remote operations (with `skip_device_barrier` the
    caller keeps no start barrier either)."""
    return any(type(op) in (Signal, DmaStart) and op.device is not None for ops in program.cores for op in ops)


_SHARED_ID = ("CompilerParams: \"using the same collective_id does not guarantee that the same barrier semaphore "
              "will be allocated between kernels\"")


def _barrier_labels(invs: tuple[Invocation, ...], lowered: list[Program]) -> dict[int, str]:
    """PRG-105: call -> the label of its barrier semaphore in the program, for the calls that use one and
    have a collective id (one semaphore per collective id, which one kernel's calls share; a call without
    a collective id keeps the barrier reference, which fails as a single kernel's does, ERR-6)."""
    by_id: dict[int, Invocation] = {}
    out: dict[int, str] = {}
    for inv, prog in zip(invs, lowered):
        uses = any(type(op) is GetBarrierSem for ops in prog.cores for op in ops)
        if not uses or inv.call.collective_id is None:
            continue
        first = by_id.setdefault(inv.call.collective_id, inv)
        if first.call is not inv.call and _kernel_text(first) != _kernel_text(inv):
            raise Unsupported("program", f"{first.describe()} and {inv.describe()} are different kernels on collective "
                              f"id {inv.call.collective_id}: whether they share a barrier semaphore is not promised "
                              f"({_SHARED_ID}), and the two cases are not explored yet", inv.loc)
        out[inv.index] = f"barrier_semaphore(collective_id={inv.call.collective_id})"
    return out


def _kernel_text(inv: Invocation) -> tuple[str, object, str]:
    """What tells two kernels apart: name, line and the kernel's jaxpr as text."""
    return inv.name, inv.loc, str(inv.call.jaxpr)


def _collective_id(invs: tuple[Invocation, ...], lowered: list[Program], barriers: dict[int, str]) -> int | None:
    """The program's collective id: None while a call without one uses the barrier semaphore (ERR-6)."""
    for inv, prog in zip(invs, lowered):
        if inv.index not in barriers and any(type(op) is GetBarrierSem for ops in prog.cores for op in ops):
            return None
    ids = [inv.call.collective_id for inv in invs if inv.call.collective_id is not None]
    return ids[0] if ids else None


def _interpreter(invs: tuple[Invocation, ...], lowered: list[Program], order: tuple[int, ...]):
    """PRG-107: under the interpreter a call with a semaphore output fails at launch (LAUNCH-2, D21) and
    the jitted program raises there. When it is the first call nothing runs: the composed program
    carries that failure. When earlier calls run first, they take and return no semaphore (a semaphore
    input comes from an output, which would fail first), and the interpreter runs each as a single
    kernel (a fresh manager, all devices meeting at its start and end, LAUNCH-1)."""
    first = _first_failing(lowered, order)
    if first is None:
        return None, True, ""
    if first == order[0]:
        return lowered[first].launch_failure, True, ""
    inv = invs[first]
    return lowered[first].launch_failure, False, (
        f"interpret mode raises {lowered[first].launch_failure.python_type}: {lowered[first].launch_failure.message} "
        f"at the launch of {inv.describe()} (a "
        "semaphore output, specs/divergences.md D21), after the calls before it: nothing after it runs")


def _first_failing(lowered: list[Program], order: tuple[int, ...]) -> int | None:
    return next((k for k in order if lowered[k].launch_failure is not None), None)


__all__ = ["ComposedProgram", "MAX_ORDERS", "compose", "compose_orders", "operand_labels"]
