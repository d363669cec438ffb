"""Values to msgpack bytes and back, with extension types for the rich values workflows use.

Round-trips: None, bool, int (64-bit), float, str, bytes, list, dict (any hashable keys),
tuple, set, frozenset, datetime (naive or aware), date, time, timedelta, Decimal, UUID and
pydantic models (stored as data plus the class name; rebuilt when the class imports, else
returned as a dict). Anything else raises `SerializationError` naming the path to it.
"""

from __future__ import annotations

import datetime as dt
import importlib
import sys
import threading
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any, cast
from uuid import UUID

import msgpack

from ._errors import SerializationError

_DATETIME, _DATE, _TIME, _TIMEDELTA = 1, 2, 3, 4
_TUPLE, _SET, _FROZENSET = 5, 6, 7
_DECIMAL, _UUID, _MODEL = 8, 9, 10

_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1


def _default(obj: Any) -> Any:
    # strict_types=True sends tuples and subclasses of builtins here, so tuples keep their type.
    t = type(obj)
    if t is dt.datetime:
        return msgpack.ExtType(_DATETIME, obj.isoformat().encode())
    if t is dt.date:
        return msgpack.ExtType(_DATE, obj.isoformat().encode())
    if t is dt.time:
        return msgpack.ExtType(_TIME, obj.isoformat().encode())
    if t is dt.timedelta:
        return msgpack.ExtType(_TIMEDELTA, _pack([obj.days, obj.seconds, obj.microseconds]))
    if t is tuple:
        return msgpack.ExtType(_TUPLE, _pack(list(obj)))
    if t is set:
        return msgpack.ExtType(_SET, _pack(list(obj)))
    if t is frozenset:
        return msgpack.ExtType(_FROZENSET, _pack(list(obj)))
    if t is Decimal:
        return msgpack.ExtType(_DECIMAL, str(obj).encode())
    if t is UUID:
        return msgpack.ExtType(_UUID, obj.bytes)
    if hasattr(t, "model_dump") and hasattr(t, "model_validate"):
        name = f"{t.__module__}:{t.__qualname__}"
        return msgpack.ExtType(_MODEL, _pack([name, obj.model_dump(mode="python")]))
    # Subclasses of builtins (str enums, OrderedDict, ...) are stored as the builtin value.
    for base in (bool, int, float, str, bytes, dict, list, tuple, set, frozenset):
        if isinstance(obj, base):
            return cast(Any, base)(obj)
    if isinstance(obj, dt.datetime):
        return _default(dt.datetime.fromisoformat(obj.isoformat()))
    raise TypeError(f"object of type {t.__qualname__} has no msgpack form")


def _pack(value: Any) -> bytes:
    # A fresh packer: `_default` calls this while a thread's packer (`encode`) is mid-pack.
    return msgpack.packb(value, default=_default, use_bin_type=True, strict_types=True)  # type: ignore[no-any-return]


def _packer() -> msgpack.Packer:
    return msgpack.Packer(default=_default, use_bin_type=True, strict_types=True)


class _Packers(threading.local):
    """This thread's packer while no encode uses it (making one costs as much as packing a
    small record): an encode takes it and gives it back, so one from within another (user
    code run by `_default`) finds none and packs with one of its own."""

    def __init__(self) -> None:
        self.free = [_packer()]


_PACKERS = _Packers()


def _ext_hook(code: int, data: bytes) -> Any:
    if code == _DATETIME:
        return dt.datetime.fromisoformat(data.decode())
    if code == _DATE:
        return dt.date.fromisoformat(data.decode())
    if code == _TIME:
        return dt.time.fromisoformat(data.decode())
    if code == _TIMEDELTA:
        days, seconds, micros = decode(data)
        return dt.timedelta(days=days, seconds=seconds, microseconds=micros)
    if code == _TUPLE:
        return tuple(decode(data))
    if code == _SET:
        return set(decode(data))
    if code == _FROZENSET:
        return frozenset(decode(data))
    if code == _DECIMAL:
        return Decimal(data.decode())
    if code == _UUID:
        return UUID(bytes=data)
    if code == _MODEL:
        name, fields = decode(data)
        cls = _find_model(name)
        return cls.model_validate(fields) if cls is not None else fields
    # An ext type from a newer version: keep it intact so it survives a rewrite.
    return msgpack.ExtType(code, data)


def _find_model(name: str) -> Any:
    module_name, _, qualname = name.partition(":")
    try:
        module = sys.modules.get(module_name) or importlib.import_module(module_name)
        obj: Any = module
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError):
        return None
    return obj if hasattr(obj, "model_validate") else None


def encode(value: Any, what: str = "value") -> bytes:
    """Encode `value`; on failure raise `SerializationError` naming the path (from `what`)."""
    free = _PACKERS.free  # (one attribute of the thread's: each costs a lookup of the thread)
    packer = free.pop() if free else _packer()
    try:
        return packer.pack(value)  # type: ignore[no-any-return]
    except (TypeError, ValueError, OverflowError) as exc:
        path, reason = find_unserializable(value, what)
        raise SerializationError(f"cannot serialize {path}: {reason or exc}", path) from None
    finally:
        if not free:  # (an encode from within this one gave its own back: that one is kept)
            free.append(packer)


def decode(data: bytes) -> Any:
    """Decode bytes written by `encode`."""
    return msgpack.unpackb(data, ext_hook=_ext_hook, raw=False, strict_map_key=False)


_LEAVES = (
    type(None), bool, float, str, bytes, dt.datetime, dt.date, dt.time, dt.timedelta,
    Decimal, UUID,
)  # fmt: skip


def _text_problem(value: str) -> str:
    """Why ``value`` has no UTF-8 form ("": it has one)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate: no UTF-8 form
        char = ord(value[exc.start])
        where = f"a lone surrogate U+{char:04X} at character {exc.start}"
        return f"text that is not valid Unicode ({where})"
    return ""


def _first_unserializable(parts: Iterable[tuple[Any, str]], path: str) -> tuple[str, str]:
    """The first of ``(value, path)`` ``parts`` that has no msgpack form, or (path, "")."""
    for value, where in parts:
        bad = find_unserializable(value, where)
        if bad[1]:
            return bad
    return path, ""


def find_unserializable(value: Any, path: str) -> tuple[str, str]:
    """Return (path, reason) of the first value `encode` cannot store, or (path, "")."""
    if isinstance(value, int) and not isinstance(value, bool):
        if not _INT_MIN <= value <= _INT_MAX:
            return path, "integer out of the 64-bit range"
        return path, ""
    if isinstance(value, str):
        return path, _text_problem(value)
    if isinstance(value, _LEAVES):
        return path, ""
    if isinstance(value, Mapping):
        parts = ((part, f"{path}{where}") for key, item in value.items()
                 for part, where in ((key, f" key {key!r}"), (item, f"[{key!r}]")))  # fmt: skip
        return _first_unserializable(parts, path)
    if isinstance(value, list | tuple | set | frozenset):
        return _first_unserializable(((v, f"{path}[{i}]") for i, v in enumerate(value)), path)
    if hasattr(type(value), "model_dump") and hasattr(type(value), "model_validate"):
        return find_unserializable(value.model_dump(mode="python"), path)
    return path, f"object of type {type(value).__qualname__} has no msgpack form"
