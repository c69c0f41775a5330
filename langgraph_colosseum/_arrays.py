"""psycopg dumpers for the typed array parameters of `_core.arrays`.

Each writes Postgres' binary array format in one pass: a header (one
dimension, whether any item is NULL, the element type), the dimension (its
length, lower bound 1), then each item as its length (-1: NULL) and bytes.
The element type is fixed by the class, so psycopg neither inspects the list
nor builds a dumper per execute for it (see _core/arrays.py for the cost).

Registered on psycopg's global adapters when this module is imported: they
apply only to these three classes, on every connection, the user's own too.
"""

from __future__ import annotations

import struct
from typing import Any

import psycopg
from psycopg import postgres
from psycopg._encodings import conn_encoding
from psycopg.adapt import Dumper
from psycopg.pq import Format

from langgraph_colosseum._core.arrays import BytesArray, IntArray, TextArray

_LENGTH = struct.Struct("!i").pack
_INT8 = struct.Struct("!iq").pack  # an int8 item: its length (8) and value
_HEAD = struct.Struct("!iiiii").pack  # ndim, has-null, element oid, length, lower bound
_EMPTY = struct.Struct("!iii").pack  # ndim 0, no null, element oid
_NULL = _LENGTH(-1)


_TEXT, _BYTEA, _INT8_OID = (postgres.types[name].oid for name in ("text", "bytea", "int8"))


class _ArrayDumper(Dumper):
    """One pass over the items; each subclass says how one non-NULL item is sent."""

    format = Format.BINARY
    element_oid: int

    def dump(self, obj: list[Any]) -> bytes:
        if not obj:
            return _EMPTY(0, 0, self.element_oid)
        item_bytes = self._item
        dumped = [b""]
        has_null = 0
        for item in obj:
            if item is None:
                dumped.append(_NULL)
                has_null = 1
            else:
                dumped.append(item_bytes(item))
        dumped[0] = _HEAD(1, has_null, self.element_oid, len(obj), 1)
        return b"".join(dumped)

    def _item(self, item: Any) -> bytes:
        raise NotImplementedError


class TextArrayDumper(_ArrayDumper):
    oid = postgres.types["text"].array_oid
    element_oid = _TEXT

    def __init__(self, cls: type, context: Any = None) -> None:
        super().__init__(cls, context)
        # As psycopg's own str dumpers: the connection's encoding, ascii widened.
        encoding = conn_encoding(self.connection)
        self._encoding = encoding if encoding != "ascii" else "utf-8"

    def _item(self, item: str) -> bytes:
        data = item.encode(self._encoding)
        return _LENGTH(len(data)) + data


class BytesArrayDumper(_ArrayDumper):
    oid = postgres.types["bytea"].array_oid
    element_oid = _BYTEA

    def _item(self, item: bytes) -> bytes:
        return _LENGTH(len(item)) + bytes(item)


class IntArrayDumper(_ArrayDumper):
    """Sent as ``int8[]``: the statement's cast narrows it, and a value out of
    its range fails there as it did when psycopg chose the type."""

    oid = postgres.types["int8"].array_oid
    element_oid = _INT8_OID

    def _item(self, item: int) -> bytes:
        return _INT8(8, item)


psycopg.adapters.register_dumper(TextArray, TextArrayDumper)
psycopg.adapters.register_dumper(BytesArray, BytesArrayDumper)
psycopg.adapters.register_dumper(IntArray, IntArrayDumper)
