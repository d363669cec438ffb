"""The codec: rich values round-trip; unserializable values are named by their path."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any
from uuid import UUID, uuid4

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, model_serializer

from world import SerializationError, decode, encode


class Point(BaseModel):
    x: int
    at: dt.datetime


RICH: list[Any] = [
    dt.datetime(2024, 1, 2, 3, 4, 5, 6),
    dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.timezone(dt.timedelta(hours=-5))),
    dt.date(2024, 2, 29),
    dt.time(23, 59, 1),
    dt.timedelta(days=2, seconds=3, microseconds=4),
    b"\x00\xffbytes",
    (1, "two", (3,)),
    {1, 2, 3},
    frozenset({"a"}),
    Decimal("3.14159265358979323846"),
    uuid4(),
    {(1, 2): "tuple key", 3: "int key"},
    Point(x=1, at=dt.datetime(2020, 1, 1, tzinfo=dt.UTC)),
]


@pytest.mark.parametrize("value", RICH, ids=lambda v: type(v).__name__)
def test_rich_values_round_trip_with_their_types(value: Any) -> None:
    back = decode(encode(value))
    assert back == value and type(back) is type(value)


def test_aware_and_naive_datetimes_stay_apart() -> None:
    naive, aware = dt.datetime(2024, 1, 1), dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    assert decode(encode(naive)).tzinfo is None
    assert decode(encode(aware)).utcoffset() == dt.timedelta(0)


json_like = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text() | st.binary()
    | st.floats(allow_nan=False) | st.uuids() | st.decimals(allow_nan=False)
    | st.datetimes(timezones=st.none() | st.just(dt.UTC)),
    lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
    | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=20,
)  # fmt: skip


@given(json_like)
def test_any_nesting_round_trips(value: Any) -> None:
    assert decode(encode(value)) == value


def test_unserializable_value_names_its_path() -> None:
    with pytest.raises(SerializationError) as err:
        encode({"items": [1, 2, {"deep": object()}]}, "result")
    assert err.value.path == "result['items'][2]['deep']"
    assert "object" in str(err.value)


def test_too_large_integer_names_its_path() -> None:
    with pytest.raises(SerializationError) as err:
        encode([1, 2**70], "value")
    assert err.value.path == "value[1]"


def test_model_of_a_class_that_no_longer_imports_decodes_as_data() -> None:
    data = encode(Point(x=5, at=dt.datetime(2020, 1, 1)))
    renamed = data.replace(b"Point", b"Gone_")
    assert decode(renamed) == {"x": 5, "at": dt.datetime(2020, 1, 1)}


def test_unknown_extension_types_survive_a_round_trip() -> None:
    future = msgpack.packb({"new": msgpack.ExtType(99, b"later")}, use_bin_type=True)
    assert encode(decode(future)) == future


def test_uuid_is_compact() -> None:
    assert len(encode(UUID(int=1))) <= 18


def test_the_kept_packer_is_not_spoiled_by_a_failed_or_nested_encoding() -> None:
    import threading

    from world import _codec

    nested = {"t": (1, (2, {3, 4}), frozenset({5})), "when": dt.timedelta(seconds=3)}
    first = _codec.encode(nested)
    with pytest.raises(SerializationError):
        _codec.encode({"ok": 1, "bad": [object()]})  # fails halfway through packing
    assert _codec.encode(nested) == first  # nothing of the failed one is left in the packer
    assert _codec.decode(first) == nested
    assert _codec.encode({"b": 1}) == msgpack.packb({"b": 1})
    seen: list[bytes] = []
    threads = [threading.Thread(target=lambda: seen.append(_codec.encode(nested)))
               for _ in range(4)]  # fmt: skip
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == [first] * 4


class Reentrant(BaseModel):
    """A model whose dump encodes something itself (user code run mid-encode)."""

    x: int

    @model_serializer
    def _dump(self) -> dict[str, Any]:
        return {"x": self.x, "inner": encode({"nested": [self.x, (1, 2)]})}


def test_an_encode_from_within_an_encode_gets_its_own_packer() -> None:
    value = {"a": Reentrant(x=3), "b": [1, 2, 3], "c": "after the model"}
    first = encode(value)
    assert decode(first)["c"] == "after the model"  # nothing of the inner pack leaked out
    assert decode(first)["b"] == [1, 2, 3]
    assert decode(decode(first)["a"].model_dump()["inner"]) == {"nested": [3, (1, 2)]}
    assert encode(value) == first
