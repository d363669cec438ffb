"""The offline models: demo (rules) and scripted:PATH (SPEC §7)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from eve_cli.models import ModelError, ModelRequest, ToolSpec, resolve_model

TOOLS = [
    ToolSpec(n, n, {"type": "object"})
    for n in ("get_current_time", "count_words", "save_note", "ask_question")
]


def generate(model_string: str, request: ModelRequest) -> tuple[object, list[str]]:
    model = resolve_model(model_string)
    deltas: list[str] = []

    async def on_delta(text: str) -> None:
        deltas.append(text)

    return asyncio.run(model.generate(request, on_delta)), deltas


def user(text: str) -> ModelRequest:
    return ModelRequest(system="", messages=[{"role": "user", "content": text}], tools=TOOLS)


@pytest.mark.parametrize(
    "text, tool",
    [
        ("what time is it?", "get_current_time"),
        ("count the words in a b c", "count_words"),
        ("remember to buy milk", "save_note"),
        ("ask me a question", "ask_question"),
    ],
)
def test_demo_calls_tools_from_plain_messages(text: str, tool: str) -> None:
    response, _ = generate("demo", user(text))
    assert [c.name for c in response.tool_calls] == [tool]  # type: ignore[attr-defined]


def test_demo_replies_and_streams_deterministically() -> None:
    first, deltas = generate("demo", user("hello there"))
    second, _ = generate("demo", user("hello there"))
    assert first == second
    assert "".join(deltas) == first.text  # type: ignore[attr-defined]
    assert "what time is it" in first.text  # type: ignore[attr-defined]


def test_demo_reports_tool_results() -> None:
    request = ModelRequest(
        system="",
        tools=TOOLS,
        messages=[
            {"role": "user", "content": "count the words in a b c"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": "1", "name": "count_words", "arguments": {"text": "a b c"}}],
            },
            {
                "role": "tool",
                "tool_call_id": "1",
                "name": "count_words",
                "content": "3",
                "is_error": False,
            },
        ],
    )
    response, _ = generate("demo", request)
    assert response.text == "That text has 3 words."  # type: ignore[attr-defined]
    assert response.tool_calls == []  # type: ignore[attr-defined]


def write_script(path: Path, data: object) -> str:
    path.write_text(json.dumps(data))
    return f"scripted:{path}"


def test_scripted_answers_entry_n_for_call_n(tmp_path: Path) -> None:
    model = write_script(
        tmp_path / "s.json",
        [
            {"text": "zero"},
            {"text": "", "tool_calls": [{"name": "add", "arguments": {"a": 1}}]},
        ],
    )
    first, deltas = generate(model, ModelRequest(system="", messages=[], call_index=0))
    assert first.text == "zero" and "".join(deltas) == "zero"  # type: ignore[attr-defined]
    second, _ = generate(model, ModelRequest(system="", messages=[], call_index=1))
    [call] = second.tool_calls  # type: ignore[attr-defined]
    assert (call.id, call.name, call.arguments) == ("call_1_0", "add", {"a": 1})
    again, _ = generate(model, ModelRequest(system="", messages=[], call_index=1))
    assert again == second


def test_scripted_summary_consumes_no_entry(tmp_path: Path) -> None:
    model = write_script(tmp_path / "s.json", [{"text": "only"}])
    summary, _ = generate(
        model,
        ModelRequest(
            system="", messages=[{"role": "user", "content": "hi"}], call_index=0, purpose="summary"
        ),
    )
    assert "user: hi" in summary.text  # type: ignore[attr-defined]
    answer, _ = generate(model, ModelRequest(system="", messages=[], call_index=0))
    assert answer.text == "only"  # type: ignore[attr-defined]


def test_scripted_exhausted_names_script_and_call(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    model = write_script(path, [{"text": "only"}])
    with pytest.raises(ModelError) as caught:
        generate(model, ModelRequest(system="", messages=[], call_index=1))
    assert str(path) in str(caught.value)
    assert "model call 1" in str(caught.value)


def test_scripted_invalid_arguments_surface_as_argument_error(tmp_path: Path) -> None:
    model = write_script(
        tmp_path / "s.json", [{"text": "", "tool_calls": [{"name": "add", "arguments": "oops"}]}]
    )
    response, _ = generate(model, ModelRequest(system="", messages=[]))
    [call] = response.tool_calls  # type: ignore[attr-defined]
    assert call.arguments is None and call.argument_error
