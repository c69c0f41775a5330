"""Performing one request on one psycopg connection: the sync and async twins.

The hot reads (`get_tuple`, `list` pages and their value chains) are sent
prepared (`Query.prepare` True): planning them cost more than running them
(pg_stat_statements at 20,000 checkpoints: ~1 ms planning, ~0.3 ms execution;
10 ms on a loaded 2-core machine). Every table they read is reached by a
primary-key lookup (LATERAL ... LIMIT 1), so the generic plan Postgres caches
stays an index plan as tables grow (tests/integration/test_plans.py checks it at
20,000 checkpoints among 100,000 threads). The one window: a statement prepared
while the tables were analyzed nearly empty may keep a scan until autovacuum
analyzes them again, which re-plans it. The hot writes, `put` and `put_writes`,
are prepared at once too: a pool spreads them over its connections, and under
psycopg's default policy (prepare after 5 runs, then 5 custom plans server-side)
most of a short run's puts were planned (pg_stat_statements, chat-200 in quick
mode: 60 plans for 80 PUTs, 1.7 ms planning against 0.9 ms execution each). `pgbouncer=True` turns all of it off
(`prepare_threshold=None`, see _pool.py; psycopg then prepares nothing, even
when asked to).

These are the only places that touch a connection; keep them side by side so
a change to one is made to the other.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import _queries as psycopg_queries
from psycopg import conninfo

# Imported for its effect: psycopg dumps the typed array parameters of
# _core/arrays.py with it (registered once, for every connection).
from langgraph_colosseum import _arrays  # noqa: F401
from langgraph_colosseum._core.io import Query, Request, Transaction
from langgraph_colosseum._redact import redact
from langgraph_colosseum.errors import (
    DatabaseUnavailableError,
    InvalidConfigError,
    SchemaMissingError,
)

logger = logging.getLogger("langgraph_colosseum")

# psycopg caches the conversion of a statement's %(name)s placeholders only
# for statements up to MAX_CACHED_STATEMENT_LENGTH (4 KB); a longer one is
# split by a regular expression on every execute. PUT is ~6 KB: splitting it
# cost 0.33 ms of client CPU per put (cProfile, long-20k direct puts), more
# than the rest of the put's Python. The cache is an LRU of 128 statements,
# and the statements of this package are a fixed few, so a larger limit costs
# a few kilobytes. tests/unit/test_statement_cache.py keeps the hot ones under it.
CACHED_STATEMENT_LENGTH = 16384
if getattr(psycopg_queries, "MAX_CACHED_STATEMENT_LENGTH", 0) < CACHED_STATEMENT_LENGTH:
    psycopg_queries.MAX_CACHED_STATEMENT_LENGTH = CACHED_STATEMENT_LENGTH

# Seconds a new connection may take (libpq's connect_timeout; at least 2). A
# wrong host fails after this instead of hanging; the `connect_timeout=` of
# from_conn_string, else the URL's own connect_timeout, overrides it.
DEFAULT_CONNECT_TIMEOUT = 5

_CONNECT_HINT = (
    "Check the URL (host, port, database name, user, password) and that the server "
    "is running; the connect timeout is from_conn_string(..., connect_timeout=seconds)"
)


def connection_kwargs(conn_string: str, connect_timeout: float | None) -> dict[str, Any]:
    """The settings of every connection of a `from_conn_string` pool.

    A string that is not a connection string at all fails here, at once,
    before any pool is made (a pool would retry it in the background forever).
    """
    try:
        params = conninfo.conninfo_to_dict(conn_string)
    except psycopg.ProgrammingError as exc:
        raise InvalidConfigError(
            f"{redact(conn_string)!r} is not a Postgres connection string: "
            f"{str(exc).strip()}. Expected "
            "a URL such as postgresql://user:password@host:5432/dbname, or "
            "'host=... dbname=... user=...'"
        ) from None
    kwargs: dict[str, Any] = {"autocommit": True}
    if connect_timeout is not None or "connect_timeout" not in params:
        kwargs["connect_timeout"] = connect_timeout or DEFAULT_CONNECT_TIMEOUT
    return kwargs


def unreachable(target: str, exc: BaseException) -> DatabaseUnavailableError:
    return DatabaseUnavailableError(target, str(exc), _CONNECT_HINT)


def probe(conn_string: str, kwargs: dict[str, Any]) -> None:
    """Connect once, so a wrong URL fails now with the server's reason.

    Without it the pool would open "successfully", retry in the background,
    and the first statement would time out after the pool's 30 s with no reason.
    """
    try:
        psycopg.connect(conn_string, **kwargs).close()
    except psycopg.OperationalError as exc:
        raise unreachable(conn_string, exc) from None


async def aprobe(conn_string: str, kwargs: dict[str, Any]) -> None:
    try:
        conn = await psycopg.AsyncConnection.connect(conn_string, **kwargs)
    except psycopg.OperationalError as exc:
        raise unreachable(conn_string, exc) from None
    await conn.close()


def never_connected(pool: Any, exc: BaseException) -> DatabaseUnavailableError:
    """No connection of `pool` ever worked: a configuration error, not an outage."""
    return unreachable(getattr(pool, "conninfo", "the pool's database"), exc)


@contextmanager
def schema_errors() -> Iterator[None]:
    """A statement on a table that is not there means setup() was never run."""
    try:
        yield
    except psycopg.errors.UndefinedTable as exc:
        raise SchemaMissingError(str(exc.diag.message_primary or exc)) from exc


# Every request our operations issue is idempotent (upserts, insert-if-absent,
# deletes), so one retry on a fresh connection after the old one broke (a
# Postgres restart, a dropped socket) cannot apply anything twice. The break
# may come after the commit, before the reply: a statement that takes something
# (a tool claim, a run_guard acquire, a run's take) recognises a row held under
# its own owner as its own success (tests/integration/test_lost_replies.py).
RETRIES_ON_BROKEN_CONNECTION = 2


def is_connection_failure(exc: BaseException, conn: Any) -> bool:
    return isinstance(exc, psycopg.OperationalError) and (
        conn is None or conn.broken or conn.closed
    )


# Postgres aborted the transaction to break a deadlock (a put meeting a delete
# of its thread: they lock rows in different orders) or a serialization
# conflict. The statement did nothing and, being idempotent, is simply rerun.
CONFLICTS = (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure)
RETRIES_ON_CONFLICT = 5


def conflict_pause(conflicts: int) -> float:
    """A short random pause before rerunning, so the two sides do not meet again."""
    return random.uniform(0, 0.005 * conflicts)


# _IMPLICIT_TRANSACTION. A `Transaction` on an autocommit connection is sent as
# one pipeline with no BEGIN / COMMIT: Postgres runs everything up to the
# pipeline's Sync as one implicit transaction (a failure rolls all of it back,
# and `pg_advisory_xact_lock` holds until the Sync), while each statement still
# takes its own snapshot (READ COMMITTED), which is what the thread write lock
# needs (sql.WRITE_LOCK). The two statements saved were half of every put's
# and put_writes' (conc-32: 21 statements per invoke before, 13 after).


def perform(conn: psycopg.Connection, request: Request) -> Any:
    with schema_errors():
        return _perform(conn, request)


def _perform(conn: psycopg.Connection, request: Request) -> Any:
    if isinstance(request, Query):
        if conn.autocommit:
            cursor = conn.execute(request.sql, request.params, prepare=request.prepare)
        else:
            with conn.transaction():
                cursor = conn.execute(request.sql, request.params, prepare=request.prepare)
        return cursor.fetchall() if request.fetch else None
    assert isinstance(request, Transaction)
    if conn.autocommit:  # one implicit transaction: see _IMPLICIT_TRANSACTION
        with conn.pipeline():
            cursors = [conn.execute(q.sql, q.params, prepare=q.prepare) for q in request.queries]
    else:
        with conn.pipeline(), conn.transaction():
            cursors = [conn.execute(q.sql, q.params, prepare=q.prepare) for q in request.queries]
    return [c.fetchall() if q.fetch else None for c, q in zip(cursors, request.queries)]


async def aperform(conn: psycopg.AsyncConnection, request: Request) -> Any:
    with schema_errors():
        return await _aperform(conn, request)


async def _aperform(conn: psycopg.AsyncConnection, request: Request) -> Any:
    if isinstance(request, Query):
        if conn.autocommit:
            cursor = await conn.execute(request.sql, request.params, prepare=request.prepare)
        else:
            async with conn.transaction():
                cursor = await conn.execute(request.sql, request.params, prepare=request.prepare)
        return await cursor.fetchall() if request.fetch else None
    assert isinstance(request, Transaction)
    if conn.autocommit:  # one implicit transaction: see _IMPLICIT_TRANSACTION
        async with conn.pipeline():
            cursors = [
                await conn.execute(q.sql, q.params, prepare=q.prepare) for q in request.queries
            ]
    else:
        async with conn.pipeline(), conn.transaction():
            cursors = [
                await conn.execute(q.sql, q.params, prepare=q.prepare) for q in request.queries
            ]
    return [await c.fetchall() if q.fetch else None for c, q in zip(cursors, request.queries)]
