"""The declared shapes of a session's view (what the one fold, `execution._fold`, makes of its
events): turns → steps → actions, marks, the current reply, and a session's listing row."""

from __future__ import annotations

from typing import Any, Literal, NotRequired, Required, TypedDict

from eve_cli._session import ForkOrigin
from eve_cli._usage import UsageTotals


class PendingView(TypedDict, total=False):
    """An input request the session waits on: its ``input.requested`` event's fields
    (`_fold.PENDING_FIELDS`)."""

    requestId: str
    kind: str  # approval | question | outcome (reason: limit, for a budget's)
    tool: str
    arguments: Any
    question: str
    options: list[str] | None
    callId: str
    message: str
    reason: str
    turnId: str


class AnswerView(TypedDict, total=False):
    """What an action's input request was answered: its ``input.resolved`` event's
    fields (and who answered, ``by``)."""

    approved: bool
    always: bool
    answer: str
    outcome: str
    result: str
    by: dict[str, str]


class TaskView(TypedDict, total=False):
    """A sub-agent's task: its name and session, then how it settled and its output."""

    name: str
    childSessionId: str
    status: str
    output: Any


class ActionView(TypedDict, total=False):
    """A tool call of a step, as the view shows it."""

    callId: Required[str | None]
    name: Required[str | None]
    arguments: Required[Any]
    # requested, waiting (on an input request: `waitedFor` its kind), then action.result's
    status: Required[str | None]
    isError: Required[bool]
    output: Any
    waitedFor: str
    durationMs: int | None  # the tool's own run (without an approval's wait), when it ended
    server: str  # an MCP server's tool: which server, which tool
    tool: str
    answer: AnswerView  # what its input request was answered
    answeredIn: int | None  # the step whose events carry the answer and the result (a parked
    endedIn: int | None  # call's come in a later step than its own)
    task: TaskView  # a sub-agent's task


class StepView(TypedDict, total=False):
    """One step of a turn: its text, its tool calls, its usage."""

    index: Required[int | None]
    status: Required[str]  # running | completed | failed
    text: Required[str]
    actions: Required[list[ActionView]]
    usage: Required[dict[str, int] | None]
    startedAt: Any  # ISO times
    endedAt: Any
    cost: float  # in US dollars, from the model's price table
    reasoning: str  # what the model showed of its reasoning (``redacted``: some came encrypted)
    redacted: bool
    durationMs: int | None  # when it ended
    modelMs: int | None  # the model call's time, once its reply is complete
    mcp: McpView  # the MCP servers' start-up before its model call (its own time)
    firstEvent: int  # the indexes of its first and latest events
    lastEvent: int
    error: Any


class McpView(TypedDict):
    """The agent's MCP servers started, or asked for their tools, before a step's model call:
    the time it took (not the model call's), the servers, how many tools they listed."""

    durationMs: int | None
    servers: list[str]
    tools: int | None


class TurnView(TypedDict, total=False):
    """One turn: the message that started it and its steps."""

    id: Required[str | None]
    number: int  # from 1, in the session
    status: Required[str]  # running | parked | completed | failed | cancelled
    input: Required[str | None]
    steps: Required[list[StepView]]
    startedAt: Any  # ISO times
    endedAt: Any  # its end, or where it parked last
    error: Any
    lost: list[int]  # events a repair lost while it ran
    usage: UsageTotals  # over its completed steps
    result: Any  # its structured answer (the agent's output_schema), parsed
    steered: list[SteerView]  # messages folded in while it ran
    by: dict[str, str]  # who sent its message (SPEC §18; absent: not known)
    cancelledBy: dict[str, str]  # who cancelled it
    agentDigest: str  # of the agent's code that ran it


class SteerView(TypedDict):
    """A message a running turn took: its text, how many of its steps had started, and who
    sent it (when known)."""

    text: str
    atStep: int
    by: NotRequired[dict[str, str]]


class MarkView(TypedDict, total=False):
    """The history compacted (``status``, ``removedMessages``) or cleared, after ``turn``
    turns (and ``atStep`` steps of the last, when it was running)."""

    kind: Required[Literal["compaction", "cleared"]]
    turn: Required[int]
    atStep: int | None
    status: str
    removedMessages: int


class ReplyView(TypedDict):
    """The reply of the session's current (latest) turn: None until it has one."""

    turnId: str | None
    turn: int  # its number
    text: str | None
    status: str  # the turn's


class SessionView(TypedDict):
    """A session as readers see it (`Runtime.session`, ``GET /sessions/{id}``)."""

    id: str
    status: str  # see the module's docstring
    parkedOn: str | None
    agent: str | None
    mode: str | None
    model: str | None
    turns: list[TurnView]
    pending: list[PendingView]
    steps: int
    createdAt: Any  # ISO time; ms since creation while the writer's fold holds it
    updatedAt: Any
    events: int
    compactions: int
    error: Any
    wakeAt: str | None  # parked on a sleep: when it ends (ISO time)
    reply: NotRequired[ReplyView | None]  # the current turn's reply
    usage: NotRequired[UsageTotals]  # tokens by kind and cost over every completed step
    marks: NotRequired[list[MarkView]]  # the history compacted or cleared, in order
    agentDir: NotRequired[str | None]  # added by the runtime: the folder the session runs
    resume: NotRequired[str]  # added by `eve inspect` to an interrupted session: the command
    # Added by `eve inspect` and GET /session/{id} (`Runtime.lineage`): where it was forked
    # from ({"session", "checkpoint", "at"}) and the sessions forked from it.
    forkedFrom: NotRequired[ForkOrigin | None]
    forks: NotRequired[list[str]]
    # A page of the view (`ViewCache.view`): the session's turns in all, and the number of
    # the first one ``turns`` holds (its marks are those of these turns).
    turnCount: NotRequired[int]
    turnsFrom: NotRequired[int]


class SessionRow(TypedDict):
    """A session's row of `Runtime.sessions` (before the runtime adds its size)."""

    id: str
    status: str
    parkedOn: str | None
    agent: str | None
    turns: int
    steps: int
    updatedAt: Any
    first: NotRequired[str | None]  # added by the runtime: its first message (cut)
    bytes: NotRequired[int | None]  # added by the runtime: what the session stores
    forkedFrom: NotRequired[ForkOrigin]  # added by the runtime: a fork's origin
    owner: NotRequired[dict[str, str]]  # added by the runtime: who created it (SPEC §18)
    forks: NotRequired[list[str]]  # added by the runtime: the sessions forked from it
