"""Run the IR conformance vectors (specs/conformance/ir/*.json) against every engine.

    python specs/conformance/ir_runner.py            # every vector, every engine
    python specs/conformance/ir_runner.py ir/x.json  # some vectors

A vector, in the spirit of WebAssembly's `.wast` scripts, is one program of the model IR (the
kernel bodies `semcheck.model.launch` wraps into a launch) and the outcome every maximal run must
have under each DMA mode (RUN-2): `completed`, `deadlock` or `error`. Each engine answers the same
question its own way (`ENGINES`):

* `explore`: the step relation, every interleaving (RUN-4): the set of terminal kinds;
* `fast`: the fast maximal run (RUN-3);
* `least-stuck-vector`: the static system's least stuck vector (`counters.s_prime_end`): a core
  stopped at its failing operation is an error;
* `z3`: `deadlock-free` with its Z3 certificate (`checker/z3/deadlock.py`): proved is
  completed, violated a deadlock (a program that can fail is not its question: skipped);
* `promela`: the SPIN model of the program (`oracles/spin`), when `spin` is installed: an
  invalid end state is a deadlock, an assertion (a static failure reached) an error.

An engine that cannot answer for a vector says why (`Skip`); the others must give exactly the
expected outcome. The format is in README.md ("IR vectors").
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from semcheck.model import ops as ir
from semcheck.model.launch import Scratch, launch

FORMAT = "semcheck-ir-conformance/1"
HERE = Path(__file__).resolve().parent
IR_DIR = HERE / "ir"
CHECKOUT = HERE.parents[1]  # the repository: the test oracles (oracles/) live there
MODES = ("eager", "on_wait", "hardware")
OUTCOMES = ("completed", "deadlock", "error")
_REFS = ("sem", "src_sem", "dst_sem")
_OPS = {cls.__name__: cls for cls in (ir.AllocSem, ir.GetBarrierSem, ir.Signal, ir.Wait, ir.Read, ir.DmaStart,
                                      ir.Barrier, ir.ExitCheck)}


class Skip(Exception):
    """This engine does not answer this vector's question; the message says why."""


class VectorError(ValueError):
    """A vector file that does not follow the format."""


def decode_op(data: dict[str, Any]) -> ir.Op:
    """One operation: `{"op": "Signal", "sem": ["s", 0], "device": 1}` (fields as the IR names them)."""
    fields = dict(data)
    name = fields.pop("op", None)
    if name not in _OPS:
        raise VectorError(f"unknown operation {name!r} (one of {', '.join(_OPS)})")
    for f in _REFS:
        if fields.get(f) is not None:
            fields[f] = ir.SemRef(*fields[f])
    if "participants" in fields:
        fields["participants"] = frozenset(fields["participants"])
    return _OPS[name](**fields)


def decode_program(data: dict[str, Any], name: str) -> ir.Program:
    topo = ir.Topology(data["devices"], data.get("cores_per_device", 1))
    bodies = [[decode_op(op) for op in body] for body in data["bodies"]]
    if len(bodies) != topo.num_cores:
        raise VectorError(f"{name}: {len(bodies)} bodies for {topo.num_cores} cores")
    scratch = [Scratch(s["label"], s.get("count", 1)) for s in data.get("scratch", ())]
    return launch(topo, bodies, collective_id=data.get("collective_id"), scratch=scratch, name=name)


def load_vectors(paths: list[Path] | None = None) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for p in sorted(paths or IR_DIR.glob("*.json")):
        v = json.loads(p.read_text())
        if v.get("format") != FORMAT:
            raise VectorError(f"{p.name}: format {v.get('format')!r}, not {FORMAT}")
        if set(v["expect"]) != set(MODES) or not set(v["expect"].values()) <= set(OUTCOMES):
            raise VectorError(f"{p.name}: expect needs one of {OUTCOMES} for each of {MODES}")
        out.append((p.name, v))
    return out


# --- the engines: (program, mode) -> an outcome, or Skip ----------------------------------------


def _explore(program: ir.Program, mode: str) -> str:
    from semcheck.model.explore import explore

    kinds = explore(program, mode, max_states=100_000).kinds()
    if len(kinds) != 1:
        return "schedule-dependent: " + ", ".join(sorted(kinds))
    return kinds.pop()


def _fast(program: ir.Program, mode: str) -> str:
    from semcheck.model.fast import fast_run

    return fast_run(program, mode).kind


def _least_stuck_vector(program: ir.Program, mode: str) -> str:
    from semcheck.checker.static.least_stuck import failure_reached, least_stuck_vector
    from semcheck.checker.static.lowering import lower

    low = lower(program, mode)
    if not low.ok:
        raise Skip("outside the static system: " + "; ".join(low.unsupported[:2]))
    kind, pcs = least_stuck_vector(low)
    return "error" if failure_reached(low, pcs) else kind


def _z3(program: ir.Program, mode: str) -> str:
    from semcheck.checker.z3.deadlock import deadlock_free

    v = deadlock_free(program, mode)
    if v.verdict == "unknown":
        raise Skip(f"deadlock-free is unknown: {v.reason}")
    return "completed" if v.verdict == "proved" else "deadlock"


def _promela(program: ir.Program, mode: str) -> str:
    if str(CHECKOUT) not in sys.path:  # the oracle lives in the checkout, not in the semcheck package
        sys.path.append(str(CHECKOUT))
    from oracles.spin import PromelaUnsupported, render, run_spin, spin_available

    if not spin_available():
        raise Skip("SPIN is not installed (`spin` on PATH)")
    try:
        rendering = render(program, mode)
    except PromelaUnsupported as e:
        raise Skip(f"no Promela model: {e}") from None
    result = run_spin(rendering)
    if result.verdict == "unknown":
        raise Skip(f"SPIN gave up: {result.reason}")
    return {"deadlock": "deadlock", "error": "error"}.get(result.verdict, "completed")


ENGINES: dict[str, Callable[[ir.Program, str], str]] = {
    "explore": _explore,
    "fast": _fast,
    "least-stuck-vector": _least_stuck_vector,
    "z3": _z3,
    "promela": _promela,
}


def check(name: str, vector: dict[str, Any], engine: str, mode: str) -> str | None:
    """None when `engine` gives the expected outcome under `mode`; else what went wrong. Skip passes through."""
    program = decode_program(vector["program"], name)
    want = vector["expect"][mode]
    if engine == "z3" and want == "error":
        raise Skip("a program that can fail is not deadlock-free's question (it is unknown there)")
    got = ENGINES[engine](program, mode)
    return None if got == want else f"{name} {mode} {engine}: {got}, expected {want}"


def main(argv: list[str]) -> int:
    vectors = load_vectors([Path(a).resolve() for a in argv] or None)
    bad = skipped = passed = 0
    for name, v in vectors:
        for mode in MODES:
            for engine in ENGINES:
                try:
                    problem = check(name, v, engine, mode)
                except Skip as s:
                    skipped += 1
                    print(f"skip {name} {mode} {engine}: {s}")
                    continue
                if problem:
                    bad += 1
                    print("FAIL " + problem)
                else:
                    passed += 1
    print(f"{len(vectors)} vectors: {passed} passed, {bad} failed, {skipped} skipped")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
