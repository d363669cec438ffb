"""Opening the runtime facade for a command: one event loop, and user-facing errors as one line.

Imports the runtime lazily so `eve --help` and `eve init` stay light.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from eve_cli.cli._errors import CliError

if TYPE_CHECKING:
    from eve_cli.runtime import Runtime


def user_errors() -> tuple[type[BaseException], ...]:
    """Exception types whose message is already one line a user can act on."""
    from eve_cli._loader import AgentLoadError
    from eve_cli.models import ModelError, UnknownModelError

    found: list[type[BaseException]] = [AgentLoadError, ModelError, UnknownModelError]
    import world

    for name in ("OwnershipError", "CorruptJournalError", "DivergenceError", "WorldError"):
        kind = getattr(world, name, None)
        if isinstance(kind, type) and issubclass(kind, BaseException):
            found.append(kind)
    return tuple(found)


@contextlib.contextmanager
def open_runtime(
    data_dir: Path, agent_dir: Path | None, model: str | None
) -> Iterator[tuple[Runtime, asyncio.AbstractEventLoop]]:
    """A `Runtime` on `data_dir` and the event loop the command drives it with."""
    from eve_cli.runtime import Runtime

    errors = user_errors()
    if agent_dir is not None and not agent_dir.is_dir():
        raise CliError(f"agent folder {agent_dir} does not exist; create one with: eve init")
    loop = asyncio.new_event_loop()
    try:
        try:
            rt = Runtime(data_dir=data_dir, agent_dir=agent_dir, model=model)
            yield rt, loop
        except errors as exc:
            raise CliError(str(exc)) from None
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        loop.close()


@contextlib.contextmanager
def open_reader(data_dir: Path) -> Iterator[Runtime]:
    """Read-only access to the sessions of `data_dir` (no lock taken, nothing written)."""
    from eve_cli.runtime import Runtime

    errors = user_errors()
    try:
        yield Runtime(data_dir=data_dir)
    except KeyError as exc:
        raise CliError(
            f"no session {exc.args[0]} in {data_dir}; list them with: eve inspect"
        ) from None
    except errors as exc:
        raise CliError(f"damaged data in {data_dir}: {exc}") from None
