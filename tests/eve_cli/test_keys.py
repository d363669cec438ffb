"""The keys of events and history (`eve_cli._keys`): made by constructors only, rendering
exactly the strings store format 2 holds, and packing to exactly what it stores."""

from __future__ import annotations

import ast
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from eve_cli import _keys
from eve_cli._keys import SESSION_END, SESSION_START, Compaction, Key, generation, turn
from eve_cli.execution._keys import EventKeys, HistoryKeys
from eve_cli.execution._streams import KEY, KeyCodec, KeyedStream
from world import LocalWorld, MemoryWorld

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / ".workflow-data.example"

# Every constructor and the string it renders: store format 2, frozen (a stored key must keep
# naming the same item in every later version).
RENDERED: list[tuple[Key, str]] = [
    (SESSION_START, "start"),
    (SESSION_END, "end"),
    (generation(2).waiting, "g2:wait"),
    (generation(2).turn_failed, "g2:tfail"),
    (generation(2).cleared, "g2:clear"),
    (generation(2).compaction.requested, "g2:creq"),
    (generation(2).compaction.summary, "g2:sum"),
    (generation(2).compaction.completed, "g2:cdone"),
    (turn(3).start, "t3:start"),
    (turn(3).end, "t3:end"),
    (turn(3).first.user, "t3:in:u"),
    (turn(3).first.received, "t3:in:m"),
    (turn(3).delivery(2).user, "t3:p2:u"),
    (turn(3).delivery(2).received, "t3:p2:m"),
    (turn(3).delivery(2).resolved("t3:call_1"), "t3:p2:res:t3:call_1"),
    (turn(3).waiting(4), "t3:w4"),
    (turn(3).step(1).start, "t3:1:start"),
    (turn(3).step(1).done, "t3:1:done"),
    (turn(3).step(1).failed, "t3:1:fail"),
    (turn(3).step(1).call(0).completed, "t3:1:0"),
    (turn(3).step(1).call(2).requested, "t3:1:2:req"),
    (turn(3).step(1).call(2).reply, "t3:1:2:a"),
    (turn(3).step(1).call(2).delta(40, 12), "t3:1:2:d@40+12"),
    (turn(3).step(1).call(2).compaction.requested, "t3:1:2:creq"),
    (turn(3).step(1).call(2).compaction.summary, "t3:1:2:sum"),
    (turn(3).step(1).call(2).compaction.completed, "t3:1:2:cdone"),
    (turn(3).tool("call_1").request.requested, "t3:call_1:ireq"),
    (turn(3).tool("call_1").outcome(2).requested, "t3:call_1:o2:ireq"),
    (turn(3).tool("call_1").message, "t3:call_1:r"),
    (turn(3).tool("call_1").result, "t3:call_1:res"),
    (turn(3).tool("call_1").sleeping, "t3:call_1:sleep"),
    (turn(3).tool("call_1").task_started, "t3:call_1:task"),
    (turn(3).tool("call_1").task_waiting, "t3:call_1:twait"),
    (turn(3).tool("call_1").task_settled, "t3:call_1:tset"),
    (turn(3).limit(1).requested, "t3:limit:1:ireq"),
]


def test_every_key_renders_its_stored_string() -> None:
    assert [key.text for key, _ in RENDERED] == [text for _, text in RENDERED]
    # The ids that are not keys but stand in stored data (requests, a tool's idempotency key).
    assert turn(3).id == "t3"
    assert turn(3).tool("call_1").request.id == "t3:call_1"
    assert turn(3).tool("call_1").outcome(2).id == "t3:call_1:o2"
    assert turn(3).limit(1).id == "t3:limit:1"
    assert turn(3).tool("call_1").idempotency_key("s_ab") == "s_ab:t3:call_1"
    assert generation(2).compaction.action == "compact:g2"
    assert turn(3).step(1).call(0).compaction.action == "compact:t3:1:0"
    # A journal's action name read back (a migration finds a compaction's summary so).
    assert Compaction.of_action("compact:t3:1:0") == turn(3).step(1).call(0).compaction
    assert Compaction.of_action("compact:g2") == generation(2).compaction
    assert Compaction.of_action("model:3") is None


def test_a_delta_key_reads_back_from_its_text_and_nothing_else_does() -> None:
    call = turn(3).step(1).call(0)
    assert call.delta_of("t3:1:0:d@40+12") == (40, 12, call.delta(40, 12))
    for text in ("t3:1:1:d@40+12", "t3:1:0:d@40", "t3:1:0:d@x+1", "t3:1:0:req", "t3:1:0:d@4+"):
        assert call.delta_of(text) is None, text
    assert _keys.delta_start("2:t3:1:2:d@40+12") == 40
    assert _keys.delta_start("2:t3:1:2:a") is None


def test_only_keys_whose_items_imply_them_have_a_compact_form() -> None:
    compact = {key.text: key.compact for key, _ in RENDERED if key.compact is not None}
    assert compact == {
        "g2:wait": (),
        "t3:start": (),
        "t3:end": (),
        "t3:in:u": (3,),
        "t3:in:m": (),
        "t3:1:start": (),
        "t3:1:done": (),
        "t3:1:fail": (),
        "t3:1:0": (),
    }
    call = turn(3).step(1).call(0)
    assert call.reply.stored(5) == [5, 3, 1]
    assert call.delta(40, 12).stored(5) == [5, 40]
    assert turn(3).start.stored(5) == 5
    assert turn(3).tool("c").result.stored(5) is None


# How the example's stored keys name their constructors (the test's own reading of format 2).
_GRAMMAR: list[tuple[str, Callable[..., Key]]] = [
    (r"start", lambda: SESSION_START),
    (r"end", lambda: SESSION_END),
    (r"g(\d+):wait", lambda g: generation(int(g)).waiting),
    (r"g(\d+):tfail", lambda g: generation(int(g)).turn_failed),
    (r"g(\d+):clear", lambda g: generation(int(g)).cleared),
    (r"t(\d+):start", lambda t: turn(int(t)).start),
    (r"t(\d+):end", lambda t: turn(int(t)).end),
    (r"t(\d+):in:u", lambda t: turn(int(t)).first.user),
    (r"t(\d+):in:m", lambda t: turn(int(t)).first.received),
    (r"t(\d+):p(\d+):u", lambda t, k: turn(int(t)).delivery(int(k)).user),
    (r"t(\d+):p(\d+):m", lambda t, k: turn(int(t)).delivery(int(k)).received),
    (r"t(\d+):p(\d+):res:(.+)", lambda t, k, r: turn(int(t)).delivery(int(k)).resolved(r)),
    (r"t(\d+):w(\d+)", lambda t, k: turn(int(t)).waiting(int(k))),
    (r"t(\d+):(\d+):start", lambda t, i: turn(int(t)).step(int(i)).start),
    (r"t(\d+):(\d+):done", lambda t, i: turn(int(t)).step(int(i)).done),
    (r"t(\d+):(\d+):fail", lambda t, i: turn(int(t)).step(int(i)).failed),
    (r"t(\d+):(\d+):(\d+)", lambda t, i, m: turn(int(t)).step(int(i)).call(int(m)).completed),
    (r"t(\d+):(\d+):(\d+):req", lambda t, i, m: turn(int(t)).step(int(i)).call(int(m)).requested),
    (r"t(\d+):(\d+):(\d+):a", lambda t, i, m: turn(int(t)).step(int(i)).call(int(m)).reply),
    (
        r"t(\d+):(\d+):(\d+):d@(\d+)\+(\d+)",
        lambda t, i, m, s, n: turn(int(t)).step(int(i)).call(int(m)).delta(int(s), int(n)),
    ),
    (r"t(\d+):([^:]+):ireq", lambda t, c: turn(int(t)).tool(c).request.requested),
    (r"t(\d+):([^:]+):r", lambda t, c: turn(int(t)).tool(c).message),
    (r"t(\d+):([^:]+):res", lambda t, c: turn(int(t)).tool(c).result),
]


def _constructed(text: str) -> Key:
    for pattern, make in _GRAMMAR:
        if m := re.fullmatch(pattern, text):
            return make(*m.groups())
    raise AssertionError(f"a stored key no constructor makes: {text!r}")


def test_the_example_keys_render_and_pack_exactly_as_stored(tmp_path: Path) -> None:
    """The shipped example (written by the code before keys were a type) is stored again,
    item by item, under keys made by the constructors: every ``_k`` comes out the same."""
    data = tmp_path / "data"
    shutil.copytree(EXAMPLE, data)
    world = LocalWorld(data)
    try:
        [sid] = [p.name for p in (data / "runs").iterdir()]
        codecs: list[tuple[str, KeyCodec]] = [
            (f"events.{sid}", EventKeys()),
            (f"history.{sid}", HistoryKeys()),
        ]
        kinds: set[str] = set()
        for name, codec in codecs:
            items: list[dict[str, Any]] = world.stream_read(name)
            reader, again = KeyedStream(world, name, 0, codec), MemoryWorld()
            stream: KeyedStream | None = None
            packed = 0
            for item in items:
                full = reader.key_of(item)
                gen, _, text = full.partition(":")
                key = _constructed(text)
                assert key.text == text
                if stream is None or stream.gen != int(gen):
                    stream = KeyedStream(again, name, int(gen), codec)
                stream.append(key, {k: v for k, v in item.items() if k != KEY})
                packed += not isinstance(item[KEY], str)
                kinds.add(re.sub(r"\d+", "N", text))
            assert [i[KEY] for i in again.stream_read(name)] == [i[KEY] for i in items]
            assert again.stream_read(name) == items
            assert packed  # the compact forms are among them
        assert len(kinds) >= 15, sorted(kinds)  # a turn, steps, a tool call, answers, waits
    finally:
        world.close()


# A key formatted by hand: an f-string in the key grammar (a turn or generation id, then a
# part; a part a key ends with; a delta's span), or one built from a turn id.
_PARTS = {
    "start", "end", "wait", "tfail", "clear", "creq", "sum", "cdone", "in", "u", "m", "res",
    "ireq", "req", "a", "d", "r", "sleep", "task", "twait", "tset", "limit", "fail", "done",
}  # fmt: skip


def _hand_made_keys(path: Path) -> list[str]:
    """``path:line: template`` of each f-string in ``path`` that formats a key."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.JoinedStr):
            continue
        template, names = "", []
        for value in node.values:
            if isinstance(value, ast.FormattedValue):
                template += "{}"
                names.append(ast.unparse(value.value))
            elif isinstance(value, ast.Constant):
                template += str(value.value)
        parts = template.split(":")
        if (
            "@{}+{}" in template
            or (len(parts) > 1 and re.fullmatch(r"[tg]\{\}", parts[0]))
            or (
                len(parts) > 1
                and any(p in _PARTS or re.fullmatch(r"[pwo]\{\}", p) for p in parts[1:])
            )
            or (":" in template and any("turn_id" in n for n in names))
        ):
            found.append(f"{path}:{node.lineno}: f{template!r}")
    return found


def test_no_key_is_formatted_by_hand_outside_the_keys_module() -> None:
    made_here = ROOT / "eve_cli" / "_keys.py"
    found = [
        hit
        for path in sorted((ROOT / "eve_cli").rglob("*.py"))
        if path != made_here
        for hit in _hand_made_keys(path)
    ]
    assert not found, "make keys with eve_cli._keys' constructors:\n" + "\n".join(found)


def test_the_guard_sees_the_forms_keys_were_formatted_in(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "def f(host, gen, index, start, text, call):\n"
        '    a = f"{host.turn_id}:{index}:start"\n'
        '    b = f"g{gen}:wait"\n'
        '    c = f"{call}@{start}+{len(text)}"\n'
        '    d = f"{host.session_id}:{host.turn_id}:{call}"\n'
        '    e = f"{call}:o{index}"\n'
        '    fine = f"model {call}: {text}"\n'
    )
    lines = [hit.split(": ", 1)[0].rsplit(":", 1)[1] for hit in _hand_made_keys(sample)]
    assert lines == ["2", "3", "4", "5", "6"]
