"""The typed array parameters (_core/arrays.py) as Postgres reads them.

The driver dumps `TextArray`, `BytesArray` and `IntArray` itself, in binary
(_arrays.py), without looking at the items for their type: what Postgres
receives must be exactly the list, whatever it holds (NULLs only, nothing,
non-ASCII text, bytes with NUL), as psycopg's own list dumpers sent it.
"""

from __future__ import annotations

import psycopg
import pytest

from langgraph_colosseum import _arrays
from langgraph_colosseum._core.arrays import BytesArray, IntArray, TextArray

CASES = [
    (TextArray, "text[]", ["messages", None, 'é ∑ "{},\\ NULL', ""]),
    (TextArray, "text[]", [None, None]),
    (TextArray, "text[]", []),
    (BytesArray, "bytea[]", [b"\x00\xff", None, b"", bytearray(b"ab")]),
    (BytesArray, "bytea[]", [None]),
    (BytesArray, "bytea[]", []),
    (IntArray, "int[]", [0, -4, None, 2**31 - 1]),
    (IntArray, "int[]", []),
]


@pytest.mark.parametrize(("cls", "cast", "items"), CASES)
def test_a_typed_array_reaches_postgres_as_the_list(pg_url: str, cls, cast, items) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for placeholder in ("%b", "%s"):
            (got,) = conn.execute(f"SELECT {placeholder}::{cast}", [cls(items)]).fetchone()
            assert got == [bytes(i) if isinstance(i, bytearray) else i for i in items]
            (dims,) = conn.execute(
                f"SELECT array_ndims({placeholder}::{cast})", [cls(items)]
            ).fetchone()
            assert dims == (1 if items else None)


def test_the_typed_dumpers_are_the_ones_used(pg_url: str) -> None:
    with psycopg.connect(pg_url) as conn:
        for cls, dumper in (
            (TextArray, _arrays.TextArrayDumper),
            (BytesArray, _arrays.BytesArrayDumper),
            (IntArray, _arrays.IntArrayDumper),
        ):
            assert conn.adapters.get_dumper(cls, psycopg.adapt.PyFormat.BINARY) is dumper


def test_an_int_out_of_the_columns_range_is_refused_by_postgres(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.NumericValueOutOfRange):
            conn.execute("SELECT %b::int[]", [IntArray([2**31])])
