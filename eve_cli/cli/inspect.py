"""`eve inspect [SESSION]`: sessions, a session's turns → steps → actions, one checkpoint, or its
events. Read-only: it takes no lock and writes nothing, so it works while another process owns
a session and on damaged data (the damage is shown, not a traceback)."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any

import typer

from eve_cli._usage import format_usage
from eve_cli.cli import _tree
from eve_cli.cli._context import DataOption, Where, WorldOption, choose_world
from eve_cli.cli._errors import CliError, user_message
from eve_cli.cli._events import describe_request, error_text, format_call, one_line
from eve_cli.cli._render import dumps
from eve_cli.cli._runtime import open_reader
from eve_cli.cli._sessions import is_empty, live_status, resume_hint, with_live_status
from eve_cli.cli._tables import sessions_table, status_text, when

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text
    from rich.tree import Tree

    from eve_cli.runtime import Runtime

RECENT = 20  # turns `eve inspect SESSION` shows without --all: the latest

SESSION_KEYS = ("id", "status", "parkedOn", "agent", "model", "turns", "steps", "updatedAt")


def inspect(
    session: Annotated[str | None, typer.Argument(metavar="[SESSION]", help="Session id.")] = None,
    step: Annotated[
        str | None, typer.Option("--step", metavar="T.S", help="One checkpoint: turn T, step S.")
    ] = None,
    events: Annotated[bool, typer.Option("--events", help="The session's events.")] = False,
    start: Annotated[
        int, typer.Option("--start", metavar="N", help="First event (negative: from the end).")
    ] = 0,
    json_: Annotated[bool, typer.Option("--json", help="Machine-readable JSON.")] = False,
    all_turns: Annotated[
        bool, typer.Option("--all", help="Every turn of the session, not only the latest.")
    ] = False,
    data: DataOption = None,
    world: WorldOption = None,
) -> None:
    """Show sessions, a session's turns, steps and waits, one checkpoint, or its events."""
    if (step or events) and not session:
        raise CliError("--step and --events need a SESSION id (see: eve inspect)", 2)
    if step and events:
        raise CliError("use --step or --events, not both", 2)
    where = choose_world(data, world)
    if where.url is not None:
        _inspect(where, session, step, events, start, json_, all_turns)
        return
    data_dir = where.path
    existing = next((p for p in (data_dir, *data_dir.parents) if p.exists()), data_dir)
    if existing.exists() and not existing.is_dir():
        raise CliError(f"data directory {data_dir}: {existing} is not a directory; pass --data")
    if not data_dir.is_dir():
        if session:
            raise CliError(f"no data directory {data_dir}; nothing to inspect")
        _emit_sessions([], json_, where)
        return
    _inspect(where, session, step, events, start, json_, all_turns)


def _inspect(
    where: Where,
    session: str | None,
    step: str | None,
    events: bool,
    start: int,
    json_: bool,
    all_turns: bool = False,
) -> None:
    with open_reader(where) as reader:
        if session is None:
            rows = with_sizes(with_live_status(reader, list_sessions(reader)), reader)
            _emit_sessions(rows, json_, where)
            return
        damage = _damage(reader, session, where)
        try:
            # The latest turns (a checkpoint of turn T needs those before it too).
            view = reader.session(session, None if all_turns or step else RECENT)
            found = reader.lineage(session)
            origin = found["forkedFrom"]
            view["forkedFrom"] = origin.copy() if origin else None
            view["forks"] = found["forks"]
            view["status"] = live_status(reader, session, str(view.get("status")))
            if view["status"] == "interrupted":
                view["resume"] = f"eve resume {session}"
            stream = reader.events(session, start if events else 0) if events or step else []
        except Exception:
            if damage:  # what cannot be read says less than why
                raise CliError(damage) from None
            raise
    if events:
        _emit_events(stream, json_)
    elif step:
        _emit_step(view, stream, step, json_)
    else:
        _emit_session(view, json_)
    if damage:  # what could be read is shown; the exit code and the line say it stops there
        raise CliError(damage)


def _damage(reader: Runtime, sid: str, where: Where) -> str | None:
    """Why the session cannot go on (as `eve chat` and `eve doctor` say it), or None."""
    from world import CorruptJournalError, InvalidNameError, RunNotFoundError

    try:
        reader.engine.check(sid)
    except (RunNotFoundError, InvalidNameError):
        return None  # reading it says so
    except CorruptJournalError as exc:
        from eve_cli._losses import with_losses

        return f"damaged data in {where}: {with_losses(reader, exc)}"
    from eve_cli._losses import context_damage, with_losses

    lost = context_damage(reader, sid)
    return f"damaged data in {where}: {with_losses(reader, lost)}" if lost else None


def _console() -> Console:
    """The terminal renderer, for tables and trees only (JSON and events are written plain)."""
    from rich.console import Console

    # Piped output is not squeezed to 80 columns: tables stay one row per session.
    return Console(highlight=False, soft_wrap=False, width=None if sys.stdout.isatty() else 160)


def list_sessions(reader: Runtime) -> list[dict[str, Any]]:
    """`reader.sessions()`; when damaged data stops it, one row per session instead, a damaged
    session as `{"id", "status": "damaged", "error"}` (the others are still listed)."""
    from world import WorldError

    try:  # rows of both kinds are plain JSON objects to the caller
        return reader.sessions()
    except WorldError:
        pass
    rows: list[dict[str, Any]] = []
    for sid in reader.world.families():
        try:
            view = reader.session(sid)
        except LookupError:
            continue  # not a session (another workflow's run)
        except WorldError as exc:
            error = one_line(user_message(exc), 400)
            rows.append(
                {"id": sid, "status": "damaged", "turns": None, "steps": None, "error": error}
            )
            continue
        rows.append({key: view.get(key) for key in SESSION_KEYS} | {"turns": len(view["turns"])})
    rows.sort(key=lambda row: str(row.get("updatedAt") or ""), reverse=True)
    return rows


def with_sizes(rows: Sequence[Mapping[str, Any]], reader: Runtime) -> list[dict[str, Any]]:
    """Rows with `bytes`: what the session stores (`World.family_usage`)."""
    from world import WorldError

    wanted = [dict(row) for row in rows]
    for row in wanted:
        if "bytes" not in row:
            try:
                row["bytes"] = reader.world.family_usage(str(row.get("id"))).bytes
            except WorldError:
                row["bytes"] = None
    return wanted


def _emit_sessions(rows: Sequence[Mapping[str, Any]], json_: bool, data_dir: Where) -> None:
    if json_:
        print(dumps([dict(row) for row in rows]))
        return
    shown = [row for row in rows if not is_empty(row)]  # opened, never sent a message
    if not shown:
        print(f"no sessions in {data_dir}; start one with: eve chat")
    else:
        from rich.text import Text

        console = _console()
        console.print(sessions_table(shown))
        for row in shown:
            if row.get("status") == "damaged":
                console.print(Text(f"{row['id']}: {row.get('error')}", style="red"))
            elif row.get("status") == "interrupted":
                console.print(Text(f"{row['id']}: interrupted; {resume_hint(str(row['id']))}"))
    if len(shown) < len(rows):
        print(f"({len(rows) - len(shown)} empty sessions, never sent a message, not listed)")


def session_object(view: Mapping[str, Any]) -> dict[str, Any]:
    """The `--json` session: id, status, … and `turns` as a list each holding its steps."""
    tree = _tree.build(view)
    obj = {key: view[key] for key in SESSION_KEYS if key in view}
    obj.update({k: v for k, v in view.items() if k not in obj and k not in ("turns", "steps")})
    # A page of the latest turns (`turnsFrom` the first's number) counts them all.
    obj["turnCount"] = view.get("turnCount", len(tree["turns"]))
    obj["turns"] = tree["turns"]
    whole = view.get("turnsFrom", 1) == 1
    obj["steps"] = sum(len(t["steps"]) for t in tree["turns"]) if whole else view.get("steps")
    obj["waits"] = tree["waits"]
    return obj


def _emit_session(view: Mapping[str, Any], json_: bool) -> None:
    obj = session_object(view)
    if json_:
        print(dumps(obj))
        return
    from rich.text import Text
    from rich.tree import Tree

    head = Text.assemble(
        ("session ", "bold"),
        (str(obj.get("id")), "bold"),
        "  ",
        status_text(obj),
        f"  agent {obj.get('agent', '?')}  model {obj.get('model', '?')}",
    )
    root = Tree(head)
    if obj["usage"]["steps"]:
        root.add(Text(f"usage {format_usage(obj['usage'])}", style="dim"))
    origin = obj.get("forkedFrom")
    if isinstance(origin, Mapping):
        root.add(Text(f"fork of {origin.get('session')} at checkpoint {origin.get('checkpoint')}"))
    if obj.get("forks"):
        root.add(Text(f"forks: {', '.join(obj['forks'])}"))
    if (earlier := int(obj.get("turnsFrom") or 1) - 1) > 0:
        hint = f"eve inspect {obj.get('id')} --all"
        root.add(Text(f"{earlier} earlier turn(s) not shown ({hint})", style="dim"))
    for turn in obj["turns"]:
        _turn_branch(root, turn)
    for wait in obj["waits"]:
        root.add(Text(f"waiting for {describe_request(wait)}", style="yellow"))
    console = _console()
    console.print(root)
    if obj.get("status") == "interrupted":
        console.print(f"interrupted: its turn stopped with its process; {resume_hint(obj['id'])}")


def _turn_branch(root: Tree, turn: Mapping[str, Any]) -> None:
    """One turn of the session tree: its steps, their actions, its error, its lost events."""
    from rich.text import Text
    from rich.tree import Tree

    label = Text.assemble((f"turn {turn['number']}", "bold"), f" {turn['id']}  ", status_text(turn))
    if turn.get("message"):
        sender = f"{turn['by']}: " if turn.get("by") else ""
        label.append(f"  {sender}“{one_line(turn['message'], 60)}”", style="italic")
    if turn.get("cancelledBy"):
        label.append(f"  cancelled by {turn['cancelledBy']}", style="dim")
    if turn.get("usage"):
        label.append(f"  {format_usage(turn['usage'])}", style="dim")
    branch = root.add(label)
    for step in turn["steps"]:
        branch.add(_step_label(turn, step)).children.extend(
            Tree(_action_label(a)) for a in step["actions"]
        )
    if turn.get("error"):
        branch.add(Text(f"error: {turn['error']}", style="red"))
    for index in turn.get("lost", []):
        lost = f"event {index} lost in a repair (its bytes are in quarantine/)"
        branch.add(Text(lost, style="red"))


def _step_label(turn: Mapping[str, Any], step: Mapping[str, Any]) -> Text:
    from rich.text import Text

    label = Text.assemble((f"step {turn['number']}.{step['index']}", "bold"), "  ")
    label.append_text(status_text(step))
    if step.get("durationMs") is not None:
        label.append(f"  {step['durationMs']} ms", style="dim")
    if step.get("error"):
        label.append(f"  {step['error']}", style="red")
    return label


def _action_label(action: Mapping[str, Any]) -> Text:
    from rich.text import Text

    if action["kind"] == "model":
        text = Text.assemble(("model call", "cyan"), "  ", status_text(action))
        if action.get("text"):
            text.append(f"  “{one_line(action['text'], 60)}”", style="dim")
    elif action["kind"] == "mcp":
        text = Text.assemble(("MCP start-up", "cyan"), "  ", status_text(action))
        servers = ", ".join(action.get("servers") or [])
        text.append(f"  {servers}: {action.get('tools')} tools", style="dim")
    else:
        call = format_call(str(action.get("name")), action.get("arguments"), 60)
        text = Text.assemble(("tool ", "cyan"), call, "  ", status_text(action))
        if action.get("server"):
            text.append(f"  MCP {action['server']}/{action.get('tool')}", style="dim")
        if action.get("isError"):
            text.append("  error", style="red")
    if action.get("durationMs") is not None:
        text.append(f"  {action['durationMs']} ms", style="dim")
    return text


def _emit_step(
    view: Mapping[str, Any],
    events: Sequence[Mapping[str, Any]],
    ref: str,
    json_: bool,
) -> None:
    tree = _tree.build(view)
    try:
        turn, step = _tree.find_step(tree["turns"], ref)
    except (ValueError, LookupError) as exc:
        raise CliError(f"session {view.get('id')}: {exc}") from None
    previous = _previous_checkpoint(tree["turns"], turn, step)
    first = ((previous["lastEvent"] or 0) + 1) if previous else 0
    last = step["lastEvent"]
    changed = _tree.changes(events, first, last if last is not None else first - 1)
    if json_:
        obj = {
            "session": view.get("id"),
            "turn": turn["number"],
            "turnId": turn["id"],
            **step,
            "previous": f"{previous['turn']}.{previous['index']}" if previous else None,
            "changes": changed,
        }
        print(dumps(obj))
        return
    from rich.text import Text

    console = _console()
    console.print(_step_label(turn, step))
    for action in step["actions"]:
        console.print(Text("  ").append_text(_action_label(action)))
        if action["kind"] == "model" and action.get("text"):
            # The reply whole: this is where a person reads a checkpoint's answer.
            console.print(Text(textwrap.indent(str(action["text"]), "    ")))
    since = f"step {previous['turn']}.{previous['index']}" if previous else "the session start"
    console.print(Text(f"changes since {since}:", style="bold"))
    for line in changed:
        console.print(f"  {line}", markup=False)


class _Checkpoint(_tree.TreeStep):
    turn: int | None  # its turn's number


def _previous_checkpoint(
    turns: list[_tree.TreeTurn], turn: _tree.TreeTurn, step: _tree.TreeStep
) -> _Checkpoint | None:
    """The checkpoint before `step` in stream order (maybe the last step of an earlier turn)."""
    before: _Checkpoint | None = None
    for t in turns:
        for s in t["steps"]:
            if s is step:
                return before
            before = {**s, "turn": t["number"]}
    return before


def _emit_events(events: Sequence[Mapping[str, Any]], json_: bool) -> None:
    out = sys.stdout
    for event in events:
        if json_:
            out.write(dumps(dict(event)) + "\n")
        else:
            out.write(event_line(event) + "\n")
    out.flush()


def event_line(event: Mapping[str, Any]) -> str:
    """`index  time  type  summary` for `eve inspect --events`."""
    scope = ""
    if event.get("turnId") is not None:
        scope = str(event["turnId"])
        if event.get("stepIndex") is not None:
            scope += f".{event['stepIndex']}"
    from eve_cli.execution import change_of

    kind = str(event.get("type"))
    summary = _tree.describe_change(event) or ""
    change = change_of(event)
    if change in ("delta", "thinking"):
        summary = repr(event.get("delta", ""))
    elif change == "failed" and not summary:
        summary = error_text(event)
    elif change == "parked":
        summary = f"on {event.get('on')}"
    index = event.get("index", "?")
    return f"{index:>5}  {when(event.get('at'))}  {kind:<20} {scope:<10} {summary}".rstrip()


def register(app: typer.Typer) -> None:
    app.command("inspect")(inspect)
