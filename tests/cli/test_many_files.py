"""Many files and project configuration: `semcheck verify PATH...` over files and directories,
`[tool.semcheck]` in the nearest pyproject.toml, flags over it, one combined report and exit code."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest

from ._support import BUGGY, CLEAN, semcheck, semcheck_many

HELPER = "def helper(x):\n    return x + 1\n"
RAISES = "def build(num_devices):\n    raise RuntimeError('no kernel for ' + str(num_devices) + ' devices')\n"
TARGETED = textwrap.dedent('''
    import semcheck
    from ring_permute import build as _build


    @semcheck.target(devices=[2])
    def ring(num_devices):
        return _build(num_devices)
''')


def make_project(root: Path, config: str | None = None) -> Path:
    """A project: kernels/ (a clean kernel, a buggy one, a helper, a target-decorated one) and broken/."""
    (root / "kernels" / "sub").mkdir(parents=True)
    (root / "broken").mkdir()
    (root / ".hidden").mkdir()
    shutil.copy(CLEAN, root / "kernels" / "ring_permute.py")
    shutil.copy(BUGGY / "missing_signal_deadlock.py", root / "kernels" / "sub" / "deadlock.py")
    (root / "kernels" / "helper.py").write_text(HELPER)
    (root / "kernels" / "notes.txt").write_text("def build(:\n")
    (root / "broken" / "raises.py").write_text(RAISES)
    (root / ".hidden" / "raises.py").write_text(RAISES)
    if config is not None:
        (root / "pyproject.toml").write_text("[project]\nname = 'kernels'\n\n[tool.semcheck]\n" + config)
    return root


# --- discovery and configuration, in this process (no jax) ---------------------------


def test_discovery_finds_kernel_files_and_skips_the_rest(tmp_path, monkeypatch):
    from semcheck.checker.run.planning import Exclude, defines_kernel, discover

    root = make_project(tmp_path)
    (root / "kernels" / "targeted.py").write_text(TARGETED)
    (root / "kernels" / "imports_build.py").write_text("from ring_permute import build\n")
    (root / "kernels" / "entry_only.py").write_text("def make(num_devices):\n    pass\n")
    monkeypatch.chdir(root)
    files, skipped = discover(["."])
    assert files == ["broken/raises.py", "kernels/imports_build.py", "kernels/ring_permute.py",
                     "kernels/targeted.py", "kernels/sub/deadlock.py"]
    assert "kernels/helper.py" in skipped and "kernels/entry_only.py" in skipped
    assert not any(".hidden" in p for p in files + skipped)
    files, _ = discover(["."], exclude=[Exclude("broken", str(root)), Exclude("sub/*.py", str(root / "kernels"))])
    assert files == ["kernels/imports_build.py", "kernels/ring_permute.py", "kernels/targeted.py"]
    files, _ = discover(["kernels"], exclude=[Exclude("*_build.py", str(root))])
    assert "kernels/imports_build.py" not in files
    # --entry NAME: files that define NAME
    assert discover(["kernels"], entry="make")[0] == ["kernels/entry_only.py"]
    # an explicit file is verified as given, unless --only-kernels (pre-commit passes every changed file)
    assert discover(["kernels/helper.py"])[0] == ["kernels/helper.py"]
    assert discover(["kernels/helper.py", "kernels/ring_permute.py"], only_kernels=True)[0] == [
        "kernels/ring_permute.py"]
    assert defines_kernel("kernels/targeted.py") and not defines_kernel("kernels/helper.py")


def _settings(argv, cwd, monkeypatch):
    from semcheck.checker.run.cli import build_parser, settings

    monkeypatch.chdir(cwd)
    return settings(build_parser().parse_args(["verify", *argv]))


def test_tool_semcheck_settings_are_read_and_flags_override_them(tmp_path, monkeypatch):
    root = make_project(tmp_path, textwrap.dedent('''
        paths = ["kernels"]
        devices = "2..8"
        dma-mode = ["hardware", "eager"]
        timeout = 60
        cores = 1
        jobs = 2
        entry = "build"
        exclude = ["kernels/sub"]
    '''))
    st = _settings([], root / "kernels", monkeypatch)  # the nearest pyproject.toml above the cwd
    assert st.config == str(root / "pyproject.toml")
    assert st.paths == ["."] and st.devices is None and st.default_devices == (2, 4, 8)
    assert st.modes == ("eager", "hardware") and st.timeout == 60 and st.cores == 1 and st.jobs == 2
    assert st.entry == "build"
    assert any(e.matches(str(root / "kernels" / "sub" / "deadlock.py")) for e in st.exclude)
    st = _settings(["kernels", "--devices", "4", "--dma-mode", "on_wait", "--timeout", "9", "--jobs", "1",
                    "--exclude", "x.py"], root, monkeypatch)
    assert st.paths == ["kernels"] and st.devices == [4] and st.modes == ("on_wait",)
    assert st.timeout == 9 and st.jobs == 1 and len(st.exclude) == 2
    st = _settings(["kernels", "--no-config"], root, monkeypatch)
    assert st.config is None and st.modes == ("eager", "on_wait", "hardware") and st.timeout == 300


@pytest.mark.parametrize("bad, words", [
    ("devices = 0", ("devices", "between 1 and 16384")),
    ("dma-mode = 'sometimes'", ("dma-mode", "'sometimes'")),
    ("timeout = -1", ("timeout", "positive")),
    ("colour = true", ("colour", "unknown setting")),
    ("exclude = 3", ("exclude", "list")),
    ("select = ['deadlock-free', 'nope']", ("select", "nope", "not a property")),
    ("pythonpath = ['no_such_dir']", ("pythonpath", "no such directory", "no_such_dir")),
])
def test_a_bad_setting_is_a_usage_error_naming_it(tmp_path, bad, words):
    make_project(tmp_path, bad + "\n")
    run = semcheck("verify", "kernels", cwd=tmp_path)
    assert run.returncode == 2 and len(run.stderr_lines) == 1, run.stderr
    line = run.stderr_lines[0]
    assert line.startswith("semcheck: usage error: pyproject.toml: [tool.semcheck]"), line
    for w in words:
        assert w in line


# --- end to end -------------------------------------------------------------------


def test_pythonpath_and_ignore_in_the_configuration(tmp_path):
    """`pythonpath` (as pytest's) lets a kernel file import from the project's own directories without
    PYTHONPATH; `ignore` suppresses a property as --ignore does, and the report says where it was set."""
    (tmp_path / "lib").mkdir()
    (tmp_path / "k").mkdir()
    shutil.copy(CLEAN, tmp_path / "lib" / "ringlib.py")
    (tmp_path / "k" / "kern.py").write_text("from ringlib import build  # noqa: F401\n")
    (tmp_path / "pyproject.toml").write_text('[tool.semcheck]\npythonpath = ["lib"]\nignore = ["race-free"]\n')
    without = semcheck("verify", "k/kern.py", "--devices", "2", "--dma-mode", "eager", "--no-config", "--no-cache",
                       cwd=tmp_path)
    assert without.returncode == 2 and "ringlib" in without.stderr, without.stderr
    run = semcheck("verify", "k/kern.py", "--devices", "2", "--dma-mode", "eager", "--format", "json", "--no-cache",
                   cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    report = run.json()
    assert "race-free" not in {r["property"] for r in report["results"]}
    (sup,) = report["suppressed"]
    assert sup["property"] == "race-free" and "[tool.semcheck] ignore" in sup["reason"]


@pytest.fixture(scope="module")
def project_runs(tmp_path_factory):
    root = make_project(tmp_path_factory.mktemp("project"),
                        'devices = [2]\ndma-mode = "eager"\nexclude = ["broken"]\n')
    calls = {
        "config": ("kernels", "--format", "json"),
        "flags": ("kernels", "--exclude", "kernels/sub", "--dma-mode", "hardware", "--format", "json"),
        "errors": (".", "--no-config", "--devices", "2", "--dma-mode", "eager", "--format", "json",
                   "--jobs", "2"),
        "text": ("kernels", "broken"),
    }
    runs = semcheck_many([(("verify", *args), {"cwd": root}) for args in calls.values()])
    return dict(zip(calls, runs, strict=True))


@pytest.mark.jax
def test_a_directory_is_one_report_with_one_exit_code(project_runs):
    run = project_runs["config"]
    assert run.returncode == 1, run.stderr
    report = run.json()
    assert report["file"] == "kernels"
    assert report["files"] == ["kernels/ring_permute.py", "kernels/sub/deadlock.py"]
    rows = report["results"]
    assert {(r["file"], r["devices"], r["dma_mode"]) for r in rows} == {
        ("kernels/ring_permute.py", 2, "eager"), ("kernels/sub/deadlock.py", 2, "eager")}
    assert {r["property"] for r in rows if r["verdict"] == "violated"} == {"deadlock-free"}
    assert report["errors"] == []


@pytest.mark.jax
def test_flags_override_the_configuration_and_exclude_adds_to_it(project_runs):
    run = project_runs["flags"]
    assert run.returncode == 0, run.stderr
    report = run.json()
    assert report["files"] == ["kernels/ring_permute.py"]
    assert {r["dma_mode"] for r in report["results"]} == {"hardware"}


@pytest.mark.jax
def test_a_file_that_cannot_be_verified_does_not_stop_the_others(project_runs):
    run = project_runs["errors"]
    assert run.returncode == 1, run.stderr  # the violation decides; the error is reported too
    report = run.json()
    assert report["files"] == ["kernels/ring_permute.py", "kernels/sub/deadlock.py"]
    (error,) = report["errors"]
    assert error["file"] == "broken/raises.py" and error["code"] == "kernel-raised"
    assert "no kernel for 2 devices" in error["message"]
    assert [line for line in run.stderr_lines if "kernel-raised" in line] == [
        next(line for line in run.stderr_lines if line.startswith("semcheck: kernel-raised"))]


@pytest.mark.jax
def test_the_text_report_has_one_section_per_file_and_one_summary(project_runs):
    run = project_runs["text"]
    assert run.returncode == 1, run.stderr
    out = run.stdout
    assert "kernels/ring_permute.py: target build; 2 devices; DMA mode eager" in out
    assert "kernels/sub/deadlock.py: target build; 2 devices; DMA mode eager" in out
    assert "broken" not in out  # excluded by the configuration, though given explicitly as a directory
    last = out.strip().splitlines()[-1]
    assert last.startswith("FAIL ") and last.endswith("in 2 kernel files"), last


def test_only_kernels_skips_non_kernel_files_without_starting_jax(tmp_path):
    make_project(tmp_path)
    run = semcheck("verify", "--only-kernels", "kernels/helper.py", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout == "" and run.stderr_lines[0].startswith("semcheck: no kernel files:")
    assert run.seconds < 30
