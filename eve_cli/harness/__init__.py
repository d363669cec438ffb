"""The harness: what happens inside one step (SPEC §6), independent of storage.

It talks to the execution layer only through :class:`StepHost`. What other packages use is
named here (``__all__``, pinned by a test); the modules behind it are private.
"""

from eve_cli._session import summary_message
from eve_cli.harness._effects import OUTCOME, answer_problem
from eve_cli.harness._host import Reply, StepHost, StoredReply, StreamedText
from eve_cli.harness._input import compact_message, expand_delivery, with_ids
from eve_cli.harness._outcome import CallResult, StepResult
from eve_cli.harness._step import run_step

__all__ = [
    "OUTCOME",
    "CallResult",
    "Reply",
    "StepHost",
    "StepResult",
    "StoredReply",
    "StreamedText",
    "answer_problem",
    "compact_message",
    "expand_delivery",
    "run_step",
    "summary_message",
    "with_ids",
]
