"""Helpers of the channel tests: a real uvicorn server on an ephemeral 127.0.0.1 port serving a
real runtime (scripted model) in a thread, `python -m eve_cli start` in a subprocess, and
readers of event streams. (A module of its own: `conftest` is a shared module name.)"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import textwrap
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from eve_cli.channel import Channel, ChannelServer, ChannelSettings, bind_socket

WAIT = 20.0  # bound of every wait in these tests (seconds); normal runs take far less


def eventually(check: Callable[[], bool], timeout: float = WAIT) -> bool:
    """Poll ``check`` until true or ``timeout``: only for facts no event announces (a file
    descriptor closed by a watcher thread that notices its stop within its own timeout)."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while not check():
        if time.monotonic() > deadline:
            return False
        pause.wait(0.05)
    return True


def write_script(path: Path, entries: list[dict[str, Any]]) -> Path:
    """A `scripted:` model file."""
    path.write_text(json.dumps(entries), encoding="utf-8")
    return path


def write_agent(folder: Path, script: Path, tools: str = "") -> Path:
    """An agent folder running the scripted model, with optional `tools/main.py` source."""
    (folder / "tools").mkdir(parents=True, exist_ok=True)
    (folder / "agent.py").write_text(
        "from eve_cli import define_agent\n\n"
        f"agent = define_agent(model={f'scripted:{script}'!r}, name='t',"
        " instructions='You are a test agent.')\n",
        encoding="utf-8",
    )
    if tools:
        (folder / "tools" / "main.py").write_text(textwrap.dedent(tools), encoding="utf-8")
    return folder


def reply(text: str, **extra: Any) -> dict[str, Any]:
    return {"text": text, "tool_calls": [], **extra}


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"text": "", "tool_calls": [{"name": name, "arguments": arguments}]}


@dataclass
class ServerThread:
    """A channel served by uvicorn in a thread with its own event loop."""

    make_runtime: Callable[[], Any]
    settings: ChannelSettings = field(default_factory=ChannelSettings)
    url: str = ""
    channel: Channel | None = None
    loop: asyncio.AbstractEventLoop | None = None
    logs: list[str] = field(default_factory=list)
    server_options: dict[str, Any] = field(default_factory=dict)  # ChannelServer's keywords

    def __post_init__(self) -> None:
        self._ready = threading.Event()
        self._server: ChannelServer | None = None
        self._error: BaseException | None = None
        self.settings.log = self.logs.append
        self._thread = threading.Thread(target=self._run, name="eve-test-server", daemon=True)

    def start(self) -> ServerThread:
        self._thread.start()
        if not self._ready.wait(WAIT):
            raise TimeoutError("the test server did not start")
        if self._error is not None:
            raise self._error
        return self

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:
            self._error = exc
            self._ready.set()

    async def _main(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.channel = Channel(self.make_runtime(), self.settings)
        sock = bind_socket("127.0.0.1", 0)
        self._server = ChannelServer(
            self.channel, sock, on_ready=lambda _: self._ready.set(), **self.server_options
        )
        self.url = self._server.url
        await self._server.serve()

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` in the server's loop and return its result."""
        assert self.loop is not None
        done = threading.Event()
        box: list[Any] = []

        def call() -> None:
            box.append(fn())
            done.set()

        self.loop.call_soon_threadsafe(call)
        assert done.wait(WAIT)
        return box[0]

    def wait(self, coro: Any) -> Any:
        """Run a coroutine in the server's loop, bounded by WAIT; returns its result."""
        assert self.loop is not None
        future = asyncio.run_coroutine_threadsafe(asyncio.wait_for(coro, WAIT), self.loop)
        return future.result(WAIT + 1)

    def stop(self) -> None:
        if self._server is not None and self.loop is not None and self._thread.is_alive():
            self.loop.call_soon_threadsafe(self._server.stop)
        self._thread.join(WAIT)
        assert not self._thread.is_alive(), "the test server did not stop"


def read_events(
    url: str,
    sid: str,
    until: Callable[[dict[str, Any]], bool],
    start: int = 0,
    headers: dict[str, str] | None = None,
    timeout: float = WAIT,
) -> list[dict[str, Any]]:
    """Events of the NDJSON stream from ``start`` up to the first one ``until`` accepts.

    The whole read is bounded by ``timeout`` (heartbeats would keep a per-read timeout from
    ever firing), and the connection is closed as soon as the awaited event arrived.
    """

    async def read() -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        try:
            async with (
                asyncio.timeout(timeout),
                httpx.AsyncClient(timeout=timeout) as client,
                client.stream(
                    "GET",
                    f"{url}/eve/v1/session/{sid}/stream",
                    params={"startIndex": start},
                    headers=headers,
                ) as response,
            ):
                assert response.status_code == 200, await response.aread()
                async for line in response.aiter_lines():
                    if line.strip():
                        events.append(json.loads(line))
                        if until(events[-1]):
                            return events
        except TimeoutError:
            raise AssertionError(f"awaited event not seen in {timeout} s; got {events}") from None
        raise AssertionError(f"stream ended before the awaited event; got {events}")

    return asyncio.run(read())


def stream_length(url: str, sid: str) -> int:
    """How many events the session's stream holds now."""
    response = httpx.get(
        f"{url}/eve/v1/session/{sid}/stream",
        params={"startIndex": -1, "follow": "false"},
        timeout=WAIT,
    )
    last = [json.loads(line) for line in response.text.splitlines() if line.strip()]
    return int(last[-1]["index"]) + 1 if last else 0


def of_type(*types: str) -> Callable[[dict[str, Any]], bool]:
    return lambda event: event["type"] in types


def settled() -> Callable[[dict[str, Any]], bool]:
    """Accepts the event at which a started turn has settled: the session waits for the next
    message, parks, or ends (the view's status is then no longer ``running``)."""
    started = [False]

    def check(event: dict[str, Any]) -> bool:
        if event["type"] == "turn.started":
            started[0] = True
        return started[0] and event["type"] in (
            "session.waiting",
            "turn.waiting",
            "session.completed",
            "session.failed",
            "session.cancelled",
        )

    return check


def text_of(event: dict[str, Any]) -> str:
    """The user text of a ``message.received`` event."""
    return str(event.get("text", event.get("message")))


def output_of(event: dict[str, Any]) -> str:
    """The output of an ``action.result`` event."""
    return str(event.get("output", event.get("result")))


@dataclass
class EveProcess:
    """`python -m eve_cli start|dev ...` in a subprocess, with its URL read from stdout."""

    proc: subprocess.Popen[str]
    url: str
    stderr_lines: list[str]
    line: str = ""  # the serving line it printed

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float = WAIT) -> int:
        return self.proc.wait(timeout)

    def stderr_until(self, pattern: str) -> str:
        """Wait (bounded) for a stderr line matching ``pattern``; returns it."""
        event = threading.Event()
        found: list[str] = []

        def check() -> None:
            for line in self.stderr_lines:
                if re.search(pattern, line):
                    found.append(line)
                    event.set()
                    return

        self._watchers.append(check)
        check()
        if not event.wait(WAIT):
            raise AssertionError(f"no stderr line matched {pattern!r}: {self.stderr_lines}")
        return found[0]

    def __post_init__(self) -> None:
        self._watchers: list[Callable[[], None]] = []
        self._reader = threading.Thread(target=self._read_stderr, daemon=True)
        self._reader.start()

    def close(self) -> None:
        """Kill the process if it still runs and release its pipes."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(WAIT)
        self._reader.join(WAIT)
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr_lines.append(line.rstrip("\n"))
            for watcher in list(self._watchers):
                watcher()


def readline_bounded(proc: subprocess.Popen[str]) -> str:
    box: list[str] = []
    reader = threading.Thread(target=lambda: box.append(proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    reader.join(WAIT)
    if not box:
        proc.kill()
        raise AssertionError("the server printed no serving line in time")
    return box[0]
