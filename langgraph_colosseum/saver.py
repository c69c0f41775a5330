"""`ColosseumSaver`: the blocking driver, on a psycopg `Connection` or `ConnectionPool`."""

from __future__ import annotations

import asyncio
import atexit
import threading
import time
import weakref
from collections.abc import AsyncIterator, Iterable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, NamedTuple, TypeVar

import psycopg
from langgraph.checkpoint.serde.base import SerializerProtocol
from psycopg_pool import ConnectionPool

from langgraph_colosseum._base import DEFAULT_ON_CONFLICT_HOLD, ColosseumSaverBase
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
    Request,
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
    conflict_pause,
    connection_kwargs,
    is_connection_failure,
    logger,
    never_connected,
    perform,
    probe,
    send_ahead,
)
from langgraph_colosseum._notify import listen
from langgraph_colosseum._pool import (
    PoolSettings,
    StampingConnectionPool,
    pool_arguments,
    require_transaction_mode_safe,
)
from langgraph_colosseum.cache import RedisCache, client_from_url
from langgraph_colosseum.embedded import servers
from langgraph_colosseum.threads import Threads

T = TypeVar("T")


class ColosseumSaver(ColosseumSaverBase[Threads]):
    """A LangGraph checkpointer on Postgres `jsonb`.

    Example:
        >>> with ColosseumSaver.from_conn_string("postgresql://localhost/db") as saver:
        ...     saver.setup()
        ...     graph = builder.compile(checkpointer=saver)
        ...     graph.invoke(inputs, {"configurable": {"thread_id": "t1"}})
    """

    _threads_api = Threads
    _cache_driver = RedisCache

    def __init__(
        self,
        conn: psycopg.Connection | ConnectionPool,
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
        """`cache`: a `redis.Redis` or `redis.cluster.RedisCluster` for the hot head;
        its keys are `cache_prefix` + `{thread_id}`, and idle ones expire after `hot_ttl`."""
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
        # One connection runs one statement at a time; a pool needs no lock.
        self._conn_lock = None if isinstance(conn, ConnectionPool) else threading.Lock()
        if self.cache is not None:
            # A one-shot process whose writes Redis refused drops what it can before it exits.
            atexit.register(_drop_stale_heads_of, weakref.ref(self))

    @classmethod
    @contextmanager
    def from_conn_string(
        cls,
        conn_string: str,
        *,
        pool_size: int | None = None,
        serde: SerializerProtocol | None = None,
        redis_url: str | None = None,
        connect_timeout: float | None = None,
        pgbouncer: bool = False,
        **options: Any,
    ) -> Iterator[ColosseumSaver]:
        """A saver on its own connection pool (and Redis client), closed on exit.

        A URL that is not a connection string raises InvalidConfigError; a
        server that cannot be reached (or refuses the database, role or
        password) raises DatabaseUnavailableError with its reason, within
        `connect_timeout` seconds (default 5; else the URL's own).

        `options` are the pool's and connections' settings (`PoolSettings`:
        min_size, max_size, timeout, max_idle, max_lifetime, check_idle_after,
        prepare_threshold, keepalives_*, application_name; README, Configuration)
        and the constructor's. `pgbouncer=True`: Postgres is behind PgBouncer (or
        another pooler) in transaction mode; nothing is prepared or kept in the
        session. `pool_size` is `max_size`.

        Example:
            >>> with ColosseumSaver.from_conn_string(
            ...     dsn, redis_url="redis://localhost:6379", hot_ttl=timedelta(hours=1)
            ... ) as saver:
            ...     graph = builder.compile(checkpointer=saver)
        """
        # A wrong URL fails here, within `connect_timeout`, with the server's reason.
        settings = PoolSettings.take(options, pool_size=pool_size, pgbouncer=pgbouncer)
        arguments = pool_arguments(
            conn_string,
            settings,
            asynchronous=False,
            connect=connection_kwargs(conn_string, connect_timeout),
        )
        probe(conn_string, arguments["kwargs"])
        with StampingConnectionPool(**arguments, open=True) as pool:
            client = client_from_url(redis_url) if redis_url else None
            saver = None
            try:
                saver = cls(pool, serde=serde, cache=client, pgbouncer=pgbouncer, **options)
                yield saver
            finally:
                if saver is not None:
                    saver.drop_stale_heads()
                if client is not None:
                    client.close()

    @classmethod
    @contextmanager
    def from_env(
        cls,
        *,
        pool_size: int | None = None,
        serde: SerializerProtocol | None = None,
        **options: Any,
    ) -> Iterator[ColosseumSaver]:
        """A saver on the configured servers, else the embedded ones.

        Postgres: COLOSSEUM_DATABASE_URL, DATABASE_URL, else the embedded
        PostgreSQL. The hot cache: COLOSSEUM_REDIS_URL, REDIS_URL, else the
        embedded Valkey when no database URL is set either (see embedded.py).

        Example:
            >>> with ColosseumSaver.from_env() as saver:
            ...     saver.setup()
        """
        database, redis_url = servers()
        with cls.from_conn_string(
            database, pool_size=pool_size, serde=serde, redis_url=redis_url, **options
        ) as saver:
            yield saver

    def sweep(self) -> int:
        """Apply the retention policy to every expired thread; how many were swept.

        Idempotent and batched (a transaction per batch). A thread written while
        the sweep runs has a new expiry and is left alone.
        """
        if self.retention is None:
            return 0
        return self._run(threads_ops.sweep(self._store, self.retention))

    def start_sweeper(self, interval: timedelta) -> threading.Event:
        """Sweep every `interval` in a daemon thread; set the returned event to stop."""
        stop = threading.Event()

        def loop() -> None:
            while not stop.wait(interval.total_seconds()):
                try:
                    self.sweep()
                except Exception:
                    logger.exception("colosseum sweep failed; retrying next interval")

        threading.Thread(target=loop, name="colosseum-sweeper", daemon=True).start()
        return stop

    def flush_cache(self) -> int:
        """Drop every Redis head of this database (its current incarnation) and
        nothing else; how many keys. Needed only after a restore that keeps the
        incarnation (see the README, Backup); `colosseum cache flush` runs it.

        Example:
            >>> with ColosseumSaver.from_env() as saver:
            ...     saver.flush_cache()
        """
        if self.cache is None or self._store.hot is None:
            return 0
        self._run(self._store.learn_incarnation())
        return self.cache.flush(self._store.hot.key_pattern())

    def setup(self) -> int:
        """Create or upgrade the schema; returns its version. Safe to call concurrently."""
        return self._run(self._store.migrate())

    # Driver primitives ---------------------------------------------------

    def _perform(self, request: Request) -> Any:
        if isinstance(request, (CacheCall, CacheDrop)):
            assert self.cache is not None
            return self.cache.perform(request)
        if isinstance(request, Listen):
            return listen(self, request)
        if isinstance(request, Ahead):
            return self._send_ahead(request.request)
        if isinstance(request, Collect):
            return self._collect(request.handle)
        broken = conflicts = 0
        while True:
            conn = None
            try:
                if isinstance(self.conn, ConnectionPool):
                    # getconn / putconn, not `pool.connection()`: see _LOAN in _pool.py.
                    conn = self.conn.getconn()
                    try:
                        self._connected = True
                        return perform(conn, request)
                    finally:
                        self.conn.putconn(conn)
                assert self._conn_lock is not None
                with self._conn_lock:
                    conn = self.conn
                    self._connected = True
                    return perform(conn, request)
            except CONFLICTS:
                conflicts += 1
                if conflicts > RETRIES_ON_CONFLICT:
                    raise
                if io.observer is not None:
                    io.observer.retried("conflict")
                time.sleep(conflict_pause(conflicts))
            except psycopg.OperationalError as exc:
                if conn is None and not self._connected:
                    raise never_connected(self.conn, exc) from None
                retry = isinstance(self.conn, ConnectionPool) and is_connection_failure(exc, conn)
                broken += 1
                if not retry or broken > RETRIES_ON_BROKEN_CONNECTION:
                    raise
                logger.warning("Postgres connection lost (%s); retrying on a fresh one", exc)
                if io.observer is not None:
                    io.observer.retried("connection_lost")
                # The server may have restarted: drop every dead idle connection at
                # once rather than meeting them one by one.
                assert isinstance(self.conn, ConnectionPool)  # `retry` said so
                self.conn.check()

    def _run(self, op: Operation[T]) -> T:
        return io.run(op, self._perform)

    def _stream(self, op: Operation[Any]) -> Iterator[Any]:
        return io.stream(op, self._perform)

    def _send_ahead(self, request: Request) -> Reading | Deferred:
        """`request` sent on an idle connection of the pool (io.Ahead), its
        reply read by a thread of its own, which gives the connection back:
        the caller, taking items meanwhile, may pause or stop and holds none."""
        pool = self.conn
        if not isinstance(pool, ConnectionPool) or pool.get_stats()["pool_available"] < 1:
            return Deferred(request)
        conn = pool.getconn()
        try:
            sent = send_ahead(conn, request)
        except Exception:  # nothing lost: performed when collected
            sent = None
        except BaseException:
            pool.putconn(conn)
            raise
        if sent is None:
            pool.putconn(conn)
            return Deferred(request)
        return Reading(request, _read_apart(pool, sent))

    def _collect(self, handle: Reading | Deferred) -> Any:
        if isinstance(handle, Reading):
            try:
                return handle.future.result()
            except Exception:
                # Sent ahead on the lean path alone, without the driver's
                # retries (a lost connection, a statement deallocated): the
                # request is a read, and goes again the usual way, which has them.
                pass
        return self._perform(handle.request)

    # The async interface of a blocking saver runs each request in a worker thread.
    async def _arun(self, op: Operation[T]) -> T:
        return await io.arun(op, self._perform_in_thread)

    def _astream(self, op: Operation[Any]) -> AsyncIterator[Any]:
        return io.astream(op, self._perform_in_thread)

    async def _perform_in_thread(self, request: Request) -> Any:
        return await asyncio.to_thread(self._perform, request)


class Reading(NamedTuple):
    """An io.Ahead request sent, its reply being read by a thread."""

    request: Request
    future: Future[Any]


def _read_and_give_back(pool: ConnectionPool, sent: SentAhead) -> Any:
    try:
        return sent.read()
    finally:
        pool.putconn(sent.conn)


def _read_apart(pool: ConnectionPool, sent: SentAhead) -> Future[Any]:
    """The reply of `sent`, read by a thread of its own (a daemon: one waiting
    on a server that does not answer never holds the process at exit); read
    here, at once, when no thread can start (the interpreter shutting down)."""
    reading: Future[Any] = Future()

    def read() -> None:
        try:
            reading.set_result(_read_and_give_back(pool, sent))
        except BaseException as exc:
            reading.set_exception(exc)

    try:
        threading.Thread(target=read, name="colosseum-reader", daemon=True).start()
    except Exception:  # no thread can start: read here
        read()
    except BaseException:  # interrupted: the connection goes back all the same
        read()
        raise
    return reading


def _drop_stale_heads_of(saver: weakref.ref[ColosseumSaver]) -> None:
    """At exit: what this process's writes left in Redis, if its pool is still open."""
    alive = saver()
    if alive is not None and alive._store.recorded_stale and not alive.conn.closed:
        alive.drop_stale_heads()
