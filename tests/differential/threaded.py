"""Run a model-IR program on jax's real manager, one Python thread per core, as the interpreter does.

`run_on_jax(program, mode)` executes a `semcheck.model.Program` (built with
`semcheck.model.launch`) with jax's own interpreter callbacks
(`_allocate_semaphores`, `_allocate_buffer`, `get_barrier_semaphore`,
`semaphore_signal`, `semaphore_wait`, `dma_start`, `dma_wait`, `_barrier`,
`_clean_up_shared_memory`, `_update_clocks_for_device_barrier`, `fail`), on a
fresh `SharedMemory` made current for the run:

* each device runs in its own thread with the top-level token: it allocates
  its operands and scratch, passes the start barrier, runs its cores, checks
  its counts, and waits on the clean-up barrier;
* a device with several cores runs its cores' bodies in one thread each
  with the nested token, joins them, and on any exception calls the
  interpreter's `fail` for the device (as its thread map does);
* DMAs move real bytes: each DMA of the program gets a source and a
  destination buffer of its byte count, so the semaphores are signalled
  with the byte count the interpreter computes from the data.

The model's `Read` has no interpreter rule (jax cannot interpret
`semaphore_read`); it runs as a lookup and a `Semaphore.read`, wrapped in the
interpreter's failure propagation.

A run is hung when every thread left is blocked (in a wait, at a barrier, or
joining its device's cores) and nothing progressed for `quiet` seconds; a
busy thread (say, allocating thirty thousand semaphores) postpones the
verdict up to `cap` seconds. The harness then records where every core is and
every count, marks the manager failed and aborts its barriers so the threads
end.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time

import numpy as np

from semcheck.model import (
    BARRIER,
    ExplorationLimit,
    AllocBuffer,
    AllocSem,
    Barrier,
    DmaStart,
    ExitCheck,
    FreeBuffer,
    GetBarrierSem,
    Outcome,
    Program,
    Read,
    Signal,
    Wait,
    enabled,
    explore,
    fast_run,
    step,
)
from semcheck.model.run import classify
from semcheck.model.state import State
from semcheck.model.step import failure_is_global

from ._support import load_runner

runner = load_runner()

TOP = 42  # the interpreter's top-level token value
NESTED = 1337  # the token value inside its thread map
DMA_BUFFER_BASE = 20_000  # ids of the harness's DMA buffers, away from the kernel's own
QUIET = float(os.environ.get("SEMCHECK_HANG_SECONDS", "1.0"))  # blocked this long: a hang


def _scoped(label: str | None) -> bool:
    """A run_scoped buffer's label (BUF-15: `buf@<site>/<instance>`)."""
    return label is not None and label.startswith("buf@")


class HangAbort(Exception):
    """Set as the manager's failure by the harness to end a hung run."""


@dataclasses.dataclass(frozen=True)
class Observation:
    """What one run shows, in a form shared by the real manager and the model."""

    kind: str  # completed | deadlock | error
    error: tuple | None = None  # (python type, message) of the first failure
    hangs: bool = False  # an error run in which some cores never finish
    pcs: tuple | None = None  # deadlock: where every core stopped
    counts: frozenset | None = None  # completed/deadlock: ((table, id), core, count), non-zero only
    reads: frozenset | None = None  # completed/deadlock: (core, pc, value)
    exits: tuple | None = None  # completed/deadlock: sorted (device, frozenset(nonzero))


def observe(outcome: Outcome) -> Observation:
    """The observation of a model outcome (interpreter semantics)."""
    s = outcome.state
    if outcome.kind == "error":
        v = s.failure.violation
        hangs = any(b.reason != "halted by failure" for b in outcome.blocked)
        return Observation("error", (v.python_type, v.message), hangs)
    counts = frozenset((key, core, v) for (key, core), v in s.counts.items() if v)
    exits = tuple(sorted((w.device, frozenset(w.nonzero)) for w in s.warnings))
    return Observation(
        outcome.kind,
        pcs=s.pcs if outcome.kind == "deadlock" else None,
        counts=counts,
        reads=frozenset(s.reads),
        exits=exits,
    )


class TooManyStates(Exception):
    pass


def model_observations(program: Program, mode: str, cap: int = 300_000) -> set[Observation]:
    """Every observation of every maximal run of the step relation (no reduction)."""
    init = State.initial(program)
    seen = {init}
    stack = [init]
    out: set[Observation] = set()
    while stack:
        s = stack.pop()
        actors = enabled(program, mode, s)
        if not actors:
            out.add(observe(classify(program, mode, s)))
            continue
        for a in actors:
            n = step(program, mode, s, a)
            if n not in seen:
                seen.add(n)
                if len(seen) > cap:
                    raise TooManyStates(f"{program.name}: more than {cap} states")
                stack.append(n)
    return out


# --- the real run -----------------------------------------------------------------------


@dataclasses.dataclass
class RealRun:
    observation: Observation
    seconds: float
    exceptions: list  # (thread name, exception) in the order raised
    stuck: dict  # thread name -> op it was in when the run hung


def _secondary(e: BaseException) -> bool:
    """An exception that only reports a failure elsewhere (or the harness's own abort)."""
    if isinstance(e, (threading.BrokenBarrierError, HangAbort)):
        return True
    return isinstance(e, RuntimeError) and str(e).startswith("Computation failed")


class _Run:
    def __init__(self, program: Program, mode: str, detect_races: bool, quiet: float, cap: float) -> None:
        from jax._src.pallas.mosaic.interpret import utils as iutils
        from jax._src.pallas.mosaic.interpret.race_detection_state import RaceDetectionState

        self.program = program
        self.topo = program.topology
        self.mode = mode
        self.quiet, self.cap = quiet, cap
        cfg = {
            "num_devices": self.topo.num_devices,
            "cores_per_device": self.topo.cores_per_device,
            "dma_execution_mode": mode,
            "detect_races": detect_races,
        }
        self.sm = runner.new_shared_memory(cfg)
        self.races = RaceDetectionState(on_race="raise")
        self.dma_ids = iutils.Counter(100)
        self.vmem = runner.memory_space_index("vmem")
        self.lock = threading.Lock()
        self.progress = 0
        self.pcs = [0] * self.topo.num_cores
        self.where: dict[str, tuple] = {}  # thread name -> (current op, how it may block)
        self.exceptions: list = []
        self.sem_ids: dict = {}  # (core, label) -> int16 ids the kernel holds
        self.barrier_id: dict = {}  # core -> id handed by get_barrier_semaphore
        self.buffer_ids: dict = {}  # (core, label) -> id
        self.reads: set = set()
        self.exits: list = []
        self.dma_buffers: dict = {}  # (core, pc) -> (src id, dst id)
        self.threads: list[threading.Thread] = []

    # helpers ---------------------------------------------------------------------------

    def gcore(self, d: int, c: int) -> int:
        return self.topo.global_core(d, c)

    def _tick(self) -> None:
        with self.lock:
            self.progress += 1

    def _table_of(self, s) -> str:
        return "internal" if self.sm.sem.get(s.id) is s else "fixed"

    def _prepare_dma_buffers(self) -> None:
        """One source and one destination buffer per DMA in the program, of its byte count."""
        n = 0
        for g, ops in enumerate(self.program.cores):
            d, c = self.topo.device_of(g), self.topo.local_core_of(g)
            for pc, op in enumerate(ops):
                if not isinstance(op, DmaStart):
                    continue
                dd = d if op.device is None else op.device
                dc = c if op.core is None else op.core
                src_id, dst_id = DMA_BUFFER_BASE + 2 * n, DMA_BUFFER_BASE + 2 * n + 1
                n += 1
                data = (np.arange(op.nbytes) % 251).astype(np.uint8)
                self.sm.allocate_buffer(("vmem", src_id, d, c), 1, data)
                self.sm.allocate_buffer(("vmem", dst_id, dd, dc), 1, np.zeros(op.nbytes, np.uint8))
                self.dma_buffers[(g, pc)] = (src_id, dst_id)

    def sem_id(self, g: int, ref) -> int:
        if ref.label == BARRIER:
            if g not in self.barrier_id:
                raise AssertionError(f"core {g} uses the barrier semaphore before getting it")
            return self.barrier_id[g]
        return int(self.sem_ids[(g, ref.label)][ref.index])

    # one op, as the interpreter's callback for it --------------------------------------

    def run_op(self, g: int, pc: int, op, token: int) -> None:
        ipc = self.ipc
        d, c = self.topo.device_of(g), self.topo.local_core_of(g)
        t = type(op)
        if t is AllocSem:
            local = None if op.scope == "device" else c
            _, ids = ipc._allocate_semaphores(token, d, local, (op.count,))
            cores = self.topo.cores_of_device(d) if op.scope == "device" else (g,)
            for h in cores:
                self.sem_ids[(h, op.label)] = np.asarray(ids)
        elif t is AllocBuffer:
            local = None if op.scope == "device" else c
            space = runner.memory_space_index(op.memory_space)
            _, i = ipc._allocate_buffer(token, d, local, space, np.zeros(max(op.nbytes, 1), np.uint8))
            cores = self.topo.cores_of_device(d) if op.scope == "device" else (g,)
            for h in cores:
                self.buffer_ids[(h, op.label)] = int(i)
        elif t is FreeBuffer:
            if (g, op.label) in self.buffer_ids:  # a run_scoped semaphore's scope end: jax frees no semaphore
                ipc._deallocate_buffer(token, d, c, self.vmem, self.buffer_ids[(g, op.label)])
        elif t is GetBarrierSem:
            _, i = ipc.get_barrier_semaphore(token, d, self.program.collective_id)
            self.barrier_id[g] = int(i)
        elif t is Signal:
            ipc.semaphore_signal(token, d, c, self.sem_id(g, op.sem), op.inc, op.device, op.core)
        elif t is Wait:
            fn = ipc.dma_wait if op.kind == "dma" else ipc.semaphore_wait
            fn(token, d, c, self.sem_id(g, op.sem), op.value)
        elif t is Read:
            self.read_fn(token, d, c, g, pc, self.sem_id(g, op.sem))
        elif t is DmaStart:
            src_id, dst_id = self.dma_buffers[(g, pc)]
            # a copy of a run_scoped buffer uses the issuer's id of it, as the interpreter's start does (the
            # destination by the issuer's id too, BUF-9): outside the scope jax meets no key (BUF-14)
            src_id = self.buffer_ids.get((g, op.src_buf), src_id) if _scoped(op.src_buf) else src_id
            dst_id = self.buffer_ids.get((g, op.dst_buf), dst_id) if _scoped(op.dst_buf) else dst_id
            src_sem = None if op.src_sem is None else self.sem_id(g, op.src_sem)
            ipc.dma_start(
                token, d, c, self.vmem, src_id, (), self.vmem, dst_id, (),
                self.sem_id(g, op.dst_sem), src_sem, op.device, op.core,
            )
        elif t is ExitCheck:
            self.exit_fn(token, op.device)
        elif t is Barrier:
            if op.name == "start":
                ipc._barrier(token, d)
            elif op.name == "cleanup":
                ipc._clean_up_shared_memory(token, d)
            else:
                raise AssertionError(f"barrier {op.name!r} is not one the interpreter has")
        else:
            raise AssertionError(f"no interpreter callback for {op!r}")

    def _make_wrapped(self) -> None:
        """Functions the interpreter has no callback for, wrapped in its failure propagation."""
        ipc = self.ipc
        sm = self.sm

        def read(token, device_id, local_core_id, g, pc, sem_id):
            (s,), _ = sm.get_semaphores_and_increment_clock([sem_id], g)
            with self.lock:
                self.reads.add((g, pc, int(s.read(g))))
            return token

        def exit_check(token, device_id):
            found = sm.get_sempahores_with_nonzero_count(device_id)
            nonzero = frozenset(((self._table_of(s), int(s.id)), int(gc), int(s.count_by_core[gc])) for s, gc in found)
            with self.lock:
                if nonzero:
                    self.exits.append((device_id, nonzero))
            return token

        self.read_fn = ipc.fail_on_exception(read)
        self.exit_fn = ipc.fail_on_exception(exit_check)

    # threads ----------------------------------------------------------------------------------

    def run_ops(self, g: int, ops: list, token: int) -> None:
        """Run (pc, op) pairs of global core g; an exception ends the thread's work."""
        name = threading.current_thread().name
        for pc, op in ops:
            if isinstance(op, Wait):
                how = "wait"
            elif isinstance(op, Barrier):
                how = op.name  # "start" or "cleanup"
            else:
                how = "busy"
            with self.lock:
                self.pcs[g] = pc
                self.where[name] = (f"core {g} pc {pc}: {type(op).__name__}", how)
            self.run_op(g, pc, op, token)
            with self.lock:
                self.pcs[g] = pc + 1
            self._tick()
        with self.lock:
            self.where.pop(name, None)

    def _thread(self, target, name: str) -> threading.Thread:
        def body():
            try:
                target()
            except BaseException as e:  # noqa: BLE001 - every exception is an observation
                with self.lock:
                    self.exceptions.append((name, e))
                self._tick()
            finally:
                with self.lock:
                    self.where.pop(name, None)

        t = threading.Thread(target=body, name=name, daemon=True)
        self.threads.append(t)
        return t

    def device(self, d: int) -> None:
        topo = self.topo
        g0 = topo.global_core(d, 0)
        ops = list(enumerate(self.program.cores[g0]))
        if topo.cores_per_device == 1:
            self.run_ops(g0, ops, TOP)
            return
        fork = next(i for i, (_, op) in enumerate(ops) if isinstance(op, Barrier) and op.name == f"fork{d}")
        join = next(i for i, (_, op) in enumerate(ops) if isinstance(op, Barrier) and op.name == f"join{d}")
        self.run_ops(g0, ops[:fork], TOP)
        self.ipc._update_clocks_for_device_barrier(TOP, d)
        errors: list = []
        threads = []
        for c in range(topo.cores_per_device):
            g = topo.global_core(d, c)
            core_ops = list(enumerate(self.program.cores[g]))
            lo, hi = (fork + 1, join) if c == 0 else (1, len(core_ops) - 1)

            def body(g=g, core_ops=core_ops, lo=lo, hi=hi):
                try:
                    self.run_ops(g, core_ops[lo:hi], NESTED)
                    with self.lock:
                        self.pcs[g] = hi  # at the join
                except BaseException as e:  # noqa: BLE001
                    with self.lock:
                        errors.append(e)
                        self.exceptions.append((threading.current_thread().name, e))
                    self._tick()

            t = threading.Thread(target=body, name=f"device{d}-core{c}", daemon=True)
            threads.append(t)
            with self.lock:
                self.pcs[g] = lo
        with self.lock:
            self.where[threading.current_thread().name] = (f"device {d}: joining its cores", "join")
            self.threads.extend(threads)
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            self.ipc.fail(errors[0], TOP, d)
            raise errors[0]
        with self.lock:
            for c in range(1, topo.cores_per_device):
                g = topo.global_core(d, c)
                self.pcs[g] = len(self.program.cores[g])
        self.ipc._update_clocks_for_device_barrier(TOP, d)
        self.run_ops(g0, ops[join + 1:], TOP)

    # the run ------------------------------------------------------------------------------------

    def _all_blocked(self, hows: list) -> bool:
        """Whether every live thread is blocked. A thread whose callback failed may be
        blocked in the clean-up barrier inside `set_failed`, outside any op that can
        block; the barriers' waiter counts account for those."""
        busy = hows.count("busy")
        extra_cleanup = self.sm.clean_up_barrier.n_waiting - hows.count("cleanup")
        extra_start = self.sm.barrier.n_waiting - hows.count("start")
        return busy <= max(0, extra_cleanup) + max(0, extra_start)

    def snapshot_counts(self) -> frozenset:
        sm = self.sm
        out = set()
        for table, sems in (("internal", sm.sem), ("fixed", sm.fixed_id_sem)):
            for i, s in list(sems.items()):
                for g, v in enumerate(s.count_by_core.tolist()):
                    if v:
                        out.add(((table, int(i)), g, int(v)))
        return frozenset(out)

    def run(self) -> RealRun:
        start = time.monotonic()
        with runner.interpreter_bound(self.sm, self.races, self.dma_ids) as ipc:
            self.ipc = ipc
            self._make_wrapped()
            self._prepare_dma_buffers()
            for d in range(self.topo.num_devices):
                self._thread(lambda d=d: self.device(d), f"device{d}").start()
            hung = False
            last, last_change = -1, time.monotonic()
            while True:
                with self.lock:
                    alive = [t for t in self.threads if t.is_alive()]
                    progress = self.progress
                    hows = [self.where.get(t.name, ("", "busy"))[1] for t in alive]
                if not alive:
                    break
                now = time.monotonic()
                if progress != last:
                    last, last_change = progress, now
                elif now - start > self.cap or (now - last_change > self.quiet and self._all_blocked(hows)):
                    hung = True
                    break
                time.sleep(0.01)
            stuck: dict = {}
            counts = self.snapshot_counts()
            pcs = tuple(self.pcs)
            if hung:
                with self.lock:
                    stuck = {name: what for name, (what, _) in self.where.items()}
                self.sm.set_failed(HangAbort("the run hung"), top_level=False)
                self.sm.clean_up_barrier.abort()
                for t in list(self.threads):
                    t.join(5)
                if any(t.is_alive() for t in self.threads):
                    raise RuntimeError(f"threads did not end after the hang abort: {stuck}")
        primary = [e for _, e in self.exceptions if not _secondary(e)]
        failure = self.sm._failure
        if failure is not None and not isinstance(failure, HangAbort):
            root = failure
        elif primary:
            root = primary[0]
        else:
            root = None
        if root is not None:
            obs = Observation("error", (type(root).__name__, str(root)), hung)
        elif hung:
            obs = Observation(
                "deadlock", pcs=pcs, counts=counts, reads=frozenset(self.reads),
                exits=tuple(sorted(self.exits)),
            )
        else:
            obs = Observation(
                "completed", counts=counts, reads=frozenset(self.reads), exits=tuple(sorted(self.exits))
            )
        return RealRun(obs, time.monotonic() - start, list(self.exceptions), stuck)


def run_on_jax(
    program: Program, mode: str, *, detect_races: bool = False, quiet: float = QUIET, cap: float = 60.0
) -> RealRun:
    """Execute `program` on jax's manager under DMA mode `mode` ("eager" | "on_wait")."""
    return _Run(program, mode, detect_races, quiet, cap).run()


def _verdict(o: Observation) -> tuple:
    """The part of an observation the explorer's reduction preserves (RUN-5)."""
    return (o.kind, o.error, o.hangs, o.pcs, o.exits)


def check_against_model(program: Program, mode: str, real: RealRun, cap: int = 300_000) -> tuple[bool, str]:
    """Whether the real run's observation is one the model allows; and an explanation.

    Two engines of the model are consulted: the observation must be the fast
    run's (RUN-3) or one of all maximal runs of the step relation; and its
    verdict (kind, first error, hang, where stuck, exit findings) must be one
    the explorer (RUN-4, over the step relation) finds.
    """
    got = real.observation
    lines = [f"jax: {got}", f"exceptions: {real.exceptions}", f"stuck: {real.stuck}"]
    try:
        explored = {_verdict(observe(o)) for o in explore(program, mode).outcomes}
    except ExplorationLimit:
        explored = None
    if explored is not None and _verdict(got) not in explored:
        lines.append("the explorer finds only:")
        lines += [f"  {v}" for v in sorted(explored, key=repr)]
        return False, "\n".join(lines)
    fast = observe(fast_run(program, mode))
    if got == fast:
        return True, "matches the model's fast run"
    allowed = model_observations(program, mode, cap)
    if got in allowed:
        return True, f"one of {len(allowed)} model outcomes"
    lines.append("model allows:")
    lines += [f"  {o}" for o in sorted(allowed, key=repr)]
    return False, "\n".join(lines)


__all__ = [
    "Observation",
    "RealRun",
    "check_against_model",
    "failure_is_global",
    "model_observations",
    "observe",
    "run_on_jax",
]
