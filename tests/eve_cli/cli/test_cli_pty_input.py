"""The message prompt of `eve chat` in a real pseudo-terminal: line editing, history kept per
project, a bracketed paste as one message, several lines typed on purpose, Ctrl-C that
clears a half-typed line, and completion of slash commands."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable

from tests.eve_cli.cli.cli_helpers import PROMPT, EveProc, Reader, Terminal

LEFT, HOME = "\x1b[D", "\x01"  # ← and Ctrl-A
UP, DOWN = "\x1b[A", "\x1b[B"
PASTE_START, PASTE_END = "\x1b[200~", "\x1b[201~"


def received(sid: str) -> list[str]:
    """The user messages the session received, in order."""
    done = subprocess.run(
        [sys.executable, "-m", "eve_cli", "inspect", sid, "--events", "--json"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    events = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    return [str(e.get("text")) for e in events if e.get("type") == "message.received"]


def start(terminal: Callable[..., Terminal], *args: str) -> tuple[Terminal, str]:
    term = terminal("chat", *args)
    sid = term.out.expect(r"session\s+(\S+)").group(1)
    term.out.expect(PROMPT)
    return term, sid


def settle(term: Terminal, reply: str) -> None:
    """Wait for the reply (a pattern) and then for the prompt to come back."""
    term.out.expect(reply)
    term.out.expect(PROMPT)


def test_arrow_keys_and_ctrl_a_edit_the_line(terminal: Callable[..., Terminal]) -> None:
    term, sid = start(terminal)
    term.type(f"abc{LEFT}{LEFT}Z{HOME}X\r")
    settle(term, 'You said: "XaZbc"')
    term.type("\x04")
    assert term.wait() == 0
    assert received(sid) == ["XaZbc"]
    assert "\\x1b" not in term.out.text and "[D" not in term.out.text


def test_history_is_kept_per_project_across_chats(terminal: Callable[..., Terminal]) -> None:
    first, _ = start(terminal)
    first.type("count the words in one two three\r")
    settle(first, "3 words")
    first.type("\x04")
    assert first.wait() == 0
    second, sid = start(terminal)
    second.type(f"{UP}")
    second.out.expect("count the words in one two three")
    second.type("\r")
    settle(second, "3 words")
    second.type("\x04")
    assert second.wait() == 0
    assert received(sid) == ["count the words in one two three"]


def test_a_bracketed_paste_is_one_message(terminal: Callable[..., Terminal]) -> None:
    term, sid = start(terminal)
    term.type(f"{PASTE_START}line one\nline two\nline three{PASTE_END}")
    term.out.expect("line three")
    term.type("\r")
    settle(term, 'You said: "line one line two line three"')
    term.type("\x04")
    assert term.wait() == 0
    assert received(sid) == ["line one\nline two\nline three"]


def test_esc_enter_and_a_trailing_backslash_start_a_new_line(
    terminal: Callable[..., Terminal],
) -> None:
    term, sid = start(terminal)
    term.type("first\x1b\r")
    term.out.expect("…")
    term.type("second\\\r")
    term.out.expect("…")
    term.type("third\r")
    settle(term, 'You said: "first second third"')
    term.type("\x04")
    assert term.wait() == 0
    assert received(sid) == ["first\nsecond\nthird"]


def test_ctrl_c_clears_the_line_then_exits_on_an_empty_one(
    terminal: Callable[..., Terminal],
) -> None:
    term, sid = start(terminal)
    term.type("half typed")
    term.out.expect("half typed")
    term.type("\x03")  # clears the line: the program goes on
    term.type("what time is it?\r")
    settle(term, r"It is \d{4}-")
    term.type("\x03")  # on an empty line: exits
    assert term.wait() == 130
    assert received(sid) == ["what time is it?"]
    term.out.expect(f"resume with: eve chat -s {sid}")


def test_tab_completes_a_slash_command(terminal: Callable[..., Terminal]) -> None:
    term, _ = start(terminal)
    term.type("/sess\t")
    term.out.expect("/sessions")
    term.type("\r")
    settle(term, "turns")  # the sessions table
    term.type("\x04")
    assert term.wait() == 0


def test_the_picker_opens_a_recent_session_by_its_first_message(
    terminal: Callable[..., Terminal], eve_proc: EveProc
) -> None:
    older = eve_proc("chat", "--json", "-p", "count the words in alpha beta")
    older_sid = json.loads(older.stdout.splitlines()[0])["sessionId"]
    eve_proc("chat", "-p", "what time is it?")
    eve_proc("chat", input="")  # an empty session: not offered
    term = terminal("chat", "-r")
    term.out.expect("Open which session")
    term.out.expect("count the words in alpha beta")
    term.type(DOWN)  # the newest first: one down is the older session
    term.type("\r")
    term.out.expect("resumed session")
    term.out.expect(older_sid)
    term.out.expect("› count the words in alpha beta")  # its transcript so far
    term.out.expect(PROMPT)
    term.type("\x04")
    assert term.wait() == 0
    shown = term.out.text
    assert "(no message)" not in shown


def test_a_positional_message_opens_the_chat_with_it(terminal: Callable[..., Terminal]) -> None:
    term = terminal("chat", "count the words in one two")
    term.out.expect("2 words")
    term.out.expect(PROMPT)
    term.type("what time is it?\r")
    settle(term, r"It is \d{4}-")
    term.type("\x04")
    assert term.wait() == 0


def test_a_server_that_goes_away_is_one_line_and_an_offer_to_try_again(
    terminal: Callable[..., Terminal],
) -> None:
    def serve(port: str) -> tuple[subprocess.Popen[bytes], str]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "eve_cli", "start", "--port", port],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip
        assert proc.stdout is not None
        return proc, Reader(proc.stdout.fileno()).expect(r"serving (http://\S+)").group(1)

    first, url = serve("0")
    second = None
    try:
        term = terminal("chat", "--url", url)
        term.out.expect(PROMPT)
        term.type("what time is it?\r")
        settle(term, r"It is \d{4}-")
        first.kill()
        first.wait(timeout=10)
        term.type("count the words in a b c\r")
        term.out.expect(f"the server at {url} went away")
        term.out.expect(r"try again\? \[Y/n\]")
        second, _ = serve(url.rsplit(":", 1)[1].strip("/"))
        term.type("\r")  # yes: the same message goes to the server that is back
        settle(term, "3 words")
        term.type("\x04")
        assert term.wait() == 0
        assert "Traceback" not in term.out.text
    finally:
        for proc in (first, second):
            if proc is not None:
                if proc.poll() is None:
                    proc.kill()
                proc.wait(timeout=10)
                assert proc.stdout is not None
                proc.stdout.close()
