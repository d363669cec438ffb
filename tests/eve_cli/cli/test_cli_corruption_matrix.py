"""The corruption matrix: every file kind × where it is damaged, through the real commands.

A real data directory (three turns of the demo agent, one of them a tool call) is copied and
16 bytes of one file are flipped: a record in the middle, the last record (full length, so a
bad checksum, not a torn write), or a cache. Then, each as its own `eve` process: `doctor`,
`chat -p` (before any repair), `doctor --repair` (which checks again once done), `chat -p`,
`inspect`, and where the session is reported damaged `doctor --repair` again. The rule asserted:

* damage in a data file is reported by `doctor` (file and offset) and refused by `chat` with
  one line naming the session, the file and what to do — and nothing is written to it;
* a damaged cache is recovered on open: the conversation goes on;
* `--repair` keeps every byte it replaces (in `quarantine/`, with a note);
* afterwards the session works — a new message answered once, nothing earlier delivered again,
  no turn id repeated — or `doctor`, `inspect` and `chat` all report it damaged with the same
  advice, which is not to repair again (a second `--repair` changes nothing);
* what the repair replaced is said by turn: `doctor`'s `losses` name the session, the turn and
  its message, and a damaged session's `chat` and `inspect` lines quote the same turn.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from world import _journal

# Kills real processes / crash states / a browser: the slow suite (`pytest -m slow`).
pytestmark = pytest.mark.slow

MESSAGES = ("hello", "what time is it?", "add 2 and 3")
FLIP = 16


def _eve(work: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EVE_", "OPENAI", "ANTHROPIC"))}
    env["NO_COLOR"] = "1"
    env["COLUMNS"] = "200"
    return subprocess.run(
        [sys.executable, "-m", "eve_cli", *args],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    work = tmp_path_factory.mktemp("pristine")
    for n, text in enumerate(MESSAGES):
        more = ["-c"] if n else []
        done = _eve(work, "chat", *more, "-m", "demo", "-p", text, "--data", "data")
        assert done.returncode == 0, done.stderr
    [sid] = os.listdir(work / "data" / "runs")
    return work / "data", sid


def _file(data: Path, sid: str, kind: str) -> Path:
    return {
        "journal": data / "runs" / sid / "journal.msgpack",
        "inbox": data / "runs" / sid / "inbox.msgpack",
        "head": data / "runs" / sid / "head.msgpack",
        "head-plain": data / "runs" / sid / "head.msgpack",
        "events": data / "streams" / f"events.{sid}.msgpack",
        "history": data / "streams" / f"history.{sid}.msgpack",
        "index": data / "streams" / f"events.{sid}.idx",
        "hook": next((data / "hooks").iterdir()),
        "format": data / "FORMAT",
    }[kind]


def _flip(path: Path, position: str) -> tuple[int, bytes]:
    """Flip up to 16 bytes inside one record (or the middle of a cache); (offset, new bytes)."""
    data = bytearray(path.read_bytes())
    if position in ("middle", "last"):
        records = [pos for pos, _ in _journal.read_file(str(path)).records]
        ends = [*records[1:], len(data)]
        i = len(records) // 2 if position == "middle" else len(records) - 1
        start, end = records[i], ends[i]
        count = min(FLIP, end - start - 8)  # inside the body: the frame keeps its length
        at = start + 6 + (end - start - 6 - count) // 2
    else:
        count = min(FLIP, len(data) // 2)
        at = (len(data) - count) // 2
    for k in range(at, at + count):
        data[k] ^= 0x5A
    path.write_bytes(bytes(data))
    return at, bytes(data[at : at + count])


def _plain_head(path: Path) -> None:
    """The head in the form older eve wrote (one plain map, no checksum), as the example's."""
    head = _journal.head_from(path.read_bytes())
    assert head is not None
    from world import _codec

    path.write_bytes(_codec.encode(head))


@dataclass
class Outcome:
    code: int
    out: str
    err: str

    @property
    def line(self) -> str:
        return self.err.strip()


def _run(work: Path, *args: str) -> Outcome:
    done = _eve(work, *args)
    assert "Traceback" not in done.stderr, done.stderr
    return Outcome(done.returncode, done.stdout, done.stderr)


def _doctor(work: Path, *more: str) -> tuple[int, dict[str, Any]]:
    done = _run(work, "doctor", "--data", "data", "--json", *more)
    return done.code, json.loads(done.out)


def _events(work: Path, sid: str) -> list[dict[str, Any]] | None:
    done = _run(work, "inspect", sid, "--events", "--json", "--data", "data")
    if done.code:
        return None
    return [json.loads(line) for line in done.out.splitlines() if line.strip()]


def _works(events: list[dict[str, Any]] | None, sent: list[str], lost: int = 0) -> None:
    assert events is not None
    # A lost event is read around: one `event.lost` where it was, the rest as stored.
    assert sum(e["type"] == "event.lost" for e in events) == lost, events
    received = Counter(e["text"] for e in events if e["type"] == "message.received")
    assert all(n == 1 for n in received.values()), f"a message was delivered again: {received}"
    assert received[sent[-1]] == 1, "the new message was not answered"
    turns = [e["turnId"] for e in events if e["type"] == "turn.started"]
    assert len(turns) == len(set(turns)), f"a turn id repeats: {turns}"
    assert events[-1]["type"] == "session.waiting", events[-3:]


def _losses_by_turn(report: dict[str, Any], sid: str, *, replaced: bool) -> list[Any]:
    """What the repair replaced, in the user's terms: the session, the turn, its message."""
    losses: list[Any] = report["losses"]
    assert bool(losses) == replaced, report
    for loss in losses:
        assert loss["sessionId"] == sid and loss["turn"] in (1, 2, 3), loss
        assert loss["message"] in (None, MESSAGES[loss["turn"] - 1]), loss
    return losses


# (file kind, where): what today's eve got wrong is in the comments.
DATA = [
    ("journal", "middle"),  # kept writing to it; after --repair rolled back, re-delivered
    ("journal", "last"),  # a full-length bad record was cut as a torn write
    ("inbox", "middle"),  # after --repair every new message vanished
    ("inbox", "last"),
    ("events", "middle"),  # after --repair doctor said ok, chat said "run eve doctor"; then
    ("events", "last"),  # the session was damaged for a lost event: now it is read around
    ("history", "middle"),
]
CACHES = [
    ("head", "cache"),
    ("head-plain", "cache"),  # not detected; resume failed with AttributeError
    ("index", "cache"),
]
OTHER = [("hook", "whole"), ("format", "whole")]


@pytest.mark.parametrize(("kind", "position"), DATA + CACHES + OTHER)
def test_damage_is_refused_repaired_and_reported_alike(
    pristine: tuple[Path, str], tmp_path: Path, kind: str, position: str
) -> None:
    source, sid = pristine
    work = tmp_path
    data = work / "data"
    shutil.copytree(source, data)
    target = _file(data, sid, kind)
    rel = str(target.relative_to(data))
    if kind == "head-plain":
        _plain_head(target)
    _, flipped = _flip(target, position)
    damaged = target.read_bytes()
    sent = list(MESSAGES)
    is_data = kind not in ("head", "head-plain", "index")

    code, report = _doctor(work)
    found = {f["path"]: f for f in report["findings"]}
    if is_data:
        assert code == 1 and found[rel]["state"] != "ok", found.get(rel)
        before = _run(work, "chat", "-s", sid, "-p", "while damaged", "--data", "data")
        assert before.code == 1 and before.out == "" and len(before.line.splitlines()) == 1
        assert "eve doctor --repair" in before.line and rel.split("/")[-1] in before.line
        if kind not in ("format", "hook"):  # no session's own file (a hook names its token)
            assert sid in before.line, before.line
        assert target.read_bytes() == damaged, "eve wrote to a damaged file"
    else:
        assert found.get(rel, {}).get("state") != "ok" or kind == "hook", found.get(rel)
        before = _run(work, "chat", "-s", sid, "-p", "while damaged", "--data", "data")
        assert before.code == 0, before.err
        sent.append("while damaged")

    code, report = _doctor(work, "--repair")
    if is_data:
        # Every byte it replaced is kept, with a note naming the file and the offset.
        kept = [p for p in (data / "quarantine").rglob("*") if p.is_file()]
        assert any(flipped in p.read_bytes() for p in kept), kept
        notes = " ".join(p.read_text() for p in kept if p.suffix in (".txt", ".md"))
        assert rel in notes, notes

    # The findings after the repair (`--repair` checks again once it is done).
    losses = _losses_by_turn(report, sid, replaced=is_data and kind not in ("format", "hook"))
    after = _run(work, "chat", "-s", sid, "-p", "after repair", "--data", "data")
    if code == 0:
        assert after.code == 0, after.err
        sent.append("after repair")
        _works(_events(work, sid), sent, lost=1 if kind == "events" else 0)
    else:
        inspect = _run(work, "inspect", sid, "--data", "data")
        # Reported damaged, by every command alike, with what to do — never "repair" again.
        [problem] = [f for f in report["findings"] if f["state"] == "damaged"]
        assert "--repair" not in problem["detail"], problem
        assert after.code == 1 and sid in after.line and problem["detail"] in after.line
        assert inspect.code == 1 and sid in inspect.line and problem["detail"] in inspect.line
        said = f"turn {losses[0]['turn']} (“{losses[0]['message']}”)"
        assert said in after.line and said in inspect.line, (said, after.line, inspect.line)
        again_code, again = _doctor(work, "--repair")
        assert again_code == 1 and again["repairs"] == []
