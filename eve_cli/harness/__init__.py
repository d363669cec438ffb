"""The harness: what happens inside one step (SPEC §6), independent of storage.

It talks to the execution layer only through :class:`StepHost`.
"""

from eve_cli.harness._host import StepHost
from eve_cli.harness._outcome import StepResult
from eve_cli.harness._step import run_step

__all__ = ["StepHost", "StepResult", "run_step"]
