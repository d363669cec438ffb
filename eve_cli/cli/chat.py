"""`eve chat`: talk to an agent in a terminal, through a pipe, one-shot (-p) or as NDJSON."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import Iterator
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from typer._click import exceptions as click_exc

from eve_cli.cli._backend import Backend
from eve_cli.cli._chat_loop import ChatLoop, ChatOptions
from eve_cli.cli._context import DataOption, Where, WorldOption, choose_world
from eve_cli.cli._errors import CliError, Interrupted
from eve_cli.cli._events import one_line
from eve_cli.cli._render import Banner, JsonRenderer, PlainRenderer, Renderer, is_rich
from eve_cli.cli._runtime import open_remote, open_runtime


class ApproveMode(StrEnum):
    ask = "ask"
    all = "all"
    none = "none"


def chat(
    continue_: Annotated[
        bool, typer.Option("--continue", "-c", help="Continue the latest session.")
    ] = False,
    session: Annotated[
        str | None,
        typer.Option(
            "--session", "-s", metavar="ID", help="Open a session (an interrupted turn finishes)."
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            "--model", "-m", metavar="MODEL", help="demo, scripted:PATH, openai:M, anthropic:M."
        ),
    ] = None,
    agent: Annotated[
        Path | None, typer.Option("--agent", metavar="DIR", help="Agent folder (default ./agent).")
    ] = None,
    data: DataOption = None,
    world: WorldOption = None,
    print_: Annotated[
        str | None,
        typer.Option("--print", "-p", metavar="TEXT", help="Send TEXT, print the final reply."),
    ] = None,
    json_: Annotated[
        bool, typer.Option("--json", help="Write every event as one JSON line (NDJSON).")
    ] = False,
    approve: Annotated[
        ApproveMode,
        typer.Option(help="Answer approvals: ask the user, approve all, or deny all."),
    ] = ApproveMode.ask,
    url: Annotated[
        str | None,
        typer.Option("--url", metavar="URL", help="Chat through a running `eve start` server."),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option("--token", metavar="TOKEN", help="Bearer token for --url (EVE_AUTH_TOKEN)."),
    ] = None,
    wait: Annotated[
        float | None,
        typer.Option(
            "--wait", metavar="SECONDS", help="If another process owns the session, wait for it."
        ),
    ] = None,
) -> None:
    """Chat with an agent; the session is durable and resumable (eve chat -s ID)."""
    if continue_ and session:
        raise click_exc.UsageError("use -c/--continue or -s/--session, not both")
    if url and (model or agent):
        raise click_exc.UsageError(
            "--model and --agent do not apply with --url (the server's agent serves)"
        )
    data_dir = choose_world(data, world, create=not url)
    terminal = sys.stdin.isatty() and sys.stdout.isatty() and not json_ and print_ is None
    renderer = _renderer(terminal, json_, print_ is not None)
    options = ChatOptions(approve=approve.value, interactive=terminal, wait=wait)
    opened: contextlib.AbstractContextManager[tuple[Backend, asyncio.AbstractEventLoop]] = (
        open_remote(url, token or os.environ.get("EVE_AUTH_TOKEN"))
        if url
        else open_runtime(data_dir, agent, model)
    )
    resumed = bool(continue_ or session)
    with opened as (rt, loop):
        sid = _choose_session(rt, loop, session, continue_, model, data_dir)
        start = _stream_end(rt, sid) if resumed else 0
        chat_loop = ChatLoop(rt, sid, renderer, options, loop, next_index=start)
        _introduce(chat_loop, resumed, model, url or str(data_dir))
        try:
            _converse(chat_loop, _messages(renderer, terminal, print_, sid), resumed)
        finally:
            renderer.close()
    if chat_loop.failed and not terminal:
        raise typer.Exit(1)


def _introduce(chat_loop: ChatLoop, resumed: bool, model: str | None, where: str) -> None:
    """The banner; for a reopened session its last exchange, so the user sees where it stands."""
    rt, sid, renderer = chat_loop.backend, chat_loop.sid, chat_loop.renderer
    view = rt.session(sid)
    banner = Banner(
        session_id=sid,
        agent=str(view.get("agent") or "default"),
        model=str(view.get("model") or model or ""),
        data_dir=where,
        resumed=resumed,
    )
    renderer.banner(banner)
    if resumed and is_rich(renderer):
        renderer.recap(rt.events(sid, -200))
    if resumed and model:
        renderer.notice(f"-m applies to new sessions; session {sid} keeps its model")


def _converse(chat_loop: ChatLoop, messages: Iterator[str], resumed: bool) -> None:
    """Settle what is pending, then one turn per message until the input ends or /exit."""
    if resumed:
        chat_loop.answer_pending_first(lambda: next(messages, None))
    # A new session starts now (its first events, with its id, are out before any input is
    # read); an opened one finishes an interrupted turn first.
    chat_loop.settle()
    for message in messages:
        if not message.startswith("/"):
            chat_loop.send(message)
        elif _slash(message, chat_loop, chat_loop.renderer):
            return


def _renderer(terminal: bool, json_: bool, one_shot: bool) -> Renderer:
    if json_:
        return JsonRenderer()
    if one_shot:
        return PlainRenderer(final_only=True)
    if terminal:
        from eve_cli.cli._render_rich import RichRenderer

        return RichRenderer()
    return PlainRenderer()


def _choose_session(
    rt: Backend,
    loop: asyncio.AbstractEventLoop,
    session: str | None,
    continue_: bool,
    model: str | None,
    data_dir: Where,
) -> str:
    if session:
        try:
            rt.session(session)
        except LookupError:
            raise CliError(
                f"no session {session} in {data_dir}; list sessions with: eve inspect"
            ) from None
        return session
    if continue_:
        rows = rt.sessions()
        if not rows:
            raise CliError(f"no session to continue in {data_dir}; start one with: eve chat")
        latest = max(rows, key=lambda row: str(row.get("updatedAt") or ""))
        return str(latest["id"])
    return loop.run_until_complete(rt.create_session(model=model))


def _stream_end(rt: Backend, sid: str) -> int:
    """Index of the next event of `sid` (only events from now on are shown)."""
    last = rt.events(sid, -1)
    index = last[-1].get("index") if last else None
    return index + 1 if isinstance(index, int) else 0


def _messages(renderer: Renderer, terminal: bool, text: str | None, sid: str) -> Iterator[str]:
    """User messages: the -p text, lines typed at the prompt, or lines of piped stdin."""
    if text is not None:
        yield text
        return
    if terminal and is_rich(renderer):
        while True:
            try:
                line = renderer.read_message()
            except KeyboardInterrupt:
                raise Interrupted(f"bye; resume with: eve chat -s {sid}") from None
            if line is None:
                renderer.notice(f"bye; resume with: eve chat -s {sid}")
                return
            if line.strip():
                yield line.strip()
        return
    for line in sys.stdin:
        if line.strip():
            yield line.rstrip("\n")


def _slash(command: str, chat_loop: ChatLoop, renderer: Renderer) -> bool:
    """Run a slash command; True when the chat should end."""
    name = command.split()[0].lower()
    rt = chat_loop.backend
    if name in ("/exit", "/quit"):
        return True
    if name == "/help":
        if is_rich(renderer):
            renderer.show_help()
        else:
            renderer.notice("commands: /help /exit /clear /compact /cancel /sessions")
    elif name == "/clear":
        chat_loop.command(rt.clear)
    elif name == "/compact":
        chat_loop.command(rt.compact)
    elif name == "/cancel":
        chat_loop.command(rt.cancel)
    elif name == "/sessions":
        rows = rt.sessions()
        if is_rich(renderer):
            renderer.show_sessions(rows, current=chat_loop.sid)
        else:
            for row in rows:
                renderer.notice(f"{row.get('id')}  {row.get('status')}  turns={row.get('turns')}")
    else:
        renderer.notice(f"unknown command {one_line(name, 40)}; /help lists the commands")
    return False


def register(app: typer.Typer) -> None:
    app.command("chat")(chat)
