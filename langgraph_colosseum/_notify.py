"""Performing `AwaitNotify` (see _core/io.py): the sync and async twins.

A waiter (a queued run, a join) opens a connection of its own for each wait,
LISTENs, asks its question on that connection, and sleeps on the socket until
the thread's holder lets go (FINISH notifies) or the wait's time is up. Its
pooled connections stay free for other work meanwhile. One connection per
waiter, and a wake-up per release of its thread: no polling storm.

Where LISTEN is not possible, the waiter polls every `POLL_SECONDS` instead:
PgBouncer in transaction mode (`pgbouncer=True`: a LISTEN would stay on a
server connection that other clients then get), and a saver built on a single
connection (its settings cannot be copied to open another).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import psycopg
from psycopg import sql
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from langgraph_colosseum._core.io import POLL_SECONDS, AwaitNotify
from langgraph_colosseum._driver import (
    CONFLICTS,
    RETRIES_ON_CONFLICT,
    aperform,
    conflict_pause,
    is_connection_failure,
    perform,
)

logger = logging.getLogger("langgraph_colosseum")


def listen_target(saver: Any) -> tuple[str, dict[str, Any]] | None:
    """(conninfo, connection kwargs) for a listening connection, or None: poll."""
    pool = saver.conn
    if getattr(saver, "_pgbouncer", False) or not isinstance(
        pool, (ConnectionPool, AsyncConnectionPool)
    ):
        return None
    return pool.conninfo, {**(pool.kwargs or {}), "autocommit": True}


def _listen(channel: str) -> sql.Composed:
    return sql.SQL("LISTEN {}").format(sql.Identifier(channel))


def await_notify(saver: Any, request: AwaitNotify) -> Any:
    target = listen_target(saver)
    if target is not None:
        try:
            conn = psycopg.connect(target[0], **target[1])
        except psycopg.OperationalError as exc:
            logger.info("could not open a LISTEN connection (%s); polling instead", exc)
            target = None
    if target is None:
        result = saver._perform(request.request)
        if not request.done(result):
            time.sleep(max(0.0, min(request.seconds, POLL_SECONDS)))
        return result
    with conn:
        conn.execute(_listen(request.channel))
        conflicts = 0
        while True:
            try:
                result = perform(conn, request.request)
                break
            except CONFLICTS:
                conflicts += 1
                if conflicts > RETRIES_ON_CONFLICT:
                    raise
                time.sleep(conflict_pause(conflicts))
            except psycopg.OperationalError as exc:
                if not is_connection_failure(exc, conn):
                    raise
                # LOST_LISTEN: sent again through the pool, which retries on a
                # fresh connection; the operation waits again after (see above).
                return saver._perform(request.request)
        if request.done(result) or request.seconds <= 0:
            return result
        for note in conn.notifies(timeout=request.seconds):
            if note.payload == request.key:
                break
        return result


async def aawait_notify(saver: Any, request: AwaitNotify) -> Any:
    target = listen_target(saver)
    if target is not None:
        try:
            conn = await psycopg.AsyncConnection.connect(target[0], **target[1])
        except psycopg.OperationalError as exc:
            logger.info("could not open a LISTEN connection (%s); polling instead", exc)
            target = None
    if target is None:
        result = await saver._perform(request.request)
        if not request.done(result):
            await asyncio.sleep(max(0.0, min(request.seconds, POLL_SECONDS)))
        return result
    async with conn:
        await conn.execute(_listen(request.channel))
        conflicts = 0
        while True:
            try:
                result = await aperform(conn, request.request)
                break
            except CONFLICTS:
                conflicts += 1
                if conflicts > RETRIES_ON_CONFLICT:
                    raise
                await asyncio.sleep(conflict_pause(conflicts))
            except psycopg.OperationalError as exc:
                if not is_connection_failure(exc, conn):
                    raise
                return await saver._perform(request.request)  # see LOST_LISTEN
        if request.done(result) or request.seconds <= 0:
            return result
        async for note in conn.notifies(timeout=request.seconds):
            if note.payload == request.key:
                break
        return result
