"""A run's `run_scoped` keys: where jax's interpreter raises at a scoped buffer (rule BUF-14; spec: specs/semantics/buffers.md).

The manager holds a `run_scoped` buffer's key from the scope's allocation to its deallocation; a copy
half that looks a key up when the manager does not hold it raises `KeyError(key)`. The step relation and
the fast run keep the keys held so far (`State.scoped`) and ask these rules where a half runs: inside
an `eager` start, in the waiter that pops an `on_wait` task. (The scope windows of the program's text,
BUF-13, and the static prediction of BUF-14 are `semcheck.model.scope`.)
"""

from __future__ import annotations

from collections.abc import Mapping

from semcheck.model.buffer import SHARED_SPACES, BufferKey
from semcheck.model.errors import UnknownBuffer, Violation
from semcheck.model.kernel_buffer import buffer_key
from semcheck.model.ops import DmaStart, Topology


def held_scoped(memory_space: str, scope: str, scoped_keys: bool = True) -> bool:
    """BUF-14: whether the manager frees an allocation's key when its scope ends, so that a copy can meet it
    gone: a `run_scoped` allocation (scope "core") outside HBM/ANY. An HBM one is keyed under core 0 with
    one reference per core and stays while any core has not left (D17); launch buffers outlive the body.
    `scoped_keys` False (`Program.scoped_keys`, ERR-49's relaxed program): no key is ever missed."""
    return scoped_keys and scope == "core" and memory_space not in SHARED_SPACES


def copy_keys(held: Mapping[BufferKey, bool], buffer_keys: Mapping, topo: Topology, core: int, dst: int,
              op: DmaStart) -> tuple[BufferKey | None, BufferKey | None]:
    """BUF-14: the manager keys a copy's (read, write) half looks up, where it is a `run_scoped` buffer's
    (None elsewhere: a launch buffer is there for the whole body).

    `held`: the run_scoped keys the manager has held so far (True while held, False once freed). The read
    half looks up the source on the issuing core; the write half looks the destination up on the target
    core by the issuer's id of it (the interpreter's `store` with `dst_buffer_id`, BUF-9), a key the
    target holds only while its own scope of the buffer, allocated in step, is open."""
    src = buffer_keys.get((core, op.src_buf)) if op.src_buf is not None else None
    mine = buffer_keys.get((core, op.dst_buf)) if op.dst_buf is not None else None
    write = None
    if mine is not None and mine in held:
        write = buffer_key(mine[0], mine[1], topo.device_of(dst), topo.local_core_of(dst))
    return (src if src is not None and src in held else None, write)


def freed_failures(held: Mapping[BufferKey, bool], keys: tuple) -> tuple[Violation | None, Violation | None]:
    """BUF-14: what a copy's (read, write) half raises if it runs now: `KeyError(key)` for a run_scoped key
    the manager does not hold (its scope ended, or has not begun on the target), as `get` / `store` look the
    key up before anything else (BUF-4). ACC-11's `dma.deferred_failure` says which half runs first."""
    return tuple(None if k is None or held.get(k) else UnknownBuffer(k) for k in keys)  # type: ignore[return-value]


__all__ = ["copy_keys", "freed_failures", "held_scoped"]
