"""What agent authors write: ``define_agent``, ``@tool``, ``ToolContext``, ``define_state`` and
the approval policies ``never()`` / ``always()`` / ``once()`` (or any callable).

Nothing here touches storage: the execution layer binds a :class:`ToolContext` and the
session's state before a tool runs and collects the changes afterwards.
"""

from __future__ import annotations

import contextvars
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypedDict, TypeVar, overload

from eve_cli._json import JSONObject
from eve_cli.models import GivenSettings, ModelReference, ModelSettings, as_settings

T = TypeVar("T")

Decision = Literal["approved", "denied", "user-approval"]
Mode = Literal["conversation", "task"]
# What a second run of a tool call after a crash may do: ``none`` (no side effects: run again
# freely), ``idempotent`` (run again with the same ``ctx.idempotency_key``), ``unsafe`` (never
# run again unasked: the turn asks whether it took effect).
Effects = Literal["none", "idempotent", "unsafe"]
EFFECTS: tuple[Effects, ...] = ("none", "idempotent", "unsafe")
PolicyFn = Callable[[JSONObject], Decision | str]  # (a call's arguments) -> decision

# The per-session state of the tool call being executed (bound by the execution layer).
_current_state: contextvars.ContextVar[dict[str, Any]] = contextvars.ContextVar("eve_state")


@dataclass(frozen=True)
class ApprovalPolicy:
    """When a tool call needs a human's approval before it runs.

    ``kind`` is ``never`` (run at once), ``always`` (ask every time), ``once`` (ask the first
    time per session) or ``callable`` (``check(arguments)`` returns ``"approved"``,
    ``"denied"`` or ``"user-approval"``).
    """

    kind: Literal["never", "always", "once", "callable"]
    check: PolicyFn | None = None

    def decide(self, arguments: JSONObject, *, approved_before: bool) -> Decision:
        """The decision for one call; ``approved_before``: this tool was approved in this
        session already (by ``once()`` or an always-approve answer)."""
        if self.kind == "never" or approved_before:
            return "approved"
        if self.kind in ("always", "once"):
            return "user-approval"
        assert self.check is not None
        verdict = self.check(arguments)
        if verdict not in ("approved", "denied", "user-approval"):
            raise ValueError(
                f"approval policy returned {verdict!r}: expected approved, denied or user-approval"
            )
        return verdict  # type: ignore[return-value]


def never() -> ApprovalPolicy:
    """Run without asking (the default)."""
    return ApprovalPolicy("never")


def always() -> ApprovalPolicy:
    """Ask before every call."""
    return ApprovalPolicy("always")


def once() -> ApprovalPolicy:
    """Ask before the first call in each session; later calls run at once."""
    return ApprovalPolicy("once")


def as_policy(value: ApprovalPolicy | PolicyFn | None) -> ApprovalPolicy:
    """Normalise what ``@tool(approval=...)`` accepts."""
    if value is None:
        return never()
    if isinstance(value, ApprovalPolicy):
        return value
    if callable(value):
        return ApprovalPolicy("callable", value)
    raise TypeError(f"approval= takes never(), always(), once() or a callable, not {value!r}")


@dataclass
class ToolContext:
    """What a tool may learn about the call it serves (declare a ``ctx: ToolContext`` param).

    ``idempotency_key`` is the same on every re-run of this call after a crash: use it to make
    side effects idempotent.
    """

    session_id: str
    call_id: str
    idempotency_key: str
    turn_id: str = ""
    progress_messages: list[str] = field(default_factory=list)
    # True when an earlier run of this very call was interrupted (a crash) after it began.
    resumed: bool = False
    # What an earlier run of this call saved with :meth:`record_progress` (None: nothing).
    recorded_progress: Any = None
    recorder: Callable[[Any], None] | None = field(default=None, repr=False, compare=False)
    # Who sent the message this turn serves, and who created the session (SPEC §18):
    # ``{"subject": ..., "tenant": ...}`` (tenant only when there is one); None when the
    # server verifies no one. Never a token: a tool acting for the user looks up that
    # user's own credentials by subject.
    principal: dict[str, str] | None = None
    initiator: dict[str, str] | None = None

    def report_progress(self, message: str) -> None:
        """Record a progress line; it reaches the event stream with the tool's result."""
        self.progress_messages.append(str(message))

    def record_progress(self, value: Any) -> None:
        """Save ``value`` (JSON-like data) durably before returning: if the process dies
        while the tool runs, the next run of this call starts with it as
        ``recorded_progress`` (an ``unsafe`` tool that recorded how far it got is run again
        with that knowledge instead of asking the user)."""
        if self.recorder is None:
            raise RuntimeError("record_progress is only available while the tool runs")
        self.recorder(value)
        self.recorded_progress = value

    @property
    def state(self) -> dict[str, Any]:
        """This session's durable state values, by name (read-only view)."""
        return dict(_current_state.get({}))


class State(Generic[T]):
    """Durable per-session state created by :func:`define_state`.

    ``get()`` / ``update(fn)`` work inside a tool call; the change is saved with the call's
    result, so it survives crashes and is never applied twice.
    """

    def __init__(self, name: str, initial: T) -> None:
        self.name = name
        self.initial = initial

    def get(self) -> T:
        """The current value in the session whose tool is running."""
        values = _current_state.get(None)
        if values is None:
            raise RuntimeError(f"state {self.name!r} is only available while a tool runs")
        return values.get(self.name, self.initial)  # type: ignore[no-any-return]

    def update(self, fn: Callable[[T], T]) -> T:
        """Replace the value by ``fn(current)`` and return the new value."""
        values = _current_state.get(None)
        if values is None:
            raise RuntimeError(f"state {self.name!r} is only available while a tool runs")
        new = fn(values.get(self.name, self.initial))
        values[self.name] = new
        return new

    def __repr__(self) -> str:
        return f"State({self.name!r}, initial={self.initial!r})"


def define_state(name: str, initial: T) -> State[T]:
    """Declare a piece of durable per-session state with its initial value."""
    if not name or not isinstance(name, str):
        raise ValueError("define_state needs a non-empty name")
    return State(name, initial)


def bind_state(values: dict[str, Any]) -> contextvars.Token[dict[str, Any]]:
    """Make ``values`` the state seen by :class:`State` (execution layer only)."""
    return _current_state.set(values)


def unbind_state(token: contextvars.Token[dict[str, Any]]) -> None:
    _current_state.reset(token)


@dataclass(frozen=True)
class ToolFunction:
    """A function marked by ``@tool``; the loader turns it into a validated tool."""

    fn: Callable[..., Any] | Callable[..., Awaitable[Any]]
    name: str
    description: str
    approval: ApprovalPolicy
    effects: Effects = "idempotent"
    timeout: float | None = None


@overload
def tool(fn: Callable[..., Any], /) -> ToolFunction: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    approval: ApprovalPolicy | PolicyFn | None = None,
    effects: Effects = "idempotent",
    timeout: float | None = None,
) -> Callable[[Callable[..., Any]], ToolFunction]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    approval: ApprovalPolicy | PolicyFn | None = None,
    effects: Effects = "idempotent",
    timeout: float | None = None,
) -> ToolFunction | Callable[[Callable[..., Any]], ToolFunction]:
    """Mark a function as a tool: ``@tool`` or ``@tool(approval=always())``.

    The name defaults to the function's, the description to its docstring; arguments are
    validated against the type hints. ``effects``: what may happen when a crash interrupted
    a call (``none`` | ``idempotent``, the default: it runs again with the same
    ``ctx.idempotency_key`` | ``unsafe``: the turn asks whether it took effect instead).
    ``timeout``: seconds a call may take in all, across restarts; a call past it is a tool
    error for the model (an async tool is cancelled, a sync one's result is ignored).
    """
    if effects not in EFFECTS:
        raise ValueError(f"effects must be one of {', '.join(EFFECTS)}, not {effects!r}")
    if timeout is not None and (isinstance(timeout, bool) or not timeout > 0):
        raise ValueError(f"timeout must be a number of seconds above 0, not {timeout!r}")

    def wrap(f: Callable[..., Any]) -> ToolFunction:
        doc = (f.__doc__ or "").strip()
        return ToolFunction(
            fn=f,
            name=name or f.__name__,
            description=description if description is not None else doc,
            approval=as_policy(approval),
            effects=effects,
            timeout=float(timeout) if timeout is not None else None,
        )

    if fn is not None:
        return wrap(fn)
    return wrap


@dataclass(frozen=True)
class Compaction:
    """When history is summarised: before a model call whose estimated input plus
    ``reserved_tokens`` (the summary call's own overhead; default: 5% of the context window,
    at most 1024) would exceed ``threshold_percent`` of the context window."""

    threshold_percent: float = 0.9
    reserved_tokens: int | None = None

    def reserve(self, context_window: int) -> int:
        if self.reserved_tokens is not None:
            return self.reserved_tokens
        return min(1024, context_window // 20)


@dataclass(frozen=True)
class Limits:
    """Budgets; reaching one asks to go on (conversation: "continue (+N) or stop", answered
    like an approval, each yes granting the same amount again) or fails the turn (task).

    ``cost_*`` are US dollars, from the model's price table (``prices.json`` may add to it);
    ``*_per_turn`` count from the start of each turn."""

    tokens_per_session: int | None = None
    session_timeout: float | None = None
    cost_per_session: float | None = None
    tokens_per_turn: int | None = None
    cost_per_turn: float | None = None

    def __post_init__(self) -> None:
        for name in ("tokens_per_session", "session_timeout", "cost_per_session",
                     "tokens_per_turn", "cost_per_turn"):  # fmt: skip
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int | float) or value <= 0
            ):
                raise ValueError(f"limits: {name} must be a number above 0, not {value!r}")


class CompactionFields(TypedDict, total=False):
    """:class:`Compaction`'s fields, as ``define_agent(compaction={...})`` takes them."""

    threshold_percent: float
    reserved_tokens: int | None


class LimitsFields(TypedDict, total=False):
    """:class:`Limits`' fields, as ``define_agent(limits={...})`` takes them."""

    tokens_per_session: int | None
    session_timeout: float | None
    cost_per_session: float | None
    tokens_per_turn: int | None
    cost_per_turn: float | None


# An approval as a declaration gives it: a policy, a callable, or ``never`` / ``always`` /
# ``once``.
ApprovalGiven = ApprovalPolicy | PolicyFn | str


class McpServer(TypedDict, total=False):
    """An MCP server as ``define_agent(mcp_servers=)`` declares it (as in ``mcp.json``, but
    ``approval`` may be a policy object or a callable too)."""

    command: str
    args: list[str]
    env: dict[str, str]
    cwd: str
    url: str
    headers: dict[str, str]
    type: str  # stdio | http | streamable-http | streamableHttp
    allow: list[str]
    deny: list[str]
    timeout: float | dict[str, float]  # seconds, or by tool ("*": the others)
    startTimeout: float
    approval: ApprovalGiven | dict[str, ApprovalGiven]  # by tool ("*": the others)
    disabled: bool


@dataclass(frozen=True)
class AgentConfig:
    """What ``define_agent`` returns; the loader completes it from the agent folder."""

    model: str | None = None
    instructions: str | None = None
    settings: ModelSettings = field(default_factory=ModelSettings)  # the agent's own
    model_settings: ModelSettings = field(default_factory=ModelSettings)  # its model's
    compaction: Compaction = field(default_factory=Compaction)
    limits: Limits = field(default_factory=Limits)
    mode: Mode = "conversation"
    output_schema: JSONObject | None = None
    output_type: Any = None  # the pydantic model output_schema came from, which validates
    provider_tools: tuple[JSONObject, ...] = ()  # tools the provider runs (web search, ...)
    model_calls_per_step: int = 1
    context_window: int | None = None
    name: str | None = None
    description: str | None = None
    mcp_servers: dict[str, McpServer] | None = None
    tracing: bool = False
    sleep: bool = False
    source_file: str | None = None
    source_line: int | None = None


def _output(output_schema: object) -> tuple[type | None, Any]:
    """``(pydantic model class or None, JSON schema or None)`` of ``output_schema``."""
    if isinstance(output_schema, type):
        if not hasattr(output_schema, "model_json_schema"):
            raise TypeError("output_schema takes a JSON schema dict or a pydantic model class")
        return output_schema, output_schema.model_json_schema()
    if output_schema is not None and not isinstance(output_schema, dict):
        raise TypeError("output_schema takes a JSON schema dict or a pydantic model class")
    return None, output_schema


def define_agent(
    *,
    model: str | ModelReference | None = None,
    instructions: str | None = None,
    settings: ModelSettings | GivenSettings | None = None,
    compaction: Compaction | CompactionFields | None = None,
    limits: Limits | LimitsFields | None = None,
    mode: Mode = "conversation",
    output_schema: JSONObject | type | None = None,
    provider_tools: list[JSONObject] | None = None,
    model_calls_per_step: int = 1,
    context_window: int | None = None,
    name: str | None = None,
    description: str | None = None,
    mcp_servers: dict[str, McpServer] | None = None,
    tracing: bool = False,
    sleep: bool = False,
) -> AgentConfig:
    """Describe an agent (in ``agent/agent.py``: ``agent = define_agent(...)``).

    Args:
        model: model string (``demo``, ``scripted:PATH``, ``openai:M``, ``anthropic:M``), or
            ``ModelReference(string, **settings)`` whose settings win over ``settings``.
        settings: ``ModelSettings(temperature=..., reasoning="high", ...)`` or a dict of its
            fields, for whichever model runs the agent.
        instructions: system prompt; ``instructions.md`` next to agent.py is the alternative.
        compaction: ``Compaction(threshold_percent=0.9)`` or a dict of its fields.
        limits: ``Limits(tokens_per_session=..., session_timeout=seconds,
            cost_per_session=dollars, tokens_per_turn=..., cost_per_turn=dollars)`` or a dict.
        mode: ``conversation`` (may wait for input) or ``task`` (must finish without it).
        output_schema: a JSON schema (or a pydantic model class) the final answer follows: sent
            as the provider's structured output, validated (one repair turn, then the turn
            fails), the parsed value given as a ``result`` event.
        provider_tools: tools the provider runs itself, each as the provider declares it
            (Anthropic ``{"type": "web_search_20250305", "name": "web_search"}``, Responses
            ``{"type": "web_search"}``): their calls and results are kept in history and
            events as provider-executed, never run here.
        model_calls_per_step: model calls per durable step (default 1).
        context_window: overrides the model's known context window.
        name / description: how a sub-agent is presented to its parent as a tool.
        mcp_servers: MCP servers by name, each as in ``mcp.json`` (``command``/``args``/
            ``env``/``cwd`` or ``url``/``headers``, ``allow``, ``deny``, ``timeout``), whose
            ``approval`` may also be a policy object or callable, or a dict of them by tool.
        tracing: OpenTelemetry spans of this agent's turns (``pip install 'eve-durable[otel]'``;
            ``EVE_OTEL=1`` turns them on for every agent), exported over OTLP/HTTP as the
            ``OTEL_EXPORTER_OTLP_*`` variables say.
        sleep: give the agent the built-in ``sleep`` tool (a durable timer, woken early by
            a message).
    """
    if mode not in ("conversation", "task"):
        raise ValueError(f"mode must be 'conversation' or 'task', not {mode!r}")
    if model_calls_per_step < 1:
        raise ValueError("model_calls_per_step must be at least 1")
    output_type, schema = _output(output_schema)
    caller = sys._getframe(1)
    reference = model if isinstance(model, ModelReference) else ModelReference(model or "")
    return AgentConfig(
        model=reference.id or None,
        instructions=instructions,
        settings=as_settings(settings),
        model_settings=reference.settings,
        compaction=compaction
        if isinstance(compaction, Compaction)
        else Compaction(**(compaction or {})),
        limits=limits if isinstance(limits, Limits) else Limits(**(limits or {})),
        mode=mode,
        output_schema=schema,
        output_type=output_type,
        provider_tools=tuple(dict(t) for t in provider_tools or ()),
        model_calls_per_step=model_calls_per_step,
        context_window=context_window,
        name=name,
        description=description,
        mcp_servers=dict(mcp_servers) if mcp_servers else None,
        tracing=tracing,
        sleep=bool(sleep),
        source_file=caller.f_code.co_filename,
        source_line=caller.f_lineno,
    )
