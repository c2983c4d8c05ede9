"""The lifetime of `run_scoped` buffers and semaphores (rules BUF-13 .. BUF-15, SEM-10; spec:
specs/semantics/buffers.md, kernels.md).

A `run_scoped` buffer exists on its core from the scope's `AllocBuffer` to its `FreeBuffer`. A copy
that reads or writes one is confined to that window when it is started after the scope is entered
and its half on the buffer is done before the scope ends (BUF-13); what jax's interpreter raises
when a half runs outside it is BUF-14; on a TPU the scopes of one allocation site share one stack
slot (BUF-15), so a copy that outlives its scope touches the memory of the next one. A scoped
semaphore's window runs from its `AllocSem` to the `FreeBuffer` that ends its scope, and a signal or
a copy's half that counts on it must land inside (SEM-10).
"""

from __future__ import annotations

import dataclasses

from semcheck.model.ops import AllocBuffer, AllocSem, DmaStart, FreeBuffer, Program, Signal, Wait
from semcheck.model.step import target_core


@dataclasses.dataclass(frozen=True)
class ScopeTouch:
    """BUF-13: one half of a copy on a `run_scoped` buffer, and the scope's window on its owner core.

    `core`/`pc`: the copy's start; `half`: "read" (its source) or "write" (its destination); `owner`:
    the global core whose scope holds the buffer; `enter`/`free`: the positions of the scope's
    `AllocBuffer` and `FreeBuffer` there (`free` is None when the scope does not end in the kernel).
    `kind` "semaphore" (SEM-10): `label` is a scoped semaphore a copy's half counts on ("read": the
    send semaphore, "write": the receive semaphore) or a remote signal lands on (`half` "signal").
    `empty`: the copy moves no bytes (ACC-67: it touches nothing on a TPU, but jax's interpreter still looks
    its buffer's key up when it runs the half, ACC-68).
    """

    core: int
    pc: int
    half: str
    label: str
    owner: int
    enter: int | None
    free: int | None
    kind: str = "buffer"
    empty: bool = False


def scope_windows(ops: tuple, alloc: type = AllocBuffer) -> dict[str, tuple[int, int | None]]:
    """BUF-13 (SEM-10 with `alloc=AllocSem`): the window of every `run_scoped` buffer (semaphore) of one
    core: label -> (its allocation's position, its `FreeBuffer`'s, or None). A `run_scoped` allocation is
    the core's alone (scope "core")."""
    out: dict[str, tuple[int, int | None]] = {}
    for pc, op in enumerate(ops):
        t = type(op)
        if t is alloc and op.scope == "core":
            out[op.label] = (pc, None)
        elif t is FreeBuffer and op.label in out:
            out[op.label] = (out[op.label][0], pc)
    return out


def scope_touches(program: Program) -> list[ScopeTouch]:
    """BUF-13: every copy half on a `run_scoped` buffer, with the window it must keep to (after SEM-10's
    touches of scoped semaphores, `semaphore_touches`).

    The read half touches the source on the issuing core; the write half the destination on the
    target core (DMA-1), named there by the issuer's label, as the interpreter keys it by the issuer's
    buffer id (BUF-9). A destination label the target core never allocates has no window (`enter` None).
    Copies whose target is out of range fail at their start (ERR-4) and touch nothing. A copy of no bytes
    is kept, marked `empty`: on a TPU it touches nothing (ACC-67), but jax's interpreter looks the buffer's
    key up when it runs either half, whatever its size, and raises where the scope is not live (ACC-68)."""
    out = semaphore_touches(program)
    windows = [scope_windows(ops) for ops in program.cores]
    scoped = set().union(*windows) if windows else set()
    if not scoped:
        return out
    for g, ops in enumerate(program.cores):
        for pc, op in enumerate(ops):
            if type(op) is not DmaStart:
                continue
            empty = op.nbytes == 0  # ACC-67, ACC-68
            if op.src_buf in scoped:
                enter, free = windows[g].get(op.src_buf, (None, None))
                out.append(ScopeTouch(g, pc, "read", op.src_buf, g, enter, free, empty=empty))
            if op.dst_buf in scoped:
                dst = target_core(program, "hardware", g, op.device, op.core, dma=True)
                if isinstance(dst, int):
                    enter, free = windows[dst].get(op.dst_buf, (None, None))
                    out.append(ScopeTouch(g, pc, "write", op.dst_buf, dst, enter, free, empty=empty))
    return out


def touch_counts(program: Program, touch: ScopeTouch, mode: str) -> bool:
    """ACC-67, ACC-68: whether BUF-13 asks this touch under `mode`. A half of no bytes touches nothing on a
    TPU; under an interpreter mode it counts where the interpreter can run it outside the scope's window
    (`interpreter_raises`, or a target that never allocates the buffer), since its lookup of the key raises
    there as any copy's does."""
    if not touch.empty:
        return True
    return mode != "hardware" and (touch.enter is None or interpreter_raises(program, touch, mode))


def region_of(site: str) -> str:
    """SEM-10: the `run_scoped` region a scoped semaphore's allocation site belongs to (a site is
    `<region>#<k>`, the k-th allocation of the region): a region's allocations are live together."""
    return site.rsplit("#", 1)[0]


def _call_of(region: str) -> str:
    """The call a region belongs to in a program of several calls (its sites carry the call's prefix
    before `scoped@`): another call's kernel is PRG-15's question, not a slot of this one's."""
    i = region.find("scoped@")
    return region[:i] if i >= 0 else ""


def semaphore_touches(program: Program) -> list[ScopeTouch]:
    """SEM-10: every count that can land on a `run_scoped` semaphore from outside its scope's own body, on a
    core where another region allocates semaphores too: a copy's half (its send semaphore on the issuer,
    its receive semaphore on the target, DMA-1) and a signal to another core (a core's own signal runs where
    it stands, inside the body that names the semaphore). The window is the target core's scope of the same
    label: the interpreter looks the semaphore up by the issuer's id (SEM-3), which is the target's
    allocation of the scope when the cores allocate in step. Where the target's scoped semaphores all come
    from the one region, its slots hold that region's semaphores only, and a count outside the window is
    the next (or the previous) execution's, which HW-1 already counts there."""
    allocs = [[op for op in ops if type(op) is AllocSem and op.scope == "core"] for ops in program.cores]
    if not any(allocs):
        return []
    windows = [scope_windows(ops, AllocSem) for ops in program.cores]
    scoped = {a.label: region_of(a.site) for core in allocs for a in core}
    regions = [{region_of(a.site) for a in core} for core in allocs]
    out: list[ScopeTouch] = []

    def touch(g: int, pc: int, half: str, label: str, owner: int) -> None:
        mine = scoped[label]
        if any(r != mine and _call_of(r) == _call_of(mine) for r in regions[owner]):  # may take the slot
            enter, free = windows[owner].get(label, (None, None))
            out.append(ScopeTouch(g, pc, half, label, owner, enter, free, "semaphore"))

    for g, ops in enumerate(program.cores):
        for pc, op in enumerate(ops):
            t = type(op)
            if t is Signal and op.sem.label in scoped:
                dst = target_core(program, "hardware", g, op.device, op.core, dma=False)
                if isinstance(dst, int) and dst != g:
                    touch(g, pc, "signal", op.sem.label, dst)
            elif t is DmaStart:
                if op.src_sem is not None and op.src_sem.label in scoped:
                    touch(g, pc, "read", op.src_sem.label, g)
                if op.dst_sem.label in scoped:
                    dst = target_core(program, "hardware", g, op.device, op.core, dma=True)
                    if isinstance(dst, int):
                        touch(g, pc, "write", op.dst_sem.label, dst)
    return out


def unrecorded_copies(program: Program) -> list[DmaStart]:
    """BUF-13: where the program has `run_scoped` buffers, its copies whose buffers the front end did not
    record (ACC-3): any of them may touch one, so the scope check cannot be made."""
    cores = program.cores
    if not any(type(op) is AllocBuffer and op.scope == "core" for ops in cores for op in ops):
        return []
    return [op for ops in cores for op in ops if type(op) is DmaStart and (op.src_buf is None or op.dst_buf is None)]


def interpreter_raises(program: Program, touch: ScopeTouch, mode: str) -> bool:
    """BUF-14: whether jax's interpreter, under `mode`, can run this half outside the scope's window,
    where the buffer's key is gone from the manager and the half raises `KeyError(key)` (BUF-4). A prediction
    from the program's text, for the report; the runs themselves raise by `scope_keys`.

    `eager` runs both halves inside the start, on the issuing core: a half on the issuer's own scope is
    inside it (the start is in the scope's body); a write into another core's scope runs then and
    there. `on_wait` runs a half when a waiter pops its task (DMA-3, DMA-4): the read task waits on
    (send semaphore, issuer), the read-and-write task on (receive semaphore, target). The half stays in
    the window when every wait that can pop one of its tasks is a wait of the owner core inside it.
    Asked of a half BUF-13 found may run outside the window (where it is confined, no mode runs it
    outside: every wait that lets the owner leave needs its arrival)."""
    if mode == "hardware" or touch.kind == "semaphore":  # no semaphore is freed, nothing raises (SEM-9)
        return False
    if mode == "eager":
        return touch.owner != touch.core
    if touch.free is None or touch.enter is None:
        return True
    op = program.cores[touch.core][touch.pc]
    queues = {(op.dst_sem, target_core(program, "hardware", touch.core, op.device, op.core, dma=True))}
    if op.src_sem is not None and touch.half == "read":  # the read task touches only the source
        queues.add((op.src_sem, touch.core))
    for sem, core in queues:
        for pc, later in enumerate(program.cores[core]):
            if type(later) is Wait and later.sem == sem and not (core == touch.owner and touch.enter < pc < touch.free):
                return True
    return False


def interpreter_keeps_inside(program: Program, touch: ScopeTouch, mode: str) -> bool:
    """PRG-210: whether jax's interpreter, under `mode`, runs this half (or lands this count) inside its
    scope's window in every run, whatever the order of the cores, read off the program's text: the
    scope is the issuing core's own and the start lies inside its window; under `eager` the half runs in
    the start (BUF-14), under `on_wait` only a wait of that core inside the window can pop its task
    (BUF-14's queues, asked of a scoped semaphore's count as of a buffer's half). False where it cannot
    tell (a touch of another core's scope, a scope that does not end in the kernel, `hardware`)."""
    if mode == "hardware" or touch.owner != touch.core or touch.enter is None or touch.free is None:
        return False
    if not touch.enter < touch.pc < touch.free:
        return False
    return mode == "eager" or not interpreter_raises(program, dataclasses.replace(touch, kind="buffer"), mode)


def stack_slot(label: str) -> str:
    """BUF-15: the memory a `run_scoped` buffer label denotes on a TPU: its allocation site.

    Mosaic lowers `run_scoped` to a region whose buffers are stack allocations (`memref.alloca`): one
    slot per allocation in the kernel's code, so every execution of the site (each iteration of a
    loop around it) uses the same memory. A label is `buf@<site>/<instance>`; other labels are kept."""
    if label.startswith("buf@") and "/" in label:
        return label.rsplit("/", 1)[0]
    return label


__all__ = ["ScopeTouch", "interpreter_keeps_inside", "interpreter_raises", "scope_touches", "scope_windows", "region_of", "semaphore_touches", "stack_slot",
           "unrecorded_copies"]
