"""Forking a run family: a new family whose durable state is another's as of a checkpoint.

A checkpoint is a journal position (`WorkflowContext.checkpoint()` tells one; the latest
record by default) plus how many items of each of the family's streams go with it (the caller
knows which items its workflow code had appended by then). The fork holds:

* the journal records a replay of the source at that position would read (from the earliest
  current generation of a run unfinished there, `Family.scan_start`), and nothing older;
* the first `n` items of each named stream, under the fork's name (`<kind>.<fork>[...]`);
* fresh hook tokens in place of every token the source's runs hold, everywhere they occur
  in the copied records (inputs and results included: 128+ random bits never collide with
  other data), claimed for the fork's runs.

Records are stored whole (the version-1 form every reader takes), so they need neither the
source's head nor its inbox: a delivery a copied run had received is carried in its `recv`
record with no inbox id (the fork's inbox starts empty and belongs to it alone). Replaying the
fork returns every recorded step result without running the step again (D1); what comes after
the checkpoint runs live, in the fork only. The source is only read (no lease): it may be
driven by another process meanwhile, and a read of its journal is a prefix of it.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from . import _codec
from ._errors import ForkError
from ._family import GAP, START_TYPES, Family
from ._records import JournalRecord
from ._store import scheduling
from ._world import World, check_run_id, stream_family

_HEX = re.compile(r"[0-9a-f]+")


@dataclass(frozen=True)
class ForkPlan:
    """What a fork writes: the fork's journal (`bodies`), the streams it copies (fork name →
    (source name, items)), the hooks it claims (token → run id), and the token map."""

    root: str
    bodies: list[bytes]
    streams: dict[str, tuple[str, int]]
    hooks: dict[str, str]
    tokens: dict[str, str] = field(default_factory=dict)  # source token -> fork token


def fresh_token(old: str) -> str:
    """A new token shaped like `old` (hex of its length, else 192 random bits)."""
    if _HEX.fullmatch(old) and len(old) % 2 == 0 and len(old) >= 32:
        return secrets.token_hex(len(old) // 2)
    return secrets.token_urlsafe(24)


def renamed_stream(name: str, source: str, target: str) -> str:
    """`<kind>.<source>[...]` as the fork's stream: `<kind>.<target>[...]`."""
    kind, _, rest = name.partition(".")
    if stream_family(name) != source:
        raise ForkError(f"stream {name!r} does not belong to run family {source}")
    return f"{kind}.{target}{rest[len(source) :]}"


def plan_fork(
    world: World,
    source: str,
    target: str,
    *,
    at: int | None = None,
    streams: Mapping[str, int] | None = None,
    meta: dict[str, Any] | None = None,
    aliases: Mapping[str, str] | None = None,
) -> ForkPlan:
    """The fork of family `source` at journal position `at` (inclusive; None: the latest
    record) as family `target`, with the first `n` items of each stream in `streams`
    (source name → n); `meta`: the fork's root meta (default: the source's), in which the
    source's tokens are replaced like everywhere else; `aliases`: more strings replaced so
    (the caller's own names for the family that its data holds, such as its id)."""
    check_run_id(source)
    check_run_id(target)
    if "." in source or "." in target:
        raise ForkError("only a root run's family can be forked, as a root run")
    family, kept = _read_to(world, source, at)
    runs = {whole["run"] for _, whole in kept if isinstance(whole.get("run"), str)}
    held = _held_hooks(family, kept, runs)
    tokens = _fresh_tokens(family, held)
    if meta is None:
        meta = family.runs[source].meta if source in family.runs else {}
    rename = _Renamer(family, source, target, tokens, meta, aliases or {})
    bodies = [_codec.encode(rename.record(whole)) for _, whole in kept]
    hooks = {tokens[t]: rename.run(r) for r in sorted(runs) if not family.runs[r].finished
             for t in sorted(held[r])}  # fmt: skip
    wanted = (streams or {}).items()
    copied = {renamed_stream(name, source, target): (name, n) for name, n in wanted}
    return ForkPlan(target, bodies, copied, hooks, tokens)


def _held_hooks(
    family: Family, kept: list[tuple[int, JournalRecord]], runs: set[str]
) -> dict[str, set[str]]:
    """The hooks each of ``runs`` holds at the fork's point: its generation's and those its
    records claimed."""
    held: dict[str, set[str]] = {r: set(family.runs[r].gen_hooks) for r in runs}
    for _, whole in kept:
        if whole.get("t") == "hook":
            held[whole["run"]].add(whole["token"])
    return held


def _fresh_tokens(family: Family, held: Mapping[str, set[str]]) -> dict[str, str]:
    """A new token for each of the source's: those the fork's runs hold, in a stable order,
    then every other one (a token also stands in data after its run let it go)."""
    tokens: dict[str, str] = {}
    for r in sorted(held):
        for token in sorted(held[r]):
            tokens.setdefault(token, fresh_token(token))
    for run in family.runs.values():
        for token in sorted(run.hooks):
            tokens.setdefault(token, fresh_token(token))
    return tokens


def _read_records(
    world: World, family: Family, at: int | None
) -> list[tuple[int, JournalRecord]]:
    """The family's records (whole) up to position ``at`` (None: all), applied to it."""
    read: list[tuple[int, JournalRecord]] = []
    for pos, stored in world.load(family.root, 0).records:
        if at is not None and pos > at:
            break
        read.append((pos, family.apply(pos, stored)))
    if not read or (at is not None and all(pos != at for pos, _ in read)):
        raise ForkError(
            f"run family {family.root} has no record at position {at}: no such checkpoint is "
            "stored"
        )
    return read


def _read_to(
    world: World, source: str, at: int | None
) -> tuple[Family, list[tuple[int, JournalRecord]]]:
    """The family `source` as of position `at` and the records (whole) a replay there reads."""
    family = Family(source)
    family.inbox_name = scheduling(world).inbox_name(source)
    family.read_inbox(world)  # `recv` records take their payloads from it
    read = _read_records(world, family, at)
    scan = family.scan_start()
    kept = [(pos, rec) for pos, rec in read if pos >= scan and rec.get("t") != GAP]
    if not kept:
        raise ForkError(f"run family {source} has finished: there is nothing left to fork")
    if any(pos >= scan for pos in family.gaps):
        raise family.gap_error(next(pos for pos in family.gaps if pos >= scan))
    lost = next((whole for _, whole in kept if "lost" in whole), None)
    if lost is not None:
        raise family.lost_error(lost)
    return family, kept


class _Renamer:
    """Turns the source's whole records into the fork's: runs renamed, tokens replaced, each
    run's first record carrying what a load would otherwise take from the source's head."""

    def __init__(
        self,
        family: Family,
        source: str,
        target: str,
        tokens: Mapping[str, str],
        meta: dict[str, Any],
        aliases: Mapping[str, str],
    ) -> None:
        self.family, self.source, self.target = family, source, target
        self.tokens, self.meta = tokens, meta  # the caller's meta: its tokens alone replaced
        self.values = {**aliases, **tokens}
        self.first: set[str] = set()

    def run(self, run_id: str) -> str:
        return self.target + run_id[len(self.source) :]

    def record(self, whole: JournalRecord) -> JournalRecord:
        # The world's own fields are renamed from the record as read (an alias may be a
        # run id: it must not be replaced there before it is renamed).
        rec: dict[str, Any] = _swap(whole, self.values)
        run_id = whole["run"]
        rec["run"] = self.run(run_id)
        kind = rec["t"]
        if kind in START_TYPES:
            rec["inbox"] = {"w": 0, "x": []}  # the fork's own inbox: empty
            parent = whole.get("parent")
            if parent:
                rec["parent"] = self.run(parent)
            if run_id not in self.first:  # what a load beginning here would take from the head
                run = self.family.runs[run_id]
                rec["workflow"] = run.workflow
                kept = self.meta if run_id == self.source else _swap(run.meta, self.values)
                rec["meta"] = _swap(kept, self.tokens)
                rec["created"] = run.created
        elif kind == "recv":
            rec["ids"] = []  # carried here: the fork's inbox never held it
            rec.pop("c", None)
        elif kind == "child":
            rec["child"] = self.run(whole["child"])
        elif kind == "park" and isinstance((whole.get("waiting") or {}).get("child"), str):
            rec["waiting"] = {**rec["waiting"], "child": self.run(whole["waiting"]["child"])}
        self.first.add(run_id)
        return cast(JournalRecord, rec)


def _swap(value: Any, tokens: Mapping[str, str]) -> Any:
    """`value` copied with every string equal to a source token replaced by the fork's."""
    if isinstance(value, str):
        return tokens.get(value, value)
    if isinstance(value, dict):
        return {k: _swap(v, tokens) for k, v in value.items()}
    if isinstance(value, list):
        return [_swap(v, tokens) for v in value]
    if isinstance(value, tuple):
        return tuple(_swap(v, tokens) for v in value)
    if isinstance(value, set | frozenset):
        return type(value)(_swap(v, tokens) for v in value)
    return value


def check_plan(world: World, plan: ForkPlan) -> None:
    """Refuse a plan whose streams are not stored as far as it copies them (the checkpoint
    is newer than what a reader of them sees yet)."""
    for source, n in plan.streams.values():
        have = world.stream_length(source)
        if have < n:
            raise ForkError(
                f"stream {source} holds {have} items, the checkpoint needs {n}: it is not "
                f"stored yet (fork an earlier checkpoint, or try again)"
            )
