"""`deadlock-free` (PROP-4), decided by the least stuck vector of the static system (RUN-3).

By RUN-3 every maximal run of S' ends at its least stuck vector, so where S' ends
(`static.least_stuck.s_prime_end`) is the verdict: every core at its end is **proved**; anything else is a
deadlock, **violated**, witnessed by the fast run's schedule to it, replayed on the step relation
and explained (`semcheck.checker.properties.deadlock_explanation`).

The Z3 stuck-vector query asks the same question another way. It is an optional certificate
(`semcheck.checker.z3.deadlock`): it confirms the verdict, or raises `EncodingBug` when it
disagrees; a solver that gives up certifies nothing and leaves the verdict as it is.

Soundness conditions, checked first (otherwise decided by the exhaustive explorer within
`fallback_states`, ERR-19, or **unknown**): the lowering must be static (`Lowered.unsupported`
empty), and no failure may be reachable (S' must not stop at a failing operation), because a failure
can end some runs before a deadlock that other runs reach. A failure S' reaches is decided by
`failing_runs` first when it ends the whole run under an interpreter mode (RUN-11); the explorer
takes the failures that end only their device, not those of `hardware` (a TPU's failures are not
the model's, ERR-19).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from semcheck.checker.properties import failing_facts
from semcheck.checker.properties.deadlock_explanation import deadlock_witness
from semcheck.checker.properties.failing_runs import failure_witness
from semcheck.checker.properties.analysis import ModeAnalysis, analysis_of
from semcheck.checker.properties.verdict import NO_RUN_RAISES, Verdict
from semcheck.checker.static.system import EncodingBug, Lowered
from semcheck.checker.static.least_stuck import SPrimeEnd, failure_reached
from semcheck.model.fast import fast_run
from semcheck.model.ops import DmaMode, Program

PROPERTY = "deadlock-free"

# (lowering, S''s end) -> statistics; raises EncodingBug when it disagrees with the end
Certificate = Callable[[Lowered, SPrimeEnd], dict]


def deadlock_free(
    program: Program,
    mode: DmaMode,
    *,
    timeout_ms: int = 30_000,
    fallback_states: int | None = None,
    replay: bool = True,
    certificate: Certificate | None = None,
    facts: ModeAnalysis | None = None,
) -> Verdict:
    """Decide `deadlock-free` for `program` under `mode` (see the module docstring).

    `fallback_states > 0` lets the exhaustive explorer decide programs outside the static system
    (unsupported lowering, reachable failures), within that many states (None: ERR-19's budget,
    `failing_facts.FALLBACK_STATES`). `replay=False` skips
    replaying the witness on the step relation (in place, linear in the steps: RUN-35), for callers
    that replay it themselves. `certificate` checks S''s end another way before
    the verdict is given (`semcheck.checker.z3.deadlock.deadlock_free` passes the Z3 query).
    `timeout_ms` is taken as every check takes it; nothing here gives up (a certificate has its own
    budget). `facts`: the program's analysis under `mode` (one is made when it is missing).
    """
    if fallback_states is None:
        fallback_states = failing_facts.FALLBACK_STATES  # read when called: one budget for every reader
    facts = analysis_of(program, mode, facts)
    stats: dict = {"mode": mode}
    t0 = time.perf_counter()
    low = facts.lowering
    stats["lower_s"] = round(time.perf_counter() - t0, 4)
    stats.update(low.size())
    if not low.ok:
        refusals = list(dict.fromkeys(low.unsupported))[:3]  # one refusal per copy, not one per device
        return _fallback(program, mode, "the program is outside the encoding: " + "; ".join(refusals),
                         fallback_states, stats, facts)
    t1 = time.perf_counter()
    end = facts.end  # shared by eager and on_wait; a witness below runs this mode's own
    stats["s_prime_s"] = round(time.perf_counter() - t1, 4)
    fails = failure_reached(low, end.pcs)
    if fails:
        c, pos, v = fails[0]
        return _fallback(
            program, mode,
            f"the program can fail ({v.message} at core {c} op {pos}, {program.cores[c][pos].loc}); "
            "with failures, whether a run deadlocks depends on the schedule",
            fallback_states if mode != "hardware" else 0, stats, facts,
        )
    stats[NO_RUN_RAISES] = True  # RUN-9: S' ends at no failing operation, so no run fails (ERR-57 reads it)
    if certificate is not None:
        stats.update(certificate(low, end))

    if end.kind == "completed" and not low.failing:
        # without failing ops S' is the program itself, and its end is the fast run's
        return Verdict(PROPERTY, "proved", stats=stats)
    sp = facts.s_prime_run
    # without failing ops S' is the program itself
    real = sp if not low.failing else facts.maximal_run()
    if real.state.pcs != sp.state.pcs:
        raise EncodingBug(f"S' and the real fast run end at different positions: {sp.state.pcs} vs {real.state.pcs}")
    if real.kind != end.kind:
        raise EncodingBug(f"S''s least stuck vector ends in {end.kind} but its fast run in {real.kind}")
    if end.kind == "completed":
        return Verdict(PROPERTY, "proved", stats=stats)
    t4 = time.perf_counter()
    witness = deadlock_witness(program, mode, real, low, replay=replay)
    stats["witness_s"] = round(time.perf_counter() - t4, 4)
    stats["replayed"] = replay
    return Verdict(PROPERTY, "violated", witness=witness, stats=stats)


def _fallback(program: Program, mode: DmaMode, reason: str, states: int, stats: dict, facts: ModeAnalysis) -> Verdict:
    """ERR-19: decide by every schedule (RUN-4) within `states` states. PROP-4 asks that no terminal state
    has an unfinished core: a run that fails ends with some (ERR-7), so it is a violation as a deadlock is."""
    if states <= 0:
        return Verdict(PROPERTY, "unknown", reason=f"{reason} (ERR-19)", stats=stats)
    ex = failing_facts.explored_outcomes(facts, states)  # one walk per mode and budget, shared (RUN-60)
    if ex is None:
        found = _one_bad_run(program, mode, reason, states, stats)
        return found or Verdict(PROPERTY, "unknown", reason=f"{reason}; the explorer exceeded {states} states "
                                "(ERR-19)", stats=stats)
    stats = dict(stats, decided_by="explorer", states=ex.states,
                 **{NO_RUN_RAISES: all(o.kind != "error" for o in ex.outcomes)})  # (ERR-57 reads it)
    how = f"decided by exhaustive exploration, {ex.how()} ({reason}; ERR-19)"
    bad = [o for o in ex.outcomes if o.kind != "completed"]
    if not bad:
        return Verdict(PROPERTY, "proved", reason=how, stats=stats)
    dead = [o for o in bad if o.kind == "deadlock"]
    if dead:
        return Verdict(PROPERTY, "violated", reason=how, witness=deadlock_witness(program, mode, dead[0]), stats=stats)
    every = all(o.kind == "error" for o in ex.outcomes)
    return Verdict(PROPERTY, "violated", reason=how, stats=stats,
                   witness=failure_witness(program, mode, bad[0], explored=every))


def _one_bad_run(program: Program, mode: DmaMode, reason: str, states: int, stats: dict) -> Verdict | None:
    """ACC-12: past the explorer's budget, one schedule still decides a violation: the fast run (RUN-3) continued
    on the step relation to a terminal state is a run of the mode, so when it fails or is stuck the program is
    not deadlock-free (PROP-4), whatever the other schedules do. None when it completes (nothing is decided)
    and under hardware (not used there)."""
    from semcheck.checker.static.least_stuck import maximal_run  # the fast run, continued to its end

    if mode == "hardware":  # a failure there is the model's, not a TPU's (ERR-19): not used
        return None
    real = maximal_run(program, mode)
    if real.kind == "completed":
        return None
    how = (f"one run decides it: the fast run ends in {'a failure' if real.kind == 'error' else 'a deadlock'} "
           f"(ACC-12; {reason}; the explorer exceeded {states} states, ERR-19)")
    stats = dict(stats, decided_by="fast run")
    witness = (failure_witness(program, mode, real, explored=False) if real.kind == "error"
               else deadlock_witness(program, mode, real))
    return Verdict(PROPERTY, "violated", reason=how, witness=witness, stats=stats)
