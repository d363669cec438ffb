"""Text that is not valid Unicode, found and repaired in one place.

A Python ``str`` can hold a lone surrogate (U+D800–U+DFFF) that no UTF-8 file, event or JSON
answer can: bytes that are not UTF-8 arrive that way in ``sys.argv`` (``surrogateescape``),
and a JSON ``"\\ud800"`` from a model, a tool or an MCP server decodes to one. Every place text
enters a session passes it here: a request from a client is refused with :func:`bad_text`'s
line; text a model or a tool produced is repaired (each lone surrogate becomes U+FFFD, the
replacement character, with a warning), so that a turn never fails on it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any

log = logging.getLogger("eve_cli")

REPLACEMENT = "\ufffd"
_SURROGATE = re.compile("[\ud800-\udfff]")


def _first_surrogate(text: str) -> int:
    """The index of the first lone surrogate in ``text``, or -1."""
    if text.isascii():
        return -1
    match = _SURROGATE.search(text)
    return match.start() if match else -1


def bad_text(value: Any, path: str = "") -> str | None:
    """One line saying where ``value`` (text, or lists and mappings of it) holds text that is
    not valid Unicode, or None when all of it is. ``path`` names ``value`` (``message``);
    what is inside it is named after it (``message.parts[0]``)."""
    if isinstance(value, str):
        at = _first_surrogate(value)
        if at < 0:
            return None
        return (
            f"{path or 'the text'} is not valid Unicode: a lone surrogate U+{ord(value[at]):04X} "
            f"at character {at} (text must be UTF-8)"
        )
    if isinstance(value, Mapping):
        for key, item in value.items():
            inner = f"{path}.{key}" if path else str(key)
            problem = bad_text(key, f"a key of {path}" if path else "a key")
            if problem or (problem := bad_text(item, inner)):
                return problem
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            if problem := bad_text(item, f"{path}[{i}]"):
                return problem
    return None


def repair_str(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD (the same length)."""
    if _first_surrogate(text) < 0:
        return text
    return _SURROGATE.sub(REPLACEMENT, text)


_SCALARS = frozenset({type(None), bool, int, float})  # (exact types) hold no text


def _clean(value: Any) -> bool:
    """Whether ``value`` certainly holds no text to repair, checked without copying: what a
    model or a tool returns nearly always is. False also for anything but exact strings,
    dicts, lists, tuples and scalars (:func:`repair`'s walk decides)."""
    kind = type(value)
    if kind is str:
        return value.isascii() or _SURROGATE.search(value) is None
    if kind is dict:
        return _all_clean(value) and _all_clean(value.values())  # (its keys, its values)
    if kind is list or kind is tuple:
        return _all_clean(value)
    return kind in _SCALARS


def _all_clean(items: Iterable[Any]) -> bool:
    """Whether each of ``items`` is :func:`_clean`, a plain leaf checked without a call."""
    for item in items:
        kind = type(item)
        if kind is str:
            if not item.isascii() and _SURROGATE.search(item) is not None:
                return False
        elif kind not in _SCALARS and not _clean(item):
            return False
    return True


def repair(value: Any) -> tuple[Any, int]:
    """``value`` with its text repaired (:func:`repair_str`) in strings, lists, tuples and
    dicts at any depth, and how many strings were changed; anything else is kept as is."""
    if _clean(value):
        return value, 0
    if isinstance(value, str):
        fixed = repair_str(value)
        return fixed, int(fixed is not value)
    if isinstance(value, dict):
        changed, out = 0, {}
        for key, item in value.items():
            new_key, n = repair(key)
            new_item, m = repair(item)
            changed += n + m
            out[new_key] = new_item
        return (out, changed) if changed else (value, 0)
    if isinstance(value, list | tuple):
        items = [repair(item) for item in value]
        changed = sum(n for _, n in items)
        if not changed:
            return value, 0
        kept = [item for item, _ in items]
        return (kept if isinstance(value, list) else tuple(kept)), changed
    return value, 0


def repaired(value: Any, source: str) -> Any:
    """``value`` repaired; when anything changed, :func:`warn` names ``source``."""
    fixed, changed = repair(value)
    if changed:
        warn(source)
    return fixed


def warn(source: str) -> None:
    """One warning line: ``source`` (e.g. "tool 'search'") sent text that had to be repaired."""
    log.warning(
        "eve: warning: %s sent text that is not valid Unicode (lone surrogates); "
        "replaced by U+FFFD",
        source,
    )
