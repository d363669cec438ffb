"""``.env`` and ``.env.local`` loading: precedence, syntax, and errors that show no secret."""

from __future__ import annotations

from pathlib import Path

import pytest

from eve_cli._env import EnvFileError, load_env


def test_process_env_wins_over_local_which_wins_over_env(isolated: Path) -> None:
    (isolated / ".env").write_text("A=from-env\nB=from-env\nC=from-env\n")
    (isolated / ".env.local").write_text("B=from-local\nC=from-local\n")
    values = load_env(environ={"C": "from-process"})

    assert (values["A"], values["B"], values["C"]) == ("from-env", "from-local", "from-process")


def test_syntax(isolated: Path) -> None:
    (isolated / ".env").write_text(
        "# comment\n"
        "\n"
        "export OPENAI_API_KEY=sk-abc # trailing comment\n"
        "SINGLE='literal \\n $HOME'\n"
        'DOUBLE="line one\\nline \\"two\\""\n'
        'MULTI="first\nsecond"\n'
        "EMPTY=\n"
        "HASH=a#b\n"
    )
    values = load_env(environ={})

    assert values == {
        "OPENAI_API_KEY": "sk-abc",
        "SINGLE": "literal \\n $HOME",
        "DOUBLE": 'line one\nline "two"',
        "MULTI": "first\nsecond",
        "EMPTY": "",
        "HASH": "a#b",
    }


def test_no_files_gives_the_process_environment(isolated: Path) -> None:
    assert load_env(environ={"X": "1"}) == {"X": "1"}


def test_default_environ_is_the_process(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (isolated / ".env.local").write_text("EVE_TEST_VALUE=file\n")
    monkeypatch.setenv("EVE_TEST_VALUE", "process")
    assert load_env()["EVE_TEST_VALUE"] == "process"


def test_a_malformed_line_names_file_and_line_but_not_the_value(isolated: Path) -> None:
    (isolated / ".env").write_text("OK=1\nnot a setting sk-secret-value\n")
    with pytest.raises(EnvFileError) as info:
        load_env(environ={})

    message = str(info.value)
    assert message.startswith(f"{isolated / '.env'}:2: expected KEY=VALUE")
    assert "sk-secret-value" not in message


def test_an_unclosed_quote_is_reported(isolated: Path) -> None:
    (isolated / ".env.local").write_text("KEY='abc\n")
    with pytest.raises(EnvFileError, match=r"\.env\.local:1: value of KEY has no closing '"):
        load_env(environ={})
