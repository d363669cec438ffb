"""Opening the runtime facade for a command: one event loop, and user-facing errors as one line.

Imports the runtime (and asyncio) lazily so `eve --help`, `eve init` and `eve inspect` on an
empty data directory stay light.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eve_cli._facade import Facade
from eve_cli.cli._context import Where
from eve_cli.cli._errors import CliError, user_message

if TYPE_CHECKING:
    import asyncio

    from eve_cli.runtime import Runtime
    from world import World


def user_errors() -> tuple[type[BaseException], ...]:
    """Exception types whose message is already one line a user can act on."""
    from eve_cli._loader import AgentLoadError
    from eve_cli.models import ModelError, UnknownModelError
    from eve_cli.runtime import RuntimeErrorBase

    found: list[type[BaseException]] = [
        AgentLoadError,
        ModelError,
        UnknownModelError,
        RuntimeErrorBase,
    ]
    import world

    for name in ("OwnershipError", "CorruptJournalError", "DivergenceError", "WorldError"):
        kind = getattr(world, name, None)
        if isinstance(kind, type) and issubclass(kind, BaseException):
            found.append(kind)
    return tuple(found)


def open_world_at(where: Where, *, create: bool = True) -> World | None:
    """The world `where` names when it is not a data directory for writing (which `Runtime`
    opens itself): a database that cannot be reached, or whose schema is newer, is one line."""
    import world

    if where.url is None:  # a reader opens it as it is (writing nothing)
        from eve_cli.runtime import open_world

        return None if create else open_world(where.path, create=False)

    try:
        return world.open_world(where.url, create=create)
    except world.WorldError as exc:
        raise CliError(user_message(exc)) from None


def runtime_at(where: Where | Path, *, create: bool = True, **options: Any) -> Runtime:
    """A `Runtime` on the world `where` names (`create=False`: a reader's, which creates no
    schema in a database)."""
    from eve_cli.runtime import Runtime

    if isinstance(where, Path):
        return Runtime(data_dir=where, **options)
    opened = open_world_at(where, create=create)
    try:
        return Runtime(data_dir=where.path, world=opened, **options)
    except BaseException:
        if opened is not None:
            opened.close()
        raise


@contextlib.contextmanager
def open_runtime(
    data_dir: Where | Path, agent_dir: Path | None, model: str | None, *, load_agent: bool = True
) -> Iterator[tuple[Runtime, asyncio.AbstractEventLoop]]:
    """A `Runtime` on the world `data_dir` names and the event loop the command drives it
    with (``load_agent=False``: the agent folder is loaded on first use, see `Runtime`)."""
    import asyncio

    errors = user_errors()
    # ValueError: the runtime's answer to a malformed model string.
    opening: tuple[type[BaseException], ...] = (*errors, ValueError)
    if agent_dir is not None and not agent_dir.is_dir():
        raise CliError(f"agent folder {agent_dir} does not exist; create one with: eve init")
    try:
        rt = runtime_at(data_dir, agent_dir=agent_dir, model=model, load_agent=load_agent)
    except opening as exc:
        raise CliError(user_message(exc)) from None
    loop = asyncio.new_event_loop()
    try:
        yield rt, loop
    except errors as exc:
        from eve_cli._losses import with_losses

        raise CliError(with_losses(rt, exc)) from None
    finally:
        try:
            _end_tasks(loop)
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            loop.close()
            rt.close()


def _end_tasks(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel what still runs on ``loop`` and let it finish, as ``asyncio.run`` does (an MCP
    server's connection stops its server in its own task, not in a finalizer)."""
    import asyncio

    pending = asyncio.all_tasks(loop)
    for task in pending:
        task.cancel()
    if pending:
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))


@contextlib.contextmanager
def open_remote(url: str, token: str | None) -> Iterator[tuple[Facade, asyncio.AbstractEventLoop]]:
    """A client of a running `eve start` server, used exactly like the in-process runtime."""
    import asyncio

    from eve_cli.channel.client import RemoteError, RemoteRuntime

    remote = RemoteRuntime(url, token=token)
    loop = asyncio.new_event_loop()
    try:
        yield remote, loop
    except RemoteError as exc:
        raise CliError(user_message(exc)) from None
    except OSError as exc:
        raise CliError(f"cannot reach {url}: {exc}; is `eve start` running?") from None
    finally:
        try:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            loop.close()
            remote.close()


@contextlib.contextmanager
def open_reader(data_dir: Where | Path) -> Iterator[Runtime]:
    """Read-only access to the sessions of the world `data_dir` names (no lock taken, nothing
    written; the agent folder is loaded only if a view needs it, and a broken one stops no one
    reading)."""
    from eve_cli.runtime import InvalidSessionIdError, SessionNotFoundError

    errors = user_errors()
    try:
        rt = runtime_at(data_dir, create=False, load_agent=False)
    except errors as exc:
        raise CliError(f"cannot read {data_dir}: {user_message(exc)}") from None
    try:
        yield rt
    except (SessionNotFoundError, InvalidSessionIdError) as exc:
        raise CliError(f"{exc} in {data_dir}; list sessions with: eve inspect") from None
    except errors as exc:
        from eve_cli._losses import with_losses

        raise CliError(f"damaged data in {data_dir}: {with_losses(rt, exc)}") from None
    finally:
        rt.close()
