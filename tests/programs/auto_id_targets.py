"""Targets whose collective ids jax picks under `jax_pallas_auto_assign_collective_ids` (PRG-125).

Each target sets the mode in its build, as a program that sets it before it is traced does, so each
is verified in its own process (`path::target`). The kernels are those of
examples/programs/two_patterns_two_tags.py and examples/programs/buggy/shared_collective_id_two_patterns.py.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jax

import semcheck

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "programs"


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"semcheck_auto_ids_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@semcheck.target(devices=[4])
def yes_two_kernels_without_ids(num_devices: int, *, interpret=None):
    """`yes`: two kernels with neither id nor tag are two modules, so two ids (0 and 1)."""
    jax.config.update("jax_pallas_auto_assign_collective_ids", "yes")
    tags = _load(EXAMPLES / "two_patterns_two_tags.py")
    return tags.build(num_devices, interpret=interpret, ring_tag=None, pair_tag=None)


@semcheck.target(devices=[4])
def override_one_manual_id(num_devices: int, *, interpret=None):
    """`override`: the manual collective_id 0 both kernels share is ignored, each module gets its own."""
    jax.config.update("jax_pallas_auto_assign_collective_ids", "override")
    shared = _load(EXAMPLES / "buggy" / "shared_collective_id_two_patterns.py")
    return shared.build(num_devices, interpret=interpret)


@semcheck.target(devices=[4])
def no_mode_one_manual_id(num_devices: int, *, interpret=None):
    """`no` (the default): the shared manual id stands, and so does the bug (PRG-17)."""
    jax.config.update("jax_pallas_auto_assign_collective_ids", "no")
    shared = _load(EXAMPLES / "buggy" / "shared_collective_id_two_patterns.py")
    return shared.build(num_devices, interpret=interpret)
