"""Settings that cannot be read (specs/deciding/report.md REP-3), for the CLI and the loader every way
in shares (REP-2; a `src/`-layout project under all four ways in: tests/api/test_api_settings.py)."""

from __future__ import annotations

import contextlib
import io

import pytest


def _main(cwd, *args: str) -> tuple[int, list[str]]:
    """`semcheck verify ARGS` in this process (these stop before any checking process): exit code
    and stderr's lines."""
    from semcheck.checker.run.cli import main

    err = io.StringIO()
    with contextlib.chdir(cwd), contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["verify", *args])
    return code, err.getvalue().splitlines()


@pytest.mark.rule("REP-3")
@pytest.mark.parametrize("table, flags, says", [
    (b'[tool.semcheck]\ndevices = [2]\n# caf\xe9 in latin-1\n', (), "not UTF-8"),
    (b'[tool.semcheck]\ndevices = "2,,4"\n', (), "empty entry"),
    (b'[tool.semcheck]\nexclude = "["\n', (), "not a valid glob"),
    (b'[tool.semcheck]\nexclude = ["ok", "a[b"]\n', (), "not a valid glob"),
    (None, ("--devices", "2,,4"), "empty entry"),
    (None, ("--exclude", "x["), "not a valid glob"),
])
def test_bad_settings_are_one_line_and_exit_code_2(tmp_path, table, flags, says):
    (tmp_path / "k.py").write_text("def build(n):\n    return None\n")
    if table is not None:
        (tmp_path / "pyproject.toml").write_bytes(table)
    code, err = _main(tmp_path, "k.py", *flags)
    assert code == 2
    assert len(err) == 1 and err[0].startswith("semcheck: usage error: ") and says in err[0], err
    if table is not None:  # the API and the plugin read the table with the same loader: the same error
        from semcheck.checker.run.config import load_settings
        from semcheck.checker.run.exit_codes import UsageError

        with pytest.raises(UsageError, match=says):
            load_settings(str(tmp_path))
