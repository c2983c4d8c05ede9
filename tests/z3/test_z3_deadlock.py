"""deadlock-free: rings, the order encoding against the bench's renderings and the timestamped baseline, unknown paths, mutations."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st

import sys
from pathlib import Path

import z3
import z3_truth as truth
from z3_strategies import examples, programs

from semcheck.checker.z3 import deadlock_free
from ring_programs import ring_allreduce
from semcheck.checker.z3.deadlock import _two_feeders, make_encoding, unary_sum_network
from semcheck.checker.static.system import EncodingBug
from semcheck.checker.static.least_stuck import failure_reached, s_prime_run
from semcheck.checker.static.lowering import lower
from semcheck.model import (
    BARRIER,
    DMA_MODES,
    AllocSem,
    DmaStart,
    GetBarrierSem,
    Scratch,
    SemRef,
    Signal,
    Topology,
    Wait,
    explore,
    launch,
    run,
)
from semcheck.model.explore import ExplorationLimit

# the timestamped encoding is the bench's baseline (bench/timestamped.py), not product code
sys.path.append(str(Path(__file__).resolve().parents[2] / "bench"))
from timestamped import deadlock_free_timestamped  # noqa: E402
import integer_encodings  # noqa: E402, F401 - the plain and compact renderings, the bench's


pytestmark = pytest.mark.rule("PROP-4")

# --- rings ------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", DMA_MODES)
@pytest.mark.parametrize("n", [2, 3, 5])
def test_clean_ring_allreduce_is_proved(n, mode):
    v = deadlock_free(ring_allreduce(n), mode)
    assert v.verdict == "proved", v.reason
    assert v.stats["z3"] == "unsat"


@pytest.mark.parametrize("mode", DMA_MODES)
def test_ring_with_a_missing_credit_deadlocks_with_a_replayable_witness(mode):
    p = ring_allreduce(4, bug="deadlock")
    v = deadlock_free(p, mode)
    assert v.verdict == "violated"
    w = v.witness
    out = run(p, mode, w.schedule)
    assert out.kind == "deadlock" and list(out.state.pcs) == w.details["terminal_pcs"]
    # device 3 (left of device 0) waits for the credit device 0 never sends
    blocked = {b["core"]: b for b in w.details["blocked"]}
    assert blocked[3]["op"] == "wait barrier[0] for 1" and blocked[3]["count"] == 0
    assert all(str(loc).startswith("ring_allreduce.py:") for loc in w.locs)
    # the stuck vector z3 found lies above the real terminal positions (least stuck vector)
    assert all(a <= b for a, b in zip(w.details["terminal_pcs"], v.stats["stuck_vector"]))


def test_colliding_collective_id_makes_deadlock_unknown_in_the_interpreter_only():
    p = ring_allreduce(3, bug="collide")
    for mode in ("eager", "on_wait"):
        v = deadlock_free(p, mode)
        assert v.verdict == "unknown"
        assert "Semaphore 2001 occurs as both fixed-id and internal." in v.reason
        # the explorer fallback decides it: every run fails, so every run ends with unfinished cores (PROP-4,
        # ERR-19), as RUN-11 says of a failure S' reaches (ERR-16)
        decided = deadlock_free(p, mode, fallback_states=50_000)
        assert decided.verdict == "violated" and decided.witness.details["rule"] == "ERR-19"
        assert run(p, mode, decided.witness.schedule).kind == "error"
    assert deadlock_free(p, "hardware").verdict == "proved"


# --- renderings agree with each other and with the explorer -------------------------------------


@examples(30, 3000)  # 60 took 11-33 s of the default run, by the programs drawn
@given(programs())
def test_all_encodings_agree_with_the_explorer(p):
    for mode in DMA_MODES:
        ex = truth.explored(p, mode)
        verdicts = {enc: deadlock_free(p, mode, encoding=enc).verdict for enc in ("order", "compact", "plain")}
        verdicts["timestamped"] = deadlock_free_timestamped(p, mode).verdict
        assert len(set(verdicts.values())) == 1, verdicts
        v = verdicts["order"]
        event(f"{mode} {v}")
        if v != "unknown":
            assert (v == "violated") == ("deadlock" in ex.kinds())


@pytest.mark.parametrize("enc", ["order", "compact", "plain"])
def test_every_encoding_proves_and_refutes_small_rings(enc):
    for mode in DMA_MODES:
        assert deadlock_free(ring_allreduce(3), mode, encoding=enc).verdict == "proved"
        assert deadlock_free(ring_allreduce(3, bug="deadlock"), mode, encoding=enc).verdict == "violated"


def test_a_certificate_that_gives_up_leaves_the_verdict_decided():
    # the plain rendering cannot finish a 32-device ring in a millisecond; the least stuck vector
    # decides anyway (RUN-3), and the statistics say the certificate is missing
    from semcheck.checker.properties.deadlock import deadlock_free as uncertified

    for bug, verdict in ((None, "proved"), ("deadlock", "violated")):
        p = ring_allreduce(32, bug=bug)
        v = deadlock_free(p, "hardware", encoding="plain", timeout_ms=1)
        assert v.verdict == verdict
        assert v.stats["certificate"].startswith("z3 gave up")
        assert uncertified(p, "hardware").verdict == verdict


def test_timestamped_baseline_on_rings():
    for mode in DMA_MODES:
        assert deadlock_free_timestamped(ring_allreduce(3), mode).verdict == "proved"
        v = deadlock_free_timestamped(ring_allreduce(3, bug="deadlock"), mode)
        assert v.verdict == "violated" and v.witness.blocked


def test_timeout_is_unknown_never_proved():
    # the timestamped encoding cannot finish an 8-device ring in a millisecond
    v = deadlock_free_timestamped(ring_allreduce(8), "hardware", timeout_ms=1)
    assert v.verdict == "unknown" and "z3 gave up" in v.reason


# --- unknown paths ------------------------------------------------------------------------------


def test_a_program_that_can_fail_is_unknown():
    # core 1 signals a semaphore index that does not exist; core 0 waits for it
    p = launch(Topology(2), [[Wait(SemRef("s", 0))], [Signal(SemRef("s", 3), device=0)]], scratch=[Scratch("s")])
    for mode in DMA_MODES:
        v = deadlock_free(p, mode)
        assert v.verdict == "unknown" and "semaphore index 3 out of bounds" in v.reason


def test_racy_allocation_order_is_unknown_and_the_fallback_decides():
    # two cores of one device: core 0 allocates for the device while core 1 allocates for itself
    topo = Topology(1, 2)
    bodies = [
        [AllocSem("dev", 1, site="dev", scope="device"), Signal(SemRef("dev"), 1, core=1)],
        [AllocSem("mine", 1, site="mine"), Wait(SemRef("mine"))],
    ]
    p = launch(topo, bodies)
    v = deadlock_free(p, "eager")
    assert v.verdict == "unknown" and "depend on the schedule" in v.reason
    decided = deadlock_free(p, "eager", fallback_states=20_000)
    assert decided.verdict == "violated" and decided.stats["decided_by"] == "explorer"
    assert deadlock_free(p, "hardware").verdict == "violated"  # sites: no ids to race on


def test_barrier_semaphore_lookup_racing_with_get_barrier_semaphore_is_unknown():
    # device 1 uses the barrier semaphore without calling get_barrier_semaphore itself
    p = launch(Topology(2), [[GetBarrierSem(), Wait(SemRef(BARRIER))], [Signal(SemRef(BARRIER), device=0)]],
               collective_id=0)
    v = deadlock_free(p, "eager")
    assert v.verdict == "unknown" and "collective id 0" in v.reason
    kinds = explore(p, "eager", reduce=False).kinds()
    assert kinds == {"completed", "error"}  # the race is real


# --- mutations: a dropped constraint is caught by the cross-check ------------------------------------


def _raw_answer(p, mode, drop):
    """sat (deadlock claimed) / unsat from a (possibly mutated) order encoding, or None if outside it."""
    low = lower(p, mode)
    if not low.ok or failure_reached(low, s_prime_run(low).state.pcs):
        return None
    enc = make_encoding(low, "order", frozenset(drop))
    s = z3.Solver()
    enc.add_to(s)
    return s.check() == z3.sat


class _Found(Exception):
    pass


def _first(strategy, predicate, tries: int):
    """The first generated example satisfying `predicate` (no shrinking), or None."""
    found = []

    @settings(max_examples=tries, phases=[Phase.generate], deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def search(x):
        if predicate(x):
            found.append(x)
            raise _Found

    try:
        search()
    except _Found:
        pass
    return found[0] if found else None


def _mutant_differs(p, mode, drop) -> bool:
    claim = _raw_answer(p, mode, drop)
    return claim is not None and claim != _raw_answer(p, mode, set())


@pytest.mark.parametrize("drop", ["dma", "signal", "barrier", "own_waits"])
def test_mutated_encoder_disagrees_with_the_explorer(drop):
    """Drop one family of constraints from the encoder: the cross-check finds a program it gets wrong.

    The search compares the mutant with the unmutated encoding (cheap; the
    unmutated one is held to the explorer by the other tests); the program
    found is then checked against the explorer itself.
    """
    mode = "hardware"
    kinds = {}

    def exposes(p) -> bool:
        if not _mutant_differs(p, mode, {drop}):
            return False
        try:
            kinds[p] = explore(p, mode, max_states=20_000).kinds()
        except ExplorationLimit:
            return False
        return True

    p = _first(programs(), exposes, 5000)
    if p is None:  # pragma: no cover - would mean the cross-check is blind to this mutation
        pytest.fail(f"no program exposes the mutation dropping {drop}")
    deadlock = "deadlock" in kinds[p]
    assert _raw_answer(p, mode, {drop}) != deadlock  # the mutant contradicts the explorer
    assert _raw_answer(p, mode, set()) == deadlock  # the real encoding does not
    # and the verdict function's own consistency check (fast run, replay) refuses the mutant
    with pytest.raises(EncodingBug):
        deadlock_free(p, mode, _drop=frozenset({drop}))


def test_dropping_dma_contributions_breaks_a_ring_proof():
    p = ring_allreduce(3)
    assert _raw_answer(p, "eager", set()) is False
    assert _raw_answer(p, "eager", {"dma"}) is True  # DMA waits now look blocked: a false deadlock
    with pytest.raises(EncodingBug):
        deadlock_free(p, "eager", _drop=frozenset({"dma"}))


# --- DMAs ----------------------------------------------------------------------------------------


def test_dma_without_send_semaphore_and_local_copies():
    # a local copy signalling only its receive semaphore, waited for by the same core
    p = launch(Topology(2), [[DmaStart(SemRef("r"), 8), Wait(SemRef("r"), 8, kind="dma")], []], scratch=[Scratch("r")])
    for mode in DMA_MODES:
        assert deadlock_free(p, mode).verdict == "proved"
        assert explore(p, mode).kinds() == {"completed"}


# --- counters fed by several cores: merging networks, staircases, pseudo-Boolean sums -------------------


@pytest.mark.parametrize("mode", DMA_MODES)
@pytest.mark.parametrize(("feeders", "inc", "rendering"), [
    (2, 1, "network"), (3, 1, "network"), (2, 3000, "staircase"), (3, 3000, "pb"),
])
@pytest.mark.parametrize("missing", [False, True])
def test_a_wait_fed_by_several_cores_is_decided(mode, feeders, inc, rendering, missing):
    """The last device waits twice for `feeders * inc` on one semaphore every other device signals twice.

    Unit feeds count through a merging network; feeds too large for one
    (thousands of units, like DMA bytes) become a staircase with two
    feeders and a pseudo-Boolean sum with more.
    """
    sem = SemRef("s", 0)
    waiter = feeders
    senders = [[Signal(sem, inc, device=waiter), Signal(sem, inc, device=waiter)] for _ in range(feeders)]
    if missing:
        senders[-1].pop()
    body = [Wait(sem, feeders * inc), Wait(sem, feeders * inc)]
    p = launch(Topology(feeders + 1), [*senders, body], scratch=[Scratch("s")])
    v = deadlock_free(p, mode)
    assert (v.stats["format"], v.stats["pb_constraints"] > 0) == (
        ("smt2", True) if rendering == "pb" else ("dimacs", False))
    assert v.verdict == ("violated" if missing else "proved")
    ex = explore(p, mode)  # the model's answer over every schedule
    assert any(o.kind == "deadlock" for o in ex.outcomes) == missing


@given(
    feeds=st.lists(st.lists(st.tuples(st.integers(0, 2), st.integers(1, 4)), max_size=6), min_size=1, max_size=2),
    need=st.integers(1, 20),
    data=st.data(),
)
def test_two_feeder_staircase_holds_exactly_when_the_sum_reaches_need(feeds, need, data):
    """Literals are prefix positions (a repeat step of 0 reuses the previous literal, as contributions
    between two stoppable positions do); a feed that got past position k holds literals <= k."""
    lit_feeds, literal = [], 0
    for f, feed in enumerate(feeds):
        out = []
        for step, amount in feed:
            literal += 1 if step or not out else 0
            out.append((1000 * (f + 1) + literal, amount))
        lit_feeds.append(out)
    alternatives = _two_feeders(need, *lit_feeds)
    assert alternatives is not None
    reached = [data.draw(st.integers(0, len(feed))) for feed in lit_feeds]  # contributions made per feed
    true = {x for feed, r in zip(lit_feeds, reached) for x, _ in feed[:r]}
    # a literal stands for "got past its last contribution": drop those only partly reached
    for feed, r in zip(lit_feeds, reached):
        if r < len(feed) and r > 0 and feed[r][0] == feed[r - 1][0]:
            true.discard(feed[r][0])
    total = sum(a for feed, r in zip(lit_feeds, reached) for x, a in feed[:r] if x in true)
    assert any(all(x in true for x in conj) for conj in alternatives) == (total >= need)


@given(
    feeds=st.lists(st.lists(st.tuples(st.integers(0, 2), st.integers(1, 3)), max_size=6), min_size=1, max_size=4),
    data=st.data(),
)
def test_merging_network_counts_exactly_in_its_least_model(feeds, data):
    """Output t-1 of the network is derived by unit propagation iff the feeds' true units reach t."""
    lit_feeds, literal = [], 0
    for feed in feeds:
        out = []
        for step, amount in feed:
            literal += 1 if step or not out else 0
            out.append((literal, amount))
        lit_feeds.append(out)
    counter = [literal]

    def fresh():
        counter[0] += 1
        return counter[0]

    outputs, clauses = unary_sum_network(lit_feeds, fresh)
    # each feed got past a prefix of its distinct literals (prefix-closed, as in the least model)
    true = set()
    for feed in lit_feeds:
        distinct = list(dict.fromkeys(x for x, _ in feed))
        true.update(distinct[: data.draw(st.integers(0, len(distinct)))])
    total = sum(a for feed in lit_feeds for x, a in feed if x in true)
    derived = set(true)
    changed = True
    while changed:  # forward chaining = the least model
        changed = False
        for cl in clauses:
            head = [x for x in cl if x > 0]
            if len(head) == 1 and head[0] not in derived and all(-x in derived for x in cl if x < 0):
                derived.add(head[0])
                changed = True
    assert len(outputs) == sum(a for feed in lit_feeds for _, a in feed)
    for t, x in enumerate(outputs, start=1):
        holds = x is True or (x is not False and x in derived)
        assert holds == (total >= t), (t, total)
