"""`AsyncColosseumSaver`: the asyncio driver, on an `AsyncConnection` or `AsyncConnectionPool`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any, NamedTuple, TypeVar

import psycopg
from langgraph.checkpoint.serde.base import SerializerProtocol
from psycopg_pool import AsyncConnectionPool

from langgraph_colosseum._base import DEFAULT_ON_CONFLICT_HOLD, ColosseumSaverBase
from langgraph_colosseum._coalesce import Coalescer
from langgraph_colosseum._core import io
from langgraph_colosseum._core import threads as threads_ops
from langgraph_colosseum._core.crypt import Encryption
from langgraph_colosseum._core.hot import DEFAULT_HOT_TTL, KEY_PREFIX
from langgraph_colosseum._core.io import (
    Ahead,
    CacheCall,
    CacheDrop,
    Collect,
    Listen,
    Operation,
    Query,
    Request,
    Transaction,
)
from langgraph_colosseum._core.shapes import DEFAULT_SNAPSHOT_EVERY
from langgraph_colosseum._core.store import DEFAULT_PAGE_SIZE
from langgraph_colosseum._core.threads import Retention
from langgraph_colosseum._driver import (
    CONFLICTS,
    RETRIES_ON_BROKEN_CONNECTION,
    RETRIES_ON_CONFLICT,
    Deferred,
    SentAhead,
    aperform,
    aprobe,
    asend_ahead,
    conflict_pause,
    connection_kwargs,
    is_connection_failure,
    lean_statements,
    logger,
    never_connected,
    schema_errors,
)
from langgraph_colosseum._notify import alisten
from langgraph_colosseum._pool import (
    AsyncStampingConnectionPool,
    PoolSettings,
    pool_arguments,
    require_transaction_mode_safe,
)
from langgraph_colosseum.cache import AsyncRedisCache, async_client_from_url
from langgraph_colosseum.embedded import servers
from langgraph_colosseum.threads import AsyncThreads

T = TypeVar("T")

# Hot requests share pool checkouts and round trips (_coalesce.py); False sends
# each on a connection of its own (the lean path alone). Each request keeps its
# own outcome either way (tests/integration/test_coalesce.py).
COALESCE = True


def _hot(request: Request) -> list[Any] | None:
    """`request`'s statements if it is coalesced (all of them hot: _coalesce.py)."""
    queries = request.queries if isinstance(request, Transaction) else (request,)
    if all(isinstance(q, Query) and q.prepare is True for q in queries):
        return lean_statements(request)
    return None


class AsyncColosseumSaver(ColosseumSaverBase[AsyncThreads]):
    """The asyncio twin of `ColosseumSaver`.

    Its blocking methods (`get_tuple`, `list`, `put`, ...) work from threads
    other than the event loop's, as AsyncPostgresSaver's do.

    Example:
        >>> async with AsyncColosseumSaver.from_conn_string(dsn, pool_size=10) as saver:
        ...     await saver.setup()
        ...     graph = builder.compile(checkpointer=saver)
        ...     await graph.ainvoke(inputs, {"configurable": {"thread_id": "t1"}})
    """

    _threads_api = AsyncThreads
    _cache_driver = AsyncRedisCache

    def __init__(
        self,
        conn: psycopg.AsyncConnection | AsyncConnectionPool,
        *,
        serde: SerializerProtocol | None = None,
        types: Iterable[type] = (),
        page_size: int = DEFAULT_PAGE_SIZE,
        snapshot_every: int = DEFAULT_SNAPSHOT_EVERY,
        retention: Retention | None = None,
        cache: Any = None,
        hot_ttl: timedelta = DEFAULT_HOT_TTL,
        cache_prefix: str = KEY_PREFIX,
        pgbouncer: bool = False,
        encryption: Encryption | None = None,
        on_conflict: str | None = None,
        on_conflict_hold: timedelta | None = DEFAULT_ON_CONFLICT_HOLD,
        compact_forms: bool = False,
        inline_values: bool = False,
    ) -> None:
        """`cache`: a `redis.asyncio.Redis` or `RedisCluster` for the hot head (see
        `ColosseumSaver`)."""
        super().__init__(
            serde=serde,
            types=types,
            page_size=page_size,
            snapshot_every=snapshot_every,
            retention=retention,
            cache=cache,
            hot_ttl=hot_ttl,
            cache_prefix=cache_prefix,
            encryption=encryption,
            on_conflict=on_conflict,
            on_conflict_hold=on_conflict_hold,
            compact_forms=compact_forms,
            inline_values=inline_values,
        )
        if pgbouncer:
            require_transaction_mode_safe(conn)
        self._pgbouncer = pgbouncer  # waiters poll: no LISTEN through PgBouncer
        self.conn = conn
        # Set once a connection was had: only then is a failure to get one an
        # outage worth retrying, rather than a wrong URL to report.
        self._connected = False
        self._conn_lock = None if isinstance(conn, AsyncConnectionPool) else asyncio.Lock()
        # Hot requests share pool checkouts and round trips (see _coalesce.py),
        # only where COALESCE says so.
        self._coalescer = (
            Coalescer(conn)
            if COALESCE
            and isinstance(conn, AsyncConnectionPool)
            and (conn.kwargs or {}).get("autocommit")
            else None
        )
        try:
            self.loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self.loop = None

    @classmethod
    @asynccontextmanager
    async def from_conn_string(
        cls,
        conn_string: str,
        *,
        pool_size: int | None = None,
        serde: SerializerProtocol | None = None,
        redis_url: str | None = None,
        connect_timeout: float | None = None,
        pgbouncer: bool = False,
        **options: Any,
    ) -> AsyncIterator[AsyncColosseumSaver]:
        """A saver on its own connection pool (and Redis client), closed on exit.

        Wrong URLs fail at once or within `connect_timeout`; takes the options of
        `ColosseumSaver.from_conn_string`, `pgbouncer=` too.
        """
        # A wrong URL fails here, within `connect_timeout`, with the server's reason.
        settings = PoolSettings.take(options, pool_size=pool_size, pgbouncer=pgbouncer)
        arguments = pool_arguments(
            conn_string,
            settings,
            asynchronous=True,
            connect=connection_kwargs(conn_string, connect_timeout),
        )
        await aprobe(conn_string, arguments["kwargs"])
        async with AsyncStampingConnectionPool(**arguments, open=False) as pool:
            client = async_client_from_url(redis_url) if redis_url else None
            saver = None
            try:
                saver = cls(pool, serde=serde, cache=client, pgbouncer=pgbouncer, **options)
                yield saver
            finally:
                if saver is not None:
                    await saver.adrop_stale_heads()
                if client is not None:
                    await client.aclose()

    @classmethod
    @asynccontextmanager
    async def from_env(
        cls,
        *,
        pool_size: int | None = None,
        serde: SerializerProtocol | None = None,
        **options: Any,
    ) -> AsyncIterator[AsyncColosseumSaver]:
        """A saver on the configured servers, else the embedded ones (see `ColosseumSaver`)."""
        # May start the embedded servers, which blocks.
        database, redis_url = await asyncio.to_thread(servers)
        async with cls.from_conn_string(
            database, pool_size=pool_size, serde=serde, redis_url=redis_url, **options
        ) as saver:
            yield saver

    async def sweep(self) -> int:
        """Apply the retention policy to every expired thread; how many were swept."""
        if self.retention is None:
            return 0
        return await self._arun(threads_ops.sweep(self._store, self.retention))

    def start_sweeper(self, interval: timedelta) -> asyncio.Task:
        """Sweep every `interval` in a task of the running loop; cancel it to stop."""

        async def loop() -> None:
            while True:
                await asyncio.sleep(interval.total_seconds())
                try:
                    await self.sweep()
                except Exception:
                    logger.exception("colosseum sweep failed; retrying next interval")

        return asyncio.ensure_future(loop())

    async def setup(self) -> int:
        """Create or upgrade the schema; returns its version. Safe to call concurrently."""
        return await self._arun(self._store.migrate())

    # Driver primitives ---------------------------------------------------

    async def _perform(self, request: Request) -> Any:
        # Blocking calls from other threads are sent to the loop that first used us.
        self.loop = self.loop or asyncio.get_running_loop()
        if isinstance(request, (CacheCall, CacheDrop)):
            assert self.cache is not None
            return await self.cache.perform(request)
        if isinstance(request, Listen):
            return await alisten(self, request)
        if isinstance(request, Ahead):
            return await self._send_ahead(request.request)
        if isinstance(request, Collect):
            return await self._collect(request.handle)
        broken = conflicts = 0
        while True:
            conn = None
            try:
                # A retry after a lost connection goes alone, on a connection
                # of its own: in a shared round trip it would be failed again
                # by any connection its batch met dead, and the requests it
                # was lost with would use up their retries together.
                if (
                    self._coalescer is not None
                    and not broken
                    and (statements := _hot(request)) is not None
                ):
                    queued = self._coalescer.submit(request, statements)
                    try:
                        with schema_errors():
                            return await queued.future
                    finally:
                        conn = queued.conn
                        self._connected = self._connected or conn is not None
                if isinstance(self.conn, AsyncConnectionPool):
                    # getconn / putconn, not `pool.connection()`: see _LOAN in _pool.py.
                    conn = await self.conn.getconn()
                    try:
                        self._connected = True
                        return await aperform(conn, request)
                    finally:
                        await self.conn.putconn(conn)
                assert self._conn_lock is not None
                async with self._conn_lock:
                    conn = self.conn
                    self._connected = True
                    return await aperform(conn, request)
            except CONFLICTS:
                conflicts += 1
                if conflicts > RETRIES_ON_CONFLICT:
                    raise
                if io.observer is not None:
                    io.observer.retried("conflict")
                await asyncio.sleep(conflict_pause(conflicts))
            except psycopg.OperationalError as exc:
                if conn is None and not self._connected:
                    raise never_connected(self.conn, exc) from None
                retry = isinstance(self.conn, AsyncConnectionPool) and is_connection_failure(
                    exc, conn
                )
                broken += 1
                if not retry or broken > RETRIES_ON_BROKEN_CONNECTION:
                    raise
                logger.warning("Postgres connection lost (%s); retrying on a fresh one", exc)
                if io.observer is not None:
                    io.observer.retried("connection_lost")
                # The server may have restarted: drop every dead idle connection at
                # once rather than meeting them one by one.
                assert isinstance(self.conn, AsyncConnectionPool)  # `retry` said so
                await self.conn.check()

    async def _arun(self, op: Operation[T]) -> T:
        return await io.arun(op, self._perform)

    def _astream(self, op: Operation[Any]) -> AsyncIterator[Any]:
        return io.astream(op, self._perform)

    async def _send_ahead(self, request: Request) -> AsyncReading | Deferred:
        """`request` sent on an idle connection of the pool (io.Ahead), its
        reply read by a task of its own, which gives the connection back (as
        the blocking saver's, saver.ColosseumSaver._send_ahead)."""
        pool = self.conn
        if not isinstance(pool, AsyncConnectionPool) or pool.get_stats()["pool_available"] < 1:
            return Deferred(request)
        conn = await pool.getconn()
        try:
            sent = await asend_ahead(conn, request)
        except Exception:  # nothing lost: performed when collected
            sent = None
        except BaseException:  # cancelled: the connection still goes back
            await pool.putconn(conn)
            raise
        if sent is None:
            await pool.putconn(conn)
            return Deferred(request)
        reading = asyncio.ensure_future(_read_and_give_back(pool, sent))
        reading.add_done_callback(_retrieved)
        return AsyncReading(request, reading)

    async def _collect(self, handle: AsyncReading | Deferred) -> Any:
        if isinstance(handle, AsyncReading):
            try:
                # Shielded: a caller cancelled here leaves the reply to be
                # read to its end, and the connection to go back clean.
                return await asyncio.shield(handle.task)
            except Exception:  # as the blocking saver's _collect
                pass
        return await self._perform(handle.request)

    # Blocking calls are sent to the saver's event loop from another thread.
    def _loop_for_blocking_call(self) -> asyncio.AbstractEventLoop:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not None and running is self.loop:
            raise asyncio.InvalidStateError(
                "Synchronous calls to AsyncColosseumSaver are only allowed from a "
                "different thread. From the event loop's thread, use the async "
                "interface, for example `await checkpointer.aget_tuple(...)` or "
                "`await graph.ainvoke(...)`."
            )
        if self.loop is None:
            raise asyncio.InvalidStateError(
                "AsyncColosseumSaver has no event loop yet: create it inside a running "
                "loop, or make one async call first."
            )
        return self.loop

    def _run(self, op: Operation[T]) -> T:
        loop = self._loop_for_blocking_call()
        return asyncio.run_coroutine_threadsafe(self._arun(op), loop).result()

    def _stream(self, op: Operation[Any]) -> Iterator[Any]:
        loop = self._loop_for_blocking_call()
        items = self._astream(op)
        while True:
            try:
                yield asyncio.run_coroutine_threadsafe(items.__anext__(), loop).result()
            except StopAsyncIteration:
                return


class AsyncReading(NamedTuple):
    """An io.Ahead request sent, its reply being read by a task."""

    request: Request
    task: asyncio.Future[Any]


async def _read_and_give_back(pool: AsyncConnectionPool, sent: SentAhead) -> Any:
    try:
        return await sent.aread()
    finally:
        await pool.putconn(sent.conn)


def _retrieved(task: asyncio.Future[Any]) -> None:
    """A reply read for a caller that stopped: its error is dropped, not
    reported by asyncio as never retrieved."""
    if not task.cancelled():
        task.exception()
