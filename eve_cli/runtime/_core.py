"""What every part of the runtime shares: the world, the executor, the agent and the sessions'
metas (a session's meta never changes, so it is kept), and the facade's errors."""

from __future__ import annotations

import contextlib
import re
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

from eve_cli._loader import (
    DEFAULT_AGENT_DIR,
    AgentDefinition,
    AgentLoadError,
    agent_model,
    agent_name,
    check_model_string,
    resolve_agent_dir,
)
from eve_cli._session import SessionMeta
from eve_cli.execution import SESSION_WORKFLOW, EventReader, Executor, SessionView
from world import Engine, RunNotFoundError, World, WorldError, default_data_dir, is_database_url

__all__ = [
    "ENDED",
    "Core",
    "InvalidSessionIdError",
    "RuntimeErrorBase",
    "SessionNotFoundError",
    "live_status",
    "open_world",
]

# A session id; a sub-agent's session is a child run: <parent run>.<n>[.<n>...]
_SESSION_ID = re.compile(r"[A-Za-z0-9_-]{1,64}(\.[0-9]{1,9})*")
_KEPT_METAS = 4096  # sessions whose meta is kept (the least recently used goes first)
ENDED = ("completed", "failed", "cancelled")
T = TypeVar("T")


class RuntimeErrorBase(Exception):
    """Base of the facade's errors; ``str()`` is one user-facing line."""


class SessionNotFoundError(RuntimeErrorBase, LookupError):
    """No session has this id."""


class InvalidSessionIdError(RuntimeErrorBase, ValueError):
    """The id is malformed (not just unknown)."""


def open_world(data_dir: Path | str, *, create: bool = True, check: bool = True) -> World:
    """The world stored under ``data_dir``, or the database a ``postgresql://`` URL names
    (``create=False``: a missing one reads as empty; ``check=False``: a data directory whose
    format file is damaged opens too, for ``verify`` and ``repair``)."""
    if isinstance(data_dir, str) and is_database_url(data_dir):
        from world import PostgresWorld

        return PostgresWorld(data_dir, create=create)
    from world import LocalWorld

    world = LocalWorld(data_dir, create=create, check=check)
    if world.migration is not None:  # once in the store's life: said, on stderr, in one line
        print(f"eve: {world.migration}", file=sys.stderr)
    return world


def live_status(view: SessionView) -> str:
    """A view's status as a delivery sees it: a sleeping turn takes messages as a running one."""
    return "running" if view.get("parkedOn") == "sleep" else str(view["status"])


class Core:
    """The world and agent of one runtime, and what is known of its sessions."""

    def __init__(
        self,
        data_dir: Path | str | None,
        agent_dir: Path | str | None,
        model: str | None,
        world: World | None,
        load_agent: bool,
    ) -> None:
        if model is not None and (problem := check_model_string(model)):
            raise ValueError(problem)
        # A `postgresql://` URL names a database, not a directory.
        url = data_dir if isinstance(data_dir, str) and is_database_url(data_dir) else None
        self.data_dir = Path(data_dir) if data_dir and url is None else default_data_dir()
        self.agent_dir = resolve_agent_dir(agent_dir)
        self.model = model
        self.world = world if world is not None else open_world(url or self.data_dir)
        self.executor = Executor(self.world, self.agent_dir)
        self.views = self.executor.views
        self._metas: OrderedDict[str, SessionMeta] = OrderedDict()
        # Sessions' metas are asked for from the loop and from the runtime's threads at once
        # (a drive's head note, an HTTP read): one may be forgotten while another looks it up.
        self._metas_lock = threading.Lock()
        self._agent: AgentDefinition | None = None
        if load_agent:
            self._agent = self._served(self.executor.agent_for(self.stored_dir(self.agent_dir)))

    @property
    def engine(self) -> Engine:
        return self.executor.engine

    @property
    def agent(self) -> AgentDefinition:
        """The agent folder's current definition (loaded now by a reader's first use)."""
        if self._agent is None:
            try:
                self._agent = self._served(self.executor.agent_for(self.stored_dir(self.agent_dir)))
            except AgentLoadError:
                self._agent = self.executor.agent_for(str(DEFAULT_AGENT_DIR))
        return self._agent

    @property
    def agent_model(self) -> str:
        """The model of :attr:`agent`, from its folder's ``agent.py`` alone when it is not
        loaded yet (a reader's view names it; its tools need not be imported)."""
        if self._agent is not None:
            return self._agent.model
        try:
            return agent_model(self.executor.folder_of(self.stored_dir(self.agent_dir)))
        except AgentLoadError:
            return self.agent.model  # as a load of it says (the built-in agent's, broken)

    @property
    def agent_folder(self) -> Path:
        """The folder :attr:`agent` is loaded from (not loaded to say it)."""
        if self._agent is not None:
            return self._agent.directory
        return self.executor.folder_of(self.stored_dir(self.agent_dir))

    @property
    def agent_name(self) -> str:
        """The name of :attr:`agent`, from its folder's ``agent.py`` alone when it is not
        loaded yet (listing the schedules needs no tools); a missing or broken ``agent.py``
        raises `AgentLoadError` as loading the folder does (no built-in agent instead)."""
        if self._agent is not None:
            return self._agent.name
        return agent_name(self.agent_folder)

    @staticmethod
    def stored_dir(directory: Path) -> str | None:
        """How a session stores its agent folder (None: the built-in agent)."""
        return None if directory == DEFAULT_AGENT_DIR else str(directory)

    def _served(self, agent: AgentDefinition) -> AgentDefinition:
        """``agent``, this process's: its sessions run from this folder, wherever made."""
        if self.agent_dir != DEFAULT_AGENT_DIR:
            self.executor.serve(self.agent_dir, agent)
        return agent

    def reload_agent(self) -> AgentDefinition:
        self._agent = self._served(self.executor.reload(self.stored_dir(self.agent_dir)))
        return self._agent

    def agent_error(self) -> str | None:
        with contextlib.suppress(AgentLoadError):
            self.executor.agent_for(self.stored_dir(self.agent_dir))
        return self.executor.load_errors.get(str(self.agent_dir))

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Make a call that reads or writes the world from an event loop: off the loop on a
        world whose every call is a round trip (`World.io`), inline on the others."""
        return await self.engine.off_loop(fn, *args)

    # -- sessions' metas ------------------------------------------------------------------
    def exists(self, sid: str) -> bool:
        try:
            self.engine.info(sid)
        except RunNotFoundError:
            return False
        return True

    def kept_meta(self, sid: str) -> SessionMeta | None:
        """The meta kept of session ``sid`` (a copy), not checked against the world; None
        when none is kept."""
        if not isinstance(sid, str) or not _SESSION_ID.fullmatch(sid):
            raise InvalidSessionIdError(
                f"invalid session id {sid!r}: expected 1-64 of A-Z a-z 0-9 _ - "
                "(a sub-agent's session adds .<n> parts)"
            )
        with self._metas_lock:
            known = self._metas.get(sid)
        return known.copy() if known is not None else None

    def meta(self, sid: str) -> SessionMeta:
        """The meta of session ``sid``; `SessionNotFoundError` when there is none."""
        known = self.kept_meta(sid)
        root = sid.split(".", 1)[0]
        if known is not None and self.world.heads(roots=[root], inbox=False):
            with self._metas_lock:
                if sid in self._metas:  # (not forgotten meanwhile)
                    self._metas.move_to_end(sid)
            return known  # asked several times a turn: the family is still there
        try:
            info = self.engine.info(sid)
        except RunNotFoundError:
            raise SessionNotFoundError(f"no session {sid!r}") from None
        if info.workflow != SESSION_WORKFLOW:
            raise SessionNotFoundError(f"no session {sid!r}")
        meta = cast(SessionMeta, dict(info.meta))  # as create_session and a fork wrote it
        with self._metas_lock:
            self._metas[sid] = meta
            if len(self._metas) > _KEPT_METAS:
                self._metas.popitem(last=False)
        return meta.copy()

    def meta_or_none(self, sid: str) -> SessionMeta | None:
        try:
            return self.meta(sid)
        except (WorldError, RuntimeErrorBase):  # not (or no longer) a session
            return None

    def present_meta(self, sid: str) -> SessionMeta | None:
        """The meta of ``sid``, whose family is known to be there (its head is being written,
        or the heads were just read): the kept one, not looked up again; None: not (or no
        longer) a session."""
        try:
            known = self.kept_meta(sid)
            return known if known is not None else self.meta(sid)
        except (WorldError, RuntimeErrorBase):
            return None

    def forget_meta(self, sid: str) -> None:
        """Drop the kept meta of ``sid`` (removed, or made again by the same create)."""
        with self._metas_lock:
            self._metas.pop(sid, None)

    def reader(self, sid: str, meta: SessionMeta | None = None) -> EventReader:
        """The session's event reader (stored events leave out what the run's meta has: the
        continuation token, the creation time their ``at`` counts from; ``meta``: the
        session's, when just read)."""
        return EventReader(
            self.world, sid, (lambda: meta) if meta is not None else (lambda: self.meta(sid))
        )

    def close(self) -> None:
        self.executor.close()
        self.world.close()
