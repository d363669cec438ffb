"""`eve chat`: talk to an agent in a terminal, through a pipe, one-shot (-p) or as NDJSON."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import Awaitable, Callable, Iterator, Mapping
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from typer._click import exceptions as click_exc

from eve_cli._facade import Facade
from eve_cli.cli._branch import branch
from eve_cli.cli._chat_loop import ChatLoop, ChatOptions
from eve_cli.cli._context import DataOption, Where, WorldOption, choose_world
from eve_cli.cli._errors import CliError, Interrupted, WaitingForInput
from eve_cli.cli._events import one_line
from eve_cli.cli._render import Banner, JsonRenderer, PlainRenderer, Renderer, is_rich
from eve_cli.cli._runtime import open_remote, open_runtime
from eve_cli.cli._sessions import is_empty, with_live_status
from eve_cli.cli._stdin import PipedLines, argument_text


class ApproveMode(StrEnum):
    ask = "ask"
    all = "all"
    none = "none"


class UnknownMode(StrEnum):
    ask = "ask"
    rerun = "rerun"
    failed = "failed"


def _complete_session(incomplete: str) -> list[str]:
    from eve_cli.cli.log import complete_session

    return complete_session(incomplete)


# The options of `eve chat`.
Prompt = Annotated[
    str | None,
    typer.Argument(
        metavar="[MESSAGE]",
        help="A first message: at a terminal the chat goes on after it; else like -p.",
        show_default=False,
    ),
]
Continue = Annotated[bool, typer.Option("--continue", "-c", help="Continue the latest session.")]
Session = Annotated[
    str | None,
    typer.Option(
        "--session",
        "-s",
        metavar="ID",
        help="Open a session (an interrupted turn finishes).",
        autocompletion=_complete_session,
    ),
]
Pick = Annotated[bool, typer.Option("--resume", "-r", help="Pick a recent session to open.")]
ModelOption = Annotated[
    str | None,
    typer.Option(
        "--model", "-m", metavar="MODEL", help="demo, scripted:PATH, openai:M, anthropic:M."
    ),
]
AgentOption = Annotated[
    Path | None, typer.Option("--agent", metavar="DIR", help="Agent folder (default ./agent).")
]
Print = Annotated[
    str | None,
    typer.Option("--print", "-p", metavar="TEXT", help="Send TEXT, print the final reply."),
]
Json = Annotated[bool, typer.Option("--json", help="Write every event as one JSON line (NDJSON).")]
Approve = Annotated[
    ApproveMode,
    typer.Option(help="Answer approvals: ask the user, approve all, or deny all."),
]
Unknown = Annotated[
    UnknownMode,
    typer.Option(
        "--unknown",
        help="Answer calls a crash interrupted whose outcome is unknown (unsafe tools): "
        "ask the user, run them again, or treat them as failed.",
    ),
]
Url = Annotated[
    str | None,
    typer.Option("--url", metavar="URL", help="Chat through a running `eve start` server."),
]
Token = Annotated[
    str | None,
    typer.Option("--token", metavar="TOKEN", help="Bearer token for --url (EVE_AUTH_TOKEN)."),
]
Wait = Annotated[
    float | None,
    typer.Option(
        "--wait", metavar="SECONDS", help="If another process owns the session, wait for it."
    ),
]


def chat(
    prompt: Prompt = None,
    continue_: Continue = False,
    session: Session = None,
    pick: Pick = False,
    model: ModelOption = None,
    agent: AgentOption = None,
    data: DataOption = None,
    world: WorldOption = None,
    print_: Print = None,
    json_: Json = False,
    approve: Approve = ApproveMode.ask,
    unknown: Unknown = UnknownMode.ask,
    url: Url = None,
    token: Token = None,
    wait: Wait = None,
) -> None:
    """Chat with an agent; the session is durable and resumable (eve chat -s ID)."""
    _check_usage(sum((continue_, session is not None, pick)), prompt, print_, url, model, agent)
    prompt, print_, terminal = _modes(argument_text(prompt), argument_text(print_), json_)
    model = checked_model(model)
    data_dir = choose_world(data, world, create=not url)
    if pick and not terminal:
        raise CliError("-r/--resume picks at a terminal; elsewhere use -c or -s ID", 2)
    renderer = _renderer(terminal, json_, print_ is not None, data_dir)
    options = ChatOptions(
        approve=approve.value, unknown=unknown.value, interactive=terminal, wait=wait, url=url
    )
    opened: contextlib.AbstractContextManager[tuple[Facade, asyncio.AbstractEventLoop]] = (
        open_remote(url, token or os.environ.get("EVE_AUTH_TOKEN"))
        if url
        else open_runtime(data_dir, agent, model)
    )
    resumed = bool(continue_ or session or pick)
    with opened as (rt, loop):
        if pick:
            session = _picked(rt, data_dir)
        sid = _choose_session(rt, loop, session, continue_, model, data_dir)
        chat_loop = _chat_loop(rt, loop, sid, renderer, options, resumed)
        _introduce(chat_loop, resumed, model, agent, url or str(data_dir))
        piped = None if terminal or print_ is not None else PipedLines()
        try:
            _converse(chat_loop, _messages(chat_loop, piped, print_, prompt), resumed, piped)
        finally:
            renderer.close()
    if chat_loop.failed and not terminal:
        raise typer.Exit(1)


def _modes(
    prompt: str | None, print_: str | None, json_: bool
) -> tuple[str | None, str | None, bool]:
    """``(message, -p message, at a terminal)``: without a terminal (or with --json) a
    message works as -p does."""
    at_terminal = sys.stdin.isatty() and sys.stdout.isatty()
    if prompt is not None and (not at_terminal or json_):
        print_, prompt = prompt, None
    return prompt, print_, at_terminal and not json_ and print_ is None


def _chat_loop(
    rt: Facade,
    loop: asyncio.AbstractEventLoop,
    sid: str,
    renderer: Renderer,
    options: ChatOptions,
    resumed: bool,
) -> ChatLoop:
    """The conversation over session ``sid``; ``resumed``: an existing session, shown from
    its stream's end, refused while another process is in it."""
    start = _stream_end(rt, sid) if resumed else 0
    chat_loop = ChatLoop(rt, sid, renderer, options, loop, next_index=start)
    if resumed:
        chat_loop.check_not_in_use()
    return chat_loop


def _check_usage(
    openers: int,
    prompt: str | None,
    print_: str | None,
    url: str | None,
    model: str | None,
    agent: Path | None,
) -> None:
    """Refuse options that do not go together (``openers``: how many of -c, -s, -r)."""
    if openers > 1:
        raise click_exc.UsageError("use one of -c/--continue, -s/--session and -r/--resume")
    if prompt is not None and print_ is not None:
        raise click_exc.UsageError("give the message as MESSAGE or with -p, not both")
    if url and (model or agent):
        raise click_exc.UsageError(
            "--model and --agent do not apply with --url (the server's agent serves)"
        )


def checked_model(model: str | None) -> str | None:
    """``model``, with the file of ``scripted:PATH`` taken from the working directory (as
    written on the command line) and checked now, not at the first model call."""
    if model is None or not model.startswith("scripted:"):
        return model
    path = Path(model.removeprefix("scripted:")).expanduser()
    if not path.is_file():
        raise CliError(
            f"-m {model}: no file {path.absolute()} (a scripted model's path is relative to "
            "the working directory)",
            2,
        )
    return f"scripted:{path.resolve()}"


def _picked(rt: Facade, data_dir: Where) -> str:
    from eve_cli.cli._picker import pick, recent

    rows = recent(rt) if hasattr(rt, "world") else rt.sessions()[:20]  # type: ignore[arg-type]
    if not rows:
        raise CliError(f"no session to pick in {data_dir}; start one with: eve chat")
    try:
        return pick(rows)
    except (KeyboardInterrupt, EOFError):
        raise Interrupted("no session picked") from None


def _introduce(
    chat_loop: ChatLoop, resumed: bool, model: str | None, agent: Path | None, where: str
) -> None:
    """The banner; for a reopened session its last exchanges, so the user sees where it
    stands, and what of -m / --agent does not apply to it."""
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
        renderer.recap(rt.events(sid, -400), sid)
        renderer.know_calls(view)  # a call asked before the reopening keeps its arguments
    if resumed and model:
        renderer.notice(f"-m applies to new sessions; session {sid} keeps its model")
    if resumed and agent is not None:
        _check_agent(chat_loop, view, agent)


def _check_agent(chat_loop: ChatLoop, view: Mapping[str, Any], agent: Path) -> None:
    """Refuse ``--agent`` naming another agent than the one the session belongs to: an
    agent is its name, so a folder of the same name (moved, re-cloned) continues it."""
    from eve_cli.runtime import Runtime

    rt = chat_loop.backend
    served = rt.agent.name if isinstance(rt, Runtime) else None
    owner = str(view.get("agent") or "default")
    if served is None or served == owner:
        return
    stored = view.get("agentDir")
    raise CliError(
        f"--agent {agent} is agent {served!r}, but session {chat_loop.sid} belongs to agent "
        f"{owner!r} ({f'made in {stored}' if stored else 'the built-in agent'}); reopen it "
        f"with --agent pointing to a folder of agent {owner!r}, or move it: eve session move "
        f"{chat_loop.sid} --agent {agent}",
        2,
    )


def _converse(
    chat_loop: ChatLoop, messages: Iterator[str], resumed: bool, piped: PipedLines | None
) -> None:
    """Settle what is pending, then one turn per message until the input ends or /exit."""
    try:
        if resumed:
            chat_loop.answer_pending_first(lambda: next(messages, None))
        # A new session starts now (its first events, with its id, are out before any input
        # is read); an opened one finishes an interrupted turn first.
        chat_loop.settle()
        for message in messages:
            if not message.startswith("/"):
                chat_loop.send(message)
            elif _slash(message, chat_loop, chat_loop.renderer):
                return
    except WaitingForInput as waiting:
        unread = piped.unread() if piped is not None else []
        if not unread:
            raise
        first = one_line(unread[0], 60)
        raise WaitingForInput(
            f"{waiting.message}; {len(unread)} more input line(s) were not sent (from "
            f"“{first}”): send them once it is answered"
        ) from None


def _renderer(terminal: bool, json_: bool, one_shot: bool, data_dir: Where) -> Renderer:
    if json_:
        return JsonRenderer()
    if one_shot:
        return PlainRenderer(final_only=True)
    if terminal:
        from eve_cli.cli._input import LineEditor
        from eve_cli.cli._render_rich import SLASH_HELP, RichRenderer

        history = data_dir.path if data_dir.url is None and data_dir.path.is_dir() else None
        editor = LineEditor(history, SLASH_HELP)
        return RichRenderer(
            input_fn=editor.ask, read_line=editor.read, read_line_async=editor.read_async
        )
    return PlainRenderer()


def _choose_session(
    rt: Facade,
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
        # The latest conversation: a chat opened and left without a message is passed over.
        spoken = [row for row in rows if not is_empty(row)] or rows
        latest = max(spoken, key=lambda row: str(row.get("updatedAt") or ""))
        return str(latest["id"])
    return loop.run_until_complete(rt.create_session(model=model))


def _stream_end(rt: Facade, sid: str) -> int:
    """Index of the next event of `sid` (only events from now on are shown)."""
    last = rt.events(sid, -1)
    index = last[-1].get("index") if last else None
    return index + 1 if isinstance(index, int) else 0


def _messages(
    chat_loop: ChatLoop, piped: PipedLines | None, text: str | None, first: str | None
) -> Iterator[str]:
    """User messages: the -p text, a first message then what is typed at the prompt, or the
    lines of piped stdin."""
    renderer = chat_loop.renderer
    if text is not None:
        yield text
        return
    if piped is not None or not is_rich(renderer):
        yield from piped or PipedLines()
        return
    if first is not None and first.strip():
        yield first.strip()
    bye = f"bye; resume with: {chat_loop.chat_command()}"
    while True:
        try:
            line = renderer.read_message()
        except KeyboardInterrupt:
            raise Interrupted(bye) from None
        if line is None:
            renderer.notice(bye)
            return
        if line.strip():
            yield line.strip()


def _slash(command: str, chat_loop: ChatLoop, renderer: Renderer) -> bool:
    """Run a slash command; True when the chat should end."""
    name = command.split()[0].lower()
    if name in ("/exit", "/quit"):
        return True
    run = _COMMANDS.get(name)
    if run is None:
        renderer.notice(f"unknown command {one_line(name, 40)}; /help lists the commands")
    else:
        run(command, chat_loop, renderer)
    return False


def _help(command: str, chat_loop: ChatLoop, renderer: Renderer) -> None:
    if is_rich(renderer):
        renderer.show_help()
    else:
        renderer.notice("commands: /help /exit /clear /compact /cancel /sessions /fork /rewind [N]")


def _sessions(command: str, chat_loop: ChatLoop, renderer: Renderer) -> None:
    rt = chat_loop.backend
    rows = [r for r in rt.sessions() if not is_empty(r) or r.get("id") == chat_loop.sid]
    if hasattr(rt, "world"):  # in-process: `running` only when a live process owns it
        rows = with_live_status(rt, rows)  # type: ignore[arg-type]
    if is_rich(renderer):
        renderer.show_sessions(rows, current=chat_loop.sid)
    else:
        for row in rows:
            renderer.notice(f"{row.get('id')}  {row.get('status')}  turns={row.get('turns')}")


def _session_command(
    operation: Callable[[Facade], Callable[[str], Awaitable[Any]]],
) -> Callable[[str, ChatLoop, Renderer], None]:
    """The slash command that runs a session operation of the facade (clear, compact, cancel)."""

    def run(command: str, chat_loop: ChatLoop, renderer: Renderer) -> None:
        chat_loop.command(operation(chat_loop.backend))

    return run


# The slash commands but /exit and /quit, each run with (command line, chat loop, renderer).
_COMMANDS: dict[str, Callable[[str, ChatLoop, Renderer], None]] = {
    "/help": _help,
    "/clear": _session_command(lambda rt: rt.clear),
    "/compact": _session_command(lambda rt: rt.compact),
    "/cancel": _session_command(lambda rt: rt.cancel),
    "/sessions": _sessions,
    "/fork": branch,
    "/rewind": branch,
}


def register(app: typer.Typer) -> None:
    app.command("chat")(chat)
