"""API-level differential test: jax's SharedMemory beside the reference model, step by step.

A hypothesis state machine drives one real `SharedMemory` (several devices
and cores, real barriers, race detection on or off, DMAs executed eagerly or
on wait) and the model through the same operations, and compares every
return value, every raised error (type and message) and, after every step,
the whole observable state: the semaphore tables, every count, every task
queue, the id counters, every buffer (content, reference count, logical
shape) and the buffer id counters.

Waits are only issued when the model says they return, so a wait cannot
block; should the real manager block anyway, the runner reports it after a
timeout instead of hanging.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import note
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from ._support import load_runner, profile

pytestmark = [
    pytest.mark.jax,
    pytest.mark.rule("SEM-1", "SEM-2", "SEM-3", "SEM-4", "SEM-5", "SEM-6", "SEM-7", "SEM-8", "DMA-2", "DMA-3",
                     "BUF-1", "BUF-2", "BUF-3", "BUF-4", "BUF-5", "BUF-6", "BUF-7", "BUF-8", "BUF-9", "BUF-10", "BUF-11", "BUF-12",
                     "ACC-10"),
]

runner = load_runner()
enc = runner.enc_array

SPACES_API = ("vmem", "smem", "hbm", "any")
FIXED_IDS = tuple(range(1998, 2011)) + (0, 7, 150)
DTYPES = (np.int32, np.float32)


def configs():
    return st.fixed_dictionaries(
        {
            "num_devices": st.integers(1, 3),
            "cores_per_device": st.integers(1, 2),
            "dma_execution_mode": st.sampled_from(["on_wait", "on_wait", "eager"]),
            "detect_races": st.booleans(),
            "out_of_bounds_reads": st.sampled_from(["raise", "uninitialized"]),
            "uninitialized_memory": st.sampled_from(["nan", "zero"]),
        }
    )


def arrays(shape, dtype) -> st.SearchStrategy:
    n = int(np.prod(shape)) if shape else 1
    if np.dtype(dtype).kind == "f":
        elems = st.one_of(st.integers(-50, 50).map(float), st.just(float("nan")))
    else:
        elems = st.integers(-50, 50)
    return st.lists(elems, min_size=n, max_size=n).map(lambda xs: np.array(xs, dtype=dtype).reshape(shape))


def shapes(max_rank: int = 2, max_dim: int = 4):
    return st.lists(st.integers(1, max_dim), min_size=0, max_size=max_rank).map(tuple)


def range_elem(dim: int):
    ints = st.integers(0, dim + 1)
    slices = st.tuples(st.integers(0, dim + 1), st.integers(0, dim + 2), st.sampled_from([None, 1, 1, 2, 3])).map(
        lambda t: {"start": t[0], "stop": t[0] + t[1], "step": t[2]}
    )
    return st.one_of(slices, slices, ints)


def ranges(shape: tuple):
    """Ranges over `shape`: usually full rank, sometimes shorter, rarely longer."""
    rank = len(shape)
    lengths = st.one_of(st.just(rank), st.just(rank), st.integers(0, rank), st.just(rank + 1))
    return lengths.flatmap(
        lambda n: st.tuples(*[range_elem(shape[i] if i < rank else 2) for i in range(n)]).map(list)
    )


def selected_shape(rnge: tuple, logical: tuple) -> tuple:
    """The shape a range selects if nothing were out of bounds (what a kernel's value has)."""
    out = []
    for i, dim in enumerate(logical):
        if i >= len(rnge):
            out.append(dim)
            continue
        r = rnge[i]
        if isinstance(r, slice):
            out.append(len(range(r.start, r.stop, r.step or 1)))
    for r in rnge[len(logical):]:
        if isinstance(r, slice):
            out.append(len(range(r.start, r.stop, r.step or 1)))
    return tuple(out)


def indexer_elem(dim: int):
    ints = st.integers(0, dim)
    slices = st.tuples(st.integers(0, dim + 1), st.integers(0, dim + 1), st.sampled_from([1, 1, 2])).map(
        lambda t: {"start": t[0], "size": t[1], "stride": t[2]}
    )
    return st.one_of(slices, slices, ints)


class ManagerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.model = None

    # --- plumbing -------------------------------------------------------------------

    @initialize(config=configs())
    def setup(self, config: dict) -> None:
        self.cfg = config
        self.nd, self.cpd = config["num_devices"], config["cores_per_device"]
        self.num_cores = self.nd * self.cpd
        self.model = runner.make_impl("model", config)
        self.real = runner.make_impl("jax", config)
        note(f"config = {config}")

    def do(self, op: str, args: dict) -> dict:
        want = self.model.apply(op, args)
        got = self.real.apply(op, args)
        note(f"{op}({args}) -> {want}")
        assert got == want, f"{op}({args}): model {want} but jax {got}"
        return want

    @invariant()
    def same_state(self) -> None:
        if self.model is None:
            return
        want, got = self.model.snapshot(), self.real.snapshot()
        for field in want:
            assert got[field] == want[field], f"state {field}: model {want[field]} but jax {got[field]}"

    def cores(self):
        return st.integers(0, self.num_cores - 1)

    def handles(self) -> list:
        t = self.model.state.tables
        return [["internal", i] for i in sorted(t.internal)] + [["fixed", i] for i in sorted(t.fixed)]

    def sem_ids(self):
        t = self.model.state.tables
        known = sorted(t.internal | t.fixed)
        return st.one_of(st.sampled_from(known), st.sampled_from(known), st.sampled_from(FIXED_IDS)) if known else st.sampled_from(FIXED_IDS)

    def has_semaphores(self) -> bool:
        return self.model is not None and bool(self.handles())

    def has_dmas(self) -> bool:
        return self.model is not None and bool(self.model.state.dmas)

    def buffer_keys(self) -> list:
        return [list(k) for k in self.model.buffers.mem]

    def has_buffers(self) -> bool:
        return self.model is not None and bool(self.model.buffers.mem)

    def any_key(self, data):
        keys = self.buffer_keys()
        fresh = st.tuples(
            st.sampled_from(SPACES_API), st.integers(99, 103), st.integers(0, self.nd - 1), st.integers(0, self.cpd - 1)
        ).map(list)
        return data.draw(st.one_of(st.sampled_from(keys), st.sampled_from(keys), fresh) if keys else fresh)

    # --- semaphores -------------------------------------------------------------------

    @precondition(lambda self: self.model is not None)
    @rule(data=st.data())
    def allocate_semaphores(self, data) -> None:
        key = data.draw(self.cores(), label="key")
        n = data.draw(st.sampled_from([0, 1, 1, 2, 3, 5]), label="n")
        self.do("allocate_semaphores", {"key": key, "n": n})

    @precondition(lambda self: self.model is not None)
    @rule(sem_id=st.sampled_from(FIXED_IDS))
    def guarantee_fixed(self, sem_id: int) -> None:
        self.do("guarantee_semaphore_with_fixed_id", {"id": sem_id})

    @precondition(lambda self: self.model is not None)
    @rule(data=st.data())
    def lookup(self, data) -> None:
        ids = data.draw(st.lists(st.one_of(self.sem_ids(), st.none()), min_size=1, max_size=3), label="ids")
        self.do("get_semaphores_and_increment_clock", {"ids": ids, "core": data.draw(self.cores(), label="core")})

    @precondition(has_semaphores)
    @rule(data=st.data())
    def signal(self, data) -> None:
        sem = data.draw(st.sampled_from(self.handles()), label="sem")
        args = {
            "sem": sem,
            "core": data.draw(self.cores(), label="target"),
            "inc": data.draw(
                st.integers(0, 9).flatmap(lambda r: st.integers(-3, 0) if r == 0 else st.integers(1, 20)), label="inc"
            ),
            "src_core": data.draw(self.cores(), label="src"),
        }
        self.do("signal", args)

    @precondition(has_semaphores)
    @rule(data=st.data())
    def wait(self, data) -> None:
        st_ = self.model.state
        # mostly wait where something can be consumed: a count or a queued task
        busy = sorted(
            {(k, c) for (k, c) in st_.counts} | {(k, c) for (k, c), q in st_.queues.items() if q}, key=repr
        )
        if busy and data.draw(st.integers(0, 4), label="busy?") > 0:
            key, core = data.draw(st.sampled_from(busy), label="busy semaphore")
            sem = list(key)
        else:
            sem = data.draw(st.sampled_from(self.handles()), label="sem")
            core = data.draw(self.cores(), label="core")
        have = self.model.op_read(sem, core)["result"]
        queued = [st_.dmas[d].nbytes for d, _ in st_.queues.get((tuple(sem), core), ())]
        # values a wait can reach: the count, plus what queued tasks would add (LIFO)
        reachable = {have}
        for n in reversed(queued):
            reachable.add(max(reachable) + n)
        candidates = sorted({v for r in reachable for v in (r, r - 1, 1) if v >= 1} | {0, -1})
        value = data.draw(
            st.integers(0, 9).flatmap(
                lambda r: st.sampled_from([0, -1])  # waits for nothing: a race-detection quirk
                if r == 0
                else st.sampled_from([v for v in candidates if v > 0] or [1])
                if r < 8
                else st.integers(1, have + 70)
            ),
            label="value",
        )
        if not self.model.can_wait(sem, core, value):
            # The real wait cannot be called (it would block for good); check what can be
            # checked without calling it: with no task to run, jax's count must be short too.
            real = self.real._sem(sem)
            if not real.tasks[core]:
                have_real = int(real.count_by_core[core])
                assert have_real < value, f"model says wait({sem}, {core}, {value}) blocks, jax has {have_real}"
            note(f"skip wait({sem}, core {core}, {value}): it would block")
            return
        self.do("wait", {"sem": sem, "core": core, "value": value})

    @precondition(has_semaphores)
    @rule(data=st.data())
    def read(self, data) -> None:
        sem = data.draw(st.sampled_from(self.handles()), label="sem")
        self.do("read", {"sem": sem, "core": data.draw(self.cores(), label="core")})

    @precondition(lambda self: self.model is not None)
    @rule(data=st.data())
    def dma_start(self, data) -> None:
        args = {
            "src_core": data.draw(self.cores(), label="src_core"),
            "dst_core": data.draw(self.cores(), label="dst_core"),
            "nbytes": data.draw(st.sampled_from([1, 4, 8, 16, 64]), label="nbytes"),
            "src_sem_id": data.draw(st.one_of(st.none(), self.sem_ids()), label="src_sem"),
            "dst_sem_id": data.draw(self.sem_ids(), label="dst_sem"),
        }
        self.do("dma_start", args)

    @precondition(lambda self: self.has_semaphores() and self.has_dmas())
    @rule(data=st.data())
    def enqueue_task(self, data) -> None:
        args = {
            "sem": data.draw(st.sampled_from(self.handles()), label="sem"),
            "core": data.draw(self.cores(), label="core"),
            "dma": data.draw(st.integers(0, len(self.model.state.dmas) - 1), label="dma"),
            "half": data.draw(st.sampled_from(["read", "read_write"]), label="half"),
        }
        self.do("enqueue_task", args)

    @precondition(has_dmas)
    @rule(data=st.data())
    def append_semaphore_task(self, data) -> None:
        args = {
            "id": data.draw(self.sem_ids(), label="id"),
            "core": data.draw(self.cores(), label="core"),
            "dma": data.draw(st.integers(0, len(self.model.state.dmas) - 1), label="dma"),
            "half": data.draw(st.sampled_from(["read", "read_write"]), label="half"),
        }
        self.do("append_semaphore_task", args)

    @precondition(lambda self: self.model is not None)
    @rule(data=st.data())
    def nonzero(self, data) -> None:
        self.do("get_sempahores_with_nonzero_count", {"device": data.draw(st.integers(0, self.nd - 1))})

    # --- buffers: the manager's methods -----------------------------------------------

    @precondition(lambda self: self.model is not None)
    @rule(data=st.data())
    def next_buffer_id(self, data) -> None:
        args = {"device": data.draw(st.integers(0, self.nd - 1)), "core": data.draw(st.integers(0, self.cpd - 1))}
        self.do("get_next_buffer_id", args)

    @precondition(lambda self: self.model is not None)
    @rule(data=st.data())
    def allocate_buffer(self, data) -> None:
        key = self.any_key(data)
        shape = data.draw(shapes(), label="content shape")
        dtype = data.draw(st.sampled_from(DTYPES), label="dtype")
        value = data.draw(arrays(shape, dtype), label="value")
        logical = data.draw(
            st.one_of(
                st.none(),
                st.tuples(*[st.integers(0, d) for d in shape]).map(list),
                st.tuples(*[st.integers(0, d + 1) for d in shape]).map(list),
                shapes().map(list),
            ),
            label="logical shape",
        )
        ref_count = data.draw(st.integers(1, 3), label="ref_count")
        self.do("allocate_buffer", {"key": key, "ref_count": ref_count, "value": enc(value), "logical_shape": logical})

    @precondition(lambda self: self.model is not None)
    @rule(data=st.data())
    def deallocate_buffer(self, data) -> None:
        self.do("deallocate_buffer", {"key": self.any_key(data)})

    def _target(self, data):
        key = self.any_key(data)
        buf = self.model.buffers.mem.get(tuple(key))
        shape = buf.shape if buf is not None else data.draw(shapes(), label="guessed shape")
        logical = buf.logical_shape if buf is not None else shape
        dtype = buf.dtype if buf is not None else np.dtype(np.int32)
        rnge = data.draw(ranges(shape), label="range")
        return key, buf, logical, dtype, rnge

    def _value_for(self, data, buf, logical, dtype, rnge):
        want = selected_shape(runner.dec_range(rnge), logical)
        choices = [st.just(want), st.just(want), shapes(3)]
        if buf is not None:
            from semcheck.model.buffer import read

            got = read(buf, runner.dec_range(rnge))
            if isinstance(got, np.ndarray):
                choices.append(st.just(got.shape))  # the clipped shape: a quirk path of swap
        shape = data.draw(st.one_of(*choices), label="value shape")
        dt = data.draw(st.sampled_from([dtype, dtype, dtype, np.dtype(np.int16)]), label="value dtype")
        return data.draw(arrays(shape, dt), label="value")

    @precondition(lambda self: self.model is not None)
    @rule(data=st.data())
    def get(self, data) -> None:
        key, _, _, _, rnge = self._target(data)
        self.do("get_buffer_content", {"key": key, "range": rnge, "thread": [key[2], key[3]]})

    @precondition(has_buffers)
    @rule(data=st.data())
    def store(self, data) -> None:
        key, buf, logical, dtype, rnge = self._target(data)
        value = self._value_for(data, buf, logical, dtype, rnge)
        self.do("store_buffer_content", {"key": key, "range": rnge, "value": enc(value), "thread": [key[2], key[3]]})

    @precondition(has_buffers)
    @rule(data=st.data())
    def swap(self, data) -> None:
        key, buf, logical, dtype, rnge = self._target(data)
        value = self._value_for(data, buf, logical, dtype, rnge)
        masked = data.draw(st.booleans(), label="masked")
        if masked:
            bits = data.draw(st.lists(st.booleans(), min_size=value.size, max_size=value.size), label="mask")
            mask = enc(np.array(bits, dtype=bool).reshape(value.shape))
        else:
            mask = None
        args = {"key": key, "range": rnge, "value": enc(value), "mask": mask, "thread": [key[2], key[3]]}
        self.do("swap_buffer_content", args)

    # --- buffers: as the interpreter uses them ------------------------------------------

    @precondition(lambda self: self.model is not None)
    @rule(data=st.data())
    def kernel_allocate_buffer(self, data) -> None:
        space = data.draw(st.sampled_from(SPACES_API), label="memory space")
        shape = data.draw(shapes(), label="shape")
        dtype = data.draw(st.sampled_from(DTYPES), label="dtype")
        padded = data.draw(st.booleans(), label="padded") and space != "smem" and shape != ()
        pad = [d + data.draw(st.integers(0, 3)) for d in shape] if padded else None
        args = {
            "device": data.draw(st.integers(0, self.nd - 1), label="device"),
            "core": data.draw(st.one_of(st.none(), st.none(), st.integers(0, self.cpd - 1)), label="core"),
            "memory_space": space,
            "value": enc(data.draw(arrays(shape, dtype), label="value")),
            "padded_shape": pad,
        }
        self.do("kernel_allocate_buffer", args)

    def _kernel_target(self, data):
        keys = self.buffer_keys()
        key = data.draw(st.sampled_from(keys), label="buffer")
        space, buffer_id, device, core = key
        if space not in ("hbm", "any"):
            local = core
        else:
            local = data.draw(st.integers(0, self.cpd - 1), label="accessing core")
        buf = self.model.buffers.mem[tuple(key)]
        idx = data.draw(st.tuples(*[indexer_elem(d) for d in buf.shape]).map(list), label="indexer")
        return space, buffer_id, device, local, buf, idx

    @precondition(lambda self: self.has_buffers() and not self.cfg["detect_races"])
    @rule(data=st.data())
    def kernel_get(self, data) -> None:
        space, buffer_id, device, core, buf, idx = self._kernel_target(data)
        out = self.do("kernel_get", {"device": device, "core": core, "memory_space": space, "id": buffer_id,
                                     "indexer": idx})
        if self.cfg["out_of_bounds_reads"] == "raise":
            self._window_rule(buf, idx, out, "read")

    def _window_rule(self, buf, idx, out: dict, kind: str) -> None:
        """ACC-10: the shape-only rule the front end asks (`kernel_buffer.read_refused` / `write_refused`) says
        what jax's callback did with the window: refused exactly when it raised its out-of-bounds error."""
        from semcheck.model.kernel_buffer import read_refused, write_refused

        if tuple(buf.shape) != tuple(buf.logical_shape):
            return  # a padded buffer: not what ACC-10 predicts
        if out.get("error", {}).get("type") == "KeyError":
            return  # the lookup failed before any window was looked at (an HBM key of another core)
        rnge = runner.dec_indexer(idx)
        # a swap of a value of the view's shape is refused exactly when its read is (BUF-12)
        refused = (write_refused if kind == "write" else read_refused)(rnge, tuple(buf.logical_shape))
        raised = "error" in out and out["error"]["message"].startswith(f"Out-of-bounds {kind} of")
        assert refused is raised, f"{kind} of {rnge} on {buf.logical_shape}: rule {refused}, jax {out}"

    @precondition(lambda self: self.has_buffers() and not self.cfg["detect_races"])
    @rule(data=st.data())
    def kernel_store_or_swap(self, data) -> None:
        space, buffer_id, device, core, buf, idx = self._kernel_target(data)
        want = selected_shape(runner.dec_indexer(idx), buf.logical_shape)
        value = data.draw(arrays(want, buf.dtype), label="value")
        args = {"device": device, "core": core, "memory_space": space, "id": buffer_id, "indexer": idx}
        kind = data.draw(st.sampled_from(["store", "swap", "masked swap"]), label="kind")
        if kind == "store":
            self._window_rule(buf, idx, self.do("kernel_store", {**args, "value": enc(value)}), "write")
            return
        mask = None
        if kind == "masked swap":
            bits = data.draw(st.lists(st.booleans(), min_size=value.size, max_size=value.size), label="mask")
            mask = enc(np.array(bits, dtype=bool).reshape(value.shape))
        out = self.do("kernel_swap", {**args, "value": enc(value), "mask": mask})
        if mask is None:
            self._window_rule(buf, idx, out, "swap")

    @precondition(has_buffers)
    @rule(data=st.data())
    def kernel_deallocate_buffer(self, data) -> None:
        space, buffer_id, device, core = data.draw(st.sampled_from(self.buffer_keys()), label="buffer")
        if space in ("hbm", "any"):
            core = data.draw(st.integers(0, self.cpd - 1), label="deallocating core")
        self.do("kernel_deallocate_buffer", {"device": device, "core": core, "memory_space": space, "id": buffer_id})


TestManagerAgainstModel = ManagerMachine.TestCase
TestManagerAgainstModel.settings = profile("stateful")
