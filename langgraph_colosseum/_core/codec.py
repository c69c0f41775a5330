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
* Key order survives jsonb, which stores object keys shortest first, then
  bytewise (`jsonb_order`). A plain dict whose insertion order differs from
  that is written with its keys as real object keys (so ``->`` and ``@>`` still
  see them) plus ``"$t": [its keys, in order]``; a list is never a tag name, and
  a user key "$t" already takes the pair-list form. A dict already in jsonb's
  order is written exactly as before, at no cost in bytes (`_encode_dict`).

Paths ("$.messages[3].content") are not built while encoding, which would cost
more than the encoding itself: a failure carries path segments up the stack,
each container adding its own (`_PathError`).
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import datetime as dt
import enum
import logging
import math
import uuid
from collections.abc import Callable, Iterable, Mapping
from decimal import Decimal
from types import MappingProxyType
from typing import Any

from langgraph_colosseum.errors import (
    ClassChangedError,
    CodecError,
    UnsupportedValueError,
    UntrustedTypeError,
)

logger = logging.getLogger("langgraph_colosseum")

TAG = "$t"
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
# Above this magnitude an integral float is printed by jsonb without a decimal
# point ("1e16" → 10000000000000000) and would come back as an int.
_FLOAT_EXACT_LIMIT = 1e15

try:  # pydantic comes with langchain-core, but keep the codec importable alone
    from pydantic import BaseModel as _PydanticModel
except ImportError:  # pragma: no cover
    _PydanticModel = None  # type: ignore[assignment,misc]


def class_name(cls: type) -> str:
    """The registry name of a class: ``module:qualname``."""
    return f"{cls.__module__}:{cls.__qualname__}"


class UnregisteredClass(UnsupportedValueError):
    """The value holds an instance of a class the registry could revive, were it
    registered (a model, dataclass, NamedTuple or Enum): `cls`."""

    def __init__(self, message: str, *, path: str = "$", cls: type | None = None) -> None:
        super().__init__(message, path=path)
        self.cls = cls

    def under(self, segment: str) -> CodecError:
        return type(self)(self.message, path="$" + segment + self.path[1:], cls=self.cls)


class _PathError(Exception):
    """An encode/decode failure on its way up; containers prepend their segment."""

    def __init__(self, error_type: type[CodecError], message: str, **details: Any) -> None:
        self.error_type = error_type
        self.message = message
        self.details = details
        self.segments: list[str] = []

    def at(self, segment: str) -> _PathError:
        self.segments.append(segment)
        return self

    def public(self) -> CodecError:
        path = "$" + "".join(reversed(self.segments))
        return self.error_type(self.message, path=path, **self.details)


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

    # False in `matching()`'s view: data for comparing (``@>``, ``=``), not for storing.
    keep_order = True
    # Stored field name -> name now, by class name, in `renaming()`'s view: read
    # only where a stored value no longer fits its class, so it costs nothing
    # on values that do.
    field_renames: Mapping[str, Mapping[str, str]] = MappingProxyType({})

    def __init__(self, classes: Iterable[type] = ()) -> None:
        self._by_name: dict[str, type] = {}
        self._names: dict[type, str] = {}
        # Each class's kind (`_kind_of_class`), decided once: asking pydantic
        # with issubclass per value went through Python-level ABC checks.
        self._kinds: dict[type, str] = {}
        for cls in classes:
            self.register(cls)

    def matching(self) -> TypeRegistry:
        """A view of this registry whose `encode` records no key order: for the
        right side of a containment (``@>``) match, which stored values contain
        whatever order they recorded. Shares the allowlist."""
        view = copy.copy(self)
        view.keep_order = False
        return view

    def renaming(self, field_renames: Mapping[str, Mapping[str, str]]) -> TypeRegistry:
        """A view of this registry that revives a stored field under its new name
        (``{"app.Position": {"ticker": "symbol"}}``) where the stored value has the
        old name and lacks the new one: a state migration's `fields`. Applied
        before added and removed fields are fitted. Shares the allowlist."""
        view = copy.copy(self)
        view.field_renames = MappingProxyType({k: dict(v) for k, v in field_renames.items()})
        return view

    def register(self, cls: type) -> type:
        """Allow `cls` (a pydantic model, dataclass, Enum or NamedTuple) to round-trip.

        Returns the class, so it can be used as a decorator.
        """
        kind = _kind_of_class(cls)
        if not kind:
            raise TypeError(
                f"{class_name(cls)} is not a pydantic model, dataclass, Enum or "
                "NamedTuple; the codec cannot store it as jsonb (serde will)."
            )
        self._by_name[class_name(cls)] = cls
        self._names[cls] = class_name(cls)
        self._kinds[cls] = kind
        return cls

    def classes(self) -> list[type]:
        return list(self._names)

    def __contains__(self, cls: type) -> bool:
        return cls in self._names

    def name_of(self, cls: type) -> str | None:
        return self._names.get(cls)

    def kind_of(self, cls: type) -> str | None:
        """The kind of a registered class: "model", "dataclass", "enum", ..."""
        kind = self._kinds.get(cls)
        if kind is None:  # registered some other way than `register`
            kind = _kind_of_class(cls)
            if kind is not None:
                self._kinds[cls] = kind
        return kind

    def lookup(self, name: Any) -> type:
        cls = self._by_name.get(name) if isinstance(name, str) else None
        if cls is None:
            raise _PathError(
                UntrustedTypeError,
                f"type tag names {name!r}, which is not on the allowlist; nothing was "
                "imported or constructed",
            )
        return cls

    def encode(self, value: Any) -> Any:
        """Encode `value` to JSON-compatible data (see module docstring)."""
        try:
            return _encode(value, self)
        except _PathError as failure:
            raise failure.public() from None

    def decode(self, data: Any) -> Any:
        """Decode data produced by `encode` (or read back from jsonb)."""
        try:
            return _decode(data, self)
        except _PathError as failure:
            raise failure.public() from None


def _kind_of_class(cls: type) -> str | None:
    if not isinstance(cls, type):
        return None
    if _PydanticModel is not None and issubclass(cls, _PydanticModel):
        return "model"
    if issubclass(cls, enum.Enum):
        return "enum"
    if issubclass(cls, tuple) and hasattr(cls, "_fields"):
        return "namedtuple"
    if dataclasses.is_dataclass(cls):
        return "dataclass"
    if cls.__module__ == "langgraph.types" and cls.__qualname__ == "Send":
        return "send"
    return None


# --------------------------------------------------------------------- encode


def _encode(value: Any, registry: TypeRegistry) -> Any:
    encoder = _ENCODERS.get(type(value))
    if encoder is not None:
        return encoder(value, registry)
    return _encode_object(value, registry)


def _encode_str(value: str) -> Any:
    if value.isascii():  # the common case, checked at C speed
        return value if "\x00" not in value else _encode_nul(value)
    if "\x00" in value:
        return _encode_nul(value)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # unpaired surrogates: not valid UTF-8, not valid jsonb
        raw = value.encode("utf-8", "surrogatepass")
        return {TAG: "str", "v": base64.b64encode(raw).decode("ascii")}
    return value


def _encode_nul(value: str) -> Any:
    return {TAG: "nul", "v": [_encode_str(part) for part in value.split("\x00")]}


def _encode_int(value: int) -> Any:
    if _INT64_MIN <= value <= _INT64_MAX:
        return value
    try:
        return {TAG: "int", "v": str(value)}
    except ValueError:  # beyond sys.get_int_max_str_digits(): hex has no limit
        return {TAG: "int", "v": hex(value)}


def _encode_float(value: float) -> Any:
    if math.isfinite(value) and not (value == 0.0 and math.copysign(1.0, value) < 0):
        if not (value.is_integer() and abs(value) >= _FLOAT_EXACT_LIMIT):
            return value
    return {TAG: "float", "v": repr(value)}


def _encode_items(items: Iterable[Any], registry: TypeRegistry) -> list[Any]:
    encoded = []
    for item in items:
        try:
            encoded.append(_encode(item, registry))
        except _PathError as failure:
            raise failure.at(f"[{len(encoded)}]") from None
    return encoded


def _encode_set(value: set | frozenset, registry: TypeRegistry) -> Any:
    # Sorted where possible so equal sets give equal jsonb.
    items = list(value)
    try:
        items.sort()
    except Exception:  # unorderable members (TypeError), Decimal NaN (InvalidOperation)
        pass
    return {TAG: type(value).__name__, "v": _encode_items(items, registry)}


def _encode_datetime(value: dt.datetime) -> Any:
    zone = getattr(value.tzinfo, "key", None)  # zoneinfo.ZoneInfo keeps its name
    if not zone:
        return {TAG: "datetime", "v": value.isoformat()}
    # The wall time, the zone's name and the fold: exactly the object, even for
    # wall times a DST change skips or repeats.
    return {
        TAG: "datetime",
        "v": value.replace(tzinfo=None).isoformat(),
        "tz": zone,
        "fold": value.fold,
    }


def is_object_key(key: Any) -> bool:
    """Whether `key` can be a jsonb object key as it is (no NUL, no lone surrogate)."""
    return type(key) is str and _encode_str(key) is key


def _encode_fields(fields: dict[str, Any], registry: TypeRegistry, prefix: str = ".") -> dict:
    """A dict whose keys are known to be plain (attribute names, plain dict keys)."""
    out = {}
    for key, value in fields.items():
        # Inline the values that are their own encoding: most of a message's
        # fields, and a function call per field would double the cost.
        t = type(value)
        if value is None or t is bool or (t is str and value.isascii() and "\x00" not in value):
            out[key] = value
            continue
        try:
            out[key] = _encode(value, registry)
        except _PathError as failure:
            raise failure.at(f"{prefix}{key}") from None
    return out


def in_jsonb_order(keys: Iterable[str]) -> bool:
    """Whether jsonb keeps these (distinct, plain) keys in this order: shorter
    keys first, keys of one length by their UTF-8 bytes (which is code point
    order, the order Python compares strings in)."""
    last_size = -1
    last = ""
    for key in keys:
        size = len(key) if key.isascii() else len(key.encode())
        if size < last_size or (size == last_size and key < last):
            return False
        last_size = size
        last = key
    return True


def _plain_keys(value: dict) -> bool:
    """Whether every key is a str other than TAG that jsonb holds as it is
    (`is_object_key`), the common case (ASCII, no NUL) decided inline: a call
    per key was most of the cost of a small dict's encoding (a checkpoint's
    `versions_seen` is a dict of such dicts)."""
    for key in value:
        if type(key) is not str or key == TAG:
            return False
        if not (key.isascii() and "\x00" not in key) and _encode_str(key) is not key:
            return False
    return True


def _encode_dict(value: dict, registry: TypeRegistry) -> Any:
    if not value:
        return {}
    if _plain_keys(value):
        out = _encode_fields(value, registry)
        if registry.keep_order and not in_jsonb_order(value):
            out[TAG] = list(value)
        return out
    pairs = []
    for key, item in value.items():
        try:
            pairs.append([_encode(key, registry), _encode(item, registry)])
        except _PathError as failure:
            raise failure.at(f"[{key!r}]") from None
    return {TAG: "dict", "v": pairs}


def _encode_object(value: Any, registry: TypeRegistry) -> Any:
    cls = type(value)
    name = registry.name_of(cls)
    if name is None:
        kind = _kind_of_class(cls)
        raise _PathError(
            UnregisteredClass if kind not in (None, "send") else UnsupportedValueError,
            f"the typed codec cannot store a {class_name(cls)} (not registered)",
            **({"cls": cls} if kind not in (None, "send") else {}),
        )
    kind = registry.kind_of(cls)
    if kind == "model":
        out: dict[str, Any] = {
            TAG: "model",
            "cls": name,
            "v": _encode_fields(value.__dict__, registry),
        }
        fields_set = value.__pydantic_fields_set__
        if fields_set != value.__dict__.keys():
            out["set"] = sorted(fields_set)
        if extra := value.__pydantic_extra__:
            out["extra"] = _encode_dict(extra, registry)
        return out
    if kind == "dataclass":
        # Every field, init=False ones included, restored as it is now.
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return {TAG: "dataclass", "cls": name, "v": _encode_fields(fields, registry)}
    if kind == "enum":
        return {TAG: "enum", "cls": name, "v": _encode(value.value, registry)}
    if kind == "namedtuple":
        # With its field names, so a later definition of the class is matched by name.
        return {
            TAG: "namedtuple",
            "cls": name,
            "v": _encode_items(value, registry),
            "f": list(cls._fields),
        }
    fields = {"node": value.node, "arg": value.arg, "timeout": value.timeout}  # Send
    return {TAG: "send", "cls": name, "v": _encode_fields(fields, registry)}


def _b64(value: bytes | bytearray) -> str:
    return base64.b64encode(value).decode("ascii")


_ENCODERS: dict[type, Callable[[Any, TypeRegistry], Any]] = {
    type(None): lambda v, r: v,
    bool: lambda v, r: v,
    str: lambda v, r: _encode_str(v),
    int: lambda v, r: _encode_int(v),
    float: lambda v, r: _encode_float(v),
    list: _encode_items,
    dict: _encode_dict,
    tuple: lambda v, r: {TAG: "tuple", "v": _encode_items(v, r)},
    set: _encode_set,
    frozenset: _encode_set,
    bytes: lambda v, r: {TAG: "bytes", "v": _b64(v)},
    bytearray: lambda v, r: {TAG: "bytearray", "v": _b64(v)},
    dt.datetime: lambda v, r: _encode_datetime(v),
    dt.date: lambda v, r: {TAG: "date", "v": v.isoformat()},
    dt.time: lambda v, r: {TAG: "time", "v": v.isoformat()},
    dt.timedelta: lambda v, r: {TAG: "timedelta", "v": [v.days, v.seconds, v.microseconds]},
    uuid.UUID: lambda v, r: {TAG: "uuid", "v": str(v)},
    Decimal: lambda v, r: {TAG: "decimal", "v": str(v)},
}
"""Exact types written without the registry; subclasses go to `_encode_object`."""


# --------------------------------------------------------------------- decode


def _decode(data: Any, registry: TypeRegistry) -> Any:
    t = type(data)
    if t is list:
        return _decode_items(data, registry)
    if t is dict:
        tag = data.get(TAG)
        if tag is None:
            return _decode_fields(data, registry)
        if type(tag) is list:
            return _decode_ordered(data, tag, registry)
        decoder = _DECODERS.get(tag) if isinstance(tag, str) else None
        if decoder is None:
            raise _PathError(CodecError, f"unknown type tag {tag!r}")
        try:
            return decoder(data, registry)
        except _PathError:
            raise
        except Exception as exc:  # a known tag with a malformed payload
            raise _PathError(CodecError, f"malformed {tag!r} value: {exc}") from exc
    return data


# JSON scalars decode to themselves: inline in the loops below, which saves
# a call per leaf (most of a checkpoint document, metadata or message list).
_SCALARS = frozenset((str, int, float, bool, type(None)))


def _decode_items(items: list, registry: TypeRegistry) -> list:
    decoded = []
    for item in items:
        if type(item) in _SCALARS:
            decoded.append(item)
            continue
        try:
            decoded.append(_decode(item, registry))
        except _PathError as failure:
            raise failure.at(f"[{len(decoded)}]") from None
    return decoded


def _decode_fields(data: dict, registry: TypeRegistry) -> dict:
    out = {}
    for key, value in data.items():
        if type(value) in _SCALARS:
            out[key] = value
            continue
        try:
            out[key] = _decode(value, registry)
        except _PathError as failure:
            raise failure.at(f".{key}") from None
    return out


def _decode_ordered(data: dict, order: list, registry: TypeRegistry) -> dict:
    """A plain dict written with its key order (see `_encode_dict`)."""
    if len(order) != len(data) - 1:
        raise _PathError(CodecError, "the recorded key order does not name the object's keys")
    for key in order:
        if type(key) is not str or key == TAG or key not in data:
            raise _PathError(CodecError, "the recorded key order does not name the object's keys")
    out = {}
    for key in order:
        value = data[key]
        if type(value) in _SCALARS:
            out[key] = value
            continue
        try:
            out[key] = _decode(value, registry)
        except _PathError as failure:
            raise failure.at(f".{key}") from None
    if len(out) != len(order):
        raise _PathError(CodecError, "the recorded key order names a key twice")
    return out


def _payload_items(data: dict, registry: TypeRegistry) -> list:
    payload = data["v"]
    if type(payload) is not list:
        raise _PathError(CodecError, f"expected a list payload in {data.get(TAG)!r}")
    return _decode_items(payload, registry)


def _decode_datetime(data: dict, registry: TypeRegistry) -> dt.datetime:
    value = dt.datetime.fromisoformat(data["v"])
    if zone := data.get("tz"):
        from zoneinfo import ZoneInfo

        value = value.replace(tzinfo=ZoneInfo(zone), fold=data.get("fold", 0))
    return value


def _decode_dict(data: dict, registry: TypeRegistry) -> dict:
    return dict(_payload_items(data, registry))


def _revive_class(data: dict, registry: TypeRegistry, kind: str) -> type:
    cls = registry.lookup(data.get("cls"))
    if registry.kind_of(cls) != kind:
        raise _PathError(CodecError, f"{data.get('cls')!r} is not a {kind}")
    return cls


def _decode_model(data: dict, registry: TypeRegistry) -> Any:
    cls = _revive_class(data, registry, "model")
    decoded = _decode_fields(data["v"], registry)
    # jsonb keeps object keys in an order of its own: put the fields back in
    # the model's declared order, so the model (and its dumps) is as it was.
    declared = cls.model_fields
    fields = {name: decoded.pop(name) for name in declared if name in decoded}
    fields_set = set(data["set"]) if "set" in data else set(data["v"])
    if decoded or len(fields) != len(declared):  # the class changed since it was stored
        renamed = _rename_fields(registry, data["cls"], fields, decoded, declared)
        fields_set = {renamed.get(name, name) for name in fields_set}
        missing = [name for name in declared if name not in fields]
        _evolve(
            data["cls"],
            fields,
            decoded,
            missing,
            lambda name: declared[name].is_required(),
            lambda name: declared[name].get_default(call_default_factory=True),
        )
        fields = {name: fields[name] for name in declared}
        fields_set &= set(fields)
    extra = _decode(data["extra"], registry) if "extra" in data else None
    if extra is None and cls.model_config.get("extra") == "allow":
        extra = {}  # pydantic keeps an empty dict for models that allow extras
    if cls.__private_attributes__:
        obj = cls.model_construct(_fields_set=fields_set, **fields)
        if extra is not None:
            obj.__pydantic_extra__ = extra
        return obj
    # What model_construct does for a model without private attributes, given
    # every field: set the instance state directly. It is most of a history
    # read's cost otherwise (every message of every checkpoint).
    obj = cls.__new__(cls)
    object.__setattr__(obj, "__dict__", fields)
    object.__setattr__(obj, "__pydantic_fields_set__", fields_set)
    object.__setattr__(obj, "__pydantic_extra__", extra)
    object.__setattr__(obj, "__pydantic_private__", None)
    return obj


def _decode_dataclass(data: dict, registry: TypeRegistry) -> Any:
    cls = _revive_class(data, registry, "dataclass")
    # Restore state without running __init__/__post_init__: the stored fields are
    # the object as it was, and re-running initialisers could change them.
    obj = object.__new__(cls)
    decoded = _decode_fields(data["v"], registry)
    declared = {field.name: field for field in dataclasses.fields(cls)}
    fields = {name: decoded.pop(name) for name in declared if name in decoded}
    if decoded or len(fields) != len(declared):  # the class changed since it was stored
        _rename_fields(registry, data["cls"], fields, decoded, declared)
        _evolve(
            data["cls"],
            fields,
            decoded,
            [name for name in declared if name not in fields],
            lambda name: _dataclass_default(declared[name]) is dataclasses.MISSING,
            lambda name: _dataclass_default(declared[name])(),
        )
    # In declared order, as __init__ would have set them: jsonb reordered them.
    for name in declared:
        object.__setattr__(obj, name, fields[name])
    return obj


def _dataclass_default(field: dataclasses.Field) -> Any:
    """A callable making `field`'s default, or MISSING."""
    if field.default is not dataclasses.MISSING:
        return lambda: field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory
    return dataclasses.MISSING


def _decode_namedtuple(data: dict, registry: TypeRegistry) -> Any:
    cls = _revive_class(data, registry, "namedtuple")
    items = _payload_items(data, registry)
    declared = cls._fields
    names = data.get("f")
    if names is None:  # written before field names were recorded: by position
        if len(items) > len(declared):
            raise _PathError(
                ClassChangedError,
                f"stored {data['cls']} has {len(items)} values, its class now has "
                f"{len(declared)} fields {list(declared)}; a removed field cannot be "
                "told apart by position: migrate the value (saver.versioned)",
            )
        names = declared[: len(items)]
    stored = dict(zip(names, items))
    if list(names) == list(declared):
        return cls(*items)
    fields = {name: stored.pop(name) for name in declared if name in stored}
    _rename_fields(registry, data["cls"], fields, stored, declared)
    defaults = cls._field_defaults
    _evolve(
        data["cls"],
        fields,
        stored,
        [name for name in declared if name not in fields],
        lambda name: name not in defaults,
        lambda name: defaults[name],
    )
    return cls(**fields)


_DROPPED_LOGGED: set[str] = set()


def _rename_fields(
    registry: TypeRegistry,
    name: str,
    fields: dict[str, Any],
    unknown: dict[str, Any],
    declared: Iterable[str],
) -> dict[str, str]:
    """Move each stored field the class no longer has (in `unknown`) that the
    registry's renames map to a declared field absent from `fields` into
    `fields` under its new name. Returns what was renamed (old -> new)."""
    renames = registry.field_renames.get(name)
    if not renames:
        return {}
    done = {}
    for old in list(unknown):
        new = renames.get(old)
        if new is not None and new not in fields and new in declared:
            fields[new] = unknown.pop(old)
            done[old] = new
    return done


def _evolve(
    name: str,
    fields: dict[str, Any],
    removed: dict[str, Any],
    missing: list[str],
    required: Callable[[str], bool],
    default: Callable[[str], Any],
) -> None:
    """Fit stored `fields` to the class as defined now: a field added with a
    default gets it, a removed field is dropped (logged once per class); a
    field added without a default is a `ClassChangedError` naming them all."""
    without_default = [field for field in missing if required(field)]
    if without_default:
        extra = f"; stored fields no longer in the class: {sorted(removed)}" if removed else ""
        raise _PathError(
            ClassChangedError,
            f"stored {name} cannot be revived by its class as defined now: its fields "
            f"{without_default} have no default and are missing from the stored value"
            f"{extra}. Give them a default; a renamed field is a state migration's "
            "fields= (saver.versioned(graph, version, {n: Migration(fields={Class: "
            "{'old': 'new'}})}))",
        )
    for field in missing:
        fields[field] = default(field)
    if removed and name not in _DROPPED_LOGGED:
        _DROPPED_LOGGED.add(name)
        logger.warning(
            "stored %s values hold fields its class no longer has: %s; they are dropped "
            "as they are read (logged once per class)",
            name,
            sorted(removed),
        )


def _decode_send(data: dict, registry: TypeRegistry) -> Any:
    cls = _revive_class(data, registry, "send")
    fields = _decode_fields(data["v"], registry)
    return cls(fields["node"], fields["arg"], timeout=fields["timeout"])


_DECODERS: dict[str, Callable[[dict, TypeRegistry], Any]] = {
    "int": lambda d, r: int(d["v"], 16 if "x" in d["v"] else 10),
    "float": lambda d, r: float(d["v"]),
    "nul": lambda d, r: "\x00".join(_payload_items(d, r)),
    "str": lambda d, r: base64.b64decode(d["v"]).decode("utf-8", "surrogatepass"),
    "dict": _decode_dict,
    "tuple": lambda d, r: tuple(_payload_items(d, r)),
    "set": lambda d, r: set(_payload_items(d, r)),
    "frozenset": lambda d, r: frozenset(_payload_items(d, r)),
    "bytes": lambda d, r: base64.b64decode(d["v"]),
    "bytearray": lambda d, r: bytearray(base64.b64decode(d["v"])),
    "datetime": _decode_datetime,
    "date": lambda d, r: dt.date.fromisoformat(d["v"]),
    "time": lambda d, r: dt.time.fromisoformat(d["v"]),
    "timedelta": lambda d, r: dt.timedelta(*d["v"]),
    "uuid": lambda d, r: uuid.UUID(d["v"]),
    "decimal": lambda d, r: Decimal(d["v"]),
    "enum": lambda d, r: _revive_class(d, r, "enum")(_decode(d["v"], r)),
    "namedtuple": _decode_namedtuple,
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
