"""Options shared by every command: `--debug` and the world: `--world URL|DIR` (EVE_WORLD) or
its local alias `--data DIR` (EVE_DATA_DIR)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from eve_cli.cli._errors import EXIT_USAGE, CliError

# Where a database world's commands would keep local files (its Where.path stands in).
DEFAULT_DATA_DIR = ".workflow-data"


@dataclass
class GlobalState:
    """What the top-level callback parsed; commands read it through `state()`."""

    debug: bool = False
    data: Path | None = None
    world: str | None = None


_STATE = GlobalState()


def state() -> GlobalState:
    return _STATE


def reset_state() -> None:
    """Forget the options of a previous invocation (tests run many in one process)."""
    _STATE.debug = False
    _STATE.data = None
    _STATE.world = None


DataOption = Annotated[
    Path | None,
    typer.Option(
        "--data",
        metavar="DIR",
        help="Data directory (default ./.workflow-data, or EVE_DATA_DIR).",
        show_default=False,
    ),
]


WorldOption = Annotated[
    str | None,
    typer.Option(
        "--world",
        metavar="URL",
        help="World: postgresql://user@host/db (a PostgreSQL database) or a data directory "
        "(default EVE_WORLD, else --data).",
        show_default=False,
    ),
]


@dataclass(frozen=True)
class Where:
    """The world a command works on: a data directory, or a PostgreSQL database (`url`).
    Printed, it names the directory or the URL without its password."""

    path: Path
    url: str | None = None

    def __str__(self) -> str:
        if self.url is None:
            return str(self.path)
        from world import redact_url

        return redact_url(self.url)


def choose_world(
    data: Path | None = None, world: str | None = None, *, create: bool = False
) -> Where:
    """The world a command's options choose: its `--world`, its `--data`, the global
    `--world`, the global `--data`, EVE_WORLD, EVE_DATA_DIR, else `./.workflow-data`.
    A `--world` that is not a `postgresql://` URL is a data directory. `create`: a data
    directory is created when missing (a clear error when it cannot be used)."""
    from world import is_database_url

    spec: str | Path | None = world or data
    if spec is None:
        spec = _STATE.world or _STATE.data or os.environ.get("EVE_WORLD") or None
    try:
        database = isinstance(spec, str) and is_database_url(spec)
    except ValueError as exc:  # a typo'd URL must not become a store of its own
        raise CliError(str(exc), EXIT_USAGE) from None
    if database:
        assert isinstance(spec, str)
        return Where(path=Path(DEFAULT_DATA_DIR), url=spec)
    path = Path(spec) if spec is not None else None
    return Where(ensure_data_dir(path) if create else data_path(path))


def data_path(override: Path | None = None) -> Path:
    """The data directory chosen by the command's `--data`, the global one, or EVE_DATA_DIR."""
    chosen = override or _STATE.data
    if chosen is None:
        from world import default_data_dir

        chosen = default_data_dir()
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
