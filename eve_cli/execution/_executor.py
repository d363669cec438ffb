"""Binds the workflows to a world and keeps the agent definitions current.

Agent folders are reloaded when any of their files changes (so an edit applies from the next
turn of every session); a broken edit keeps serving the last good definition.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eve_cli._loader import AgentDefinition, AgentLoadError, load_agent, resolve_agent_dir
from eve_cli._session import Snapshot, SnapshotData, events_stream, history_stream
from eve_cli.execution._cancel import CancelSignals
from eve_cli.execution._lost import check_window
from eve_cli.execution._replies import resolve
from eve_cli.execution._streams import KeyCodec, KeyedStream, strip_key
from eve_cli.execution._view import ViewCache
from eve_cli.execution._workflows import (
    SESSION_WORKFLOW,
    TURN_WORKFLOW,
    SessionResult,
    TurnInput,
    TurnResult,
)
from world import Engine, WorkflowContext, World

if TYPE_CHECKING:
    from eve_cli._tools import Tool
    from eve_cli.execution._window import WindowState
    from eve_cli.mcp import McpPool
    from eve_cli.models import Message, ToolSpec

_KEPT_WINDOWS = 32
_KEPT_STREAMS = 64


def _signature(directory: Path) -> tuple[tuple[str, int, int], ...]:
    """(path, mtime, size) of the folder's source files: what an edit changes. Checked at
    every turn (twice), so plain scandir, not pathlib."""
    if not directory.is_dir() or "__pycache__" in directory.parts:
        return ()
    entries: list[tuple[str, int, int]] = []
    _scan(str(directory), entries)
    entries.sort()
    return tuple(entries)


def _scan(folder: str, entries: list[tuple[str, int, int]]) -> None:
    try:
        with os.scandir(folder) as it:
            found = list(it)
    except (PermissionError, FileNotFoundError):
        return
    for entry in found:
        if entry.name == "__pycache__" or entry.name.startswith("."):
            continue  # not code: caches, hidden folders (a .venv or .workflow-data inside it)
        if os.path.splitext(entry.name)[1] in (".py", ".md", ".json"):
            stat = os.stat(entry.path)
            entries.append((entry.path, stat.st_mtime_ns, stat.st_size))
        if entry.is_dir(follow_symlinks=False):
            _scan(entry.path, entries)


class Executor:
    """The workflows of eve on one world, plus the agent-definition cache."""

    def __init__(self, world: World, default_agent_dir: Path | str | None = None) -> None:
        self.world = world
        self.default_agent_dir = resolve_agent_dir(default_agent_dir)
        self._agents: dict[str, tuple[Any, AgentDefinition]] = {}
        # Agent name -> the folder this process serves it from (`serve`), and the folders
        # sessions were made in that now resolve to a served one (their sub-agents' with them).
        self.served: dict[str, Path] = {}
        self._moved: dict[Path, Path] = {}
        self.load_errors: dict[str, str] = {}
        # session id -> (start, history items from start, (count, digest): the digest of the
        # stream's first `count` items, those read; the items after them this process wrote
        # there, see wrote_history); see history_window
        self._windows: OrderedDict[str, tuple[int, list[Message], tuple[int, Any]]] = OrderedDict()
        self._keyed: OrderedDict[tuple[str, int], KeyedStream] = OrderedDict()
        self._states: OrderedDict[str, WindowState] = OrderedDict()  # see extend_window
        # session id -> {history index: text} of replies this process stored by reference
        self._texts: OrderedDict[str, dict[int, str]] = OrderedDict()
        self.views = ViewCache(world)  # session views; fed by the hosts as they emit
        self.cancels = CancelSignals()  # cancels asked of this process (see _cancel)
        self._mcp: McpPool | None = None  # started with the first MCP server an agent uses
        self.engine = Engine(
            world,
            {SESSION_WORKFLOW: self._session, TURN_WORKFLOW: self._turn},
        )

    # The workflows (and the harness, models and tools behind them) are imported when a run
    # first executes: a command that only reads sessions never needs them.
    async def _session(self, ctx: WorkflowContext, data: SnapshotData) -> SessionResult | None:
        from eve_cli.execution._driver import session_workflow

        return await session_workflow(self, ctx, data)

    async def _turn(self, ctx: WorkflowContext, data: TurnInput) -> TurnResult:
        from eve_cli.execution._turn import turn_workflow

        return await turn_workflow(self, ctx, data)

    def serve(self, directory: Path, agent: AgentDefinition) -> None:
        """Serve the sessions of ``agent``'s name from ``directory``, wherever they were made
        (a folder moved, a release switched, a checkout at another path)."""
        self.served[agent.name] = directory

    def folder_of(self, agent_dir: str | None, name: str | None = None) -> Path:
        """The folder that serves a session made in ``agent_dir`` for the agent ``name``:
        the one this process serves that name from, else (a sub-agent's) the same place under
        the folder its root's moved to, else ``agent_dir`` itself."""
        if not agent_dir:
            return self.default_agent_dir
        stored = Path(agent_dir)
        served = self.served.get(name) if name else None
        if served is not None:
            if served != stored:
                self._moved[stored] = served
            return served
        for old, new in self._moved.items():
            if stored.is_relative_to(old):
                return new / stored.relative_to(old)
        return stored

    def agent_for(self, agent_dir: str | None, name: str | None = None) -> AgentDefinition:
        """The current definition of the agent a session made in ``agent_dir`` for the agent
        ``name`` runs (see :meth:`folder_of`; reloaded when its files changed).

        Raises:
            AgentLoadError: the folder is gone, is another agent's, or is broken and no
                earlier good load exists.
        """
        directory = self.folder_of(agent_dir, name)
        if name and agent_dir and name not in self.served and not directory.is_dir():
            raise AgentLoadError(_not_served(name, directory, self.served))
        agent = self._load(directory)
        if name and agent_dir and agent.name != name:
            raise AgentLoadError(
                f"{directory}: this folder is agent {agent.name!r}, not {name!r} that the "
                f"session belongs to; run eve with --agent pointing to a folder of agent {name!r}"
            )
        return agent

    def _load(self, directory: Path) -> AgentDefinition:
        key = str(directory)
        signature = _signature(directory)
        cached = self._agents.get(key)
        if cached is not None and cached[0] == signature:
            return cached[1]
        try:
            agent = load_agent(directory)
        except AgentLoadError as exc:
            self.load_errors[key] = str(exc)
            if cached is not None:
                return cached[1]
            raise
        self.load_errors.pop(key, None)
        self._agents[key] = (signature, agent)
        return agent

    @property
    def mcp(self) -> McpPool:
        """This process's MCP servers (the SDK is imported now, not before)."""
        if self._mcp is None:
            from eve_cli.mcp import McpPool

            self._mcp = McpPool()
        return self._mcp

    def mcp_tool(self, agent: AgentDefinition, name: str) -> Tool | None:
        """The MCP tool ``name`` of ``agent``'s servers, from the name alone."""
        from eve_cli.mcp import find_tool

        return find_tool(agent.mcp, name, self.mcp)

    async def mcp_turn_tools(self, agent: AgentDefinition) -> tuple[list[ToolSpec], str]:
        """The tools ``agent``'s MCP servers list now, and a note on those unavailable."""
        from eve_cli.mcp import turn_tools

        return await turn_tools(agent.mcp, self.mcp)

    def close(self) -> None:
        """Stop this process's MCP servers."""
        if self._mcp is not None:
            self._mcp.close()

    def pin(self, directory: Path | str, agent: AgentDefinition) -> None:
        """Serve ``agent`` for the folder ``directory`` while its files stay as they are now
        (`eve replay`: the folder's own definition with its tools answered from a
        recording)."""
        self._agents[str(Path(directory))] = (_signature(Path(directory)), agent)

    def keyed(self, name: str, gen: int, codec: KeyCodec | None = None) -> KeyedStream:
        """The keyed stream ``name`` of session generation ``gen``. A parent replayed after
        its turn (same generation) gets the turn's object: otherwise it would read back every
        key the turn stored to learn that its own few are there."""
        kept = self._keyed.pop((name, gen), None)
        if kept is None or not kept.current():
            kept = KeyedStream(self.world, name, gen, codec)
            # The previous generation's object saw the whole stream: nothing of this one is
            # stored yet, so a turn need not read the tail to learn that.
            before = self._keyed.get((name, gen - 1))
            if before is not None and before.current():
                kept.start_empty(before.length)
        self._keyed[(name, gen)] = kept
        while len(self._keyed) > _KEPT_STREAMS:
            self._keyed.popitem(last=False)
        return kept

    def forget(self, session_id: str) -> None:
        """Drop what is kept of ``session_id`` (its streams, window and estimate)."""
        names = {events_stream(session_id), history_stream(session_id)}
        for key in [k for k in self._keyed if k[0] in names]:
            del self._keyed[key]
        self._states.pop(session_id, None)
        # Its sub-agents' windows too: a failed drive's turns may have written there.
        for sid in [s for s in self._windows if s == session_id or s.startswith(session_id + ".")]:
            del self._windows[sid]
        self._texts.pop(session_id, None)

    def remember_text(self, session_id: str, index: int, text: str) -> None:
        """The text of reply ``index`` that this process stored as a reference to its
        events: the next :meth:`history_window` takes it from here, not from the events."""
        texts = self._texts.pop(session_id, None) or {}
        texts[index] = text
        self._texts[session_id] = texts
        while len(self._texts) > _KEPT_WINDOWS:
            self._texts.popitem(last=False)

    def window(self, session_id: str) -> WindowState | None:
        """The window state last kept for ``session_id`` (taken: the caller keeps its own)."""
        return self._states.pop(session_id, None)

    def keep_window(self, session_id: str, state: WindowState) -> None:
        self._states[session_id] = state
        while len(self._states) > _KEPT_WINDOWS:
            self._states.popitem(last=False)

    def wrote_history(self, session_id: str, index: int, item: Message) -> bool:
        """History item ``index`` of ``session_id`` as this process just stored it, in the
        form a read gives back: the kept window takes it when it ends just before it (True),
        and the next :meth:`history_window` does not read it back (its digest still takes
        the stored bytes in)."""
        kept = self._windows.get(session_id)
        if kept is None:
            return False
        first, held, (count, _) = kept
        if index < count or index > first + len(held):
            if index < count:  # where it read items: not those stored now
                del self._windows[session_id]
            return False
        del held[index - first :]  # written before but not stored (a write that failed)
        held.append(item)
        return True

    def history_window(self, session_id: str, start: int, end: int) -> list[Message]:
        """Items ``start`` to ``end`` of the session's history stream, without their keys.

        Kept between turns for a few sessions and reused while the stream's digest of them is
        unchanged: a turn then reads only the messages appended since, not the whole window
        (none of those this process appended: see :meth:`wrote_history`).
        """
        name = history_stream(session_id)
        items, checked = self._kept_window(session_id, name, start, end)
        if start + len(items) < end:
            first = start + len(items)
            read = self.world.stream_read(name, first, end)
            check_window(session_id, first, read)
            fresh = [strip_key(m) for m in read]
            texts = self._texts.pop(session_id, None)
            items += resolve(self.world, session_id, first, fresh, texts)
            # Texts of items not read yet (appended past ``end``) stay.
            if left := {i: t for i, t in (texts or {}).items() if i >= first + len(fresh)}:
                self._texts[session_id] = left
        count = start + len(items)
        if checked is not None and checked[0] == count:
            digest = checked[1]  # checked just now
        else:
            digest = self.world.stream_digest(name, count, checked)
        if digest is not None:
            self._windows[session_id] = (start, items, (count, digest))
            while len(self._windows) > _KEPT_WINDOWS:
                self._windows.popitem(last=False)
        return list(items)

    def _kept_window(
        self, session_id: str, name: str, start: int, end: int
    ) -> tuple[list[Message], tuple[int, Any] | None]:
        """The kept items of ``session_id``'s history from ``start`` (before ``end``) that
        are still those stored, and the (count, digest) checked of them ([], None: none)."""
        kept = self._windows.pop(session_id, None)
        if kept is None:
            return [], None
        # A window that starts further on (a compaction moved its start) takes the kept
        # items from there: the digest is of the stream's whole prefix they end.
        first, held, (count, digest) = kept
        stop = min(first + len(held), end)
        if not first <= start <= count <= stop or self.world.stream_digest(name, count) != digest:
            return [], None
        checked = (count, digest)
        if stop > count:  # written here (`wrote_history`): their stored bytes taken in
            wrote = self.world.stream_digest(name, stop, checked)
            if wrote is not None:
                checked = (stop, wrote)
            else:  # fewer stored than written (a write failed): read them
                stop = count
        return held[start - first : stop - first], checked

    def reload(self, agent_dir: str | None) -> AgentDefinition:
        """Load the folder now; a broken folder raises and the held definition stays."""
        directory = Path(agent_dir) if agent_dir else self.default_agent_dir
        try:
            agent = load_agent(directory)
        except AgentLoadError as exc:
            self.load_errors[str(directory)] = str(exc)
            raise
        self._agents[str(directory)] = (_signature(directory), agent)
        self.load_errors.pop(str(directory), None)
        return agent

    def fallback_agent(self) -> AgentDefinition:
        return self.agent_for(None)

    def session_agent(self, snap: Snapshot) -> AgentDefinition:
        """The agent session ``snap`` runs: a root session's by its agent's name, a
        sub-agent's by its folder (under where its root's agent is served)."""
        return self.agent_for(snap.agent_dir, snap.agent_name if snap.parent is None else None)

    def agent_or_fallback(self, snap: Snapshot) -> AgentDefinition:
        try:
            return self.session_agent(snap)
        except AgentLoadError:
            return self.fallback_agent()


def _not_served(name: str, directory: Path, served: dict[str, Path]) -> str:
    """Why a session of agent ``name`` made in ``directory`` (gone) cannot run here."""
    here = ", ".join(f"{n!r} ({d})" for n, d in served.items()) or "no agent folder"
    return (
        f"{directory}: the folder of agent {name!r} is gone and this process serves {here}; "
        f"run eve with --agent pointing to a folder of agent {name!r}"
    )
