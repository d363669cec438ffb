"""The execution layer: eve's workflows on `world`.

``eve.session`` (the driver, one long-lived run per session) runs each turn as a child run
``eve.turn``; a turn runs harness steps whose model and tool calls are durable world steps.
Imports `world` and the harness; nothing here imports the CLI or the channel. What other
packages use is named here (``__all__``, pinned by a test); the modules behind it are private.
"""

from eve_cli.execution._event_form import unpack
from eve_cli.execution._executor import Executor
from eve_cli.execution._fold import (
    Change,
    SessionRow,
    SessionView,
    ViewFold,
    change_of,
    first_message,
    fold,
    fresh_start,
    opens_session,
    settles,
)
from eve_cli.execution._fork import Forked, ForkPointError, Lineage, fork_session, lineage
from eve_cli.execution._keys import HistoryKeys
from eve_cli.execution._lost import ContextLostError
from eve_cli.execution._observe import EventWatcher, observe_events
from eve_cli.execution._receipts import (
    ENDING_WAIT,
    TAKEN_SCAN,
    Disposition,
    decide,
    phase,
    receipt_boundary,
    taken,
)
from eve_cli.execution._replies import resolve
from eve_cli.execution._shapes import ActionView, McpView, PendingView, StepView, TurnView
from eve_cli.execution._stored_events import REF, EventReader, started_event, stored_event
from eve_cli.execution._streams import KeyedStream
from eve_cli.execution._view import PAGE, TAIL, summary
from eve_cli.execution._window import read_window, window_messages
from eve_cli.execution._workflows import SESSION_WORKFLOW, TURN_WORKFLOW

__all__ = [
    "ENDING_WAIT",
    "PAGE",
    "REF",
    "SESSION_WORKFLOW",
    "TAIL",
    "TAKEN_SCAN",
    "TURN_WORKFLOW",
    "ActionView",
    "Change",
    "ContextLostError",
    "Disposition",
    "EventReader",
    "EventWatcher",
    "Executor",
    "ForkPointError",
    "Forked",
    "HistoryKeys",
    "KeyedStream",
    "Lineage",
    "McpView",
    "PendingView",
    "SessionRow",
    "SessionView",
    "StepView",
    "TurnView",
    "ViewFold",
    "change_of",
    "decide",
    "first_message",
    "fold",
    "fork_session",
    "fresh_start",
    "lineage",
    "observe_events",
    "opens_session",
    "phase",
    "read_window",
    "receipt_boundary",
    "resolve",
    "settles",
    "started_event",
    "stored_event",
    "summary",
    "taken",
    "unpack",
    "window_messages",
]
