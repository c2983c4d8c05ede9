"""RUN-14: a target traced with an abstract mesh lowers to the program real devices give.

Everything that imports jax runs in a fresh process (`abstract_probe.py`, or a script here): the
host device count is fixed when jax starts, and the test process may already have jax.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sampling import every_kth

pytestmark = pytest.mark.jax

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
PROBE = HERE / "abstract_probe.py"
KERNEL_FILES = sorted(
    str(p.relative_to(REPO))
    for d in ("examples", "examples/buggy", "bench/kernels", "examples/programs", "examples/programs/buggy")
    for p in (REPO / d).glob("*.py")
)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["JAX_PLATFORMS"] = "cpu"
    env.pop("XLA_FLAGS", None)
    return env


def _rows(*args: str, timeout: float = 600) -> list[dict]:
    proc = subprocess.run([sys.executable, str(PROBE), *args], cwd=REPO, env=_env(), capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(line[4:]) for line in proc.stdout.splitlines() if line.startswith("ROW ")]


def _script(code: str, timeout: float = 300) -> dict:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO, env=_env(),
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _assert_equal_where_taken(rows: list[dict], counts: tuple[int, ...], files: list[str]) -> None:
    assert {r["devices"] for r in rows} == set(counts)
    assert {r["file"] for r in rows} == set(files)  # every file has a target built with fixed inputs
    differ = [r for r in rows if not r["programs_equal"]]
    assert not differ, differ
    # the soundness check means something only where the abstract mesh was taken
    assert sum(r["abstract"] for r in rows) >= 0.9 * len(rows), [r for r in rows if not r["abstract"]]


@pytest.mark.rule("RUN-14")
def test_every_example_lowers_to_the_same_program_with_an_abstract_mesh() -> None:
    """Every second file at 4 devices (every file at several counts under slow)."""
    files = every_kth(KERNEL_FILES, 2)
    _assert_equal_where_taken(_rows("equal", "4", "4", *files), (4,), files)


@pytest.mark.slow
@pytest.mark.rule("RUN-14")
def test_every_example_lowers_to_the_same_program_with_an_abstract_mesh_at_several_counts() -> None:
    _assert_equal_where_taken(_rows("equal", "32", "2,3,8,32", *KERNEL_FILES), (2, 3, 8, 32), KERNEL_FILES)


@pytest.mark.rule("RUN-14")
def test_past_the_threshold_no_jax_device_is_made() -> None:
    """At and past `ABSTRACT_MESH_FROM` devices the trace never starts jax's backend: the devices that cost
    seconds and gigabytes at thousands of devices are never made."""
    got = _script("""
        import json
        from semcheck.checker.frontend import load
        from semcheck.checker.frontend.targets import ABSTRACT_MESH_FROM
        from jax._src import xla_bridge
        n = 2 * ABSTRACT_MESH_FROM
        (k,) = load("bench/kernels/torus_halo_2d.py", devices=n)
        print(json.dumps([n, k.program.topology.num_devices, xla_bridge.backends_are_initialized()]))
    """)
    n, built, started = got
    assert built == n and not started


@pytest.mark.rule("RUN-14")
def test_a_builder_that_reads_devices_falls_back_to_real_ones(tmp_path) -> None:
    """A builder that reads the mesh's devices fails under an abstract mesh: it is built with real devices
    (the same program as without the abstract mesh), and when jax has too few a clear error says so."""
    kernel = tmp_path / "reads_devices.py"
    kernel.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(REPO / "examples")!r})
        import jax
        import ring_allreduce

        def build(num_devices):
            fn, args = ring_allreduce.build(num_devices)
            jax.make_mesh((num_devices,), ("x",)).devices  # an AbstractMesh has none
            return fn, args
    """))
    got = _script(f"""
        import json
        from semcheck.checker.frontend import provision_devices, load, DeviceProvisioningError
        from semcheck.checker.frontend import targets
        provision_devices(4)
        import jax
        jax.devices()
        declined = targets.load_targets({str(kernel)!r})[0].build_shapes(4, abstract=True)
        targets.ABSTRACT_MESH_FROM = 1
        abstract = load({str(kernel)!r}, devices=4)[0].program
        targets.ABSTRACT_MESH_FROM = 10**9
        real = load({str(kernel)!r}, devices=4)[0].program
        try:
            load({str(kernel)!r}, devices=8)
            err = None
        except DeviceProvisioningError as e:
            err = [e.code, str(e)]
        print(json.dumps([abstract == real, declined is None or str(declined[1][0].sharding.mesh), err]))
    """)
    same, declined, err = got
    assert same
    assert declined is True or "AbstractMesh" not in declined  # the staged build took real devices
    assert err is not None and err[0] == "devices-unavailable" and "8 real jax devices" in err[1]


@pytest.mark.rule("RUN-14")
def test_past_the_real_devices_the_abstract_mesh_traces_what_a_larger_process_would() -> None:
    """jax already runs with 2 devices; a target at 8 is traced with an abstract mesh and lowers to the
    program a process with 8 real devices builds."""
    code = """
        import json, pickle, sys
        from semcheck.checker.frontend import provision_devices, load
        provision_devices(int(sys.argv[1]))
        import jax
        jax.devices()
        (k,) = load("examples/ring_allreduce.py", devices=8)
        sys.stdout.buffer.write(pickle.dumps((jax.device_count(), k.program)))
    """
    import pickle

    def run(real: int):
        proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code), str(real)], cwd=REPO, env=_env(),
                              capture_output=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return pickle.loads(proc.stdout)

    (few, abstract), (many, real) = run(2), run(8)
    assert (few, many) == (2, 8)
    assert abstract == real
