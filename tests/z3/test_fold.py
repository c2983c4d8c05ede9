"""RUN-7: a program whose devices repeat, folded onto a few devices, and the proofs made there."""

from __future__ import annotations

import dataclasses

import pytest
import z3_truth as truth
from hypothesis import HealthCheck, Phase, event, given, settings
from semcheck.checker.properties import failing_facts
from semcheck.checker.static.lowering import lower
from semcheck.checker.properties.registry import BY_ID, IDS as PROPERTIES
from semcheck.checker.properties.decide import decide
from semcheck import check_program
from ring_programs import ring_allreduce
from semcheck.model import (
    DMA_MODES,
    Barrier,
    DmaStart,
    ExitCheck,
    Program,
    Scratch,
    SemRef,
    Signal,
    Topology,
    Wait,
    fast_run,
    launch,
)
from semcheck.model import symmetry as symmetry_module
from semcheck.model.fold import find_fold
from semcheck.model.symmetry import Rotation, compare
from z3_strategies import examples, programs, symmetric_programs

pytestmark = pytest.mark.rule("RUN-7")

# --- an oracle for the rotation, written without the shortcuts of `find_fold` ------------------


def _image(op, period: int, topo: Topology, names: dict[str, str]):
    """`op` as the device `period` further on would run it (barrier names as `names` maps them)."""
    n, per = topo.num_devices, topo.cores_per_device
    if isinstance(op, (Signal, DmaStart)) and op.device is not None:
        return dataclasses.replace(op, device=(op.device + period) % n)
    if isinstance(op, ExitCheck):
        return dataclasses.replace(op, device=(op.device + period) % n)
    if isinstance(op, Barrier):
        return Barrier(names[op.name], frozenset((p + period * per) % topo.num_cores for p in op.participants),
                       op.loc)
    return op


def _is_rotation(program: Program, period: int) -> bool:
    topo = program.topology
    shift = period * topo.cores_per_device
    names: dict[str, str] = {}
    for c in range(topo.num_cores):
        src, dst = program.cores[c], program.cores[(c + shift) % topo.num_cores]
        if len(src) != len(dst):
            return False
        for x, y in zip(src, dst):
            if isinstance(x, Barrier) and (not isinstance(y, Barrier)
                                           or names.setdefault(x.name, y.name) != y.name):
                return False
            if _image(x, period, topo, names) != y:
                return False
    return True


def _lift(pcs: tuple[int, ...], cores: int) -> tuple[int, ...]:
    """The fold's positions as positions of every core of the program (classes move in step)."""
    return tuple(pcs[c % len(pcs)] for c in range(cores))


# --- which programs fold ----------------------------------------------------------------------


@pytest.mark.parametrize("n, m", [(8, 4), (16, 4), (256, 4), (6, 3), (12, 3), (10, 5)])
def test_a_ring_folds_onto_the_fewest_devices_that_keep_both_neighbours_apart(n, m):
    f = find_fold(ring_allreduce(n))
    assert f is not None and (f.devices, f.period, f.of_devices) == (m, 1, n)
    assert f.program.topology == Topology(m) and len(f.program.cores) == m


@pytest.mark.parametrize("n", [2, 3, 4, 5, 7])
def test_a_ring_too_small_or_prime_is_not_folded(n):
    # 4: left and right neighbour would be one device of a 2-device fold; 5, 7: no divisor fits
    assert find_fold(ring_allreduce(n)) is None


def test_a_device_out_of_step_leaves_the_program_unfolded():
    assert find_fold(ring_allreduce(8, bug="deadlock")) is None


def test_a_core_index_past_the_device_is_not_folded_away():
    # the interpreter indexes device * cores + core unchecked: core 3 on a one-core device is
    # three devices on, and past the end it fails; a fold would move both
    n = 8
    bodies = [[Signal(SemRef("s"), 1, core=3), Wait(SemRef("s"), 1)] for _ in range(n)]
    p = launch(Topology(n), bodies, scratch=[Scratch("s", 1)])
    assert _is_rotation(p, 1) and find_fold(p) is None


def test_a_barrier_that_would_straddle_the_fold_needs_a_larger_fold():
    # device d meets its right neighbour at a pairwise barrier `pair{d}`: the 4-device fold would
    # cut pair3 (devices 3 and 4), so the fold has to be the whole program
    n = 8
    bodies = []
    for d in range(n):
        right, left = (d + 1) % n, (d - 1) % n
        bodies.append([Barrier(f"pair{d}", frozenset({d, right})), Barrier(f"pair{left}", frozenset({left, d}))]
                      if d % 2 == 0 else
                      [Barrier(f"pair{left}", frozenset({left, d})), Barrier(f"pair{d}", frozenset({d, right}))])
    p = launch(Topology(n), bodies)
    assert find_fold(p) is None
    # without the straddling barriers the same shape folds by two devices
    plain = launch(Topology(n), [[Signal(SemRef("s"), 1, device=(d + 1) % n), Wait(SemRef("s"), 1)]
                                 for d in range(n)], scratch=[Scratch("s", 1)])
    assert find_fold(plain).devices == 2


def test_barrier_names_must_map_one_to_one_and_close_round_the_ring():
    n = 8
    everyone = frozenset(range(n))
    # names repeating every 3 devices on 8: each device's image has the next name, except that
    # device 7's image would need C's successor to be A's predecessor
    cycling = launch(Topology(n), [[Barrier("ABC"[d % 3], everyone)] for d in range(n)])
    assert compare(cycling, 1) is None
    # two barriers of device 0 become one barrier met twice on device 1: not the same meetings
    merged = launch(Topology(4), [[Barrier("A", frozenset(range(4))), Barrier("C", frozenset(range(4)))]
                                  if d % 2 == 0 else [Barrier("B", frozenset(range(4)))] * 2 for d in range(4)])
    assert compare(merged, 1) is None
    assert compare(merged, 2) is not None


@examples(60, 3000)
@given(programs(max_cores=8))
def test_a_fold_is_found_only_where_the_devices_really_repeat(p):
    f = find_fold(p)
    if f is not None:
        event("folded")
        assert _is_rotation(p, f.period)


@examples(100, 5000)
@given(symmetric_programs(max_cores=16, max_ops=4, foldable=True))
def test_the_fold_is_the_first_devices_with_named_devices_taken_modulo_the_fold(drawn):
    p, perturbed = drawn
    f = find_fold(p)
    event(f"perturbed={perturbed} folded={f is not None}")
    if f is None:
        return
    assert _is_rotation(p, f.period) and f.devices % f.period == 0 and p.topology.num_devices % f.devices == 0
    per = p.topology.cores_per_device
    for c, ops in enumerate(f.program.cores):
        for x, y in zip(p.cores[c], ops, strict=True):
            if isinstance(x, (Signal, DmaStart)) and x.device is not None:
                assert y.device == x.device % f.devices
            elif isinstance(x, Barrier):
                assert y.participants == frozenset(q for q in x.participants if q < f.devices * per)
            else:
                assert y == x or isinstance(x, ExitCheck)


# --- the fold runs as the program with its device classes in step --------------------------------


@examples(100, 5000)
@given(symmetric_programs(max_cores=16, max_ops=4, foldable=True))
def test_the_folds_maximal_run_is_the_programs_maximal_run(drawn):
    p, _ = drawn
    f = find_fold(p)
    if f is None:
        return
    for mode in DMA_MODES:
        if not lower(p, mode).ok:
            # RUN-3 gives one final state only to a static lowering; where it is refused (a collective id
            # that may meet an internal id depending on the order) properties explore every schedule (ERR-19)
            event(f"{mode} not static")
            continue
        whole, folded = fast_run(p, mode, record=False), fast_run(f.program, mode, record=False)
        event(f"{mode} {whole.kind}")
        assert whole.kind == folded.kind
        if whole.kind != "error":  # a failure stops the others wherever the run order left them
            assert _lift(folded.state.pcs, p.topology.num_cores) == whole.state.pcs


# --- proofs on the fold ------------------------------------------------------------------------


@examples(30, 3000)
@given(symmetric_programs(max_cores=16, max_ops=4, foldable=True))
def test_what_the_fold_proves_holds_for_the_whole_program(drawn):
    # ERR-19's explorer within a tenth of its budget: a 16-device program that can fail is past either
    # budget (unknown, accepted below), and at the full one a single draw cost minutes
    with pytest.MonkeyPatch.context() as m:
        m.setattr(failing_facts, "FALLBACK_STATES", failing_facts.FALLBACK_STATES // 10)
        _fold_proofs_hold(drawn)


def _fold_proofs_hold(drawn):
    p, _ = drawn
    f = find_fold(p)
    if f is None:
        return
    for mode in DMA_MODES:
        for prop in PROPERTIES:
            on_fold = decide(prop, f.program, mode)
            whole = decide(prop, p, mode)
            event(f"{prop}: fold {on_fold.verdict}, program {whole.verdict}")
            if on_fold.verdict == "proved":  # the whole program may only be past the explorer's budget (ERR-19)
                assert whole.verdict == "proved" or (whole.verdict == "unknown" and "ERR-19" in whole.reason), (
                    prop, mode, whole)
        got = check_program(p, mode)
        want = check_program(p, mode, fold=False)
        assert [v.verdict for v in got] == [v.verdict for v in want]


@examples(15, 2000)  # each example explores up to 20,000 states: 40 took 98 s of the default run
@given(symmetric_programs(max_cores=8, max_ops=3, foldable=True))
def test_a_deadlock_freedom_proof_on_the_fold_agrees_with_exploring_every_interleaving(drawn):
    p, _ = drawn
    f = find_fold(p)
    if f is None:
        return
    for mode in DMA_MODES:
        (v,) = check_program(p, mode, ("deadlock-free",))
        if "fold" in v.stats:
            event(f"{mode} proved on the fold")
            ex = truth.explored(p, mode, max_states=20_000)
            assert "deadlock" not in ex.kinds()


def test_check_program_names_the_fold_in_what_it_proves():
    from semcheck.checker.properties.registry import BY_ID, IDS

    p = ring_allreduce(16)
    folding = tuple(q for q in IDS if BY_ID[q].folds)
    for mode in DMA_MODES:
        for v in check_program(p, mode, folding):
            assert v.verdict == "proved" and v.stats["fold"]["devices"] == 4, v
            assert v.reason.startswith("proved on a fold onto 4 of the 16 devices")


def test_race_freedom_is_never_proved_on_a_fold():
    # RUN-7 lifts the fold's runs with each class in step; a race may need a class out of step
    p = ring_allreduce(8)
    for mode in DMA_MODES:
        (v,) = check_program(p, mode, ("race-free",))
        assert v.verdict == "proved" and "fold" not in v.stats, v


def test_a_violation_on_the_fold_is_witnessed_on_the_whole_program():
    # the ring's last wait asks for one more than it gets on every device: the fold sees the
    # deadlock, and the witness comes from the 16-device program
    n = 16
    bodies = [[Signal(SemRef("s"), 1, device=(d + 1) % n), Wait(SemRef("s"), 2)] for d in range(n)]
    p = launch(Topology(n), bodies, scratch=[Scratch("s", 1)])
    assert find_fold(p).devices == 2
    for mode in DMA_MODES:
        (v,) = check_program(p, mode, ("deadlock-free",))
        assert v.verdict == "violated" and "fold" not in v.stats
        assert {c for c, _, _ in v.witness.blocked} == set(range(n))


def test_claiming_a_fold_that_is_not_there_is_caught(monkeypatch):
    """The cross-check has teeth: with the rotation check switched off, some perturbed program is
    proved on its fold although the program itself is not."""
    def every_barrier_kept(program, period, shifts=None, *, infer=False, upto=None):  # the mutant: no operation is compared
        names = {op.name: op.name for ops in program.cores for op in ops if isinstance(op, Barrier)}
        return Rotation(program.topology, period, shifts or {}, names)

    monkeypatch.setattr(symmetry_module, "compare", every_barrier_kept)
    wrong = []

    @settings(max_examples=1000, phases=[Phase.generate], deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(symmetric_programs(max_cores=16, max_ops=4, foldable=True))
    def search(drawn):
        p, perturbed = drawn
        if wrong or not perturbed:
            return
        f = find_fold(p)
        if f is None:
            return
        for mode in DMA_MODES:
            for prop in PROPERTIES:
                if decide(prop, f.program, mode).verdict == "proved" and decide(prop, p, mode).verdict != "proved":
                    wrong.append((p, mode, prop))
                    return

    search()
    assert wrong, "a fold of a program whose devices do not repeat went unnoticed"


def test_a_fold_can_be_race_free_while_the_program_races():
    # Each device copies into its right neighbour's slot, reads its own after the copy lands,
    # passes a token right, relays K tokens, then copies into the same slot again with no
    # handshake. The second copy waits for the read K devices back: on the 2-device fold that is
    # the receiver itself (ordered), on 8 devices it is another device (a race).
    from semcheck import check_program
    from semcheck.model.ops import Access, DmaStart, Region
    from semcheck.model.race import find_races

    n, k = 8, 3
    whole = Region(((0, 8),))

    def copy(d: int) -> DmaStart:
        return DmaStart(SemRef("r"), 1, device=(d + 1) % n, src_buf="src", src_region=whole,
                        dst_buf="slot", dst_region=whole)

    bodies = []
    for d in range(n):
        ops = [copy(d), Wait(SemRef("r"), 1, kind="dma"), Access("slot", whole)]
        for _ in range(k):
            ops += [Signal(SemRef("s"), 1, device=(d + 1) % n), Wait(SemRef("s"), 1)]
        ops += [copy(d), Wait(SemRef("r"), 1, kind="dma")]
        bodies.append(ops)
    scratch = [Scratch("r", 1), Scratch("s", 1), Scratch("slot", kind="buffer", nbytes=8),
               Scratch("src", kind="buffer", nbytes=8)]
    p = launch(Topology(n), bodies, scratch=scratch, collective_id=0)
    f = find_fold(p)
    assert f is not None and f.devices < n
    assert find_races(f.program, "hardware").races == ()
    assert find_races(p, "hardware").races
    (v,) = check_program(p, "hardware", ("race-free",))
    assert v.verdict == "violated"


@pytest.mark.rule("RUN-7")
def test_even_and_odd_devices_may_differ_under_a_rotation_by_two():
    """Positions are kept per chain of cores the rotation links (devices 0, 2, ... and 1, 3, ...), not per
    lane: the odd devices' shorter programs once made the check index past their end."""
    n = 4
    even = lambda d: [Signal(SemRef("s"), 1, device=(d + 1) % n), Signal(SemRef("s"), 1, device=(d + 1) % n)]
    odd = lambda d: [Wait(SemRef("s"), 2)]
    p = launch(Topology(n), [even(d) if d % 2 == 0 else odd(d) for d in range(n)], scratch=[Scratch("s")])
    assert len(p.cores[0]) != len(p.cores[1])
    assert Rotation.observe(p).devices == 2
    assert compare(p, 1) is None


# --- the run of one class, where no fold is faithful (RUN-31) --------------------------------------


def _class_fold_only(p: Program):
    """DR-41's class fold of `p` when `p` repeats but has no faithful fold (RUN-7 (b) fails), else None."""
    from semcheck.model.quotient import class_quotient

    n = p.topology.num_devices
    period = Rotation.observe(p).devices
    m = next((m for m in range(period, n, period) if m >= 2 and n % m == 0), None)
    if m is None or find_fold(p) is not None:
        return None
    return class_quotient(p, m)


@pytest.mark.rule("RUN-31")
@examples(100, 5000)
@given(symmetric_programs(max_cores=12, max_ops=4, perturb=False, counts=(4, 6, 8)))
def test_a_class_runs_maximal_run_is_the_programs_maximal_run(drawn):
    p, _ = drawn
    f = _class_fold_only(p)
    if f is None:
        return
    from semcheck.checker.properties.checking import exposures_of

    assert exposures_of(p, True) == exposures_of(p, False)  # the "modes differ" notes, off the class run
    for mode in DMA_MODES:
        whole, folded = fast_run(p, mode, record=False), fast_run(f.program, mode, record=False)
        event(f"{mode} {whole.kind} on {f.devices} of {p.topology.num_devices} devices")
        assert whole.kind == folded.kind
        if whole.kind != "error":
            assert _lift(folded.state.pcs, p.topology.num_cores) == whole.state.pcs


@pytest.mark.rule("RUN-31")
@examples(60, 3000)
@given(symmetric_programs(max_cores=12, max_ops=4, perturb=False, counts=(4, 6, 8)))
def test_what_a_class_run_proves_holds_for_the_whole_program(drawn):
    p, _ = drawn
    f = _class_fold_only(p)
    if f is None:
        return
    with pytest.MonkeyPatch.context() as m:
        m.setattr(failing_facts, "FALLBACK_STATES", failing_facts.FALLBACK_STATES // 10)
        for mode in DMA_MODES:
            for prop in PROPERTIES:
                if not BY_ID[prop].folds:
                    continue
                on_class = decide(prop, f.program, mode)
                if on_class.verdict != "proved":
                    continue
                whole = decide(prop, p, mode)
                event(f"{prop}: proved on the class run, program {whole.verdict}")
                assert whole.verdict == "proved" or (whole.verdict == "unknown" and "ERR-19" in whole.reason), (
                    prop, mode, whole)
            got = check_program(p, mode)
            want = check_program(p, mode, fold=False)
            assert [v.verdict for v in got] == [v.verdict for v in want]
            assert any("RUN-31" in v.reason for v in got) or not any(v.stats.get("fold") for v in got)
