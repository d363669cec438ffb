"""The events of a session (SPEC §8), as readers see them: declared so mypy checks their fields.

An event is a JSON object; these types name every field a producer in eve writes, so a reader
that spells one wrongly fails the type check. Events are open: a reader keeps fields it does
not know (an event written by a later eve), and none of these types is checked at run time.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, Required, TypedDict

EventType = Literal[
    "session.started",
    "session.waiting",
    "session.completed",
    "session.failed",
    "session.cancelled",
    "turn.started",
    "turn.waiting",
    "turn.completed",
    "turn.failed",
    "turn.cancelled",
    "message.received",
    "message.appended",
    "message.completed",
    "step.started",
    "step.completed",
    "step.failed",
    "actions.requested",
    "action.result",
    "input.requested",
    "input.resolved",
    "compaction.requested",
    "compaction.completed",
    "context.cleared",
    "task.started",
    "task.settled",
    "reasoning.appended",
    "reasoning.completed",
    "result",
    "mcp.ready",
    "message.queued",
    "session.moved",
]


class ActionRequest(TypedDict):
    """One tool call of ``actions.requested``."""

    callId: str
    name: str
    arguments: Any
    providerExecuted: NotRequired[bool]  # a tool the provider ran itself (web search, ...)


class EventData(TypedDict, total=False):
    """The fields of an event but its ``type``: the scope every event carries, then the data
    fields of each type (what a producer hands ``emit``)."""

    # -- every event
    index: int
    sessionId: str
    at: Any  # ISO time as read; ms since the session's creation inside the writer's fold
    # -- who asked (SPEC §18), ``{"subject", "tenant"?}``: message.received, input.resolved,
    # turn.cancelled, context.cleared; absent when the server verifies no one
    by: dict[str, str]
    # -- scoped events
    turnId: str
    stepIndex: int
    # -- session.started; session.moved (the agent it moved to), and turn.started after a move
    agent: str
    previous: str | None  # session.moved: the agent it belonged to
    mode: str | None
    model: str | None
    parent: str | None
    # -- turn.started: a digest of the agent folder's code the turn ran (`code_digest`)
    agentDigest: str
    # -- session.waiting, turn.waiting: the session's counts so far (and the session's token)
    continuationToken: str
    turns: int
    steps: int
    # -- message.*
    role: str
    text: str
    delta: str
    cancelled: bool  # message.completed: what a cancelled model call had streamed
    disposition: str  # message.received: started | steered
    deliveryId: int  # message.received / message.queued: the delivery the turn took
    # -- actions.requested / action.result
    actions: list[ActionRequest]
    callId: str
    name: str
    status: str  # action.result: completed | failed | rejected | cancelled; task / compaction
    isError: bool
    output: Any
    progress: list[str]
    durationMs: int
    # -- step.completed / *.failed: ``usage`` holds ``inputTokens``, ``outputTokens`` and,
    # when not zero, ``cacheReadTokens``, ``cacheWriteTokens``, ``reasoningTokens`` (parts of
    # the input and output counts); ``cost`` is in US dollars, from the model's price table
    usage: dict[str, int] | None
    cost: float
    error: Any
    # -- reasoning.appended (``delta``) / reasoning.completed (``text``): what a model showed
    # of its reasoning; ``redacted``: some of it came encrypted and is kept, not shown
    redacted: bool
    # -- result: the turn's structured answer (``output_schema``), parsed
    value: Any
    # -- mcp.ready: the agent's MCP servers (``servers``, by name) started or asked for their
    # tools (``tools``: how many they list) before the turn's first model call, ``durationMs``
    servers: list[str]
    tools: int
    # -- actions.requested / action.result of a tool the provider ran itself (web search, ...)
    providerExecuted: bool
    # -- input.requested / input.resolved
    requestId: str
    kind: str
    tool: str  # also action.result of an MCP server's tool (``server``, ``tool``)
    server: str
    arguments: Any
    question: str
    options: list[str] | None
    message: str
    reason: str
    limit: str
    answer: str
    approved: bool
    always: bool
    # -- turn.waiting
    on: Literal["input", "tasks", "sleep"]
    requests: list[str]
    until: str  # on: sleep (ISO time)
    # -- input.resolved of an outcome request
    outcome: str
    result: str
    # -- compaction.*
    estimatedTokens: int | None  # None: asked for (``forced``)
    threshold: int
    forced: bool
    keptHistory: bool
    removedMessages: int
    keptMessages: int
    summaryTokens: int
    # -- context.cleared
    reset: bool
    # -- task.*
    taskId: str
    childSessionId: str
    stream: str
    # -- as stored, for eve's own readers: the history item holding a message's text (``_h``,
    # `execution._stored_events.REF`; readers see ``text``), and where `eve fork` can cut at
    # a checkpoint event (``ck``: the journal position and the history length)
    _h: int
    ck: list[int]


class Event(EventData, total=False):
    """Any event: its type, then the fields of :class:`EventData`."""

    type: Required[str]


__all__ = ["ActionRequest", "Event", "EventData", "EventType"]
