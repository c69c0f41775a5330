"""Property and example tests of the reducer shapes (`_core/shapes.py`), no services.

The central property: whenever ``diff(value, base, n)`` returns a delta,
``apply(base.value, delta.shape, delta.payload)`` is *exactly* `value`: equal,
of identical types all the way down, items and dict keys in the same order
(the codec keeps key order through jsonb, so a merge row must too). Around it: the edits that must not be deltas
(replacements, removals, reorders, shorter lists, a chain at its snapshot
depth, an item that differs only in type) and `worth_a_delta`.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage

from langgraph_colosseum._core import shapes
from langgraph_colosseum._core.shapes import APPEND, MERGE, Base, Delta, apply, diff, worth_a_delta
from tests.unit.test_codec import same

SNAPSHOT_EVERY = 100


# --------------------------------------------------------------------- helpers


def exact(a: Any, b: Any) -> bool:
    """Equal, with identical types and dict key order recursively."""
    return same(a, b)


def lookalike_items(old: Any, new: Any) -> bool:
    """Some item (list position / dict key) is == and of the same type, yet not exact.

    The general properties leave those to `test_nested_lookalike*`, so that a
    failure there names the one thing that differs.
    """
    if type(old) is list and type(new) is list:
        pairs = list(zip(old, new))
    elif type(old) is dict and type(new) is dict:
        pairs = [(old[k], new[k]) for k in old if k in new]
    else:
        return False
    return any(type(a) is type(b) and a == b and not exact(a, b) for a, b in pairs)


def base_of(
    value: list | dict, depth: int = 0, delta_bytes: int = 0, full_bytes: int = 10**6
) -> Base:
    """A base as the store keeps it: a private copy of what was stored."""
    return Base(
        "00000000000000000000000000000001.0", copy.deepcopy(value), depth, delta_bytes, full_bytes
    )


def check_roundtrip(value: Any, base: Base, snapshot_every: int = SNAPSHOT_EVERY) -> Delta | None:
    """diff, then (if a delta) apply: the result must be exactly `value`; the base is untouched."""
    before = copy.deepcopy(base.value)
    value_before = copy.deepcopy(value)
    delta = diff(value, base, snapshot_every)
    if delta is not None:
        assert delta.shape in (APPEND, MERGE)
        rebuilt = apply(base.value, delta.shape, delta.payload)
        assert exact(rebuilt, value), (
            f"apply(base, diff(value, base)) is not value\n base={base.value!r}\n"
            f" value={value!r}\n delta={delta!r}\n rebuilt={rebuilt!r}"
        )
        assert rebuilt is not base.value
    assert exact(base.value, before), "diff/apply mutated the base"
    assert exact(value, value_before), "diff/apply mutated the value"
    return delta


# ------------------------------------------------------------------- strategies

# 1, 1.0 and True are == to each other (and 0, 0.0, False): the top-level type
# check is what tells them apart, so the strategies draw them often.
TRICKY = [0, 1, 0.0, 1.0, True, False, -0.0, 2, 2.0]
scalars = st.one_of(
    st.none(),
    st.sampled_from(TRICKY),
    st.integers(-3, 3),
    st.floats(-2, 2, allow_nan=False).filter(lambda f: f == f),
    st.text("ab", max_size=2),
)
KEYS = st.text("abcd", min_size=1, max_size=2)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
    max_leaves=6,
)
messages = st.builds(
    lambda cls, text, i: cls(content=text, id=f"m{i}"),
    st.sampled_from([HumanMessage, AIMessage]),
    st.text("xy", max_size=2),
    st.integers(0, 4),
)
items = st.one_of(json_values, messages)


@st.composite
def list_edits(draw: st.DrawFn) -> tuple[list, list]:
    """(base, value): the value derived from the base by appends or by any other edit."""
    old = draw(st.lists(items, max_size=5), label="base")
    kind = draw(st.sampled_from(["append", "copy+append", "edit", "arbitrary"]), label="kind")
    if kind == "append":  # the same objects, then a tail (what operator.add builds)
        return old, [*old, *draw(st.lists(items, max_size=3), label="tail")]
    if kind == "copy+append":  # equal copies (what a decoded checkpoint holds)
        return old, [*copy.deepcopy(old), *draw(st.lists(items, max_size=3), label="tail")]
    if kind == "edit":
        new = list(old)
        for _ in range(draw(st.integers(1, 3), label="edits")):
            op = draw(st.sampled_from(["set", "insert", "delete", "swap", "append"]), label="op")
            if op == "set" and new:
                new[draw(st.integers(0, len(new) - 1))] = draw(items, label="item")
            elif op == "insert":
                new.insert(draw(st.integers(0, len(new))), draw(items, label="item"))
            elif op == "delete" and new:
                del new[draw(st.integers(0, len(new) - 1))]
            elif op == "swap" and len(new) > 1:
                i, j = draw(st.integers(0, len(new) - 1)), draw(st.integers(0, len(new) - 1))
                new[i], new[j] = new[j], new[i]
            else:
                new.append(draw(items, label="item"))
        return old, new
    return old, draw(st.lists(items, max_size=6), label="value")


@st.composite
def dict_edits(draw: st.DrawFn) -> tuple[dict, dict]:
    """(base, value): the value derived from the base by adding, changing, removing keys."""
    old = draw(st.dictionaries(KEYS, json_values, max_size=6), label="base")
    new = dict(old)
    for _ in range(draw(st.integers(0, 4), label="edits")):
        op = draw(st.sampled_from(["add", "change", "remove", "readd"]), label="op")
        if op in ("change", "remove", "readd") and new:
            key = draw(st.sampled_from(sorted(new)), label="key")
            if op == "change":
                new[key] = draw(json_values, label="value")
            elif op == "remove":
                del new[key]
            else:  # removed and added again: it moves to the end
                new[key] = new.pop(key)
        else:
            new[draw(KEYS, label="key")] = draw(json_values, label="value")
    if draw(st.booleans(), label="copy values?"):
        new = copy.deepcopy(new)
    return old, new


# ------------------------------------------------------------ apply ∘ diff = id


@settings(max_examples=400)
@given(list_edits())
def test_list_delta_rebuilds_the_value_exactly(pair: tuple[list, list]) -> None:
    old, new = pair
    assume(not lookalike_items(old, new))
    delta = check_roundtrip(new, base_of(old))
    if delta is not None:
        assert delta.shape == APPEND
        assert len(delta.payload) == len(new) - len(old)


@settings(max_examples=400)
@given(dict_edits())
def test_dict_delta_rebuilds_the_value_exactly(pair: tuple[dict, dict]) -> None:
    old, new = pair
    assume(not lookalike_items(old, new))
    delta = check_roundtrip(new, base_of(old))
    if delta is not None:
        assert delta.shape == MERGE
        assert set(delta.payload) == {"set", "del"}
        assert set(delta.payload["del"]) == set(old) - set(new)


@settings(max_examples=200)
@given(st.lists(items, max_size=5), st.lists(items, min_size=1, max_size=3))
def test_pure_append_is_a_delta_of_the_tail(old: list, tail: list) -> None:
    delta = check_roundtrip([*copy.deepcopy(old), *tail], base_of(old))
    assert delta is not None and delta.shape == APPEND
    assert exact(delta.payload, tail)


@settings(max_examples=200)
@given(st.one_of(json_values, messages, st.lists(json_values, max_size=3).map(tuple)))
def test_any_value_against_any_base_never_breaks_the_invariant(value: Any) -> None:
    for old in ([], [value], {"a": value}, {}):
        check_roundtrip(value, base_of(old))
        check_roundtrip([value], base_of(old))
        check_roundtrip({"a": value, "b": 1}, base_of(old))


# Nested values that are == but not the same: the item compares equal at the
# top level, so the prefix test passes, and only the tail is stored. What the
# delta rebuilds must still be the value as given (types and key order).
NESTED_LOOKALIKES = [
    pytest.param([[1]], [[1.0], 2], id="list-int-then-float"),
    pytest.param([[1]], [[True], 2], id="list-int-then-bool"),
    pytest.param([{"a": True}], [{"a": 1}, 2], id="dict-bool-then-int"),
    pytest.param({"k": [0], "x": 1}, {"k": [False], "x": 2}, id="merge-nested-bool"),
    pytest.param(
        [HumanMessage("hi", id="m1", additional_kwargs={"n": 1})],
        [HumanMessage("hi", id="m1", additional_kwargs={"n": 1.0}), AIMessage("a", id="m2")],
        id="message-nested-float",
    ),
]


@pytest.mark.parametrize(("old", "new"), NESTED_LOOKALIKES)
def test_nested_lookalike_is_not_lost(old: Any, new: Any) -> None:
    check_roundtrip(new, base_of(old))


def _lookalike(draw: st.DrawFn, value: Any, *, types: bool, order: bool) -> Any:
    """A value == to `value` that may differ in nested scalar types and/or dict key order."""
    if type(value) is dict:
        keys = list(value)
        if order and len(keys) > 1 and draw(st.booleans()):
            keys = draw(st.permutations(keys))
        return {k: _lookalike(draw, value[k], types=types, order=order) for k in keys}
    if type(value) is list:
        return [_lookalike(draw, v, types=types, order=order) for v in value]
    if types and type(value) in (int, bool, float) and value in (0, 1):
        return draw(st.sampled_from([int(value), float(value), bool(value)]))
    return value


CONTAINERS = st.lists(
    st.lists(json_values, max_size=2) | st.dictionaries(KEYS, json_values, max_size=3),
    min_size=1,
    max_size=3,
)


def check_lookalikes(data: st.DataObject, *, types: bool, order: bool) -> None:
    old = data.draw(CONTAINERS, label="base")
    new = [_lookalike(data.draw, v, types=types, order=order) for v in old]
    new += data.draw(st.lists(json_values, max_size=2), label="tail")
    check_roundtrip(new, base_of(old))
    old_dict = {f"k{i}": v for i, v in enumerate(old)}
    new_dict = {k: _lookalike(data.draw, v, types=types, order=order) for k, v in old_dict.items()}
    check_roundtrip(new_dict, base_of(old_dict))


@settings(max_examples=300)
@given(st.data())
def test_nested_type_lookalikes_rebuild_exactly(data: st.DataObject) -> None:
    """Items holding 1 where the base held 1.0 or True (nested): not 'unchanged'."""
    check_lookalikes(data, types=True, order=False)


# ------------------------------------------------------- what is never a delta


@settings(max_examples=200)
@given(st.lists(json_values, min_size=1, max_size=5), st.data())
def test_replacement_at_an_index_is_not_an_append(old: list, data: st.DataObject) -> None:
    i = data.draw(st.integers(0, len(old) - 1), label="index")
    replacement = data.draw(items, label="replacement")
    assume(not (type(replacement) is type(old[i]) and replacement == old[i]))
    new = list(old)
    new[i] = replacement
    new += data.draw(st.lists(items, max_size=2), label="tail")
    assert diff(new, base_of(old), SNAPSHOT_EVERY) is None


@settings(max_examples=200)
@given(st.lists(items, min_size=1, max_size=6), st.data())
def test_removal_or_shorter_list_is_not_an_append(old: list, data: st.DataObject) -> None:
    i = data.draw(st.integers(0, len(old) - 1), label="index")
    removed = old[:i] + old[i + 1 :]
    assert diff(removed, base_of(old), SNAPSHOT_EVERY) is None
    cut = data.draw(st.integers(0, len(old) - 1), label="cut")
    assert diff(old[:cut], base_of(old), SNAPSHOT_EVERY) is None
    assert diff([], base_of(old), SNAPSHOT_EVERY) is None  # REMOVE_ALL_MESSAGES


@settings(max_examples=200)
@given(st.lists(st.integers(0, 50), min_size=2, max_size=6, unique=True), st.data())
def test_reorder_is_not_an_append(old: list, data: st.DataObject) -> None:
    new = data.draw(st.permutations(old), label="order")
    assume(new != old)
    tail = data.draw(st.lists(st.integers(), max_size=2), label="tail")
    assert diff([*new, *tail], base_of(old), SNAPSHOT_EVERY) is None


def test_messages_replaced_by_id_or_removed_are_not_appends() -> None:
    old = [HumanMessage("hi", id="h1"), AIMessage("yo", id="a1")]
    replaced = [old[0], AIMessage("yo, edited", id="a1"), HumanMessage("more", id="h2")]
    assert diff(replaced, base_of(old), SNAPSHOT_EVERY) is None
    assert diff([old[1]], base_of(old), SNAPSHOT_EVERY) is None
    assert diff([], base_of(old), SNAPSHOT_EVERY) is None
    # Same content and id, another message class: not the same item.
    retyped = [AIMessage("hi", id="h1"), old[1], HumanMessage("x", id="h3")]
    assert diff(retyped, base_of(old), SNAPSHOT_EVERY) is None
    appended = [*old, HumanMessage("more", id="h2")]
    delta = check_roundtrip(appended, base_of(old))
    assert delta == Delta(APPEND, [HumanMessage("more", id="h2")])


def test_message_mutated_in_place_since_the_base_is_not_unchanged() -> None:
    live = [HumanMessage("hi", id="h1"), AIMessage("yo", id="a1")]
    base = base_of(live)  # the private copy decoded from the stored row
    live[0].content = "edited"  # the graph edits the very object it put before
    live.append(AIMessage("next", id="a2"))
    assert diff(live, base, SNAPSHOT_EVERY) is None
    assert base.value[0].content == "hi"


def test_dict_edits_are_merges_that_keep_the_key_order() -> None:
    old = {"a": 1, "b": 2, "c": 3, "d": 4}
    delta = check_roundtrip({"a": 1, "c": 3, "d": 4, "e": 5}, base_of(old))
    assert delta == Delta(MERGE, {"set": {"e": 5}, "del": ["b"]})
    # Changed keys stay where they were; new keys come last, in their order.
    delta = check_roundtrip({"a": 1, "b": 2, "c": 30, "d": 4, "f": 6}, base_of(old))
    assert delta == Delta(MERGE, {"set": {"c": 30, "f": 6}, "del": []})
    # Reordered keys: a merge would rebuild the base's order, so a full row.
    assert check_roundtrip({"d": 4, "c": 30, "b": 2, "a": 1}, base_of(old)) is None
    assert check_roundtrip({"b": 2, "a": 1, "c": 3, "d": 4}, base_of(old)) is None
    assert check_roundtrip({"a": 1, "c": 3, "b": 2, "d": 4, "e": 5}, base_of(old)) is None


@settings(max_examples=300)
@given(st.data())
def test_nested_order_lookalikes_rebuild_exactly(data: st.DataObject) -> None:
    """Items whose nested dicts were reordered since the base: not 'unchanged'."""
    check_lookalikes(data, types=False, order=True)


@settings(max_examples=100)
@given(
    st.integers(1, 20),
    st.lists(st.integers(), max_size=4),
    st.lists(st.integers(), min_size=1, max_size=3),
)
def test_depth_reaching_snapshot_every_is_a_full_row(
    snapshot_every: int, old: list, tail: list
) -> None:
    new = [*old, *tail]
    for depth in range(snapshot_every + 2):
        delta = diff(new, base_of(old, depth=depth), snapshot_every)
        if depth + 1 >= snapshot_every:
            assert delta is None, f"depth {depth} with snapshot_every={snapshot_every}"
        else:
            assert delta == Delta(APPEND, tail)
    # The same bound holds for merges.
    d_old = {"a": 1, "b": 2, "c": 3}
    d_new = {"a": 1, "b": 2, "c": 4}
    assert diff(d_new, base_of(d_old, depth=snapshot_every - 1), snapshot_every) is None
    if snapshot_every > 1:
        assert diff(d_new, base_of(d_old, depth=snapshot_every - 2), snapshot_every) is not None


def test_snapshot_every_one_never_deltas() -> None:
    assert diff([1, 2], base_of([1]), 1) is None
    assert diff({"a": 1, "b": 3}, base_of({"a": 1, "b": 2}), 1) is None


def test_no_base_or_not_a_container_is_a_full_row() -> None:
    assert diff([1], None, SNAPSHOT_EVERY) is None
    assert diff((1, 2), base_of([1]), SNAPSHOT_EVERY) is None  # a tuple is no list
    assert diff({"a": 1}, base_of([1]), SNAPSHOT_EVERY) is None
    assert diff([1], base_of({"a": 1}), SNAPSHOT_EVERY) is None
    assert diff("ab", base_of(["a"]), SNAPSHOT_EVERY) is None

    class MyList(list):
        pass

    assert diff(MyList([1, 2]), base_of([1]), SNAPSHOT_EVERY) is None
    assert not shapes.can_be_a_base((1,))
    assert not shapes.can_be_a_base(MyList())
    assert shapes.can_be_a_base([]) and shapes.can_be_a_base({})


# ----------------------------------------------------- type-only differences

LOOKALIKES = [(0, 0.0), (0, False), (0.0, False), (1, 1.0), (1, True), (1.0, True)]


@pytest.mark.parametrize(("a", "b"), [*LOOKALIKES, *[(b, a) for a, b in LOOKALIKES]])
def test_item_differing_only_in_type_is_not_unchanged(a: Any, b: Any) -> None:
    assert a == b and type(a) is not type(b)
    # A list: the prefix differs, so no append.
    assert diff([b, 5], base_of([a]), SNAPSHOT_EVERY) is None
    assert diff([b], base_of([a]), SNAPSHOT_EVERY) is None
    assert diff(["x", b, 5], base_of(["x", a]), SNAPSHOT_EVERY) is None
    # A dict: the key counts as changed and the merge sets it.
    old = {"k": a, "p": 1, "q": 2, "r": 3}
    new = {"k": b, "p": 1, "q": 2, "r": 3}
    delta = check_roundtrip(new, base_of(old))
    assert delta == Delta(MERGE, {"set": {"k": b}, "del": []})
    assert type(delta.payload["set"]["k"]) is type(b)
    assert type(apply(old, delta.shape, delta.payload)["k"]) is type(b)


# ---------------------------------------------------------------- merge sizes


@settings(max_examples=200)
@given(st.integers(1, 8), st.data())
def test_merge_touching_more_than_half_the_keys_is_full(n: int, data: st.DataObject) -> None:
    old = {f"k{i}": i for i in range(n)}
    touched = data.draw(st.integers(0, n), label="touched")
    new = {k: (v + 100 if i < touched else v) for i, (k, v) in enumerate(old.items())}
    delta = check_roundtrip(new, base_of(old))
    if touched > max(1, n // 2):
        assert delta is None
    else:
        assert delta is not None and delta.shape == MERGE
        assert len(delta.payload["set"]) == touched and delta.payload["del"] == []


@given(st.integers(0, 10_000), st.integers(0, 10_000), st.integers(0, 10_000), st.integers(0, 200))
def test_worth_a_delta(
    delta_bytes_so_far: int, full_bytes: int, new_bytes: int, depth: int
) -> None:
    base = Base("v", {}, depth, delta_bytes_so_far, full_bytes)
    # A merge is worth it while the chain's deltas stay within its full row.
    merge = Delta(MERGE, {"set": {"a": 1}, "del": []})
    assert worth_a_delta(base, merge, new_bytes) is (delta_bytes_so_far + new_bytes <= full_bytes)
    # An append always is: only snapshot_every bounds its chain.
    assert worth_a_delta(base, Delta(APPEND, [1]), new_bytes) is True


def test_worth_a_delta_boundaries() -> None:
    merge = Delta(MERGE, {"set": {}, "del": ["a"]})
    assert worth_a_delta(Base("v", {}, 1, 40, 100), merge, 60)  # exactly the full row
    assert not worth_a_delta(Base("v", {}, 1, 40, 100), merge, 61)
    assert worth_a_delta(Base("v", {}, 0, 0, 10), merge, 10)
    assert not worth_a_delta(Base("v", {}, 0, 0, 0), merge, 1)
    assert worth_a_delta(Base("v", [], 3, 10**9, 1), Delta(APPEND, [1]), 10**9)


# ------------------------------------------------------------------- apply


def test_apply_never_mutates_the_base_and_rejects_unknown_shapes() -> None:
    base_list = [1, {"a": 1}]
    out = apply(base_list, APPEND, [2])
    assert out == [1, {"a": 1}, 2] and base_list == [1, {"a": 1}]
    base_dict = {"a": 1, "b": 2}
    out = apply(base_dict, MERGE, {"set": {"c": 3, "a": 0}, "del": ["b"]})
    assert list(out.items()) == [("a", 0), ("c", 3)]
    assert base_dict == {"a": 1, "b": 2}
    with pytest.raises(ValueError):
        apply([], "full", [])


def test_delta_channel_snapshot_appends_to_the_previous_snapshot() -> None:
    from langgraph.checkpoint.serde.types import _DeltaSnapshot

    old = _DeltaSnapshot([HumanMessage("hi", id="h1")])
    new = _DeltaSnapshot([HumanMessage("hi", id="h1"), AIMessage("yo", id="a1")])
    delta = check_roundtrip(new, base_of(old))
    assert delta == Delta(APPEND, [AIMessage("yo", id="a1")])
    # A snapshot is not an append of a plain list, nor the other way round.
    assert diff(new, base_of([HumanMessage("hi", id="h1")]), SNAPSHOT_EVERY) is None
    assert diff([HumanMessage("hi", id="h1")], base_of(old), SNAPSHOT_EVERY) is None


@pytest.mark.parametrize(
    "old, new",
    [
        ([0.0], [-0.0, 1.0]),  # an append onto a base that is == but not the same
        ([{"x": -0.0}], [{"x": 0.0}, 1.0]),
        ({"a": 0.0, "b": 1}, {"a": -0.0, "b": 1}),
    ],
)
def test_signed_zeros_are_not_the_same_float(old: Any, new: Any) -> None:
    """-0.0 == 0.0, but repr tells them apart and so must the stored row: a
    delta built on a base holding the other zero reads back the wrong one."""
    delta = check_roundtrip(new, base_of(old))
    rebuilt = new if delta is None else apply(old, delta.shape, delta.payload)
    assert repr(rebuilt) == repr(new)
