"""Generate the manager conformance vectors from the reference model.

    python specs/conformance/generate.py            # rewrite vectors/
    python specs/conformance/generate.py --check    # exit 1 if vectors/ is stale

Two kinds of vectors:

* *scenarios*: short hand-written operation sequences, one per rule or quirk,
  each naming the rules it exercises;
* *random*: seeded random sequences over every operation (deterministic: the
  same model gives the same files).

Expected results and final states are whatever the model gives; the runner
then holds jax (or any other implementation) to them. Waits are only included
where the model says they return.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def _load_runner():
    """runner.py beside this file (this directory is not a package), loaded once."""
    name = "semcheck_conformance_runner"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, HERE / "runner.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


runner = _load_runner()

A = runner.enc_array


def sl(start: int, stop: int, step: int | None = 1) -> dict:
    return {"start": start, "stop": stop, "step": step}


def ix(start: int, size: int, stride: int = 1) -> dict:
    return {"start": start, "size": size, "stride": stride}


def arr(values, dtype="int32", shape=None) -> dict:
    a = np.array(values, dtype=dtype)
    return A(a.reshape(shape) if shape is not None else a)


def build(name: str, description: str, rules: list[str], config: dict, ops: list) -> dict:
    """A vector: run `ops` on the model and record what it answers."""
    cfg = {**runner.DEFAULT_CONFIG, **config}
    model = runner.make_impl("model", cfg)
    steps = []
    for op, args in ops:
        expect = model.apply(op, args)
        if expect.get("error") == runner.BLOCKED:
            raise ValueError(f"{name}: {op}({args}) would block; vectors must not block")
        steps.append({"op": op, "args": args, "expect": expect})
    return {
        "format": runner.FORMAT,
        "name": name,
        "description": description,
        "rules": rules,
        "config": cfg,
        "steps": steps,
        "final": model.snapshot(),
    }


def scenarios() -> list[dict]:
    I, F = "internal", "fixed"
    two_by_two = {"num_devices": 2, "cores_per_device": 2}
    out = [
        build(
            "semaphore-ids-per-core",
            "Each allocation key (a global core) has its own id counter from 2000; ids join one shared table.",
            ["SEM-1"],
            two_by_two,
            [
                ("allocate_semaphores", {"key": 0, "n": 3}),
                ("allocate_semaphores", {"key": 1, "n": 1}),
                ("allocate_semaphores", {"key": 0, "n": 2}),
                ("allocate_semaphores", {"key": 3, "n": 0}),
                ("get_semaphores_and_increment_clock", {"ids": [2000, 2004, None], "core": 2}),
            ],
        ),
        build(
            "fixed-id-collides-only-on-lookup",
            "A fixed id equal to an internal id is accepted; the next lookup of it fails; other ids still resolve.",
            ["SEM-2", "SEM-3", "ERR-1"],
            {},
            [
                ("allocate_semaphores", {"key": 0, "n": 2}),
                ("guarantee_semaphore_with_fixed_id", {"id": 2001}),
                ("guarantee_semaphore_with_fixed_id", {"id": 2001}),
                ("guarantee_semaphore_with_fixed_id", {"id": 7}),
                ("get_semaphores_and_increment_clock", {"ids": [2000, 7], "core": 0}),
                ("get_semaphores_and_increment_clock", {"ids": [2000, 2001], "core": 0}),
                ("get_semaphores_and_increment_clock", {"ids": [2005], "core": 0}),
                ("signal", {"sem": [F, 2001], "core": 0, "inc": 1}),
                ("signal", {"sem": [I, 2001], "core": 0, "inc": 2}),
                ("get_sempahores_with_nonzero_count", {"device": 0}),
            ],
        ),
        build(
            "signal-any-core-wait-own",
            "Any core may signal any core's count; a wait consumes its own core's count; reads are per core.",
            ["SEM-4", "SEM-5", "SEM-6", "SEM-8"],
            two_by_two,
            [
                ("allocate_semaphores", {"key": 0, "n": 1}),
                ("signal", {"sem": [I, 2000], "core": 3, "inc": 5, "src_core": 0}),
                ("signal", {"sem": [I, 2000], "core": 1, "inc": 1, "src_core": 2}),
                ("read", {"sem": [I, 2000], "core": 3}),
                ("wait", {"sem": [I, 2000], "core": 3, "value": 4}),
                ("read", {"sem": [I, 2000], "core": 3}),
                ("get_sempahores_with_nonzero_count", {"device": 0}),
                ("get_sempahores_with_nonzero_count", {"device": 1}),
                ("signal", {"sem": [I, 2000], "core": 1, "inc": -1, "src_core": 1}),
                ("get_sempahores_with_nonzero_count", {"device": 0}),
            ],
        ),
        build(
            "on-wait-dma-runs-lifo",
            "Under on_wait a DMA start only queues tasks; a short waiter runs the last queued task first.",
            ["DMA-3", "DMA-4", "SEM-7"],
            {"dma_execution_mode": "on_wait"},
            [
                ("allocate_semaphores", {"key": 0, "n": 2}),
                ("dma_start", {"src_core": 0, "dst_core": 0, "nbytes": 8, "src_sem_id": 2001, "dst_sem_id": 2000}),
                ("dma_start", {"src_core": 0, "dst_core": 0, "nbytes": 16, "src_sem_id": None, "dst_sem_id": 2000}),
                ("read", {"sem": [I, 2000], "core": 0}),
                ("wait", {"sem": [I, 2000], "core": 0, "value": 8}),
                ("wait", {"sem": [I, 2001], "core": 0, "value": 8}),
                ("wait", {"sem": [I, 2000], "core": 0, "value": 16}),
            ],
        ),
        build(
            "eager-dma-signals-at-start",
            "Under eager a DMA signals its send semaphore on the source and its receive semaphore on the destination at once.",
            ["DMA-2"],
            {"dma_execution_mode": "eager", "num_devices": 2},
            [
                ("allocate_semaphores", {"key": 0, "n": 2}),
                ("dma_start", {"src_core": 0, "dst_core": 1, "nbytes": 64, "src_sem_id": 2001, "dst_sem_id": 2000}),
                ("read", {"sem": [I, 2001], "core": 0}),
                ("read", {"sem": [I, 2000], "core": 1}),
                ("dma_start", {"src_core": 0, "dst_core": 1, "nbytes": 4, "src_sem_id": 2009, "dst_sem_id": 2000}),
            ],
        ),
        build(
            "task-queues-direct-and-looked-up",
            "Tasks can be queued on a semaphore object directly or through an id lookup (which can fail).",
            ["SEM-7", "SEM-3"],
            {"dma_execution_mode": "on_wait"},
            [
                ("allocate_semaphores", {"key": 0, "n": 1}),
                ("guarantee_semaphore_with_fixed_id", {"id": 3}),
                ("dma_start", {"src_core": 0, "dst_core": 0, "nbytes": 4, "src_sem_id": None, "dst_sem_id": 3}),
                ("enqueue_task", {"sem": [I, 2000], "core": 0, "dma": 0, "half": "read_write"}),
                ("append_semaphore_task", {"id": 2000, "core": 0, "dma": 0, "half": "read"}),
                ("append_semaphore_task", {"id": 2001, "core": 0, "dma": 0, "half": "read"}),
                ("wait", {"sem": [I, 2000], "core": 0, "value": 0}),
                ("wait", {"sem": [F, 3], "core": 0, "value": 4}),
            ],
        ),
        build(
            "race-detection-wait-for-nothing",
            "With race detection, a wait for <= 0 on a never-signalled count consumes, then fails an assertion.",
            ["RACE-1"],
            {"detect_races": True},
            [
                ("allocate_semaphores", {"key": 0, "n": 1}),
                ("wait", {"sem": [I, 2000], "core": 0, "value": -1}),
                ("read", {"sem": [I, 2000], "core": 0}),
                ("signal", {"sem": [I, 2000], "core": 0, "inc": 0}),
                ("wait", {"sem": [I, 2000], "core": 0, "value": 0}),
            ],
        ),
        build(
            "buffer-ids-and-allocation",
            "Buffer ids count per (device, core) from 100; allocation keeps an existing key; logical shapes are checked.",
            ["BUF-1", "BUF-2"],
            two_by_two,
            [
                ("get_next_buffer_id", {"device": 0, "core": 0}),
                ("get_next_buffer_id", {"device": 0, "core": 0}),
                ("get_next_buffer_id", {"device": 1, "core": 1}),
                ("allocate_buffer", {"key": ["vmem", 100, 0, 0], "ref_count": 1, "value": arr([1, 2, 3])}),
                ("allocate_buffer", {"key": ["vmem", 100, 0, 0], "ref_count": 4, "value": arr([9.0], "float32")}),
                ("allocate_buffer", {"key": ["vmem", 101, 0, 0], "ref_count": 1, "value": arr(range(8), shape=(2, 4)), "logical_shape": [3, 4]}),
                ("allocate_buffer", {"key": ["vmem", 101, 0, 0], "ref_count": 1, "value": arr(range(8), shape=(2, 4)), "logical_shape": [2]}),
                ("allocate_buffer", {"key": ["vmem", 101, 0, 0], "ref_count": 1, "value": arr(range(8), shape=(2, 4)), "logical_shape": [2, 4, 1]}),
                ("allocate_buffer", {"key": ["vmem", 101, 0, 0], "ref_count": 1, "value": arr(range(8), shape=(2, 4)), "logical_shape": [1, 3]}),
            ],
        ),
        build(
            "buffer-reference-counts",
            "A buffer goes when its last reference does; freed bytes are counted; unknown keys are KeyErrors.",
            ["BUF-3"],
            {},
            [
                ("allocate_buffer", {"key": ["hbm", 100, 0, 0], "ref_count": 2, "value": arr([1.0, 2.0], "float32")}),
                ("deallocate_buffer", {"key": ["hbm", 100, 0, 0]}),
                ("get_buffer_content", {"key": ["hbm", 100, 0, 0], "range": [], "thread": [0, 0]}),
                ("deallocate_buffer", {"key": ["hbm", 100, 0, 0]}),
                ("deallocate_buffer", {"key": ["hbm", 100, 0, 0]}),
                ("get_buffer_content", {"key": ["hbm", 100, 0, 0], "range": [], "thread": [0, 0]}),
            ],
        ),
        build(
            "padded-reads-logical-writes",
            "Reads are bounded by the padded content, writes land in the logical shape only; misses are None/False.",
            ["BUF-4", "BUF-5"],
            {},
            [
                ("allocate_buffer", {"key": ["vmem", 100, 0, 0], "ref_count": 1, "value": arr(range(12), shape=(3, 4)), "logical_shape": [2, 3]}),
                ("get_buffer_content", {"key": ["vmem", 100, 0, 0], "range": [sl(1, 3)], "thread": [0, 0]}),
                ("get_buffer_content", {"key": ["vmem", 100, 0, 0], "range": [sl(0, 3), sl(0, 4)], "thread": [0, 0]}),
                ("get_buffer_content", {"key": ["vmem", 100, 0, 0], "range": [sl(2, 9), 3], "thread": [0, 0]}),
                ("get_buffer_content", {"key": ["vmem", 100, 0, 0], "range": [3], "thread": [0, 0]}),
                ("get_buffer_content", {"key": ["vmem", 100, 0, 0], "range": [0, sl(4, 4)], "thread": [0, 0]}),
                ("get_buffer_content", {"key": ["vmem", 100, 0, 0], "range": [0, 0, 0], "thread": [0, 0]}),
                ("store_buffer_content", {"key": ["vmem", 100, 0, 0], "range": [sl(0, 3), sl(0, 4)], "value": arr([-1] * 12, shape=(3, 4)), "thread": [0, 0]}),
                ("store_buffer_content", {"key": ["vmem", 100, 0, 0], "range": [sl(0, 4)], "value": arr([-2] * 12, shape=(4, 3)), "thread": [0, 0]}),
                ("store_buffer_content", {"key": ["vmem", 100, 0, 0], "range": [sl(0, 3, 2), 0], "value": arr([7, 7]), "thread": [0, 0]}),
                ("store_buffer_content", {"key": ["vmem", 100, 0, 0], "range": [sl(3, 3), 0], "value": arr([], shape=(0,)), "thread": [0, 0]}),
                ("store_buffer_content", {"key": ["vmem", 100, 0, 0], "range": [0], "value": arr([1.0, 1.0, 1.0], "float32"), "thread": [0, 0]}),
                ("store_buffer_content", {"key": ["vmem", 100, 0, 0], "range": [0, 0, 0], "value": arr(1), "thread": [0, 0]}),
            ],
        ),
        build(
            "swaps-masked-and-not",
            "Unmasked swaps refuse a clipped read unless the value has its shape (then IndexError); masked swaps judge bounds on the first axis.",
            ["BUF-6", "BUF-7"],
            {},
            [
                ("allocate_buffer", {"key": ["vmem", 100, 0, 0], "ref_count": 1, "value": arr(range(4))}),
                ("swap_buffer_content", {"key": ["vmem", 100, 0, 0], "range": [sl(1, 3)], "value": arr([9, 9]), "mask": None, "thread": [0, 0]}),
                ("swap_buffer_content", {"key": ["vmem", 100, 0, 0], "range": [sl(2, 6)], "value": arr([5] * 4), "mask": None, "thread": [0, 0]}),
                ("swap_buffer_content", {"key": ["vmem", 100, 0, 0], "range": [sl(2, 6)], "value": arr([5, 5]), "mask": None, "thread": [0, 0]}),
                ("swap_buffer_content", {"key": ["vmem", 100, 0, 0], "range": [sl(2, 6)], "value": arr([6] * 4), "mask": A(np.array([1, 0, 0, 0], bool)), "thread": [0, 0]}),
                ("swap_buffer_content", {"key": ["vmem", 100, 0, 0], "range": [sl(2, 6)], "value": arr([6] * 4), "mask": A(np.array([0, 0, 1, 0], bool)), "thread": [0, 0]}),
                ("allocate_buffer", {"key": ["vmem", 101, 0, 0], "ref_count": 1, "value": arr(range(8), shape=(2, 4))}),
                ("swap_buffer_content", {"key": ["vmem", 101, 0, 0], "range": [sl(0, 2), sl(2, 6)], "value": arr([-1] * 8, shape=(2, 4)), "mask": A(np.eye(2, 4, 3, dtype=bool)), "thread": [0, 0]}),
                ("allocate_buffer", {"key": ["vmem", 102, 0, 0], "ref_count": 1, "value": arr([0] * 8, shape=(4, 2))}),
                ("swap_buffer_content", {"key": ["vmem", 102, 0, 0], "range": [sl(0, 4), sl(0, 4)], "value": arr([1] * 16, shape=(4, 4)), "mask": A(np.eye(4, 4, -3, dtype=bool)), "thread": [0, 0]}),
            ],
        ),
        build(
            "kernel-allocation-hbm-shared",
            "A device-wide HBM allocation is one buffer under core 0 counted once per core; VMEM gives each core its own.",
            ["BUF-8", "BUF-9"],
            {"cores_per_device": 2},
            [
                ("kernel_allocate_buffer", {"device": 0, "core": None, "memory_space": "hbm", "value": arr([1, 2])}),
                ("kernel_allocate_buffer", {"device": 0, "core": None, "memory_space": "vmem", "value": arr([3.0], "float32"), "padded_shape": [8]}),
                ("kernel_deallocate_buffer", {"device": 0, "core": 1, "memory_space": "hbm", "id": 100}),
                ("kernel_deallocate_buffer", {"device": 0, "core": 0, "memory_space": "hbm", "id": 100}),
                ("kernel_deallocate_buffer", {"device": 0, "core": 1, "memory_space": "vmem", "id": 101}),
                ("kernel_allocate_buffer", {"device": 0, "core": 1, "memory_space": "any", "value": arr([5])}),
                ("kernel_allocate_buffer", {"device": 0, "core": None, "memory_space": "any", "value": arr([6])}),
            ],
        ),
        build(
            "kernel-access-errors",
            "Kernel reads may read the padding; anything else out of bounds is the interpreter's error (or uninitialized, if allowed).",
            ["BUF-10", "BUF-11", "BUF-12"],
            {"out_of_bounds_reads": "raise"},
            [
                ("kernel_allocate_buffer", {"device": 0, "core": 0, "memory_space": "vmem", "value": arr([1.0, 2.0, 3.0], "float32"), "padded_shape": [8]}),
                ("kernel_get", {"device": 0, "core": 0, "memory_space": "vmem", "id": 100, "indexer": [ix(0, 8)]}),
                ("kernel_get", {"device": 0, "core": 0, "memory_space": "vmem", "id": 100, "indexer": [ix(6, 4)]}),
                ("kernel_store", {"device": 0, "core": 0, "memory_space": "vmem", "id": 100, "indexer": [ix(6, 4)], "value": arr([0.0] * 4, "float32")}),
                ("kernel_swap", {"device": 0, "core": 0, "memory_space": "vmem", "id": 100, "indexer": [ix(6, 4)], "value": arr([0.0] * 4, "float32"), "mask": None}),
                ("kernel_swap", {"device": 0, "core": 0, "memory_space": "vmem", "id": 100, "indexer": [ix(6, 4)], "value": arr([0.0] * 4, "float32"), "mask": A(np.array([0, 0, 1, 0], bool))}),
                ("kernel_swap", {"device": 0, "core": 0, "memory_space": "vmem", "id": 100, "indexer": [ix(0, 4, 2)], "value": arr([4.0] * 4, "float32"), "mask": A(np.array([1, 1, 0, 0], bool))}),
            ],
        ),
        build(
            "kernel-reads-uninitialized",
            "With out_of_bounds_reads=uninitialized, a read past the end is filled with uninitialized memory.",
            ["BUF-10"],
            {"out_of_bounds_reads": "uninitialized", "uninitialized_memory": "zero"},
            [
                ("kernel_allocate_buffer", {"device": 0, "core": 0, "memory_space": "smem", "value": arr([1, 2])}),
                ("kernel_get", {"device": 0, "core": 0, "memory_space": "smem", "id": 100, "indexer": [ix(1, 3)]}),
                ("kernel_get", {"device": 0, "core": 0, "memory_space": "smem", "id": 100, "indexer": [ix(5, 2)]}),
            ],
        ),
    ]
    return out


# --- random sequences --------------------------------------------------------------------------


def random_vector(seed: int, length: int = 40) -> dict:
    rnd = random.Random(seed)
    cfg = {
        "num_devices": rnd.randint(1, 3),
        "cores_per_device": rnd.randint(1, 2),
        "dma_execution_mode": rnd.choice(["on_wait", "on_wait", "eager"]),
        "detect_races": rnd.random() < 0.5,
        "out_of_bounds_reads": rnd.choice(["raise", "uninitialized"]),
        "uninitialized_memory": rnd.choice(["nan", "zero"]),
    }
    nd, cpd = cfg["num_devices"], cfg["cores_per_device"]
    n = nd * cpd
    model = runner.make_impl("model", cfg)
    ops: list = []

    def apply(op, args):
        model.apply(op, args)
        ops.append((op, args))

    def ids():
        t = model.state.tables
        known = sorted(t.internal | t.fixed)
        pool = known * 3 + list(range(1998, 2008)) + [0, 7]
        return rnd.choice(pool)

    def handle():
        t = model.state.tables
        hs = [["internal", i] for i in sorted(t.internal)] + [["fixed", i] for i in sorted(t.fixed)]
        return rnd.choice(hs) if hs else None

    def value(shape, dtype):
        size = int(np.prod(shape)) if shape else 1
        if dtype == "float32":
            data = [rnd.choice([float(rnd.randint(-9, 9)), float("nan")]) for _ in range(size)]
        else:
            data = [rnd.randint(-9, 9) for _ in range(size)]
        return np.array(data, dtype=dtype).reshape(shape)

    def rng(shape):
        out = []
        for d in shape[: rnd.randint(max(0, len(shape) - 1), len(shape))]:
            if rnd.random() < 0.3:
                out.append(rnd.randint(0, d))
            else:
                start = rnd.randint(0, d)
                out.append(sl(start, start + rnd.randint(0, d + 1), rnd.choice([None, 1, 1, 2])))
        return out

    for _ in range(length):
        kind = rnd.choice(
            ["alloc", "fixed", "lookup", "signal", "signal", "wait", "wait", "read", "dma", "task", "nonzero",
             "balloc", "kalloc", "get", "store", "swap", "free", "kfree"]
        )
        h = handle()
        if kind == "alloc":
            apply("allocate_semaphores", {"key": rnd.randrange(n), "n": rnd.choice([1, 1, 2, 3])})
        elif kind == "fixed":
            apply("guarantee_semaphore_with_fixed_id", {"id": rnd.choice(list(range(1999, 2006)) + [5])})
        elif kind == "lookup":
            apply("get_semaphores_and_increment_clock", {"ids": [ids() for _ in range(rnd.randint(1, 3))], "core": rnd.randrange(n)})
        elif kind == "signal" and h:
            apply("signal", {"sem": h, "core": rnd.randrange(n), "inc": rnd.randint(1, 9), "src_core": rnd.randrange(n)})
        elif kind == "wait" and h:
            core = rnd.randrange(n)
            have = model.op_read(h, core)["result"]
            v = rnd.choice([have, max(1, have), 1, rnd.randint(1, 40)])
            if model.can_wait(h, core, v):
                apply("wait", {"sem": h, "core": core, "value": v})
        elif kind == "read" and h:
            apply("read", {"sem": h, "core": rnd.randrange(n)})
        elif kind == "dma":
            src = None if rnd.random() < 0.4 else ids()
            apply("dma_start", {"src_core": rnd.randrange(n), "dst_core": rnd.randrange(n), "nbytes": rnd.choice([4, 8, 16]), "src_sem_id": src, "dst_sem_id": ids()})
        elif kind == "task" and model.state.dmas and h:
            d = rnd.randrange(len(model.state.dmas))
            half = rnd.choice(["read", "read_write"])
            if rnd.random() < 0.5:
                apply("enqueue_task", {"sem": h, "core": rnd.randrange(n), "dma": d, "half": half})
            else:
                apply("append_semaphore_task", {"id": ids(), "core": rnd.randrange(n), "dma": d, "half": half})
        elif kind == "nonzero":
            apply("get_sempahores_with_nonzero_count", {"device": rnd.randrange(nd)})
        elif kind == "balloc":
            shape = tuple(rnd.randint(1, 4) for _ in range(rnd.randint(1, 2)))
            logical = None if rnd.random() < 0.4 else [rnd.randint(0, d + (rnd.random() < 0.1)) for d in shape]
            key = [rnd.choice(["vmem", "smem", "hbm"]), rnd.randint(100, 102), rnd.randrange(nd), rnd.randrange(cpd)]
            apply("allocate_buffer", {"key": key, "ref_count": rnd.randint(1, 2), "value": A(value(shape, rnd.choice(["int32", "float32"]))), "logical_shape": logical})
        elif kind == "kalloc":
            shape = tuple(rnd.randint(1, 4) for _ in range(rnd.randint(0, 2)))
            space = rnd.choice(["vmem", "smem", "hbm", "any"])
            pad = [d + rnd.randint(0, 3) for d in shape] if shape and space != "smem" and rnd.random() < 0.5 else None
            core = None if rnd.random() < 0.6 else rnd.randrange(cpd)
            apply("kernel_allocate_buffer", {"device": rnd.randrange(nd), "core": core, "memory_space": space, "value": A(value(shape, rnd.choice(["int32", "float32"]))), "padded_shape": pad})
        elif kind in ("get", "store", "swap", "free", "kfree") and model.buffers.mem:
            key = rnd.choice(sorted(model.buffers.mem, key=repr))
            buf = model.buffers.mem[key]
            if kind == "free":
                apply("deallocate_buffer", {"key": list(key)})
                continue
            if kind == "kfree":
                core = rnd.randrange(cpd) if key[0] in ("hbm", "any") else key[3]
                apply("kernel_deallocate_buffer", {"device": key[2], "core": core, "memory_space": key[0], "id": key[1]})
                continue
            r = rng(buf.shape)
            if kind == "get":
                apply("get_buffer_content", {"key": list(key), "range": r, "thread": [key[2], key[3]]})
                continue
            full = []
            rr = runner.dec_range(r)
            for i, d in enumerate(buf.logical_shape):
                if i >= len(rr):
                    full.append(d)
                elif isinstance(rr[i], slice):
                    full.append(len(range(rr[i].start, rr[i].stop, rr[i].step or 1)))
            v = value(tuple(full), buf.dtype.name)
            if kind == "store":
                apply("store_buffer_content", {"key": list(key), "range": r, "value": A(v), "thread": [key[2], key[3]]})
            else:
                mask = A(np.array([rnd.random() < 0.5 for _ in range(v.size)], bool).reshape(v.shape)) if rnd.random() < 0.5 else None
                apply("swap_buffer_content", {"key": list(key), "range": r, "value": A(v), "mask": mask, "thread": [key[2], key[3]]})
    return build(
        f"random-{seed:03d}",
        f"Seeded random sequence {seed} over every operation.",
        ["random"],
        cfg,
        ops,
    )


RANDOM_SEEDS = range(40)


def all_vectors() -> list[dict]:
    return scenarios() + [random_vector(s) for s in RANDOM_SEEDS]


def filename(i: int, v: dict) -> str:
    return f"{i:03d}-{v['name']}.json"


def render(v: dict) -> str:
    """JSON with one line per step and per final-state field (readable diffs, small files)."""
    head = {k: v[k] for k in ("format", "name", "description", "rules", "config")}
    lines = ["{"]
    for k, x in head.items():
        lines.append(f"  {json.dumps(k)}: {json.dumps(x)},")
    lines.append('  "steps": [')
    lines.append(",\n".join("    " + json.dumps(step) for step in v["steps"]))
    lines.append("  ],")
    lines.append('  "final": {')
    lines.append(",\n".join(f"    {json.dumps(k)}: {json.dumps(x)}" for k, x in v["final"].items()))
    lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only compare with the files in vectors/")
    args = ap.parse_args(argv)
    vectors = all_vectors()
    wanted = {filename(i, v): render(v) for i, v in enumerate(vectors)}
    out = runner.VECTOR_DIR
    if args.check:
        have = {p.name: p.read_text() for p in out.glob("*.json")}
        stale = sorted(set(have) ^ set(wanted)) + sorted(k for k in wanted if k in have and have[k] != wanted[k])
        for name in stale:
            print(f"stale: {name}")
        return 1 if stale else 0
    out.mkdir(exist_ok=True)
    for p in out.glob("*.json"):
        if p.name not in wanted:
            p.unlink()
    for name, text in wanted.items():
        (out / name).write_text(text)
    print(f"wrote {len(wanted)} vectors to {out.name}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
