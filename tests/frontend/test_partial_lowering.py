"""Lowering some devices (`lower_kernel(devices=...)`) and running grid steps or loops as lanes change nothing.

* The cores a `PartialLowering` gives for a set of devices are the whole program's cores of those
  devices, op for op, in the whole program's numbering (remote targets are real device ids), or the
  lowering refuses the subset (`SubsetRefused`) and only the whole lowering decides.
* The whole program with the grid steps and `fori_loop` iterations run as lanes (`GridRules.run_core`,
  `ControlFlowRules._scan_as_lanes`) is the program the step-by-step evaluation gives, for every
  example kernel.

Both run in a fresh process with 16 devices: jax fixes its device count when it first starts, and
another test of the calling process may have started it with fewer.
"""

from __future__ import annotations

import concurrent.futures
import glob
import multiprocessing
import os
from typing import Any

import pytest

from sampling import every_kth

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KERNELS = sorted(os.path.relpath(p, ROOT) for pattern in ("examples/*.py", "examples/buggy/*.py",
                                                          "bench/kernels/*.py")
                 for p in glob.glob(os.path.join(ROOT, pattern)))
# the front end's own test kernels: device-dependent branches and loops, scalar data, grids, meshes
TEST_KERNELS = sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "tests/frontend/kernels/*.py"))
                      if not p.endswith("_common.py"))
MAX_DEVICES = 16
RINGS = ("examples/ring_allreduce.py", "examples/ring_allgather.py", "bench/kernels/all_to_all.py")
# the three sweeps over every kernel: a third each in the default run (between them every kernel, the
# rings in each), every kernel under `slow`
SWEEP = 3
# kernels whose ids, DMAs, waits or branches read values that differ between devices (per-device input
# shards, ACC-8's collectives before the kernel, ACC-9's copies into SMEM): a subset of the devices cannot
# be lowered exactly, and the front end says so (`SubsetRefused`)
FOLLOWED_ACROSS_DEVICES = frozenset({
    "examples/buggy/cross_device_id_disagreement.py",  # the collective id is a per-device value
    "examples/moe_dispatch_combine.py",
    "examples/buggy/moe_combine_waits_wrong_count.py",
    "examples/buggy/moe_count_read_before_wait.py",
    "examples/buggy/moe_dispatch_wait_one_row_short.py",
    "examples/ragged_paged_attention.py",
    "examples/paged_attention_three_slots.py",
    "examples/allgather_grouped_matmul.py",
    "examples/buggy/race_allgather_matmul_multiplies_arriving_shard.py",
    "examples/ring_attention_causal_skip.py",
    "examples/buggy/ring_attention_wait_skipped_with_block.py",
    "examples/buggy/race_paged_attention_prefetch_wrong_slot.py",
    "examples/buggy/ragged_paged_attention_last_page_not_waited.py",
    "examples/reduce_scatter_grouped_matmul.py",
    "examples/buggy/race_grouped_matmul_zero_fill_after_barrier.py",
    # ACC-35: each device's routing from its own logits through an in-kernel softmax
    "examples/moe_softmax_topk_dispatch.py",
    "examples/buggy/moe_softmax_count_by_threshold.py",
    # per-row copy sizes and the receive's size computed in the kernel from the count table
    "examples/masked_row_push.py",
    "examples/buggy/masked_row_push_recv_one_row_short.py",
    # ACC-21: count rows a remote copy brings into VMEM
    "examples/moe_counts_ring_allreduce.py",
    # ACC-25: counts an in-kernel top-k computes, exchanged by remote copies into SMEM
    "examples/moe_topk_routing.py",
    "examples/buggy/moe_topk_dispatch_wait_one_row_short.py",
    # ACC-30: a count table a local copy fetches from HBM into SMEM
    "examples/moe_count_table_fetch.py",
    "examples/buggy/moe_count_table_read_before_fetch_wait.py",
    # ACC-43: a schedule a local copy fetches into a run_scoped SMEM buffer
    "examples/scoped_schedule_fetch.py",
    "examples/buggy/race_scoped_schedule_read_before_fetch_wait.py",
    # ACC-47: a core_map's row count from its input table, whose values are recorded per device at the launch
    # (refused before ACC-55 too; the sample sweep reaches it since the examples below joined)
    "examples/buggy/smem_table_in_interpret_mode.py",
    # ACC-55: a core_map's routing a local copy fetches from HBM into SMEM
    "examples/core_map_routed_scatter.py",
    "examples/buggy/race_core_map_route_read_before_fetch_wait.py",
})


def _start_jax() -> None:
    """jax started with `MAX_DEVICES` devices (a later `load` with fewer would otherwise provision fewer)."""
    from semcheck.checker.frontend import provision_devices

    provision_devices(MAX_DEVICES)
    import jax

    assert len(jax.devices()) == MAX_DEVICES


def _lowered(path: str, n: int, cache: dict) -> list:
    """[(call, lower_kernel's keyword arguments, program)] of every kernel `load` lowers for `path`."""
    key = (path, n)
    if key not in cache:
        from semcheck.checker.frontend import load
        from semcheck.checker.frontend import lower as api  # `lower_call` (RUN-22) calls lower.lower_kernel
        from semcheck.checker.frontend.errors import DeviceProvisioningError, FrontendError
        from semcheck.checker.frontend.targets import load_targets

        seen: list = []
        real = api.lower_kernel

        def recording(call, **kwargs):
            program = real(call, **kwargs)
            seen.append((call, kwargs, program))
            return program

        api.lower_kernel = recording
        try:
            for target in load_targets(os.path.join(ROOT, path)):  # one at a time: one may fail alone
                try:
                    load(os.path.join(ROOT, path), target=target.name, devices=n)
                except FrontendError as e:  # a kernel the front end refuses at this count: nothing to compare
                    assert not isinstance(e, DeviceProvisioningError), e
                    seen.append(("refused", type(e).__name__, None))
        finally:
            api.lower_kernel = real
        cache[key] = seen
    return cache[key]


def _subset_differences(path: str, n: int, devices: list[int], cache: dict) -> tuple[str | None, int]:
    """A difference between the subset's cores and the whole program's (None: none), and how many
    kernels of `path` the subset lowering refused."""
    from semcheck.checker.frontend.evaluator import SubsetRefused
    from semcheck.checker.frontend.lower import lower_kernel

    refused = 0
    for call, kwargs, program in _lowered(path, n, cache):
        if program is None:
            continue
        n_kernel = program.topology.num_devices  # a kernel may run on fewer devices than were asked for
        devices = list(dict.fromkeys(d % n_kernel for d in devices))
        try:
            partial = lower_kernel(call, devices=devices, **kwargs)
        except SubsetRefused:
            refused += 1
            continue
        cores = partial.cores()
        topo = program.topology
        want = {g: program.cores[g] for d in devices for g in topo.cores_of_device(d)}
        if partial.topology != topo or sorted(cores) != sorted(want):
            return f"{path} at {n} devices, {devices}: cores {sorted(cores)} for {sorted(want)}", refused
        for g in want:
            if cores[g] != want[g]:
                k = next((i for i, (a, b) in enumerate(zip(cores[g], want[g])) if a != b),
                         min(len(cores[g]), len(want[g])))
                return (f"{path} at {n} devices, {devices}: core {g} differs at op {k}: "
                        f"{cores[g][k:k + 1]} for {want[g][k:k + 1]}"), refused
    return None, refused


def _check_subsets(cases: list[tuple[str, int, list[int]]]) -> tuple[list[str], int, set[str]]:
    """Child process: the differences over `cases`, the kernels compared and the files with a refusal."""
    _start_jax()
    cache: dict = {}
    diffs, compared, refused = [], 0, set()
    for path, n, devices in cases:
        diff, r = _subset_differences(path, n, devices, cache)
        compared += sum(1 for *_, p in _lowered(path, n, cache) if p is not None)
        if r:
            refused.add(path)
        if diff is not None:
            diffs.append(diff)
    return diffs, compared, refused


def _check_both(examples: list[Any], tests: list[Any]) -> tuple[Any, Any]:
    return _check_subsets(examples), _check_subsets(tests)


def _check_random_subsets(seed: int, examples: int) -> list[str]:
    """Child process: hypothesis over kernels, device counts 2..16 and subsets (a fixed seed: the
    draws are the child's, so the parent's database cannot replay them)."""
    from hypothesis import given, seed as with_seed, settings, strategies as st

    _start_jax()
    cache: dict = {}
    found: list[str] = []

    @with_seed(seed)
    @settings(max_examples=examples, deadline=None, database=None)
    @given(st.sampled_from(KERNELS), st.integers(2, MAX_DEVICES), st.data())
    def subsets_match(path, n, data):
        devices = data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=min(n, 4), unique=True))
        diff, _ = _subset_differences(path, n, devices, cache)
        if diff is not None:
            found.append(diff)
        assert diff is None, diff

    try:
        subsets_match()
    except AssertionError:
        pass
    return found[-1:]


def _step_lane_differences(counts: list[int], kernels: list[str]) -> tuple[list[str], dict[str, int]]:
    """Child process: every kernel at each device count, lowered with the grid steps as lanes and
    step by step (and loop iterations one by one); the differences, and per kernel the grid points and
    loop iterations that ran as lanes."""
    from semcheck.checker.frontend import control_flow, grid, load
    from semcheck.checker.frontend.errors import DeviceProvisioningError, FrontendError

    _start_jax()
    diffs, as_lanes = [], {}
    for path in kernels:
        for n in counts:
            try:
                fast = load(os.path.join(ROOT, path), devices=n)
            except FrontendError as e:
                assert not isinstance(e, DeviceProvisioningError), e
                fast = type(e).__name__
            real = grid.GridRules._run_as_lanes, control_flow.ControlFlowRules._scan_as_lanes
            grid.GridRules._run_as_lanes = lambda self, points, args: False
            control_flow.ControlFlowRules._scan_as_lanes = lambda self, *args: None
            try:
                slow = load(os.path.join(ROOT, path), devices=n)
            except FrontendError as e:
                slow = type(e).__name__
            finally:
                grid.GridRules._run_as_lanes, control_flow.ControlFlowRules._scan_as_lanes = real
            if isinstance(fast, str) or isinstance(slow, str):
                if fast != slow:
                    diffs.append(f"{path} at {n} devices: {fast if isinstance(fast, str) else 'lowers'} "
                                 f"with the steps as lanes, {slow if isinstance(slow, str) else 'lowers'} step by step")
                continue
            if [k.program for k in fast] != [k.program for k in slow]:
                diffs.append(f"{path} at {n} devices: the programs differ")
            as_lanes[path] = as_lanes.get(path, 0) + sum(k.stats.grid_points_as_lanes + k.stats.iterations_as_lanes
                                                         for k in fast)
    return diffs, as_lanes


def _in_child(fn, *args):
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(fn, *args).result()


def _sweeps(offset: int) -> list:
    """The kernels of one sweep: a third in the default run (from `offset`, the rings kept), all under slow."""
    return [pytest.param(every_kth(KERNELS, SWEEP, offset, keep=RINGS), id="sample"),
            pytest.param(KERNELS, id="every", marks=pytest.mark.slow)]


@pytest.mark.rule("ACC-25")  # a subset keeps moving float data (DivergedValue)
@pytest.mark.rule("ACC-41")  # a subset that needs a float value a local copy moves is refused (SubsetRefused)
@pytest.mark.parametrize("kernels", _sweeps(0))
def test_a_subset_lowers_the_whole_programs_cores_of_every_example_kernel(kernels):
    """Every example kernel at 3 and 6 devices: the last device, and two devices out of order or apart;
    the front end's test kernels (device-dependent branches and loops, scalar data) at 4 and 8."""
    examples = [(path, n, devices) for path in kernels for n, devices in ((3, [2, 1]), (6, [5]), (6, [1, 4]))]
    tests = [(path, n, devices) for path in TEST_KERNELS for n, devices in ((4, [1]), (8, [2, 5, 6]))]
    (diffs, compared, refused), (test_diffs, _, _) = _in_child(_check_both, examples, tests)
    assert not diffs and not test_diffs, (diffs + test_diffs)[:3]
    assert compared > 2 * len(kernels)
    # the examples are not refused their way out (the test kernels are device-dependent on purpose): only
    # those whose control values are followed across devices (ACC-8's collectives before the kernel,
    # ACC-9's copies into SMEM) need every device lowered and are refused a subset by design
    assert refused <= FOLLOWED_ACROSS_DEVICES, sorted(refused - FOLLOWED_ACROSS_DEVICES)


def test_a_subset_lowers_the_whole_programs_cores_for_drawn_kernels_counts_and_subsets():
    assert _in_child(_check_random_subsets, 1, 40) == []


@pytest.mark.rule("ACC-41")  # per-device float data no value needs is not tracked: the rings' steps stay lanes
@pytest.mark.parametrize("kernels", _sweeps(1))
def test_grid_steps_and_loop_iterations_run_as_lanes_lower_the_step_by_step_program(kernels):
    diffs, as_lanes = _in_child(_step_lane_differences, [2, 5], kernels)
    assert not diffs, diffs[:3]
    # the rings' steps and the all-to-all's loops do run as lanes (the comparison is not of two slow paths)
    assert all(as_lanes[k] > 0 for k in RINGS)


def _refusals() -> dict[str, list[bool]]:
    """Child process: per target of tests/frontend/kernels/subset.py, whether lowering device 1, and
    devices [1, 2], is refused."""
    _start_jax()
    from semcheck.checker.frontend import load
    from semcheck.checker.frontend import lower as api  # `lower_call` (RUN-22) calls lower.lower_kernel
    from semcheck.checker.frontend.evaluator import SubsetRefused
    from semcheck.checker.frontend.lower import lower_kernel

    out = {}
    for target in ("branch_value", "smem_on_one_device", "uniform_smem"):
        seen: list = []
        real = api.lower_kernel
        api.lower_kernel = lambda call, **kw: seen.append((call, kw)) or real(call, **kw)
        try:
            load(os.path.join(ROOT, "tests/frontend/kernels/subset.py"), target=target, devices=4)
        finally:
            api.lower_kernel = real
        (call, kwargs), = seen
        refused = []
        for devices in ([1], [1, 2]):
            try:
                lower_kernel(call, devices=devices, **kwargs)
                refused.append(False)
            except SubsetRefused:
                refused.append(True)
        out[target] = refused
    return out


def test_a_subset_is_refused_where_its_devices_depend_on_the_others():
    """A device-dependent branch's value, or scalar memory written on some devices only, refuses the
    subset (the whole lowering decides); memory every device writes alike does not."""
    assert _in_child(_refusals) == {"branch_value": [True, True], "smem_on_one_device": [True, True],
                                    "uniform_smem": [False, False]}


def test_a_subset_must_name_distinct_devices_of_the_mesh_and_all_of_them_make_the_program():
    outcomes, whole = _in_child(_api_cases)
    assert outcomes == ["ValueError"] * 3
    assert whole


def _api_cases() -> tuple[list[str], bool]:
    _start_jax()
    from semcheck.checker.frontend.lower import lower_kernel

    call, kwargs, program = _lowered("examples/ring_allreduce.py", 4, {})[0]
    out = []
    for devices in ([], [1, 1], [4]):
        try:
            lower_kernel(call, devices=devices, **kwargs)
            out.append("lowered")
        except Exception as e:
            out.append(type(e).__name__)
    return out, lower_kernel(call, devices=[3, 1, 0, 2], **kwargs).program() == program


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__, "-q"])


def _symmetric_differences(counts: list[int], kernels: list[str]) -> tuple[list[str], list[str]]:
    """Child process: every example kernel at each device count lowered by one period (RUN-22: the rotation
    certificate and the subset lowering, `lower_call` with no device-count threshold) and materialised,
    against the whole lowering; the differences, and which kernels were lowered by one period."""
    from semcheck.checker.frontend.symmetric_lowering import lower_call
    from semcheck.model.symmetric import Symmetric

    _start_jax()
    cache: dict = {}
    diffs, by_period = [], []
    for path in kernels:
        for n in counts:
            for call, kwargs, program in _lowered(path, n, cache):
                if program is None:
                    continue
                got = lower_call(call, symmetric_from=2, **kwargs)
                if not isinstance(got, Symmetric):
                    if got != program:
                        diffs.append(f"{path} at {n} devices: the fallback lowering differs")
                    continue
                by_period.append(path)
                if got.materialise() != program:
                    diffs.append(f"{path} at {n} devices: one period (k = {got.period}) rotated is not the program")
    return diffs, sorted(set(by_period))


@pytest.mark.rule("RUN-22")
@pytest.mark.parametrize("kernels", _sweeps(2))
def test_a_program_lowered_by_one_period_is_the_program(kernels):
    """RUN-22: where the certificate proves a period, the Symmetric of the subset lowering materialises to
    exactly the whole lowering, for every example kernel at 4 and 8 devices; the rings are among them."""
    diffs, by_period = _in_child(_symmetric_differences, [4, 8], kernels)
    assert not diffs, diffs[:3]
    for ring in RINGS:
        assert ring in by_period
    assert len(by_period) > len(kernels) // 2

