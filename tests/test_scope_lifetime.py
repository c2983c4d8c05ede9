"""The lifetime of `run_scoped` buffers (specs/semantics/buffers.md BUF-13 .. BUF-15, divergences D32).

Hand-built programs of the shapes the examples have (a write-back left in flight past its scope, the
same retired inside it, a ring copy into a neighbour's scoped buffer with and without a handshake
inside the scope), checked in every mode; the interpreter's part is pinned against jax by the
recorded runs of the examples (tests/kernels/ground_truth.json, tests/test_buggy_verdicts.py).
"""

from __future__ import annotations

import dataclasses
import functools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from semcheck.checker.properties.checking import check_program
from semcheck.checker.properties.confined import invocation_confined
from semcheck.checker.properties.registry import BY_ID
from semcheck.checker.properties.decide import decide
from semcheck.model.ops import (
    BARRIER,
    DMA_MODES,
    AllocBuffer,
    AllocSem,
    DmaStart,
    ExitCheck,
    FreeBuffer,
    GetBarrierSem,
    Program,
    Region,
    SemRef,
    Signal,
    Topology,
    Wait,
)
from semcheck.model import Scratch, launch
from semcheck.model.errors import UnknownBuffer
from semcheck.model.fast import fast_run
from semcheck.model.run import run
from semcheck.model.scope import ScopeTouch, interpreter_raises, scope_touches, scope_windows, stack_slot
from strategies import scope_programs  # tests/strategies.py

BOX = Region(((0, 8), (0, 128)))
OUT, IN, TOKEN = SemRef("out"), SemRef("in"), SemRef(BARRIER)


def _buf(k: int) -> str:
    return f"buf@k.py:10#0/{k}"


def _launch(barrier: bool = False) -> tuple:
    return (AllocBuffer("hbm0", 0, "hbm", "device"), AllocBuffer("hbm1", 0, "hbm", "device"),
            AllocSem("out", 1, "out", "device"),
            AllocSem("in", 1, "in", "device")) + ((GetBarrierSem(),) if barrier else ())


def _writeback(k: int, row: int) -> DmaStart:
    return DmaStart(OUT, 4096, src_buf=_buf(k), src_region=BOX, dst_buf="hbm1",
                    dst_region=Region(((row, row + 8), (0, 128))))


def _fill(k: int) -> DmaStart:
    return DmaStart(IN, 4096, src_buf="hbm0", src_region=BOX, dst_buf=_buf(k), dst_region=BOX)


def _streaming(waited_in_scope: bool, input_first: bool = False, steps: int = 2) -> Program:
    """Each step: a scope with `buf`, filled from HBM, written back on `out`; the write-back is waited
    inside the scope, or in the next step (after the next fill started, with `input_first`) and after
    the loop."""
    ops: list = list(_launch())
    for i in range(steps):
        k = i + 1
        ops.append(AllocBuffer(_buf(k), 4096, "vmem", "core"))
        late = [Wait(OUT, 4096, "dma")] if i > 0 and not waited_in_scope else []
        ops += ([_fill(k)] + late) if input_first else (late + [_fill(k)])
        ops += [Wait(IN, 4096, "dma"), _writeback(k, 8 * i)]
        if waited_in_scope:
            ops.append(Wait(OUT, 4096, "dma"))
        ops.append(FreeBuffer(_buf(k)))
    if not waited_in_scope:
        ops.append(Wait(OUT, 4096, "dma"))
    ops.append(ExitCheck(0))
    return Program(Topology(1), (tuple(ops),))


def _ring(handshake_inside: bool) -> Program:
    """Two devices, each sending its block into the other's scoped receive buffer; the handshake on the
    barrier semaphore (each signals the other and waits) comes before the scope or inside it."""
    cores = []
    for d in range(2):
        shake = (Signal(TOKEN, 1, device=1 - d), Wait(TOKEN, 1))
        scope = [AllocBuffer(_buf(1), 4096, "vmem", "core")]
        scope += list(shake) if handshake_inside else []
        scope += [DmaStart(IN, 4096, src_sem=OUT, device=1 - d, src_buf="hbm0", src_region=BOX,
                           dst_buf=_buf(1), dst_region=BOX),
                  Wait(OUT, 4096, "dma"), Wait(IN, 4096, "dma"), FreeBuffer(_buf(1))]
        body = ([] if handshake_inside else list(shake)) + scope
        cores.append((*_launch(barrier=True), *body, ExitCheck(d)))
    return Program(Topology(2), tuple(cores), collective_id=0)


@pytest.mark.rule("BUF-13")
@given(st.lists(st.booleans(), min_size=1, max_size=12))
def test_scope_windows_pair_allocations_with_frees(opens):
    """Nested and sibling scopes: each buffer's window runs from its allocation to its own free."""
    ops, stack, want, n = [], [], {}, 0
    for pc_open in opens:
        if pc_open or not stack:
            n += 1
            stack.append((_buf(n), len(ops)))
            ops.append(AllocBuffer(_buf(n), 8, "vmem", "core"))
        else:
            label, at = stack.pop()
            want[label] = (at, len(ops))
            ops.append(FreeBuffer(label))
    for label, at in stack:
        want[label] = (at, None)
    ops.insert(0, AllocBuffer("hbm0", 0, "hbm", "device"))  # a launch buffer has no window
    shifted = {k: (a + 1, None if b is None else b + 1) for k, (a, b) in want.items()}
    assert scope_windows(tuple(ops)) == shifted


@pytest.mark.rule("BUF-13", "BUF-14")
@pytest.mark.parametrize("mode", DMA_MODES)
def test_deferred_writeback_outlives_its_scope(mode):
    v = invocation_confined(_streaming(False), mode)
    assert v.verdict == "violated"
    d = v.witness.details
    assert (d["half"], d["when"], d["scope"]) == ("read", "late", _buf(1).rsplit("/", 1)[0])
    assert "in flight when the run_scoped scope" in v.witness.message
    # D32: eager runs the copy inside its start; on_wait runs it at the later wait, after the free
    assert d["raises"] is (mode == "on_wait")


@pytest.mark.rule("BUF-13")
@pytest.mark.parametrize("mode", DMA_MODES)
def test_copy_retired_inside_its_scope_is_confined(mode):
    p = _streaming(True, steps=3)
    assert invocation_confined(p, mode).verdict == "proved"
    assert {v.property: v.verdict for v in check_program(p, mode)} == dict.fromkeys(BY_ID, "proved")


@pytest.mark.rule("BUF-13", "BUF-14")
@pytest.mark.parametrize("mode", DMA_MODES)
def test_remote_copy_before_the_target_entered(mode):
    bad = invocation_confined(_ring(False), mode)
    assert bad.verdict == "violated" and bad.witness.details["when"] == "early"
    assert bad.witness.details["half"] == "write"
    # eager writes at the start; on_wait when the target waits inside its scope (BUF-14)
    assert bad.witness.details["raises"] is (mode == "eager")
    assert invocation_confined(_ring(True), mode).verdict == "proved"


@pytest.mark.rule("BUF-14")
def test_interpreter_raises_where_a_half_can_run_outside():
    late = _streaming(False)
    never = Program(Topology(1), (tuple(op for op in late.cores[0] if type(op) is not Wait or op.sem != OUT),))
    ring = _ring(False)
    first = lambda p: next(t for t in scope_touches(p) if t.half == "read" and t.label == _buf(1))  # noqa: E731
    assert interpreter_raises(late, first(late), "on_wait")
    assert not interpreter_raises(late, first(late), "eager")
    # a write-back nobody waits for: on_wait never runs it (D3), eager inside its start; a TPU still may
    assert not interpreter_raises(never, first(never), "on_wait")
    assert invocation_confined(never, "hardware").verdict == "violated"
    write = next(t for t in scope_touches(ring) if t.half == "write")
    assert write.owner != write.core
    assert interpreter_raises(ring, write, "eager") and not interpreter_raises(ring, write, "on_wait")
    for p in (late, never, ring):
        assert not any(interpreter_raises(p, t, "hardware") for t in scope_touches(p))
    assert isinstance(write, ScopeTouch)


@pytest.mark.rule("BUF-14", "ERR-50")
def test_on_wait_deferred_writeback_fails_every_run():
    """Every on_wait run raises KeyError at the late wait (the recorded run of the example): the model's runs
    raise there too, so deadlock-free is violated with that failure (no run completes), exit-balance vacuous
    (no run reaches the exit), the id properties proved on every state reached (RUN-60) and the rest proved on
    every run up to its failure (ERR-50); eager's runs complete, and stand."""
    p = _streaming(False)
    on_wait = {v.property: v for v in check_program(p, "on_wait")}
    assert on_wait.pop("invocation-confined").verdict == "violated"
    dl = on_wait.pop("deadlock-free")
    assert dl.verdict == "violated" and dl.witness.details["rule"] == "BUF-14"
    assert dl.witness.details["half"] == "read" and dl.witness.details["key"] == ["vmem", 102, 0, 0]
    assert "in every run" in dl.reason
    replayed = run(p, "on_wait", dl.witness.schedule)
    assert replayed.kind == "error" and replayed.failure.violation == UnknownBuffer(("vmem", 102, 0, 0))
    assert type(p.cores[0][replayed.failure.pc]) is Wait  # the late wait runs the task
    eb = on_wait.pop("exit-balance")
    assert eb.verdict == "vacuous" and "no run reaches a kernel exit" in eb.reason
    for prop in ("id-disjoint", "id-int16", "id-agreement"):  # RUN-60: judged on every state the explorer reaches
        assert on_wait.pop(prop).verdict == "proved"
    for prop in ("dma-bytes", "race-free"):  # ERR-50: the relaxed program's proofs, on every run up to its failure
        v = on_wait.pop(prop)
        assert v.verdict == "proved" and "KeyError" in v.reason and "ERR-50" in v.reason, v
    assert not on_wait
    eager = {v.property: v.verdict for v in check_program(p, "eager")}
    assert eager.pop("invocation-confined") == "violated"
    assert set(eager.values()) == {"proved"}


@pytest.mark.rule("BUF-14")
@pytest.mark.parametrize("mode", ["eager", "on_wait"])
def test_a_remote_copy_before_entry_fails_some_eager_runs(mode):
    """The ring's copy into the neighbour's scope before it entered: eager raises at the start in the
    schedules where the neighbour has not entered (others complete); on_wait runs the write in the target's
    own wait, inside its scope, and every property is decided as usual."""
    p = _ring(False)
    dl = decide("deadlock-free", p, mode)
    if mode == "on_wait":
        assert dl.verdict == "proved"
        assert {v.property: v.verdict for v in check_program(p, mode)}["race-free"] == "proved"
        return
    assert dl.verdict == "violated" and "in some runs" in dl.reason
    d = dl.witness.details
    assert (d["rule"], d["half"]) == ("BUF-14", "write")
    failed = run(p, mode, dl.witness.schedule)
    assert type(p.cores[failed.failure.core][failed.failure.pc]) is DmaStart  # raised in its start
    # some runs complete, others fail: every one is, up to its failure, a run of the relaxed program (ERR-50)
    eb = decide("exit-balance", p, mode)
    assert eb.verdict == "proved" and "ERR-50" in eb.reason, eb
    assert decide("deadlock-free", _ring(True), mode).verdict == "proved"


@pytest.mark.rule("BUF-14")
@given(st.integers(1, 3), st.sampled_from(["eager", "on_wait"]), st.booleans())
def test_the_step_relation_and_the_fast_run_raise_alike(steps, mode, waited_in_scope):
    """The fast run and a replay of its schedule on the step relation end in the same state, KeyError
    included (both call scope_keys)."""
    p = _streaming(waited_in_scope, steps=steps)
    fast = fast_run(p, mode)
    again = run(p, mode, fast.schedule, finish=False)
    assert again == fast.state
    raises = mode == "on_wait" and not waited_in_scope  # the wait after the scope runs the task
    assert (fast.kind == "error") is raises


@pytest.mark.rule("BUF-15")
@given(st.from_regex(r"[a-z_]{1,8}\.py:[0-9]{1,3}(\.[0-9])?#[0-9]", fullmatch=True), st.integers(0, 999))
def test_stack_slot_is_the_allocation_site(site, k):
    assert stack_slot(f"buf@{site}/{k}") == f"buf@{site}"
    assert stack_slot(f"buf@{site}/{k}") == stack_slot(f"buf@{site}/{k + 1}")
    assert stack_slot("hbm0") == "hbm0"


@pytest.mark.rule("BUF-15")
def test_hardware_races_on_a_reused_stack_slot():
    """The next scope's fill writes the slot the previous write-back may still read: a race on a TPU, none
    in the interpreter (a fresh buffer per scope); waiting before the fill starts orders them."""
    racy = _streaming(False, input_first=True)
    race = functools.partial(decide, "race-free")
    assert race(racy, "hardware").verdict == "violated"
    assert race(racy, "eager").verdict == "proved"
    assert race(_streaming(False), "hardware").verdict == "proved"


@pytest.mark.rule("BUF-13")
@pytest.mark.parametrize("mode", DMA_MODES)
def test_a_copy_with_unrecorded_buffers_beside_scopes_is_unknown(mode):
    """A copy whose buffers the front end could not name may be a scoped buffer's: never proved."""
    p = _streaming(True)
    blind = [op if type(op) is not DmaStart or op.src_buf != _buf(1) else DmaStart(OUT, 4096) for op in p.cores[0]]
    q = Program(Topology(1), (tuple(blind),))
    v = invocation_confined(q, mode)
    assert v.verdict == "unknown" and "ACC-3" in v.reason
    assert invocation_confined(p, mode).verdict == "proved"


@pytest.mark.rule("BUF-14")
@settings(max_examples=40, deadline=None)
@given(scope_programs(), st.sampled_from(["eager", "on_wait"]))
def test_the_prediction_covers_every_run_that_raises(program, mode):
    """BUF-14's prediction from the program's text (the gate before the explorer) is never silent where a run
    of the model raises KeyError at a scoped buffer: otherwise a proof would stand for runs that fail."""
    from semcheck.checker.properties.confined_scopes import interpreter_failure, scope_verdict
    from semcheck.model.explore import explore

    raised = any(o.kind == "error" and isinstance(o.failure.violation, UnknownBuffer)
                 for o in explore(program, mode).outcomes)
    if raised:
        assert interpreter_failure(scope_verdict(program, mode), mode) is not None, program.name


def _two_cores(program: Program) -> Program:
    """The body of a one-core `_streaming` program run by both cores of one device (each its own scopes and
    semaphores), the second core writing its blocks back 64 rows further down."""
    def lower(op):
        if type(op) is DmaStart and op.dst_buf == "hbm1":
            (r0, r1), cols = op.dst_region.box
            return dataclasses.replace(op, dst_region=Region(((r0 + 64, r1 + 64), cols)))
        return op
    body = program.cores[0][len(_launch()):-1]  # without its launch and its exit check
    return launch(Topology(1, 2), [body, [lower(op) for op in body]], hbm_buffers=2,
                  scratch=[Scratch("out"), Scratch("in")], name="two cores, own scopes")


def _scoped_sems(steps: int = 2) -> Program:
    """`_streaming(True)` with each scope's fill and write-back counted on semaphores of the scope's own
    (as `emit_pipeline` allocates them), not on the launch's scratch semaphores."""
    ops: list = list(_launch())
    for k in range(1, steps + 1):
        r, w = SemRef(f"r{k}"), SemRef(f"w{k}")
        ops += [AllocBuffer(_buf(k), 4096, "vmem", "core"), AllocSem(f"r{k}", 1, "k.py:11#0", "core"),
                AllocSem(f"w{k}", 1, "k.py:11#1", "core"), dataclasses.replace(_fill(k), dst_sem=r),
                Wait(r, 4096, "dma"), dataclasses.replace(_writeback(k, 8 * k), dst_sem=w), Wait(w, 4096, "dma"),
                FreeBuffer(f"w{k}"), FreeBuffer(f"r{k}"), FreeBuffer(_buf(k))]
    return Program(Topology(1), (tuple(ops) + (ExitCheck(0),),))


@pytest.mark.rule("PRG-210")
@pytest.mark.parametrize("mode", DMA_MODES)
def test_two_cores_each_in_its_own_scope_are_decided_in_every_mode(mode):
    """Two cores of a device, each copying into and out of its own scoped buffer on its scope's own
    semaphores: the interpreter's modes are decided as the hardware's (they were unknown)."""
    good = _two_cores(_scoped_sems())
    assert invocation_confined(good, mode).verdict == "proved"
    assert {v.property: v.verdict for v in check_program(good, mode)} == dict.fromkeys(BY_ID, "proved")


@pytest.mark.rule("PRG-210")
@pytest.mark.parametrize("mode", DMA_MODES)
def test_two_cores_on_scratch_semaphores_stay_unknown_under_on_wait(mode):
    """The same on the launch's scratch semaphores, waited again in the next scope: eager runs each half in
    its start and is decided (a write-back left past its scope is violated, the interpreter raising nothing);
    under on_wait a later scope's wait might run a half, which the text does not rule out: unknown."""
    good = invocation_confined(_two_cores(_streaming(True, steps=2)), mode)
    late = invocation_confined(_two_cores(_streaming(False)), mode)
    if mode == "on_wait":
        assert (good.verdict, late.verdict) == ("unknown", "unknown")
        assert "several cores per device" in good.reason
    else:
        assert (good.verdict, late.verdict) == ("proved", "violated")
        assert late.witness.details["raises"] is False


@pytest.mark.rule("PRG-210")
def test_a_touch_of_another_cores_scope_is_not_read_off_the_text():
    """Only the issuing core's own scope, entered before the start and left after it, is read off the text."""
    from semcheck.model.scope import interpreter_keeps_inside

    late = _streaming(False)
    touches = scope_touches(late)
    first = next(t for t in touches if t.half == "read" and t.label == _buf(1))
    assert interpreter_keeps_inside(late, first, "eager")
    assert not interpreter_keeps_inside(late, first, "on_wait")  # the wait after the free may run it
    assert not interpreter_keeps_inside(late, first, "hardware")
    ring = scope_touches(_ring(True))
    assert ring and not any(interpreter_keeps_inside(_ring(True), t, m) for t in ring for m in DMA_MODES
                            if t.owner != t.core)


@pytest.mark.rule("PRG-210")
@settings(max_examples=40, deadline=None)
@given(scope_programs(), st.sampled_from(["eager", "on_wait"]))
def test_a_half_kept_inside_by_the_text_never_raises(program, mode):
    """PRG-210's reading of the text is never wrong: where it keeps every touch inside its scope, no run
    of the model raises KeyError at a scoped buffer."""
    from semcheck.model.explore import explore
    from semcheck.model.scope import interpreter_keeps_inside

    touches = scope_touches(program)
    if touches and all(interpreter_keeps_inside(program, t, mode) for t in touches):
        assert not any(o.kind == "error" and isinstance(o.failure.violation, UnknownBuffer)
                       for o in explore(program, mode).outcomes), program.name


def _zero_byte_fill(nbytes: int) -> Program:
    """One scope: a fill of `nbytes` (0: an empty row range) and a fill of 4096 bytes, both on `in`, then one
    wait for 4096 bytes inside the scope: the only bytes left in flight past the free are the first fill's."""
    empty = Region(((0, 0), (0, 128))) if nbytes == 0 else BOX
    ops = [*_launch(), AllocBuffer(_buf(1), 4096, "vmem", "core"),
           DmaStart(IN, nbytes, src_buf="hbm0", src_region=empty, dst_buf=_buf(1), dst_region=empty),
           _fill(1), Wait(IN, 4096, "dma"), FreeBuffer(_buf(1))]
    if nbytes:
        ops.append(Wait(IN, nbytes, "dma"))
    return Program(Topology(1), (tuple(ops) + (ExitCheck(0),),))


@pytest.mark.rule("ACC-67")
@pytest.mark.parametrize("mode", DMA_MODES)
def test_a_copy_of_no_bytes_touches_no_scope(mode):
    """A copy of 0 bytes (a `pl.ds(0, n)` with `n == 0`) left unretired at the scope's end moves nothing into the
    buffer: the program is confined; the same copy of 4096 bytes, waited after the free, is not."""
    assert all(t.empty for t in scope_touches(_zero_byte_fill(0)) if t.pc == 5)
    assert invocation_confined(_zero_byte_fill(0), mode).verdict == "proved"
    assert invocation_confined(_zero_byte_fill(4096), mode).verdict == "violated"


def _empty_fill_popped_after_free() -> Program:
    """One scope: a 4096-byte copy between HBM buffers and then a copy of no bytes into the scoped buffer, both
    on `in`, neither waited inside the scope; one wait for 4096 bytes after the free."""
    empty = Region(((0, 0), (0, 128)))
    ops = [*_launch(), AllocBuffer(_buf(1), 4096, "vmem", "core"),
           DmaStart(IN, 4096, src_buf="hbm0", src_region=BOX, dst_buf="hbm1", dst_region=BOX),
           DmaStart(IN, 0, src_buf="hbm0", src_region=empty, dst_buf=_buf(1), dst_region=empty),
           FreeBuffer(_buf(1)), Wait(IN, 4096, "dma"), ExitCheck(0)]
    return Program(Topology(1), (tuple(ops),))


@pytest.mark.rule("ACC-68")
def test_a_copy_of_no_bytes_run_after_its_scope_raises_in_the_interpreter():
    """Under on_wait the wait after the free pops the newest task first, the empty copy's, whose write looks up
    the freed buffer's key and raises KeyError, as any copy's does: the empty copy counts there. Under eager it
    runs inside its start, and on a TPU it moves nothing (ACC-67): both are confined and fail nowhere."""
    p = _empty_fill_popped_after_free()
    (t,) = [t for t in scope_touches(p) if t.label == _buf(1)]
    assert t.empty and interpreter_raises(p, t, "on_wait")
    assert invocation_confined(p, "on_wait").verdict == "violated"
    on_wait = {v.property: v for v in check_program(p, "on_wait")}
    assert on_wait["deadlock-free"].verdict == "violated" and "KeyError" in on_wait["deadlock-free"].reason
    for mode in ("eager", "hardware"):
        assert {v.property: v.verdict for v in check_program(p, mode)} == dict.fromkeys(BY_ID, "proved")
