"""The hot statements stay within psycopg's cache of converted statements.

psycopg converts `%(name)s` placeholders with a regular expression, and caches
the result only for statements up to `MAX_CACHED_STATEMENT_LENGTH` bytes and
`MAX_CACHED_STATEMENT_PARAMS` parameters. A hot statement past either limit is
converted again on every call (PUT at ~6 KB cost 0.33 ms of client CPU per put).
"""

from __future__ import annotations

import re

from psycopg import _queries

import langgraph_colosseum._driver  # noqa: F401  (raises the length limit)
from langgraph_colosseum._core import sql

HOT = {
    "PUT": sql.PUT,
    "PUT_WRITES": sql.PUT_WRITES,
    "PUT_NO_HEAD": sql.PUT_NO_HEAD,
    **{f"PUT_WRITES_BY{key}": statement for key, statement in sql.PUT_WRITES_BY.items()},
    "WRITE_LOCK": sql.WRITE_LOCK,
    "GET_TUPLE_LATEST": sql.GET_TUPLE_LATEST,
    "GET_TUPLE_LATEST_FOR_HEAD": sql.GET_TUPLE_LATEST_FOR_HEAD,
    "GET_TUPLE_BY_ID": sql.GET_TUPLE_BY_ID,
    "VALUE_CHAINS": sql.VALUE_CHAINS,
    "DELTA_HISTORY_LATEST": sql.DELTA_HISTORY_LATEST,
    "DELTA_HISTORY_BY_ID": sql.DELTA_HISTORY_BY_ID,
}


def test_hot_statements_are_cached_by_psycopg() -> None:
    for name, statement in HOT.items():
        assert len(statement.encode()) <= _queries.MAX_CACHED_STATEMENT_LENGTH, name
        params = set(re.findall(r"%\((\w+)\)", statement))
        assert len(params) <= _queries.MAX_CACHED_STATEMENT_PARAMS, name
