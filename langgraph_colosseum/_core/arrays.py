"""Lists that say which Postgres array they bind to.

The hot writes pass their rows as parallel arrays to ``unnest(%(x)b::text[], ...)``
(PUT has nine, PUT_WRITES six). Given a plain `list`, psycopg finds out on every
execute what the array holds: it walks the list for a non-null element, looks
its dumper up, builds a new array dumper for it and then dumps element by
element through it (a cursor's dumper cache starts empty, and every execute
makes a new cursor). That cost about 10% of the client CPU of a conc-32 invoke
(py-spy: `PostgresQuery.dump`, three quarters of it in psycopg's list
dumpers). Declaring the element type up front lets the driver dump the whole
array in one pass (`langgraph_colosseum._arrays`, registered with psycopg).

Each is a plain `list` to everything else (equality, `repr`, JSON), and
psycopg dumps it as one if the driver's dumpers are not registered.
"""

from __future__ import annotations


class TextArray(list):
    """A ``text[]`` parameter: str or None items."""

    __slots__ = ()


class BytesArray(list):
    """A ``bytea[]`` parameter: bytes or None items."""

    __slots__ = ()


class IntArray(list):
    """An integer array parameter (``::int[]`` in the statement): int or None items."""

    __slots__ = ()
