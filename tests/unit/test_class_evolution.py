"""A registered class whose definition changed since a value was stored (issue 16):
revived as the class is now, or refused naming the class, the fields and the path."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, NamedTuple

import orjson
import pydantic
import pytest

from langgraph_colosseum._core import codec
from langgraph_colosseum._core.codec import TypeRegistry
from langgraph_colosseum.errors import ClassChangedError


def stored_as(old: type, value: Any, new: type) -> Any:
    """`value` (an `old` instance) written, then read where the class is `new`
    (the same registry name: a deploy redefined it)."""
    writer = TypeRegistry([old])
    data = orjson.loads(orjson.dumps({"items": [writer.encode(value)]}))
    reader = TypeRegistry()
    reader._by_name[codec.class_name(old)] = new
    reader._names[new] = codec.class_name(old)
    return reader.decode(data)["items"][0]


class ModelV1(pydantic.BaseModel):
    name: str
    legacy: int


class ModelV2(pydantic.BaseModel):
    name: str
    tier: str = "free"
    tags: list[str] = pydantic.Field(default_factory=list)


class ModelV3(pydantic.BaseModel):
    name: str
    owner: str


@dataclasses.dataclass
class DataV1:
    name: str
    legacy: int


@dataclasses.dataclass
class DataV2:
    name: str
    tags: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class DataV3:
    name: str
    owner: str


class PairV1(NamedTuple):
    name: str
    legacy: int


class PairV2(NamedTuple):
    name: str
    tier: str = "free"


def test_added_fields_get_their_defaults_and_removed_ones_are_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    codec._DROPPED_LOGGED.clear()
    with caplog.at_level(logging.WARNING, logger="langgraph_colosseum"):
        model = stored_as(ModelV1, ModelV1(name="ann", legacy=7), ModelV2)
        again = stored_as(ModelV1, ModelV1(name="bob", legacy=8), ModelV2)
        data = stored_as(DataV1, DataV1("ann", 7), DataV2)
        pair = stored_as(PairV1, PairV1("ann", 7), PairV2)
    assert repr(model) == "ModelV2(name='ann', tier='free', tags=[])"
    assert type(model) is ModelV2 and model.model_fields_set == {"name"}
    assert model.model_dump() == ModelV2(name="ann").model_dump()
    assert repr(again) == "ModelV2(name='bob', tier='free', tags=[])"
    assert repr(data) == "DataV2(name='ann', tags=[])" and type(data) is DataV2
    assert repr(pair) == "PairV2(name='ann', tier='free')" and type(pair) is PairV2
    # Logged once per class, naming it and the field.
    dropped = [r.getMessage() for r in caplog.records if "no longer has" in r.getMessage()]
    assert len(dropped) == 3
    assert codec.class_name(ModelV1) in dropped[0] and "legacy" in dropped[0]


@pytest.mark.parametrize(
    ("old", "value", "new"),
    [
        (ModelV1, ModelV1(name="ann", legacy=7), ModelV3),
        (DataV1, DataV1("ann", 7), DataV3),
    ],
    ids=["model", "dataclass"],
)
def test_a_field_added_without_default_is_a_clear_error(old: type, value: Any, new: type) -> None:
    with pytest.raises(ClassChangedError) as info:
        stored_as(old, value, new)
    message = str(info.value)
    assert codec.class_name(old) in message
    assert "['owner']" in message and "['legacy']" in message
    assert info.value.path == "$.items[0]" and "$.items[0]" in message


def test_a_namedtuple_stored_by_position_is_matched_by_position() -> None:
    """Rows written before field names were recorded: trailing fields added with
    defaults are filled; more values than fields cannot be matched."""
    registry = TypeRegistry([PairV2])
    name = codec.class_name(PairV2)
    short = {"$t": "namedtuple", "cls": name, "v": ["ann"]}
    assert repr(registry.decode(short)) == "PairV2(name='ann', tier='free')"
    with pytest.raises(ClassChangedError, match="cannot be told apart by position"):
        registry.decode({"$t": "namedtuple", "cls": name, "v": ["ann", "x", 3]})


def test_an_unchanged_class_round_trips_as_before() -> None:
    registry = TypeRegistry([ModelV2, DataV2, PairV2])
    for value in (ModelV2(name="a", tier="pro"), DataV2("a", ["t"]), PairV2("a", "pro")):
        back = registry.decode(orjson.loads(orjson.dumps(registry.encode(value))))
        assert repr(back) == repr(value) and type(back) is type(value)
