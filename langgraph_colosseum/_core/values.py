"""How one value becomes columns, and how rows become values again.

Writing: the typed codec is tried first, so state is queryable `jsonb`; a value
it cannot express goes to the configured serde as bytes. With an
`EncryptedSerializer` every value goes to serde: encrypted values are bytes by
design, and never delta-shaped.

Reading: `Materializer` rebuilds channel values from rows, following delta rows
(`append`, `merge`) down to their full base and memoising every version it
rebuilds, so a chain shared by many checkpoints is decoded once.
"""

from __future__ import annotations

import copy
import datetime as dt
import threading
import uuid
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from copy import deepcopy
from decimal import Decimal
from typing import Any, NamedTuple

import orjson
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

from langgraph_colosseum._core import shapes
from langgraph_colosseum._core.arrays import BytesArray, TextArray
from langgraph_colosseum._core.codec import TypeRegistry, UnregisteredClass, is_object_key
from langgraph_colosseum._core.crypt import (
    SEALED_KEY,
    Encryption,
    RowSealError,
    is_sealed,
    is_sealed_json,
    registry_aad,
    value_aad,
)
from langgraph_colosseum.errors import (
    ClassChangedError,
    CodecError,
    ColosseumError,
    CorruptRowError,
    EncryptedFieldError,
    UnregisteredClassError,
    UnsupportedValueError,
    ValueNotStorableError,
)

try:
    from pydantic import BaseModel as _Model
except ImportError:  # pragma: no cover
    _Model = None  # type: ignore[assignment,misc]

JSON, SERDE, EMPTY_ENCODING = "json", "serde", "empty"
ERROR_CHANNEL = "__error__"  # langgraph.checkpoint.serde.types.ERROR
_IMMUTABLE = frozenset(
    {
        str,
        int,
        float,
        bool,
        type(None),
        bytes,
        Decimal,
        uuid.UUID,
        dt.datetime,
        dt.date,
        dt.time,
        dt.timedelta,
        frozenset,
    }
)
DELTA_ENCODINGS = (shapes.APPEND, shapes.MERGE)


class StoredValue(NamedTuple):
    encoding: str  # 'json' | 'serde' | 'empty' | 'append' | 'merge'
    json: str | None
    data: bytes | None
    type: str | None
    base_version: str | None = None
    depth: int = 0


EMPTY = StoredValue(EMPTY_ENCODING, None, None, None)


class Where(NamedTuple):
    """Where a value lives, for error messages."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str | None
    channel: str


ValueKey = tuple[str, str, str, str]  # (thread_id, checkpoint_ns, channel, version)


class ValueRow(NamedTuple):
    """A `colosseum_channel_values` row, its jsonb already parsed."""

    key: ValueKey
    base_version: str | None
    encoding: str
    parsed: Any  # orjson.loads of the jsonb text, or None
    data: bytes | None
    type: str | None


class ValueCodec:
    """Typed jsonb first, serde bytes as the fallback."""

    def __init__(
        self,
        serde: SerializerProtocol,
        registry: TypeRegistry,
        encryption: Encryption | None = None,
    ) -> None:
        self.serde = serde
        self.registry = registry
        self.jsonb_values = not isinstance(serde, EncryptedSerializer)
        self.matching_registry = registry.matching()
        self.encryption = encryption
        # The classes the serde revives as themselves, as (module, qualname); None:
        # a serde of the user's own, trusted to revive what it stores.
        self.serde_revives: frozenset[tuple[str, str]] | None = None

    def renaming_fields(self, field_renames: Mapping[str, Mapping[str, str]]) -> ValueCodec:
        """This codec reviving stored fields under new names (`TypeRegistry.renaming`)."""
        clone = copy.copy(self)
        clone.registry = self.registry.renaming(field_renames)
        return clone

    def encrypts(self, channel: str) -> bool:
        """Whether rows of `channel` are stored sealed (see _core/crypt.py)."""
        return self.encryption is not None and self.encryption.encrypts(channel)

    def seal(self, stored: StoredValue, channel: str, aad: bytes) -> StoredValue:
        """The row as stored: sealed when `channel` is encrypted, else as it is."""
        if not self.encrypts(channel):
            return stored
        assert self.encryption is not None
        sealed = self.encryption.seal(stored.encoding, stored.json, stored.data, stored.type, aad)
        return stored._replace(json=sealed.json, data=sealed.data, type=sealed.type)

    def open(
        self, channel: str, json: Any, data: bytes | None, type_: str | None, aad: bytes
    ) -> tuple[Any, bytes | None, str | None, bool]:
        """(json, data, type, opened) of a stored row: a sealed row opened (its json
        as text), a plaintext one as it is. `RowSealError` when the row is not what
        this saver's encryption requires, or does not open: fail closed."""
        encryption = self.encryption
        if encryption is None:
            if is_sealed(type_):
                raise RowSealError("the row is encrypted and this saver has no encryption= keys")
            return json, data, type_, False
        if not is_sealed(type_) and not encryption.encrypts(channel):
            return json, data, type_, False  # a channel listed as plaintext
        opened = encryption.open(json, data, type_, aad)
        return opened.json, opened.data, opened.type, True

    def open_value_row(self, row: ValueRow) -> ValueRow:
        """`row` with its columns in plaintext (see `open`)."""
        if self.encryption is None and not is_sealed(row.type):
            return row
        thread_id, checkpoint_ns, channel, version = row.key
        aad = value_aad(thread_id, checkpoint_ns, channel, version, row.encoding, row.base_version)
        json, data, type_, opened = self.open(channel, row.parsed, row.data, row.type, aad)
        if not opened:
            return row
        return row._replace(
            parsed=orjson.loads(json) if json is not None else None, data=data, type=type_
        )

    def encode(self, value: Any, registry: TypeRegistry | None = None) -> tuple[Any, str]:
        """Typed-codec data and its JSON text; `UnsupportedValueError` if it cannot:
        a type it does not know, a value nested too deep, or one too big for jsonb."""
        encoded = self.encode_data(value, registry)
        try:
            text = orjson.dumps(encoded)
        except orjson.JSONEncodeError:  # the only way codec output fails: depth
            raise UnsupportedValueError(_TOO_DEEP, path=too_deep_path(value)) from None
        if len(text) > JSONB_MAX_TEXT:
            raise UnsupportedValueError(
                f"its JSON is {len(text):,} bytes, more than one jsonb value holds "
                f"({JSONB_MAX_TEXT:,})"
            )
        return encoded, text.decode()

    def encode_data(self, value: Any, registry: TypeRegistry | None = None) -> Any:
        """Typed-codec data (no JSON text); `UnsupportedValueError` as `encode`."""
        try:
            return (registry or self.registry).encode(value)
        except RecursionError:  # nested deeper than Python's stack
            raise UnsupportedValueError(_TOO_DEEP, path=too_deep_path(value)) from None

    def dump(self, value: Any, where: Where) -> StoredValue:
        if self.jsonb_values:
            try:
                return StoredValue(JSON, self.encode(value)[1], None, None)
            except UnsupportedValueError as exc:
                return self.dump_fallback(value, where, exc)
        return self.dump_serde(value, where)

    def dump_fallback(
        self, value: Any, where: Where, failure: UnsupportedValueError
    ) -> StoredValue:
        """`value`, which the typed codec could not express, as serde bytes, or
        `UnregisteredClassError` if the serde would revive it as a plain dict.

        LangGraph's error writes (`__error__`) are exempt: an exception is
        stored for the record (the thread's status, get_state's `error`), and
        the serde keeps what it can of it.
        """
        if (
            type(failure) is UnregisteredClass
            and self.serde_revives is not None
            and where.channel != ERROR_CHANNEL
        ):
            cls = failure.cls
            assert cls is not None
            if (cls.__module__, cls.__qualname__) not in self.serde_revives:
                raise refused(where, failure)
        return self.dump_serde(value, where, failure.path)

    def dump_serde(self, value: Any, where: Where, path: str = "$") -> StoredValue:
        try:
            type_, data = self.serde.dumps_typed(value)
        except Exception as exc:
            raise not_storable(where, path, exc) from exc
        if len(data) > BYTEA_MAX:
            # Refused here, in a moment: Postgres would take seconds and
            # gigabytes of memory to say the same.
            raise not_storable(
                where,
                path,
                ValueError(
                    f"its serialized form is {len(data):,} bytes, more than one row "
                    f"holds ({BYTEA_MAX:,})"
                ),
            )
        return StoredValue(SERDE, None, data, type_)

    def dump_json(self, value: Any, *, filter: bool = False) -> str:
        """Typed-codec JSON text, for values that must stay jsonb (metadata, filters).

        A `filter` records no dict key order: it is the right side of a
        containment (``@>``), and the stored side may have recorded one.
        """
        return self.encode(value, self.matching_registry if filter else self.registry)[1]

    def load(self, encoding: str, json: str | None, data: bytes | None, type_: str | None) -> Any:
        """A full (non-delta) stored value."""
        return self.load_parsed(encoding, parse_json(json), data, type_)

    def load_parsed(self, encoding: str, parsed: Any, data: bytes | None, type_: str | None) -> Any:
        if type(parsed) is Unparsed:
            raise parsed.error()
        if encoding == JSON:
            return self.registry.decode(parsed)
        if encoding == SERDE:
            return self.serde.loads_typed((type_ or "", data or b""))
        raise CodecError(f"value encoding {encoding!r} is not a full value")

    def load_json(self, text: str | None) -> Any:
        parsed = parse_json(text or "null")
        if type(parsed) is Unparsed:
            raise parsed.error()
        return self.registry.decode(parsed)

    # ------------------------------------------------ metadata and the registry
    #
    # With encryption= these keep their jsonb shape, so SQL reads the keys that
    # stay plaintext; see _core/crypt.py for the sealed forms.

    def seal_metadata(self, metadata: Mapping[str, Any], text: str, aad: bytes) -> str:
        """A checkpoint's metadata as stored: `text` (its JSON) when not encrypted;
        else its plaintext keys, and the whole of it sealed under SEALED_KEY."""
        encryption = self.encryption
        if encryption is None:
            return text
        document = self.registry.encode(
            {k: v for k, v in metadata.items() if encryption.plain_metadata_key(k)}
        )
        document[SEALED_KEY] = encryption.seal_json(text, aad)
        return orjson.dumps(document).decode()

    def load_metadata(self, text: str | None, aad: bytes) -> Any:
        """A checkpoint's metadata from its stored form (see `seal_metadata`);
        `RowSealError` when it is not sealed, does not open, or a plaintext key
        differs from the sealed copy: fail closed."""
        encryption = self.encryption
        parsed = parse_json(text or "null")
        if encryption is None:
            if type(parsed) is dict and is_sealed_json(parsed.get(SEALED_KEY)):
                raise RowSealError(
                    "the metadata is encrypted and this saver has no encryption= keys"
                )
            return self.load_parsed(JSON, parsed, None, None)
        if type(parsed) is not dict or SEALED_KEY not in parsed:
            raise RowSealError("the metadata is plaintext where ciphertext is expected")
        metadata = self.load_json(encryption.open_json(parsed.pop(SEALED_KEY), aad))
        if type(metadata) is not dict:
            raise CodecError("the sealed metadata is not an object")
        # The plaintext keys are a copy for SQL; each must be what the sealed
        # metadata holds (those listed when the row was written, maybe not now).
        plain = self.registry.decode(parsed)
        if type(plain) is not dict or not all(
            key in metadata and self.encode_data(value) == self.encode_data(metadata[key])
            for key, value in plain.items()
        ):
            raise RowSealError("a plaintext metadata key differs from its sealed copy (altered)")
        return metadata

    def reseal_metadata(self, text: str, aad: bytes, new_aad: bytes) -> str:
        """A checkpoint's stored metadata opened (checked) and sealed for another place."""
        metadata = self.load_metadata(text, aad)
        return self.seal_metadata(metadata, self.encode(metadata)[1], new_aad)

    def sealed_in_registry(self, part: str, key: str) -> bool:
        """Whether the registry row's `part` ("metadata" / "values") seals `key`."""
        encryption = self.encryption
        if encryption is None:
            return False
        if part == "metadata":
            return not encryption.plain_metadata_key(key)
        return encryption.encrypts(key)

    def check_filter(self, part: str, keys: Iterable[str]) -> None:
        """`EncryptedFieldError` for a filter on a key stored sealed: it could
        only ever match nothing."""
        sealed = sorted(k for k in keys if self.sealed_in_registry(part, k))
        if sealed:
            listed = "searchable_metadata" if part == "metadata" else "plaintext_channels"
            raise EncryptedFieldError(
                f"cannot filter on {part} key(s) {', '.join(map(repr, sealed))}: with "
                f"encryption= they are stored encrypted; list them in Encryption({listed}=...) "
                "to keep them searchable (new rows only; older rows stay sealed)"
            )

    def dump_object(
        self,
        mapping: Mapping[str, Any],
        *,
        filter: bool = False,
        sealed_for: tuple[str, str] | None = None,
    ) -> str:
        """A JSON object whose keys are the mapping's own, each value typed-codec data.

        For rows that SQL merges key by key (``||``) or matches by containment
        (``@>``), such as the thread registry: the object itself is never a
        tagged form, so a key spelled like the tag ("$t") is only a key, and one
        merged row can never hide or break the others' keys. A `filter` (the
        right side of ``@>``) leaves out what containment must not compare.
        `sealed_for` is (thread id, "metadata" | "values") of a registry row:
        with encryption=, each key that is not plaintext is sealed on its own.
        """
        registry = self.matching_registry if filter else self.registry
        out = {}
        for key, value in mapping.items():
            if not is_object_key(key):
                raise UnsupportedValueError(
                    f"a key must be a string without NUL or lone surrogates, got {key!r}",
                    path=f"$[{key!r}]",
                )
            try:
                out[key], text = self.encode(value, registry)
            except CodecError as exc:
                raise exc.under(f".{key}") from None
            if sealed_for is not None and self.sealed_in_registry(sealed_for[1], key):
                assert self.encryption is not None
                out[key] = self.encryption.seal_json(text, registry_aad(*sealed_for, key))
        return orjson.dumps(out).decode()

    def seal_registry_value(self, thread_id: str, part: str, key: str, text: str) -> Any:
        """One value of a registry row as stored: its JSON data, or sealed."""
        if not self.sealed_in_registry(part, key):
            return orjson.loads(text)
        assert self.encryption is not None
        return self.encryption.seal_json(text, registry_aad(thread_id, part, key))

    def load_object(
        self, text: str | None, sealed_for: tuple[str, str] | None = None
    ) -> dict[str, Any]:
        """The mapping `dump_object` wrote; `CodecError` (with the path) if it is not
        one, `RowSealError` if a key that must be sealed is not, or does not open."""
        try:
            data = orjson.loads(text or "{}")
        except orjson.JSONDecodeError as exc:
            raise CodecError(f"not readable JSON: {exc}") from None
        if type(data) is not dict:
            raise CodecError(f"expected a JSON object, found {type(data).__name__}")
        out = {}
        for key, value in data.items():
            try:
                if sealed_for is not None and self.sealed_in_registry(sealed_for[1], key):
                    assert self.encryption is not None
                    try:
                        value = orjson.loads(
                            self.encryption.open_json(value, registry_aad(*sealed_for, key))
                        )
                    except RowSealError as exc:
                        raise RowSealError(f"{sealed_for[1]} key {key!r}: {exc}") from None
                elif is_sealed_json(value):
                    # Sealed before the key was listed as plaintext: still opens.
                    if self.encryption is None or sealed_for is None:
                        raise RowSealError(
                            f"{key!r} is encrypted and this saver has no encryption= keys"
                        )
                    value = orjson.loads(
                        self.encryption.open_json(value, registry_aad(*sealed_for, key))
                    )
                out[key] = self.registry.decode(value)
            except CodecError as exc:
                raise exc.under(f".{key}") from None
        return out


# jsonb's offsets are 28 bits: one value holds at most 2**28 - 1 bytes. A JSON
# text above JSONB_MAX_TEXT goes to the serde bytes (a bytea holds 1 GB) rather
# than failing in Postgres after seconds and gigabytes; a serialized value
# above BYTEA_MAX is refused before any I/O. (jsonb's binary form of a long
# array of small numbers outgrows its text: such a value just under the limit
# can still be refused by Postgres, with its own error.)
JSONB_MAX_TEXT = 255 * 2**20
BYTEA_MAX = 2**30 - 2**24
# orjson and msgpack both stop at 255 levels of nesting.
MAX_DEPTH = 255
_TOO_DEEP = f"the value is nested more than {MAX_DEPTH} levels deep, beyond what JSON is read with"


def too_deep_path(value: Any) -> str:
    """The path of the first container nested more than MAX_DEPTH levels deep,
    found without recursion (the value may be too deep for the stack); "$" if
    only the codec's tags push it over."""
    stack: list[tuple[Any, str, int]] = [(value, "$", 1)]
    while stack:
        item, path, depth = stack.pop()
        t = type(item)
        if t is list or t is tuple:
            children = [(f"{path}[{i}]", child) for i, child in enumerate(item)]
        elif t is dict:
            children = [
                (f"{path}.{k}" if type(k) is str else f"{path}[{k!r}]", child)
                for k, child in item.items()
            ]
        elif hasattr(item, "__dict__") and not isinstance(item, type):
            children = [(f"{path}.{k}", child) for k, child in vars(item).items()]
        else:
            continue
        if children and depth >= MAX_DEPTH:
            return path
        stack.extend((child, child_path, depth + 1) for child_path, child in children)
    return "$"


class Unparsed(NamedTuple):
    """A stored JSON text orjson cannot read (nested deeper than it reads):
    kept in place of the parsed value, so the reader that needs it reports
    the row as corrupt, naming where it is."""

    reason: str

    def error(self) -> CodecError:
        return CodecError(f"the stored JSON cannot be read ({self.reason})")


def parse_json(text: str | None) -> Any:
    """orjson.loads, or `Unparsed` for a text it refuses (None stays None)."""
    if text is None:
        return None
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        return Unparsed(str(exc))


def refused(where: Where, failure: CodecError) -> ValueNotStorableError:
    """The error for a value the typed codec could not store where nothing else may:
    an unregistered class says to register it (`types=`); anything else is
    `ValueNotStorableError` with the codec's reason. Both name the place."""
    cls = getattr(failure, "cls", None)
    if type(failure) is UnregisteredClass and cls is not None:
        return UnregisteredClassError(
            thread_id=where.thread_id,
            checkpoint_ns=where.checkpoint_ns,
            checkpoint_id=where.checkpoint_id,
            channel=where.channel,
            path=failure.path,
            class_name=f"{cls.__module__}.{cls.__qualname__}",
        )
    return not_storable(where, failure.path, failure)


def not_storable(where: Where, path: str, cause: BaseException) -> ValueNotStorableError:
    return ValueNotStorableError(
        thread_id=where.thread_id,
        checkpoint_ns=where.checkpoint_ns,
        checkpoint_id=where.checkpoint_id,
        channel=where.channel,
        path=path,
        cause=cause,
    )


def corrupt_row(
    where: tuple[str, str, str | None], checkpoint_id: str, cause: Any
) -> ColosseumError:
    """The error for a stored row that cannot be read: (thread, ns, channel or None).

    A stored class that no longer fits its definition is not corruption: it
    stays a `ClassChangedError`, with the row's place in its message.
    """
    thread_id, checkpoint_ns, channel = where
    if isinstance(cause, ClassChangedError):
        ns = f", namespace {checkpoint_ns!r}" if checkpoint_ns else ""
        return ClassChangedError(
            f"channel {channel!r} of checkpoint {checkpoint_id!r} of thread "
            f"{thread_id!r}{ns}: {cause.message}",
            path=cause.path,
        )
    return CorruptRowError(
        thread_id=thread_id,
        checkpoint_ns=checkpoint_ns,
        checkpoint_id=checkpoint_id,
        channel=channel,
        cause=cause if isinstance(cause, BaseException) else ValueError(cause),
    )


def columns(values: list[StoredValue]) -> dict[str, list[Any]]:
    """Column arrays for an ``unnest(...)`` insert of many values."""
    return {
        "encodings": TextArray([v.encoding for v in values]),
        "jsons": TextArray([v.json for v in values]),
        "datas": BytesArray([v.data for v in values]),
        "types": TextArray([v.type for v in values]),
    }


class Materializer:
    """Rebuilds values from `ValueRow`s, each version once.

    Values it returns share unchanged items with the versions they were built
    from (one decoded message object serves every checkpoint of a `list` page
    that holds it); the lists and dicts themselves are never shared.
    """

    def __init__(self, codec: ValueCodec) -> None:
        self.codec = codec
        self.rows: dict[ValueKey, ValueRow] = {}
        self.values: dict[ValueKey, Any] = {}

    def add(self, rows: Iterable[ValueRow]) -> None:
        for row in rows:
            self.rows[row.key] = row

    def knows(self, key: ValueKey) -> bool:
        return key in self.values or key in self.rows

    def keep_only(self, keys: set[ValueKey]) -> None:
        """Forget everything but `keys` and what rebuilding them still takes:
        each one's rows down its chain of bases to a value already rebuilt
        (bounds memory while `list` streams; the page being emitted may be
        rebuilt after the next page's values are asked for)."""
        values: dict[ValueKey, Any] = {}
        rows: dict[ValueKey, ValueRow] = {}
        for key in keys:
            cursor: ValueKey | None = key
            while cursor is not None and cursor not in rows and cursor not in values:
                if cursor in self.values:
                    values[cursor] = self.values[cursor]
                    break
                row = self.rows.get(cursor)
                if row is None:
                    break
                rows[cursor] = row
                base = row.base_version
                cursor = None if base is None else (cursor[0], cursor[1], cursor[2], base)
        self.values, self.rows = values, rows

    def value(self, key: ValueKey, checkpoint_id: str = "?") -> Any:
        chain: list[ValueRow] = []
        seen: set[ValueKey] = set()
        cursor = key
        while cursor not in self.values:
            row = self.rows.get(cursor)
            if row is None:
                raise self._error(
                    key, checkpoint_id, f"value row for version {cursor[3]!r} is missing"
                )
            try:
                row = self.codec.open_value_row(row)
            except RowSealError as exc:
                raise self._error(cursor, checkpoint_id, f"version {cursor[3]!r}: {exc}") from None
            if row.encoding not in DELTA_ENCODINGS:
                self.values[cursor] = self._load_full(row, checkpoint_id)
                break
            if cursor in seen:
                raise self._error(
                    key, checkpoint_id, f"delta rows form a cycle at version {cursor[3]!r}"
                )
            seen.add(cursor)
            chain.append(row)
            cursor = (*cursor[:3], row.base_version)
        value = self.values[cursor]
        for row in reversed(chain):
            try:
                if type(row.parsed) is Unparsed:
                    raise row.parsed.error()
                payload = self.codec.registry.decode(row.parsed)
                value = shapes.apply(value, row.encoding, payload)
            except Exception as exc:
                raise self._error(row.key, checkpoint_id, exc) from exc
            self.values[row.key] = value
        return value

    def _load_full(self, row: ValueRow, checkpoint_id: str) -> Any:
        try:
            return self.codec.load_parsed(row.encoding, row.parsed, row.data, row.type)
        except Exception as exc:
            raise self._error(row.key, checkpoint_id, exc) from exc

    @staticmethod
    def _error(key: ValueKey, checkpoint_id: str, cause: Any) -> ColosseumError:
        return corrupt_row(key[:3], checkpoint_id, cause)


def parse_value_rows(thread_id: str, checkpoint_ns: str, text: str | None) -> list[ValueRow]:
    """ValueRows from GET_TUPLE's value rows column: a JSON array of [channel,
    version, base_version, encoding, value as JSON text, value_bytes in hex,
    value_type] (see sql._tuple_joins), or NULL for none."""
    if text is None:
        return []
    return [
        ValueRow(
            (thread_id, checkpoint_ns, channel, version),
            base,
            encoding,
            parse_json(json),
            None if data is None else bytes.fromhex(data),
            type_,
        )
        for channel, version, base, encoding, json, data, type_ in orjson.loads(text)
    ]


def fresh_copy(value: Any) -> Any:
    """A copy sharing nothing mutable with `value`: containers and models are new,
    immutable leaves (str, numbers, bytes, datetimes...) are shared.

    Several times cheaper than decoding the value again, which is the point:
    `ValueMemo` and the hot head hand every caller its own objects. Leaves and
    empty containers are handled inline, not by a call each: a message list is
    mostly those. How a type is copied is decided once per type (`_copier_of`):
    asking each message whether it is a pydantic model went through pydantic's
    Python-level `__instancecheck__`, and was a fifth of the copy's time.
    """
    t = type(value)
    if t in _IMMUTABLE:
        return value
    copier = _COPIERS.get(t)
    if copier is None:
        copier = _copier_of(t)
    return copier(value)


def _copy_item(v: Any) -> Any:
    t = type(v)
    if (t is dict or t is list) and not v:
        return t()
    return fresh_copy(v)


def _copy_list(value: list) -> list:
    # A message list: each item's copier is found here, not by two calls down.
    copy = []
    append = copy.append
    for v in value:
        t = type(v)
        if t in _IMMUTABLE:
            append(v)
        elif (t is dict or t is list) and not v:
            append(t())
        else:
            append((_COPIERS.get(t) or _copier_of(t))(v))
    return copy


def _copy_dict(value: dict) -> dict:
    # dict.copy() keeps the order at C speed; only the mutable values are
    # replaced (assigning to existing keys while iterating is allowed), the
    # empty containers most of a message's fields hold without a call each.
    copy = value.copy()
    for k, v in copy.items():
        t = type(v)
        if t in _IMMUTABLE:
            continue
        copy[k] = t() if (t is dict or t is list) and not v else fresh_copy(v)
    return copy


def _copy_tuple(value: tuple) -> tuple:
    return tuple(fresh_copy(item) for item in value)


def _copy_named_tuple(value: tuple) -> tuple:  # e.g. _DeltaSnapshot
    return type(value)(*(fresh_copy(item) for item in value))


_set_attribute = object.__setattr__  # past pydantic's validating __setattr__


def _copy_model(value: Any) -> Any:
    t = type(value)
    copy = t.__new__(t)
    extra = value.__pydantic_extra__
    _set_attribute(copy, "__dict__", _copy_dict(value.__dict__))
    _set_attribute(copy, "__pydantic_fields_set__", set(value.__pydantic_fields_set__))
    _set_attribute(copy, "__pydantic_extra__", None if extra is None else _copy_item(extra))
    _set_attribute(copy, "__pydantic_private__", None)
    return copy


# How each type met so far is copied. Bounded: a program that makes classes on
# the fly (pydantic's create_model) must not grow it, nor keep its classes alive.
_COPIERS: dict[type, Any] = {}
_COPIERS_KEPT = 1024


def _copier_of(t: type) -> Any:
    if t is list:
        copier: Any = _copy_list
    elif t is dict:
        copier = _copy_dict
    elif t is tuple:
        copier = _copy_tuple
    elif issubclass(t, tuple) and hasattr(t, "_fields"):
        copier = _copy_named_tuple
    elif _Model is not None and issubclass(t, _Model) and not t.__private_attributes__:
        copier = _copy_model
    else:
        copier = deepcopy
    if len(_COPIERS) >= _COPIERS_KEPT:
        _COPIERS.clear()
    _COPIERS[t] = copier
    return copier


class ValueMemo:
    """Decoded values by key, bounded by their encoded size; callers get fresh copies.

    Rows are immutable once written (a version names one value), so an entry
    never goes stale; it only leaves by eviction.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[ValueKey, tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()  # guards the dict only, never held across I/O

    def keys_of(self, thread_id: str, checkpoint_ns: str) -> list[ValueKey]:
        with self._lock:
            return [k for k in self._entries if k[0] == thread_id and k[1] == checkpoint_ns]

    def get(self, key: ValueKey) -> tuple[bool, Any]:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return False, None
            self._entries.move_to_end(key)
        return True, fresh_copy(entry[0])

    def put(self, key: ValueKey, value: Any, size: int) -> None:
        if size > self.max_bytes:
            return
        private = fresh_copy(value)
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            self._entries[key] = (private, size)
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, (_, evicted) = self._entries.popitem(last=False)
                self._bytes -= evicted

    def forget_threads(self, thread_ids: Iterable[str]) -> None:
        threads = set(thread_ids)
        with self._lock:
            for key in [k for k in self._entries if k[0] in threads]:
                self._bytes -= self._entries.pop(key)[1]
