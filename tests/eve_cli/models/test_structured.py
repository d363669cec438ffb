"""Structured results: the provider's native structured output, the answer validated, one
repair, a clear failure, and a ``result`` event that `eve chat -p --json` and `eve log --json`
give."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from eve_cli import define_agent
from eve_cli._events import Event
from eve_cli._json import JSONObject
from eve_cli.harness._result import parse_result
from eve_cli.models import ModelRequest, resolve_model
from eve_cli.runtime import Runtime
from tests.eve_cli.models.fake_anthropic import Answer, FakeAnthropic
from tests.eve_cli.models.scriptserver import Reply, ScriptServer, generate, sse
from tests.eve_cli.rt_support import AgentFactory, reply

SCHEMA: JSONObject = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city", "days"],
    "additionalProperties": False,
}
SCHEMA_ARG = f"output_schema={SCHEMA!r}"


def of_type(rt: Runtime, sid: str, kind: str) -> list[Event]:
    return [e for e in rt.events(sid) if e["type"] == kind]


def run(agent: Path, data: Path, text: str = "plan") -> tuple[Runtime, str, dict[str, Any]]:
    async def main() -> tuple[Runtime, str, dict[str, Any]]:
        rt = Runtime(agent_dir=agent, data_dir=data)
        sid = await rt.create_session()
        await rt.deliver(sid, text)
        return rt, sid, dict(await rt.drive(sid))

    return asyncio.run(main())


def test_schema_checks() -> None:
    assert parse_result('```json\n{"city": "Oslo", "days": 3}\n```', SCHEMA) == (
        {"city": "Oslo", "days": 3}, None,
    )  # fmt: skip
    for text, why in [
        ("Oslo", "not JSON"),
        ('{"city": "Oslo"}', "lacks the required 'days'"),
        ('{"city": "Oslo", "days": "3"}', "$.days must be integer"),
        ('{"city": "Oslo", "days": 3, "x": 1}', "'x', which the schema does not allow"),
        ('{"city": "Oslo", "days": true}', "$.days must be integer"),
    ]:
        value, problem = parse_result(text, SCHEMA)
        assert value is None and problem is not None and why in problem, (text, problem)


def test_a_valid_answer_is_a_result_event(make_agent: AgentFactory, tmp_path: Path) -> None:
    agent = make_agent(script=[reply('{"city": "Oslo", "days": 3}')], agent_args=SCHEMA_ARG)
    rt, sid, view = run(agent, tmp_path / "data")
    assert view["status"] == "waiting"
    [result] = of_type(rt, sid, "result")
    assert result["value"] == {"city": "Oslo", "days": 3} and result["turnId"] == "t1"


def test_one_repair_then_the_result(make_agent: AgentFactory, tmp_path: Path) -> None:
    script = [reply("Oslo for 3 days"), reply('{"city": "Oslo", "days": 3}')]
    agent = make_agent(script=script, agent_args=SCHEMA_ARG)
    rt, sid, view = run(agent, tmp_path / "data")
    assert view["turns"][0]["status"] == "completed"
    [result] = of_type(rt, sid, "result")
    assert result["value"]["days"] == 3
    repair = rt.history(sid)[2]
    assert (
        repair["role"] == "user" and "does not match the required JSON schema" in repair["content"]
    )


def test_a_second_bad_answer_fails_the_turn_clearly(
    make_agent: AgentFactory, tmp_path: Path
) -> None:
    script = [reply("Oslo"), reply('{"city": "Oslo"}')]
    agent = make_agent(
        script=script,
        agent_args=SCHEMA_ARG,
    )
    rt, sid, view = run(agent, tmp_path / "data")
    turn = view["turns"][0]
    assert turn["status"] == "failed"
    assert turn["error"] == "the answer does not match output_schema: $ lacks the required 'days'"
    assert of_type(rt, sid, "result") == []


def test_a_pydantic_model_gives_the_schema_and_validates() -> None:
    from pydantic import BaseModel

    class Trip(BaseModel):
        city: str
        days: int

    config = define_agent(output_schema=Trip)
    assert config.output_schema is not None and config.output_schema["required"] == ["city", "days"]
    schema, model = config.output_schema, config.output_type
    assert parse_result('{"city": "Oslo", "days": "3"}', schema, model) == (
        {"city": "Oslo", "days": 3}, None,
    )  # fmt: skip
    value, problem = parse_result('{"city": 1}', config.output_schema, config.output_type)
    assert value is None and problem is not None and "days" in problem
    with pytest.raises(TypeError, match="output_schema takes"):
        define_agent(output_schema=int)


def test_openai_gets_a_strict_json_schema(server: ScriptServer) -> None:
    chunk = {"choices": [{"index": 0, "delta": {"content": "{}"}, "finish_reason": "stop"}]}
    request = ModelRequest(system="s", messages=[{"role": "user", "content": "x"}],
                           output_schema=SCHEMA)  # fmt: skip
    for model, loose in (("openai:gpt-4o", False), ("openai-responses:gpt-5", True)):
        server.add(Reply(chunks=[sse(chunk), sse("[DONE]")]))
        if model.startswith("openai-responses"):
            done = {"type": "response.completed", "response": {"status": "completed", "output": []}}
            server.replies[-1] = Reply(chunks=[sse(done)])
        schema = dict(SCHEMA, additionalProperties=True) if loose else SCHEMA
        generate(resolve_model(model, env={"OPENAI_BASE_URL": server.url}),
                 ModelRequest(**{**request.__dict__, "output_schema": schema}))  # fmt: skip
    chat, responses = (seen.body for seen in server.requests)
    assert chat["response_format"] == {
        "type": "json_schema", "json_schema": {"name": "result", "schema": SCHEMA, "strict": True},
    }  # fmt: skip
    assert responses["text"]["format"]["type"] == "json_schema"
    assert responses["text"]["format"]["strict"] is False  # an open object: strict would refuse


def test_anthropic_answers_through_a_forced_tool(
    make_agent: AgentFactory, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    answers = [Answer(tools=[("final_result", {"city": "Oslo", "days": 3})]), Answer(text="Hi")]
    with FakeAnthropic(answers) as fake:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.url)
        agent = make_agent(agent_args=f"model='anthropic:claude-sonnet-4-5', {SCHEMA_ARG}")
        rt, sid, view = run(agent, tmp_path / "data")
        assert view["status"] == "waiting"
        [result] = of_type(rt, sid, "result")
        assert result["value"] == {"city": "Oslo", "days": 3}
    body = fake.requests[0]
    assert body["tool_choice"] == {"type": "any"}
    assert body["tools"][-1]["name"] == "final_result"
    assert fake.violations == []


def test_chat_json_and_log_json_give_the_result(tmp_path: Path) -> None:
    folder = tmp_path / "agent"
    folder.mkdir()
    (folder / "script.json").write_text(json.dumps([{"text": '{"city": "Oslo", "days": 3}'}]))
    (folder / "agent.py").write_text(
        "from eve_cli import define_agent\n\n"
        f"agent = define_agent(model='scripted:script.json', {SCHEMA_ARG})\n"
    )

    def eve(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "eve_cli", *args], capture_output=True,
                              text=True, timeout=60, cwd=tmp_path)  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout

    lines = [
        json.loads(line)
        for line in eve("chat", "--agent", str(folder), "-p", "go", "--json").splitlines()
    ]
    [result] = [e for e in lines if e["type"] == "result"]
    assert result["value"] == {"city": "Oslo", "days": 3}
    document = json.loads(eve("log", lines[0]["sessionId"], "--json"))
    [entry] = [e for e in document["entries"] if e["role"] == "result"]
    assert entry["value"] == {"city": "Oslo", "days": 3}


def test_a_schema_per_delivery_applies_to_its_turn_only(
    make_agent: AgentFactory, tmp_path: Path
) -> None:
    agent = make_agent(script=[reply('{"city": "Oslo", "days": 3}'), reply("plain words")])

    async def main() -> None:
        rt = Runtime(agent_dir=agent, data_dir=tmp_path / "data")
        sid = await rt.create_session()
        await rt.deliver(sid, "plan", output_schema=SCHEMA)
        assert (await rt.drive(sid))["status"] == "waiting"
        await rt.deliver(sid, "chat")  # no schema: a plain answer, no result
        view = await rt.drive(sid)
        assert [t["status"] for t in view["turns"]] == ["completed", "completed"]
        [result] = of_type(rt, sid, "result")
        assert (result["turnId"], result["value"]) == ("t1", {"city": "Oslo", "days": 3})
        with pytest.raises(ValueError, match="output_schema must be a JSON schema object"):
            await rt.deliver(sid, "x", output_schema="nope")  # type: ignore[arg-type]

    asyncio.run(main())
