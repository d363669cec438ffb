"""The command-line shell: global options, exit codes, one-line errors, completion."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from eve_cli import __version__
from eve_cli.cli import main
from eve_cli.cli._context import data_path, ensure_data_dir
from eve_cli.cli._errors import CliError
from eve_cli.cli.app import app, run_guarded

runner = CliRunner()


def test_version_through_typer_and_main(capsys: pytest.CaptureFixture[str]) -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout.strip() == f"eve {__version__}"
    main(["-V"])
    assert capsys.readouterr().out.strip() == f"eve {__version__}"


def test_help_lists_the_commands() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for name in ("chat", "inspect", "resume", "init"):
        assert name in result.stdout


def test_no_arguments_shows_help_as_usage() -> None:
    result = runner.invoke(app, [])
    assert result.exit_code == 2
    assert "Usage" in result.output
    assert "error" not in result.stderr


def test_unknown_option_is_one_line_and_exit_2() -> None:
    result = runner.invoke(app, ["--bogus"])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert lines == ["eve: error: No such option: --bogus (see 'eve --help')"]


def test_unknown_command_exit_2() -> None:
    result = runner.invoke(app, ["frobnicate"])
    assert result.exit_code == 2
    assert "frobnicate" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_unexpected_exception_is_one_line_without_debug(capsys: pytest.CaptureFixture[str]) -> None:
    def boom() -> None:
        raise ValueError("bad thing at offset 12")

    assert run_guarded(boom, debug=False) == 1
    err = capsys.readouterr().err
    assert err == (
        "eve: error: ValueError: bad thing at offset 12 (run with --debug for the traceback)\n"
    )
    assert run_guarded(boom, debug=True) == 1
    assert "Traceback (most recent call last)" in capsys.readouterr().err


def test_cli_error_keeps_its_code_and_interrupt_is_130(capsys: pytest.CaptureFixture[str]) -> None:
    def waiting() -> None:
        raise CliError("session s1 waits for approval", 3)

    def interrupted() -> None:
        raise KeyboardInterrupt

    assert run_guarded(waiting, debug=False) == 3
    assert capsys.readouterr().err == "eve: error: session s1 waits for approval\n"
    assert run_guarded(interrupted, debug=False) == 130
    assert "interrupted" in capsys.readouterr().err


def test_data_dir_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVE_DATA_DIR", str(tmp_path / "env"))
    assert data_path() == tmp_path / "env"
    assert data_path(tmp_path / "flag") == tmp_path / "flag"
    monkeypatch.delenv("EVE_DATA_DIR")
    assert data_path() == Path(".workflow-data")


def test_data_dir_is_created_and_bad_paths_are_one_clear_error(tmp_path: Path) -> None:
    made = ensure_data_dir(tmp_path / "a" / "b")
    assert made.is_dir()
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(CliError, match="is not a directory"):
        ensure_data_dir(blocker)
    with pytest.raises(CliError, match="cannot create data directory"):
        ensure_data_dir(blocker / "sub")


def test_show_completion_prints_a_script() -> None:
    # Without a parent shell to detect (CI has no terminal), Typer must be told the shell.
    env = {**os.environ, "_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1", "SHELL": "/bin/bash"}
    result = subprocess.run(
        [sys.executable, "-m", "eve_cli", "--show-completion", "bash"],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0
    assert "_eve_completion" in result.stdout


def test_completion_completes_command_names() -> None:
    env = {
        **__import__("os").environ,
        "_EVE_COMPLETE": "complete_bash",
        "COMP_WORDS": "eve ini",
        "COMP_CWORD": "1",
    }
    code = "import sys; sys.argv[0] = 'eve'; from eve_cli.cli import main; main()"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=30
    )
    assert result.stdout.split() == ["init"]
