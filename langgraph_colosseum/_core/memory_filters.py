"""`filter=` of a Store search, compiled to a SQL condition on `value` (jsonb).

The meaning is InMemoryStore's (`langgraph.store.memory._compare_values`), so
the two stores agree on every filter, kept in SQL so it runs in the same query
as the namespace scope, the TTL and a vector search (never after them):

* ``{"k": v}`` and ``{"k": {"$eq": v}}``: the value at k equals v. A dict
  without operators matches nested keys (``{"a": {"b": 1}}``); a list must be
  equal as a whole. ``None`` also matches a missing key, as ``.get(k) == None``.
* ``$ne``: not equal, a missing key included.
* ``$gt``, ``$gte``, ``$lt``, ``$lte``: with a number, numeric comparison of a
  number stored there (PostgresStore compares the texts: 10 < 9); with a
  string, code-point comparison of a string stored there (ISO dates work).

Values are compared in the typed codec's form, so a datetime or a UUID in a
filter matches the same datetime or UUID stored. Keys are parameters: nothing
from a filter is ever formatted into SQL text.
"""

from __future__ import annotations

from typing import Any

import orjson

from langgraph_colosseum._core.codec import TypeRegistry
from langgraph_colosseum.errors import StoreFilterError

_RANGE = {"$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}
_OPERATORS = {"$eq", "$ne", *_RANGE}


class FilterCompiler:
    """Accumulates conditions and their named parameters (``f0``, ``f1``, ...)."""

    def __init__(self, registry: TypeRegistry, column: str = "i.value") -> None:
        self.registry = registry
        self.column = column
        self.params: dict[str, Any] = {}
        self.conditions: list[str] = []

    def add(self, filter: dict[str, Any] | None) -> None:
        for key, expected in (filter or {}).items():
            self.conditions.append(self._match([str(key)], expected))

    def sql(self) -> str:
        return " AND ".join(f"({c})" for c in self.conditions) or "TRUE"

    # ------------------------------------------------------------------

    def _param(self, value: Any) -> str:
        name = f"f{len(self.params)}"
        self.params[name] = value
        return f"%({name})s"

    def _at(self, path: list[str]) -> str:
        return f"({self.column} #> {self._param(path)}::text[])"

    def _json(self, value: Any) -> str:
        return self._param(orjson.dumps(self.registry.encode(value)).decode()) + "::jsonb"

    def _match(self, path: list[str], expected: Any) -> str:
        if isinstance(expected, dict):
            if any(isinstance(k, str) and k.startswith("$") for k in expected):
                return (
                    " AND ".join(
                        f"({self._operator(path, op, operand)})" for op, operand in expected.items()
                    )
                    or "TRUE"
                )
            nested = [self._match([*path, str(k)], v) for k, v in expected.items()]
            return " AND ".join([f"jsonb_typeof({self._at(path)}) = 'object'", *nested])
        return self._equal(path, expected)

    def _equal(self, path: list[str], expected: Any) -> str:
        at = self._at(path)
        if expected is None:
            return f"{at} IS NULL OR {at} = 'null'::jsonb"
        if isinstance(expected, (list, tuple)):
            return f"{at} = {self._json(list(expected))}"
        # The containment test lets the GIN index on value find the rows; the
        # equality keeps the meaning exact (containment also accepts an array
        # holding the value at the top level).
        document: Any = self.registry.encode(expected)
        for key in reversed(path):
            document = {key: document}
        contains = f"{self.column} @> {self._param(orjson.dumps(document).decode())}::jsonb"
        return f"{contains} AND {at} = {self._json(expected)}"

    def _operator(self, path: list[str], op: Any, operand: Any) -> str:
        if op not in _OPERATORS:
            raise StoreFilterError(
                f"unsupported filter operator {op!r} at {'.'.join(path)}; "
                f"use one of {sorted(_OPERATORS)}"
            )
        at = self._at(path)
        if op == "$eq":
            return self._equal(path, operand)
        if op == "$ne":
            if operand is None:
                return f"{at} IS NOT NULL AND {at} <> 'null'::jsonb"
            return f"{at} IS DISTINCT FROM {self._json(operand)}"
        sign = _RANGE[op]
        if isinstance(operand, bool) or not isinstance(operand, (int, float, str)):
            raise StoreFilterError(
                f"filter {op} at {'.'.join(path)} takes a number or a string, "
                f"not {type(operand).__name__}"
            )
        if isinstance(operand, str):
            return (
                f"jsonb_typeof({at}) = 'string' AND "
                f'({self.column} #>> {self._param(path)}::text[]) COLLATE "C" {sign} '
                f"{self._param(operand)}::text"
            )
        # CASE, not AND: SQL does not promise to test the type before the cast.
        return (
            f"CASE WHEN jsonb_typeof({at}) = 'number' THEN ({at})::numeric {sign} "
            f"{self._param(operand)}::numeric ELSE false END"
        )
