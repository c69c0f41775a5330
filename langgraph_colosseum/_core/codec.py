"""The typed jsonb codec: Python values ⇄ JSON that Postgres `jsonb` accepts.

Plain JSON (str, int, float, bool, None, list, dict with str keys) is stored as
itself, so state stays queryable with SQL. Everything else becomes a tagged
object ``{"$t": TAG, ...}``.

Invariants (each kept by the function named, checked by tests/unit/test_codec.py):

* ``decode(encode(v)) == v`` and has the same type, for every value the codec
  accepts; a value it does not accept raises `UnsupportedValueError` naming the
  path, and the caller falls back to the configured serde.
* Postgres `jsonb` cannot hold U+0000 or unpaired surrogates, NaN/Infinity,
  and turns ``1e16`` into an integer: `_encode_str` and `_encode_float` tag
  those, so what Postgres hands back parses to the same Python value.
* A tag that names a class revives it only through the `TypeRegistry`
  allowlist. Decoding never imports a module or calls a constructor that was
  not registered (`_revive_class`).
* A plain dict whose keys include ``"$t"`` is written in the pair-list form, so
  user data can never be mistaken for a tag.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import enum
import math
import uuid
from collections.abc import Callable, Iterable
from decimal import Decimal
from typing import Any

from langgraph_colosseum.errors import (
    CodecError,
    UnsupportedValueError,
    UntrustedTypeError,
)

TAG = "$t"
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
# Above this magnitude an integral float is printed by jsonb without a decimal
# point ("1e16" → 10000000000000000) and would come back as an int.
_FLOAT_EXACT_LIMIT = 1e15

try:  # pydantic is a dependency of langchain-core, but keep the codec importable alone
    from pydantic import BaseModel as _PydanticModel
except ImportError:  # pragma: no cover
    _PydanticModel = None  # type: ignore[assignment,misc]


def class_name(cls: type) -> str:
    """The registry name of a class: ``module:qualname``."""
    return f"{cls.__module__}:{cls.__qualname__}"


class TypeRegistry:
    """The allowlist of classes the codec may revive.

    Example:
        >>> registry = TypeRegistry()
        >>> @dataclasses.dataclass
        ... class Position:
        ...     ticker: str
        ...     qty: int
        >>> registry.register(Position)  # doctest: +ELLIPSIS
        <class '...Position'>
        >>> registry.decode(registry.encode(Position("AAPL", 10)))
        Position(ticker='AAPL', qty=10)
    """

    def __init__(self, classes: Iterable[type] = ()) -> None:
        self._by_name: dict[str, type] = {}
        for cls in classes:
            self.register(cls)

    def register(self, cls: type) -> type:
        """Allow `cls` (a pydantic model, dataclass, Enum or NamedTuple) to round-trip.

        Returns the class, so it can be used as a decorator.
        """
        if not _kind_of_class(cls):
            raise TypeError(
                f"{class_name(cls)} is not a pydantic model, dataclass, Enum or "
                "NamedTuple; the codec cannot store it as jsonb (serde will)."
            )
        self._by_name[class_name(cls)] = cls
        return cls

    def __contains__(self, cls: type) -> bool:
        return self._by_name.get(class_name(cls)) is cls

    def lookup(self, name: Any, path: str) -> type:
        cls = self._by_name.get(name) if isinstance(name, str) else None
        if cls is None:
            raise UntrustedTypeError(
                f"type tag names {name!r}, which is not on the allowlist; nothing was "
                "imported or constructed",
                path=path,
            )
        return cls

    def copy(self) -> TypeRegistry:
        clone = TypeRegistry()
        clone._by_name = dict(self._by_name)
        return clone

    def encode(self, value: Any) -> Any:
        """Encode `value` to JSON-compatible data (see module docstring)."""
        return _encode(value, self, "$")

    def decode(self, data: Any) -> Any:
        """Decode data produced by `encode` (or read back from jsonb)."""
        return _decode(data, self, "$")


def _kind_of_class(cls: type) -> str | None:
    if _PydanticModel is not None and isinstance(cls, type) and issubclass(cls, _PydanticModel):
        return "model"
    if isinstance(cls, type) and issubclass(cls, enum.Enum):
        return "enum"
    if isinstance(cls, type) and issubclass(cls, tuple) and hasattr(cls, "_fields"):
        return "namedtuple"
    if dataclasses.is_dataclass(cls) and isinstance(cls, type):
        return "dataclass"
    if cls.__module__ == "langgraph.types" and cls.__qualname__ == "Send":
        return "send"
    return None


# --------------------------------------------------------------------- encode


def _encode(value: Any, registry: TypeRegistry, path: str) -> Any:
    t = type(value)
    if value is None or t is bool:
        return value
    if t is str:
        return _encode_str(value, path)
    if t is int:
        if _INT64_MIN <= value <= _INT64_MAX:
            return value
        return {TAG: "int", "v": str(value)}
    if t is float:
        return _encode_float(value)
    if t is list:
        return [_encode(item, registry, f"{path}[{i}]") for i, item in enumerate(value)]
    if t is dict:
        return _encode_dict(value, registry, path)
    if t is tuple:
        return {TAG: "tuple", "v": _encode_items(value, registry, path)}
    if t is set or t is frozenset:
        # Sorted where possible so equal sets give equal jsonb.
        items = list(value)
        try:
            items.sort()
        except TypeError:
            pass
        return {TAG: t.__name__, "v": _encode_items(items, registry, path)}
    if t is bytes or t is bytearray:
        return {TAG: t.__name__, "v": base64.b64encode(value).decode("ascii")}
    if t is dt.datetime:
        out = {TAG: "datetime", "v": value.isoformat()}
        zone = getattr(value.tzinfo, "key", None)  # zoneinfo.ZoneInfo keeps its name
        if zone:
            out["tz"] = zone
        return out
    if t is dt.date:
        return {TAG: "date", "v": value.isoformat()}
    if t is dt.time:
        return {TAG: "time", "v": value.isoformat()}
    if t is dt.timedelta:
        return {TAG: "timedelta", "v": [value.days, value.seconds, value.microseconds]}
    if t is uuid.UUID:
        return {TAG: "uuid", "v": str(value)}
    if t is Decimal:
        return {TAG: "decimal", "v": str(value)}
    return _encode_object(value, registry, path)


def _encode_str(value: str, path: str) -> Any:
    if "\x00" in value:
        return {TAG: "nul", "v": [_encode_str(p, path) for p in value.split("\x00")]}
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # unpaired surrogates: not valid UTF-8, not valid jsonb
        raw = value.encode("utf-8", "surrogatepass")
        return {TAG: "str", "v": base64.b64encode(raw).decode("ascii")}
    return value


def _encode_float(value: float) -> Any:
    if math.isfinite(value) and not (value == 0.0 and math.copysign(1.0, value) < 0):
        if not (value.is_integer() and abs(value) >= _FLOAT_EXACT_LIMIT):
            return value
    return {TAG: "float", "v": repr(value)}


def _encode_items(items: Iterable[Any], registry: TypeRegistry, path: str) -> list[Any]:
    return [_encode(item, registry, f"{path}[{i}]") for i, item in enumerate(items)]


def _is_plain_key(key: Any) -> bool:
    return type(key) is str and key != TAG and "\x00" not in key and _encode_str(key, "") is key


def _encode_dict(value: dict, registry: TypeRegistry, path: str) -> Any:
    if all(_is_plain_key(k) for k in value):
        return {k: _encode(v, registry, f"{path}.{k}") for k, v in value.items()}
    return {
        TAG: "dict",
        "v": [
            [_encode(k, registry, f"{path}<key>"), _encode(v, registry, f"{path}[{k!r}]")]
            for k, v in value.items()
        ],
    }


def _encode_object(value: Any, registry: TypeRegistry, path: str) -> Any:
    cls = type(value)
    kind = _kind_of_class(cls)
    if kind is None or cls not in registry:
        raise UnsupportedValueError(
            f"the typed codec cannot store a {class_name(cls)} (not registered)", path=path
        )
    name = class_name(cls)
    if kind == "enum":
        return {TAG: "enum", "cls": name, "v": _encode(value.value, registry, f"{path}.value")}
    if kind == "namedtuple":
        return {TAG: "namedtuple", "cls": name, "v": _encode_items(value, registry, path)}
    if kind == "send":
        return {
            TAG: "send",
            "cls": name,
            "v": _encode(
                {"node": value.node, "arg": value.arg, "timeout": value.timeout}, registry, path
            ),
        }
    if kind == "model":
        fields = {k: _encode(v, registry, f"{path}.{k}") for k, v in value.__dict__.items()}
        out: dict[str, Any] = {TAG: "model", "cls": name, "v": fields}
        fields_set = value.__pydantic_fields_set__
        if fields_set != set(value.__dict__):
            out["set"] = sorted(fields_set)
        extra = value.__pydantic_extra__
        if extra:
            out["extra"] = _encode_dict(extra, registry, f"{path}<extra>")
        return out
    # dataclass: every field, including init=False ones, is restored as it is now.
    fields = {
        f.name: _encode(getattr(value, f.name), registry, f"{path}.{f.name}")
        for f in dataclasses.fields(value)
    }
    return {TAG: "dataclass", "cls": name, "v": fields}


# --------------------------------------------------------------------- decode


def _decode(data: Any, registry: TypeRegistry, path: str) -> Any:
    t = type(data)
    if t is list:
        return [_decode(item, registry, f"{path}[{i}]") for i, item in enumerate(data)]
    if t is dict:
        tag = data.get(TAG)
        if tag is None:
            return {k: _decode(v, registry, f"{path}.{k}") for k, v in data.items()}
        decoder = _DECODERS.get(tag) if isinstance(tag, str) else None
        if decoder is None:
            raise CodecError(f"unknown type tag {tag!r}", path=path)
        try:
            return decoder(data, registry, path)
        except CodecError:
            raise
        except Exception as exc:  # malformed payload of a known tag
            raise CodecError(f"malformed {tag!r} value: {exc}", path=path) from exc
    return data


def _items(data: dict, registry: TypeRegistry, path: str) -> list[Any]:
    payload = data["v"]
    if type(payload) is not list:
        raise CodecError("expected a list payload", path=path)
    return [_decode(item, registry, f"{path}[{i}]") for i, item in enumerate(payload)]


def _decode_datetime(data: dict, registry: TypeRegistry, path: str) -> dt.datetime:
    value = dt.datetime.fromisoformat(data["v"])
    if zone := data.get("tz"):
        from zoneinfo import ZoneInfo

        value = value.astimezone(ZoneInfo(zone))
    return value


def _decode_dict(data: dict, registry: TypeRegistry, path: str) -> dict:
    return {
        _decode(k, registry, f"{path}<key>"): _decode(v, registry, f"{path}[{i}]")
        for i, (k, v) in enumerate(data["v"])
    }


def _revive_class(data: dict, registry: TypeRegistry, path: str, kind: str) -> type:
    cls = registry.lookup(data.get("cls"), path)
    if _kind_of_class(cls) != kind:
        raise CodecError(f"{data.get('cls')!r} is not a {kind}", path=path)
    return cls


def _decode_model(data: dict, registry: TypeRegistry, path: str) -> Any:
    cls = _revive_class(data, registry, path, "model")
    fields = {k: _decode(v, registry, f"{path}.{k}") for k, v in data["v"].items()}
    fields_set = set(data["set"]) if "set" in data else set(fields)
    obj = cls.model_construct(_fields_set=fields_set, **fields)
    if "extra" in data:
        obj.__pydantic_extra__ = _decode(data["extra"], registry, f"{path}<extra>")
    return obj


def _decode_dataclass(data: dict, registry: TypeRegistry, path: str) -> Any:
    cls = _revive_class(data, registry, path, "dataclass")
    # Restore state without running __init__/__post_init__: the stored fields are
    # the object as it was, and re-running initialisers could change them.
    obj = object.__new__(cls)
    for name, raw in data["v"].items():
        object.__setattr__(obj, name, _decode(raw, registry, f"{path}.{name}"))
    return obj


def _decode_send(data: dict, registry: TypeRegistry, path: str) -> Any:
    cls = _revive_class(data, registry, path, "send")
    fields = _decode(data["v"], registry, path)
    return cls(fields["node"], fields["arg"], timeout=fields["timeout"])


_DECODERS: dict[str, Callable[[dict, TypeRegistry, str], Any]] = {
    "int": lambda d, r, p: int(d["v"]),
    "float": lambda d, r, p: float(d["v"]),
    "nul": lambda d, r, p: "\x00".join(_items(d, r, p)),
    "str": lambda d, r, p: base64.b64decode(d["v"]).decode("utf-8", "surrogatepass"),
    "dict": _decode_dict,
    "tuple": lambda d, r, p: tuple(_items(d, r, p)),
    "set": lambda d, r, p: set(_items(d, r, p)),
    "frozenset": lambda d, r, p: frozenset(_items(d, r, p)),
    "bytes": lambda d, r, p: base64.b64decode(d["v"]),
    "bytearray": lambda d, r, p: bytearray(base64.b64decode(d["v"])),
    "datetime": _decode_datetime,
    "date": lambda d, r, p: dt.date.fromisoformat(d["v"]),
    "time": lambda d, r, p: dt.time.fromisoformat(d["v"]),
    "timedelta": lambda d, r, p: dt.timedelta(*d["v"]),
    "uuid": lambda d, r, p: uuid.UUID(d["v"]),
    "decimal": lambda d, r, p: Decimal(d["v"]),
    "enum": lambda d, r, p: _revive_class(d, r, p, "enum")(_decode(d["v"], r, p)),
    "namedtuple": lambda d, r, p: _revive_class(d, r, p, "namedtuple")(*_items(d, r, p)),
    "model": _decode_model,
    "dataclass": _decode_dataclass,
    "send": _decode_send,
}


def default_registry() -> TypeRegistry:
    """The built-in allowlist: LangChain messages and LangGraph's own value types."""
    from langchain_core import messages
    from langgraph.checkpoint.serde.types import _DeltaSnapshot
    from langgraph.types import Command, Interrupt, Overwrite, Send

    message_classes = [
        getattr(messages, name)
        for name in (
            "AIMessage",
            "AIMessageChunk",
            "HumanMessage",
            "HumanMessageChunk",
            "SystemMessage",
            "SystemMessageChunk",
            "ToolMessage",
            "ToolMessageChunk",
            "FunctionMessage",
            "FunctionMessageChunk",
            "ChatMessage",
            "ChatMessageChunk",
            "RemoveMessage",
        )
        if hasattr(messages, name)
    ]
    return TypeRegistry([*message_classes, _DeltaSnapshot, Command, Interrupt, Overwrite, Send])
