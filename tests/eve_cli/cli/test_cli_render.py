"""Renderers on event dicts shaped as SPEC §8."""

from __future__ import annotations

import io
import json
import re
from typing import Any

import pytest
from rich.console import Console

from eve_cli.cli._events import describe_request, event_request, field, format_call
from eve_cli.cli._render import Banner, JsonRenderer, PlainRenderer
from eve_cli.cli._render_rich import APPROVAL_CHOICES, RichRenderer

SID = "s_0123"


def ev(index: int, type_: str, **data: Any) -> dict[str, Any]:
    return {"type": type_, "index": index, "sessionId": SID, "at": "2026-01-01T00:00:00Z", **data}


TURN = [
    ev(0, "session.started", agent="default", model="demo"),
    ev(1, "turn.started", turnId="t1"),
    ev(2, "message.received", turnId="t1", message="what time is it?"),
    ev(3, "step.started", turnId="t1", stepIndex=0),
    ev(4, "message.appended", turnId="t1", stepIndex=0, delta="Let me "),
    ev(5, "message.appended", turnId="t1", stepIndex=0, delta="check."),
    ev(6, "message.completed", turnId="t1", stepIndex=0, text="Let me check."),
    ev(
        7,
        "actions.requested",
        turnId="t1",
        stepIndex=0,
        actions=[{"callId": "c1", "name": "clock", "arguments": {"zone": "UTC"}}],
    ),
    ev(
        8,
        "action.result",
        turnId="t1",
        stepIndex=0,
        callId="c1",
        name="clock",
        status="completed",
        isError=False,
        result="12:00",
        durationMs=15,
    ),
    ev(9, "step.completed", turnId="t1", stepIndex=0, usage={"inputTokens": 3}),
    ev(10, "step.started", turnId="t1", stepIndex=1),
    ev(11, "message.completed", turnId="t1", stepIndex=1, text="It is **12:00** UTC."),
    ev(12, "step.completed", turnId="t1", stepIndex=1),
    ev(13, "turn.completed", turnId="t1"),
    ev(14, "session.waiting", continuationToken="tok"),
]


ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def visible(buf: io.StringIO) -> str:
    """What a terminal shows, without escape sequences or trailing padding."""
    return "\n".join(line.rstrip() for line in ANSI.sub("", buf.getvalue()).splitlines())


def rich_console() -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, force_terminal=True, width=100, no_color=True), buf


def test_plain_prints_every_reply_and_nothing_else() -> None:
    out, err = io.StringIO(), io.StringIO()
    r = PlainRenderer(out, err)
    r.banner(Banner(SID, "default", "demo", ".workflow-data"))
    for e in TURN:
        r.event(e)
    r.close()
    assert out.getvalue() == "Let me check.\nIt is **12:00** UTC.\n"
    assert err.getvalue() == ""


def test_plain_final_only_prints_the_last_reply_at_close() -> None:
    out = io.StringIO()
    r = PlainRenderer(out, io.StringIO(), final_only=True)
    for e in TURN:
        r.event(e)
    assert out.getvalue() == ""
    r.close()
    assert out.getvalue() == "It is **12:00** UTC.\n"


def test_plain_errors_and_cancel_go_to_stderr() -> None:
    out, err = io.StringIO(), io.StringIO()
    r = PlainRenderer(out, err)
    r.event(ev(0, "turn.failed", error="model call 3 failed: script exhausted"))
    r.event(ev(1, "step.failed", data={"error": {"message": "boom"}}))
    r.event(ev(2, "turn.cancelled"))
    assert out.getvalue() == ""
    assert err.getvalue().splitlines() == [
        "eve: error: model call 3 failed: script exhausted",
        "eve: error: boom",
        "turn cancelled",
    ]


def test_json_writes_each_event_as_one_line() -> None:
    out = io.StringIO()
    r = JsonRenderer(out, io.StringIO())
    for e in TURN:
        r.event(e)
    lines = out.getvalue().splitlines()
    assert [json.loads(line) for line in lines] == TURN
    assert [json.loads(line)["index"] for line in lines] == list(range(len(TURN)))


def test_json_renders_non_json_values_as_strings() -> None:
    import datetime

    out = io.StringIO()
    JsonRenderer(out, io.StringIO()).event(
        ev(0, "step.completed", at=datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC))
    )
    assert json.loads(out.getvalue())["at"] == "2026-01-01 00:00:00+00:00"


def test_rich_banner_shows_agent_model_session_data_and_help() -> None:
    console, buf = rich_console()
    RichRenderer(console).banner(Banner(SID, "default", "demo", "/tmp/data"))
    text = visible(buf)
    for part in ("default", "demo", SID, "/tmp/data", "/help"):
        assert part in text


def test_rich_renders_markdown_reply_and_compact_tool_call() -> None:
    console, buf = rich_console()
    r = RichRenderer(console)
    for e in TURN:
        r.event(e)
    r.close()
    text = visible(buf)
    assert "Let me check." in text
    assert "It is 12:00 UTC." in text  # Markdown rendered: no ** left
    assert "**" not in text
    assert '✓ clock(zone="UTC") → 12:00  0.01s' in text


def test_rich_shows_reasoning_dimmed_before_the_answer() -> None:
    console, buf = rich_console()
    r = RichRenderer(console)
    r.event(ev(0, "step.started"))
    r.event(ev(1, "reasoning.completed", text="The user greets me."))
    r.event(ev(2, "message.completed", role="assistant", text="Hello!"))
    r.event(ev(3, "reasoning.completed", text="", redacted=True))
    r.close()
    text = visible(buf)
    assert text.index("The user greets me.") < text.index("Hello!")
    assert "(reasoning kept encrypted)" in text
    assert "\x1b[2;3m" in buf.getvalue()  # dim italic


def test_rich_tool_error_and_rejection_are_marked() -> None:
    console, _ = rich_console()
    r = RichRenderer(console)
    failed = r.tool_line(
        ev(
            0,
            "action.result",
            name="divide",
            arguments={"a": 1, "b": 0},
            status="failed",
            isError=True,
            result="ZeroDivisionError: division by zero",
        )
    )
    assert failed.plain.startswith("✗ divide(a=1, b=0)  failed → ZeroDivisionError")
    rejected = r.tool_line(ev(1, "action.result", name="rm", status="rejected", isError=True))
    assert rejected.plain == "✗ rm()  rejected"


def test_rich_tool_duration_falls_back_to_local_timing() -> None:
    console, _ = rich_console()
    r = RichRenderer(console)
    r.event(ev(0, "actions.requested", actions=[{"callId": "c9", "name": "t", "arguments": {}}]))
    line = r.tool_line(ev(1, "action.result", callId="c9", status="completed", result=1))
    r.close()
    assert line.plain.startswith("✓ t() → 1  0.0")
    assert line.plain.endswith("s")


def test_rich_approval_prompt_accepts_y_n_a_and_repeats_on_other_input() -> None:
    console, buf = rich_console()
    answers = iter(["maybe", "A"])
    prompts: list[str] = []

    def fake_input(prompt: str) -> str:
        prompts.append(prompt)
        return next(answers)

    r = RichRenderer(console, input_fn=fake_input)
    request = {
        "requestId": "r1",
        "kind": "approval",
        "name": "write_note",
        "arguments": {"title": "x"},
    }
    assert r.ask_approval(request) == "a"
    assert prompts == ["[y]es / [n]o / [a]lways: "] * 2
    assert 'approval to run write_note(title="x")' in visible(buf)
    assert "answer y, n or a" in visible(buf)


def test_rich_question_prompt_and_message_eof() -> None:
    console, buf = rich_console()

    def eof(prompt: str) -> str:
        raise EOFError

    r = RichRenderer(console, input_fn=lambda prompt: "blue")
    assert r.ask_question({"requestId": "q1", "kind": "question", "question": "Colour?"}) == "blue"
    assert "question: Colour?" in visible(buf)
    assert RichRenderer(console, input_fn=eof).read_message() is None


def test_rich_input_events_errors_and_cancel() -> None:
    console, buf = rich_console()
    r = RichRenderer(console)
    r.event(
        ev(
            0,
            "input.requested",
            requestId="r1",
            kind="approval",
            name="write_note",
            arguments={"title": "t"},
        )
    )
    r.event(ev(1, "input.resolved", requestId="r1", approved=True, always=True))
    r.event(
        ev(
            2,
            "input.requested",
            data={"request": {"requestId": "q", "kind": "question", "question": "Name?"}},
        )
    )
    r.event(ev(3, "input.resolved", requestId="q", answer="Ada"))
    r.event(ev(4, "turn.failed", error="limit reached"))
    r.event(ev(5, "turn.cancelled"))
    r.event(ev(6, "context.cleared"))
    r.close()
    text = visible(buf)
    for part in (
        "waiting: approval to run write_note",
        "approved (always)",
        "waiting: question: Name?",
        "answered: Ada",
        "error: limit reached",
        "turn cancelled",
        "history cleared",
    ):
        assert part in text, part


def test_a_request_is_described_once_before_its_prompt() -> None:
    console, buf = rich_console()
    r = RichRenderer(console, input_fn=lambda prompt: "y")
    request = {"requestId": "r1", "kind": "approval", "name": "save_note", "arguments": {}}
    r.event(ev(0, "input.requested", data={"request": request}))
    assert r.ask_approval(request) == APPROVAL_CHOICES["y"]
    assert visible(buf).count("approval to run save_note") == 1
    # A request pending from before (nothing announced it) is described by the prompt.
    assert r.ask_approval({**request, "requestId": "r2"}) == APPROVAL_CHOICES["y"]
    assert visible(buf).count("approval to run save_note") == 2


def test_rich_help_lists_every_slash_command() -> None:
    console, buf = rich_console()
    RichRenderer(console).show_help()
    for name in ("/help", "/exit", "/clear", "/compact", "/cancel", "/sessions"):
        assert name in visible(buf)


def test_event_helpers() -> None:
    assert field({"data": {"x": 1}}, "x") == 1
    assert field({"x": 2, "data": {"x": 1}}, "x") == 2
    assert field({}, "x", 5) == 5
    assert format_call("f", {"a": 1, "b": "two"}) == 'f(a=1, b="two")'
    assert format_call("f", None) == "f()"
    assert describe_request({"kind": "question", "question": "Q?", "options": ["a", "b"]}) == (
        "question: Q? (options: a, b)"
    )
    limit = {"requestId": "t:limit:2", "kind": "limit", "message": "Limit reached. Continue?"}
    assert describe_request(limit) == "approval: Limit reached. Continue?"
    assert describe_request({"kind": "approval", "tool": "rm", "arguments": {"p": "/"}}) == (
        'approval to run rm(p="/")'
    )
    nested = ev(0, "input.requested", data={"request": {"requestId": "r", "kind": "approval"}})
    assert event_request(nested)["requestId"] == "r"


def test_rich_output_has_no_colour_under_no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    def render() -> str:
        buf = io.StringIO()
        r = RichRenderer(Console(file=buf, force_terminal=True, width=100))
        for e in TURN:
            r.event(e)
        r.error("boom")
        r.close()
        return buf.getvalue()

    colour = re.compile(r"\x1b\[[0-9;]*(3[0-9]|9[0-7])[0-9;]*m")
    monkeypatch.setenv("NO_COLOR", "1")
    assert not colour.search(render())
    monkeypatch.delenv("NO_COLOR")
    assert colour.search(render())  # the check can fail: colours appear without NO_COLOR


def test_rich_recap_shows_the_last_exchanges_with_their_tool_lines() -> None:
    console, buf = rich_console()
    RichRenderer(console).recap(TURN, "s_1")
    text = visible(buf)
    assert "› what time is it?" in text
    assert "Let me check." in text  # every reply of the exchange, as it was shown live
    assert '✓ clock(zone="UTC")' in text
    assert "It is 12:00 UTC." in text
    assert text.index("Let me check.") < text.index("✓ clock") < text.index("It is 12:00")


def test_rich_recap_of_a_long_session_shows_five_exchanges_and_where_the_rest_is() -> None:
    events = [ev(i, "message.received", turnId=f"t{i}", message=f"question {i}") for i in range(8)]
    console, buf = rich_console()
    RichRenderer(console).recap(events, "s_1")
    text = visible(buf)
    assert "question 2" not in text and "question 3" in text and "question 7" in text
    assert "3 earlier exchanges: eve log s_1" in text


def test_a_reopened_sessions_tool_line_keeps_its_arguments() -> None:
    """A call asked for before the session was reopened (parked on its approval): its result
    line, rendered after the reopening, names its arguments (it said `pay()`)."""
    from eve_cli.execution import fold

    asked = [
        {"type": "turn.started", "index": 0, "turnId": "t1"},
        {"type": "step.started", "index": 1, "turnId": "t1", "stepIndex": 0},
        {"type": "actions.requested", "index": 2, "turnId": "t1", "stepIndex": 0,
         "actions": [{"callId": "c1", "name": "pay", "arguments": {"amount": 12}}]},
        {"type": "input.requested", "index": 3, "turnId": "t1", "stepIndex": 0,
         "requestId": "r1", "kind": "approval", "callId": "c1", "tool": "pay"},
    ]  # fmt: skip
    result = {"type": "action.result", "callId": "c1", "name": "pay", "status": "completed",
              "output": "paid", "durationMs": 3}  # fmt: skip
    out = io.StringIO()
    renderer = RichRenderer(Console(file=out, width=120, highlight=False))
    renderer.know_calls(fold("s1", asked))
    renderer.event(result)
    assert "pay(amount=12)" in out.getvalue()
    bare = io.StringIO()
    RichRenderer(Console(file=bare, width=120, highlight=False)).event(result)
    assert "pay()" in bare.getvalue()  # what a renderer that knows no call says


def test_rich_streams_reasoning_dimmed_as_it_arrives() -> None:
    console, buf = rich_console()
    r = RichRenderer(console)
    r.event(ev(0, "step.started"))
    r.event(ev(1, "reasoning.appended", delta="The user "))
    r.event(ev(2, "reasoning.appended", delta="greets me."))
    assert r._live is not None  # the live area (transient) shows it as it streams, dimmed
    area, out = rich_console()
    area.print(r._live.renderable)
    assert visible(out) == "The user greets me."
    assert "\x1b[2;3m" in out.getvalue()
    r.event(ev(3, "reasoning.completed", text="The user greets me."))
    r.event(ev(4, "message.completed", role="assistant", text="Hello!"))
    r.close()
    text = visible(buf)  # (the live area's frames are in the buffer too)
    assert text.rindex("The user greets me.") < text.index("Hello!")  # kept, before the answer
