"""The rows a `PostgresWorld` stores: the columns beside a record's body, and the stored forms
of a delivery and a stream item (docs/FORMAT.md, "The PostgreSQL schema").

A record's body is the msgpack map the journal stores (`Family.pack`'s form, or a fork's whole
record); its run, generation and kind are columns too, so SQL can see them. A delivery's body
is `{k: token, p: payload, a: at}` as msgpack, its token and time columns too; its check (the
`InboxItem.check` a `recv` record names it by) is the body's crc32, computed when it is read.
A stream item is its value as msgpack, NULL when a repair replaced it (lost).
"""

from __future__ import annotations

import datetime as dt
import zlib

import msgpack

from ..._family import GAP, START_TYPES
from ..._world import unpack_token

_KEY_T, _KEY_R, _KEY_D = b"\xa1t", b"\xa1r", b"\xa1d"


def record_row(root: str, body: bytes, gens: dict[str, int]) -> tuple[str | None, int | None,
                                                                      str | None]:  # fmt: skip
    """A record's `(run, generation, kind)`, read from the front of its body: None where the
    body does not say (a body that is no record; a generation the family's `gens` does not
    know, which the database fills in from the run's latest record). `gens`, each run's
    generation known so far, is updated by a `start` or `gen`."""
    kind, run, gen = _front(root, body)
    if run is None:
        return None, None, kind
    if kind in START_TYPES:
        gen = gen or 0
        gens[run] = gen
    elif gen is None:
        gen = gens.get(run)
    return run, gen, kind


def _front(root: str, body: bytes) -> tuple[str | None, str | None, int | None]:
    """`(kind, run, generation)` of a body: from its bytes in `Family.pack`'s form
    (`_packed`), else decoded (a `start`/`gen`, a fork's whole record, a gap)."""
    packed = _packed(root, body)
    if packed is not None:
        return packed
    try:
        rec = msgpack.unpackb(body, raw=False, strict_map_key=False)
    except Exception:
        return None, None, None
    if not isinstance(rec, dict) or not isinstance(rec.get("t"), str):
        return None, None, None
    if rec["t"] == GAP:
        return GAP, None, None
    whole, gen, rel = rec.get("run"), rec.get("g"), rec.get("r")
    run = whole if isinstance(whole, str) else root if rel is None else f"{root}.{rel}"
    return rec["t"], run, gen if type(gen) is int else None


def _packed(root: str, body: bytes) -> tuple[str, str, None] | None:
    """`Family.pack` writes `t` first, then `r` (a child run) and `d` (every kind but
    `start`/`gen`): `(kind, run, None)` read from those bytes, or None if they are not so."""
    fixmap = len(body) > 6 and 0x80 <= body[0] <= 0x8F
    if not (fixmap and body[1:3] == _KEY_T and 0xA0 <= body[3] <= 0xBF):
        return None
    at = 4 + (body[3] & 0x1F)
    try:
        kind, run = body[4:at].decode(), root
        if body[at : at + 2] == _KEY_R and 0xA0 <= body[at + 2] <= 0xBF:
            end = at + 3 + (body[at + 2] & 0x1F)
            run, at = f"{root}.{body[at + 3 : end].decode()}", end
    except (UnicodeDecodeError, IndexError):
        return None
    if body[at : at + 2] != _KEY_D or kind in START_TYPES:
        return None
    return kind, run, None


def delivery_columns(body: bytes) -> tuple[str | None, dt.datetime | None]:
    """The token and time a stored delivery's body holds (None: it holds none)."""
    try:
        rec = msgpack.unpackb(body, raw=False, strict_map_key=False)
    except Exception:
        return None, None
    if not isinstance(rec, dict) or "k" not in rec:
        return None, None
    at = rec.get("a")
    when = dt.datetime.fromtimestamp(at, dt.UTC) if isinstance(at, int | float) else None
    return unpack_token(rec["k"]), when


def delivery_check(body: bytes) -> int:
    """A delivery's check (`InboxItem.check`): its body's crc32, as every store gives it."""
    return zlib.crc32(body)
