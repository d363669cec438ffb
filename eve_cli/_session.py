"""The persisted form of a session (D8): what survives between turns and processes.

Only data lives here: where history sits in the session's history stream, durable state,
pending input requests, queued deliveries, counters, the agent folder and the ``-m`` override.
Model objects, tools, instructions and credentials are rebuilt from the agent folder at every
turn. The snapshot is small and constant in size: history itself is an append-only stream of
which the snapshot records only the window (``history_start``, ``history_len``).
"""

from __future__ import annotations

import copy
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any

SNAPSHOT_VERSION = 1


@dataclass
class Snapshot:
    """A session between two durable actions (copied, never shared, across runs)."""

    id: str
    token: str | None = None
    agent_dir: str | None = None
    model: str | None = None  # the -m override; None = the agent's own model
    mode: str = "conversation"
    created_at: float = 0.0
    gen: int = 0  # driver generation (continue-as-new count)
    turns: int = 0
    steps: int = 0
    model_calls: int = 0
    tokens: int = 0
    token_allowance: int = 0
    time_allowance: float = 0.0
    history_start: int = 0
    history_len: int = 0
    summary: str | None = None
    compactions: int = 0
    state: dict[str, Any] = field(default_factory=dict)
    approved_tools: list[str] = field(default_factory=list)
    pending: list[dict[str, Any]] = field(default_factory=list)
    queued: list[dict[str, Any]] = field(default_factory=list)
    task: str | None = None  # the task of a task-mode (sub-agent) session
    parent: str | None = None  # parent session id of a sub-agent session
    # A sub-agent session watches its root session's hook for cancel at step boundaries.
    cancel_token: str | None = None
    ended: str | None = None  # completed | failed | cancelled, for task sessions

    def to_data(self) -> dict[str, Any]:
        """Plain data; fields at their default are left out (the snapshot is journaled at
        every turn boundary, so its size is paid per turn)."""
        data = {k: v for k, v in asdict(self).items() if v != _DEFAULTS.get(k, _MISSING)}
        data["v"] = SNAPSHOT_VERSION
        return data

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> Snapshot:
        data = migrate(copy.deepcopy(data))  # never alias a run's recorded input
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def copy(self) -> Snapshot:
        return Snapshot.from_data(self.to_data())


_MISSING = object()
_DEFAULTS: dict[str, Any] = {
    f.name: (f.default_factory() if f.default_factory is not MISSING else f.default)
    for f in fields(Snapshot)
    if f.default is not MISSING or f.default_factory is not MISSING
}


def migrate(data: dict[str, Any]) -> dict[str, Any]:
    """Bring an older snapshot to :data:`SNAPSHOT_VERSION` (version 1 is the first)."""
    version = data.pop("v", 1)
    if version > SNAPSHOT_VERSION:
        raise ValueError(
            f"session snapshot version {version} is newer than this eve ({SNAPSHOT_VERSION}); "
            "upgrade eve"
        )
    return data


def events_stream(session_id: str) -> str:
    return f"events.{session_id}"


def history_stream(session_id: str) -> str:
    return f"history.{session_id}"
