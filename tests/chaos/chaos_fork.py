"""The cheap half of the chaos suite: many short-lived workers, each SIGKILLed at a random point.

`python chaos_fork.py ROOT SEED KILLS` imports eve once, then drives sessions of the chaos
scenario (chaos_support: the same messages, answers, tools and checks) through forked children:
each child opens the session's store with a fresh `Runtime`, delivers what the session needs
next (the next message, or approvals), drives it to its next wait point and exits. The parent
SIGKILLs most children — at a random moment of their expected run time, or just after a tool
call's side effect began; or a child kills itself at a journal write (the world's fault
injection) — and starts the next one. A fork costs milliseconds where an `eve`
process costs a Python start-up, so a CI run affords a thousand kills. After each session the
checks of the full suite run: the transcript equals an uninterrupted run's, every tool effect
ran once (a repeat only where a kill came before its result was stored, with the same
idempotency key), every delivery was received once, and `doctor` finds no damage.

Prints one JSON line: sessions, kills, kills per kind, children. Exits 1 naming the seed on a
broken guarantee.
"""

from __future__ import annotations

import asyncio
import gc
import importlib
import json
import os
import pkgutil
import random
import select
import signal
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from eve_cli.runtime import Runtime
from tests.chaos.chaos_support import FAULTS, MESSAGES, ChaosFailure, Run, check, transcript
from world import _faults

MAX_KILLS_PER_SESSION = 60
KILL_CHANCE = 0.95
CHILD_TIMEOUT = 60.0


class ForkedRun(Run):
    """A chaos run whose processes are forked children of this one."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.fast = self.agent / "script-fast.json"
        script = json.loads((self.agent / "script.json").read_text())
        for entry in script:
            entry.pop("delay", None)
        self.fast.write_text(json.dumps(script))
        self.durations: list[float] = []
        self._events: list[dict[str, Any]] | None = None

    def events(self) -> list[dict[str, Any]]:
        """The stored events, read once between two children (every check asks for them)."""
        if self._events is None:
            self._events = super().events()
        return self._events

    def environ(self) -> None:
        """What this run's children read from the environment (set before each fork)."""
        os.environ.update(
            EVE_DATA_DIR=str(self.data),
            CHAOS_EFFECTS=str(self.effects),
            CHAOS_SCRIPT=str(self.fast),
            CHAOS_TOOL_SLEEP="0.004",
        )

    def next_action(self) -> tuple[str, str | None]:
        status, parked = self.status()
        if parked:
            return "approve", None
        delivered = self.delivered()
        received = [e.get("text") for e in self.events() if e.get("type") == "message.received"]
        remaining = [m for m in MESSAGES if m not in delivered] if received == delivered else []
        if status == "waiting" and remaining:
            return "deliver", remaining[0]
        return "drive", None

    def spawn(self, action: str, message: str | None, how: str = "none") -> tuple[int, int]:
        """Fork a child doing ``action``; returns its pid and the read end of its stderr. A
        ``fault:NAME@N`` plan arms the world's fault injection (`EVE_FAULTS`) in the child: it
        SIGKILLs itself at its N-th journal write (before it, torn in the middle, or after
        its fsync)."""
        read, write = os.pipe()
        gc.freeze()  # the parent's objects stay shared: a child's collections skip them
        pid = os.fork()
        if pid == 0:  # the child: never returns
            gc.disable()  # it lives for milliseconds
            os.close(read)
            if how.startswith("fault:"):
                _faults.FAULTS = _faults.parse(how.split(":", 1)[1])
                _faults.ACTIVE = True
                _faults._counts.update(write=0, read=0, compact=0)
            os.dup2(write, 2)
            code = 0
            try:
                asyncio.run(_child(self, action, message))
            except BaseException as exc:  # reported to the parent on the pipe
                os.write(2, f"CHILD FAILED {type(exc).__name__}: {exc}\n".encode())
                code = 1
            os._exit(code)
        os.close(write)
        self.processes += 1
        self._events = None  # the child writes
        return pid, read

    def step_forked(self, kill: bool) -> None:
        """One child; killed at a seeded moment if ``kill``."""
        action, message = self.next_action()
        estimate = statistics.median(self.durations[-9:]) if self.durations else 0.05
        roll = self.rng.random()
        how = (
            "none"
            if not kill
            else f"fault:{self.rng.choice(FAULTS)}@{self.rng.randint(1, 8)}"
            if roll < 0.2
            else f"tool:{self.rng.randint(1, 2)}"
            if roll < 0.5
            else f"time:{self.rng.uniform(0.0, 1.3 * estimate):.4f}"
        )
        began = time.monotonic()
        pid, pipe = self.spawn(action, message, how)
        output, killed = self._watch(pid, pipe, how, began)
        _, status = os.waitpid(pid, 0)
        os.close(pipe)
        self._events = None
        if killed or (os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL):
            self.record_kill(f"fork({action})", how)
            return
        if os.WEXITSTATUS(status) != 0:
            raise ChaosFailure(f"child {action} failed (plan {how}): {output.strip()[-2000:]}")
        self.durations.append(time.monotonic() - began)
        self.log.append(f"fork({action}) plan={how} done")

    def _watch(self, pid: int, pipe: int, how: str, began: float) -> tuple[str, bool]:
        """Read the child's stderr until it ends or the planned moment; True if killed."""
        kind, _, arg = how.partition(":")
        deadline = began + (float(arg) if kind == "time" else CHILD_TIMEOUT)
        if kind == "fault":
            kind = "none"  # the child kills itself, or finishes first
        output, tools = "", 0
        while True:
            wait = deadline - time.monotonic()
            if wait <= 0:
                if kind == "none":
                    os.kill(pid, signal.SIGKILL)
                    raise ChaosFailure(f"child hung for {CHILD_TIMEOUT}s")
                os.kill(pid, signal.SIGKILL)
                return output, True
            ready, _, _ = select.select([pipe], [], [], wait)
            if not ready:
                continue
            chunk = os.read(pipe, 65536).decode(errors="replace")
            if not chunk:
                return output, False  # the child ended by itself
            output += chunk
            if kind == "tool":
                tools += chunk.count("CHAOS tool started")
                if tools >= int(arg):
                    time.sleep(self.rng.uniform(0.0, 0.004))  # inside the side effect
                    os.kill(pid, signal.SIGKILL)
                    return output, True

    def drive_forked(self) -> None:
        """Kill children until the session is done (undisturbed after the kill budget)."""
        self.environ()
        pid, pipe = self.spawn("create", None)
        output = ""
        while chunk := os.read(pipe, 65536):
            output += chunk.decode(errors="replace")
        os.close(pipe)
        _, status = os.waitpid(pid, 0)
        self._events = None
        if status != 0:
            raise ChaosFailure(f"creating the session failed: {output}")
        self.sid = next(p.name for p in (self.data / "runs").iterdir())
        while not self.finished():
            if self.processes > 6 * MAX_KILLS_PER_SESSION:
                raise ChaosFailure(f"did not finish after {self.processes} children")
            kill = len(self.kills) < MAX_KILLS_PER_SESSION and self.rng.random() < KILL_CHANCE
            self.step_forked(kill)


async def _child(run: ForkedRun, action: str, message: str | None) -> None:
    runtime = Runtime(data_dir=run.data, agent_dir=run.agent)
    try:
        if action == "create":
            await runtime.create_session()
            return
        sid = run.sid
        if action == "approve":
            pending = runtime.session(sid)["pending"]
            answers = [{"requestId": p["requestId"], "approved": True} for p in pending]
            if answers:
                await runtime.respond(sid, answers)
        elif action == "deliver" and message is not None:
            await runtime.deliver(sid, message)
        await runtime.drive(sid, view=False)
    finally:
        runtime.close()


def warm_up(run: ForkedRun) -> None:
    """Import what a child would import, and open a runtime once: children inherit it all, so
    each costs about 20 ms of CPU instead of 45."""
    import eve_cli
    import world

    for package in (eve_cli, world):
        for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if ".cli" not in module.name and "__main__" not in module.name:
                importlib.import_module(module.name)
    Runtime(data_dir=run.root / "warm-up", agent_dir=run.agent).close()


def main(root: Path, seed: int, target: int) -> dict[str, Any]:
    rng = random.Random(seed)
    clean = ForkedRun(root / "clean", seed=0)  # uninterrupted: the reference transcript
    warm_up(clean)
    clean.environ()
    pid, pipe = clean.spawn("create", None)
    os.waitpid(pid, 0)
    os.close(pipe)
    clean._events = None
    clean.sid = next(p.name for p in (clean.data / "runs").iterdir())
    while not clean.finished():
        clean.step_forked(kill=False)
    reference = transcript(clean.events())
    if [t for t in reference if t[0] == "message.received"] != [
        ("message.received", m) for m in MESSAGES
    ]:
        raise ChaosFailure(f"the uninterrupted session's transcript is incomplete: {reference}")
    done: list[ForkedRun] = []
    while sum(len(r.kills) for r in done) < target:
        run = ForkedRun(root / f"s{len(done)}", seed=rng.randrange(1 << 30))
        try:
            run.drive_forked()
            check(run, reference)
        except Exception as exc:
            raise ChaosFailure(
                f"{exc!r} (session seed {run.seed}, data in {run.root}); children: {run.log[-12:]}"
            ) from None
        done.append(run)
    kills = [k for r in done for k in r.kills]
    return {
        "sessions": len(done),
        "kills": len(kills),
        "kinds": dict(Counter(k.category for k in kills)),
        "children": sum(r.processes for r in done),
    }


if __name__ == "__main__":
    root, seed, target = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    try:
        summary = main(root, seed, target)
    except ChaosFailure as exc:
        print(f"chaos (forked) failed; replay with CHAOS_SEED={seed}: {exc}", file=sys.stderr)
        sys.exit(1)
    print(json.dumps(summary))
