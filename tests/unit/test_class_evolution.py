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
from langgraph_colosseum._core.versions import Migration, StateVersions
from langgraph_colosseum.errors import ClassChangedError


def stored_as(old: type, value: Any, new: type, renames: dict | None = None) -> Any:
    """`value` (an `old` instance) written, then read where the class is `new`
    (the same registry name: a deploy redefined it), with a state migration's
    field `renames` ({old class: {old field: new field}})."""
    writer = TypeRegistry([old])
    data = orjson.loads(orjson.dumps({"items": [writer.encode(value)]}))
    reader = TypeRegistry()
    reader._by_name[codec.class_name(old)] = new
    reader._names[new] = codec.class_name(old)
    if renames is not None:
        reader = reader.renaming(StateVersions(2, {1: Migration(fields=renames)}).field_renames)
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


class ModelRenamed(pydantic.BaseModel):
    name: str
    units: int = 0  # legacy, renamed: the stored value, not this default


@dataclasses.dataclass
class DataRenamed:
    units: int  # legacy, renamed (and moved first)
    name: str


class PairRenamed(NamedTuple):
    name: str
    units: int = 0


def test_a_renamed_field_arrives_under_its_new_name(caplog: pytest.LogCaptureFixture) -> None:
    """Migration(fields=...) renames before added/removed fields are fitted: the
    value is neither dropped for a default nor a ClassChangedError."""
    codec._DROPPED_LOGGED.clear()
    with caplog.at_level(logging.WARNING, logger="langgraph_colosseum"):
        model = stored_as(
            ModelV1, ModelV1(name="ann", legacy=7), ModelRenamed, {ModelV1: {"legacy": "units"}}
        )
        data = stored_as(DataV1, DataV1("ann", 7), DataRenamed, {DataV1: {"legacy": "units"}})
        pair = stored_as(PairV1, PairV1("ann", 7), PairRenamed, {PairV1: {"legacy": "units"}})
    assert repr(model) == "ModelRenamed(name='ann', units=7)"
    assert model.model_fields_set == {"name", "units"}
    assert repr(data) == "DataRenamed(units=7, name='ann')"
    assert repr(pair) == "PairRenamed(name='ann', units=7)"
    assert not [r for r in caplog.records if "no longer has" in r.getMessage()]
    # Without the rename: the default, and the stored value dropped (logged).
    assert repr(stored_as(ModelV1, ModelV1(name="a", legacy=7), ModelRenamed)).endswith("units=0)")
    with pytest.raises(ClassChangedError, match=r"Migration\(fields=") as info:
        stored_as(DataV1, DataV1("ann", 7), DataRenamed)
    assert info.value.path == "$.items[0]"


def test_field_renames_chain_across_migrations() -> None:
    """legacy -> count (migration 1), count -> units (migration 2): a value stored
    at either version arrives as units; a class named by string works too."""
    name = codec.class_name(DataV1)
    versions = StateVersions(
        3,
        {
            1: Migration(fields={DataV1: {"legacy": "count"}}),
            2: Migration(fields={name: {"count": "units"}}),
        },
    )
    assert versions.field_renames == {name: {"legacy": "units", "count": "units"}}
    with pytest.raises(TypeError, match="fields= maps a class"):
        StateVersions(2, {1: Migration(fields={DataV1: {"legacy": 3}})})
