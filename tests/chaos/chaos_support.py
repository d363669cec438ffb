"""The chaos harness: real `eve` processes on one session, killed with SIGKILL and restarted.

One *run* is one session of a scripted agent whose tools write each side effect to a file. The
harness delivers the run's messages through `eve chat -s ID` (piped input), finishes interrupted
turns with `eve resume ID` and answers approvals with `--approve all` (or leaves them parked with
`--approve ask`, exit 3). Each process is SIGKILLed at a seeded moment: on an event it writes
(the first streamed delta of a model call, a tool call starting), at a journal write
(`EVE_FAULTS`), with a delivery in flight, during a parked wait, or after a random delay; then
the next process starts. A kill planned inside a model call's streaming counts as one only if
the durable events show that call's message unfinished at the kill. A run ends when every
message was answered; `check` then compares it with an uninterrupted run.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import random
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from eve_cli.execution._stored_events import EventReader
from eve_cli.harness._input import expand_delivery
from world import Engine, World, open_world

# Seconds a scripted model call waits after its first streamed delta; a process planned to
# be killed on a delta runs the slow script (the same answers), so the kill lands inside the
# call even on a loaded machine (the harness checks that it did).
STREAM_DELAY, SLOW_STREAM_DELAY = 0.05, 1.5


def _scenario(
    rounds: int, delay: float = STREAM_DELAY
) -> tuple[list[str], list[dict[str, Any]], list[str]]:
    """Messages, the model's script and the tool tags of a session of `rounds` x 3 turns."""
    messages: list[str] = []
    script: list[dict[str, Any]] = []
    tags: list[str] = []
    for r in range(rounds):
        a, b, c, d, e = (f"{t}{r}" for t in "abcde")
        tags += [a, b, c, d, e]
        messages += [f"round {r}: record {a} and {b}", f"round {r}: guarded {c}",
                     f"round {r}: record {d} and {e}"]  # fmt: skip
        script += [
            {"text": f"Recording {a} and {b}.", "delay": delay,
             "tool_calls": [_call("record", a), _call("record", b)]},
            {"text": f"Recorded {a} and {b}.", "delay": delay},
            {"text": "", "tool_calls": [_call("guarded", c)]},
            {"text": f"Guarded {c} is done.", "delay": delay},
            {"text": f"Now {d}.", "delay": delay, "tool_calls": [_call("record", d)]},
            {"text": f"And {e}.", "delay": delay, "tool_calls": [_call("record", e)]},
            {"text": f"All recorded: {a}, {b}, {c}, {d}, {e}.", "delay": delay},
        ]  # fmt: skip
    return messages, script, tags


def _call(name: str, tag: str) -> dict[str, Any]:
    return {"name": name, "arguments": {"tag": tag}}


MESSAGES, SCRIPT, TAGS = _scenario(rounds=2)
SLOW_SCRIPT = _scenario(rounds=2, delay=SLOW_STREAM_DELAY)[1]

TOOLS = '''
import os
import time

from eve_cli import ToolContext, always, tool


def _mark(what: str, tag: str, key: str) -> None:
    fd = os.open(os.environ["CHAOS_EFFECTS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{what} {tag} {key}\\n".encode())
    finally:
        os.close(fd)


def _effect(tag: str, key: str) -> str:
    _mark("start", tag, key)
    os.write(2, b"CHAOS tool started\\n")  # tells the harness: kill now to hit a tool
    # The side effect takes a while: kills land inside it (forked runs: a shorter while).
    time.sleep(float(os.environ.get("CHAOS_TOOL_SLEEP") or 0.03))
    _mark("done", tag, key)
    return f"recorded {tag}"


@tool
def record(tag: str, ctx: ToolContext) -> str:
    """Record a tag as a side effect."""
    return _effect(tag, ctx.idempotency_key)


@tool(approval=always())
def guarded(tag: str, ctx: ToolContext) -> str:
    """Record a tag, after the user approves."""
    return _effect(tag, ctx.idempotency_key)
'''

# The kinds of moment a run must have killed at (`Kill.category`).
CATEGORIES = ("fault", "tool", "stream", "time", "delivery", "parked")
FAULTS = ("crash_before_write", "crash_mid_write", "crash_after_fsync")
SETTLE_TIMEOUT = 60.0
PROCESS_TIMEOUT = 90.0  # seconds; generous for a loaded CI machine


class ChaosFailure(AssertionError):
    """A broken guarantee; the message names the seed that replays it."""


def write_agent(root: Path) -> Path:
    agent = root / "agent"
    (agent / "tools").mkdir(parents=True, exist_ok=True)
    (agent / "script.json").write_text(json.dumps(SCRIPT))
    (agent / "script-slow.json").write_text(json.dumps(SLOW_SCRIPT))
    (agent / "agent.py").write_text(
        "import os\n\nfrom eve_cli import define_agent\n\n"
        "# CHAOS_SCRIPT: the same answers streamed slowly (a process to be killed mid-stream)\n"
        "agent = define_agent(\n"
        f"    model='scripted:' + os.environ.get('CHAOS_SCRIPT', {str(agent / 'script.json')!r})\n"
        ")\n"
    )
    (agent / "instructions.md").write_text("You record tags.")
    (agent / "tools" / "effects.py").write_text(textwrap.dedent(TOOLS))
    return agent


@dataclass
class Kill:
    """One kill: what the process was and where it was stopped."""

    process: str
    how: str

    @property
    def category(self) -> str:
        """fault, tool, stream, stream_missed (planned on a delta, but the call it saw had
        ended, or nothing streamed), time, delivery, parked or settled."""
        return self.how.split(":")[0]


@dataclass
class Run:
    """One session driven to its end through killed and restarted processes."""

    root: Path
    seed: int
    kills: list[Kill] = field(default_factory=list)
    processes: int = 0
    log: list[str] = field(default_factory=list)
    world: str = ""  # a PostgreSQL world's URL; empty: a data directory under `root`

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.data = self.root / "data"
        self.effects = self.root / "effects"
        self.agent = write_agent(self.root)
        self.env = {
            **os.environ,
            "EVE_DATA_DIR": str(self.data),
            "CHAOS_EFFECTS": str(self.effects),
            "NO_COLOR": "1",
        }
        self.env.pop("EVE_FAULTS", None)
        if self.world:
            self.env["EVE_WORLD"] = self.world
        self.sid = ""
        self.delta: tuple[Any, Any, int] | None = None  # (turn, step, index) killed at

    # -- reading the session (read-only, between processes) ----------------------------------
    def open(self) -> World:
        """The session's world, for reading between processes."""
        return open_world(self.world or str(self.data))

    def events(self) -> list[dict[str, Any]]:
        world = self.open()
        try:  # as readers see them (stored ones refer to history for their text)
            meta = Engine(world, {}).info(self.sid).meta
            reader = EventReader(world, self.sid, lambda: meta)
            return [dict(e) for e in reader.read(0, world.stream_read(f"events.{self.sid}"))]
        finally:
            world.close()

    def delivered(self) -> list[str]:
        """Messages durably in the session's inbox (a delivery either is there or never was)."""
        world = self.open()
        try:
            items, _ = world.read_inbox(self.sid)
        finally:
            world.close()
        payloads = [expand_delivery(i.payload) for i in items]  # messages are stored compact
        return [
            str(p.get("text"))
            for p in payloads
            if isinstance(p, dict) and p.get("kind") == "message"
        ]

    def results(self) -> list[str]:
        """Tags whose tool result is durable (its `action.result` event is written)."""
        return sorted(
            str(e.get("output")).removeprefix("recorded ")
            for e in self.events()
            if e.get("type") == "action.result" and e.get("status") == "completed"
        )

    def in_stream(self) -> bool:
        """Whether the model call whose delta a kill was planned on had not finished (its
        message is not completed in the durable events written before the kill)."""
        if self.delta is None:
            return False
        turn, step, at = self.delta
        self.delta = None
        return not any(
            e.get("type") == "message.completed" and e.get("turnId") == turn
            and e.get("stepIndex") == step
            for e in self.events()[at:]
        )  # fmt: skip

    def record_kill(self, process: str, how: str) -> None:
        """Note a kill (with the tool results durable at that moment) in the effects file."""
        if how.startswith("stream:") and not self.in_stream():
            how = how.replace("stream", "stream_missed", 1)
        self.delta = None
        self.kills.append(Kill(process, how))
        with open(self.effects, "a") as f:
            f.write(f"KILL {len(self.kills)} {process} {how} {','.join(self.results()) or '-'}\n")
        self.log.append(f"{process} plan={how} killed")

    def status(self) -> tuple[str, bool]:
        """(status, parked on input) folded from the events as `eve inspect` would."""
        status, parked = "waiting", False
        for e in self.events():
            kind = e.get("type")
            if kind in ("turn.started", "input.resolved", "turn.completed", "turn.failed"):
                status, parked = "running", False
            elif kind == "turn.waiting":
                status, parked = "parked", True
            elif kind == "session.waiting":
                status, parked = "waiting", False
        return status, parked

    def finished(self) -> bool:
        status, _ = self.status()
        received = [e.get("text") for e in self.events() if e.get("type") == "message.received"]
        return status == "waiting" and received == MESSAGES

    # -- processes ----------------------------------------------------------------------------
    def eve(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "eve_cli", *args]

    def create(self) -> None:
        """Create the session with `eve chat --json` and no input (the id is its first event)."""
        proc = subprocess.run(
            self.eve("chat", "--agent", str(self.agent), "--json"),
            input="", capture_output=True, text=True, env=self.env, timeout=PROCESS_TIMEOUT,
        )  # fmt: skip
        self.processes += 1
        if proc.returncode != 0:
            raise ChaosFailure(f"creating the session failed: {proc.stderr.strip()}")
        first = json.loads(proc.stdout.splitlines()[0])
        self.sid = str(first["sessionId"])

    def step(self, kill: bool) -> None:
        """Start the process the session needs next; kill it at a seeded moment if `kill`."""
        status, parked = self.status()
        delivered = self.delivered()
        received = [e.get("text") for e in self.events() if e.get("type") == "message.received"]
        # Like the uninterrupted run, send the next message only once the last one was taken
        # (a message delivered but not yet read is driven first).
        taken = received == delivered
        remaining = [m for m in MESSAGES if m not in delivered] if taken else []
        if kill and self.rng.random() < (0.6 if parked else 0.3):
            self.serve(status, parked, remaining)
            return
        if status == "running" and self.rng.random() < 0.5:
            name, args, stdin = "resume", self.eve("resume", self.sid), ""
        else:
            approve = "ask" if parked is False and self.rng.random() < 0.3 else "all"
            name = f"chat(approve={approve})"
            args = self.eve("chat", "-s", self.sid, "--agent", str(self.agent), "--json",
                            "--approve", approve)  # fmt: skip
            stdin = "".join(m + "\n" for m in remaining)
        how = self._plan(name) if kill else "none"
        start = len(self.events())
        proc, lines, readers = self._spawn(args, how, subprocess.PIPE)
        assert proc.stdin is not None
        try:
            proc.stdin.write(stdin)
            proc.stdin.close()
        except BrokenPipeError:
            pass  # it died already (a fault at its first write)
        errors = self._kill_when(proc, how, lines, start)
        try:
            proc.wait(timeout=PROCESS_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise ChaosFailure(f"{name} hung for {PROCESS_TIMEOUT}s (plan {how})") from None
        for reader in readers:
            reader.join(timeout=10)
        errors += _drain(lines)
        if proc.returncode == -signal.SIGKILL:
            self.record_kill(name, how)
            return
        if proc.returncode not in (0, 3):
            raise ChaosFailure(f"{name} exited {proc.returncode} (plan {how}): {errors}")
        self.log.append(f"{name} plan={how} rc={proc.returncode}")

    def serve(self, status: str, parked: bool, remaining: list[str]) -> None:
        """One `eve start` process: it resumes the session if interrupted; the harness
        delivers the next message or answers the pending approval over HTTP; the server is
        killed while the delivery is in flight, at the first streamed delta, mid-turn, once
        the session waits or parks, or during a parked wait nobody answers."""
        roll = self.rng.random()
        first_parked = parked and not any(k.category == "parked" for k in self.kills)
        how = (f"parked:{self.rng.uniform(0.05, 0.3):.3f}" if parked and (first_parked or
               roll < 0.3) else f"fault:{self.rng.choice(FAULTS)}@{self.rng.randint(1, 12)}"
               if roll < 0.2 else "delivery" if roll < 0.4 else "stream:1" if roll < 0.6
               else f"time:{self.rng.uniform(0.0, 0.5):.3f}" if roll < 0.8
               else "settled")  # fmt: skip
        args = self.eve("start", "--port", "0", "--agent", str(self.agent))
        proc, lines, readers = self._spawn(args, how, subprocess.DEVNULL)
        url = _serving_url(lines)
        errors = ""
        if url is not None:
            how = self._talk(proc, url, how, status, parked, remaining)
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)  # whatever it is doing: mid-turn, parked, idle
        try:
            proc.wait(timeout=PROCESS_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for reader in readers:
            reader.join(timeout=10)
        errors += _drain(lines)
        if proc.returncode != -signal.SIGKILL:
            raise ChaosFailure(f"eve start exited {proc.returncode} (plan {how}): {errors}")
        label = how if how != "settled" else ("settled:parked" if self.status()[1] else how)
        self.record_kill("start", label)

    def _spawn(
        self, args: list[str], how: str, stdin: int
    ) -> tuple[subprocess.Popen[str], queue.Queue[tuple[str, str | None]], list[threading.Thread]]:
        """Start `args` (with the planned fault armed); its output lines go to a queue."""
        env = dict(self.env)
        if how.startswith("fault:"):
            env["EVE_FAULTS"] = how.split(":", 1)[1]
        if how.startswith("stream:"):
            env["CHAOS_SCRIPT"] = str(self.agent / "script-slow.json")
        proc = subprocess.Popen(
            args, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        self.processes += 1
        lines: queue.Queue[tuple[str, str | None]] = queue.Queue()
        readers = [threading.Thread(target=_pump, args=(pipe, tag, lines), daemon=True)
                   for pipe, tag in ((proc.stdout, "out"), (proc.stderr, "err"))]  # fmt: skip
        for reader in readers:
            reader.start()
        return proc, lines, readers

    def _talk(
        self, proc: subprocess.Popen[str], url: str, how: str, status: str, parked: bool,
        remaining: list[str],
    ) -> str:  # fmt: skip
        """Deliver over HTTP what the session needs next, then wait for the planned moment;
        returns the plan carried out."""
        api = f"{url}/eve/v1/session/{self.sid}"
        body: dict[str, Any] | None = None
        sent: threading.Thread | None = None
        with httpx.Client(timeout=PROCESS_TIMEOUT) as client:
            try:
                view = client.get(api).json()
                start, running = int(view.get("events") or 0), view.get("status") == "running"
                if how.startswith("parked:"):
                    # Nobody answers: the server holds the session parked until it is killed.
                    # (An answer delivered before a kill, not yet read, resumes it instead.)
                    time.sleep(float(how.split(":")[1]))
                    return how if view.get("pending") else how.replace("parked", "time", 1)
                if parked:
                    pending = client.get(api).json().get("pending") or []
                    if pending:
                        answers = [{"requestId": p["requestId"], "approved": True}
                                   for p in pending]  # fmt: skip
                        body = {"inputResponses": answers}
                elif status == "waiting" and remaining:
                    body = {"message": remaining[0]}
                if body is not None:
                    sent = threading.Thread(target=_post, args=(client, api, body), daemon=True)
                    sent.start()
                    if how == "delivery":  # kill while the request is in flight
                        time.sleep(self.rng.uniform(0.0, 0.05))
                        return how
                if how.startswith("stream:") and (body is not None or running):
                    self._kill_at_delta(client, api, start, proc)
                    return how
                if sent is not None:
                    sent.join(PROCESS_TIMEOUT)
                if how.startswith("time:"):
                    time.sleep(float(how.split(":")[1]))
                elif how == "settled" and (body is not None or running):
                    _wait_settled(client, api, start)
            except httpx.HTTPError:
                pass  # the server died (a fault): that is the kill
        return how

    def _kill_at_delta(
        self, client: httpx.Client, api: str, start: int, proc: subprocess.Popen[str]
    ) -> None:
        """Tail the session's events from `start`; SIGKILL the server at the first streamed
        delta (or return when the session settles first)."""
        deadline = time.monotonic() + SETTLE_TIMEOUT
        with client.stream("GET", f"{api}/stream", params={"startIndex": start}) as response:
            for line in response.iter_lines():
                event = json.loads(line) if line.strip() else {}
                if event.get("type") == "message.appended":
                    proc.send_signal(signal.SIGKILL)
                    at = int(event.get("index", start))
                    self.delta = (event.get("turnId"), event.get("stepIndex"), at)
                    return
                if event.get("type") in ("session.waiting", "turn.waiting"):
                    return
                if time.monotonic() > deadline:
                    return

    def _plan(self, name: str) -> str:
        roll = self.rng.random()
        if roll < 0.3:
            return f"fault:{self.rng.choice(FAULTS)}@{self.rng.randint(1, 12)}"
        if roll < 0.5:
            return f"tool:{self.rng.randint(1, 2)}"
        if roll < 0.75 and name.startswith("chat"):  # `resume` prints no events to watch
            return f"stream:{self.rng.randint(1, 2)}"
        return f"time:{self.rng.uniform(0.0, 0.5):.3f}"

    def _kill_when(
        self,
        proc: subprocess.Popen[str],
        how: str,
        lines: queue.Queue[tuple[str, str | None]],
        start: int,
    ) -> str:
        """Wait for the planned moment and SIGKILL `proc`; returns what it wrote on stderr.

        `tool:N`: inside the N-th tool call it starts. `stream:N`: at the first streamed
        delta (event `start` or later) of the N-th model call it makes. `time:T`: T seconds
        after its first sign of work (its first output line; `resume` prints only at the
        end, so half a second after it starts). Faults kill themselves; `none` lets it finish.
        """
        errors: list[str] = []
        if how == "none" or how.startswith("fault:"):
            return ""
        kind, arg = how.split(":")
        started = kind == "time" and not any("chat" in str(a) for a in proc.args)  # type: ignore[union-attr]
        deadline = time.monotonic() + PROCESS_TIMEOUT
        seen, closed = 0, 0
        calls: set[tuple[Any, Any]] = set()
        while closed < 2:
            wait = deadline - time.monotonic()
            if started:
                wait = min(wait, float(arg) + (0.5 if seen == 0 else 0.0))
            try:
                source, line = lines.get(timeout=max(wait, 0.0))
            except queue.Empty:
                if started:
                    proc.send_signal(signal.SIGKILL)
                break
            if line is None:
                closed += 1
                continue
            if source == "err" and not line.startswith("CHAOS "):
                errors.append(line.strip())
            if kind == "time" and not started:
                started, seen = True, 1
            elif kind == "tool" and line.startswith("CHAOS tool started"):
                seen += 1
                if seen >= int(arg):
                    time.sleep(self.rng.uniform(0.0, 0.025))
                    proc.send_signal(signal.SIGKILL)
                    break
            elif kind == "stream" and source == "out" and '"message.appended"' in line:
                event = json.loads(line)
                call = (event.get("turnId"), event.get("stepIndex"))
                if event.get("index", -1) >= start and call not in calls:
                    calls.add(call)
                    if len(calls) >= int(arg):
                        proc.send_signal(signal.SIGKILL)  # at once: the call is streaming
                        self.delta = (*call, int(event["index"]))
                        break
        return " | ".join(errors)

    def drive(self, max_kills: int = 30, max_processes: int = 90) -> None:
        """Kill every process at a seeded moment until the session is done (after
        `max_kills`, processes run undisturbed so the session can finish)."""
        self.create()
        while not self.finished():
            if self.processes > max_processes:
                raise ChaosFailure(f"did not finish after {self.processes} processes")
            self.step(kill=len(self.kills) < max_kills)


def _pump(pipe: Any, tag: str, lines: queue.Queue[tuple[str, str | None]]) -> None:
    for line in pipe:
        lines.put((tag, line))
    pipe.close()
    lines.put((tag, None))


def _serving_url(lines: queue.Queue[tuple[str, str | None]]) -> str | None:
    """The URL from `eve start`'s "serving URL" line; None if it died first (a fault)."""
    deadline = time.monotonic() + PROCESS_TIMEOUT
    while time.monotonic() < deadline:
        try:
            source, line = lines.get(timeout=deadline - time.monotonic())
        except queue.Empty:
            return None
        if line is None:
            return None
        match = re.search(r"serving (http://\S+)", line)
        if source == "out" and match:
            return match.group(1)
    return None


def _post(client: httpx.Client, url: str, body: dict[str, Any]) -> None:
    # Killed in flight, or the kill came first and closed the client before this thread sent
    # (RuntimeError): either way the inbox tells what arrived.
    with contextlib.suppress(httpx.HTTPError, RuntimeError):
        client.post(url, json=body)


def _wait_settled(client: httpx.Client, api: str, start: int) -> None:
    """Until the session no longer runs (waits for a message, or parks) after event `start`;
    a session still running after SETTLE_TIMEOUT is a failure."""
    began = time.monotonic()
    with client.stream("GET", f"{api}/stream", params={"startIndex": start}) as response:
        for line in response.iter_lines():  # heartbeats come at least every 15 s
            if line.strip() and json.loads(line).get("type") in ("session.waiting", "turn.waiting"):
                return
            if time.monotonic() > began + SETTLE_TIMEOUT:
                break
    took = time.monotonic() - began
    if client.get(api).json().get("status") == "running":
        raise ChaosFailure(
            f"the session still runs under eve start after {took:.1f}s"
            + ("" if took > SETTLE_TIMEOUT else " (its event stream ended first)")
        )


def _drain(lines: queue.Queue[tuple[str, str | None]]) -> str:
    out = []
    while not lines.empty():
        source, line = lines.get()
        if source == "err" and line is not None and not line.startswith("CHAOS "):
            out.append(line.strip())
    return " | ".join(out)


# -- what must hold after every run -------------------------------------------------------------
def transcript(events: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """What the user and the model said and did, without times, ids and streamed pieces."""
    out: list[tuple[Any, ...]] = []
    for e in events:
        kind = e.get("type")
        if kind == "message.received" or kind == "message.completed":
            out.append((kind, e.get("text")))
        elif kind == "actions.requested":
            actions = [(a.get("name"), json.dumps(a.get("arguments"), sort_keys=True))
                       for a in e.get("actions", [])]  # fmt: skip
            out.append((kind, tuple(actions)))
        elif kind == "action.result":
            out.append((kind, e.get("name"), e.get("status"), repr(e.get("output",
                        e.get("result"))), e.get("isError")))  # fmt: skip
        elif kind in ("input.requested", "input.resolved"):
            out.append((kind, e.get("kind"), e.get("name"), e.get("approved")))
        elif kind in ("turn.completed", "turn.failed", "turn.cancelled", "turn.waiting",
                      "step.failed", "session.failed"):  # fmt: skip
            out.append((kind, e.get("error")))
    return out


def check(run: Run, reference: list[tuple[Any, ...]]) -> None:
    """Every guarantee the chaos suite asserts; raises ChaosFailure naming what broke."""
    events = run.events()
    got = transcript(events)
    if got != reference:
        diff = next((i for i, (a, b) in enumerate(zip(got, reference, strict=False)) if a != b),
                    min(len(got), len(reference)))  # fmt: skip
        raise ChaosFailure(
            f"transcript differs from the uninterrupted run at entry {diff}: "
            f"got {got[diff : diff + 3]}, expected {reference[diff : diff + 3]}"
        )
    _check_effects(run)
    delivered = run.delivered()
    received = [e.get("text") for e in events if e.get("type") == "message.received"]
    if delivered != received or delivered != MESSAGES:
        raise ChaosFailure(f"deliveries {delivered} but transcript received {received}")
    world = run.open()
    try:
        damaged = [f for f in world.verify() if f.error]
    finally:
        world.close()
    if damaged:
        raise ChaosFailure(f"doctor finds damage: {damaged}")


def _check_effects(run: Run) -> None:
    """Each tool effect once; a repeat only after a kill interrupted the earlier attempt
    before its result was durable (a `KILL` line lists the results durable at that kill)."""
    lines = run.effects.read_text().splitlines() if run.effects.exists() else []
    keys: dict[str, set[str]] = {}
    killed: dict[str, bool] = {}  # tag -> a kill came after its last attempt started
    completed: set[str] = set()  # tags whose result was durable at a kill after an attempt
    for line in lines:
        parts = line.split()
        if parts[0] == "KILL":
            durable = set(parts[4].split(",")) if len(parts) > 4 else set()
            for tag in [t for t, seen in killed.items() if not seen]:
                killed[tag] = True
                if tag in durable:
                    completed.add(tag)
            continue
        what, tag, key = parts
        keys.setdefault(tag, set()).add(key)
        if what == "start":
            if tag in killed and not killed[tag]:
                raise ChaosFailure(
                    f"tool effect {tag!r} ran again with no kill since its last attempt"
                )
            if tag in completed:
                raise ChaosFailure(f"tool effect {tag!r} ran again after its result was durable")
            killed[tag] = False
    starts = Counter(line.split()[1] for line in lines if line.startswith("start "))
    dones = Counter(line.split()[1] for line in lines if line.startswith("done "))
    if set(starts) != set(TAGS) or not all(dones[t] >= 1 for t in TAGS):
        raise ChaosFailure(f"tool effects missing: started {dict(starts)}, done {dict(dones)}")
    multi = {t: k for t, k in keys.items() if len(k) != 1}
    if multi:
        raise ChaosFailure(f"a re-run used another idempotency key: {multi}")
