"""Property and example tests of the typed jsonb codec (no services needed).

The central property: for every value the codec accepts,
``decode(orjson.loads(orjson.dumps(encode(v))))`` is `same` as ``v`` (equal, and
of identical types all the way down).

The value strategy and `same` are imported by tests/integration/test_codec_roundtrip.py,
which runs the same round trip through Postgres jsonb.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import math
import uuid
from decimal import Decimal
from typing import Any, NamedTuple
from zoneinfo import ZoneInfo

import orjson
import pydantic
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage, ToolMessage
from langgraph.types import Command, Interrupt, Overwrite, Send

from langgraph_colosseum._core.codec import TAG, TypeRegistry, default_registry
from langgraph_colosseum.errors import CodecError, UnsupportedValueError, UntrustedTypeError

# --------------------------------------------------------------- app classes


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"
    PAIR = (1, 2)


class Priority(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Position(pydantic.BaseModel):
    ticker: str
    qty: int = 0
    tags: list[str] = pydantic.Field(default_factory=list)
    payload: Any = None


class Flexible(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="allow")

    name: str


@dataclasses.dataclass
class Point:
    x: int
    y: Any = None


@dataclasses.dataclass(frozen=True)
class FrozenTag:
    name: str
    weight: int = 0


@dataclasses.dataclass
class WithDerived:
    base: int
    note: Any = None
    derived: int = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.derived = self.base * 2


class Pair(NamedTuple):
    left: Any
    right: Any = None


class Unregistered:
    """A plain class: neither registered nor registrable."""


@dataclasses.dataclass
class UnregisteredPoint:
    """Registrable, but deliberately not registered."""

    x: int


APP_TYPES: list[type] = [Color, Priority, Position, Flexible, Point, FrozenTag, WithDerived, Pair]


def make_registry() -> TypeRegistry:
    registry = default_registry()
    for cls in APP_TYPES:
        registry.register(cls)
    return registry


REGISTRY = make_registry()


def as_jsonb(data: Any) -> Any:
    """JSON data with every object's keys in the order Postgres jsonb keeps them:
    shorter keys first, keys of one length by their UTF-8 bytes."""
    if type(data) is dict:
        keys = sorted(data, key=lambda k: (len(k.encode()), k.encode()))
        return {k: as_jsonb(data[k]) for k in keys}
    if type(data) is list:
        return [as_jsonb(item) for item in data]
    return data


def roundtrip(value: Any, registry: TypeRegistry = REGISTRY) -> Any:
    """Through the codec and JSON text, with object keys reordered as jsonb does."""
    return registry.decode(as_jsonb(orjson.loads(orjson.dumps(registry.encode(value)))))


# --------------------------------------------------------------- same()


def same(a: Any, b: Any) -> bool:
    """Equal, with identical types recursively; NaN equals NaN, -0.0 differs from 0.0."""
    t = type(a)
    if t is not type(b):
        return False
    if t is float:
        if math.isnan(a):
            return math.isnan(b)
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    if t is Decimal:
        return a.as_tuple() == b.as_tuple()  # exact digits, exponent, sign, NaN kind
    if t in (list, tuple) or (issubclass(t, tuple) and hasattr(t, "_fields")):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if t is dict:
        # Key order too: what a prompt built by iterating the dict depends on.
        if len(a) != len(b):
            return False
        for (k, v), k2 in zip(a.items(), b):
            if not same(k, k2) or not same(v, b[k2]):
                return False
        return True
    if t in (set, frozenset):
        if len(a) != len(b):
            return False
        b_items = {x: x for x in b}
        return all(x in b_items and same(x, b_items[x]) for x in a)
    if t in (dt.datetime, dt.time):
        return (
            a == b
            and a.isoformat() == b.isoformat()
            and a.utcoffset() == b.utcoffset()
            and type(a.tzinfo) is type(b.tzinfo)
            and a.tzinfo == b.tzinfo
            # A zone's fold picks between repeated wall times: it must survive.
            and (not isinstance(a.tzinfo, ZoneInfo) or a.fold == b.fold)
        )
    if isinstance(a, enum.Enum):
        return a is b
    if isinstance(a, pydantic.BaseModel):
        return (
            same(a.__dict__, b.__dict__)
            and a.__pydantic_fields_set__ == b.__pydantic_fields_set__
            and same(a.__pydantic_extra__, b.__pydantic_extra__)
        )
    if dataclasses.is_dataclass(a):
        return all(
            same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a)
        ) and list(getattr(a, "__dict__", ())) == list(getattr(b, "__dict__", ()))
    if t is Send:
        return same(a.node, b.node) and same(a.arg, b.arg) and same(a.timeout, b.timeout)
    return bool(a == b)


def test_same_helper_is_strict() -> None:
    assert same(float("nan"), float("nan"))
    assert not same({"b": 1, "a": 2}, {"a": 2, "b": 1})
    assert not same([{"question": 1, "plan": 2}], [{"plan": 2, "question": 1}])
    assert not same(0.0, -0.0)
    assert not same(1, 1.0)
    assert not same(1, True)
    assert not same((1,), [1])
    assert not same({1: "a"}, {True: "a"})
    assert not same({"a": [1]}, {"a": [1.0]})
    assert not same(Decimal("1.0"), Decimal("1.00"))
    assert same(Decimal("NaN"), Decimal("NaN"))
    assert not same(Pair(1, 2), (1, 2))
    assert not same(Point(1), Point(2))
    assert not same(
        dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc),
        dt.datetime(2024, 1, 1, 5, tzinfo=dt.timezone(dt.timedelta(hours=5))),
    )


# --------------------------------------------------------------- strategies

SPECIAL_FLOATS = [
    math.nan,
    math.inf,
    -math.inf,
    -0.0,
    0.0,
    1e16,
    -1e16,
    1e15,
    999999999999999.0,
    5e-324,
    -5e-324,
    2.2250738585072014e-308,
    1.7976931348623157e308,
    0.1,
    1e-7,
    2.0**53,
    2.0**53 + 2,
    1e15 + 0.5,
    123.0,
]
SPECIAL_INTS = [0, 2**63 - 1, -(2**63), 2**63, -(2**63) - 1, 2**64, 10**100, -(10**300)]
SPECIAL_TEXT = [
    "",
    "\x00",
    "a\x00b",
    "\x00\x00",
    "\ud800",
    "x\udfffy",
    "\ud83d\ude00",
    "\ud800\x00\udc00",
    "$t",
    "null",
    "\u2028",
    "é",
    "😀",
]

floats = st.floats() | st.sampled_from(SPECIAL_FLOATS)
finite_floats = st.floats(allow_nan=False) | st.sampled_from(
    [f for f in SPECIAL_FLOATS if not math.isnan(f)]
)
# ±2**20000 has more decimal digits than sys.get_int_max_str_digits() lets str()
# print (built lazily: hypothesis reprs its strategies, and repr() would fail).
huge_ints = st.sampled_from([1, -1]).map(lambda sign: sign * 2**20000)
ints = st.integers() | st.sampled_from(SPECIAL_INTS) | st.integers(-(2**200), 2**200) | huge_ints
texts = st.text(
    st.characters() | st.sampled_from(["\x00", "\ud800", "\udbff", "\udc00", "\udfff"]), max_size=8
) | st.sampled_from(SPECIAL_TEXT)
# Whole-second offsets (real zones have those: LMT is e.g. -04:56:02), plus a
# few sub-second ones; CPython's fromisoformat misreads offsets under one second.
fixed_offsets = st.integers(-86399, 86399).map(
    lambda s: dt.timezone(dt.timedelta(seconds=s))
) | st.sampled_from(
    [
        dt.timezone.utc,
        dt.timezone(dt.timedelta(hours=5, microseconds=3)),
        dt.timezone(dt.timedelta(hours=-23, minutes=-59, seconds=-59, microseconds=-999999)),
    ]
)
# Zoneinfo datetimes over the whole range, including wall times a DST change
# skips (allow_imaginary) or repeats (fold).
zoned_datetimes = st.datetimes(timezones=st.timezones(), allow_imaginary=True)
datetimes = st.one_of(
    st.datetimes(),
    st.datetimes(timezones=fixed_offsets),
    zoned_datetimes,
    st.sampled_from(
        [
            dt.datetime(2023, 11, 5, 1, 30, fold=0, tzinfo=ZoneInfo("America/New_York")),
            dt.datetime(2023, 11, 5, 1, 30, fold=1, tzinfo=ZoneInfo("America/New_York")),
            dt.datetime(2024, 6, 1, 12, 0, tzinfo=ZoneInfo("UTC")),
        ]
    ),
)
times = st.times() | st.times(timezones=fixed_offsets)
decimals = st.decimals(allow_nan=True, allow_infinity=True) | st.sampled_from(
    [
        Decimal("NaN"),
        Decimal("-NaN"),
        Decimal("sNaN"),
        Decimal("NaN123"),
        Decimal("-0"),
        Decimal("1.000"),
        Decimal("1E+400"),
        Decimal("-Infinity"),
    ]
)
finite_decimals = st.decimals(allow_nan=False, allow_infinity=True)
names = st.text("abcxyz_", min_size=1, max_size=6)

# Everything hashable: set members and non-str dict keys. No NaN (NaN is not
# found again by hash lookup, so sets and keys holding it cannot be compared).
hashable_leaves = st.one_of(
    st.none(),
    st.booleans(),
    ints,
    finite_floats,
    texts,
    st.binary(max_size=8),
    finite_decimals,
    st.uuids(),
    st.dates(),
    st.timedeltas(),
    st.datetimes(timezones=fixed_offsets),
    st.sampled_from(list(Color) + list(Priority)),
    st.tuples(names, st.integers(-5, 5)).map(lambda t: FrozenTag(*t)),
)
hashables = st.recursive(
    hashable_leaves,
    lambda c: st.one_of(
        st.lists(c, max_size=3).map(tuple),
        st.frozensets(c, max_size=3),
        st.builds(Pair, c, c),
    ),
    max_leaves=6,
)

leaves = st.one_of(
    st.none(),
    st.booleans(),
    ints,
    floats,
    texts,
    st.binary(max_size=16),
    st.binary(max_size=16).map(bytearray),
    datetimes,
    st.dates(),
    times,
    st.timedeltas(),
    st.uuids(),
    decimals,
    st.sampled_from(list(Color) + list(Priority)),
    st.tuples(names, st.integers(-5, 5)).map(lambda t: FrozenTag(*t)),
    names.map(lambda i: RemoveMessage(id=i)),
    st.sets(hashables, max_size=4),
    st.frozensets(hashables, max_size=4),
)
str_keys = texts | st.sampled_from(["$t", "\x00", "k\x00", "v", "cls", "", "$t\x00"])


def _extend(children: st.SearchStrategy) -> st.SearchStrategy:
    str_dicts = st.dictionaries(str_keys, children, max_size=4)
    return st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=4).map(tuple),
        str_dicts,
        st.dictionaries(hashables, children, max_size=3),
        st.tuples(children, children).map(lambda t: Pair(*t)),
        st.tuples(st.integers(), children).map(lambda t: Point(*t)),
        st.tuples(st.integers(-100, 100), children).map(lambda t: WithDerived(*t)),
        st.tuples(texts, st.integers(), st.lists(texts, max_size=2), children).map(
            lambda t: Position(ticker=t[0], qty=t[1], tags=t[2], payload=t[3])
        ),
        texts.map(lambda t: Position(ticker=t)),  # defaults: fields_set is a strict subset
        st.tuples(texts, st.dictionaries(names.map(lambda n: "x_" + n), children, max_size=2)).map(
            lambda t: Flexible(name=t[0], **t[1])
        ),
        st.tuples(texts, st.none() | names, str_dicts).map(
            lambda t: HumanMessage(content=t[0], id=t[1], additional_kwargs=t[2])
        ),
        st.tuples(
            texts, st.none() | names, st.lists(st.tuples(names, str_dicts, names), max_size=2)
        ).map(
            lambda t: AIMessage(
                content=t[0],
                id=t[1],
                tool_calls=[{"name": n, "args": a, "id": i} for n, a, i in t[2]],
            )
        ),
        st.tuples(texts, names, st.sampled_from(["success", "error"]), children).map(
            lambda t: ToolMessage(content=t[0], tool_call_id=t[1], status=t[2], artifact=t[3])
        ),
        st.tuples(names, children).map(lambda t: Send(*t)),
        st.tuples(children, names).map(lambda t: Interrupt(t[0], id=t[1])),
        st.tuples(children, children, st.lists(st.tuples(names, children), max_size=2) | names).map(
            lambda t: Command(
                update=t[0],
                resume=t[1],
                goto=t[2] if isinstance(t[2], str) else [Send(n, a) for n, a in t[2]],
            )
        ),
        children.map(Overwrite),
    )


values = st.recursive(leaves, _extend, max_leaves=12)


# --------------------------------------------------------------- properties


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values)
def test_roundtrip_is_identity(value: Any) -> None:
    encoded = REGISTRY.encode(value)
    text = orjson.dumps(encoded)  # orjson accepts whatever the codec emits
    assert b"\\u0000" not in text  # jsonb rejects U+0000
    decoded = REGISTRY.decode(as_jsonb(orjson.loads(text)))
    assert same(decoded, value), (value, decoded)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(str_keys, values, max_size=4))
def test_dict_roundtrip_with_tag_and_nul_keys(value: dict) -> None:
    assert same(roundtrip(value), value)


@settings(max_examples=200, deadline=None)
@given(floats)
def test_floats_survive_jsonb_text_forms(value: float) -> None:
    encoded = REGISTRY.encode(value)
    if type(encoded) is float:
        # Plain floats must not be integral beyond the exact limit (jsonb would
        # print them without a decimal point) and must be finite.
        assert math.isfinite(encoded)
        assert not (encoded.is_integer() and abs(encoded) >= 1e15)
    assert same(roundtrip(value), value)


@settings(max_examples=200, deadline=None)
@given(texts)
def test_strings_never_carry_nul_or_lone_surrogates(value: str) -> None:
    text = orjson.dumps(REGISTRY.encode(value)).decode()
    assert "\x00" not in text and "\\u0000" not in text
    text.encode("utf-8")  # valid UTF-8
    assert same(roundtrip(value), value)


# ------------------------------------------------------------- key order

plain_keys = st.text(
    st.characters(exclude_characters="\x00", exclude_categories=["Cs"]), max_size=6
)


# JSON-like values only: a failure here then shrinks to a short, readable dict.
json_like = st.recursive(
    st.none() | st.booleans() | st.integers(-9, 9) | st.text(max_size=3),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(plain_keys, children, max_size=4)
    ),
    max_leaves=10,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(plain_keys, json_like | values, max_size=6))
def test_dict_key_order_survives_jsonb(value: dict) -> None:
    back = roundtrip(value)
    assert list(back) == list(value)
    assert same(back, value)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(plain_keys.filter(lambda k: k != TAG), st.integers() | texts, max_size=6))
def test_dict_in_jsonb_order_costs_nothing(value: dict) -> None:
    """A dict whose order jsonb keeps is stored as it was before order was kept."""
    ordered = as_jsonb(value)
    assume(all(REGISTRY.encode(v) == v for v in ordered.values()))
    assert orjson.dumps(REGISTRY.encode(ordered)) == orjson.dumps(ordered)


def test_order_is_recorded_only_where_jsonb_would_change_it() -> None:
    state = {"question": "q", "plan": ["a"], "context": {"a": 1, "bb": 2}}
    encoded = REGISTRY.encode(state)
    assert encoded == {
        "question": "q",
        "plan": ["a"],
        "context": {"a": 1, "bb": 2},  # already jsonb's order: nothing recorded
        TAG: ["question", "plan", "context"],
    }
    assert repr(roundtrip(state)) == repr(state)
    # The matching view (for @> filters) records nothing.
    assert TAG not in REGISTRY.matching().encode(state)


def test_order_survives_inside_tagged_values() -> None:
    value = (
        {"z": 1, "a": 2},
        [Interrupt({"question": "ok?", "options": ["y", "n"]}, id="i1")],
        Position(ticker="T", payload={"zz": 1, "a": {"y": 1, "x": 2}}),
        Flexible(name="n", zed=1, alpha={"b": 1, "a": 2}),
        {1: "x", "$t": {"k2": 1, "k1": 2}},
    )
    back = roundtrip(value)
    assert repr(back) == repr(value)
    assert list(back[2].payload["a"]) == ["y", "x"]


@pytest.mark.parametrize(
    "data",
    [
        {"a": 1, "b": 2, TAG: ["a"]},
        {"a": 1, "b": 2, TAG: ["a", "c"]},
        {"a": 1, "b": 2, TAG: ["a", "a"]},
        {"a": 1, TAG: [1]},
        {"a": 1, TAG: [TAG]},
        {"a": 1, TAG: [["a"]]},
    ],
    ids=repr,
)
def test_tampered_key_order_is_a_codec_error(data: dict) -> None:
    with pytest.raises(CodecError):
        REGISTRY.decode({"k": data})


# --------------------------------------------------------------- examples


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        False,
        0,
        -1,
        2**63 - 1,
        -(2**63),
        2**63,
        -(2**63) - 1,
        2**64,
        10**100,
        math.nan,
        math.inf,
        -math.inf,
        -0.0,
        1e16,
        5e-324,
        1e15,
        "\x00",
        "a\x00b\udc80c",
        "\ud800",
        b"\x00\xff",
        bytearray(b"ab"),
        (),
        (1, (2, [3])),
        [(), [], {}],
        {1, 2, 3},
        frozenset({"a", (1, 2)}),
        set(),
        {"$t": "int", "v": "5"},
        {"$t": "model", "cls": "os:system", "v": {}},
        {"a\x00b": 1, "ok": 2},
        {1: "a", (2, 3): "b", None: "c", "s": "d"},
        {True: 1, 2: 2},
        {frozenset({1}): {Decimal("1.5"): [b"x"]}},
        dt.datetime(
            2024, 1, 2, 3, 4, 5, 6, tzinfo=dt.timezone(dt.timedelta(hours=-3, minutes=-30))
        ),
        dt.datetime(2024, 7, 1, 12, tzinfo=ZoneInfo("Europe/Paris")),
        dt.datetime(2024, 1, 1),
        dt.date(1, 1, 1),
        dt.time(23, 59, 59, 999999),
        dt.time(1, 2, tzinfo=dt.timezone.utc),
        dt.timedelta(days=-1, microseconds=1),
        uuid.UUID(int=0),
        Decimal("3.14"),
        Decimal("-0.000"),
        Decimal("1E+999"),
        Decimal("NaN"),
        Decimal("sNaN"),
        Decimal("-Infinity"),
        Color.RED,
        Color.PAIR,
        Priority.HIGH,
        Position(ticker="AAPL", qty=10),
        Position(ticker="X", payload={"$t": 1}),
        Flexible(name="n", x_extra=(1, 2)),
        Point(1, {2}),
        FrozenTag("t", 3),
        Pair(1, (2,)),
        HumanMessage("hi", id="h1"),
        AIMessage(
            "", tool_calls=[{"name": "buy", "args": {"ticker": "AAPL", "qty": 3}, "id": "c1"}]
        ),
        ToolMessage("done", tool_call_id="c1", artifact={"rows": (1, 2)}),
        RemoveMessage(id="h1"),
        Send("node", {"x": (1,)}),
        Interrupt({"q": "?"}, id="i1"),
        Command(update={"a": 1}, resume="yes", goto=[Send("n", 1)]),
        Command(goto="end"),
        Overwrite([1, 2]),
    ],
    ids=repr,
)
def test_roundtrip_examples(value: Any) -> None:
    assert same(roundtrip(value), value)


def test_dataclass_init_false_field_is_restored_not_recomputed() -> None:
    value = WithDerived(base=3)
    value.derived = 99  # diverges from what __post_init__ would compute
    back = roundtrip(value)
    assert type(back) is WithDerived and back.derived == 99 and back.base == 3


def test_frozen_dataclass_roundtrips_and_stays_hashable() -> None:
    value = {FrozenTag("a", 1): [FrozenTag("b")], "s": {FrozenTag("c", 2)}}
    back = roundtrip(value)
    assert same(back, value)
    with pytest.raises(dataclasses.FrozenInstanceError):
        next(iter(back["s"])).name = "mutated"  # type: ignore[misc]


def test_pydantic_fields_set_and_extra_are_kept() -> None:
    value = Position(ticker="AAPL")
    back = roundtrip(value)
    assert back.model_fields_set == {"ticker"}
    assert back.model_dump(exclude_unset=True) == {"ticker": "AAPL"}
    flex = Flexible(name="n", x_a=[1, (2,)], x_b=None)
    back_flex = roundtrip(flex)
    assert same(back_flex, flex) and back_flex.model_extra == {"x_a": [1, (2,)], "x_b": None}


def test_plain_dict_with_tag_key_roundtrips_as_data() -> None:
    for value in (
        {"$t": "int", "v": "12"},
        {"$t": "model", "cls": "os:system", "v": {}},
        {"$t": None},
        {"outer": {"$t": "tuple", "v": [1]}},
    ):
        back = roundtrip(value)
        assert same(back, value)
        assert type(back) is dict
    # The user's "$t" never appears as the outer tag of the encoding.
    assert REGISTRY.encode({"$t": "int", "v": "12"})[TAG] == "dict"


@pytest.mark.parametrize(
    ("value", "path"),
    [
        (Unregistered(), "$"),
        ({"a": [1, Unregistered()]}, "$.a[1]"),
        ({"a": {"b": (0, 1, UnregisteredPoint(1))}}, "$.a.b[2]"),
        ([Point(1, {"z": Unregistered()})], "$[0].y.z"),
        (Position(ticker="t", payload=[Unregistered()]), "$.payload[0]"),
    ],
)
def test_unregistered_class_raises_with_path(value: Any, path: str) -> None:
    with pytest.raises(UnsupportedValueError) as info:
        REGISTRY.encode(value)
    assert info.value.path == path
    assert path in str(info.value)


def test_registrable_but_unregistered_class_is_refused() -> None:
    with pytest.raises(UnsupportedValueError):
        REGISTRY.encode(UnregisteredPoint(1))
    other = TypeRegistry()
    with pytest.raises(UnsupportedValueError):
        other.encode(Point(1))  # registered elsewhere, not here


def test_register_refuses_plain_classes() -> None:
    with pytest.raises(TypeError):
        TypeRegistry().register(Unregistered)


@pytest.mark.parametrize(
    ("data", "path"),
    [
        ({TAG: "os.system", "v": "echo"}, "$"),
        ({"a": [0, {TAG: "bogus", "v": 1}]}, "$.a[1]"),
        ([{"k": {TAG: 7}}], "$[0].k"),
        ({TAG: "tuple", "v": [1, {TAG: "pickle", "v": ""}]}, "$[1]"),
    ],
)
def test_unknown_tag_raises_codec_error_with_path(data: Any, path: str) -> None:
    with pytest.raises(CodecError) as info:
        REGISTRY.decode(data)
    assert info.value.path == path
    assert f"at value path {path}" in str(info.value)


@pytest.mark.parametrize(
    "data",
    [
        {TAG: "model", "cls": "os:system", "v": {}},
        {TAG: "dataclass", "cls": "subprocess:Popen", "v": {"args": "true"}},
        {TAG: "enum", "cls": "some_unknown_module_xyz:Thing", "v": 1},
        {TAG: "namedtuple", "cls": "collections:namedtuple", "v": []},
        {TAG: "send", "cls": "builtins:eval", "v": {"node": "x", "arg": "1", "timeout": None}},
        {TAG: "dataclass", "cls": "tests.unit.test_codec:UnregisteredPoint", "v": {"x": 1}},
    ],
)
def test_untrusted_class_tags_are_refused(data: dict) -> None:
    import sys

    with pytest.raises(UntrustedTypeError):
        REGISTRY.decode({"wrapped": [data]})
    assert "some_unknown_module_xyz" not in sys.modules


def test_registered_class_under_the_wrong_tag_is_refused() -> None:
    with pytest.raises(CodecError):
        REGISTRY.decode({TAG: "enum", "cls": "tests.unit.test_codec:Point", "v": 1})
    with pytest.raises(CodecError):
        REGISTRY.decode({TAG: "dataclass", "cls": "tests.unit.test_codec:Position", "v": {}})


@pytest.mark.parametrize(
    "data",
    [
        {TAG: "int", "v": "twelve"},
        {TAG: "tuple", "v": "not a list"},
        {TAG: "timedelta", "v": [10**12, 0, 0]},
        {TAG: "date", "v": 5},
        {TAG: "dict", "v": [[1]]},
    ],
)
def test_malformed_payloads_raise_codec_error(data: dict) -> None:
    with pytest.raises(CodecError):
        REGISTRY.decode(data)


# ----------------------------------------------- corners the invariant must hold at
# Each of these is encoded as typed jsonb (queryable, not a serde blob) and must
# come back exactly: a codec that started refusing one of them (the caller would
# fall back to serde bytes) fails here as loudly as one that got it wrong.


def _roundtrip(value: Any) -> Any:
    """Encode `value` (it must be accepted), through JSON text, and decode it."""
    encoded = REGISTRY.encode(value)  # UnsupportedValueError here is a failure
    return REGISTRY.decode(orjson.loads(orjson.dumps(encoded)))


def test_int_beyond_str_conversion_limit() -> None:
    value = 10**5000  # > sys.get_int_max_str_digits() digits
    back = _roundtrip(value)
    assert type(back) is int and back == value


@pytest.mark.parametrize(
    "value",
    [
        # 02:30 does not exist in New York on 2023-03-12 (clocks jump 02:00 ->
        # 03:00), but it is a valid Python datetime and pickle round-trips it.
        dt.datetime(2023, 3, 12, 2, 30, tzinfo=ZoneInfo("America/New_York")),
        # 01:30 happens twice on 2023-11-05: fold tells which.
        dt.datetime(2023, 11, 5, 1, 30, fold=0, tzinfo=ZoneInfo("America/New_York")),
        dt.datetime(2023, 11, 5, 1, 30, fold=1, tzinfo=ZoneInfo("America/New_York")),
    ],
    ids=["nonexistent", "ambiguous-first", "ambiguous-second"],
)
def test_zoneinfo_wall_times_that_do_not_exist_or_repeat(value: dt.datetime) -> None:
    back = _roundtrip(value)
    assert same(back, value), back
    assert back.tzinfo is ZoneInfo("America/New_York")  # the zone, not a fixed offset
    assert back.fold == value.fold
    assert back.utcoffset() == value.utcoffset()


@pytest.mark.parametrize(
    "value",
    [
        dt.datetime(1, 1, 1, 0, 0, tzinfo=ZoneInfo("Asia/Tokyo")),
        dt.datetime(9999, 12, 31, 23, 0, tzinfo=ZoneInfo("America/New_York")),
        dt.datetime(1, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=14))),
        dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.timezone(-dt.timedelta(hours=12))),
    ],
    ids=["min-east-of-utc", "max-west-of-utc", "min-fixed-offset", "max-fixed-offset"],
)
def test_zoneinfo_datetime_at_range_edge(value: dt.datetime) -> None:
    # In UTC these fall outside datetime's range: the codec must keep wall time
    # and zone, never convert to UTC on the way.
    back = _roundtrip(value)
    assert same(back, value), back
    assert back.tzinfo == value.tzinfo


@pytest.mark.parametrize(
    "value",
    [{Decimal("NaN"), 1}, {Decimal("NaN"), Decimal(1)}, frozenset({Decimal("-NaN"), 1.5})],
    ids=["nan-and-int", "nan-and-decimal", "frozen-negative-nan"],
)
def test_set_with_decimal_nan(value: set | frozenset) -> None:
    # NaN != NaN, so compare members by type and exact digits (sign, NaN kind).
    back = _roundtrip(value)
    assert type(back) is type(value)

    def members(items: Any) -> list[tuple[str, str]]:
        return sorted(
            (type(x).__name__, str(x.as_tuple()) if isinstance(x, Decimal) else repr(x))
            for x in items
        )

    assert members(back) == members(value)


@pytest.mark.parametrize(
    "order",
    [
        ["b"],  # a key left out
        ["b", "a", "c"],  # a key the object does not have
        ["b", "b"],  # a key twice (and one left out)
        ["b", TAG],  # the tag itself
        ["b", 1],  # not a key at all
        ["b", ["a"]],  # unhashable
    ],
)
def test_a_recorded_key_order_that_does_not_name_the_keys_is_refused(order: list) -> None:
    """A stored dict's key order (a tampered or corrupt row's) must name each of
    its keys once: otherwise a value would be dropped, duplicated or invented."""
    with pytest.raises(CodecError, match="recorded key order"):
        default_registry().decode({TAG: order, "a": 1, "b": [2, {"c": None}]})
    # The well-formed one decodes in the recorded order, nested values too.
    decoded = default_registry().decode({TAG: ["b", "a"], "a": 1, "b": [2, {"c": None}]})
    assert list(decoded) == ["b", "a"] and decoded == {"a": 1, "b": [2, {"c": None}]}
