"""The interactive terminal renderer: banner, streamed Markdown under Rich Live, a spinner while
the model thinks, compact tool-call lines, and the approval / question / message prompts."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.markdown import Markdown
from rich.panel import Panel
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from eve_cli.cli._events import (
    ERROR_TYPES,
    Event,
    describe_request,
    error_text,
    event_request,
    field,
    format_call,
    one_line,
    request_id,
)
from eve_cli.cli._render import Banner
from eve_cli.cli._transcript import Entry, entries, last_exchanges, tool_summary

RECAP_EXCHANGES = 5  # exchanges a reopened session shows (eve log shows them all)

SLASH_HELP: tuple[tuple[str, str], ...] = (
    ("/help", "show this help"),
    ("/exit", "leave (the session stays resumable: eve chat -s ID)"),
    ("/clear", "wipe the model's history, keep the session"),
    ("/compact", "summarise older history now"),
    ("/cancel", "cancel the current turn"),
    ("/sessions", "list the sessions in this data directory"),
    ("/fork", "go on in a fork of this session (the original stays as it is)"),
    ("/rewind", "/rewind [N]: go back N turns (default 1) in a fork of this session"),
)

APPROVAL_CHOICES = {"y": "y", "yes": "y", "n": "n", "no": "n", "a": "a", "always": "a"}


class RichRenderer:
    """Renders §8 events on a terminal and asks the user for input."""

    def __init__(
        self,
        console: Console | None = None,
        input_fn: Callable[[str], str] | None = None,
        read_line: Callable[[str], str | None] | None = None,
        read_line_async: Callable[[str], Awaitable[str | None]] | None = None,
    ) -> None:
        """``input_fn`` reads answers to prompts; ``read_line`` reads messages (None at end
        of input; default: ``input_fn``); ``read_line_async`` reads one while a turn sleeps
        (None: nothing is read then)."""
        self.console = console or Console(highlight=False)
        self._read_line = read_line
        self._read_line_async = read_line_async
        self._last_error: str | None = None  # step.failed and turn.failed repeat one error
        self._input = input_fn or (lambda prompt: self.console.input(prompt, markup=False))
        self._live: Live | None = None
        self._text = ""
        self._thought = ""  # what streamed of the reasoning
        self._calls: dict[str, tuple[str, Any, float]] = {}
        self._announced: str | None = None  # the request the last `⏸` line described

    # -- Renderer ------------------------------------------------------------------------
    def banner(self, info: Banner) -> None:
        grid = Table.grid(padding=(0, 2))
        grid.add_row(Text("agent", style="dim"), info.agent)
        grid.add_row(Text("model", style="dim"), info.model)
        grid.add_row(Text("session", style="dim"), info.session_id)
        grid.add_row(Text("data", style="dim"), info.data_dir)
        title = "eve · resumed session" if info.resumed else "eve"
        self.console.print(Panel(grid, title=title, title_align="left", expand=False))
        self.console.print(
            Text("/help for commands · Ctrl-C cancels a turn · Ctrl-D exits", style="dim")
        )

    def event(self, event: Event) -> None:
        handler = _HANDLERS.get(str(event.get("type")))
        if event.get("type") == "turn.started":
            self._last_error = None
        if handler is not None:
            handler(self, event)
        elif event.get("type") in ERROR_TYPES:
            # step.failed and turn.failed carry the same error: say it once.
            text = error_text(event)
            if text != self._last_error:
                self._stop()
                self.error(text)
            self._last_error = text

    def notice(self, text: str) -> None:
        self._stop()
        self.console.print(Text(text, style="dim"))

    def error(self, text: str) -> None:
        self._stop()
        self.console.print(Text(f"error: {text}", style="bold red"))

    def close(self) -> None:
        self._stop()

    # -- prompts -------------------------------------------------------------------------
    def read_message(self) -> str | None:
        """The next user line; None at end of input (Ctrl-D)."""
        self._stop()
        if self._read_line is not None:
            return self._read_line("› ")
        try:
            return self._input("› ")
        except EOFError:
            return None

    def read_message_async(self) -> Callable[[], Awaitable[str | None]] | None:
        """What reads the next user line in the event loop (while a turn sleeps), or None.

        The awaitable raises CtrlC at Ctrl-C on an empty line; cancelled, it keeps
        what was typed for the next prompt."""
        read = self._read_line_async
        if read is None:
            return None

        def start() -> Awaitable[str | None]:
            self._stop()
            return read("› ")

        return start

    def ask_approval(self, request: Mapping[str, Any]) -> str:
        """Ask until the user answers `y`, `n` or `a` (always)."""
        self._stop()
        self._describe_unannounced(request)
        while True:
            answer = self._input("[y]es / [n]o / [a]lways: ").strip().lower()
            if answer in APPROVAL_CHOICES:
                return APPROVAL_CHOICES[answer]
            self.console.print(Text("answer y, n or a", style="dim"))

    def ask_outcome(self, request: Mapping[str, Any]) -> dict[str, str]:
        """Ask what became of an interrupted call: run it again, treat it as failed, or the
        result the user gives (the answer's ``outcome`` and ``result``)."""
        self._stop()
        self._describe_unannounced(request)
        while True:
            answer = self._input("[r]un again / treat as [f]ailed / [g]ive the result: ")
            choice = answer.strip().lower()
            if choice in ("r", "run", "rerun"):
                return {"outcome": "rerun"}
            if choice in ("f", "failed"):
                return {"outcome": "failed"}
            if choice in ("g", "give", "result"):
                return {"outcome": "result", "result": self._input("result: ")}
            self.console.print(Text("answer r, f or g", style="dim"))

    def ask_retry(self, problem: str) -> bool:
        """Say ``problem`` and ask whether to try again (Enter: yes)."""
        self._stop()
        self.console.print(Text(problem, style="bold red"))
        while True:
            try:
                answer = self._input("try again? [Y/n] ").strip().lower()
            except (EOFError, KeyboardInterrupt):
                return False
            if answer in ("", "y", "yes", "n", "no"):
                return answer in ("", "y", "yes")

    def ask_question(self, request: Mapping[str, Any]) -> str:
        self._stop()
        self._describe_unannounced(request)
        return self._input("answer: ")

    def _describe_unannounced(self, request: Mapping[str, Any]) -> None:
        # A request the `⏸` line just described is not printed twice; one pending from before
        # (a reopened session) is described here.
        if not self._announced or self._announced != request_id(request):
            self.console.print(Text(f"? {describe_request(request)}", style="bold yellow"))
        self._announced = None

    def know_calls(self, view: Mapping[str, Any]) -> None:
        """The tool calls the session view's latest turn asked for and that have no result
        yet (a reopened session's): their result lines name their arguments, as live."""
        turns = view.get("turns") or [{}]
        now = time.monotonic()
        for step in turns[-1].get("steps") or []:
            for action in step.get("actions") or []:
                if action.get("status") in ("requested", "waiting"):
                    call = (str(action.get("name")), action.get("arguments"), now)
                    self._calls[str(action.get("callId"))] = call

    def recap(self, events: Sequence[Mapping[str, Any]], session_id: str) -> None:
        """The last exchanges of a reopened session (tool lines as they were shown live), so
        the user sees where it stands."""
        found, left_out = last_exchanges(entries(events), RECAP_EXCHANGES)
        RichTranscript(self.console).show(found, session_id, left_out, banner=False)

    def show_help(self) -> None:
        table = Table.grid(padding=(0, 2))
        for name, what in SLASH_HELP:
            table.add_row(Text(name, style="bold"), what)
        self.console.print(table)

    def show_sessions(self, rows: Sequence[Mapping[str, Any]], current: str) -> None:
        from eve_cli.cli._tables import sessions_table

        self._stop()
        self.console.print(sessions_table(rows, current=current))

    # -- live region ---------------------------------------------------------------------
    def _show(self, renderable: Any) -> None:
        if self._live is None:
            self._live = Live(
                renderable, console=self.console, transient=True, refresh_per_second=12
            )
            self._live.start()
        else:
            self._live.update(renderable)

    def _stop(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def _thinking(self, label: str = "thinking…") -> None:
        self._show(Spinner("dots", Text(label, style="dim")))

    # -- event handlers ------------------------------------------------------------------
    def _on_step_started(self, event: Event) -> None:
        self._text = self._thought = ""
        self._thinking()

    def _on_delta(self, event: Event) -> None:
        self._text += str(field(event, "delta") or field(event, "text") or "")
        self._show(Markdown(self._text))

    def _on_reasoning_delta(self, event: Event) -> None:
        """What the model shows of its reasoning as it streams, dimmed, in the live area."""
        self._thought += str(field(event, "delta") or "")
        self._show(Text(self._thought.strip(), style="dim italic"))

    def _on_reasoning(self, event: Event) -> None:
        """What the model showed of its reasoning, dimmed, before its answer (whole: it
        replaces what streamed)."""
        self._thought = ""
        text = str(field(event, "text") or "").strip()
        if field(event, "redacted") and not text:
            text = "(reasoning kept encrypted)"
        if text:
            self._stop()
            self.console.print(Text(text, style="dim italic"))
            self._thinking()

    def _on_message_completed(self, event: Event) -> None:
        text = str(field(event, "text") or self._text)
        self._text = ""
        self._stop()
        if text.strip():
            self.console.print(Markdown(text))

    def _on_actions_requested(self, event: Event) -> None:
        now = time.monotonic()
        actions = field(event, "actions") or field(event, "calls") or []
        names = []
        for action in actions:
            if isinstance(action, Mapping):
                name = str(action.get("name") or "tool")
                call_id = str(action.get("callId") or action.get("id") or name)
                self._calls[call_id] = (name, action.get("arguments"), now)
                names.append(name)
        if names:
            self._thinking(f"running {', '.join(names)}…")

    def _on_action_result(self, event: Event) -> None:
        self._stop()
        self.console.print(self.tool_line(event))
        if self._live is None:
            self._thinking()

    def tool_line(self, event: Event) -> Text:
        """`✓ name(args) → result  0.12s` (or ✗ and the error), from an `action.result`."""
        call_id = str(field(event, "callId") or field(event, "id") or field(event, "name"))
        name, arguments, started = self._calls.pop(call_id, (None, None, None))
        name = str(field(event, "name") or name or "tool")
        if arguments is None:
            arguments = field(event, "arguments")
        status = str(field(event, "status") or "completed")
        failed = bool(field(event, "isError")) or status in ("failed", "rejected")
        duration_ms = field(event, "durationMs")
        if duration_ms is None and started is not None and status != "rejected":
            # (a rejected call never ran: the time since it was asked is no duration)
            duration_ms = (time.monotonic() - started) * 1000
        result = field(event, "result", field(event, "output", field(event, "error")))
        return _tool_text(format_call(name, arguments), status, failed, result, duration_ms)

    def _on_input_requested(self, event: Event) -> None:
        self._stop()
        request = event_request(event)
        self._announced = request_id(request)
        self.console.print(Text(f"⏸ waiting: {describe_request(request)}", style="yellow"))

    def _on_input_resolved(self, event: Event) -> None:
        approved = field(event, "approved")
        answer = field(event, "answer")
        if approved is not None:
            word = "approved" if approved else "denied"
            if field(event, "always"):
                word = "approved (always)"
            self.console.print(Text(word, style="green" if approved else "red"))
        elif answer is not None:
            self.console.print(Text(f"answered: {one_line(answer, 200)}", style="dim"))
        elif (outcome := field(event, "outcome")) is not None:
            said = {"rerun": "running it again", "failed": "treated as failed"}
            line = said.get(outcome) or f"result given: {one_line(field(event, 'result'), 200)}"
            self.console.print(Text(line, style="dim"))
        self._thinking()

    def _on_settled(self, event: Event) -> None:
        self._stop()
        if event.get("type") == "turn.cancelled":
            self.console.print(Text("turn cancelled", style="yellow"))

    def _on_compaction(self, event: Event) -> None:
        if event.get("type") == "compaction.requested":
            self._thinking("compacting history…")
        else:
            self.notice("history compacted")

    def _on_cleared(self, event: Event) -> None:
        self.notice("history cleared")


def _tool_text(call: str, status: str, failed: bool, result: Any, duration_ms: Any) -> Text:
    """`✓ call → result  0.12s`, or ✗ with `rejected` / `failed`."""
    line = Text()
    line.append("✗ " if failed else "✓ ", style="red" if failed else "green")
    line.append(call, style="bold")
    if status == "rejected":
        line.append("  rejected", style="red")
    elif failed:
        line.append("  failed", style="red")
    if result is not None and result != "":
        line.append(" → ", style="dim")
        line.append(one_line(result, 200), style="red" if failed else "")
    if isinstance(duration_ms, int | float):
        line.append(f"  {duration_ms / 1000:.2f}s", style="dim")
    return line


_HANDLERS: dict[str, Callable[[RichRenderer, Event], None]] = {
    "step.started": RichRenderer._on_step_started,
    "turn.started": RichRenderer._on_step_started,
    "message.appended": RichRenderer._on_delta,
    "message.completed": RichRenderer._on_message_completed,
    "reasoning.appended": RichRenderer._on_reasoning_delta,
    "reasoning.completed": RichRenderer._on_reasoning,
    "actions.requested": RichRenderer._on_actions_requested,
    "action.result": RichRenderer._on_action_result,
    "input.requested": RichRenderer._on_input_requested,
    "input.resolved": RichRenderer._on_input_resolved,
    "turn.completed": RichRenderer._on_settled,
    "turn.waiting": RichRenderer._on_settled,
    "turn.cancelled": RichRenderer._on_settled,
    "compaction.requested": RichRenderer._on_compaction,
    "compaction.completed": RichRenderer._on_compaction,
    "context.cleared": RichRenderer._on_cleared,
}


class RichTranscript:
    """A transcript at a terminal: replies as Markdown, tool lines as `eve chat` shows them."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(highlight=False)

    def show(
        self, found: Sequence[Entry], session_id: str, left_out: int = 0, banner: bool = True
    ) -> None:
        if banner:
            self.console.print(Text(f"session {session_id}", style="bold"))
        if left_out:
            more = f"eve log {session_id}"
            self.console.print(Text(f"… {left_out} earlier exchanges: {more}", style="dim"))
        for number, entry in enumerate(found):
            self._entry(entry, first=number == 0)

    def _entry(self, entry: Entry, first: bool) -> None:
        role = entry.get("role")
        if role == "user":
            if not first:
                self.console.print()  # a blank line between exchanges
            sender = f"{entry['by']}: " if entry.get("by") else ""
            self.console.print(Text(f"› {sender}{entry.get('text') or ''}", style="bold cyan"))
        elif role == "assistant":
            self.console.print(Markdown(str(entry.get("text") or "")))
        elif role == "tool":
            failed = bool(entry.get("failed"))
            self.console.print(Text(tool_summary(entry, 200), style="red" if failed else "green"))
        elif role == "wait":
            self.console.print(Text(f"⏸ waiting: {entry.get('text')}", style="yellow"))
        else:
            self.console.print(Text(str(entry.get("text") or ""), style="dim"))
