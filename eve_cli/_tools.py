"""Tools as the runtime uses them: argument models from type hints (pydantic), JSON schema for
the model, and execution that turns invalid input and exceptions into tool-error results.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Required, TypedDict

from eve_cli._agent_api import ApprovalPolicy, Effects, ToolContext, ToolFunction, never
from eve_cli._json import JSONObject, JSONValue
from eve_cli._tool_threads import run_sync
from eve_cli.models import ToolSpec

if TYPE_CHECKING:  # pydantic is imported where a tool is built or run, not by every command
    import pydantic


class ToolDefinitionError(Exception):
    """A tool function cannot be used (e.g. a parameter without a type hint)."""


class InvalidArguments(ValueError):
    """The model's arguments do not match the tool's signature."""


class ResultPart(TypedDict, total=False):
    """A part of an MCP call's result that is not text: an image or audio (``mimeType``), or
    a resource (``uri``); ``data``: its bytes."""

    type: str  # image | audio | resource
    mimeType: str
    uri: str
    data: bytes


class ToolExtra(TypedDict, total=False):
    """What else a call's result keeps besides its text (an MCP call's): the server and tool
    that ran it, the parts that are not text, its structured content."""

    server: Required[str]
    tool: Required[str]
    parts: list[ResultPart]
    structured: JSONValue


@dataclass(frozen=True)
class ToolResult:
    """What the model sees for one call: ``content`` text, ``is_error`` flag; ``extra``: what
    else is kept with it (an MCP call's server, tool, images, structured content)."""

    content: str
    is_error: bool = False
    extra: ToolExtra | None = None


@dataclass(frozen=True)
class Tool:
    """A validated tool: spec for the model, an argument model, and the function."""

    name: str
    description: str
    parameters: JSONObject
    approval: ApprovalPolicy
    fn: Callable[..., Any] | None
    args_model: type[pydantic.BaseModel] | None
    ctx_param: str | None = None
    source: str = ""
    effects: Effects = "idempotent"
    timeout: float | None = None  # seconds a call may take in all (across restarts)

    @functools.cached_property
    def spec(self) -> ToolSpec:
        """What the model is told of it: made once (asked at every model call)."""
        return ToolSpec(self.name, self.description, self.parameters)

    def validate(self, arguments: JSONObject | None) -> dict[str, Any]:
        """Checked keyword arguments, or :class:`InvalidArguments` saying what is wrong."""
        if arguments is None or not isinstance(arguments, dict):
            raise InvalidArguments(f"arguments must be a JSON object, got {arguments!r}")
        if self.args_model is None:
            return dict(arguments)
        import pydantic

        try:
            model = self.args_model.model_validate(arguments)
        except pydantic.ValidationError as exc:
            raise InvalidArguments(_describe_validation(exc)) from None
        return {name: getattr(model, name) for name in _field_names(type(model))}

    async def execute(
        self,
        arguments: JSONObject | None,
        ctx: ToolContext,
        *,
        wait: float = 0.0,
        checked: dict[str, Any] | None = None,
        remaining: float | None = None,
    ) -> ToolResult:
        """Run the tool; never raises for bad input or a failing tool (those are results).
        A sync tool runs on a tool thread; ``wait``: see :func:`run_sync`. ``checked``: the
        arguments as :meth:`validate` returned them (else they are validated here).
        ``remaining``: seconds left of the tool's ``timeout`` (an async tool still running
        then is cancelled; a sync one's result is not waited for)."""
        try:
            kwargs = dict(checked) if checked is not None else self.validate(arguments)
        except InvalidArguments as exc:
            return ToolResult(f"Invalid arguments for tool {self.name!r}: {exc}", is_error=True)
        if remaining is None:
            return await self.invoke(kwargs, ctx, wait)
        limit = asyncio.timeout(max(remaining, 0.0))
        try:
            async with limit:
                return await self.invoke(kwargs, ctx, wait)
        except TimeoutError:
            if limit.expired():
                return ToolResult(self.timed_out(), True)
            raise

    async def invoke(self, kwargs: dict[str, Any], ctx: ToolContext, wait: float) -> ToolResult:
        """Run the tool on checked arguments (a failure is a tool-error result)."""
        if self.fn is None:
            return ToolResult(f"tool {self.name!r} has no local implementation", is_error=True)
        if self.ctx_param is not None:
            kwargs[self.ctx_param] = ctx
        try:
            if self._is_async:
                value = await self.fn(**kwargs)
            else:
                # Off the event loop, so streaming, tails and cancel stay live meanwhile.
                value = await run_sync(self.fn, kwargs, wait)
                if type(value) not in _PLAIN and inspect.isawaitable(value):
                    value = await value
        except Exception as exc:
            return ToolResult(f"Tool {self.name!r} failed: {type(exc).__name__}: {exc}", True)
        return ToolResult(render_result(value))

    @functools.cached_property
    def _is_async(self) -> bool:  # asked at every call (inspect's test is five calls)
        return inspect.iscoroutinefunction(self.fn)

    def timed_out(self) -> str:
        """The result of a call that ran past its ``timeout``."""
        return f"Tool {self.name!r} timed out after {self.timeout:g} s (its timeout)"


# What a tool function returns that is never awaitable (its exact type): no ABC check.
_PLAIN = frozenset({str, dict, list, int, float, bool, type(None)})


@functools.cache
def _field_names(model: type[pydantic.BaseModel]) -> tuple[str, ...]:
    return tuple(model.model_fields)


def _describe_validation(exc: pydantic.ValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "(arguments)"
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)


def render_result(value: Any) -> str:
    """Tool return values as text: strings as they are, everything else as JSON."""
    if isinstance(value, str):
        return value
    import pydantic

    if isinstance(value, pydantic.BaseModel):
        return value.model_dump_json()
    try:
        return json.dumps(pydantic.TypeAdapter(Any).dump_python(value, mode="json"))
    except Exception:  # not JSON-able: fall back to its text
        return str(value)


def build_tool(marked: ToolFunction, source: str = "") -> Tool:
    """Turn a ``@tool`` function into a :class:`Tool`.

    Raises:
        ToolDefinitionError: a parameter has no type hint, or uses ``*args`` / ``**kwargs``.
    """
    fn = marked.fn
    where = source or _where(fn)
    try:
        hints = typing.get_type_hints(fn)
    except Exception as exc:
        raise ToolDefinitionError(f"{where}: tool {marked.name!r}: bad type hint: {exc}") from None
    fields: dict[str, Any] = {}
    ctx_param = None
    for param in inspect.signature(fn).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ToolDefinitionError(
                f"{where}: tool {marked.name!r}: *args/**kwargs are not allowed; "
                "name each argument with a type hint"
            )
        hint = hints.get(param.name)
        if hint is ToolContext:
            ctx_param = param.name
            continue
        if hint is None:
            raise ToolDefinitionError(
                f"{where}: tool {marked.name!r}: parameter {param.name!r} has no type hint; "
                "add one (e.g. `{0}: str`) so its arguments can be validated".format(param.name)
            )
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (hint, default)
    import pydantic

    model = pydantic.create_model(
        f"{marked.name}_arguments", __config__=pydantic.ConfigDict(extra="forbid"), **fields
    )
    schema = model.model_json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
    return Tool(
        name=marked.name,
        description=marked.description or marked.name,
        parameters=schema,
        approval=marked.approval,
        fn=fn,
        args_model=model,
        ctx_param=ctx_param,
        source=where,
        effects=marked.effects,
        timeout=marked.timeout,
    )


def _where(fn: Callable[..., Any]) -> str:
    code = getattr(fn, "__code__", None)
    if code is None:
        return repr(fn)
    return f"{code.co_filename}:{code.co_firstlineno}"


ASK_QUESTION = "ask_question"


def ask_question_tool() -> Tool:
    """The built-in tool that parks the turn until the user answers."""
    return Tool(
        name=ASK_QUESTION,
        description="Ask the user a question and wait for the answer.",
        parameters={
            "type": "object",
            "properties": {
                "question": {"type": "string"},
                "options": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["question"],
            "additionalProperties": False,
        },
        approval=never(),
        fn=None,
        args_model=None,
        source="built-in",
    )


SLEEP = "sleep"


def sleep_tool() -> Tool:
    """The built-in tool that sleeps durably (``define_agent(sleep=True)``): the turn parks on
    a timer, holding nothing, and a message to the session wakes it early."""
    return Tool(
        name=SLEEP,
        description=(
            "Sleep for a number of seconds or until a time (ISO 8601, e.g. "
            "2030-01-01T09:00:00+00:00). A message from the user wakes you early; the result "
            "says how long you slept."
        ),
        parameters={
            "type": "object",
            "properties": {
                "seconds": {"type": "number", "exclusiveMinimum": 0},
                "until": {"type": "string"},
            },
            "additionalProperties": False,
        },
        approval=never(),
        fn=None,
        args_model=None,
        source="built-in",
    )
