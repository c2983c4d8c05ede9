"""The jax front end against the interpreter it models.

The strongest checks run each kernel twice in a fresh process (see
`recorder.py`): once through the front end, resolved to concrete semaphore
ids, and once in real Pallas TPU interpret mode with the interpreter's
semaphore, DMA and allocation callbacks logged. Per core, the two event
sequences must be identical (for runs that hang or fail, the interpreter's
events must be a prefix of the lowered ones).

The remaining tests load kernels in a fresh process (`probe.py`) and check
the lowered programs' structure, the typed errors and the refusals.
Everything that imports jax runs in child processes: the host device count
is fixed when jax starts, and the test process may already have jax.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from sampling import every_kth

pytestmark = pytest.mark.jax

HERE = Path(__file__).resolve().parent
KERNELS = HERE / "kernels"
REPO = HERE.parent.parent
EXAMPLES = REPO / "examples"
RECORDER = HERE / "recorder.py"
PROBE = HERE / "probe.py"

OWN_SPECS = [
    "ring_allreduce.py",
    "grid_parallel.py::one_core",
    "grid_parallel.py::seeded",
    "grid_parallel.py::two_cores",
    "grid_parallel.py::three_cores_uneven",
    "control_flow.py",
    "scoped.py",
    "core_map_kernel.py",
    "mesh2d.py",
    "pipeline.py::inlined",
    "pipeline.py::as_primitive",
    "modes.py::ring_on_wait",
    "modes.py::scoped_on_wait",
]
DEVICE_COUNTS = (2, 4)


def _run(script: Path, args: list[str], marker: str, timeout: float = 600) -> list[dict[str, Any]]:
    env = dict(os.environ)
    env.setdefault("JAX_PLATFORMS", "cpu")
    env.pop("XLA_FLAGS", None)
    proc = subprocess.run(
        [sys.executable, str(script), *args],
        cwd=str(KERNELS),
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    out = [json.loads(line[len(marker):]) for line in proc.stdout.splitlines() if line.startswith(marker)]
    if not out:
        raise AssertionError(f"{script.name} {args} printed no result:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return out


def _record(devices: int, specs: list[str], timeout: float | None = None) -> list[dict[str, Any]]:
    args = ["--devices", str(devices)]
    if timeout is not None:
        args += ["--timeout", str(timeout)]
    return _run(RECORDER, args + specs, "@@FRONTEND_RECORD@@ ")


def _probe(devices: int, specs: list[str], *extra: str) -> dict[str, dict[str, Any]]:
    results = _run(PROBE, ["--devices", str(devices), *extra, *specs], "@@FRONTEND_PROBE@@ ")
    return {r["spec"]: r for r in results}


# --- lowered programs == what the interpreter does ------------------------------


@pytest.fixture(scope="module")
def recorded() -> dict[tuple[str, int], dict[str, Any]]:
    with ThreadPoolExecutor(max_workers=2) as pool:
        runs = {n: pool.submit(_record, n, OWN_SPECS) for n in DEVICE_COUNTS}
        return {(r["spec"], n): r for n, fut in runs.items() for r in fut.result()}


@pytest.mark.parametrize("devices", DEVICE_COUNTS)
@pytest.mark.parametrize("spec", OWN_SPECS)
def test_lowered_program_matches_interpreter(recorded, spec: str, devices: int) -> None:
    r = recorded[(spec, devices)]
    assert r["status"] == "match", r.get("difference") or r.get("error") or r
    assert r["outcome"] == "completed"
    assert r["lowered_events"] == r["recorded_events"] > 0


def _example_files(sub: str = "") -> list[str]:
    d = EXAMPLES / sub if sub else EXAMPLES
    if not d.is_dir():
        return []
    return sorted(str(p) for p in d.glob("*.py") if not p.name.startswith("_"))


def _record_until_done(devices: int, specs: list[str], timeout: float) -> list[dict[str, Any]]:
    """Record `specs` in as few processes as possible: a run that hangs ends its process."""
    out: list[dict[str, Any]] = []
    todo = list(specs)
    while todo:
        got = _record(devices, todo, timeout)
        out += got
        todo = todo[len(got):]
    return out


@pytest.fixture(scope="module")
def recorded_examples() -> dict[str, dict[str, Any]]:
    """Every second clean example (each one under `slow`, at 2, 4 and 8 devices)."""
    clean = every_kth(_example_files(), 2)
    if not clean:
        pytest.skip("no example kernels in examples/")
    return {r["spec"]: r for r in _record(4, clean, 60.0)}


def test_examples_match_interpreter(recorded_examples) -> None:
    """The shipped clean examples lower to exactly what the interpreter does (a sample of them)."""
    bad = {
        os.path.relpath(spec, REPO): r.get("difference") or r.get("error")
        for spec, r in recorded_examples.items()
        if r["status"] != "match" or r["outcome"] != "completed"
    }
    assert not bad, bad


@pytest.mark.slow
def test_buggy_examples_match_interpreter_up_to_where_they_stop() -> None:
    """Buggy examples may hang or fail inside the interpreter; what they did up
    to that point must be exactly the start of the lowered program."""
    buggy = _example_files("buggy")
    if not buggy:
        pytest.skip("no buggy example kernels in examples/buggy/")
    results = _record_until_done(4, buggy, 3.0)
    bad = {
        os.path.relpath(r["spec"], REPO): r.get("difference") or r.get("error")
        for r in results
        if r["status"] != "match"
    }
    assert not bad, bad
    assert len(results) == len(buggy)


# --- structure of lowered programs ----------------------------------------------


@pytest.fixture(scope="module")
def probed() -> dict[str, dict[str, Any]]:
    specs = [
        "ring_allreduce.py",
        "scoped.py",
        "control_flow.py",
        "core_map_kernel.py",
        "grid_parallel.py::two_cores",
        "mesh2d.py",
        "unsupported.py::semaphore_read_unused",
    ]
    return _probe(4, specs)


def _kernel(probed, spec: str, k: int = 0) -> dict[str, Any]:
    r = probed[spec]
    assert "error" not in r, r["error"]
    return r["kernels"][k]


def test_ring_program_shape(probed) -> None:
    k = _kernel(probed, "ring_allreduce.py")
    assert (k["devices"], k["cores_per_device"], k["collective_id"], k["mode"]) == (4, 1, 7, "eager")
    assert k["mesh"] == {"x": 4}
    assert k["warnings"] == []
    core0 = k["cores"][0]
    # with a collective_id there is no start barrier; the barrier semaphore is fetched once
    assert [op["op"] for op in core0].count("GetBarrierSem") == 1
    assert not any(op["op"] == "Barrier" and op["name"] == "start" for op in core0)
    starts = [op for op in core0 if op["op"] == "DmaStart"]
    assert len(starts) == 3 and all(op["nbytes"] == 8 * 128 * 4 and op["device"] == 1 for op in starts)
    assert [op["dst_sem"] for op in starts] == [["recv_sems", 0], ["recv_sems", 1], ["recv_sems", 0]]
    signals = [op for op in core0 if op["op"] == "Signal"]
    assert [op["device"] for op in signals] == [3, 1, 3, 3, 3]  # left, right, then left every step
    assert all(op["file"] == "ring_allreduce.py" and op["line"] > 0 for op in core0 if op["op"] == "Signal")


def test_run_scoped_gets_fresh_labels_and_a_stable_site(probed) -> None:
    k = _kernel(probed, "scoped.py")
    allocs = [op for op in k["cores"][0] if op["op"] == "AllocSem" and op["scope"] == "core"]
    assert len(allocs) == 3 * 3 + 1  # a DMA sem, a pair and an inner sem per iteration; sync_copy's
    allocs = allocs[:9]
    assert len({op["label"] for op in allocs}) == len(allocs)
    sites = [op["site"] for op in allocs]
    assert sites[0:3] == sites[3:6] == sites[6:9]
    assert len(set(sites)) == 3
    assert [op["count"] for op in allocs[:3]] == [1, 2, 1]
    bufs = [op for op in k["cores"][0] if op["op"] in ("AllocBuffer", "FreeBuffer") and op.get("label", "").startswith("buf@")]
    assert [op["op"] for op in bufs] == ["AllocBuffer", "FreeBuffer"] * 3


def test_divergent_control_flow_gives_devices_different_programs(probed) -> None:
    k = _kernel(probed, "control_flow.py")
    # the fori_loop to me + 1 signals sems[5] on every second iteration
    # (the scan touches sems[5] too, on some devices)
    sem5 = [sum(op["op"] == "Signal" and op["sem"] == ["sems", 5] for op in core) for core in k["cores"]]
    assert len(set(sem5)) > 1
    last = [[op["value"] for op in core if op["op"] == "Wait" and op["sem"] == ["sems", 7]][-1] for core in k["cores"]]
    assert last == [4, 1, 2, 3]  # each device waits for its left neighbour's id + 1


def test_core_map_has_two_cores_and_core_targets(probed) -> None:
    k = _kernel(probed, "core_map_kernel.py")
    assert (k["devices"], k["cores_per_device"], k["collective_id"]) == (4, 2, 3)
    sig = [op for op in k["cores"][1] if op["op"] == "Signal"]
    assert [(op["device"], op["core"]) for op in sig] == [(0, 0), (0, 0), (1, 1)]


def test_target_cores_marker_and_override(probed) -> None:
    assert _kernel(probed, "grid_parallel.py::two_cores")["cores_per_device"] == 2
    r = _probe(2, ["grid_parallel.py::one_core"], "--cores", "2", "--dma-mode", "on_wait")
    k = r["grid_parallel.py::one_core"]["kernels"][0]
    assert (k["cores_per_device"], k["mode"]) == (2, "on_wait")


def test_two_kernels_in_one_function(probed) -> None:
    r = probed["mesh2d.py"]
    assert [k["name"] for k in r["kernels"]] == ["_first", "_second"]
    assert all(k["mesh"] == {"x": 2, "y": 2} for k in r["kernels"])


@pytest.mark.rule("LAUNCH-3")
def test_semaphore_read_is_lowered_with_the_interpreters_failure(probed) -> None:
    k = _kernel(probed, "unsupported.py::semaphore_read_unused")
    assert k["kinds"].get("Read") == 4  # the hardware read (SEM-6)
    assert k["launch_failure"] == "MLIR translation rule for primitive 'semaphore_read' not found for platform cpu"


# --- refusals -------------------------------------------------------------------


def _line_of(path: Path, needle: str) -> int:
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if needle in line:
            return i
    raise AssertionError(f"{needle!r} not in {path}")


UNSUPPORTED = {
    # target: (primitive, words in the reason, line marker)
    "data_dependent_cond": ("cond", "the example arguments do not carry", "@pl.when(x_ref[0, 0] > 0)"),
    "data_dependent_index": ("semaphore_signal", "the example arguments do not carry",
                             "pl.semaphore_signal(sems.at[k], 1)"),
    "semaphore_read_decides": ("cond", "semaphore_read", "@pl.when(v > 0)"),
    "data_dependent_loop": ("while", "the example arguments do not carry", "jax.lax.while_loop(cond, body, 0.0)"),
    # a barrier without a collective_id is jax's lowering error now, an input error (PRG-123)
    "index_out_of_bounds": ("semaphore_signal", "out of bounds", "pl.semaphore_signal(sems.at[me + 1], 1)"),
    "non_decrementing_wait": ("semaphore_wait", "non-decrementing", "decrement=False"),
    "select_ref_dma": ("dma_start", "pl.select_ref", "pltpu.async_copy(src, o_ref, sem).wait()"),
    # semaphore_output is lowered now, with the interpreter's launch failure (LAUNCH-2): test_d21
}


_SHAPES_ONLY = frozenset({"data_dependent_cond", "data_dependent_index", "data_dependent_loop"})


@pytest.fixture(scope="module")
def refused() -> dict[str, dict[str, Any]]:
    specs = [f"unsupported.py::{t}" for t in UNSUPPORTED] + ["unsupported.py::no_pallas_call"]
    return _probe(2, specs)


@pytest.mark.parametrize("target", sorted(UNSUPPORTED))
def test_unsupported_constructs_are_refused_with_a_location(refused, target: str) -> None:
    err = refused[f"unsupported.py::{target}"].get("error")
    assert err is not None, f"{target} was lowered instead of refused"
    prim, words, needle = UNSUPPORTED[target]
    # a branch, index or loop on float data the example arguments give as shapes: ACC-25 follows float
    # data, so the refusal is ACC-4's, with the hint to pass concrete arguments
    kind = "NeedsConcreteInputs" if target in _SHAPES_ONLY else "Unsupported"
    assert (err["type"], err["code"], err["primitive"]) == (kind, "unsupported", prim)
    assert words in err["reason"]
    assert err["loc"] == ["unsupported.py", _line_of(KERNELS / "unsupported.py", needle)]


def test_function_without_pallas_call_is_not_a_tpu_kernel(refused) -> None:
    err = refused["unsupported.py::no_pallas_call"]["error"]
    assert (err["type"], err["code"]) == ("NotTpuPallasCall", "not-tpu-pallas-call")


# --- typed input errors -----------------------------------------------------------


ERROR_FILES = {
    "syntax.py": "def build(n):\n    return (\n",
    "raises_on_import.py": "raise RuntimeError('boom at import')\n",
    "no_targets.py": "X = 1\n",
    "bad_return.py": "def build(n):\n    return 42\n",
    "bad_fn.py": "def build(n):\n    return (1, ())\n",
    "build_raises.py": "def build(n):\n    raise ValueError('no such size')\n",
    "trace_raises.py": textwrap.dedent(
        """
        import jax, jax.numpy as jnp

        def f(x):
            raise TypeError('bad kernel')

        def build(n):
            return f, (jax.ShapeDtypeStruct((2,), jnp.float32),)
        """
    ),
    "two_targets.py": textwrap.dedent(
        """
        import semcheck

        @semcheck.target(devices=(2,))
        def alpha(n):
            return 1

        @semcheck.target(name="beta_renamed")
        def beta(n):
            return 2

        def custom_entry(n):
            return 3
        """
    ),
}


@pytest.fixture(scope="module")
def errors(tmp_path_factory) -> dict[str, dict[str, Any]]:
    d = tmp_path_factory.mktemp("kernel_errors")
    for name, text in ERROR_FILES.items():
        (d / name).write_text(text)
    specs = [str(d / n) for n in ERROR_FILES if n != "two_targets.py"]
    specs += [str(d / "missing.py"), str(d / "two_targets.py::gamma"), str(d / "two_targets.py::beta_renamed")]
    out = _probe(2, specs)
    out.update(_probe(2, [str(d / "two_targets.py")], "--entry", "custom_entry"))
    return {os.path.basename(k): v for k, v in out.items()}


@pytest.mark.parametrize(
    "name, etype, code, stage",
    [
        ("missing.py", "KernelFileNotFound", "file-missing", None),
        ("syntax.py", "KernelSyntaxError", "syntax-error", None),
        ("raises_on_import.py", "KernelRaised", "kernel-raised", "import"),
        ("no_targets.py", "NoTargets", "no-targets", None),
        ("bad_return.py", "BadTargetReturn", "bad-target-return", None),
        ("bad_fn.py", "BadTargetReturn", "bad-target-return", None),
        ("build_raises.py", "KernelRaised", "kernel-raised", "build"),
        ("trace_raises.py", "KernelRaised", "kernel-raised", "trace"),
        ("two_targets.py::gamma", "NoTargets", "no-targets", None),
        ("two_targets.py::beta_renamed", "BadTargetReturn", "bad-target-return", None),
        ("two_targets.py", "BadTargetReturn", "bad-target-return", None),
    ],
)
def test_input_errors_are_typed(errors, name: str, etype: str, code: str, stage: str | None) -> None:
    err = errors[name].get("error")
    assert err is not None, errors[name]
    assert (err["type"], err["code"]) == (etype, code), err
    if stage is not None:
        assert err["stage"] == stage


def test_error_messages_point_at_the_kernel(errors) -> None:
    assert errors["syntax.py"]["error"]["loc"] == ["syntax.py", 2]
    assert errors["raises_on_import.py"]["error"]["loc"] == ["raises_on_import.py", 1]
    assert "boom at import" in errors["raises_on_import.py"]["error"]["message"]
    assert errors["trace_raises.py"]["error"]["loc"][0] == "trace_raises.py"
    assert "gamma" in errors["two_targets.py::gamma"]["error"]["message"]
    assert "beta_renamed" in errors["two_targets.py::gamma"]["error"]["message"]


def test_provision_refuses_after_jax_started(tmp_path) -> None:
    script = textwrap.dedent(
        """
        import json
        from semcheck.checker.frontend import provision_devices, DeviceProvisioningError
        provision_devices(3)
        import jax
        n = jax.device_count()
        provision_devices(2)  # fewer than available: fine
        try:
            provision_devices(5)
            res = "no error"
        except DeviceProvisioningError as e:
            res = e.code
        print(json.dumps([n, res]))
        """
    )
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)
    env["JAX_PLATFORMS"] = "cpu"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [3, "devices-unavailable"], out.stderr[-2000:]


# --- speed ------------------------------------------------------------------------


@pytest.mark.parametrize("devices", [64, pytest.param(256, marks=pytest.mark.slow)])
def test_ring_lowering_is_fast(devices: int) -> None:
    r = _probe(devices, ["ring_allreduce.py"])["ring_allreduce.py"]
    k = r["kernels"][0]
    assert k["num_ops"] > devices * (devices - 1) * 5  # speed itself is measured in bench/, not asserted


def test_builders_run_staged_so_inputs_are_never_computed(tmp_path) -> None:
    """The front end needs argument shapes and shardings only: the builder's jax work is staged out.

    A builder that needs concrete values falls back to a real build; both give
    the same program as building for real.
    """
    kernel = tmp_path / "concrete_builder.py"
    kernel.write_text(textwrap.dedent(
        """
        import jax, jax.numpy as jnp
        import ring_allreduce as base

        def build(num_devices, **kw):
            fn, (x,) = base.build(num_devices, **kw)
            if float(jnp.sum(x)) < 0:  # needs a concrete value
                raise AssertionError
            return fn, (x,)
        """
    ))
    script = textwrap.dedent(
        f"""
        import json, sys
        sys.path.insert(0, {str(REPO / "examples")!r})
        from semcheck.checker.frontend import provision_devices
        provision_devices(4)
        import jax
        from semcheck.checker.frontend import api
        from semcheck.checker.frontend.targets import Target, load_targets

        t = load_targets({str(REPO / "examples" / "ring_allreduce.py")!r})[0]
        fn, (spec,) = t.build_shapes(4)
        staged_ok = isinstance(spec, jax.ShapeDtypeStruct) and spec.sharding.spec == jax.P("x")
        concrete = load_targets({str(kernel)!r})[0].build_shapes(4) is None
        staged = [k.program for k in api.load({str(REPO / "examples" / "ring_allreduce.py")!r}, devices=4)]
        fallback = [k.program for k in api.load({str(kernel)!r}, devices=4)]
        Target.build_shapes = lambda self, *a, **k: None
        real = [k.program for k in api.load({str(REPO / "examples" / "ring_allreduce.py")!r}, devices=4)]
        print(json.dumps([staged_ok, concrete, staged == real, fallback == real]))
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [True, True, True, True], out.stderr[-3000:]


# --- pure helpers (no jax) ----------------------------------------------------------


def test_selectors_and_target_returns() -> None:
    from semcheck.checker.frontend import targets as T
    from semcheck.checker.frontend.errors import BadTargetReturn

    assert T.split_selector("a/b.py::t") == ("a/b.py", "t")
    assert T.split_selector("a/b.py") == ("a/b.py", None)

    class Arr:
        shape, dtype = (2,), "float32"

    fn, args = T.check_target_return((len, [Arr()]), "t")
    assert fn is len and len(args) == 1
    with pytest.raises(BadTargetReturn):
        T.check_target_return((len, ["not an array"]), "t")
    with pytest.raises(BadTargetReturn):
        T.check_target_return(len, "t")


@pytest.mark.slow
@pytest.mark.parametrize("devices", [2, 4, 8])
def test_examples_match_interpreter_at_other_device_counts(devices: int) -> None:
    """Same as test_examples_match_interpreter, for every clean example, at 2, 4 and 8 devices (slow: one
    interpret run each)."""
    clean = _example_files()
    results = _record(devices, clean, 120.0)
    bad = {
        os.path.relpath(r["spec"], REPO): r.get("difference") or r.get("error")
        for r in results
        if r["status"] != "match" or r["outcome"] != "completed"
    }
    assert len(results) == len(clean)
    assert not bad, bad
