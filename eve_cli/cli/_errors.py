"""Exit codes and the one error type commands raise for a clean, one-line failure."""

from __future__ import annotations

# Re-exported: what to do about damaged data, said the same by the CLI and the channel.
from eve_cli._hints import REPAIR_HINT as REPAIR_HINT
from eve_cli._hints import user_message as user_message

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_WAITING = 3  # waiting for input that nobody present can give
EXIT_DIVERGED = 4  # `eve replay`: the current code behaves otherwise than the recording
EXIT_INTERRUPTED = 130


class CliError(Exception):
    """A failure the user can act on: printed as one line on stderr, never a traceback.

    The message says what went wrong, where (file, session id, offset) and what to do.
    """

    prefix = "error: "  # printed as `eve: <prefix><message>`

    def __init__(self, message: str, code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class WaitingForInput(CliError):
    """A turn is parked on an approval or a question and nobody present can answer it."""

    prefix = ""

    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_WAITING)


class CtrlC(Exception):
    """Ctrl-C typed at a prompt read inside the event loop: a KeyboardInterrupt escaping a
    task would stop the whole loop instead of reaching the code awaiting it."""


class Interrupted(CliError):
    """Ctrl-C: at a prompt, or twice during a turn. The session stays resumable."""

    prefix = ""

    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_INTERRUPTED)
