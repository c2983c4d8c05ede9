"""Kernels' own programs on jax's real manager: the run_scoped examples and the window cases.

The programs semcheck lowers from the `scope_*` examples (examples/ and examples/buggy/, BUF-13,
BUF-14) and from the window cases of tests/kernels/window_cases.py (ACC-10, with the race detector on:
RACE-1, RACE-2) run on jax's manager one thread per core, as the interpreter drives it
(`threaded.py`), and what each run shows must be an outcome the model allows. The runner has no
kernel loads and stores (they touch no semaphore and no run_scoped key: they are dropped) and copies
whole buffers of a copy's byte count (so a window case is held only where no window it refuses is
reached: a copy of 0 bytes under on_wait, whose wait runs no task, or a copy inside its buffer).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path

import pytest

from semcheck.checker.frontend import provision_devices
from semcheck.model.explore import explore
from semcheck.model.ops import Access, DmaStart

from .threaded import check_against_model, run_on_jax

provision_devices(2)  # the scope examples are traced at 2 devices, before jax starts its backends
pytestmark = pytest.mark.jax

REPO = Path(__file__).resolve().parents[2]
SCOPE_EXAMPLES = sorted(p.relative_to(REPO).as_posix() for p in
                        [*REPO.glob("examples/scope_*.py"), *REPO.glob("examples/buggy/scope_*.py")])
# the fixes run in the long profile (two of them take 70 to 100 s, the explorer's fallback over all of the
# model's outcomes); the buggy examples, the hazards, in the default run
SLOW = {(p, m) for p in SCOPE_EXAMPLES if not p.startswith("examples/buggy/") for m in ("eager", "on_wait")}


def _lowered(fn_args):
    from semcheck.checker.frontend.lower import lower_kernel
    from semcheck.checker.frontend.trace import trace_kernels

    (call,) = trace_kernels(*fn_args)
    return lower_kernel(call)


def _without_accesses(program):
    return dataclasses.replace(program, cores=tuple(tuple(op for op in ops if type(op) is not Access)
                                                    for ops in program.cores))


def _agree(program, mode: str, detect_races: bool = False) -> str:
    real = run_on_jax(program, mode, detect_races=detect_races)
    ok, why = check_against_model(program, mode, real)
    assert ok, f"{program.name} ({mode}):\n{why}"
    return real.observation.kind


def _example(path: str):
    spec = importlib.util.spec_from_file_location("semcheck_differential_example", REPO / path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.rule("BUF-14")
@pytest.mark.parametrize("path,mode", [
    pytest.param(p, m, id=f"{Path(p).stem}-{m}", marks=[pytest.mark.slow] if (p, m) in SLOW else [])
    for p in SCOPE_EXAMPLES for m in ("eager", "on_wait")])
def test_scope_examples_run_on_jax_as_the_model_says(path, mode):
    program = _without_accesses(_lowered(_example(path).build(2, dma_mode=mode)))
    _agree(program, mode)


def _window_program(name: str, mode: str):
    """The case's program as the runner can run it, or None: its copies' refused windows (ERR-20) are never
    reached when every such copy moves 0 bytes under on_wait (its wait runs no task, RACE-1 fails first)."""
    sys.path.insert(0, str(REPO / "tests" / "kernels"))
    import window_cases as wc

    if wc.CASES[name][0] != "copy" or name.startswith("static_"):  # static_*: refused while traced
        return None
    program = _lowered(wc.build_case(name, dma_mode=mode))
    copies = [op for ops in program.cores for op in ops if type(op) is DmaStart]
    if any(op.nbytes == 0 for op in copies) and mode == "eager":
        return None  # the runner's whole-buffer copy of an empty buffer is refused by the manager itself
    if any(op.view_error is not None and (mode == "eager" or op.nbytes) for op in copies):
        return None
    cleared = _without_accesses(dataclasses.replace(program, cores=tuple(
        tuple(dataclasses.replace(op, view_error=None) if type(op) is DmaStart else op for op in ops)
        for ops in program.cores)))
    # clearing the windows the runs never reach changes no outcome of the model
    assert explore(cleared, mode).kinds() == explore(_without_accesses(program), mode).kinds()
    return cleared


def _window_rows():
    import json

    table = json.loads((REPO / "tests" / "kernels" / "window_bounds.json").read_text())
    return sorted({(r["case"], r["dma_mode"]) for r in table["rows"] if r["access"] == "copy"})


@pytest.mark.rule("RACE-2", "ACC-10")
@pytest.mark.parametrize("name,mode", [pytest.param(n, m, id=f"{n}-{m}") for n, m in _window_rows()])
def test_window_cases_run_on_jax_as_the_model_says(name, mode):
    program = _window_program(name, mode)
    if program is None:
        pytest.skip("a window the runner cannot copy (it copies whole buffers) is reached")
    kind = _agree(program, mode, detect_races=True)
    assert kind == ("error" if mode == "on_wait" and "zero" in name else "completed")
