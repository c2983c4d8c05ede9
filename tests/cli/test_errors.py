"""Every bad input: one clear line on stderr naming the problem, exit code 2, no traceback.

The runs that spawn a checker process (each imports jax, a few seconds) are
made once, two at a time, by a module fixture; the tests then look at them.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from ._support import CLEAN, Run, semcheck, semcheck_many, unsupported_kernel, write_kernels

# name -> (kernel file or None for the clean example, extra args, error code, words the line must contain)
CHILD_CASES: dict[str, tuple[str | None, tuple[str, ...], str, tuple[str, ...]]] = {
    "raises-at-import": ("raises_at_import.py", (), "kernel-raised",
                         ("during import", "ValueError", "raises_at_import.py:3")),
    "raises-in-build": ("raises_in_build.py", (), "kernel-raised",
                        ("building target 'build'", "RuntimeError", "no kernel for 2 devices",
                         "raises_in_build.py:2")),
    # the kernel line that raised, in the neighbour module the target calls (not the target's call line)
    "raises-in-neighbour-kernel": ("raises_in_neighbour_kernel.py", (), "kernel-raised",
                                   ("while tracing", "ValueError", "the kernel body refuses",
                                    "kernel_helper.py:9")),
    "no-targets": ("no_targets.py", (), "no-targets", ("no targets in", "no_targets.py", "@semcheck.target")),
    "wrong-return": ("wrong_return.py", (), "bad-target-return", ("must return (fn, example_args)", "str")),
    "not-tpu": ("not_tpu.py", (), "not-tpu-pallas-call", ("no TPU pallas_call", "not_tpu.py")),
    "unknown-selector": (None, ("::no_such_target",), "no-targets", ("no target named 'no_such_target'",)),
    "unknown-entry": (None, ("--entry", "no_such_fn"), "no-targets", ("no callable named 'no_such_fn'",)),
    "os-exit": ("exits_at_import.py", (), "crashed", ("died", "exit code 7", "exits_at_import.py")),
    "segfault": ("segfaults_at_import.py", (), "crashed", ("died", "SIGSEGV", "segfaults_at_import.py")),
    "sys-exit": ("sys_exit_at_import.py", (), "kernel-exited", ("sys.exit(4)", "sys_exit_at_import.py")),
    # the kernel's own BaseException is its error, not semcheck's (not internal-error)
    "own-base-exception": ("raises_own_base_exception.py", (), "kernel-raised",
                           ("Stop", "the kernel stops itself", "raises_own_base_exception.py:6")),
    # raised by the kernel's code, not the user's ^C (which is exit 130, "interrupted")
    "keyboard-interrupt": ("raises_keyboard_interrupt.py", (), "kernel-raised",
                           ("KeyboardInterrupt", "raised by the kernel", "raises_keyboard_interrupt.py:3")),
}


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    return write_kernels(tmp_path_factory.mktemp("kernels"))


@pytest.fixture(scope="module")
def child_runs(kernels) -> dict[str, Run]:
    calls = []
    for kernel, extra, _, _ in CHILD_CASES.values():
        path = str(kernels[kernel]) if kernel else str(CLEAN)
        if extra and extra[0].startswith("::"):
            path, extra = path + extra[0], extra[1:]
        calls.append((("verify", path, "--devices", "2", "--dma-mode", "eager", *extra),
                      {"cwd": kernels[KERNEL_DIR_KEY].parent}))
    calls.append((("verify", str(kernels["raises_at_import.py"]), "--devices", "2", "--debug"),
                  {"cwd": kernels[KERNEL_DIR_KEY].parent}))
    calls.append((("verify", str(kernels["prints_at_import.py"]), "--devices", "2", "--dma-mode", "eager",
                   "--format", "json"), {"cwd": kernels[KERNEL_DIR_KEY].parent}))
    calls.append((("verify", str(kernels["unsupported_wait.py"]), "--devices", "2", "--dma-mode", "hardware",
                   "--format", "json"), {"cwd": kernels[KERNEL_DIR_KEY].parent}))
    runs = semcheck_many(calls)
    names = [*CHILD_CASES, "debug", "prints", "unsupported"]
    return dict(zip(names, runs, strict=True))


KERNEL_DIR_KEY = "no_targets.py"


def assert_one_line_error(run: Run, code: str, words=(), exit_code: int = 2) -> None:
    assert run.returncode == exit_code, (run.returncode, run.stderr)
    assert run.stdout == "", run.stdout
    assert len(run.stderr_lines) == 1, run.stderr
    line = run.stderr_lines[0]
    assert line.startswith(f"semcheck: {code}: "), line
    assert "Traceback" not in run.stderr
    for w in words:
        assert w in line, (w, line)


@pytest.mark.parametrize("case", list(CHILD_CASES))
def test_kernel_problem_is_one_line_and_exit_2(child_runs, case):
    _, _, code, words = CHILD_CASES[case]
    assert_one_line_error(child_runs[case], code, words)


def test_error_paths_are_relative_to_the_working_directory(child_runs, kernels):
    # The runs' working directory is the kernels' directory: no absolute paths in the line.
    for case in ("raises-at-import", "os-exit"):
        assert str(kernels[KERNEL_DIR_KEY].parent) not in child_runs[case].stderr


def test_debug_shows_the_kernels_traceback_then_the_line(child_runs):
    run = child_runs["debug"]
    assert run.returncode == 2
    assert run.stdout == ""
    assert "Traceback (most recent call last)" in run.stderr
    assert "raises_at_import.py\", line 3" in run.stderr
    assert run.stderr_lines[-1].startswith("semcheck: kernel-raised: ")


def test_kernel_output_never_reaches_the_report(child_runs):
    """A kernel that prints while imported must not corrupt --format json on stdout."""
    run = child_runs["prints"]
    assert run.returncode == 0, run.stderr
    report = run.json()
    assert report["summary"]["violated"] == report["summary"]["unknown"] == 0
    # nor semcheck's stderr: it is captured, for -v (REP-27)
    assert "hello from the kernel file" not in run.stdout and "hello from the kernel file" not in run.stderr


def test_unsupported_construct_is_unknown_not_an_error(child_runs):
    """The front end refuses to guess: every property unknown, exit 3, one line naming the kernel line."""
    run = child_runs["unsupported"]
    assert run.returncode == 3, run.stderr
    assert len(run.stderr_lines) == 1, run.stderr
    line = run.stderr_lines[0]
    lineno = 1 + unsupported_kernel().splitlines().index(
        next(x for x in unsupported_kernel().splitlines() if "decrement=False" in x and "semaphore_wait(" in x
             and not x.lstrip().startswith(("#", "`"))))
    assert line.startswith(f"semcheck: unsupported: semaphore_wait at unsupported_wait.py:{lineno}: "), line
    assert "non-decrementing" in line
    report = run.json()
    from semcheck.checker.properties.registry import IDS

    assert report["summary"] == {"proved": 0, "violated": 0, "unknown": len(IDS)}
    assert all(r["reason"].startswith("unsupported semaphore_wait") for r in report["results"])


def test_missing_file(tmp_path):
    run = semcheck("verify", "no_such_kernel.py", "--devices", "2", cwd=tmp_path)
    assert_one_line_error(run, "file-missing", ("no such kernel file: no_such_kernel.py",))


def test_a_directory_without_kernels_verifies_nothing(tmp_path):
    (tmp_path / "helper.py").write_text("def helper(x):\n    return x\n")
    run = semcheck("verify", ".", cwd=tmp_path)
    assert_one_line_error(run, "no-kernels", ("@semcheck.target", "build"))


@pytest.mark.parametrize("fmt", ["json", "sarif"])
def test_an_input_error_of_one_file_is_in_the_machine_readable_report_as_for_many(tmp_path, fmt):
    (tmp_path / "empty.py").write_text("")
    (tmp_path / "dir").mkdir()
    one = semcheck("verify", "empty.py", "--format", fmt, cwd=tmp_path)
    none = semcheck("verify", "dir", "--format", fmt, cwd=tmp_path)
    missing = semcheck("verify", "no_such_kernel.py", "--format", fmt, cwd=tmp_path)
    for run, code in ((one, "no-targets"), (none, "no-kernels"), (missing, "file-missing")):
        assert run.returncode == 2, run.stderr
        assert len(run.stderr_lines) == 1 and run.stderr_lines[0].startswith(f"semcheck: {code}: ")
        data = run.json()
        if fmt == "json":
            assert [e["code"] for e in data["errors"]] == [code] and data["results"] == []
        else:
            (result,) = data["runs"][0]["results"]
            assert result["ruleId"] == "input-error" and result["level"] == "error"


def test_a_missing_file_beside_others_is_its_own_error(tmp_path):
    """One path that does not exist does not stop the others: they are verified, it is listed under
    `errors`, and the exit code is 2 (input error) as for any file that cannot be verified."""
    run = semcheck("verify", CLEAN, "no_such_kernel.py", "--devices", "2", "--dma-mode", "eager",
                   "--format", "json", cwd=tmp_path)
    assert run.returncode == 2, run.stderr
    data = run.json()
    assert [(e["code"], e["file"]) for e in data["errors"]] == [("file-missing", "no_such_kernel.py")]
    assert data["results"] and all(r["verdict"] == "proved" for r in data["results"])


def test_syntax_error_is_found_without_starting_jax(kernels):
    run = semcheck("verify", kernels["syntax_error.py"], "--devices", "2", cwd=kernels[KERNEL_DIR_KEY].parent)
    assert_one_line_error(run, "syntax-error", ("syntax_error.py:2", "never closed"))
    assert run.seconds < 30


USAGE_CASES = {
    "devices-0": (("--devices", "0"), ("--devices 0", "between 1 and 16384")),
    "devices-huge": (("--devices", "100000"), ("--devices 100000", "between 1 and 16384")),
    "devices-negative-in-list": (("--devices", "2,-4"), ("--devices -4",)),
    "devices-reversed-range": (("--devices", "64..2"), ("1 <= lo <= hi",)),
    "devices-range-too-far": (("--devices", "1..100000"), ("--devices 1..100000", "ends past 16384")),
    "devices-not-a-number": (("--devices", "four"), ("expected a count",)),
    "devices-empty": (("--devices", ""), ("at least one device count",)),
    "dma-mode": (("--dma-mode", "sometimes"), ("--dma-mode", "invalid choice: 'sometimes'")),
    "format": (("--format", "xml"), ("--format", "invalid choice: 'xml'")),
    "timeout-zero": (("--timeout", "0"), ("--timeout", "positive")),
    "timeout-negative": (("--timeout", "-3"), ("--timeout", "positive")),
    "timeout-nan": (("--timeout", "nan"), ("--timeout", "positive")),
    "timeout-text": (("--timeout", "soon"), ("--timeout", "invalid float value")),
    "jobs-zero": (("--jobs", "0"), ("--jobs",)),
    "cores": (("--cores", "9"), ("--cores",)),
    "output-dir-missing": (("--output", "no/such/dir/report.json"), ("--output", "no such directory")),
    "unknown-option": (("--fast",), ("unrecognized arguments: --fast",)),
}


@pytest.mark.parametrize("case", list(USAGE_CASES))
def test_usage_error_is_one_line_and_exit_2(case, tmp_path):
    extra, words = USAGE_CASES[case]
    run = semcheck("verify", CLEAN, *extra, cwd=tmp_path)
    assert_one_line_error(run, "usage error", words)
    assert list(tmp_path.iterdir()) == []


def test_verify_without_a_file_is_a_usage_error():
    run = semcheck("verify")
    assert_one_line_error(run, "usage error", ("required: PATH",))


def test_no_command_prints_help_and_exits_2():
    run = semcheck()
    assert run.returncode == 2
    assert "verify" in run.stderr and run.stdout == ""


def test_version():
    run = semcheck("--version")
    assert run.returncode == 0 and run.stdout.startswith("semcheck ")


def test_a_device_range_is_its_ends_and_the_powers_of_two_between_as_the_help_says():
    from semcheck.checker.run.request import parse_devices

    assert parse_devices("2..5") == [2, 4, 5]
    assert parse_devices("3..16") == [3, 4, 8, 16]
    assert parse_devices("8") == [8]


def test_a_target_that_raises_does_not_hide_the_files_other_targets(tmp_path):
    (tmp_path / "two.py").write_text(textwrap.dedent(f"""
        import sys
        import semcheck
        sys.path.insert(0, {str(CLEAN.parent)!r})


        @semcheck.target(devices=[2])
        def good(num_devices):
            from ring_permute import build
            return build(num_devices)


        @semcheck.target(devices=[2])
        def broken(num_devices):
            raise RuntimeError("no mesh for you")
    """))
    run = semcheck("verify", "two.py", "--dma-mode", "eager", "--format", "json", cwd=tmp_path)
    assert run.returncode == 2, run.stderr
    assert run.stderr_lines == [line for line in run.stderr_lines if "(target broken)" in line] != []
    data = run.json()
    assert {row["target"] for row in data["results"]} == {"good"}
    assert all(row["verdict"] == "proved" for row in data["results"])
    ((error),) = data["errors"]
    assert error["target"] == "broken" and error["code"] == "kernel-raised" and "no mesh" in error["message"]
    # the reports for people say it too, and their summary does not read as all proved
    text, md = (semcheck("verify", "two.py", "--dma-mode", "eager", *fmt, cwd=tmp_path) for fmt in ((), ("--format", "markdown")))
    assert text.returncode == md.returncode == 2
    assert "two.py::broken: not verified: kernel-raised" in text.stdout
    assert text.stdout.rstrip().splitlines()[-1].startswith("FAIL ") and "1 target not verified" in text.stdout
    assert md.stdout.startswith("## semcheck ❌") and "not verified: <code>two.py</code> broken" in md.stdout


def test_a_generated_input_target_without_hypothesis_says_how_to_install_it(tmp_path):
    """Without hypothesis (here: a stand-in that fails to import as a missing one does), a target with
    `inputs=` is the one-line input error that names the extra to install."""
    fake = tmp_path / "no_hypothesis" / "hypothesis"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'hypothesis'\", name='hypothesis')\n")
    kernel = Path(__file__).resolve().parents[1] / "generated_inputs" / "paged_lengths.py"
    run = semcheck("verify", kernel, "--devices", "2", "--dma-mode", "eager", "--no-cache", cwd=tmp_path,
                   extra_env={"PYTHONPATH": str(fake.parent)})
    assert_one_line_error(run, "kernel-raised", ("ModuleNotFoundError", "pip install 'semcheck[inputs]'"))
