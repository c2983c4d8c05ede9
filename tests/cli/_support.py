"""Running the CLI as a user would, and the small kernel files the tests need."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
SCHEMA = REPO / "specs" / "report-schema.json"
CLEAN = EXAMPLES / "ring_permute.py"
BUGGY = EXAMPLES / "buggy"

# The console script installed beside this interpreter, as a user runs it;
# `python -m semcheck.checker.run.cli` (the same entry point) if there is none.
_SCRIPT = Path(sys.executable).with_name("semcheck")
SEMCHECK = [str(_SCRIPT)] if _SCRIPT.is_file() else [sys.executable, "-m", "semcheck.checker.run.cli"]


# one line per finished request of a sweep (checker/report/progress.py): a device count, or the check for every N
PROGRESS = re.compile(r"semcheck: \[\d+/\d+\] \S.*?: (\d+ devices|every N \(the parametric check, PAR-8\))"
                      r"( verified| checked|: not verified, |: not tried, |: checked, but ).*$")


@dataclasses.dataclass
class Run:
    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def stderr_lines(self) -> list[str]:
        """The diagnostics on stderr: its lines but the progress lines of a sweep (`progress`)."""
        return [line for line in self.stderr.splitlines() if line.strip() and not PROGRESS.match(line)]

    @property
    def progress(self) -> list[str]:
        """`semcheck: [k/n] FILE: N devices verified` (or what came of it), one per request of a sweep off a terminal."""
        return [line for line in self.stderr.splitlines() if PROGRESS.match(line)]

    def json(self):
        return json.loads(self.stdout)


def env(**extra: str) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("FORCE_COLOR", "PYTEST_", "COLUMNS"))}
    e.pop("NO_COLOR", None)
    e.update(extra)
    return e


def semcheck(*args: str | os.PathLike, cwd: str | os.PathLike | None = None, timeout: float = 300,
             extra_env: dict[str, str] | None = None) -> Run:
    argv = [*SEMCHECK, *map(os.fspath, args)]
    t0 = time.monotonic()
    p = subprocess.run(argv, cwd=cwd, env=env(**(extra_env or {})), capture_output=True, text=True,
                       timeout=timeout, stdin=subprocess.DEVNULL)
    return Run(tuple(map(os.fspath, args)), p.returncode, p.stdout, p.stderr, time.monotonic() - t0)


def semcheck_many(calls: Sequence[tuple[tuple, dict]], workers: int = 2) -> list[Run]:
    """Several independent CLI runs at once (each spawns a child that imports jax)."""
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda c: semcheck(*c[0], **c[1]), calls))


def without_timings(report: dict) -> dict:
    """A JSON report with the solver's timings (stats keys ending in _s) removed."""
    out = json.loads(json.dumps(report))
    for row in out["results"]:
        stats = row.get("stats")
        if stats:
            row["stats"] = {k: v for k, v in stats.items() if not k.endswith("_s")}
    return out


# Kernel files for the error paths. Each is written into a temporary directory.
KERNELS: dict[str, str] = {
    "syntax_error.py": "def build(num_devices):\n    return (fn,\n",
    "raises_at_import.py": "import math\n\nVALUE = math.sqrt(-1)\n",
    "raises_in_build.py": (
        "def build(num_devices):\n"
        "    raise RuntimeError('no kernel for ' + str(num_devices) + ' devices')\n"
    ),
    "no_targets.py": "def helper(x):\n    return x + 1\n",
    # a kernel body that raises while jax traces it (line 9), and a target that calls it from its neighbour
    "kernel_helper.py": (
        "import jax\nimport jax.numpy as jnp\nfrom jax.experimental import pallas as pl\n"
        "from jax.experimental.pallas import tpu as pltpu\n\n\n"
        "def _kernel(x_ref, o_ref):\n"
        "    o_ref[...] = x_ref[...]\n"
        "    raise ValueError('the kernel body refuses')\n\n\n"
        "def make(num_devices):\n"
        "    spec = jax.ShapeDtypeStruct((8, 128), jnp.float32)\n"
        "    return jax.jit(pl.pallas_call(_kernel, out_shape=spec, interpret=pltpu.InterpretParams())), (spec,)\n"
    ),
    "raises_in_neighbour_kernel.py": (
        "from kernel_helper import make\n\n\n"
        "def build(num_devices):\n"
        "    return make(num_devices)\n"
    ),
    "wrong_return.py": "def build(num_devices):\n    return 'a string, not (fn, args)'\n",
    "not_tpu.py": (
        "import jax\nimport jax.numpy as jnp\n\n\n"
        "def build(num_devices):\n"
        "    return jax.jit(jnp.sin), (jax.ShapeDtypeStruct((8, 128), jnp.float32),)\n"
    ),
    "exits_at_import.py": "import os\n\nos._exit(7)\n",
    "segfaults_at_import.py": "import ctypes\n\nctypes.string_at(0)\n",
    "sys_exit_at_import.py": "import sys\n\nsys.exit(4)\n",
    "raises_own_base_exception.py": (
        "class Stop(BaseException):\n"
        "    pass\n\n\n"
        "def build(num_devices):\n"
        "    raise Stop('the kernel stops itself')\n"
    ),
    "raises_keyboard_interrupt.py": "import math\n\nraise KeyboardInterrupt('raised by the kernel, not typed')\n",
    "prints_at_import.py": (
        "import os, sys\n"
        f"sys.path.insert(0, {str(EXAMPLES)!r})\n"
        "print('hello from the kernel file')\n"
        "from ring_permute import build  # noqa: E402,F401\n"
    ),
    "sleeps_in_build.py": (
        "import sys, time\n"
        f"sys.path.insert(0, {str(EXAMPLES)!r})\n"
        "from ring_permute import build as _build  # noqa: E402\n\n\n"
        "def build(num_devices):\n"
        "    if num_devices in (int(x) for x in __import__('os').environ.get('SLEEP_AT', '0 1 2 3 4').split()):\n"
        "        time.sleep(600)\n"
        "    return _build(num_devices)\n"
    ),
    "hangs_at_import.py": (
        "import os, time\n\n"
        "with open(os.environ['PID_FILE'], 'w') as f:\n"
        "    f.write(str(os.getpid()))\n"
        "time.sleep(600)\n\n\n"
        "def build(num_devices):\n"
        "    raise AssertionError('never reached')\n"
    ),
}


def unsupported_kernel() -> str:
    """A construct the front end refuses to lower: a non-decrementing wait (at line 43)."""
    source = (BUGGY / "missing_signal_deadlock.py").read_text()
    wait = "pl.semaphore_wait(barrier, 2)"
    assert wait in source
    return source.replace(wait, "pl.semaphore_wait(barrier, 2, decrement=False)")


def write_kernels(directory: Path) -> dict[str, Path]:
    paths = {}
    for name, text in {**KERNELS, "unsupported_wait.py": unsupported_kernel()}.items():
        p = directory / name
        p.write_text(text)
        paths[name] = p
    return paths


def alive(pid: int) -> bool:
    """True if `pid` runs (a zombie waiting to be reaped counts as dead)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("State:"):
                    return "Z" not in line.split()[1]
    except FileNotFoundError:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
