"""Read-only dicts and lists: the parts of a session view every copy handed out shares.

They compare equal to, serialize (JSON, msgpack, pickle) and read like plain ones; changing
one raises :class:`TypeError`, and ``copy.copy`` / ``copy.deepcopy`` / pickling give plain,
changeable ones back.
"""

from __future__ import annotations

import copy
from typing import Any, NoReturn, TypeVar

_WHY = "this part of a session view is shared by every copy and read-only; copy it to change it"


def _refuse(self: object, *args: object, **kwargs: object) -> NoReturn:
    raise TypeError(_WHY)


V = TypeVar("V")


class FrozenDict(dict[str, V]):
    """A dict that refuses changes."""

    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse

    def __copy__(self) -> dict[str, V]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, V]:
        return {k: copy.deepcopy(v, memo) for k, v in self.items()}

    def __reduce__(self) -> tuple[Any, ...]:
        return dict, (dict(self),)


class FrozenList(list[Any]):
    """A list that refuses changes."""

    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse
    append = extend = insert = pop = remove = clear = sort = reverse = _refuse

    def __copy__(self) -> list[Any]:
        return list(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> list[Any]:
        return [copy.deepcopy(v, memo) for v in self]

    def __reduce__(self) -> tuple[Any, ...]:
        return list, (list(self),)


# Values that hold no dict or list: taken as they are, without a call each (most of a view).
_LEAVES = frozenset((str, int, float, bool, type(None)))


def freeze(value: Any) -> Any:
    """``value`` with every dict and list in it read-only (other values as they are)."""
    if isinstance(value, dict):
        return FrozenDict({k: v if type(v) in _LEAVES else freeze(v) for k, v in value.items()})
    if isinstance(value, list):
        return FrozenList([v if type(v) in _LEAVES else freeze(v) for v in value])
    return value
