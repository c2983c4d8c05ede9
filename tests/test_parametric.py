"""Parametric proofs (specs/deciding/parametric.md): what is proved for every N >= 2, and the mutants that must not be.

The ring kernels are traced at N = 2 .. 8 here (the command's default is 2 .. 12): enough for the
argument (PAR-3 needs six), and a few seconds per kernel. The mutants of
tests/parametric_kernels/ring_allgather_variants.py are rings at every traced N and break only
past N = 2048, at odd N, or from grid step 3000 on.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = "tests/parametric_kernels/ring_allgather_variants.py"
TRACED = tuple(range(2, 9))
MODES = ("eager", "hardware")  # on_wait shares eager's lowering (DMA-6); the command checks all three

ARGUED = ("id-disjoint", "id-int16", "id-agreement", "deadlock-free", "exit-balance", "dma-bytes", "race-free")
RULES = {"deadlock-free": "PAR-6", "exit-balance": "PAR-6", "id-disjoint": "PAR-9", "id-int16": "PAR-9",
         "id-agreement": "PAR-9", "dma-bytes": "PAR-10", "race-free": "PAR-14"}
ID_PROPS = ("id-disjoint", "id-int16", "id-agreement")
INTERPRETER = ("eager",)  # of MODES, the ones with ids (HW-1: a TPU has none)

pytestmark = pytest.mark.jax


@pytest.fixture(scope="module")
def worker():
    """One fresh process for the module's jax work: jax fixes its device count when it first starts, and
    another test of this process may have started it with fewer than the traced N need."""
    import concurrent.futures
    import multiprocessing

    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                                initializer=_boot) as pool:
        yield pool


def _boot():
    """The worker's jax, with enough host devices for every N the tests trace (the probe at 31 too)."""
    from semcheck.checker.frontend.targets import provision_devices

    provision_devices(32)
    import jax

    jax.devices()


class _Claim:
    """A claim as the worker hands it back (plain data)."""

    def __init__(self, d: dict):
        self.__dict__.update(d)


def _claims(path, build_kwargs, probes=()):
    from semcheck.checker.parametric.every_n import every_n

    out = []
    for c in every_n(str(ROOT / path), ns=TRACED, probes=probes, modes=MODES, build_kwargs=build_kwargs):
        out.append({"prop": c.prop, "mode": c.mode, "every_n": c.every_n, "proved_at": c.proved_at,
                    "violated_at": c.violated_at, "reason": c.reason, "text": c.line(), "json": c.as_json()})
    return out


def _every_n(worker, path, build_kwargs=None, probes=()):
    return [_Claim(d) for d in worker.submit(_claims, path, build_kwargs, probes).result()]


def _guard(path, build_kwargs):
    """The template guard alone (no checks) on the kernel traced at every N: its refusal, or None."""
    from semcheck.checker.frontend.api import load
    from semcheck.checker.frontend.targets import provision_devices
    from semcheck.checker.parametric.every_n import NotTemplate, template_guard

    provision_devices(TRACED[-1])
    import jax

    jax.devices()
    calls = {n: load(str(ROOT / path), devices=n, build_kwargs=build_kwargs)[0].call for n in TRACED}
    try:
        template_guard({n: c.jaxpr for n, c in calls.items()}, {n: c.grid[0] for n, c in calls.items()})
    except NotTemplate as e:
        return str(e)
    return None


def _cli(argv):
    import contextlib
    import io

    from semcheck.checker.run.cli import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(argv)
    return code, buf.getvalue()


@pytest.mark.rule("PAR-1", "PAR-6", "PAR-7", "PAR-9", "PAR-10", "PAR-14", "PAR-15")
@pytest.mark.parametrize("path", ["examples/ring_allreduce.py", "examples/ring_allgather.py",
                                  "examples/bidirectional_reduce_scatter.py", "examples/ring_permute.py"])
def test_the_ring_kernels_are_proved_for_every_n(worker, path):
    claims = _every_n(worker, path)
    assert {(c.prop, c.mode) for c in claims} == {(p, m) for p in ARGUED for m in MODES}
    for c in claims:
        assert c.every_n, c.line()
        assert c.proved_at == TRACED
        assert "proved for every N \u2265 2" in c.text
        assert c.json["every_n"] is True
        assert c.json["rule"] == RULES[c.prop] and f"; {RULES[c.prop]}: " in c.text


@pytest.mark.rule("PAR-7", "PAR-9")
@pytest.mark.parametrize("path,why,ids", [("examples/double_buffered_pipeline.py", "semaphore", ""),
                                          ("bench/kernels/all_to_all.py", "loop", ""),
                                          ("examples/emit_pipeline.py", "loop", "run_scoped")])
def test_kernels_outside_the_argument_keep_their_per_n_verdicts(worker, path, why, ids):
    # PAR-9's premises are the launch's allocations, not a ring: without run_scoped the ids are proved
    for c in _every_n(worker, path):
        assert c.proved_at == TRACED  # the ordinary verdicts, unchanged
        if c.prop in ID_PROPS:
            assert c.every_n == (not ids) and ids in c.reason, c.line()
        else:
            assert not c.every_n and why in c.reason


@pytest.mark.rule("PAR-4")
def test_a_neighbour_that_wraps_past_2048_is_not_proved_for_every_n(worker):
    claims = _every_n(worker, VARIANTS, {"variant": "wraps_past"})
    for c in claims:
        assert c.proved_at == TRACED  # a ring at every traced N: only the symbolic check can see it
        if c.prop in ID_PROPS:  # where a kernel sends does not change what it allocates (PAR-9)
            assert c.every_n, c.line()
            continue
        assert not c.every_n
        n = int(re.search(r"at N = (\d+)", c.reason).group(1))
        assert n > 2048, c.reason
        assert "proved for N = 2..8 only" in c.text


@pytest.mark.rule("PAR-1", "PAR-3")
def test_a_wrap_around_bug_at_odd_n_is_violated_there(worker):
    claims = {(c.prop, c.mode): c for c in _every_n(worker, VARIANTS, {"variant": "odd_n"})}
    for mode in MODES:
        c = claims[("deadlock-free", mode)]
        assert not c.every_n
        assert set(c.violated_at) == {3, 5, 7}
        assert "violated at N = 3" in c.text
    assert not any(c.every_n for c in claims.values())


@pytest.mark.rule("PAR-5")
def test_a_signal_at_grid_step_3000_is_not_proved_for_every_n(worker):
    claims = _every_n(worker, VARIANTS, {"variant": "extra_signal_at"})
    for c in claims:
        assert c.proved_at == TRACED  # the grid never reaches step 3000 below N = 3002
        if c.prop in ID_PROPS:  # a signal allocates nothing (PAR-9)
            assert c.every_n, c.line()
            continue
        assert not c.every_n
        assert "grid step" in c.reason


@pytest.mark.rule("PAR-1", "PAR-3")
def test_a_python_branch_on_n_is_seen_only_by_a_probe_past_it(worker):
    # PAR-1's scope: below the branch every trace is the ring, and the claim would stand; the probe at
    # N = 31 traces the other jaxpr, which is no longer one template with the rest
    assert all(c.every_n for c in _every_n(worker, VARIANTS, {"variant": "python_past", "past": 20}))
    claims = _every_n(worker, VARIANTS, {"variant": "python_past", "past": 20}, probes=(31,))
    assert not any(c.every_n for c in claims)
    assert all("31" in c.text for c in claims)


@pytest.mark.rule("PAR-1", "PAR-6")
def test_the_clean_variant_file_is_proved_as_the_example_is(worker):
    assert all(c.every_n for c in _every_n(worker, VARIANTS, {"variant": "clean"}))


@pytest.mark.rule("PAR-4")
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=TRACED[-1] + 1, max_value=2 ** 29))
def test_a_neighbour_table_of_any_size_is_caught_past_it(worker, wrap):
    why = worker.submit(_guard, VARIANTS, {"variant": "wraps_past", "wrap": wrap}).result()
    found = re.search(r"at N = (\d+), my_id = (\d+)", why or "")
    n, me = int(found.group(1)), int(found.group(2))
    assert n > wrap and ((me + 1) % n) % wrap != (me + 1) % n  # a real counterexample


@pytest.mark.rule("PAR-5")
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=1, max_value=2 ** 20))
def test_a_signal_at_any_later_grid_step_is_caught(worker, at):
    why = worker.submit(_guard, VARIANTS, {"variant": "extra_signal_at", "at": at}).result()
    assert why is not None and "grid step" in why


@pytest.mark.rule("PAR-4")
def test_the_guard_knows_every_primitive_the_front_end_synchronises_with():
    from semcheck.checker.frontend.sync_rules import SYNC_PRIMS
    from semcheck.checker.parametric.template import SYNC_OR_SCOPE

    assert {p.name for p in SYNC_PRIMS} <= SYNC_OR_SCOPE


@pytest.mark.rule("PAR-4")
@given(st.integers(-2 ** 31, 2 ** 31 - 1), st.integers(-2 ** 31, 2 ** 31 - 1).filter(bool))
def test_the_symbolic_division_is_int32_division(x, y):
    import z3

    from semcheck.checker.parametric.template import _tdiv

    q = z3.simplify(_tdiv(z3, z3.IntVal(x), z3.IntVal(y))).as_long()
    want = abs(x) // abs(y) * (1 if (x >= 0) == (y > 0) else -1)  # C's truncation, as lax.div
    assert q == want
    r = x - y * q  # lax.rem: the sign of the dividend, smaller than the divisor
    assert abs(r) < abs(y) and (r == 0 or (r > 0) == (x > 0))


@pytest.mark.rule("PAR-3")
@given(st.integers(-50, 50), st.integers(-50, 50), st.lists(st.integers(2, 40), min_size=2, max_size=8, unique=True),
       st.integers(0, 7), st.integers(-3, 3))
def test_fit_finds_exactly_the_affine_sequences(a, b, ns, where, bump):
    from semcheck.checker.parametric.every_n import Affine, fit

    ns = sorted(ns)
    points = [(n, a * n + b) for n in ns]
    assert fit(points) == Affine(a, b)
    if len(ns) >= 3 and bump:
        k = where % len(ns)
        bent = [(n, v + (bump if i == k else 0)) for i, (n, v) in enumerate(points)]
        assert fit(bent) is None


# --- PAR-2: the erased run of a uniform ring ------------------------------------------------------

_SEMS = ("s0", "s1")


@st.composite
def uniform_rings(draw):
    """A program every device of which runs the same operations, its targets by offset (a ring)."""
    from semcheck.model.ops import BARRIER, DmaStart, GetBarrierSem, SemRef, Signal, Wait

    n = draw(st.integers(2, 6))
    body = []
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["signal", "wait", "dma", "dma_wait"]))
        off = draw(st.integers(-2, 2))
        sem = draw(st.sampled_from(_SEMS + (BARRIER,)))
        if kind == "signal":
            body.append(("signal", sem, draw(st.integers(1, 2)), off))
        elif kind == "wait":
            body.append(("wait", sem, draw(st.integers(1, 3))))
        elif kind == "dma":
            body.append(("dma", off))
        else:
            body.append(("dma_wait", draw(st.sampled_from(_SEMS))))
    bodies = []
    for d in range(n):
        ops = [GetBarrierSem()]
        for item in body:
            if item[0] == "signal":
                ops.append(Signal(SemRef(item[1]), item[2], device=(d + item[3]) % n))
            elif item[0] == "wait":
                ops.append(Wait(SemRef(item[1]), item[2]))
            elif item[0] == "dma":
                ops.append(DmaStart(SemRef("s1"), 64, src_sem=SemRef("s0"), device=(d + item[1]) % n))
            else:
                ops.append(Wait(SemRef(item[1]), 64, kind="dma"))
        bodies.append(ops)
    return n, bodies


@pytest.mark.rule("PAR-2")
@settings(max_examples=150, deadline=None)
@given(uniform_rings(), st.sampled_from(["eager", "hardware"]))
def test_the_erased_run_ends_where_the_ring_ends(ring, mode):
    from semcheck.checker.parametric.every_n import erased_run
    from semcheck.checker.static.least_stuck import least_stuck_vector
    from semcheck.checker.static.lowering import lower
    from semcheck.model.launch import Scratch, launch
    from semcheck.model.ops import Topology

    n, bodies = ring
    program = launch(Topology(n), bodies, collective_id=0, scratch=[Scratch("s0"), Scratch("s1")])
    low = lower(program, mode)
    assume(not low.failing)  # PAR-2 is about runs that do not fail
    er = erased_run(low)
    kind, pcs = least_stuck_vector(low)
    assert er.completed == (kind == "completed")
    assert len(set(pcs)) == 1 and er.stop == pcs[0]  # every device stops where core 0's erased run does
    # the totals of every device's counters are core 0's erased totals
    for core in range(n):
        got: dict = {}
        for (key, c), xs in low.by_counter.items():
            if c == core:
                got[key] = got.get(key, 0) + sum(x.amount for x in xs)
        for (key, c), ws in low.waits_by_counter.items():
            if c == core:
                got[key] = got.get(key, 0) - sum(w.value for w in ws)
        assert {k: v for k, v in got.items() if v} == {k: v for k, v in er.totals.items() if v}


@st.composite
def copying_rings(draw):
    """A uniform ring whose copies all have one size and whose DMA waits each take whole copies that have
    started on the same device (so that it completes), with barrier handshakes between them."""
    from semcheck.model.ops import BARRIER, DmaStart, GetBarrierSem, SemRef, Signal, Wait

    n = draw(st.integers(2, 6))
    size = draw(st.sampled_from([64, 128]))
    body, pending = [], {"s0": 0, "s1": 0}
    copies = draw(st.integers(1, 5))
    while copies or any(pending.values()):
        kind = draw(st.sampled_from(["copy", "wait", "handshake"]))
        if kind == "copy" and copies:
            copies -= 1
            body.append(("dma", draw(st.integers(-2, 2))))
            pending = {k: v + 1 for k, v in pending.items()}
        elif kind == "wait" and any(pending.values()) or not copies:
            sem = draw(st.sampled_from([k for k, v in pending.items() if v]))
            k = draw(st.integers(1, pending[sem]))
            pending[sem] -= k
            body.append(("dma_wait", sem, k * size))
        elif kind == "handshake":
            body.append(("signal", draw(st.integers(-2, 2))))
            body.append(("wait",))
    bodies = []
    for d in range(n):
        ops = [GetBarrierSem()]
        for item in body:
            if item[0] == "dma":
                ops.append(DmaStart(SemRef("s1"), size, src_sem=SemRef("s0"), device=(d + item[1]) % n))
            elif item[0] == "dma_wait":
                ops.append(Wait(SemRef(item[1]), item[2], kind="dma"))
            elif item[0] == "signal":
                ops.append(Signal(SemRef(BARRIER), 1, device=(d + item[1]) % n))
            else:
                ops.append(Wait(SemRef(BARRIER), 1))
        bodies.append(ops)
    return n, bodies


@pytest.mark.rule("PAR-10")
@settings(max_examples=60, deadline=None)
@given(copying_rings(), st.sampled_from(["eager", "hardware"]))
def test_what_par_10_reads_off_the_erased_run_is_what_dma_bytes_decides(ring, mode):
    # PAR-10's lemma at one N: a uniform ring that completes, one copy size per semaphore, every DMA wait
    # a multiple of it and zero erased totals is proved dma-bytes by the ordinary check
    from semcheck.checker.properties.checking import check_program
    from semcheck.checker.parametric.every_n import NotUniform, erased_run
    from semcheck.checker.parametric.ids import bytes_summary
    from semcheck.checker.static.lowering import lower
    from semcheck.model.launch import Scratch, launch
    from semcheck.model.ops import Topology

    n, bodies = ring
    program = launch(Topology(n), bodies, collective_id=0, scratch=[Scratch("s0"), Scratch("s1")])
    low = lower(program, mode)
    assume(not low.failing)
    try:
        er = erased_run(low)
    except NotUniform:
        assume(False)
    summary = bytes_summary(low)
    assume(er.completed and isinstance(summary, dict) and not any(er.totals.get(k, 0) for k in summary))
    (v,) = check_program(program, mode, ("dma-bytes",))
    assert v.verdict == "proved", (v.reason, summary)


@pytest.mark.rule("PAR-2")
def test_a_ring_that_is_not_uniform_is_refused():
    from semcheck.checker.parametric.every_n import NotUniform, erased_run
    from semcheck.checker.static.lowering import lower
    from semcheck.model.launch import Scratch, launch
    from semcheck.model.ops import SemRef, Signal, Topology, Wait

    n = 4
    bodies = [[Signal(SemRef("s0"), 1, device=max(d - 1, 0)), Wait(SemRef("s0"), 1)] for d in range(n)]
    low = lower(launch(Topology(n), bodies, scratch=[Scratch("s0")]), "eager")
    with pytest.raises(NotUniform, match="rotating"):
        erased_run(low)


@pytest.mark.rule("PAR-1")
def test_the_command_reports_and_exits_by_the_claims(worker):
    def run(*argv):
        return worker.submit(_cli, ["every-n", *argv]).result()

    code, out = run(str(ROOT / "examples/ring_permute.py"), "--upto", "8", "--probes", "31", "--dma-mode", "eager")
    assert code == 0 and out.count("proved for every N \u2265 2") == len(ARGUED) and "N = 2..8, 31 " in out
    code, out = run(str(ROOT / "examples/buggy/wrong_neighbour_deadlock.py"), "--upto", "7", "--probes", "none",
                    "--dma-mode", "eager", "--format", "json")
    assert code == 1 and '"violated_at"' in out
    code, out = run(str(ROOT / "tests/parametric_kernels/ring_allgather_variants.py"), "--upto", "8", "--probes",
                    "none")
    assert code == 0  # the clean variant
    assert run(str(ROOT / "no_such_kernel.py"))[0] == 2
    assert run(str(ROOT / "examples/ring_permute.py"), "--upto", "4")[0] == 2
    assert run(str(ROOT / "examples/ring_permute.py"), "--probes", "x")[0] == 2


# --- PAR-9: the ids for every N ---------------------------------------------------------------------


@pytest.mark.rule("PAR-9")
def test_semaphores_that_grow_with_n_are_caught_past_int16(worker):
    # 3 + 2N semaphores: ids 2000 .. 2002 + 2N, past 32767 from N = 15383; a correct ring at every traced N
    claims = {(c.prop, c.mode): c for c in _every_n(worker, VARIANTS, {"variant": "sems_grow"})}
    for (prop, mode), c in claims.items():
        assert c.proved_at == TRACED, c.line()
        if prop in ID_PROPS and mode in INTERPRETER:
            assert not c.every_n
            assert "first at N = 15383" in c.reason and "proved for N = 2..8 only" in c.text
        else:  # the other properties, and the ids on a TPU (HW-1), are unaffected
            assert c.every_n, c.line()


@pytest.mark.rule("PAR-9")
def test_a_collective_id_computed_from_n_is_caught_where_it_collides(worker):
    # collective id N + 1000: one of the internal ids 2000 .. 2002 at N = 1000 .. 1002, past int16 at 31768
    claims = {(c.prop, c.mode): c for c in _every_n(worker, VARIANTS, {"variant": "cid_from_n"})}
    for mode in INTERPRETER:
        assert not claims[("id-disjoint", mode)].every_n
        assert "internal ids" in claims[("id-disjoint", mode)].reason
        assert "first at N = 1000 " in claims[("id-disjoint", mode)].reason
        assert "does not fit int16, first at N = 31768" in claims[("id-int16", mode)].reason
        assert claims[("id-agreement", mode)].every_n  # the barrier is the fixed id on every core (SEM-2)
    assert claims[("id-disjoint", "hardware")].every_n  # HW-1
    assert all(c.proved_at == TRACED for c in claims.values())


@st.composite
def allocation_templates(draw):
    from semcheck.checker.parametric.ids import Allocations
    from semcheck.checker.parametric.template import Affine

    sems = []
    for k in range(draw(st.integers(0, 3))):
        dims = tuple(Affine(draw(st.integers(0, 3)), draw(st.integers(1, 40)))
                     for _ in range(draw(st.integers(0, 2))))
        sems.append((f"s{k}", dims))
    cid = draw(st.one_of(st.none(), st.builds(Affine, st.integers(-2, 3), st.integers(-200, 4000))))
    return Allocations(tuple(sems), draw(st.integers(0, 8)), cid)


def _first_bad(al, limit):
    """By evaluation at every N of 2 .. limit: the first N breaking id-int16 and id-disjoint (PAR-9)."""
    import math

    first = {"id-int16": None, "id-disjoint": None}
    for n in range(2, limit + 1):
        total = sum(math.prod(d(n) for d in dims) for _, dims in al.sems)
        last = 2000 + total - 1
        cid = al.collective(n) if al.collective is not None else None
        over = (total >= 1 and last > 32767) or (cid is not None and not -32768 <= cid <= 32767)
        if over and first["id-int16"] is None:
            first["id-int16"] = n
        if cid is not None and 2000 <= cid <= last <= 32767 and first["id-disjoint"] is None:
            first["id-disjoint"] = n
        if None not in first.values():
            break
    return first


@pytest.mark.rule("PAR-9")
@settings(max_examples=6, deadline=None)
@given(allocation_templates())
def test_the_id_polynomials_are_decided_exactly(al):
    from semcheck.checker.parametric.ids import id_reasons

    limit = 3000
    reasons = id_reasons(al, "eager")
    assert id_reasons(al, "hardware") == dict.fromkeys(reasons, "")  # HW-1
    want = _first_bad(al, limit)
    for prop in ("id-int16", "id-disjoint"):
        found = [int(x) for x in re.findall(r"at N = (\d+)", reasons[prop])]
        if want[prop] is not None and (prop == "id-int16" or want["id-int16"] is None
                                       or want["id-int16"] > want[prop]):
            assert found and min(found) == want[prop], (prop, reasons[prop], want)
        elif not reasons[prop]:
            assert want[prop] is None
        else:  # what Z3 found lies past the evaluated range (or id-int16 broke first)
            assert all(n > limit for n in found) or prop == "id-disjoint" and want["id-int16"] is not None
    assert (reasons["id-agreement"] == "") == ("semaphore ids" not in reasons["id-int16"]
                                               and "buffers" not in reasons["id-int16"])


# --- PAR-10: dma-bytes for every N ----------------------------------------------------------------


@pytest.mark.rule("PAR-10")
def test_dma_bytes_mutants_are_caught_or_refused(worker):
    # an unwaited half-block copy at grid step 3000: a correct ring below N = 3002, refused by PAR-5
    late = {(c.prop, c.mode): c for c in _every_n(worker, VARIANTS, {"variant": "extra_copy_at"})}
    for mode in MODES:
        c = late[("dma-bytes", mode)]
        assert not c.every_n and c.proved_at == TRACED and "grid step" in c.reason
    # a receive wait one row short at odd N: violated there, whatever the template says
    odd = {(c.prop, c.mode): c for c in _every_n(worker, VARIANTS, {"variant": "bytes_odd_n"})}
    for mode in MODES:
        c = odd[("dma-bytes", mode)]
        assert not c.every_n and c.violated_at == (3, 5, 7) and "violated at N = 3, 5, 7" in c.text


@pytest.mark.rule("ERR-56")
def test_a_direct_load_of_an_hbm_ref_is_claimed_for_no_n_under_hardware(worker):
    """The ordinary checks run on the program, which does not carry ERR-56's per-call reason: before, every
    property of this kernel was "proved for N = 2..7 only" under hardware. Now no hardware claim is made, naming the
    access's line and ERR-56."""
    claims = [c for c in _every_n(worker, "tests/parametric_kernels/hbm_direct_load.py") if c.mode == "hardware"]
    assert claims
    for c in claims:
        assert not c.every_n and not c.proved_at, c.text
        assert "ERR-56" in c.reason and "hbm_direct_load.py:18" in c.reason, c.reason
