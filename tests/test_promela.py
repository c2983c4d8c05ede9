"""SPIN, run on the Promela rendering, must reach the reference model's deadlock verdict.

The Promela model is a second, independent statement of the semantics (the
benchmark's explicit-state baseline); if it disagreed with the model on a
program, either the rendering or the model would be wrong. Skipped where
`spin` or a C compiler is missing (`apt-get install spin`).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, assume, given, settings

from semcheck.model import (
    BARRIER,
    AllocSem,
    Barrier,
    DmaStart,
    GetBarrierSem,
    Scratch,
    SemRef,
    Signal,
    Topology,
    Wait,
    explore,
    launch,
)
from oracles.spin import PromelaUnsupported, render, run_spin, spin_available
from strategies import programs

pytestmark = pytest.mark.skipif(not spin_available(), reason="spin or a C compiler is not installed "
                                "(`make test` installs SPIN as root with apt and a network; else `apt-get install spin`)")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEND, RECV = SemRef("send"), SemRef("recv")
SCRATCH = [Scratch("send"), Scratch("recv")]
FAST_CC = ("-O0",)  # these models are tiny: compiling pan quickly matters more than running it fast


def ring(n: int, *, signal_left: bool = True, wait_value: int = 1, dma_wait: int = 64,
         wait_first: bool = False, right_of=lambda d, n: (d + 1) % n):
    """A ring permute: credit handshake on the barrier semaphore, then a DMA to the right."""
    bodies = []
    for d in range(n):
        left, right = (d - 1) % n, right_of(d, n)
        handshake = [Signal(SemRef(BARRIER), 1, device=left)] if signal_left else []
        wait = [Wait(SemRef(BARRIER), wait_value)]
        ops = [GetBarrierSem()] + (wait + handshake if wait_first else handshake + wait)
        ops += [
            DmaStart(RECV, 64, src_sem=SEND, device=right),
            Wait(SEND, dma_wait, kind="dma"),
            Wait(RECV, 64, kind="dma"),
        ]
        bodies.append(ops)
    return launch(Topology(n), bodies, collective_id=0, scratch=SCRATCH)


def two_core(skip_barrier: bool = False):
    """Two devices x two cores: core 1 signals core 0 of the other device, user barriers."""
    topo = Topology(2, 2)
    everyone = frozenset(range(4))
    bodies = []
    for g in range(4):
        d, c = topo.device_of(g), topo.local_core_of(g)
        ops = [Barrier("user", everyone)] if not (skip_barrier and g == 3) else []
        if c == 1:
            ops.append(Signal(SEND, 2, device=1 - d, core=0))
        else:
            ops.append(Wait(SEND, 2))
        bodies.append(ops)
    return launch(topo, bodies, scratch=SCRATCH)


CASES = {
    "clean ring 3": (ring(3), False),
    "clean ring 4": (ring(4), False),
    "missing signal": (ring(3, signal_left=False), True),
    "cyclic wait": (ring(3, wait_first=True), True),
    "wait too large": (ring(3, wait_value=2), True),
    "dma wait larger than sent": (ring(3, dma_wait=128), True),
    "wrong neighbour (no wrap-around)": (ring(3, right_of=lambda d, n: min(d + 1, n - 1)), True),
    "two cores": (two_core(), False),
    "two cores, barrier skipped": (two_core(skip_barrier=True), True),
}


def model_deadlocks(program, mode) -> bool:
    ex = explore(program, mode)
    assert "error" not in ex.kinds()
    return "deadlock" in ex.kinds()


def agrees(verdict: str, kinds: set[str]) -> bool:
    """SPIN's answer against the model's terminal kinds: pan stops at its first error, so a program
    with failing and deadlocking runs may get either."""
    return {"deadlock-free": kinds == {"completed"}, "deadlock": "deadlock" in kinds,
            "error": "error" in kinds}.get(verdict, False)


def _spin_cases():
    """Every case in every mode; the 4-device ring's on_wait state space (15 s of SPIN) only in the long run."""
    for name in CASES:
        for mode in ("hardware", "eager", "on_wait"):
            slow = name == "clean ring 4" and mode == "on_wait"
            yield pytest.param(name, mode, id=f"{name}-{mode}", marks=pytest.mark.slow if slow else ())


@pytest.mark.parametrize("name,mode", list(_spin_cases()))
def test_spin_agrees_with_model(name, mode):
    program, expected = CASES[name]
    assert model_deadlocks(program, mode) == expected
    r = run_spin(render(program, mode), timeout=120, cflags=FAST_CC)
    assert r.verdict == ("deadlock" if expected else "deadlock-free"), r.output


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(programs(max_devices=2, max_ops=3))
def test_spin_agrees_on_random_programs(program):
    for mode in ("hardware", "eager", "on_wait"):
        try:
            r = render(program, mode)
        except PromelaUnsupported:
            continue
        ex = explore(program, mode, max_states=20_000)
        got = run_spin(r, timeout=120, cflags=FAST_CC)
        assert agrees(got.verdict, ex.kinds()), (mode, ex.kinds(), got.verdict, r.text)


def test_amounts_are_scaled_and_typed():
    r = render(ring(2), "hardware")
    assert "byte semcnt[" in r.text  # 64-byte DMAs count in units of 64, so a byte suffices
    assert "in units of 64" in r.text
    assert "end:" in r.text and "active proctype dma_engine" in r.text
    assert r.processes == 3


def test_eager_dmas_are_inline():
    r = render(ring(2), "eager")
    assert "dma_engine" not in r.text and "d_step {" in r.text


def test_static_failures_are_assertions_and_what_the_schedule_decides_is_refused():
    bad = launch(Topology(2), [[Wait(SemRef("send", 3))], []], scratch=SCRATCH)
    far = launch(Topology(2), [[Signal(SEND, 1, device=5)], []], scratch=SCRATCH)
    collides = launch(Topology(2), [[GetBarrierSem(), Signal(SemRef(BARRIER), 1)], []],
                      collective_id=2000, scratch=SCRATCH)  # core 0 holds id 2000 and fetched it: ERR-1
    for program, mode, why in ((bad, "hardware", "out of bounds"), (far, "eager", "bad target"),
                               (collides, "eager", "both id tables")):
        r = render(program, mode)
        assert "assert(false)" in r.text and why in r.text
        assert "error" in explore(program, mode).kinds()
        assert run_spin(r, timeout=120, cflags=FAST_CC).verdict == "error"
    # core 1 looks the barrier semaphore up while core 0 may or may not have allocated id 2001
    racy = launch(Topology(2), [[AllocSem("extra", 1, "extra")], [GetBarrierSem(), Signal(SemRef(BARRIER), 1)]],
                  collective_id=2001, scratch=[Scratch("send")])
    with pytest.raises(PromelaUnsupported, match="depends on the schedule"):
        render(racy, "eager")
    unpropagated = launch(Topology(2), [[GetBarrierSem()], []], scratch=SCRATCH)  # no collective id
    with pytest.raises(PromelaUnsupported, match="ends only its own device"):
        render(unpropagated, "eager")
    render(collides, "hardware")  # on hardware the barrier semaphore is its own semaphore


@pytest.mark.jax
@pytest.mark.parametrize("kernel,code", [("examples/ring_permute.py", 0),
                                         ("examples/buggy/missing_signal_deadlock.py", 1)])
def test_export_main_end_to_end(kernel, code, tmp_path):
    out = tmp_path / "k.pml"
    p = subprocess.run(
        [sys.executable, "-m", "oracles.spin", "export", os.path.join(ROOT, kernel), "--promela", "--devices", "2",
         "--spin", "-o", str(out)],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )
    assert p.returncode == code, p.stderr
    assert "active proctype core1()" in out.read_text()
    assert ("deadlock-free" if code == 0 else ": deadlock") in p.stderr
