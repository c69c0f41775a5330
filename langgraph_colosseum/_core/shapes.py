"""Reducer shapes: a channel's new value stored as what changed since a base version.

* ``append``: the new list extends the base list (``add_messages``,
  ``operator.add``), or a DeltaChannel snapshot extends the previous one: the
  row holds the tail.
* ``merge``: the new dict is the base dict with some keys added, changed or
  removed: the row holds ``{"set": {...}, "del": [...]}``.
* ``full``: anything else, and every `snapshot_every`-th version of a chain, and
  whenever the deltas since the last full row add up to more than that row.

Invariants (tests/unit/test_shapes.py, tests/integration/test_storage_properties.py):

* ``apply(base.value, diff(value, base))`` equals `value`, item for item, in order.
* Detection compares the new value with a *private copy* of the base (decoded
  from what was stored), never with the live objects the graph holds: an item
  mutated in place since the base was written compares unequal, and the version
  is stored as it now is. Items are compared with `_same`: equal and of the
  same types all the way down (``==`` calls 1, 1.0 and True equal), so `[1]`
  then `[1.0, 2]` is not an append. Dict key order is compared too: the codec
  keeps it through jsonb, so a reordered dict is a changed value.
* A merge row keeps the new dict's key order: `apply` leaves the base's keys
  where they were and appends new ones in the row's order; `diff` gives no
  merge when that is not the new dict's order (a full row is stored).
* A delta's base is any stored version of the same (thread, namespace,
  channel), whatever checkpoint wrote it: forks, replacements by id,
  `RemoveMessage` and `REMOVE_ALL_MESSAGES` simply fail the prefix test and are
  stored full.
"""

from __future__ import annotations

from math import copysign
from typing import Any, NamedTuple

from langgraph.checkpoint.serde.types import _DeltaSnapshot

FULL = "full"
APPEND = "append"
MERGE = "merge"

DEFAULT_SNAPSHOT_EVERY = 100


class Base(NamedTuple):
    """What the store knows of a channel's value at one stored version."""

    version: str
    value: Any  # a list, dict or _DeltaSnapshot(list); a private copy, never shared
    depth: int  # deltas since the last full row
    delta_bytes: int  # their encoded size
    full_bytes: int  # the encoded size of that full row


class Delta(NamedTuple):
    shape: str  # APPEND | MERGE
    payload: Any  # the tail (APPEND), or {"set": {...}, "del": [...]} (MERGE)


# Compared with == alone. Not float: -0.0 == 0.0, yet each reads back as
# itself, so a delta built on the other zero would rebuild the wrong one.
_SCALARS = frozenset({str, int, bool, type(None), bytes})

try:
    from pydantic import BaseModel as _Model
except ImportError:  # pragma: no cover
    _Model = ()  # type: ignore[assignment,misc]


def _same(a: Any, b: Any) -> bool:
    """Equal *and* stored alike: ``==`` alone calls 1, 1.0 and True equal, and
    ignores dict key order, and the row would then rebuild the old spelling."""
    t = type(a)
    if t is not type(b):
        return False
    if t in _SCALARS:
        return a == b
    if t is float:
        return a == b and copysign(1.0, a) == copysign(1.0, b)
    if t is list or t is tuple:
        return len(a) == len(b) and _same_items(a, b)
    if t is dict:
        return _same_dict(a, b)
    if isinstance(a, _Model):
        return (
            _same_dict(a.__dict__, b.__dict__)
            and a.__pydantic_fields_set__ == b.__pydantic_fields_set__
            and _same(a.__pydantic_extra__, b.__pydantic_extra__)
        )
    return a == b  # sets, datetimes, dataclasses, ...: compared as Python does


# The two loops below are `_same` applied item by item, with the scalar case
# (most of a message's fields) and empty containers decided inline instead of
# by a call each: the comparison runs over the whole base at every append
# (600 messages at chat-200's end: 5.8 -> 4.1 ms of CPU per put).


def _same_items(a: Any, b: Any) -> bool:
    for x, y in zip(a, b):
        t = type(x)
        if t is not type(y):
            return False
        if t in _SCALARS:
            if x != y:
                return False
        elif not _same(x, y):
            return False
    return True


def _same_dict(a: dict, b: dict) -> bool:
    if len(a) != len(b):
        return False
    for (key, value), (other, other_value) in zip(a.items(), b.items()):  # same order
        t = type(value)
        if key != other or type(key) is not type(other) or t is not type(other_value):
            return False
        if t in _SCALARS:
            if value != other_value:
                return False
        elif (value or other_value or (t is not dict and t is not list)) and not _same(
            value, other_value
        ):
            return False
    return True


def _items(value: Any) -> tuple[list | None, type | None]:
    """The list a value appends to, and its wrapper: a DeltaChannel snapshot
    (`_DeltaSnapshot(list)`) grows like the list it holds."""
    if type(value) is list:
        return value, None
    if type(value) is _DeltaSnapshot and type(value.value) is list:
        return value.value, _DeltaSnapshot
    return None, None


def diff(value: Any, base: Base | None, snapshot_every: int) -> Delta | None:
    """The delta of `value` against `base`, or None when a full row is due."""
    if base is None or base.depth + 1 >= snapshot_every:
        return None
    old = base.value
    new_items, wrapper = _items(value)
    old_items, old_wrapper = _items(old)
    if new_items is not None and old_items is not None and wrapper is old_wrapper:
        if len(new_items) < len(old_items):
            return None
        if not _same_items(old_items, new_items):
            return None
        return Delta(APPEND, new_items[len(old_items) :])
    if type(value) is dict and type(old) is dict:
        removed = [k for k in old if k not in value]
        changed = {k: v for k, v in value.items() if k not in old or not _same(old[k], v)}
        if len(changed) + len(removed) > max(1, len(value) // 2):
            return None
        # `apply` keeps the base's keys in place and appends the new ones.
        kept = [k for k in old if k in value]
        if not _keys_in_order(value, kept):
            return None
        return Delta(MERGE, {"set": changed, "del": removed})
    return None


def _keys_in_order(value: dict, kept: list) -> bool:
    """Whether `value`'s keys are `kept`, in that order, then the keys it adds."""
    keys = iter(value)
    return all(key == next(keys) for key in kept)


def apply(base_value: Any, shape: str, payload: Any) -> Any:
    """The value a delta row stands for, given its base's value. Never mutates the base."""
    if shape == APPEND:
        items, wrapper = _items(base_value)
        if items is None or type(payload) is not list:
            raise ValueError(
                f"an append row needs a list base and a list tail, got "
                f"{type(base_value).__name__} and {type(payload).__name__}"
            )
        grown = [*items, *payload]
        return wrapper(grown) if wrapper is not None else grown
    if shape == MERGE:
        if (
            type(base_value) is not dict
            or type(payload) is not dict
            or type(payload.get("set")) is not dict
            or type(payload.get("del")) is not list
        ):
            raise ValueError(
                "a merge row needs a dict base and a {'set': dict, 'del': list} payload"
            )
        removed = set(payload["del"])
        merged = {k: v for k, v in base_value.items() if k not in removed}
        merged.update(payload["set"])
        return merged
    raise ValueError(f"unknown shape {shape!r}")


def worth_a_delta(base: Base, delta: Delta, delta_bytes: int) -> bool:
    """Replaying the chain must not cost more than reading one full row.

    Replaying reads the last full row plus every delta since. An append chain's
    value *is* that much data, so replaying it costs what a snapshot would, and
    only `snapshot_every` bounds it. A merge chain's value stays about the size
    of its full row while its deltas pile up: once they outweigh it, snapshot.
    """
    return delta.shape == APPEND or base.delta_bytes + delta_bytes <= base.full_bytes


def can_be_a_base(value: Any) -> bool:
    return type(value) is dict or _items(value)[0] is not None
