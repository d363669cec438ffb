"""The harness: what happens inside one step (SPEC §6), independent of storage.

It talks to the execution layer only through :class:`StepHost`. What other packages use is
named here (``__all__``, pinned by a test); the modules behind it are private.
"""

from eve_cli.harness._compaction import compact
from eve_cli.harness._effects import OUTCOME, answer_problem
from eve_cli.harness._host import KeptReply, Reply, StepHost, StoredReply, StreamedText
from eve_cli.harness._input import (
    apply_delivery,
    cancel_pending,
    compact_message,
    expand_delivery,
    fold_message,
    unresolved,
    with_ids,
)
from eve_cli.harness._outcome import ArgumentError, CallResult, StepResult
from eve_cli.harness._step import run_step
from eve_cli.harness._tool_calls import admit_resolved

__all__ = [
    "OUTCOME",
    "ArgumentError",
    "CallResult",
    "KeptReply",
    "Reply",
    "StepHost",
    "StepResult",
    "StoredReply",
    "StreamedText",
    "admit_resolved",
    "answer_problem",
    "apply_delivery",
    "cancel_pending",
    "compact",
    "compact_message",
    "expand_delivery",
    "fold_message",
    "run_step",
    "unresolved",
    "with_ids",
]
