"""The execution layer: eve's workflows on `world`.

``eve.session`` (the driver, one long-lived run per session) runs each turn as a child run
``eve.turn``; a turn runs harness steps whose model and tool calls are durable world steps.
Imports `world` and the harness; nothing here imports the CLI or the channel.
"""

from eve_cli.execution._executor import Executor
from eve_cli.execution._fold import (
    Change,
    SessionView,
    ViewFold,
    change_of,
    fold,
    fresh_start,
    opens_session,
    settles,
)
from eve_cli.execution._host import SESSION_WORKFLOW, TURN_WORKFLOW
from eve_cli.execution._observe import EventWatcher, observe_events

__all__ = [
    "SESSION_WORKFLOW",
    "TURN_WORKFLOW",
    "Change",
    "EventWatcher",
    "Executor",
    "SessionView",
    "ViewFold",
    "change_of",
    "fold",
    "fresh_start",
    "observe_events",
    "opens_session",
    "settles",
]
