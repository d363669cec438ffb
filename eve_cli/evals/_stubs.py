"""Tool stubs: a case's tool calls whose name and arguments match a stub get the stub's result
and the tool never runs (for tools with side effects). The agent's tools are served wrapped,
each looking up the stubs of the case whose session calls it."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from eve_cli._agent_api import ToolContext
from eve_cli._json import JSONObject
from eve_cli._loader import AgentDefinition
from eve_cli._tools import InvalidArguments, Tool, ToolResult
from eve_cli.evals._case import Stub, arguments_match


class StubBook:
    """The stubs of each running case, by its session id."""

    def __init__(self) -> None:
        self._by_session: dict[str, Sequence[Stub]] = {}

    def set(self, session_id: str, stubs: Sequence[Stub]) -> None:
        if stubs:
            self._by_session[session_id] = stubs

    def find(self, session_id: str, name: str, arguments: Any) -> Stub | None:
        for stub in self._by_session.get(session_id.split(".", 1)[0], ()):
            if stub.tool == name and arguments_match(stub.arguments, arguments):
                return stub
        return None


@dataclasses.dataclass(frozen=True)
class StubbedTool(Tool):
    """A tool of the agent that returns a stub's result for matching calls."""

    book: StubBook | None = None

    async def execute(
        self,
        arguments: JSONObject | None,
        ctx: ToolContext,
        *,
        wait: float = 0.0,
        checked: dict[str, Any] | None = None,
        remaining: float | None = None,
    ) -> ToolResult:
        stub = self.book.find(ctx.session_id, self.name, arguments) if self.book else None
        if stub is None:
            return await super().execute(
                arguments, ctx, wait=wait, checked=checked, remaining=remaining
            )
        try:
            if checked is None:
                self.validate(arguments)
        except InvalidArguments as exc:
            return ToolResult(f"Invalid arguments for tool {self.name!r}: {exc}", is_error=True)
        return ToolResult(stub.result, stub.is_error)


def stubbed(agent: AgentDefinition, book: StubBook) -> AgentDefinition:
    """``agent`` with each tool answering from ``book`` where a stub matches."""
    fields = [f.name for f in dataclasses.fields(Tool)]
    tools: dict[str, Tool] = {
        name: StubbedTool(**{f: getattr(tool, f) for f in fields}, book=book)
        for name, tool in agent.tools.items()
    }
    return dataclasses.replace(agent, tools=tools)
