"""`ColosseumSaver`: the blocking driver, on a psycopg `Connection` or `ConnectionPool`."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import contextmanager, nullcontext
from datetime import timedelta
from typing import Any, TypeVar

import psycopg
from langgraph.checkpoint.serde.base import SerializerProtocol
from psycopg_pool import ConnectionPool

from langgraph_colosseum._base import ColosseumSaverBase
from langgraph_colosseum._core import io
from langgraph_colosseum._core import threads as threads_ops
from langgraph_colosseum._core.io import Operation, Request
from langgraph_colosseum._core.shapes import DEFAULT_SNAPSHOT_EVERY
from langgraph_colosseum._core.store import DEFAULT_PAGE_SIZE
from langgraph_colosseum._core.threads import Retention
from langgraph_colosseum._driver import (
    RETRIES_ON_BROKEN_CONNECTION,
    is_connection_failure,
    logger,
    perform,
)
from langgraph_colosseum.embedded import database_url
from langgraph_colosseum.threads import Threads

T = TypeVar("T")

DEFAULT_POOL_SIZE = 10


class ColosseumSaver(ColosseumSaverBase):
    """A LangGraph checkpointer on Postgres `jsonb`.

    Example:
        >>> with ColosseumSaver.from_conn_string("postgresql://localhost/db") as saver:
        ...     saver.setup()
        ...     graph = builder.compile(checkpointer=saver)
        ...     graph.invoke(inputs, {"configurable": {"thread_id": "t1"}})
    """

    _threads_api = Threads

    def __init__(
        self,
        conn: psycopg.Connection | ConnectionPool,
        *,
        serde: SerializerProtocol | None = None,
        types: Iterable[type] = (),
        page_size: int = DEFAULT_PAGE_SIZE,
        snapshot_every: int = DEFAULT_SNAPSHOT_EVERY,
        retention: Retention | None = None,
    ) -> None:
        super().__init__(
            serde=serde,
            types=types,
            page_size=page_size,
            snapshot_every=snapshot_every,
            retention=retention,
        )
        self.conn = conn
        # One connection runs one statement at a time; a pool needs no lock.
        self._conn_lock = None if isinstance(conn, ConnectionPool) else threading.Lock()

    @classmethod
    @contextmanager
    def from_conn_string(
        cls,
        conn_string: str,
        *,
        pool_size: int | None = None,
        serde: SerializerProtocol | None = None,
        **options: Any,
    ) -> Iterator[ColosseumSaver]:
        """A saver on its own connection pool, closed on exit."""
        with ConnectionPool(
            conn_string,
            min_size=1,
            max_size=pool_size or DEFAULT_POOL_SIZE,
            kwargs={"autocommit": True},
            open=True,
        ) as pool:
            yield cls(pool, serde=serde, **options)

    @classmethod
    @contextmanager
    def from_env(
        cls,
        *,
        pool_size: int | None = None,
        serde: SerializerProtocol | None = None,
        **options: Any,
    ) -> Iterator[ColosseumSaver]:
        """A saver on COLOSSEUM_DATABASE_URL / DATABASE_URL, else the embedded PostgreSQL.

        Example:
            >>> with ColosseumSaver.from_env() as saver:
            ...     saver.setup()
        """
        with cls.from_conn_string(
            database_url(), pool_size=pool_size, serde=serde, **options
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

    def setup(self) -> int:
        """Create or upgrade the schema; returns its version. Safe to call concurrently."""
        return self._run(self._store.migrate())

    # Driver primitives ---------------------------------------------------

    def _connection(self) -> Any:
        if isinstance(self.conn, ConnectionPool):
            return self.conn.connection()
        assert self._conn_lock is not None
        return _locked(self._conn_lock, self.conn)

    def _perform(self, request: Request) -> Any:
        for attempt in range(RETRIES_ON_BROKEN_CONNECTION + 1):
            conn = None
            try:
                with self._connection() as conn:
                    return perform(conn, request)
            except psycopg.OperationalError as exc:
                retry = isinstance(self.conn, ConnectionPool) and is_connection_failure(exc, conn)
                if not retry or attempt == RETRIES_ON_BROKEN_CONNECTION:
                    raise
                logger.warning("Postgres connection lost (%s); retrying on a fresh one", exc)
                # The server may have restarted: drop every dead idle connection at
                # once rather than meeting them one by one.
                self.conn.check()
        raise AssertionError("unreachable")

    def _run(self, op: Operation[T]) -> T:
        return io.run(op, self._perform)

    def _stream(self, op: Operation[Any]) -> Iterator[Any]:
        return io.stream(op, self._perform)

    # The async interface of a blocking saver runs each request in a worker thread.
    async def _arun(self, op: Operation[T]) -> T:
        return await io.arun(op, self._perform_in_thread)

    def _astream(self, op: Operation[Any]) -> AsyncIterator[Any]:
        return io.astream(op, self._perform_in_thread)

    async def _perform_in_thread(self, request: Request) -> Any:
        return await asyncio.to_thread(self._perform, request)


@contextmanager
def _locked(lock: threading.Lock, conn: psycopg.Connection) -> Iterator[psycopg.Connection]:
    with lock, nullcontext(conn):
        yield conn
