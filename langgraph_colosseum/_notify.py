"""Performing `Listen` and its `AwaitNotify` waits (see _core/io.py): the sync
and async twins.

A waiter (a queued run, a join) opens one connection of its own for its whole
wait, LISTENs on its run's channel (multitask.run_channel), and sleeps on that
socket between its questions, which go through the pool like any request.
Only what is meant for it comes on that channel: its turn (the run before it
let go, multitask.WAKE), its cancel, its run's end (for a join). So a release
wakes one waiter, not the whole queue, and nobody opens a connection to be
woken: N queued runs cost N listening connections and at most 2N TAKEs to
drain, besides their renewals (tests/integration/test_runs.py).

Where LISTEN is not possible, each wait polls every `POLL_SECONDS` instead:
PgBouncer in transaction mode (`pgbouncer=True`: a LISTEN would stay on a
server connection that other clients then get), a saver built on a single
connection (its settings cannot be copied to open another), and a waiter
whose listening connection could not be opened (max_connections, a role's
connection limit, the server unreachable): logged as a warning, and that
wait polls to its end. A listening connection that breaks while it waits is
opened again, and the operation asks again at once (what was sent meanwhile
was lost with it).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from typing import Any

import psycopg
from psycopg import sql
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from langgraph_colosseum._core import io
from langgraph_colosseum._core.io import POLL_SECONDS, AwaitNotify, Listen, Request

logger = logging.getLogger("langgraph_colosseum")


def listen_target(saver: Any) -> Any:
    """The pool whose settings a listening connection is made with, or None: poll."""
    pool = saver.conn
    if getattr(saver, "_pgbouncer", False) or not isinstance(
        pool, (ConnectionPool, AsyncConnectionPool)
    ):
        return None
    return pool


# A listening connection is made as the pool makes its own: its conninfo and
# kwargs may be callables (new credentials for each connection), awaitable ones
# for an async pool.


def _settings(pool: Any) -> tuple[str, dict[str, Any]]:
    conninfo, kwargs = (v() if callable(v) else v for v in (pool.conninfo, pool.kwargs))
    return conninfo, {**(kwargs or {}), "autocommit": True}


async def _asettings(pool: Any) -> tuple[str, dict[str, Any]]:
    conninfo, kwargs = (v() if callable(v) else v for v in (pool.conninfo, pool.kwargs))
    conninfo = await conninfo if inspect.isawaitable(conninfo) else conninfo
    kwargs = await kwargs if inspect.isawaitable(kwargs) else kwargs
    return conninfo, {**(kwargs or {}), "autocommit": True}


def _listen(channel: str) -> sql.Composed:
    return sql.SQL("LISTEN {}").format(sql.Identifier(channel))


def _polling(exc: BaseException) -> None:
    logger.warning(
        "a queued run (or a join) could not open its LISTEN connection (%s); it polls "
        "every %g s instead until its wait ends (one small statement each)",
        str(exc).strip(),
        POLL_SECONDS,
    )


class Listener:
    """One wait's listening connection; `conn` None: it polls."""

    def __init__(self, saver: Any, channel: str) -> None:
        self.channel = channel
        self.target = listen_target(saver)
        self.conn: psycopg.Connection | None = None
        self.open()

    def open(self) -> None:
        if self.target is None:
            return
        try:
            conninfo, kwargs = _settings(self.target)
            conn = self.target.connection_class.connect(conninfo, **kwargs)
            try:
                conn.execute(_listen(self.channel))
            except BaseException:
                conn.close()
                raise
        except psycopg.OperationalError as exc:
            _polling(exc)
            self.target = None
            return
        self.conn = conn

    def wait(self, seconds: float) -> None:
        if self.conn is None:
            time.sleep(max(0.0, min(seconds, POLL_SECONDS)))
            return
        try:
            for _ in self.conn.notifies(timeout=max(0.0, seconds), stop_after=1):
                pass
            for _ in self.conn.notifies(timeout=0):  # those come with it: one question for all
                pass
        except psycopg.OperationalError:
            self.close()
            self.open()

    def close(self) -> None:
        if self.conn is not None:
            conn, self.conn = self.conn, None
            conn.close()


def listen(saver: Any, request: Listen) -> Any:
    listener = Listener(saver, request.channel)

    def perform(inner: Request) -> Any:
        if isinstance(inner, AwaitNotify):
            return listener.wait(inner.seconds)
        return saver._perform(inner)

    try:
        return io.drive(request.op, perform)
    finally:
        listener.close()


class AsyncListener:
    """The asyncio twin of `Listener`; made by `await AsyncListener.made(...)`."""

    def __init__(self, saver: Any, channel: str) -> None:
        self.channel = channel
        self.target = listen_target(saver)
        self.conn: psycopg.AsyncConnection | None = None

    @classmethod
    async def made(cls, saver: Any, channel: str) -> AsyncListener:
        listener = cls(saver, channel)
        await listener.open()
        return listener

    async def open(self) -> None:
        if self.target is None:
            return
        try:
            conninfo, kwargs = await _asettings(self.target)
            conn = await self.target.connection_class.connect(conninfo, **kwargs)
            try:
                await conn.execute(_listen(self.channel))
            except BaseException:
                await conn.close()
                raise
        except psycopg.OperationalError as exc:
            _polling(exc)
            self.target = None
            return
        self.conn = conn

    async def wait(self, seconds: float) -> None:
        if self.conn is None:
            await asyncio.sleep(max(0.0, min(seconds, POLL_SECONDS)))
            return
        try:
            async for _ in self.conn.notifies(timeout=max(0.0, seconds), stop_after=1):
                pass
            async for _ in self.conn.notifies(timeout=0):
                pass
        except psycopg.OperationalError:
            await self.close()
            await self.open()

    async def close(self) -> None:
        if self.conn is not None:
            conn, self.conn = self.conn, None
            await conn.close()


async def alisten(saver: Any, request: Listen) -> Any:
    listener = await AsyncListener.made(saver, request.channel)

    async def perform(inner: Request) -> Any:
        if isinstance(inner, AwaitNotify):
            return await listener.wait(inner.seconds)
        return await saver._perform(inner)

    try:
        return await io.adrive(request.op, perform)
    finally:
        await listener.close()
