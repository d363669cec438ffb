"""Options shared by every command: `--debug` and the data directory (`--data`, EVE_DATA_DIR)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from eve_cli.cli._errors import CliError

DEFAULT_DATA_DIR = ".workflow-data"


@dataclass
class GlobalState:
    """What the top-level callback parsed; commands read it through `state()`."""

    debug: bool = False
    data: Path | None = None


_STATE = GlobalState()


def state() -> GlobalState:
    return _STATE


def reset_state() -> None:
    """Forget the options of a previous invocation (tests run many in one process)."""
    _STATE.debug = False
    _STATE.data = None


DataOption = Annotated[
    Path | None,
    typer.Option(
        "--data",
        metavar="DIR",
        help="Data directory (default ./.workflow-data, or EVE_DATA_DIR).",
        show_default=False,
    ),
]


def data_path(override: Path | None = None) -> Path:
    """The data directory chosen by the command's `--data`, the global one, or EVE_DATA_DIR."""
    chosen = override or _STATE.data
    if chosen is None:
        chosen = Path(os.environ.get("EVE_DATA_DIR") or DEFAULT_DATA_DIR)
    return chosen.expanduser()


def ensure_data_dir(override: Path | None = None) -> Path:
    """The data directory, created when missing; a clear error when it cannot be used."""
    path = data_path(override)
    if path.exists() and not path.is_dir():
        raise CliError(f"data directory {path} is not a directory; pass --data with a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise CliError(
            f"cannot create data directory {path}: {reason}; pass --data with a writable path"
        ) from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise CliError(f"data directory {path} is not writable; pass --data with a writable path")
    return path
