"""One `Program` for a program of kernel calls, as a TPU runs it (spec PRG-104 .. PRG-109, PRG-121).

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
* the exit checks go: one check per device at the program's end (PRG-106);
* a linked buffer input is the producer's HBM array, blocked or not, and the interpreter's read of
  the results at the end of each call goes; the uses of results outside the calls (XLA operations,
  scalar operands, the program's result) become accesses on each device's core 0 (PRG-121).

Nothing here decides a property: the composed program goes to the checks every kernel goes to, where the
fold finds it repeating when every device runs the same calls (PRG-132).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from semcheck.checker.frontend.call_boundary import is_boundary
from semcheck.checker.frontend.errors import Unsupported
from semcheck.checker.frontend.grid_copies import GridCopyLoc
from semcheck.checker.frontend.program_ir import Invocation, Outside, ProgramIR, iteration_words
from semcheck.model.ops import (
    Loc,
    BARRIER,
    Access,
    AllocBuffer,
    AllocSem,
    Barrier,
    DmaStart,
    ExitCheck,
    FreeBuffer,
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
    reading: str = ""  # PRG-116: which reading of a collective id shared by different kernels ("" when none)
    unexplored: str = ""  # PRG-117: why the other orders XLA may choose were not composed ("" when they were)
    branch: str = ""  # PRG-126: the branches of the undecided conds this program takes ("" when none)
    computed_by: str = ""  # PRG-169: the kernel calls run for values its calls read ("" when none)
    unwritten: str = ""  # PRG-200: of those, the ones that may read memory nothing writes ("" when none)
    unpredicted: str = ""  # ERR-32: a window of a call the interpreter may refuse unseen ("" when none)
    past_end: str = ""  # ERR-62: a load or store of a call past its buffer's end ("" when none)

    def position(self, call: int) -> int:
        """Where call `call` runs in `order`."""
        return self.order.index(call)

    def describe_order(self) -> str:
        return ", ".join(f"{self.ir.invocations[k].name} (call {k})" for k in self.order)

    @property
    def fails_while_lowered(self) -> bool:
        """PRG-12 / PRG-107: whether the interpreter raises while it lowers the computation, before any call runs.
        Then the verdicts of `eager` and `on_wait` are the failure's in every order XLA may give the calls, and at
        every trip count of a loop around them (PRG-214)."""
        return self.interpreter_exact and self.program.launch_failure is not None


MAX_ORDERS = 8
"""The most orders of one program's calls that are composed and checked (PRG-101)."""


def compose_orders(ir: ProgramIR, lowered: list[Program], *, name: str,
                   reading: str | None = None) -> list[ComposedProgram]:
    """One composed program per order of the calls XLA may choose (PRG-101), the traced order first;
    `reading` as `_barrier_labels` takes it (PRG-116)."""
    if ir.unknown is not None:
        reason, loc = ir.unknown
        raise Unsupported("program", reason, loc)
    orders = ir.orders(MAX_ORDERS)
    if orders is None:
        raise Unsupported("program", f"its calls' data dependences leave more than {MAX_ORDERS} orders XLA may run "
                          "them in: not explored", ir.invocations[0].loc)
    return [compose(ir, lowered, name=name, order=order, reading=reading) for order in orders]


def compose(ir: ProgramIR, lowered: list[Program], *, name: str,
            order: tuple[int, ...] | None = None, reading: str | None = None) -> ComposedProgram:
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
    barriers = _barrier_labels(invs, lowered, reading)
    cid = _collective_id(invs, lowered, barriers)
    renames: list[dict[str, str]] = []
    dropped: list[set[str]] = []
    for k, inv in enumerate(invs):
        r, d = call_renames(inv, ir, renames)
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
    uses = _use_accesses(ir, renames, order)

    def on_every_device(accesses: list[tuple[Access, frozenset[int] | None]], k: int) -> None:
        for d in range(topo.num_devices):
            g = topo.global_core(d, 0)
            mine = [a for a, devices in accesses if devices is None or d in devices]  # PRG-145
            cores[g].extend(mine)
            calls[g].extend([k] * len(mine))

    for k in order:
        inv, prog = invs[k], lowered[k]
        on_every_device(uses.get(("entry", k), []), k)
        communicates = program_communicates(prog) and not getattr(inv.call.compiler_params, "skip_device_barrier", False)
        if inv.devices is not None and communicates and k not in barriers \
                and len(inv.devices) < topo.num_devices:
            raise Unsupported("program", f"{inv.describe()} communicates without a barrier semaphore of its own, so a "
                              "TPU puts a device barrier at its start (PRG-104), and only some devices run it: which "
                              "devices that barrier waits for is not documented (specs/deciding/programs.md PRG-145)", inv.loc)
        for g, ops in enumerate(prog.cores):
            if inv.devices is not None and topo.device_of(g) not in inv.devices:
                continue  # PRG-145: a device in another branch of a cond does not run the call
            mine = [_rewrite(op, k, call_prefix(inv), renames[k]) for op in ops
                    if _kept(op, dropped[k], communicates, k in barriers)]
            cores[g].extend(mine)
            calls[g].extend([k] * len(mine))
        on_every_device(uses.get(("after", k), []), k)
    on_every_device(uses.get(("end", -1), []), order[-1])
    last = invs[order[-1]].loc
    for d in range(topo.num_devices):
        cores[topo.global_core(d, 0)].append(ExitCheck(d, last))
    failure, exact, why = _interpreter(invs, lowered, order, ir.unlowerable)
    # how reports name each call's HBM buffers (Program.names): the call's own, under its prefix
    names = {call_prefix(invs[k]) + label: call_prefix(invs[k]) + nm for k in order for label, nm in lowered[k].names
             if program_label(label, call_prefix(invs[k]), renames[k]) == call_prefix(invs[k]) + label}
    names.update(iteration_names(invs[k] for k in order))  # PRG-187
    from semcheck.checker.frontend.collective_ids import composed_refusal

    program = Program(topo, tuple(tuple(ops) for ops in cores), collective_id=cid, name=name,
                      launch_failure=failure, names=tuple(names.items()),
                      tpu_failure=composed_refusal(invs, lowered),  # LAUNCH-7
                      detect_races=any(lowered[k].detect_races for k in order))  # RACE-1
    ran = () if exact else tuple(lowered[k] for k in order[:order.index(_first_failing(lowered, order)) + 1])
    return ComposedProgram(program, ir, exact, why, _race_gaps(ir, renames, cores, calls, order),
                           tuple(tuple(ks) for ks in calls), order, frozenset(barriers.values()), ran, reading or "")


def _use_accesses(ir: ProgramIR, renames: list[dict[str, str]],
                  order: tuple[int, ...]) -> dict[tuple[str, int], list[tuple[Access, frozenset[int] | None]]]:
    """PRG-121 (PRG-9's accesses across calls): each use of a call's result outside kernel calls as an
    access of the result's buffer on every device's core 0, keyed by where it goes: ("after", k) right after the last call it needs (the
    earliest point XLA may run it), ("entry", k) before call k (a scalar operand it reads), ("end", -1)
    after the last call (the program's result). A use is a write when XLA may reuse the buffer in place
    for the operation's result: no later use of the buffer, and the program does not return it."""
    from semcheck.checker.frontend.call_boundary import BoundaryLoc, full_region
    from semcheck.checker.frontend.grid import hbm_labels

    pos = {k: i for i, k in enumerate(order)}
    placed: list[tuple[tuple[str, int], int, str, Any]] = []  # (key, position, label, use)
    for use in ir.uses:
        v = use.value
        inv = ir.invocations[v.call]
        label = hbm_labels(inv.call).get(("output", v.output))
        if label is None:
            continue
        label = program_label(label, call_prefix(inv), renames[v.call])
        if use.kind == "result":
            key, at = ("end", -1), len(order)
        elif use.entry is not None:
            key, at = ("entry", use.entry), pos[use.entry] - 0.5
        else:
            k = max(use.after, key=lambda c: pos[c])
            key, at = ("after", k), pos[k] + 0.5
        placed.append((key, at, label, use))
    # where each buffer is used last: by a call that takes it, or by a placed use
    last: dict[str, float] = {}
    for link in ir.links:
        if link.kind != "buffer":
            continue
        producer = ir.invocations[link.producer]
        label = hbm_labels(producer.call).get(("output", link.output))
        if label is not None:
            label = program_label(label, call_prefix(producer), renames[link.producer])
            last[label] = max(last.get(label, -1), pos[link.consumer])
    for _, at, label, _ in placed:
        last[label] = max(last.get(label, -1), at)
    out: dict[tuple[str, int], list[tuple[Access, frozenset[int] | None]]] = {}
    seen: set[tuple] = set()
    for i, (key, at, label, use) in enumerate(placed):
        v = use.value
        inv = ir.invocations[v.call]
        name = [o for o in inv.call.operands if o.role == "output"][v.output].name
        later = any(a > at or (a == at and j > i) for j, (_, a, b, _) in enumerate(placed) if b == label) or \
            last.get(label, -1) > at
        write = use.kind == "xla" and use.entry is None and not later
        of = f"result {name!r} of {inv.describe()}"
        if use.kind == "result":
            what = f"the program's return of {of}"
        elif use.entry is not None:
            what = f"{use.what}, {of}"
        else:
            what = f"the XLA operation {use.what!r} on {of}" + (
                ", its last use, whose memory XLA may give to the operation's result" if write else "")
        if (key, label, what, use.devices) in seen:
            continue
        seen.add((key, label, what, use.devices))
        loc = BoundaryLoc(use.loc.file, use.loc.line, use.loc.text, what=what, kind=use.kind)
        shape = [o for o in inv.call.operands if o.role == "output"][v.output].shape
        # PRG-145: made by the devices that run the branch it is in
        out.setdefault(key, []).append((Access(label, full_region(shape), write, loc), use.devices))
    return out


def _race_gaps(ir: ProgramIR, renames: list[dict[str, str]], cores: list[list[Op]],
               calls: list[list[int]], order: tuple[int, ...]) -> tuple[str, ...]:
    """PRG-108: a copy that may still be in flight after the last use of its buffer in the program. The
    program models every use of a call's results (the calls' own accesses and copies, their grid copies,
    the XLA operations and the program's result, PRG-121); what it does not model is what XLA does with
    a buffer after its last use (it may give the memory to another value), so a copy whose buffer's last
    use comes before the last wait on the copy's semaphore for that buffer (the send semaphore for the
    source, the receive semaphore for the destination), or that no call waits on while the program
    does not return the buffer, may race with whatever XLA puts there."""
    pos = {k: i for i, k in enumerate(order)}
    last_wait: dict[str, int] = {}  # semaphore -> the position of the last call waiting on it
    alive: dict[str, float] = {}  # buffer -> the position of the last call (or use) that touches it
    for ops, ks in zip(cores, calls):
        for op, k in zip(ops, ks):
            t = type(op)
            if t is Wait:
                last_wait[op.sem.label] = max(pos[k], last_wait.get(op.sem.label, -1))
            for buf in ((op.buf,) if t is Access else (op.src_buf, op.dst_buf) if t is DmaStart else ()):
                if buf is not None:
                    at = float("inf") if is_boundary(op) and op.loc.kind == "result" else pos[k]
                    alive[buf] = max(alive.get(buf, -1), at)
    from semcheck.checker.frontend.grid import hbm_labels

    for k in order:  # a call keeps every operand and result alive until its exit, touched or not
        inv = ir.invocations[k]
        hbm = hbm_labels(inv.call)
        for (role, j), label in hbm.items():
            buf = program_label(label, call_prefix(inv), renames[k])
            alive[buf] = max(alive.get(buf, -1), pos[k])
            if role == "input" and j < len(inv.inputs) and isinstance(inv.inputs[j], Outside) \
                    and inv.inputs[j].what == "a program input":
                alive[buf] = float("inf")  # the caller's array: XLA does not reuse it inside the program
    gaps: list[str] = []
    for k in order:  # a kernel that writes an operand it does not alias to a result changes an XLA value
        inv = ir.invocations[k]
        hbm = hbm_labels(inv.call)
        outs = {label for (role, _), label in hbm.items() if role == "output"}
        unaliased = {program_label(label, call_prefix(inv), renames[k]) for (role, _), label in hbm.items()
                     if role == "input" and label not in outs}
        for ops, ks in zip(cores, calls):
            for op, kk in zip(ops, ks):
                if kk == k and ((type(op) is Access and op.write and op.buf in unaliased)
                                or (type(op) is DmaStart and op.dst_buf in unaliased)):
                    text = (f"{inv.describe()} writes an operand it does not alias to a result, at {op.loc}: XLA "
                            "takes operands as unchanged, and where it then puts the operand's other uses is not "
                            "modelled")
                    if text not in gaps:
                        gaps.append(text)
    for ops, ks in zip(cores, calls):
        for op, k in zip(ops, ks):
            if type(op) is not DmaStart:
                continue
            src_sem = op.src_sem if op.src_sem is not None else op.dst_sem
            for buf, sem in ((op.src_buf, src_sem), (op.dst_buf, op.dst_sem)):
                if buf is None:
                    continue
                waited, until = last_wait.get(sem.label, -1), alive.get(buf, pos[k])
                if (waited < pos[k] and until != float("inf")) or waited > until:
                    text = (f"the copy at {op.loc} started by {ir.invocations[k].describe()} may still be in flight "
                            "after the last use of its buffer in the program, where XLA may give the buffer's "
                            "memory to another value (semcheck does not model XLA's buffer assignment)")
                    if text not in gaps:
                        gaps.append(text)
    return tuple(gaps)


def iteration_names(invs: Any) -> dict[str, str]:
    """PRG-187: how reports say which iteration of which loop a call of the program is (`Program.names`, keyed by
    the call's prefix without its dot; `timeline.label_name` reads them)."""
    return {call_prefix(inv)[:-1]: iteration_words(inv.loops) for inv in invs if inv.loops}


def call_prefix(inv: Invocation) -> str:
    return f"{inv.name}#{inv.index}."


def operand_labels(inv: Invocation) -> dict[tuple[str, int], str]:
    """(role, position among the role's operands) -> the label the call's lowering gives it (LAUNCH-1)."""
    from semcheck.checker.frontend.grid import hbm_labels, launch_operands

    _, args, _ = launch_operands(inv.call)
    hbm = hbm_labels(inv.call)
    out: dict[tuple[str, int], str] = {}
    seen = {"input": 0, "output": 0}
    for op, arg in zip(inv.call.operands, args):
        if op.role not in seen:
            continue
        j = seen[op.role]
        seen[op.role] += 1
        label = getattr(arg, "label", None)
        if inv.call.sees_array(op):
            label = hbm[(op.role, j)]
        if label is not None:
            out[(op.role, j)] = label
    return out


def call_renames(inv: Invocation, ir: ProgramIR, earlier: list[dict[str, str]]) -> tuple[dict[str, str], set[str]]:
    """Local label -> program label for one call, and the labels a linked input brings (not allocated again)."""
    from semcheck.checker.frontend.grid import hbm_labels

    labels = operand_labels(inv)
    renames: dict[str, str] = {}
    dropped: set[str] = set()
    for j, link in ir.links_into(inv.index).items():
        producer = ir.invocations[link.producer]
        if link.kind == "buffer":
            # PRG-121: the array in HBM is the producer's, whether the kernel sees it whole (pl.ANY) or the
            # grid copies its blocks in (GRID-1: those copies read it at the call's entry)
            mine = hbm_labels(inv.call).get(("input", j))
            theirs = hbm_labels(producer.call).get(("output", link.output))
        else:
            mine, theirs = labels.get(("input", j)), operand_labels(producer).get(("output", link.output))
        if mine is None or theirs is None:
            continue
        renames[mine] = earlier[link.producer].get(theirs, call_prefix(producer) + theirs)
        dropped.add(mine)
    return renames, dropped


def program_label(label: str, k_prefix: str, renames: dict[str, str]) -> str:
    if label == BARRIER:
        return renames.get(label, label)
    return renames.get(label, k_prefix + label)


def _ref(ref: SemRef | None, p: str, renames: dict[str, str]) -> SemRef | None:
    return None if ref is None else SemRef(program_label(ref.label, p, renames), ref.index)


def _kept(op: Op, dropped: set[str], communicates: bool, own_barrier: bool) -> bool:
    t = type(op)
    if t is ExitCheck or (op.fetches_barrier and own_barrier):
        return False
    if t is Access and getattr(op.loc, "kind", "") == "exit" and is_boundary(op):
        return False  # the interpreter's own read of the results: on a TPU the uses are the program's (PRG-121)
    if t is Barrier:  # a call with a barrier semaphore of its own gets no device barrier (PRG-104, PRG-125)
        return op.name != "cleanup" and (op.name != "start" or (communicates and not own_barrier))
    if t in (AllocSem, AllocBuffer):
        return op.label not in dropped
    return True


def _rewrite(op: Op, k: int, p: str, renames: dict[str, str]) -> Op:
    """`op` of call `k` (label prefix `p`) with the program's labels and barrier names."""
    t = type(op)
    return _REWRITE[t](op, k, p, renames) if t in _REWRITE else op


def _rw_alloc_sem(op: AllocSem, k: int, p: str, r: dict[str, str]) -> AllocSem:
    return dataclasses.replace(op, label=program_label(op.label, p, r), site=p + op.site)


def _rw_alloc_buffer(op: AllocBuffer, k: int, p: str, r: dict[str, str]) -> AllocBuffer:
    return dataclasses.replace(op, label=program_label(op.label, p, r))


def _rw_free(op: FreeBuffer, k: int, p: str, r: dict[str, str]) -> FreeBuffer:
    return dataclasses.replace(op, label=program_label(op.label, p, r))


def _rw_sem_op(op: Any, k: int, p: str, r: dict[str, str]) -> Any:
    return dataclasses.replace(op, sem=_ref(op.sem, p, r))


def _rw_dma(op: DmaStart, k: int, p: str, r: dict[str, str]) -> DmaStart:
    return dataclasses.replace(
        op, dst_sem=_ref(op.dst_sem, p, r), src_sem=_ref(op.src_sem, p, r),
        src_buf=None if op.src_buf is None else program_label(op.src_buf, p, r),
        dst_buf=None if op.dst_buf is None else program_label(op.dst_buf, p, r))


def _rw_access(op: Access, k: int, p: str, r: dict[str, str]) -> Access:
    if isinstance(op.loc, GridCopyLoc):  # PRG-124: which call's pipeline the copy is
        return dataclasses.replace(op, buf=program_label(op.buf, p, r), loc=dataclasses.replace(op.loc, call=k))
    return dataclasses.replace(op, buf=program_label(op.buf, p, r))


def _rw_barrier(op: Barrier, k: int, p: str, r: dict[str, str]) -> Barrier:
    return dataclasses.replace(op, name=f"{op.name}#{k}")


_REWRITE = {AllocSem: _rw_alloc_sem, AllocBuffer: _rw_alloc_buffer, FreeBuffer: _rw_free, Signal: _rw_sem_op,
            Wait: _rw_sem_op, Read: _rw_sem_op, DmaStart: _rw_dma, Access: _rw_access, Barrier: _rw_barrier}


def program_communicates(program: Program) -> bool:
    """PRG-104: whether a call sends to another device (a remote signal or copy), as Mosaic's
    `has_communication` asks of the kernel's remote operations (with `skip_device_barrier` the
    caller keeps no start barrier either)."""
    from semcheck.model.symmetric import class_cores

    return any(type(op) in (Signal, DmaStart) and op.device is not None for ops in class_cores(program) for op in ops)


_SHARED_ID = ("CompilerParams: \"using the same collective_id does not guarantee that the same barrier semaphore "
              "will be allocated between kernels\"")


READINGS = ("one barrier semaphore for every kernel of the collective id",
            "one barrier semaphore per kernel of the collective id")
"""PRG-116: the two readings of a collective id that different kernels use."""


def shares_id_between_kernels(ir: ProgramIR, lowered: list[Program]) -> bool:
    """PRG-116: whether different kernels use the barrier semaphore of one collective id."""
    try:
        _barrier_labels(ir.invocations, lowered)
    except Unsupported:
        return True
    return False


def _barrier_labels(invs: tuple[Invocation, ...], lowered: list[Program], reading: str | None = None) -> dict[int, str]:
    """PRG-105: call -> the label of its barrier semaphore in the program, for the calls that use one and
    have a collective id (one semaphore per collective id, which one kernel's calls share; a call without
    a collective id keeps the barrier reference, which fails as a single kernel's does, ERR-6)."""
    by_id: dict[int, Invocation] = {}
    out: dict[int, str] = {}
    kernels: dict[tuple, int] = {}  # PRG-116, per-kernel reading: kernel -> its number on its id
    for inv, prog in zip(invs, lowered):
        uses = any(op.fetches_barrier for ops in prog.cores for op in ops)
        if uses and inv.id_error is not None:
            raise Unsupported("program", f"jax cannot lower {inv.describe()} for a TPU: ValueError: {inv.id_error} "
                              "(specs/semantics/calls.md PRG-5)", inv.loc)
        cid = inv.collective_id  # PRG-125: the id jax lowers the call with, its own or one jax picked
        if not uses or cid is None:
            continue
        first = by_id.setdefault(cid, inv)
        if reading == READINGS[1]:  # PRG-116: each kernel its own semaphore
            n = kernels.setdefault((cid, _kernel_text(inv)), len(kernels))
            out[inv.index] = f"barrier_semaphore(collective_id={cid}, kernel {n} {inv.name})"
            continue
        if reading is None and first.call is not inv.call and _kernel_text(first) != _kernel_text(inv):
            raise Unsupported("program", f"{first.describe()} and {inv.describe()} are different kernels on collective "
                              f"id {cid}: whether they share a barrier semaphore is not promised "
                              f"({_SHARED_ID}), and the two cases are not explored yet", inv.loc)
        out[inv.index] = f"barrier_semaphore(collective_id={cid})"
    return out


def _kernel_text(inv: Invocation) -> tuple[str, object, str]:
    """What tells two kernels apart: name, line and the kernel's jaxpr as text."""
    return inv.name, inv.loc, str(inv.call.jaxpr)


def _collective_id(invs: tuple[Invocation, ...], lowered: list[Program], barriers: dict[int, str]) -> int | None:
    """The program's collective id: None while a call without one uses the barrier semaphore (ERR-6)."""
    for inv, prog in zip(invs, lowered):
        if inv.index not in barriers and any(op.fetches_barrier for ops in prog.cores for op in ops):
            return None
    ids = [inv.call.collective_id for inv in invs if inv.call.collective_id is not None]
    return ids[0] if ids else None


def _interpreter(invs: tuple[Invocation, ...], lowered: list[Program], order: tuple[int, ...],
                 unlowerable: tuple[int, Any] | None = None):
    """PRG-107: under the interpreter a call with a semaphore output fails at launch (LAUNCH-2, D21) and
    the jitted program raises there. When it is the first call, or every call before it is in the same
    top-level computation (PRG-12: it fails while that computation is lowered), nothing runs: the
    composed program carries that failure. When calls of earlier computations run first, they take and return no semaphore (a semaphore
    input comes from an output, which would fail first), and the interpreter runs each as a single
    kernel (a fresh manager, all devices meeting at its start and end, LAUNCH-1). PRG-221: jax lowers every call
    of a computation, the branches and loop bodies no device runs included (`unlowerable`: the first computation
    it fails to lower, and how), so a call with a semaphore result there fails the program too."""
    first = _first_failing(lowered, order)
    if unlowerable is not None and (first is None or unlowerable[0] < invs[first].call.unit):
        unit, failure = unlowerable
        if all(invs[k].call.unit >= unit for k in order):  # no call of the program runs
            return failure, True, ""
        at = getattr(failure, "loc", None) or (Loc(failure.file, failure.line, failure.text)
                                                 if getattr(failure, "line", 0) else invs[order[0]].loc)
        raise Unsupported("program", "a kernel call that no device runs (in a cond's other branch or a loop body) "
                          f"fails the lowering of its computation in interpret mode ({failure.message}), after "
                          "the calls of earlier computations ran: not modelled (PRG-221, PRG-222)", at)
    if first is None:
        return None, True, ""
    before = order[:order.index(first)]
    if all(invs[k].call.unit == invs[first].call.unit for k in before):
        # PRG-12: the failure is raised while its computation is lowered, so none of its calls runs
        return lowered[first].launch_failure, True, ""
    inv = invs[first]
    return lowered[first].launch_failure, False, (
        f"interpret mode raises {lowered[first].launch_failure.python_type}: {lowered[first].launch_failure.message} "
        f"at the launch of {inv.describe()} (a "
        "semaphore output, specs/semantics/divergences.md D21), after the calls before it: nothing after it runs")


def _first_failing(lowered: list[Program], order: tuple[int, ...]) -> int | None:
    return next((k for k in order if lowered[k].launch_failure is not None), None)


__all__ = ["ComposedProgram", "MAX_ORDERS", "READINGS", "compose", "compose_orders", "operand_labels",
           "shares_id_between_kernels"]
