"""One meaning of a session: every reader of its state asks the one fold of its events.

The gate (issue 33): no module outside `eve_cli.execution._fold` switches on event type names
(producers name the type they emit; the browser has no fold), and on every World the view a
runtime keeps, a fresh fold of the stored events, `eve inspect`'s tree, the receipts and
`RemoteRuntime` agree over random turn / approval / steer / cancel sequences.
"""

from __future__ import annotations

import ast
import asyncio
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eve_cli.channel.client import RemoteRuntime
from eve_cli.cli import _tree
from eve_cli.execution import fold
from eve_cli.execution._event_form import TYPES
from eve_cli.runtime import Runtime
from tests.eve_cli.channel.channel_support import ServerThread
from tests.eve_cli.rt_support import DANGER_TOOL, call, reply, write_agent
from tests.worlds import WorldOpener

PACKAGE = Path(__file__).resolve().parents[2] / "eve_cli"
# Dotted names only: `result` (issue 34's type) is also every other module's word for a result.
NAMES = frozenset(name for name in TYPES if "." in name) | {"event.lost"}
# Where event types are declared (their names and stored numbers) and given their meaning.
DECLARED = {"_events.py", "execution/_event_form.py", "execution/_lost.py", "execution/_fold.py"}
# Producers: the first argument of these calls is the type of the event they write.
EMITTERS = {"emit", "stored_event"}
# Modules that still read event types themselves, to move onto the fold (each a reader of the
# live stream or of one event at a time). The list only shrinks.
NOT_YET = {
    "_cassette.py",
    "_losses.py",
    "_tracing/_otel.py",
    "_usage.py",
    "channel/_metrics.py",
    "evals/_outcome.py",
    "evals/_runner.py",
    "cli/_events.py",
    "cli/_render.py",
    "cli/_render_rich.py",
    "cli/_sessions.py",
    "cli/_transcript.py",
    "mcp/_service.py",
    "execution/_fork.py",
    "execution/_host.py",
    "execution/_keys.py",
    "execution/_replies.py",
    "execution/_stored_events.py",
    "execution/_turn.py",
}


def _named_types(path: Path) -> list[str]:
    """The event type names ``path`` uses other than as the type of an event it emits."""
    if path.suffix == ".js":
        found = re.findall(r"""["']([a-z]+\.[a-z]+)["']""", path.read_text(encoding="utf-8"))
        return [name for name in found if name in NAMES]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    emitted: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in EMITTERS:
                emitted.add(id(node.args[0]))
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and node.value in NAMES and id(node) not in emitted
    ]


def test_no_module_outside_the_fold_switches_on_event_types() -> None:
    offenders: dict[str, list[str]] = {}
    for path in sorted([*PACKAGE.rglob("*.py"), *PACKAGE.rglob("*.js")]):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel in DECLARED or rel in NOT_YET:
            continue
        if names := _named_types(path):
            offenders[rel] = sorted(set(names))
    assert not offenders, f"read event types through eve_cli.execution's fold: {offenders}"
    still = {rel for rel in NOT_YET if _named_types(PACKAGE / rel)}
    assert still == NOT_YET, f"moved onto the fold: take them off NOT_YET: {NOT_YET - still}"


def test_the_gate_finds_a_switch(tmp_path: Path) -> None:
    """The check above can fail: a comparison with a type name is found, an emit is not."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        'def f(host, event):\n    host.emit("turn.started", {})\n'
        '    return event.get("type") == "turn.completed"\n'
    )
    assert _named_types(probe) == ["turn.completed"]
    script = tmp_path / "probe.js"
    script.write_text('if (event.type === "turn.waiting") render();\n')
    assert _named_types(script) == ["turn.waiting"]


# -- the same sessions, read by every reader ------------------------------------------------
OPS = st.lists(
    st.sampled_from(["steer", "queue", "drive", "approve", "deny", "cancel"]),
    min_size=1,
    max_size=10,
)
# Fields the runtime adds to the fold's view (its meta, its folder, the page of its turns).
ADDED: tuple[str, ...] = ("agent", "mode", "model", "agentDir", "forkedFrom", "forks")
ADDED += ("turnCount", "turnsFrom")
ADDED += ("earlier",)


def _folded(view: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in view.items() if k not in ADDED}


@pytest.mark.slow
def test_view_receipts_tree_and_remote_agree(open_world: WorldOpener, tmp_path: Path) -> None:
    script = [entry for n in range(200) for entry in (call("danger", x=n), reply(f"ok {n}"))]
    agent = write_agent(tmp_path / "agent", script=script, tools={"danger": DANGER_TOOL})
    server = ServerThread(lambda: Runtime(agent_dir=agent, world=open_world())).start()
    reader = Runtime(agent_dir=agent, world=open_world(), load_agent=False)
    remote = RemoteRuntime(server.url)
    try:
        _agree(remote, reader)
    finally:
        remote.close()
        server.stop()
        reader.close()


def _agree(remote: RemoteRuntime, reader: Runtime) -> None:
    @settings(max_examples=12, suppress_health_check=list(HealthCheck))
    @given(ops=OPS)
    def check(ops: list[str]) -> None:
        asyncio.run(_session(remote, reader, ops))

    check()


async def _session(remote: RemoteRuntime, reader: Runtime, ops: list[str]) -> None:
    sid = await remote.create_session()
    receipts: dict[str, str] = {}
    for n, op in enumerate(ops):
        if op in ("steer", "queue"):
            text = f"m{n}"
            receipt = await remote.deliver(sid, text, op)  # type: ignore[arg-type]
            receipts[text] = receipt.disposition
        elif op == "drive":
            await remote.drive(sid)
        elif op in ("approve", "deny"):
            view = await remote.drive(sid)
            answers = [
                {"requestId": p["requestId"], "approved": op == "approve"} for p in view["pending"]
            ]
            if answers:
                await remote.respond(sid, answers)
        else:
            await remote.cancel(sid)
    # Settle: answer whatever is still asked until the session waits with every message taken.
    for _ in range(40):
        view = await remote.drive(sid)
        if view["pending"]:
            answers = [{"requestId": p["requestId"], "approved": True} for p in view["pending"]]
            await remote.respond(sid, answers)
            continue
        if view["status"] != "running":
            break
    # Read while the server may still write (a cancel's drive): each view against a fresh fold
    # of the events it had, the events read last.
    kept = await reader.call(reader.session, sid)
    served = remote.session(sid)
    events = await reader.call(reader.events, sid)
    fresh = fold(sid, events)
    for view in (kept, served):
        assert _folded(dict(view)) == _folded(dict(fold(sid, events[: view["events"]])))
    assert _tree.build(kept) == _tree.build(fold(sid, events[: kept["events"]]))
    assert _tree.build(served) == _tree.build(fold(sid, events[: served["events"]]))
    assert view["status"] == fresh["status"]  # RemoteRuntime.drive settled where the view is
    seen = {e["text"]: e.get("disposition") for e in events if e["type"] == "message.received"}
    # Each delivered message was taken as its receipt said; a queued one starts a later turn.
    delivered = {text: _TAKEN_AS.get(r, r) for text, r in receipts.items() if r != "rejected"}
    assert {text: seen.get(text) for text in delivered} == delivered, (receipts, seen)


_TAKEN_AS = {"queued": "started"}
