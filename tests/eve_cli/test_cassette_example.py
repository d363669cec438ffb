"""A recorded conversation as a regression test: `eve chat` on the built-in agent and the demo
model, then `eve export SESSION -o tests/eve_cli/cassettes/hello.json`, then these lines (the
path is made absolute only because this suite runs each test in a directory of its own)."""

from pathlib import Path

from eve_cli.testing import replay_cassette

HELLO = Path(__file__).parent / "cassettes" / "hello.json"


def test_hello_still_behaves_as_recorded() -> None:
    assert replay_cassette(HELLO) == []
