"""How one value becomes columns (`encoding`, `value`, `value_bytes`, `value_type`).

The typed codec is tried first, so state is queryable `jsonb`; a value it cannot
express goes to the configured serde as bytes. With an `EncryptedSerializer`
every value goes to serde: encrypted values are bytes by design.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import orjson
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

from langgraph_colosseum._core.codec import TypeRegistry
from langgraph_colosseum.errors import (
    CodecError,
    UnsupportedValueError,
    ValueNotStorableError,
)


class StoredValue(NamedTuple):
    encoding: str  # 'json' | 'serde' | 'empty'
    json: str | None
    data: bytes | None
    type: str | None


EMPTY = StoredValue("empty", None, None, None)


class Where(NamedTuple):
    """Where a value lives, for error messages."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str | None
    channel: str


class ValueCodec:
    """Typed jsonb first, serde bytes as the fallback."""

    def __init__(self, serde: SerializerProtocol, registry: TypeRegistry) -> None:
        self.serde = serde
        self.registry = registry
        self.jsonb_values = not isinstance(serde, EncryptedSerializer)

    def dump(self, value: Any, where: Where) -> StoredValue:
        path = "$"
        if self.jsonb_values:
            try:
                return StoredValue("json", self.dump_json(value), None, None)
            except UnsupportedValueError as exc:
                path = exc.path
        try:
            type_, data = self.serde.dumps_typed(value)
        except Exception as exc:
            raise ValueNotStorableError(
                thread_id=where.thread_id,
                checkpoint_ns=where.checkpoint_ns,
                checkpoint_id=where.checkpoint_id,
                channel=where.channel,
                path=path,
                cause=exc,
            ) from exc
        return StoredValue("serde", None, data, type_)

    def dump_json(self, value: Any) -> str:
        """Typed-codec JSON text, for values that must stay jsonb (metadata)."""
        encoded = self.registry.encode(value)
        try:
            return orjson.dumps(encoded).decode()
        except TypeError as exc:  # the codec never hands orjson anything else
            raise CodecError(str(exc)) from exc

    def load(self, encoding: str, json: str | None, data: bytes | None, type_: str | None) -> Any:
        if encoding == "json":
            return self.load_json(json)
        if encoding == "serde":
            return self.serde.loads_typed((type_ or "", data or b""))
        raise CodecError(f"unknown value encoding {encoding!r}")

    def load_json(self, text: str | None) -> Any:
        return self.registry.decode(orjson.loads(text or "null"))


def columns(values: list[StoredValue]) -> dict[str, list[Any]]:
    """Column arrays for an ``unnest(...)`` insert of many values."""
    return {
        "encodings": [v.encoding for v in values],
        "jsons": [v.json for v in values],
        "datas": [v.data for v in values],
        "types": [v.type for v in values],
    }
