"""The keys of a session's events and history: one type, :class:`Key`, made by constructors.

Every item a session appends to its events or history carries a deterministic key, so a
re-run of interrupted work finds what its first run stored instead of storing it twice
(``execution._streams.KeyedStream``). A key is made here and nowhere else, from the numbers
and ids that name it::

    turn(3).start                                "t3:start"
    turn(3).step(1).call(0).delta(0, 12)         "t3:1:0:d@0+12"
    turn(3).tool("call_1").request.requested     "t3:call_1:ireq"
    generation(2).waiting                        "g2:wait"

The stream prefixes the session generation (``"2:t3:start"``). The strings are store format 2
(frozen: stored keys must keep meaning the same item), and a key carries the numbers its
compact stored form holds (:attr:`Key.compact`), so a stream packs a key from the key itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

__all__ = [
    "SESSION_END",
    "SESSION_START",
    "Compaction",
    "Delivery",
    "DeltaKeys",
    "Generation",
    "Key",
    "ModelCall",
    "Request",
    "Step",
    "ToolCall",
    "Turn",
    "delta_start",
    "generation",
    "turn",
]


class _Value:
    """A value made at every step (a key, the keys of a step or call): its attributes are
    set once, by ``__init__``, and never changed; equal and hashed by ``_FIELDS``. Not a
    frozen dataclass: its ``__init__`` sets each field through ``object.__setattr__``, which
    made a key cost twice as much to build (a step builds about ten)."""

    __slots__ = ()
    _FIELDS: tuple[str, ...] = ()

    def _parts(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self._FIELDS)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, _Value)
        return self._parts() == other._parts()

    def __hash__(self) -> int:
        return hash(self._parts())

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._FIELDS)
        return f"{type(self).__name__}({shown})"


class Key(_Value):
    """One item's key: ``text`` as stored (without the generation prefix) and ``compact``,
    the numbers the stream may store instead, after the generation, when the item's own
    fields imply the rest (None: it stores the text; ``()``: the generation alone)."""

    __slots__ = ("compact", "text")
    _FIELDS = ("text", "compact")

    def __init__(self, text: str, compact: tuple[int, ...] | None = None) -> None:
        self.text = text
        self.compact = compact

    def __str__(self) -> str:
        return self.text

    def stored(self, gen: int) -> int | list[int] | None:
        """The compact ``_k`` of this key in generation ``gen`` (None: it has none). A
        stream stores it only when its codec derives it back to exactly this key."""
        if self.compact is None:
            return None
        return [gen, *self.compact] if self.compact else gen


SESSION_START = Key("start")  # session.started (written by the runtime at creation too)
SESSION_END = Key("end")  # a task session's end (session.completed / failed / cancelled)


@dataclass(frozen=True, slots=True)
class Compaction:
    """The keys of one compaction: before a model call (``ModelCall.compaction``) or asked
    of the session between turns (``Generation.compaction``)."""

    base: str

    @property
    def requested(self) -> Key:
        return Key(f"{self.base}:creq")

    @property
    def summary(self) -> Key:
        """The summary's history item."""
        return Key(f"{self.base}:sum")

    @property
    def completed(self) -> Key:
        return Key(f"{self.base}:cdone")

    @property
    def action(self) -> str:
        """The name of the summarising durable action."""
        return f"compact:{self.base}"

    @staticmethod
    def of_action(name: str) -> Compaction | None:
        """The compaction whose summarising action a journal names ``name`` (None: none)."""
        base = name.removeprefix("compact:")
        return Compaction(base) if base != name else None


@dataclass(frozen=True, slots=True)
class Generation:
    """The keys a session driver's generation ``gen`` writes itself (between turns)."""

    gen: int

    @property
    def waiting(self) -> Key:
        return Key(f"g{self.gen}:wait", ())

    @property
    def turn_failed(self) -> Key:
        """A turn that failed before it ran (its child run could not start)."""
        return Key(f"g{self.gen}:tfail")

    @property
    def cleared(self) -> Key:
        return Key(f"g{self.gen}:clear")

    @property
    def moved(self) -> Key:
        return Key(f"g{self.gen}:move")

    @property
    def compaction(self) -> Compaction:
        return Compaction(f"g{self.gen}")


def generation(gen: int) -> Generation:
    return Generation(gen)


@dataclass(frozen=True, slots=True)
class Delivery:
    """The keys of a delivery a turn takes: the message it starts with (``Turn.first``) or a
    later delivery (``Turn.delivery``: a message, or answers to its requests)."""

    base: str
    first_of: int | None = None  # the turn whose first message this is

    @property
    def user(self) -> Key:
        """The message's history item."""
        first = self.first_of
        return Key(f"{self.base}:u", None if first is None else (first,))

    @property
    def received(self) -> Key:
        """Its ``message.received`` event."""
        return Key(f"{self.base}:m", None if self.first_of is None else ())

    @property
    def queued(self) -> Key:
        """Its ``message.queued`` event (a message held for the next turn)."""
        return Key(f"{self.base}:q")

    def resolved(self, request_id: str) -> Key:
        """The ``input.resolved`` event of the answer to ``request_id`` it brought."""
        return Key(f"{self.base}:res:{request_id}")


@dataclass(frozen=True, slots=True)
class Request:
    """An input request (approval, question, limit, outcome): its id and its event's key."""

    id: str

    @property
    def requested(self) -> Key:
        """Its ``input.requested`` event."""
        return Key(f"{self.id}:ireq")


class ModelCall(_Value):
    """The keys of model call ``m`` of step ``step`` of turn ``turn``. The first call of a
    step stores its answer, its events and their deltas compactly."""

    __slots__ = ("_base", "_completed", "_reply", "_text_deltas", "m", "step", "turn")
    _FIELDS = ("turn", "step", "m")

    def __init__(self, turn: int, step: int, m: int) -> None:
        self.turn, self.step, self.m = turn, step, m
        # The text every key of the call starts with, and the keys every call stores (asked
        # twice: by the code storing the item and by the stream checking its compact form),
        # made once.
        self._base = base = f"t{turn}:{step}:{m}"
        compact = (turn, step) if m == 0 else None
        self._completed = Key(base, () if compact else None)
        self._reply = Key(base + ":a", compact)
        self._text_deltas = DeltaKeys(f"{base}:d@", m == 0)  # (each delta's key, and its check)

    @property
    def completed(self) -> Key:
        """Its ``message.completed`` event."""
        return self._completed

    @property
    def requested(self) -> Key:
        """Its ``actions.requested`` event."""
        return Key(f"{self._base}:req")

    @property
    def reply(self) -> Key:
        """Its answer's history item."""
        return self._reply

    @property
    def reasoning(self) -> Key:
        """Its ``reasoning.completed`` event."""
        return Key(f"{self._base}:r")

    @property
    def result(self) -> Key:
        """Its ``result`` event (a structured answer)."""
        return Key(f"{self._base}:res")

    @property
    def mcp(self) -> Key:
        """Its ``mcp.ready`` event (the MCP servers' tools listed before it)."""
        return Key(f"{self._base}:mcp")

    @property
    def provider_requested(self) -> Key:
        """The ``actions.requested`` event of the tools the provider ran in its answer."""
        return Key(f"{self._base}:pvr")

    def provider_result(self, n: int) -> Key:
        """The ``action.result`` event of the ``n``-th tool the provider ran."""
        return Key(f"{self._base}:pv{n}")

    @property
    def repair(self) -> Key:
        """The history item asking to repair its answer (it did not match the schema)."""
        return Key(f"{self._base}:fix")

    @property
    def text_deltas(self) -> DeltaKeys:
        """The keys of its ``message.appended`` events."""
        return self._text_deltas

    @property
    def reasoning_deltas(self) -> DeltaKeys:
        """The keys of its ``reasoning.appended`` events."""
        return DeltaKeys(f"{self._base}:rd@", False)

    @property
    def delta_head(self) -> str:
        """What the text of every delta key of this call starts with."""
        return self.text_deltas.head

    def delta(self, start: int, length: int) -> Key:
        """The ``message.appended`` event of its text from ``start``, ``length`` long."""
        return self.text_deltas.delta(start, length)

    def delta_of(self, text: str) -> tuple[int, int, Key] | None:
        """``(start, length, key)`` of the delta key of this call whose text is ``text``
        (None: it is not one)."""
        return self.text_deltas.delta_of(text)

    @property
    def compaction(self) -> Compaction:
        """The compaction checked before this call."""
        return Compaction(self._base)


@dataclass(frozen=True, slots=True)
class DeltaKeys:
    """The keys of one model call's streamed deltas of one kind: ``{head}{start}+{length}``,
    the offset and length of the text each event holds; ``compact``: the stream may store
    the start alone (the first call of a step's text)."""

    head: str
    compact: bool

    def delta(self, start: int, length: int) -> Key:
        """The event of the text from ``start``, ``length`` long."""
        return Key(f"{self.head}{start}+{length}", (start,) if self.compact else None)

    def delta_of(self, text: str) -> tuple[int, int, Key] | None:
        """``(start, length, key)`` of the delta key whose text is ``text`` (None: it is not
        one of these)."""
        if not text.startswith(self.head):
            return None
        start, plus, length = text[len(self.head) :].partition("+")
        if not (plus and start.isdigit() and length.isdigit()):
            return None
        return int(start), int(length), self.delta(int(start), int(length))


class Step(_Value):
    """The keys of step ``index`` of turn ``turn``."""

    __slots__ = ("_base", "_done", "_start", "index", "turn")
    _FIELDS = ("turn", "index")

    def __init__(self, turn: int, index: int) -> None:
        self.turn, self.index = turn, index
        self._base = base = f"t{turn}:{index}"  # as ModelCall's: the keys every step stores
        self._start = Key(base + ":start", ())
        self._done = Key(base + ":done", ())

    @property
    def start(self) -> Key:
        return self._start

    @property
    def done(self) -> Key:
        return self._done

    @property
    def failed(self) -> Key:
        return Key(f"{self._base}:fail", ())

    def call(self, m: int) -> ModelCall:
        return _call(self.turn, self.index, m)


class ToolCall(_Value):
    """The keys of the tool call ``call_id`` (the model's id) of turn ``turn``."""

    __slots__ = ("_base", "call_id", "turn")
    _FIELDS = ("turn", "call_id")

    def __init__(self, turn: int, call_id: str) -> None:
        self.turn, self.call_id = turn, call_id
        self._base = f"t{turn}:{call_id}"  # the text every key of the call starts with

    @property
    def request(self) -> Request:
        """Its approval or question."""
        return Request(self._base)

    def outcome(self, attempt: int) -> Request:
        """The question whether its run ``attempt``, interrupted, took effect."""
        return Request(f"{self._base}:o{attempt}")

    @property
    def message(self) -> Key:
        """Its result's history item (the tool message the model sees)."""
        return Key(f"{self._base}:r")

    @property
    def result(self) -> Key:
        """Its ``action.result`` event."""
        return Key(f"{self._base}:res")

    @property
    def sleeping(self) -> Key:
        """The ``turn.waiting`` event of a ``sleep`` call."""
        return Key(f"{self._base}:sleep")

    @property
    def task_started(self) -> Key:
        """The ``task.started`` event of a sub-agent call."""
        return Key(f"{self._base}:task")

    @property
    def task_waiting(self) -> Key:
        """The ``turn.waiting`` event of a sub-agent call."""
        return Key(f"{self._base}:twait")

    @property
    def task_settled(self) -> Key:
        """The ``task.settled`` event of a sub-agent call."""
        return Key(f"{self._base}:tset")

    def idempotency_key(self, session_id: str) -> str:
        """``ctx.idempotency_key`` of the call: the same on every run of it."""
        return f"{session_id}:{self._base}"


@dataclass(frozen=True, slots=True)
class Turn:
    """The keys of turn ``n`` (the session's ``n``-th, from 1)."""

    n: int

    @property
    def id(self) -> str:
        """The turn's id (``turnId`` of its events)."""
        return f"t{self.n}"

    @property
    def start(self) -> Key:
        return Key(f"t{self.n}:start", ())

    @property
    def end(self) -> Key:
        """Its ``turn.completed`` / ``failed`` / ``cancelled`` event."""
        return Key(f"t{self.n}:end", ())

    @property
    def first(self) -> Delivery:
        """The message the turn starts with."""
        return Delivery(f"t{self.n}:in", self.n)

    def delivery(self, k: int) -> Delivery:
        """The turn's ``k``-th delivery (from 1)."""
        return Delivery(f"t{self.n}:p{k}")

    def waiting(self, k: int) -> Key:
        """Its ``turn.waiting`` event for input, after ``k`` deliveries."""
        return Key(f"t{self.n}:w{k}")

    def step(self, index: int) -> Step:
        return _step(self.n, index)

    def tool(self, call_id: str) -> ToolCall:
        return _tool(self.n, call_id)

    def limit(self, step: int) -> Request:
        """The request to go past a limit, asked at step ``step``."""
        return Request(f"t{self.n}:limit:{step}")


# Builders are made here only (their text bases computed once), and kept for the numbers
# asked again: a step asks for its own turn's, step's and calls' keys several times each.
@lru_cache(maxsize=256)
def turn(n: int) -> Turn:
    return Turn(n)


@lru_cache(maxsize=1024)
def _step(n: int, index: int) -> Step:
    return Step(n, index)


@lru_cache(maxsize=1024)
def _call(n: int, index: int, m: int) -> ModelCall:
    return ModelCall(n, index, m)


@lru_cache(maxsize=1024)
def _tool(n: int, call_id: str) -> ToolCall:
    return ToolCall(n, call_id)


def delta_start(stored: str) -> int | None:
    """The text offset a delta event's stored key names (``...@<start>+<length>``), if any."""
    if "@" not in stored:
        return None
    start = stored.rpartition("@")[2].partition("+")[0]
    return int(start) if start.isdigit() else None
