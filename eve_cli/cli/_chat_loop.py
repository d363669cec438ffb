"""One chat: deliver messages, drive the session, render its events, settle its waits.

The loop owns one asyncio event loop for the whole chat and runs it only while the session
works; between turns nothing runs (reading input is plain blocking I/O). Ctrl-C while a turn
runs cancels the turn: durably (a resume honours it), and at once (a streaming model reply
stops, no tool call starts after it; one in flight finishes). A second Ctrl-C stops the
program at once, after the cancel is stored. Ctrl-C at an approval or a question prompt
cancels the turn, not the program.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import signal
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from eve_cli._facade import Facade
from eve_cli.cli._errors import CliError, CtrlC, Interrupted, WaitingForInput
from eve_cli.cli._events import ERROR_TYPES, describe_request, one_line, request_id, request_kind
from eve_cli.cli._render import Renderer, is_rich

if TYPE_CHECKING:
    from eve_cli.execution import SessionView

T = TypeVar("T")
PROBE_WAIT = 1.0  # seconds: how long `eve inspect` / `eve gc` may hold a session's lease


class _CancelTurn(Exception):
    """Ctrl-C at an approval or question prompt: cancel the turn, keep the chat."""


@dataclass
class ChatOptions:
    approve: str = "ask"  # ask | all | none
    unknown: str = "ask"  # ask | rerun | failed: an interrupted call whose outcome is unknown
    interactive: bool = False  # a person at a terminal can answer prompts
    wait: float | None = None  # seconds to wait when another process owns the session
    url: str | None = None  # the server of `eve chat --url` (hints then name it)


class ChatLoop:
    """Drives one session for `eve chat`; `next_index` is the first event not yet rendered."""

    def __init__(
        self,
        backend: Facade,
        session_id: str,
        renderer: Renderer,
        options: ChatOptions,
        loop: asyncio.AbstractEventLoop,
        next_index: int = 0,
    ) -> None:
        self.backend = backend
        self.sid = session_id
        self.renderer = renderer
        self.options = options
        self.loop = loop
        self.next_index = next_index
        self.failed = False  # a step, turn or the session failed while we watched
        self._undriven: str | None = None  # a message delivered, its turn not yet driven
        self._interrupt: Callable[[], None] = lambda: None  # a Ctrl-C during the drive
        self._broken: str | None = None  # the agent folder's load error last reported

    # -- public steps ---------------------------------------------------------------------
    def settle(self) -> SessionView:
        """Drive until the session waits for a new message; answers or reports pending input."""
        view = self.call(self._drive)
        while view.get("status") == "parked" and view.get("pending"):
            try:
                responses = [self._answer(req) for req in view["pending"]]
            except _CancelTurn:
                self.renderer.notice("cancelling the turn…")
                self.call(lambda: self.backend.cancel(self.sid))
            else:
                self.call(functools.partial(self.backend.respond, self.sid, responses))
            view = self.call(self._drive)
        return view

    def send(self, message: str) -> SessionView:
        """Deliver one user message and settle the turn it starts."""
        self.check_not_in_use()  # before delivering: "try again" must not mean "send twice"
        self._report_broken_edit()
        receipt = self.call(lambda: self.backend.deliver(self.sid, message))
        if getattr(receipt, "disposition", None) == "rejected":
            reason = getattr(receipt, "reason", None) or "rejected"
            raise CliError(f"session {self.sid} did not take the message: {reason}")
        self._undriven = message
        try:
            return self.settle()
        finally:
            self._undriven = None

    def _report_broken_edit(self) -> None:
        """Say once, before the turn, that the agent folder no longer loads (the last good
        definition keeps serving: without this line an edit would silently not apply)."""
        check = getattr(self.backend, "agent_error", None)  # local runtimes only
        error = check() if callable(check) else None
        if error is not None and error != self._broken:
            self.renderer.notice(f"the agent folder does not load; its last good version "
                                 f"serves this turn: {error}")  # fmt: skip
        self._broken = error

    def check_not_in_use(self) -> None:
        """A clear error when another live process drives the session (local sessions; a
        server drives its own). With --wait the drive waits for it instead."""
        world = getattr(self.backend, "world", None)
        if world is None or self.options.wait:
            return
        from world import OwnershipError, WorldError

        for attempt in range(2):  # a reader's probe (eve inspect) holds it for a moment
            try:
                world.acquire(self.sid, wait=PROBE_WAIT if attempt else None).release()
                return
            except OwnershipError:
                continue
            except WorldError:
                return  # reported by the drive, with its own words
        raise CliError(self._in_use())

    def _in_use(self) -> str:
        waited = f" for {self.options.wait:g}s" if self.options.wait else ""
        if self._undriven is not None:
            return (
                f"session {self.sid} is in use by another process{waited}, which has your "
                f"message and answers it there (see: eve log {self.sid}); do not send it again"
            )
        return (
            f"session {self.sid} is in use by another process{waited}; nothing was sent: try "
            "again when it is done, or pass --wait SECONDS"
        )

    def command(self, action: Callable[[str], Awaitable[Any]]) -> SessionView:
        """Run a session command (clear, compact, cancel) and settle what it triggers."""
        self.call(lambda: action(self.sid))
        return self.settle()

    def answer_pending_first(self, first_line: Callable[[], str | None]) -> None:
        """At start-up without a terminal: a pending question is answered by the first input
        line, pending approvals by --approve all|none (or exit 3)."""
        view = self.backend.session(self.sid)
        pending = view.get("pending") or []
        if view.get("status") != "parked" or not pending:
            return
        responses = []
        for req in pending:
            if request_kind(req) == "question" and not self.options.interactive:
                line = first_line()
                if line is None:
                    raise WaitingForInput(self.waiting_message(req))
                responses.append({"requestId": request_id(req), "answer": line})
            else:
                responses.append(self._answer(req))
        self.call(lambda: self.backend.respond(self.sid, responses))

    def run(self, awaitable: Awaitable[T]) -> T:
        return self.loop.run_until_complete(awaitable)

    def call(self, make: Callable[[], Awaitable[T]]) -> T:
        """Run ``make()``; with --url, a server that went away is one clear line, and at a
        terminal an offer to try again (the same step: a delivered message is not resent)."""
        if self.options.url is None:
            return self.run(make())
        import httpx

        from eve_cli.channel.client import RemoteError

        while True:
            try:
                return self.run(make())
            except (httpx.TransportError, OSError, RemoteError) as exc:
                if isinstance(exc, RemoteError) and exc.code != "unreachable":
                    raise
                reason = str(exc).removeprefix(f"cannot reach {self.options.url}: ")
                reason = one_line(reason or type(exc).__name__, 120)
                gone = f"the server at {self.options.url} went away ({reason})"
                if not self.options.interactive or not is_rich(self.renderer):
                    raise CliError(
                        f"{gone}; once `eve start` runs again: {self.chat_command()}"
                    ) from None
                if not self.renderer.ask_retry(gone):
                    raise CliError(f"{gone}; reopen with: {self.chat_command()}") from None

    # -- driving and rendering --------------------------------------------------------------
    async def _drive(self) -> SessionView:
        from world import OwnershipError

        # Not owned now (checked), so a short wait rides over a reader's probe of the lease.
        wait = self.options.wait or PROBE_WAIT
        drive = asyncio.ensure_future(self._drive_through_sleep(wait))
        follow = asyncio.ensure_future(self._follow())
        cancelling: set[asyncio.Future[Any]] = set()
        with self._ctrl_c_cancels(drive, cancelling):
            try:
                view = await drive
            except OwnershipError:
                raise CliError(self._in_use()) from None
            except asyncio.CancelledError:
                await self._stored(cancelling)
                raise Interrupted(
                    f"interrupted; session {self.sid} resumes with: {self.chat_command()}"
                ) from None
            finally:
                follow.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await follow
        self.catch_up()
        return view

    async def _drive_through_sleep(self, wait: float) -> SessionView:
        """Drive; while the turn sleeps (the sleep tool), wait for its timer or a delivery
        (a message typed here or sent from elsewhere, a Ctrl-C's cancel) and drive again."""
        view = await self.backend.drive(self.sid, wait=wait)
        told = None
        while view.get("status") == "parked" and view.get("parkedOn") == "sleep":
            wake = str(view.get("wakeAt") or "")
            read = self._sleep_reader()
            if wake != told:
                told = wake
                here = "a message typed here or" if read is not None else "a message"
                self.renderer.notice(
                    f"sleeping until {wake}; {here} sent to session {self.sid} from "
                    "elsewhere wakes it, Ctrl-C cancels the turn"
                )
            if read is None:
                await self._wait_for_work(wake)
            else:
                await self._wait_or_read(wake, read)
            view = await self.backend.drive(self.sid, wait=wait)
        return view

    def _sleep_reader(self) -> Callable[[], Awaitable[str | None]] | None:
        """How to read a message while a turn sleeps (a person at the terminal), or None."""
        if not self.options.interactive or not is_rich(self.renderer):
            return None
        return self.renderer.read_message_async()

    async def _wait_or_read(self, wake: str, read: Callable[[], Awaitable[str | None]]) -> None:
        """Until the sleep has work (its timer, a delivery), reading lines meanwhile: a line
        is delivered to the session (it wakes the sleep as a steer), Ctrl-C cancels the turn,
        Ctrl-D leaves the chat (the sleep goes on, durably)."""
        waiting = asyncio.ensure_future(self._wait_for_work(wake))
        reading: asyncio.Future[str | None] | None = None
        try:
            while not waiting.done():
                reading = asyncio.ensure_future(read())
                await asyncio.wait({waiting, reading}, return_when=asyncio.FIRST_COMPLETED)
                if not reading.done():
                    return  # woken otherwise: the prompt goes (its text is kept)
                try:
                    line = reading.result()
                except CtrlC:
                    self._interrupt()
                    continue
                if line is None:
                    raise Interrupted(
                        f"left while session {self.sid} sleeps until {wake}; `eve start` or "
                        f"`eve resume --all` drives it when it is due, or: {self.chat_command()}"
                    )
                await self._deliver_awake(line.strip())
        finally:
            waiting.cancel()
            if reading is not None and not reading.done():
                reading.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await reading

    async def _deliver_awake(self, line: str) -> None:
        """Deliver a line typed while the turn sleeps (a slash command is not run then)."""
        if not line:
            return
        if line.startswith("/"):
            self.renderer.notice(f"{line.split()[0]} is not run while the turn sleeps; "
                                 "type it again when the turn ends")  # fmt: skip
            return
        receipt = await self.backend.deliver(self.sid, line)
        if getattr(receipt, "disposition", None) == "rejected":
            reason = getattr(receipt, "reason", None) or "rejected"
            self.renderer.error(f"session {self.sid} did not take the message: {reason}")

    async def _wait_for_work(self, wake: str) -> None:
        """Until the session's timer is due or it has a delivery (in-process: the world
        says; through a server, which drives it: look again every second)."""
        import datetime as dt

        try:
            until = dt.datetime.fromisoformat(wake).timestamp()
        except ValueError:
            until = time.time() + 1.0
        world_wait = getattr(self.backend, "wait", None)
        if world_wait is not None and self.options.url is None:
            await world_wait(self.sid, max(until - time.time(), 0.0) + 0.05)
        else:
            await asyncio.sleep(min(max(until - time.time(), 0.05), 1.0))

    async def _follow(self) -> None:
        events = self.backend.tail(self.sid, self.next_index)
        try:
            async for event in events:
                self.render(event)
        finally:
            # Close the tail (and its file watcher) as soon as the drive has settled.
            aclose = getattr(events, "aclose", None)
            if aclose is not None:
                await aclose()

    def catch_up(self) -> None:
        """Render stored events not shown yet (those the live tail did not deliver)."""
        for event in self.backend.events(self.sid, self.next_index):
            self.render(event)

    def render(self, event: Mapping[str, Any]) -> None:
        index = event.get("index")
        if isinstance(index, int):
            if index < self.next_index:
                return
            self.next_index = index + 1
        if event.get("type") in ERROR_TYPES:
            self.failed = True
        self.renderer.event(event)

    @staticmethod
    async def _stored(cancelling: set[asyncio.Future[Any]]) -> None:
        """Wait (bounded) for the cancel deliveries in flight: a resume must find them."""
        if cancelling:
            with contextlib.suppress(Exception):
                await asyncio.wait(cancelling, timeout=10)

    @contextlib.contextmanager
    def _ctrl_c_cancels(
        self, drive: asyncio.Future[Any], pending: set[asyncio.Future[Any]]
    ) -> Iterator[None]:
        presses = 0

        def on_sigint() -> None:
            nonlocal presses
            presses += 1
            if presses == 1:
                self.renderer.notice("cancelling the turn… (Ctrl-C again to quit now)")
                task = asyncio.ensure_future(self.backend.cancel(self.sid))
                pending.add(task)
                task.add_done_callback(pending.discard)
            else:
                drive.cancel()

        # Ctrl-C typed at the prompt a sleeping turn shows is a key, not a SIGINT: the same.
        self._interrupt = on_sigint
        try:
            self.loop.add_signal_handler(signal.SIGINT, on_sigint)
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread
            yield
            return
        try:
            yield
        finally:
            self.loop.remove_signal_handler(signal.SIGINT)

    # -- pending input ------------------------------------------------------------------------
    def _answer(self, request: Mapping[str, Any]) -> dict[str, Any]:
        if request_kind(request) == "outcome":
            return self._settle_unknown(request)
        return self._approve_or_answer(request)

    def _approve_or_answer(self, request: Mapping[str, Any]) -> dict[str, Any]:
        rid = request_id(request)
        if request_kind(request) == "question":
            if not self.options.interactive or not is_rich(self.renderer):
                raise WaitingForInput(self.waiting_message(request))
            try:
                return {"requestId": rid, "answer": self.renderer.ask_question(request)}
            except KeyboardInterrupt:
                raise _CancelTurn from None
            except EOFError:
                raise Interrupted(self._parked_hint()) from None
        if self.options.approve == "all":
            self.renderer.notice(f"--approve all: {describe_request(request)}: approved")
            return {"requestId": rid, "approved": True, "always": False}
        if self.options.approve == "none":
            self.renderer.notice(f"--approve none: {describe_request(request)}: denied")
            return {"requestId": rid, "approved": False, "always": False}
        if not self.options.interactive or not is_rich(self.renderer):
            raise WaitingForInput(self.waiting_message(request))
        try:
            choice = self.renderer.ask_approval(request)
        except KeyboardInterrupt:
            raise _CancelTurn from None
        except EOFError:
            raise Interrupted(self._parked_hint()) from None
        return {"requestId": rid, "approved": choice != "n", "always": choice == "a"}

    def _settle_unknown(self, request: Mapping[str, Any]) -> dict[str, Any]:
        rid = request_id(request)
        if self.options.unknown in ("rerun", "failed"):
            said = {"rerun": "run again", "failed": "treated as failed"}[self.options.unknown]
            self.renderer.notice(
                f"--unknown {self.options.unknown}: {describe_request(request)}: {said}"
            )
            return {"requestId": rid, "outcome": self.options.unknown}
        if not self.options.interactive or not is_rich(self.renderer):
            raise WaitingForInput(self.waiting_message(request))
        try:
            return {"requestId": rid, **self.renderer.ask_outcome(request)}
        except KeyboardInterrupt:
            raise _CancelTurn from None
        except EOFError:
            raise Interrupted(self._parked_hint()) from None

    def _parked_hint(self) -> str:
        return f"interrupted; session {self.sid} stays parked: answer with {self.chat_command()}"

    def waiting_message(self, request: Mapping[str, Any]) -> str:
        """What exit status 3 prints: the pending request and how to answer it."""
        sid, command = self.sid, self.chat_command()
        if request_kind(request) == "question":
            how = f"echo 'YOUR ANSWER' | {command}"
        elif request_kind(request) == "outcome":
            how = f"{command} --unknown rerun (or --unknown failed)"
        else:
            how = f"{command} --approve all (or --approve none)"
        return (
            f"session {sid} is waiting for {one_line(describe_request(request), 300)} "
            f"(request {request_id(request)}); answer with: {how}, "
            f"or in a terminal: {command}"
        )

    def chat_command(self) -> str:
        """The command that reopens this session (through the same server for --url)."""
        where = f" --url {self.options.url}" if self.options.url else ""
        return f"eve chat -s {self.sid}{where}"
