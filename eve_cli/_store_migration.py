"""eve's part of store migrations (``world.MigrationStep``): the payloads of journal records,
which the world cannot read, brought to the current form once, when a store is opened.

``m002_session_payloads`` (store format 1 -> 2) rewrites what the pre-release readers read
through branches that are gone: session snapshots of versions 1 and 2 (every field written
in version 3, so any base reads them the same; a version-1 inline summary becomes a history
item), a turn's whole snapshot as its result (its fields as ``changes``), a turn's first
message as text (the history item the turn stores it in, ``h``), a reply's argument errors on
its tool calls (``calls``), a reply kept as a history index ``{h}`` (its text and calls
again) and a compaction's summary text in its step result (the history item, ``h``).
Registered by importing this module (``eve_cli.runtime`` does).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from eve_cli._keys import Compaction, Key, turn
from eve_cli._session import (
    _DEFAULTS,
    _KNOWN,
    CODES,
    NAMES,
    SNAPSHOT_VERSION,
    SUMMARY_ROLE,
    history_stream,
)
from eve_cli.execution import HistoryKeys, KeyedStream, resolve
from eve_cli.models import estimate_text
from world import JournalRecord, MigratingRecord, MigrationStep, register_migration_step

SESSION, TURN = "eve.session", "eve.turn"
_DRY_INDEX = -1  # what a dry run puts where a history item would be appended


def m002_session_payloads(rec: MigratingRecord) -> None:
    """Bring one journal record's eve payloads from store format 1 to 2 (see the module)."""
    record = rec.record
    handler = _HANDLERS.get((rec.workflow, record["t"]))
    if handler is not None:
        handler(rec, record)


def _session_input(rec: MigratingRecord, record: JournalRecord) -> None:
    record["input"] = snapshot_v3(record.get("input"), rec)


def _turn_input(rec: MigratingRecord, record: JournalRecord) -> None:
    data = dict(record.get("input") or {})
    data["snap"] = snap = snapshot_v3(data.get("snap"), rec)
    start = data.get("start")
    if isinstance(start, dict) and "h" not in start:  # the message's text: stored by the turn
        turns = int(snap.get(CODES["turns"], 0)) + 1
        message = {"role": "user", "content": str(start.get("text", ""))}
        index = _history(rec, snap, turn(turns).first.user, message)
        data["start"] = {"h": index, **({"d": start["d"]} if "d" in start else {})}
    record["input"] = data


def _turn_result(rec: MigratingRecord, record: JournalRecord) -> None:
    result = record.get("result")
    if isinstance(result, dict) and "snap" in result:
        whole = snapshot_v3(result["snap"], rec)
        result = {k: v for k, v in result.items() if k != "snap"}
        result["changes"] = {k: v for k, v in whole.items() if k not in ("v", "id")}
        record["result"] = result


def _turn_step(rec: MigratingRecord, record: JournalRecord) -> None:
    name, kept = str(record.get("name", "")), record.get("ok")
    if not isinstance(kept, dict):
        return
    if name.startswith("model:"):
        record["ok"] = _reply(rec, kept)
    elif (compaction := Compaction.of_action(name)) and "text" in kept and "h" not in kept:
        text = str(kept.get("text") or "")
        snap = rec.input.get("snap", {}) if rec.workflow == TURN else rec.input
        index = _history(rec, snap, compaction.summary, {"role": SUMMARY_ROLE, "content": text})
        record["ok"] = {"h": index, "tokens": estimate_text(text)}


def _reply(rec: MigratingRecord, kept: dict[str, Any]) -> dict[str, Any]:
    kept = dict(kept)
    if "h" in kept and "text" not in kept:  # kept in history inside the step: text back
        [item] = resolve(rec.world, rec.family, kept["h"], _read_history(rec, kept["h"]))
        del kept["h"]
        kept["text"] = str(item.get("content") or "")
        kept["tool_calls"] = list(item.get("tool_calls") or [])
    calls = kept.get("tool_calls") or []
    if "calls" not in kept and any(c.get("error") or c.get("raw") for c in calls):
        kept["calls"] = {
            c["id"]: {"error": c.get("error"), "raw": c.get("raw")}
            for c in calls
            if c.get("error") is not None or c.get("raw") is not None
        }
    return kept


def snapshot_v3(data: Any, rec: MigratingRecord) -> dict[str, Any]:
    """Snapshot ``data`` of any version as version 3 with every field written (read with any
    base, it is what the pre-release reader made of it); the id left out when it is the
    family's."""
    if not isinstance(data, dict) or data.get("v") == SNAPSHOT_VERSION:
        return cast("dict[str, Any]", data)  # current, or not a snapshot: as it is
    fields = {k: v for k, v in data.items() if k != "v"}
    if data.get("v", 1) >= 2:
        fields = {NAMES.get(k, k): v for k, v in fields.items()}
    summary = fields.pop("summary", None)
    values = {**_DEFAULTS, **{k: v for k, v in fields.items() if k in _KNOWN}}
    if summary is not None and values.get("summary_at") is None:  # version 1 kept it inline
        values["summary_at"] = _summary_item(rec, values, str(summary))
    out = {CODES[k]: v for k, v in values.items() if k != "id" or v != rec.family}
    out["v"] = SNAPSHOT_VERSION
    return out


def _history(rec: MigratingRecord, snap: dict[str, Any], key: Key, message: Any) -> int:
    """The history item stored under ``key`` (in the generation of ``snap``), appended with
    ``message`` when it is not there (as the pre-release turn would have on its next run)."""
    stream = KeyedStream(
        rec.world, history_stream(rec.family), int(snap.get(CODES["gen"], 0)), HistoryKeys()
    )
    keys = _history_keys(rec, stream)
    found = keys.get(stream.prefix + key.text)
    if found is not None or rec.dry_run:
        return _DRY_INDEX if found is None else found
    keys[stream.prefix + key.text] = index = stream.put(key, message)
    return index


def _history_keys(rec: MigratingRecord, stream: KeyedStream) -> dict[str, int]:
    """Every key of the family's history stream (a ``KeyedStream`` knows only its own
    generation's, at the tail; a migration asks for any), read once per family."""
    keys: dict[str, int] | None = rec.notes.get("history_keys")
    if keys is None:
        items = rec.world.stream_read(stream.name)
        keys = {stream.key_of(item): n for n, item in enumerate(items) if isinstance(item, dict)}
        rec.notes["history_keys"] = keys
    return keys


def _summary_item(rec: MigratingRecord, values: dict[str, Any], text: str) -> int:
    """A version-1 inline summary as a history item (one per text: every snapshot until the
    next compaction repeats it), found again by a migration run a second time."""
    name = history_stream(rec.family)
    found: dict[str, int] | None = rec.notes.get("summaries")
    if found is None:
        found = rec.notes["summaries"] = {
            str(item.get("content")): n
            for n, item in enumerate(rec.world.stream_read(name))
            if isinstance(item, dict) and item.get("role") == SUMMARY_ROLE
        }
    if text in found or rec.dry_run:
        return found.get(text, _DRY_INDEX)
    found[text] = index = rec.world.stream_append(name, {"role": SUMMARY_ROLE, "content": text})
    return index


def _read_history(rec: MigratingRecord, index: int) -> list[Any]:
    return rec.world.stream_read(history_stream(rec.family), index, index + 1)


_HANDLERS: dict[tuple[str, str], Callable[[MigratingRecord, JournalRecord], None]] = {
    (SESSION, "start"): _session_input,
    (SESSION, "gen"): _session_input,
    (SESSION, "step"): _turn_step,
    (TURN, "start"): _turn_input,
    (TURN, "done"): _turn_result,
    (TURN, "step"): _turn_step,
}

register_migration_step(MigrationStep(2, "eve_cli.m002_session_payloads", m002_session_payloads))
