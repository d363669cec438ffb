"""What a run did, read from its events: the last turn's reply, tool calls with their results,
steps, tokens, cost (a step's ``cost``), the structured result (a ``result`` event), errors;
and the cost and result expectations on it."""

from __future__ import annotations

from eve_cli._events import Event
from eve_cli.evals import Expect
from eve_cli.evals._expect import check_run
from eve_cli.evals._outcome import read_run
from eve_cli.testing import expect


def _events() -> list[Event]:
    at = "2026-12-04T10:00:0{}.000+00:00"
    return [
        {"type": "session.started", "at": at.format(0)},
        {"type": "turn.started", "turnId": "t1", "at": at.format(0)},
        {"type": "message.received", "text": "hi", "at": at.format(1)},
        {"type": "message.completed", "text": "first", "at": at.format(1)},
        {"type": "step.completed", "usage": {"inputTokens": 10, "outputTokens": 2},
         "cost": 0.25, "at": at.format(2)},
        {"type": "turn.started", "turnId": "t2", "at": at.format(2)},
        {"type": "message.received", "text": "and?", "at": at.format(2)},
        {"type": "actions.requested", "actions": [
            {"callId": "c1", "name": "add", "arguments": {"a": 1, "b": 2}}], "at": at.format(3)},
        {"type": "action.result", "callId": "c1", "name": "add", "status": "completed",
         "isError": False, "output": "3", "at": at.format(3)},
        {"type": "step.completed", "cost": 0.5, "at": at.format(4),
         "usage": {"inputTokens": 20, "outputTokens": 3, "cacheReadTokens": 5}},
        {"type": "message.completed", "text": '{"n": 3}', "at": at.format(4)},
        {"type": "result", "value": {"n": 3}, "at": at.format(4)},
        {"type": "step.completed", "usage": {"inputTokens": 30, "outputTokens": 4},
         "at": at.format(5)},
        {"type": "turn.completed", "at": at.format(6)},
    ]  # fmt: skip


def test_a_run_is_read_from_its_events() -> None:
    run = read_run("s_1", _events())
    assert run.reply == '{"n": 3}' and run.steps == 3 and run.tokens == 69
    assert run.cost == 0.75 and run.has_result and run.result == {"n": 3}
    assert [(c.name, c.arguments, c.output) for c in run.tool_calls] == [
        ("add", {"a": 1, "b": 2}, "3")
    ]
    assert run.seconds == 5.0 and run.errors == []


def test_cost_and_structured_result_expectations() -> None:
    run = read_run("s_1", _events())
    schema = {"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}}
    assert expect(run, max_cost=1, result_schema=schema, json_schema=schema) == []
    wrong = {"type": "object", "properties": {"n": {"type": "string"}}}
    assert expect(run, max_cost=0.5, result_schema=wrong) == [
        "result does not fit the schema at n: 3 is not of type 'string'",
        "cost 0.75, at most 0.5 expected",
    ]
    assert expect(run, json_schema=wrong) == [  # the structured result, when there is one
        "result does not fit the schema at n: 3 is not of type 'string'"
    ]
    no_result = read_run("s_2", [e for e in _events() if e["type"] != "result"])
    assert expect(no_result, result_schema=schema) == [
        "no structured result (the agent emitted no result event)"
    ]
    assert expect(no_result, json_schema=wrong) == [  # else the reply, read as JSON
        "reply does not fit the schema at n: 3 is not of type 'string'"
    ]


def test_a_failed_turn_is_one_error() -> None:
    events: list[Event] = [
        *_events()[:3],
        {"type": "step.failed", "error": {"message": "boom"}},
        {"type": "turn.failed", "error": {"message": "boom"}},
    ]
    run = read_run("s_3", events)
    assert run.errors == ["boom"] and run.steps == 1
    assert check_run(Expect(), run) == ["error: boom"]
    assert check_run(Expect(no_error=False), run) == []
