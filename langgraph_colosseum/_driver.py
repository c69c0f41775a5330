"""Performing one request on one psycopg connection: the sync and async twins.

Reads are not prepared (`Query.prepare` is False): a generic plan cached while a
thread's tables were small keeps scanning after they grow (measured: get_tuple
3x slower on a fresh database), and planning them costs a fraction of a
millisecond. The hot writes, `put` and `put_writes`, are primary-key operations
whose generic plans stay right; they follow psycopg's prepare policy, so a user
behind an old PgBouncer in transaction mode sets `prepare_threshold=None`.

These are the only places that touch a connection; keep them side by side so
a change to one is made to the other.
"""

from __future__ import annotations

import logging
import random
from typing import Any

import psycopg

from langgraph_colosseum._core.io import Query, Request, Transaction

logger = logging.getLogger("langgraph_colosseum")

# Every request our operations issue is idempotent (upserts, insert-if-absent,
# deletes), so one retry on a fresh connection after the old one broke (a
# Postgres restart, a dropped socket) cannot apply anything twice.
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


def perform(conn: psycopg.Connection, request: Request) -> Any:
    if isinstance(request, Query):
        if conn.autocommit:
            cursor = conn.execute(request.sql, request.params, prepare=request.prepare)
        else:
            with conn.transaction():
                cursor = conn.execute(request.sql, request.params, prepare=request.prepare)
        return cursor.fetchall() if request.fetch else None
    assert isinstance(request, Transaction)
    with conn.pipeline(), conn.transaction():
        cursors = [conn.execute(q.sql, q.params, prepare=q.prepare) for q in request.queries]
    return [c.fetchall() if q.fetch else None for c, q in zip(cursors, request.queries)]


async def aperform(conn: psycopg.AsyncConnection, request: Request) -> Any:
    if isinstance(request, Query):
        if conn.autocommit:
            cursor = await conn.execute(request.sql, request.params, prepare=request.prepare)
        else:
            async with conn.transaction():
                cursor = await conn.execute(request.sql, request.params, prepare=request.prepare)
        return await cursor.fetchall() if request.fetch else None
    assert isinstance(request, Transaction)
    async with conn.pipeline(), conn.transaction():
        cursors = [await conn.execute(q.sql, q.params, prepare=q.prepare) for q in request.queries]
    return [await c.fetchall() if q.fetch else None for c, q in zip(cursors, request.queries)]
