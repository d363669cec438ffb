"""Checking and safely repairing a PostgreSQL world (what `eve doctor` runs on it).

`verify` reads every stored row without writing: one `Finding` per family journal, inbox and
head, per stream and per dangling hook claim (`path` names the object, never a hook token).
Every row was committed whole with its transaction, so there is no checksum to check and no
torn tail: what is checked is what the database does not keep by itself. A body that does not
decode (a record or a delivery that is not a map) is damage (`corrupt`, at its position); so
is a journal whose positions have a hole or a stream whose items do not run from 0 to its
length, and a record whose `run`, `gen` or `kind` column disagrees with its body (SQL would
show it wrongly; eve reads the body).

`repair` fixes what can be fixed without losing anything: a damaged record or delivery is
copied to the `quarantine` table and replaced in place by a gap record (a stream item by
NULL), so positions, delivery ids and stream indexes do not move; a record or stream item
missing (a hole an older eve left when the server crashed: it committed batches without
waiting for their WAL) gets a gap at its position (readers take it as lost, as they already
read the hole); a record's columns are set from its body; an unreadable head is moved there
(the engine rebuilds it from the journal); a hook claim left by a family that is gone is moved
there. Nothing is deleted without its bytes being kept. A family is repaired under its lease,
so one a live worker drives is left alone (`busy`). After a repair a family whose gaps lie
where a replay reads is `damaged` (refused by the engine), else what a gap replaced is `lost`.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ... import _codec
from ..._errors import CorruptJournalError, OwnershipError, WorldError
from ..._family import GAP, load_family
from ..._findings import Finding
from ..._world import stream_family
from .rows import record_row
from .schema import VERSION, recount_bytes

if TYPE_CHECKING:
    import psycopg

    from .world import PostgresWorld

GAP_BODY = _codec.encode({"t": GAP})
_BAD, _GAP = object(), object()


def _value(body: Any) -> Any:
    """A stored body's value; `_BAD` when it does not decode."""
    try:
        return _codec.decode(bytes(body))
    except Exception:
        return _BAD


def _rows(world: PostgresWorld, query: str) -> list[tuple[Any, ...]]:
    sql = query.format(s=world.schema_sql)
    return world._call(lambda conn, _: conn.execute(sql).fetchall())


@dataclass
class _Scan:
    """What the rows of one journal, inbox or stream hold."""

    count: int = 0
    size: int = 0
    bad: list[int] = field(default_factory=list)  # positions of bodies that do not decode
    gaps: list[int] = field(default_factory=list)  # positions of a repair's gaps
    hole: int | None = None  # the first position missing
    columns: list[int] = field(default_factory=list)  # records whose columns disagree


def _scan(rows: list[tuple[Any, ...]], kind: str) -> dict[Any, _Scan]:
    """Per key of `(key, position, body[, run, gen, kind])` rows (ordered by key and position):
    see `_Scan`. `kind`: journal (positions from 1, columns checked), inbox or stream (from 0;
    a NULL item is a gap)."""
    out: dict[Any, _Scan] = defaultdict(_Scan)
    gens: dict[str, int] = {}
    last = None
    for key, pos, body, *columns in rows:
        found = out[key]
        if key != last:
            last, gens = key, {}
        start = {"journal": 1, "stream": 0}.get(kind)
        if start is not None and found.hole is None and pos != start + found.count:
            found.hole = start + found.count
        found.count += 1
        found.size += 0 if body is None else len(body)
        state = _state(body, kind)
        if state is _BAD:
            found.bad.append(pos)
        elif state is _GAP:
            found.gaps.append(pos)
        elif columns and record_row(key, bytes(body), gens) != tuple(columns):
            found.columns.append(pos)
    return out


def _state(body: Any, kind: str) -> Any:
    """`_BAD` (damaged), `_GAP` (a repair's gap) or the value of a stored body of `kind`."""
    if body is None:
        return _GAP  # (a stream item a repair replaced)
    value = _value(body)
    if kind == "stream" or value is _BAD:
        return value
    if not isinstance(value, dict):
        return _BAD
    return _GAP if value.get("t") == GAP else value


def verify(world: PostgresWorld) -> list[Finding]:
    """Every family's journal, inbox and head, every stream, every dangling hook claim."""
    found = [Finding(world.schema_name, "format", "ok", f"schema version {VERSION}")]
    if not world.exists:
        return found
    families = {
        str(root): int(nxt) for root, nxt in _rows(world, "SELECT root, next_pos FROM {s}.families")
    }
    journals = _scan(_rows(world, "SELECT root, pos, body, run, gen, kind FROM {s}.records "
                                  "ORDER BY root, pos"), "journal")  # fmt: skip
    inboxes = _scan(_rows(world, "SELECT root, id, body FROM {s}.inbox ORDER BY root, id"), "inbox")
    heads = dict(_rows(world, "SELECT root, head FROM {s}.heads"))
    for root in sorted(families):
        journal = journals.get(root) or _Scan()
        if journal.hole is None and journal.count != families[root] - 1:
            journal.hole = journal.count + 1
        found.append(_family_finding(world, root, journal))
        if root in inboxes:
            found.append(_finding(f"{root}/inbox", "inbox", inboxes[root]))
        stored = heads.get(root)
        if stored is not None:
            found.append(_head_finding(root, bytes(stored)))
    lengths = {
        str(n): int(length) for n, length in _rows(world, "SELECT name, length FROM {s}.streams")
    }
    streams = _scan(
        _rows(
            world,
            "SELECT st.name, i.idx, i.item FROM {s}.stream_items i "
            "JOIN {s}.streams st ON st.id = i.stream ORDER BY st.name, i.idx",
        ),
        "stream",
    )
    for name in sorted(lengths):
        stream = streams.get(name) or _Scan()
        if stream.hole is None and stream.count != lengths[name]:
            stream.hole = stream.count
        found.append(_finding(f"streams/{name}", "stream", stream))
    found += _usage_findings(world)
    for (run_id,) in _rows(
        world,
        "SELECT h.run_id FROM {s}.hooks h WHERE NOT EXISTS "
        "(SELECT 1 FROM {s}.families f WHERE f.root = h.root) ORDER BY h.run_id",
    ):
        found.append(Finding(f"hooks of {run_id}", "hook", "dangling", "its run family is gone"))
    return found


def _usage_findings(world: PostgresWorld) -> list[Finding]:
    """A family whose records' or streams' bytes, as counted where they are written, are not
    what its rows hold (`stale`: its usage is wrong; a repair counts them again). Each count
    is compared with its rows in one statement: a batch a live worker commits meanwhile
    changes both or neither."""
    wrong: dict[str, list[str]] = defaultdict(list)
    for root, counted, held in _rows(
        world,
        "SELECT f.root, f.bytes, coalesce(r.n, 0) FROM {s}.families f LEFT JOIN (SELECT root, "
        "sum(octet_length(body)) AS n FROM {s}.records GROUP BY root) r ON r.root = f.root "
        "WHERE f.bytes <> coalesce(r.n, 0)",
    ):
        wrong[str(root)].append(f"its records {held} bytes, {counted} counted")
    for name, root, counted, held in _rows(
        world,
        "SELECT st.name, st.root, st.bytes, coalesce(i.n, 0) FROM {s}.streams st LEFT JOIN "
        "(SELECT stream, sum(octet_length(item)) AS n FROM {s}.stream_items GROUP BY stream) i "
        "ON i.stream = st.id WHERE st.root IS NOT NULL AND st.bytes <> coalesce(i.n, 0)",
    ):
        wrong[str(root)].append(f"stream {name} {held} bytes, {counted} counted")
    return [
        Finding(f"{root}/usage", "usage", "stale", "; ".join(said[:3]), family=root)
        for root, said in sorted(wrong.items())
    ]


def _recount(world: PostgresWorld, root: str) -> Callable[[Any], str]:
    """Count family `root`'s records' and streams' bytes again from their rows."""

    def fix(conn: psycopg.Connection[Any]) -> str:
        recount_bytes(conn, world.schema_sql, root)
        return "counted again from its rows"

    return fix


def _recounted(
    world: PostgresWorld, root: str, fix: Callable[[Any], str]
) -> Callable[[Any], str]:
    """`fix`, then the family's bytes counted again (the rows it replaced had other sizes)."""
    recount = _recount(world, root)

    def go(conn: psycopg.Connection[Any]) -> str:
        detail = fix(conn)
        recount(conn)
        return detail

    return go


def _finding(path: str, kind: str, scan: _Scan) -> Finding:
    size, count = scan.size, scan.count
    if scan.bad:
        what = f"{len(scan.bad)} damaged row(s), the first at position {scan.bad[0]}"
        return Finding(path, kind, "corrupt", what, scan.bad[0], size, count)
    if scan.hole is not None:
        what = f"nothing stored at position {scan.hole}"
        return Finding(path, kind, "corrupt", what, scan.hole, size, count)
    if scan.columns:
        what = (f"{len(scan.columns)} record(s) whose run, gen or kind column disagrees with "
                f"its body, the first at position {scan.columns[0]}")  # fmt: skip
        return Finding(path, kind, "corrupt", what, scan.columns[0], size, count)
    if scan.gaps:
        what = (f"{len(scan.gaps)} row(s) a repair replaced (kept in quarantine), the first "
                f"at {scan.gaps[0]}")  # fmt: skip
        return Finding(path, kind, "lost", what, scan.gaps[0], size, count)
    return Finding(path, kind, "ok", "", None, size, count)


def _family_finding(world: PostgresWorld, root: str, scan: _Scan) -> Finding:
    found = _finding(f"{root}/journal", "journal", scan)
    if found.state != "lost":
        return found
    try:
        load_family(world, root).check_replayable()
    except (CorruptJournalError, WorldError) as exc:
        return Finding(found.path, "journal", "damaged", str(exc), found.offset, scan.size,
                       scan.count)  # fmt: skip
    return found


def _head_finding(root: str, stored: bytes) -> Finding:
    try:
        head = _codec.decode(stored)
    except Exception:
        head = None
    if isinstance(head, dict):
        return Finding(f"{root}/head", "head", "ok", "", None, len(stored), 1)
    return Finding(f"{root}/head", "head", "unreadable", "rebuilt from the journal", 0, len(stored))


_TABLES = {"journal": ("records", "root", "pos", "body", "run, gen, kind"),
           "inbox": ("inbox", "root", "id", "body", "token, at"),
           "stream": ("stream_items", "stream", "idx", "item", "")}  # fmt: skip
# What a damaged row becomes: its body a gap, its columns NULL (a record's kind `gap`).
_GAP_ROW = {"journal": (GAP_BODY, (None, None, GAP)), "inbox": (GAP_BODY, (None, None)),
            "stream": (None, ())}  # fmt: skip


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
        elif found.state == "stale" and found.kind == "usage" and found.family is not None:
            done.append(_guarded(world, found.family, found, _recount(world, found.family)))
        elif found.state == "dangling" and found.kind == "hook":
            run_id = found.path.removeprefix("hooks of ")
            _write(world, functools.partial(_move_hooks, world, run_id=run_id))
            done.append(_done(found, "quarantined", "the claim is kept in the quarantine table"))
    return done


def _fill(world: PostgresWorld, found: Finding) -> Finding:
    table, key_col, pos_col, body_col, columns = _TABLES[found.kind]
    key = found.path.removeprefix("streams/").split("/", 1)[0]
    root = key if found.kind != "stream" else (stream_family(key) or "")
    s, kind = world.schema_sql, found.kind
    names = [c.strip() for c in columns.split(",") if c.strip()]
    update = (f"UPDATE {s}.{table} SET {', '.join(f'{c} = %s' for c in [body_col, *names])} "
              f"WHERE {key_col} = %s AND {pos_col} = %s")  # fmt: skip

    def fix(conn: psycopg.Connection[Any]) -> str:
        ref = _stream_id(conn, s, key) if kind == "stream" else key  # (items: by number)
        rows = conn.execute(
            f"SELECT {pos_col}, {body_col}{', ' if names else ''}{columns} FROM {s}.{table} "
            f"WHERE {key_col} = %s ORDER BY {pos_col} FOR UPDATE",
            [ref],
        ).fetchall()
        gap_body, gap_columns = _GAP_ROW[kind]
        damaged, moved, gens = 0, 0, dict[str, int]()
        for pos, body, *stored in rows:
            state = _state(body, kind)
            if state is _BAD:
                _keep(world, conn, kind, f"{key} at {pos}", bytes(body))
                conn.execute(update, [gap_body, *gap_columns, ref, pos])
                damaged += 1
            elif kind == "journal" and state is not _GAP:
                right = record_row(key, bytes(body), gens)
                if right != tuple(stored):
                    conn.execute(update, [body, *right, ref, pos])
                    moved += 1
        missing = _fill_holes(world, conn, kind, key, {int(r[0]) for r in rows})
        done = []
        if damaged:
            done.append(f"{damaged} damaged row(s) replaced by gap records (in quarantine)")
        if missing:
            done.append(f"{missing} missing row(s) recorded as gaps (lost in a server crash)")
        if moved:
            done.append(f"the run, gen and kind of {moved} record(s) set from their bodies")
        return ", ".join(done) or "nothing damaged or missing any more: left as it is"

    if not root:
        return _done(found, "corrupt", "the stream belongs to no family: left as it is")
    return _guarded(world, root, found, _recounted(world, root, fix))


def _fill_holes(world: PostgresWorld, conn: Any, kind: str, key: str, present: set[int]) -> int:
    """Gaps where a journal's or stream's rows are missing (positions 1.. up to the journal's
    end, indexes 0.. up to the stream's length); how many."""
    s = world.schema_sql
    if kind == "journal":
        row = conn.execute(f"SELECT next_pos FROM {s}.families WHERE root = %s", [key]).fetchone()
        wanted = range(1, int(row[0])) if row else range(0)
        insert = f"INSERT INTO {s}.records (root, pos, kind, body) VALUES (%s, %s, %s, %s)"
        gap = [GAP, GAP_BODY]
    elif kind == "stream":
        row = conn.execute(f"SELECT length FROM {s}.streams WHERE name = %s", [key]).fetchone()
        wanted = range(0, int(row[0])) if row else range(0)
        insert = f"INSERT INTO {s}.stream_items (stream, idx, item) VALUES (%s, %s, NULL)"
        gap = []
    else:
        return 0
    missing = [pos for pos in wanted if pos not in present]
    ref = _stream_id(conn, s, key) if kind == "stream" else key  # (items: by number)
    for pos in missing:
        conn.execute(insert, [ref, pos, *gap])
    if missing and kind == "stream":  # (its items changed: a cached digest no longer holds)
        conn.execute(f"UPDATE {s}.streams SET rewrites = rewrites + 1 WHERE name = %s", [key])
    return len(missing)


def _stream_id(conn: Any, s: str, name: str) -> int | None:
    row = conn.execute(f"SELECT id FROM {s}.streams WHERE name = %s", [name]).fetchone()
    return None if row is None else int(row[0])


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
