"""Read-only parts of a session view read, compare and serialize like plain ones."""

from __future__ import annotations

import copy
import json
import pickle

import msgpack
import pytest

from eve_cli.execution._frozen import FrozenDict, FrozenList, freeze

PLAIN = {"id": "t1", "steps": [{"index": 0, "actions": [{"name": "x", "ok": True}]}], "n": None}


def test_frozen_values_equal_and_serialize_as_plain_ones() -> None:
    frozen = freeze(PLAIN)
    assert isinstance(frozen, FrozenDict) and isinstance(frozen["steps"], FrozenList)
    assert frozen == PLAIN and json.loads(json.dumps(frozen)) == PLAIN
    assert msgpack.unpackb(msgpack.packb(frozen)) == PLAIN
    for thawed in (pickle.loads(pickle.dumps(frozen)), copy.deepcopy(frozen)):
        assert thawed == PLAIN and type(thawed) is dict and type(thawed["steps"]) is list
        thawed["steps"][0]["actions"].append({})  # plain again: changeable
    assert type(copy.copy(frozen)) is dict and frozen == PLAIN


@pytest.mark.parametrize(
    "change",
    [
        lambda f: f.update(a=1),
        lambda f: f.__setitem__("id", "x"),
        lambda f: f.pop("id"),
        lambda f: f["steps"].append(1),
        lambda f: f["steps"][0]["actions"].clear(),
        lambda f: f["steps"].__setitem__(0, 1),
        lambda f: f["steps"].sort(),
    ],
)
def test_changing_a_frozen_value_is_refused(change: object) -> None:
    frozen = freeze(PLAIN)
    with pytest.raises(TypeError, match="read-only"):
        change(frozen)  # type: ignore[operator]
    assert frozen == PLAIN
