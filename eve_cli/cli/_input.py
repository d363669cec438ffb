"""The message prompt of `eve chat` at a terminal: a line editor (prompt_toolkit).

Editing keys as in a shell (←/→, Ctrl-A/E, Ctrl-W, …), history kept per project in the data
directory (↑/↓, Ctrl-R), completion of slash commands (Tab), and several lines in one message:
a paste arrives whole (bracketed paste), Esc Enter (or Alt-Enter) starts a new line, and so does
Enter after a trailing backslash. Ctrl-C clears a half-typed line; on an empty line it exits,
as Ctrl-D does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from pathlib import Path

from prompt_toolkit import PromptSession
from prompt_toolkit.completion import CompleteEvent, Completer, Completion
from prompt_toolkit.document import Document
from prompt_toolkit.history import FileHistory, History, InMemoryHistory
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
from prompt_toolkit.keys import Keys
from prompt_toolkit.patch_stdout import patch_stdout

from eve_cli.cli._errors import CtrlC

HISTORY_FILE = "chat-history"  # in the data directory: one history per project


class SlashCompleter(Completer):
    """Completes the slash command at the start of the line."""

    def __init__(self, commands: Iterable[tuple[str, str]]) -> None:
        self.commands = list(commands)

    def get_completions(
        self, document: Document, complete_event: CompleteEvent
    ) -> Iterable[Completion]:
        del complete_event
        text = document.text_before_cursor
        if not text.startswith("/") or " " in text or "\n" in text:
            return
        for name, what in self.commands:
            if name.startswith(text):
                yield Completion(name, start_position=-len(text), display_meta=what)


def _bindings() -> KeyBindings:
    keys = KeyBindings()

    @keys.add(Keys.Enter)
    def _enter(event: KeyPressEvent) -> None:
        buffer = event.current_buffer
        if buffer.complete_state is not None and buffer.complete_state.current_completion:
            buffer.apply_completion(buffer.complete_state.current_completion)
            return
        before = buffer.document.text_before_cursor
        if before.endswith("\\") and buffer.document.is_cursor_at_the_end:
            buffer.delete_before_cursor(1)  # a trailing backslash: go on on the next line
            buffer.insert_text("\n")
            return
        buffer.validate_and_handle()

    @keys.add(Keys.Escape, Keys.Enter)
    def _newline(event: KeyPressEvent) -> None:
        event.current_buffer.insert_text("\n")

    @keys.add(Keys.ControlC)
    def _clear_or_exit(event: KeyPressEvent) -> None:
        buffer = event.current_buffer
        if buffer.text:
            buffer.reset()  # a half-typed line is dropped, the prompt stays
        else:
            event.app.exit(exception=KeyboardInterrupt())

    return keys


class LineEditor:
    """Reads messages at the terminal; ``history_dir`` None keeps history in memory only."""

    def __init__(self, history_dir: Path | None, commands: Iterable[tuple[str, str]]) -> None:
        history: History = InMemoryHistory()
        if history_dir is not None and history_dir.is_dir():
            history = FileHistory(str(history_dir / HISTORY_FILE))
        self._session: PromptSession[str] = PromptSession(
            history=history,
            completer=SlashCompleter(commands),
            complete_while_typing=False,
            key_bindings=_bindings(),
            multiline=True,  # Enter is bound above: it submits unless a line continues
            prompt_continuation=lambda width, line, wrapped: "… ".rjust(width),
            enable_history_search=False,
        )
        self._kept = ""  # typed at a prompt that was taken away (a sleep ended): shown again
        self._answers: PromptSession[str] = PromptSession(history=InMemoryHistory())

    def ask(self, prompt: str) -> str:
        """An answer to a question the chat asks (approve, a result, try again).

        Ctrl-C is read as a key, as at the message prompt: a SIGINT's effect depends on where
        in the program it lands, and at a plain ``input()`` one was once lost (the chat then
        waited for an answer that had been given).

        Raises:
            KeyboardInterrupt: Ctrl-C.
            EOFError: Ctrl-D on an empty line.
        """
        return self._answers.prompt(prompt)

    def read(self, prompt: str = "› ") -> str | None:
        """The next message; None at Ctrl-D on an empty line.

        Raises:
            KeyboardInterrupt: Ctrl-C on an empty line.
        """
        kept, self._kept = self._kept, ""
        try:
            return self._session.prompt(prompt, default=kept)
        except EOFError:
            return None

    async def read_async(self, prompt: str = "› ") -> str | None:
        """As :meth:`read`, in the running event loop (beside a sleeping turn). Cancelled, it
        keeps the half-typed text for the next prompt; output printed meanwhile goes above it.

        Raises:
            CtrlC: Ctrl-C on an empty line.
        """
        kept, self._kept = self._kept, ""
        try:
            # handle_sigint=False: the chat's own SIGINT handler stays installed.
            with patch_stdout(raw=True):
                return await self._session.prompt_async(prompt, default=kept, handle_sigint=False)
        except EOFError:
            return None
        except KeyboardInterrupt:
            raise CtrlC from None
        except asyncio.CancelledError:
            self._kept = self._session.default_buffer.text
            raise
