"""Checking and safely repairing a PostgreSQL world (what `eve doctor` runs on it).

`verify` reads every stored row without writing: one `Finding` per family journal, inbox and
head, per stream and per dangling hook claim (`path` names the object, never a hook token).
A row whose frame does not parse with its checksum is damage (`corrupt`, at its position);
a stream whose items do not run from 0 to its length, or a journal whose positions have a
hole, is damage too (nothing here is a torn tail: every row was committed whole).

`repair` fixes what can be fixed without losing anything: a damaged record, delivery or stream
item is copied to the `quarantine` table (migration 4) and replaced in place by a gap record,
so positions, delivery ids and stream indexes do not move; a record or stream item missing
(a hole an older eve left when the server crashed: it committed batches without waiting for
their WAL) gets a gap record at its position (readers take it as lost, as they already read
the hole); an unreadable head is moved there
(the engine rebuilds it from the journal); a hook claim left by a family that is gone is moved
there. Nothing is deleted without its bytes being kept. A family is repaired under its lease,
so one a live worker drives is left alone (`busy`). After a repair a family whose gaps lie
where a replay reads is `damaged` (refused by the engine), else what a gap replaced is `lost`.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ... import _codec, _journal
from ..._errors import CorruptJournalError, OwnershipError, WorldError
from ..._family import GAP, load_family
from ..._findings import Finding
from ..._world import stream_family

if TYPE_CHECKING:
    import psycopg

    from .world import PostgresWorld

GAP_FRAME = _journal.frame({"t": GAP})


def frame_state(frame: bytes) -> dict[str, Any] | None:
    """The record of one stored frame; None when it is damaged."""
    try:
        parsed = _journal.parse(frame, 0, "row")
    except CorruptJournalError:
        return None
    if len(parsed.records) != 1 or parsed.torn or parsed.end != len(frame):
        return None
    return parsed.records[0][1]


def _rows(world: PostgresWorld, query: str) -> list[tuple[Any, ...]]:
    sql = query.format(s=world.schema_sql)
    return world._call(lambda conn, _: conn.execute(sql).fetchall())


def _scan(
    rows: list[tuple[Any, ...]], expect: Callable[[Any], int | None]
) -> dict[Any, tuple[int, int, list[int], list[int], int | None]]:
    """Per key of `(key, position, frame)` rows (ordered): count, bytes, damaged positions,
    gap positions, and the first position missing from the run `expect(key)` starts."""
    out: dict[Any, tuple[int, int, list[int], list[int], int | None]] = {}
    by_key: dict[Any, list[tuple[int, bytes]]] = defaultdict(list)
    for key, pos, frame in rows:
        by_key[key].append((int(pos), bytes(frame)))
    for key, items in by_key.items():
        bad, gaps, hole = [], [], None
        start = expect(key)
        for i, (pos, frame) in enumerate(items):
            if start is not None and hole is None and pos != start + i:
                hole = start + i
            rec = frame_state(frame)
            if rec is None:
                bad.append(pos)
            elif rec.get("t") == GAP and "v" not in rec:
                gaps.append(pos)
        out[key] = (len(items), sum(len(f) for _, f in items), bad, gaps, hole)
    return out


def verify(world: PostgresWorld) -> list[Finding]:
    """Every family's journal, inbox and head, every stream, every dangling hook claim."""
    from .schema import VERSION

    found = [Finding(world.schema_name, "format", "ok", f"schema version {VERSION}")]
    if not world.exists:
        return found
    families = {
        str(root): (int(nxt), int(inbox)) for root, nxt, inbox in
        _rows(world, "SELECT root, next_pos, inbox_next FROM {s}.families")
    }  # fmt: skip
    journals = _scan(
        _rows(world, "SELECT root, pos, frame FROM {s}.records ORDER BY root, pos"), lambda _: 1
    )
    inboxes = _scan(
        _rows(world, "SELECT root, id, frame FROM {s}.inbox ORDER BY root, id"), lambda _: None
    )
    heads = dict(_rows(world, "SELECT root, head FROM {s}.heads"))
    for root in sorted(families):
        nxt, _ = families[root]
        count, size, bad, gaps, hole = journals.get(root, (0, 0, [], [], None))
        if hole is None and count != nxt - 1:
            hole = count + 1
        found.append(_family_finding(world, root, "journal", count, size, bad, gaps, hole))
        if root in inboxes:
            count, size, bad, gaps, _ = inboxes[root]
            found.append(_finding(f"{root}/inbox", "inbox", count, size, bad, gaps, None))
        stored = heads.get(root)
        if stored is not None:
            found.append(_head_finding(root, bytes(stored)))
    lengths = {
        str(n): int(length) for n, length in _rows(world, "SELECT name, length FROM {s}.streams")
    }
    streams = _scan(
        _rows(world, "SELECT name, idx, frame FROM {s}.stream_items ORDER BY name, idx"),
        lambda _: 0,
    )
    for name in sorted(lengths):
        count, size, bad, gaps, hole = streams.get(name, (0, 0, [], [], None))
        if hole is None and count != lengths[name]:
            hole = count
        found.append(_finding(f"streams/{name}", "stream", count, size, bad, gaps, hole))
    for (run_id,) in _rows(
        world,
        "SELECT h.run_id FROM {s}.hooks h WHERE NOT EXISTS "
        "(SELECT 1 FROM {s}.families f WHERE f.root = h.root) ORDER BY h.run_id",
    ):
        found.append(Finding(f"hooks of {run_id}", "hook", "dangling", "its run family is gone"))
    return found


def _finding(
    path: str, kind: str, count: int, size: int, bad: list[int], gaps: list[int], hole: int | None
) -> Finding:
    if bad:
        what = f"{len(bad)} damaged row(s), the first at position {bad[0]}"
        return Finding(path, kind, "corrupt", what, bad[0], size, count)
    if hole is not None:
        return Finding(
            path, kind, "corrupt", f"nothing stored at position {hole}", hole, size, count
        )
    if gaps:
        what = f"{len(gaps)} row(s) a repair replaced (kept in quarantine), the first at {gaps[0]}"
        return Finding(path, kind, "lost", what, gaps[0], size, count)
    return Finding(path, kind, "ok", "", None, size, count)


def _family_finding(
    world: PostgresWorld, root: str, kind: str, count: int, size: int,
    bad: list[int], gaps: list[int], hole: int | None,
) -> Finding:  # fmt: skip
    found = _finding(f"{root}/journal", kind, count, size, bad, gaps, hole)
    if found.state != "lost":
        return found
    try:
        load_family(world, root).check_replayable()
    except (CorruptJournalError, WorldError) as exc:
        return Finding(found.path, kind, "damaged", str(exc), found.offset, size, count)
    return found


def _head_finding(root: str, stored: bytes) -> Finding:
    try:
        head = _codec.decode(stored)
    except Exception:
        head = None
    if isinstance(head, dict):
        return Finding(f"{root}/head", "head", "ok", "", None, len(stored), 1)
    return Finding(f"{root}/head", "head", "unreadable", "rebuilt from the journal", 0, len(stored))


_TABLES = {"journal": ("records", "root", "pos"), "inbox": ("inbox", "root", "id"),
           "stream": ("stream_items", "name", "idx")}  # fmt: skip


def repair(world: PostgresWorld) -> list[Finding]:
    """Fix what `verify` finds that can be fixed (see the module); what was done."""
    done: list[Finding] = []
    if not world.exists:
        return done
    for found in verify(world):
        if found.state == "corrupt" and found.kind in _TABLES and found.offset is not None:
            done.append(_fill(world, found))
        elif found.state == "unreadable" and found.kind == "head":
            root = found.path.split("/", 1)[0]
            done.append(
                _guarded(world, root, found, functools.partial(_move_head, world, root=root))
            )
        elif found.state == "dangling" and found.kind == "hook":
            run_id = found.path.removeprefix("hooks of ")
            _write(world, functools.partial(_move_hooks, world, run_id=run_id))
            done.append(_done(found, "quarantined", "the claim is kept in the quarantine table"))
    return done


def _fill(world: PostgresWorld, found: Finding) -> Finding:
    table, key_col, pos_col = _TABLES[found.kind]
    key = found.path.removeprefix("streams/").split("/", 1)[0]
    root = key if found.kind != "stream" else (stream_family(key) or "")

    def fix(conn: psycopg.Connection[Any]) -> str:
        rows = conn.execute(
            f"SELECT {pos_col}, frame FROM {world.schema_sql}.{table} WHERE {key_col} = %s "
            f"ORDER BY {pos_col} FOR UPDATE",
            [key],
        ).fetchall()
        damaged = [(int(p), bytes(f)) for p, f in rows if frame_state(bytes(f)) is None]
        for pos, frame in damaged:
            _keep(world, conn, found.kind, f"{key} at {pos}", frame)
            conn.execute(
                f"UPDATE {world.schema_sql}.{table} SET frame = %s "
                f"WHERE {key_col} = %s AND {pos_col} = %s",
                [GAP_FRAME, key, pos],
            )
        missing = _fill_holes(world, conn, found.kind, key, {int(p) for p, _ in rows})
        if not damaged and not missing:
            return "nothing damaged or missing any more: left as it is"
        done = []
        if damaged:
            done.append(f"{len(damaged)} damaged row(s) replaced by gap records (in quarantine)")
        if missing:
            done.append(f"{missing} missing row(s) recorded as gaps (lost in a server crash)")
        return ", ".join(done)

    if not root:
        return _done(found, "corrupt", "the stream belongs to no family: left as it is")
    return _guarded(world, root, found, fix)


def _fill_holes(world: PostgresWorld, conn: Any, kind: str, key: str, present: set[int]) -> int:
    """Gap records where a journal's or stream's rows are missing (positions 1.. up to the
    journal's end, indexes 0.. up to the stream's length); how many."""
    s = world.schema_sql
    if kind == "journal":
        row = conn.execute(f"SELECT next_pos FROM {s}.families WHERE root = %s", [key]).fetchone()
        wanted = range(1, int(row[0])) if row else range(0)
        insert = f"INSERT INTO {s}.records (root, pos, frame) VALUES (%s, %s, %s)"
    elif kind == "stream":
        row = conn.execute(f"SELECT length FROM {s}.streams WHERE name = %s", [key]).fetchone()
        wanted = range(0, int(row[0])) if row else range(0)
        insert = f"INSERT INTO {s}.stream_items (name, idx, frame) VALUES (%s, %s, %s)"
    else:
        return 0
    missing = [pos for pos in wanted if pos not in present]
    for pos in missing:
        conn.execute(insert, [key, pos, GAP_FRAME])
    if missing and kind == "stream":  # (its items changed: a cached digest no longer holds)
        conn.execute(f"UPDATE {s}.streams SET rewrites = rewrites + 1 WHERE name = %s", [key])
    return len(missing)


def _guarded(
    world: PostgresWorld, root: str, found: Finding, fix: Callable[[Any], str | None]
) -> Finding:
    """`fix` in one transaction, holding the family's lease (a live worker's: busy)."""
    try:
        lease = world.acquire(root) if world.family_exists(root) else None
    except OwnershipError:
        return _done(found, "busy", "a live worker holds the family: run doctor again later")
    try:
        detail = _write(world, fix)
    finally:
        if lease is not None:
            lease.release()
    state = "corrupt" if detail and "left as it is" in detail else "repaired"
    return _done(found, state, detail or "")


def _write(world: PostgresWorld, fix: Callable[[Any], str | None]) -> str | None:
    def go(conn: psycopg.Connection[Any], _: int) -> str | None:
        with conn.transaction():
            return fix(conn)

    return world._call(go)


def _keep(world: PostgresWorld, conn: Any, kind: str, where: str, data: bytes) -> None:
    conn.execute(
        f"INSERT INTO {world.schema_sql}.quarantine (kind, location, data, note) "
        "VALUES (%s, %s, %s, %s)",
        [kind, where, data, "damaged bytes eve doctor --repair replaced"],
    )


def _move_head(world: PostgresWorld, conn: Any, *, root: str) -> str:
    s = world.schema_sql
    for (head,) in conn.execute(f"SELECT head FROM {s}.heads WHERE root = %s", [root]):
        _keep(world, conn, "head", root, bytes(head))
    conn.execute(f"DELETE FROM {s}.heads WHERE root = %s", [root])
    return "moved to the quarantine table; the next drive rebuilds it from the journal"


def _move_hooks(world: PostgresWorld, conn: Any, *, run_id: str) -> None:
    s = world.schema_sql
    rows = conn.execute(f"DELETE FROM {s}.hooks WHERE run_id = %s RETURNING token", [run_id])
    for (token,) in rows.fetchall():
        _keep(world, conn, "hook", run_id, str(token).encode())


def _done(found: Finding, state: str, detail: str) -> Finding:
    return Finding(found.path, found.kind, state, detail, found.offset, found.size, found.records)
