"""The result cache never returns a stale answer: whatever the kernel's import and `build` read
(the kernel file, a neighbour module, a package-style helper, a helper outside the kernel's
directory, a data file, a directory listing, a path's existence, an environment variable, jax's
configuration) is edited, the next answer is the one a fresh verification gives.

The kernel is the ring permute handshake with its barrier wait lowered by one for every input that
says "bug": one leftover signal, so exit-balance is violated exactly when some input says so."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.jax

KERNEL = '''
import glob, json, os, sys
from pathlib import Path

import jax, jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import PartitionSpec as P

HERE = Path(__file__).resolve().parent
sys.path.append(str(HERE.parent / "elsewhere"))  # a helper outside the kernel's directory
sys.path.insert(0, str(HERE.parent))  # package-style imports from the project root

import neighbour
import outside
from kernels_pkg import helpers

LOCAL = {local}


def bugs():
    data = json.loads((HERE / "data.json").read_text())["bug"]
    return [LOCAL, neighbour.BUG, helpers.BUG, outside.BUG, data,
            int(os.environ.get("STALENESS_BUG") or "0"),
            int((HERE / "flag").exists()),
            len(glob.glob(str(HERE / "marks" / "*.bug")))]


def _kernel(x_ref, o_ref, send, recv, *, n, extra):
    me = jax.lax.axis_index("x")
    right, left = jax.lax.rem(me + 1, n), jax.lax.rem(me + n - 1, n)
    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(left,))
    pl.semaphore_signal(barrier, 1, device_id=(right,))
    pl.semaphore_wait(barrier, 2 - extra)
    c = pltpu.make_async_remote_copy(x_ref, o_ref, send, recv, device_id=(right,))
    c.start()
    c.wait_send()
    c.wait_recv()


def build(num_devices):
    import functools
    extra = min(1, sum(bugs()))
    mesh = jax.make_mesh((num_devices,), ("x",))
    call = pl.pallas_call(
        functools.partial(_kernel, n=num_devices, extra=extra),
        out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)], out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA],
        compiler_params=pltpu.CompilerParams(collective_id=0),
        interpret=pltpu.InterpretParams(dma_execution_mode="eager"))
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))
    sharding = jax.sharding.NamedSharding(mesh, P("x"))
    return fn, (jax.ShapeDtypeStruct((num_devices * 8, 128), jnp.float32, sharding=sharding),)
'''

# Every kind of dependency, and how to set it to "bug" (1) or "clean" (0), with `salt` changing
# its bytes (or value) without changing what it says.
KINDS = ("kernel", "neighbour", "package", "outside", "data", "env", "exists", "listing", "jax-config")


def _set(root: Path, kind: str, bug: int, salt: int, env: dict[str, str]) -> None:
    k = root / "kernels"
    module = f"BUG = {bug}  # {salt}\n"
    if kind == "kernel":
        (k / "kernel.py").write_text(KERNEL.format(local=bug) + f"# {salt}\n")
    elif kind == "neighbour":
        (k / "neighbour.py").write_text(module)
    elif kind == "package":
        (root / "kernels_pkg" / "helpers.py").write_text(module)
    elif kind == "outside":
        (root / "elsewhere" / "outside.py").write_text(module)
    elif kind == "data":
        (k / "data.json").write_text(json.dumps({"bug": bug, "salt": salt}))
    elif kind == "env":
        env["STALENESS_BUG"] = f"{bug}" if bug or salt % 2 else ""
    elif kind == "exists":
        (k / "flag").unlink(missing_ok=True)
        if bug:
            (k / "flag").write_text(f"{salt}")
    elif kind == "listing":
        for p in (k / "marks").iterdir():
            p.unlink()
        (k / "marks" / (f"{salt}.bug" if bug else f"{salt}.ok")).write_text("")
    elif kind == "jax-config":  # read before the kernel runs: part of the key, cannot be a bug
        env["JAX_TRACEBACK_FILTERING"] = "off" if salt % 2 else "auto"


def _project(root: Path, env: dict[str, str]) -> None:
    for d in ("kernels", "kernels/marks", "kernels_pkg", "elsewhere"):
        (root / d).mkdir(parents=True)
    (root / "kernels_pkg" / "__init__.py").write_text("")
    for kind in KINDS:
        _set(root, kind, 0, 0, env)


def _verdict(root: Path, cache) -> tuple[str, bool]:
    from semcheck.checker.run.request import Request
    from semcheck.checker.run.runs import FileRun, run_files

    req = Request(str(root / "kernels" / "kernel.py"), None, None, 2, None, ("eager",), 120.0,
                  properties=("exit-balance",))
    (run,) = run_files([FileRun(req.path, [req])], cache=cache)
    assert run.error is None, run.error.one_line()
    (result,) = run.findings.results
    (v,) = result.verdicts
    return v.verdict, result.cached


edits = st.lists(st.tuples(st.sampled_from(KINDS), st.booleans(), st.integers(1, 3)), min_size=1, max_size=5)


# each example is a few verifications, a second or two each: a handful by default, more when long
@settings(max_examples=50 if os.environ.get("SEMCHECK_PROFILE") == "ci-long" else 2, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits)
def test_no_edit_of_any_dependency_returns_a_stale_answer(tmp_path_factory, monkeypatch_env, steps):
    from semcheck._cache import ResultCache

    root = tmp_path_factory.mktemp("project")
    env = monkeypatch_env
    _project(root, env)
    cache = ResultCache(str(root / ".semcheck_cache"))
    state = dict.fromkeys(KINDS, 0)
    assert _verdict(root, cache) == ("proved", False)
    assert _verdict(root, cache) == ("proved", True)  # nothing changed: answered from the cache
    for kind, bug, salt in steps:
        bug = int(bug) if kind != "jax-config" else 0
        _set(root, kind, bug, salt, env)
        state[kind] = bug
        want = "violated" if any(state.values()) else "proved"
        got, _cached = _verdict(root, cache)
        assert got == want, (kind, bug, salt, state)


def test_each_kind_of_dependency_is_followed_and_an_earlier_state_is_answered_again(tmp_path, monkeypatch_env):
    from semcheck._cache import ResultCache

    _project(tmp_path, monkeypatch_env)
    cache = ResultCache(str(tmp_path / ".semcheck_cache"))
    assert _verdict(tmp_path, cache) == ("proved", False)
    for kind in KINDS:
        if kind == "jax-config":
            continue
        _set(tmp_path, kind, 1, 1, monkeypatch_env)
        assert _verdict(tmp_path, cache) == ("violated", False), kind
        _set(tmp_path, kind, 0, 0, monkeypatch_env)  # back as it was: the first answer again
        assert _verdict(tmp_path, cache) == ("proved", True), kind
    _set(tmp_path, "jax-config", 0, 1, monkeypatch_env)
    assert _verdict(tmp_path, cache) == ("proved", False)  # another configuration: verified afresh


@pytest.fixture
def monkeypatch_env():
    """os.environ, restored after the test (hypothesis reuses one fixture value for every example)."""
    saved = dict(os.environ)
    try:
        yield os.environ
    finally:
        os.environ.clear()
        os.environ.update(saved)


UNOBSERVED = {
    "program": "import subprocess\nsubprocess.run(['true'])\n",
    "multiprocessing": ("import multiprocessing.util, sys\n"
                        "exe = os.fsencode(sys.executable)\n"
                        "os.waitpid(multiprocessing.util.spawnv_passfds(exe, [sys.executable, '-c', ''], ()), 0)\n"),
    "fork": "pid = os.fork()\nif pid == 0:\n    os._exit(0)\nos.waitpid(pid, 0)\n",
    "thread": "import threading, time\nthreading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n",
}


@pytest.mark.parametrize("what", sorted(UNOBSERVED))
def test_a_run_that_starts_a_program_forks_or_leaves_a_thread_is_not_kept(tmp_path, what):
    """What another program, a forked process or a thread still running after the kernel's code
    returns reads is not observed: the answer is given, and not kept."""
    from semcheck._cache import ResultCache

    env: dict[str, str] = {}
    _project(tmp_path, env)
    kernel = tmp_path / "kernels" / "kernel.py"
    kernel.write_text(kernel.read_text() + "\n" + UNOBSERVED[what])
    cache = ResultCache(str(tmp_path / ".semcheck_cache"))
    assert _verdict(tmp_path, cache) == ("proved", False)
    assert _verdict(tmp_path, cache) == ("proved", False)
    assert not list((tmp_path / ".semcheck_cache").rglob("*.json"))


def test_a_thread_that_ends_before_the_kernels_code_returns_is_no_obstacle(tmp_path):
    from semcheck._cache import ResultCache

    env: dict[str, str] = {}
    _project(tmp_path, env)
    kernel = tmp_path / "kernels" / "kernel.py"
    kernel.write_text(kernel.read_text() + "\nimport threading\nt = threading.Thread(target=sum, args=([1],))\n"
                      "t.start()\nt.join()\n")
    cache = ResultCache(str(tmp_path / ".semcheck_cache"))
    assert _verdict(tmp_path, cache) == ("proved", False)
    assert _verdict(tmp_path, cache) == ("proved", True)


# --- every route to a file or a variable ----------------------------------------------------------

# How the kernel's `build` learns one bit: each reads `THING` (a file, or a link to one) or the variable
# `ROUTE_BUG` by one API. A missing file reads as 1, so a change of existence is a change of the bit.
ROUTES = {
    "open": "int(open(THING).read().strip())",
    "pathlib.read_text": "int(THING.read_text().strip())",
    "pathlib.read_bytes": "int(THING.read_bytes().strip())",
    "pathlib.open": "int(THING.open().read().strip())",
    "os.path.getsize": "os.path.getsize(THING) - 1",
    "os.stat": "os.stat(THING).st_size - 1",
    "os.path.getmtime": "int(os.path.getmtime(THING) > 0) * (os.path.getsize(THING) - 1)",
    "os.path.exists": "int(not os.path.exists(THING))",
    "os.path.isfile": "int(not os.path.isfile(THING))",
    "os.path.islink": "int(os.path.islink(THING))",
    "os.path.lexists": "int(os.path.lexists(THING) and not os.path.exists(THING))",
    "os.access": "int(not os.access(THING, os.R_OK))",
    "os.readlink": "int(os.path.islink(THING) and os.readlink(THING).endswith('b'))",
    "pathlib.exists": "int(not THING.exists())",
    "pathlib.is_file": "int(not THING.is_file())",
    "pathlib.resolve": "int(THING.resolve().name == 'b')",
    "os.listdir": "int('a' not in os.listdir(HERE))",
    "os.scandir": "int(any(e.name == 'thing' and e.is_symlink() for e in os.scandir(HERE)))",
    "pathlib.iterdir": "int(HERE / 'b' in set(HERE.iterdir()))",
    "pathlib.glob": "len(list(HERE.glob('b')))",
    "os.environ.get": "int(os.environ.get('ROUTE_BUG') or 0)",
    "os.environ[]": "int(os.environ['ROUTE_BUG'] or 0) if 'ROUTE_BUG' in os.environ else 0",
    "os.getenv": "int(os.getenv('ROUTE_BUG') or 0)",
    "os.environb": "int(os.environb.get(b'ROUTE_BUG') or 0)",
    "os.getenvb": "int(os.getenvb(b'ROUTE_BUG') or 0)",
}
CHANGES = ("content", "existence", "link target", "variable")

ROUTE_KERNEL = KERNEL.replace('''import neighbour
import outside
from kernels_pkg import helpers
''', '').replace('''def bugs():
    data = json.loads((HERE / "data.json").read_text())["bug"]
    return [LOCAL, neighbour.BUG, helpers.BUG, outside.BUG, data,
            int(os.environ.get("STALENESS_BUG") or "0"),
            int((HERE / "flag").exists()),
            len(glob.glob(str(HERE / "marks" / "*.bug")))]
''', '''THING = HERE / "thing"


def read():
    try:
        return {route}
    except (OSError, ValueError):  # missing, or not a number
        return 1


def bugs():
    return [max(0, read())]
''')


def _route_bit(route: str, here: Path) -> int:
    """The bit `build` reads, read here the same way (what a fresh verification sees)."""
    try:
        return max(0, eval(ROUTES[route], {"os": os, "THING": here / "thing", "HERE": here}))  # noqa: S307
    except (OSError, ValueError):
        return 1


def _change(here: Path, change: str, env) -> None:
    thing = here / "thing"
    target = Path(os.readlink(thing)).name if thing.is_symlink() else None
    if change == "content":  # the file the path names now, rewritten to say the other thing
        path = here / target if target else thing
        old = path.read_text() if path.exists() else "0"
        path.write_text("1\n" if old.strip() == "0" else "0")
    elif change == "existence":
        path = here / target if target else thing
        if path.exists():
            path.unlink()
        else:
            path.write_text("1\n")
    elif change == "link target":  # a link to the other file, or a plain file made a link and back
        if thing.is_symlink():
            thing.unlink()
            if target == "a":
                os.symlink("b", thing)
            else:
                thing.write_text("0")
        else:
            thing.unlink(missing_ok=True)
            os.symlink("a" if not (here / "b").exists() else "b", thing)
    else:  # unset -> "1" -> "0" -> unset
        following = {None: "1", "1": "0"}.get(env.get("ROUTE_BUG"))
        if following is None:
            env.pop("ROUTE_BUG", None)
        else:
            env["ROUTE_BUG"] = following


@settings(max_examples=40 if os.environ.get("SEMCHECK_PROFILE") == "ci-long" else 5, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(sorted(ROUTES)), st.booleans(), st.lists(st.sampled_from(CHANGES), min_size=1, max_size=3))
def test_every_route_to_a_file_or_a_variable_is_followed(tmp_path_factory, monkeypatch_env, route, linked, changes):
    """Whichever API `build` reads a file, a path or a variable through, and whatever changes (the
    file's content, its existence, where its link points, the variable), the next answer is the one
    a fresh verification gives: never a stale cached one."""
    from semcheck._cache import ResultCache

    root = tmp_path_factory.mktemp("route")
    here = root / "kernels"
    here.mkdir()
    (here / "kernel.py").write_text(ROUTE_KERNEL.replace("{route}", ROUTES[route]).replace("{local}", "0"))
    (here / "a").write_text("0")
    (here / "b").write_text("1\n")
    if linked:
        os.symlink("a", here / "thing")
    else:
        (here / "thing").write_text("0")
    monkeypatch_env.pop("ROUTE_BUG", None)
    cache = ResultCache(str(root / ".semcheck_cache"))
    want = "violated" if _route_bit(route, here) else "proved"
    assert _verdict(root, cache) == (want, False)
    assert _verdict(root, cache) == (want, True)  # nothing changed: answered from the cache
    for change in changes:
        _change(here, change, monkeypatch_env)
        want = "violated" if _route_bit(route, here) else "proved"
        got, _cached = _verdict(root, cache)
        assert got == want, (route, linked, change, _cached)
