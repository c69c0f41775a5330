"""`ColosseumStore` / `AsyncColosseumStore`: LangGraph's long-term memory `BaseStore`
on Postgres jsonb, with pgvector semantic and hybrid search and TTLs.

Both are thin drivers of `_core/memory.py`'s operations. They do their Postgres
I/O through a saver of the same driver (its pool, its retries on a broken
connection or a deadlock), so `store.saver` is a working checkpointer on the
same pool, and `ColosseumStore.from_saver(saver)` shares a saver's pool.

Example:
    >>> with ColosseumStore.from_conn_string(dsn, index={"dims": 1536, "embed": emb}) as store:
    ...     store.setup()
    ...     store.put(("users", "u1", "prefs"), "risk", {"text": "no leverage, ever"})
    ...     store.search(("users", "u1"), query="appetite for risk", limit=3)
    ...     graph = builder.compile(checkpointer=store.saver, store=store)
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, TypeVar

import psycopg
from langgraph.store.base import (
    BaseStore,
    Op,
    Result,
    SearchItem,
    TTLConfig,
    _ensure_refresh,
    _validate_namespace_labels,
)
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from langgraph_colosseum._core import io
from langgraph_colosseum._core.crypt import Encryption
from langgraph_colosseum._core.io import Operation, Request
from langgraph_colosseum._core.memory import (
    ColosseumSearchOp,
    Embed,
    MemoryOps,
    SearchMode,
    VectorIndex,
)
from langgraph_colosseum._driver import logger
from langgraph_colosseum.aio import AsyncColosseumSaver
from langgraph_colosseum.embedded import servers
from langgraph_colosseum.errors import SchemaMissingError, StoreSchemaMissingError
from langgraph_colosseum.saver import ColosseumSaver

T = TypeVar("T")
DEFAULT_SWEEP_MINUTES = 5.0


class _StoreBase(BaseStore):
    """What both drivers share: configuration, the batch operation, `search(mode=)`."""

    supports_ttl = True

    def __init__(
        self, driver: Any, *, index: dict | None, ttl: TTLConfig | None, hot_items: bool = True
    ) -> None:
        self._driver = driver
        self.index_config = dict(index) if index else None
        self._index = VectorIndex.from_config(self.index_config) if self.index_config else None
        self.embeddings = self._index.embeddings if self._index else None
        self.ttl_config = ttl
        # Hot items ride on the saver's Redis cache, when it has one.
        heads = driver._store if hot_items and driver.cache is not None else None
        self._ops = MemoryOps(driver.types, self._index, driver.encryption, heads)

    @property
    def saver(self) -> Any:
        """The checkpointer on the same pool (`ColosseumSaver` / `AsyncColosseumSaver`)."""
        return self._driver

    def register_type(self, cls: type) -> type:
        """Let values hold the application's own class (shared with `saver`)."""
        return self._driver.register_type(cls)

    def search(
        self,
        namespace_prefix: tuple[str, ...],
        /,
        *,
        query: str | None = None,
        filter: dict[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
        refresh_ttl: bool | None = None,
        mode: SearchMode | None = None,
    ) -> list[SearchItem]:
        """BaseStore.search; `mode` ("vector", "hybrid", "text") overrides the index's.

        Example:
            >>> store.search(("docs",), query="risk limits", mode="hybrid", filter={"year": 2026})
        """
        op = self._search_op(namespace_prefix, query, filter, limit, offset, refresh_ttl, mode)
        return self.batch([op])[0]  # type: ignore[list-item]

    async def asearch(
        self,
        namespace_prefix: tuple[str, ...],
        /,
        *,
        query: str | None = None,
        filter: dict[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
        refresh_ttl: bool | None = None,
        mode: SearchMode | None = None,
    ) -> list[SearchItem]:
        op = self._search_op(namespace_prefix, query, filter, limit, offset, refresh_ttl, mode)
        return (await self.abatch([op]))[0]  # type: ignore[return-value]

    def _search_op(self, prefix, query, filter, limit, offset, refresh_ttl, mode) -> Any:
        _validate_namespace_labels(prefix)
        return ColosseumSearchOp(
            tuple(prefix),
            filter,
            limit,
            offset,
            query,
            _ensure_refresh(self.ttl_config, refresh_ttl),
            mode,
        )

    def _sweep_interval(self, minutes: float | None) -> float:
        configured = (self.ttl_config or {}).get("sweep_interval_minutes")
        return float(minutes or configured or DEFAULT_SWEEP_MINUTES) * 60


class ColosseumStore(_StoreBase):
    """A LangGraph `BaseStore` on Postgres jsonb (blocking driver; async methods too).

    `conn`: a psycopg `Connection` or `ConnectionPool`. `index`: LangGraph's
    IndexConfig (`dims`, `embed`, `fields`) plus `distance_type` ("cosine",
    "inner_product", "l2"), `search_mode` ("vector", "hybrid", "text"),
    `ann_index_config` ({"vector_type", "m", "ef_construction", "ef_search"})
    and `text_search_config` (a Postgres text search configuration). `ttl`:
    LangGraph's TTLConfig (minutes).

    Example:
        >>> with ColosseumStore.from_conn_string(dsn, ttl={"default_ttl": 60}) as store:
        ...     store.setup()
        ...     store.put(("mcp", "broker"), "session", {"token": "..."}, ttl=15)
    """

    def __init__(
        self,
        conn: psycopg.Connection | ConnectionPool,
        *,
        index: dict | None = None,
        ttl: TTLConfig | None = None,
        types: Iterable[type] = (),
        encryption: Encryption | None = None,
        cache: Any = None,
        hot_items: bool = True,
        **saver_options: Any,
    ) -> None:
        """`cache`: a `redis.Redis` (or RedisCluster) for the saver's hot heads and
        the Store's hot items (`hot_items=False`: heads only); `saver_options`:
        the saver's (`hot_ttl`, `cache_prefix`, ...)."""
        saver = ColosseumSaver(
            conn, types=types, encryption=encryption, cache=cache, **saver_options
        )
        super().__init__(saver, index=index, ttl=ttl, hot_items=hot_items)
        self._sweeper: threading.Thread | None = None
        self._sweeper_stop = threading.Event()

    @classmethod
    def from_saver(
        cls,
        saver: ColosseumSaver,
        *,
        index: dict | None = None,
        ttl: TTLConfig | None = None,
        hot_items: bool = True,
    ) -> ColosseumStore:
        """A store on `saver`'s connection or pool (and its type registry). With
        a Redis cache on the saver, `get` serves hot items from it too (the
        same client; `hot_items=False` turns that off).

        Example:
            >>> with ColosseumSaver.from_conn_string(dsn) as saver:
            ...     store = ColosseumStore.from_saver(saver, index=index)
            ...     graph = builder.compile(checkpointer=saver, store=store)
        """
        store = cls.__new__(cls)
        _StoreBase.__init__(store, saver, index=index, ttl=ttl, hot_items=hot_items)
        store._sweeper = None
        store._sweeper_stop = threading.Event()
        return store

    @classmethod
    @contextmanager
    def from_conn_string(
        cls,
        conn_string: str,
        *,
        index: dict | None = None,
        ttl: TTLConfig | None = None,
        pool_size: int | None = None,
        pool_config: dict | None = None,
        pipeline: bool = False,
        hot_items: bool = True,
        **saver_options: Any,
    ) -> Iterator[ColosseumStore]:
        """A store on its own pool, closed on exit; `store.saver` is a checkpointer on it.

        `redis_url=` (a saver option) adds the Redis cache: the saver's hot heads
        and the Store's hot items (`hot_items=False`: heads only).
        `pool_config`'s `max_size` (PostgresStore's spelling) sets the pool size;
        `pipeline` is accepted for PostgresStore compatibility: a batch is always
        pipelined in one round trip.
        """
        size = pool_size or (pool_config or {}).get("max_size")
        with ColosseumSaver.from_conn_string(conn_string, pool_size=size, **saver_options) as saver:
            yield cls.from_saver(saver, index=index, ttl=ttl, hot_items=hot_items)

    @classmethod
    @contextmanager
    def from_env(cls, **options: Any) -> Iterator[ColosseumStore]:
        """A store on the configured servers, else the embedded PostgreSQL 18 (with pgvector)."""
        database, redis_url = servers()
        with cls.from_conn_string(database, redis_url=redis_url, **options) as store:
            yield store

    def setup(self) -> int:
        """Create or upgrade the Store's tables (pgvector's too with `index=`); safe concurrently."""
        return self._run(self._ops.migrate())

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        return self._run(self._ops.batch(ops))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await io.arun(self._ops.batch(ops), self._perform_in_thread)

    def sweep_ttl(self) -> int:
        """Delete the expired items now; how many. (Reads never return them anyway.)"""
        return self._run(self._ops.sweep())

    def start_ttl_sweeper(
        self, sweep_interval_minutes: float | None = None
    ) -> concurrent.futures.Future[None]:
        """Sweep expired items every interval in a daemon thread, until `stop_ttl_sweeper`.

        The interval is `sweep_interval_minutes`, else the TTL config's, else 5 minutes.
        """
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        if self._sweeper is not None and self._sweeper.is_alive():
            future.add_done_callback(lambda f: self._sweeper_stop.set() if f.cancelled() else None)
            return future
        interval = self._sweep_interval(sweep_interval_minutes)
        self._sweeper_stop.clear()

        def loop() -> None:
            while not self._sweeper_stop.wait(interval):
                try:
                    self.sweep_ttl()
                except Exception:
                    logger.exception("colosseum store sweep failed; retrying next interval")
            future.set_result(None)

        self._sweeper = threading.Thread(target=loop, name="colosseum-store-sweeper", daemon=True)
        self._sweeper.start()
        future.add_done_callback(lambda f: self._sweeper_stop.set() if f.cancelled() else None)
        return future

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper; False if it did not stop within `timeout` seconds."""
        if self._sweeper is None or not self._sweeper.is_alive():
            return True
        self._sweeper_stop.set()
        self._sweeper.join(timeout)
        stopped = not self._sweeper.is_alive()
        if stopped:
            self._sweeper = None
        return stopped

    # Driver primitives ---------------------------------------------------

    def _perform(self, request: Request) -> Any:
        if isinstance(request, Embed):
            assert self.embeddings is not None
            if request.query:
                return [self.embeddings.embed_query(text) for text in request.texts]
            return self.embeddings.embed_documents(list(request.texts))
        with _store_schema_errors():
            return self._driver._perform(request)

    async def _perform_in_thread(self, request: Request) -> Any:
        if isinstance(request, Embed):
            return await _aembed(self.embeddings, request)
        with _store_schema_errors():
            return await asyncio.to_thread(self._driver._perform, request)

    def _run(self, op: Operation[T]) -> T:
        return io.run(op, self._perform)


class AsyncColosseumStore(_StoreBase):
    """The asyncio twin of `ColosseumStore`, on an `AsyncConnection` or `AsyncConnectionPool`.

    Its blocking methods work from threads other than the event loop's.

    Example:
        >>> async with AsyncColosseumStore.from_conn_string(dsn, index=index) as store:
        ...     await store.setup()
        ...     await store.aput(("users", "u1"), "prefs", {"text": "likes dividends"})
        ...     hits = await store.asearch(("users",), query="income", mode="hybrid")
    """

    def __init__(
        self,
        conn: psycopg.AsyncConnection | AsyncConnectionPool,
        *,
        index: dict | None = None,
        ttl: TTLConfig | None = None,
        types: Iterable[type] = (),
        encryption: Encryption | None = None,
        cache: Any = None,
        hot_items: bool = True,
        **saver_options: Any,
    ) -> None:
        """`cache`: a `redis.asyncio.Redis` (see `ColosseumStore`)."""
        saver = AsyncColosseumSaver(
            conn, types=types, encryption=encryption, cache=cache, **saver_options
        )
        super().__init__(saver, index=index, ttl=ttl, hot_items=hot_items)
        self._sweeper: asyncio.Task | None = None
        self._pending: list[tuple[list[Op], asyncio.Future]] = []
        self._flushes: set[asyncio.Task] = set()

    @classmethod
    def from_saver(
        cls,
        saver: AsyncColosseumSaver,
        *,
        index: dict | None = None,
        ttl: TTLConfig | None = None,
        hot_items: bool = True,
    ) -> AsyncColosseumStore:
        """A store on `saver`'s connection or pool (see `ColosseumStore.from_saver`)."""
        store = cls.__new__(cls)
        _StoreBase.__init__(store, saver, index=index, ttl=ttl, hot_items=hot_items)
        store._sweeper = None
        store._pending = []
        store._flushes = set()
        return store

    @classmethod
    @asynccontextmanager
    async def from_conn_string(
        cls,
        conn_string: str,
        *,
        index: dict | None = None,
        ttl: TTLConfig | None = None,
        pool_size: int | None = None,
        pool_config: dict | None = None,
        pipeline: bool = False,
        hot_items: bool = True,
        **saver_options: Any,
    ) -> AsyncIterator[AsyncColosseumStore]:
        """A store on its own pool, closed on exit (see `ColosseumStore.from_conn_string`)."""
        size = pool_size or (pool_config or {}).get("max_size")
        async with AsyncColosseumSaver.from_conn_string(
            conn_string, pool_size=size, **saver_options
        ) as saver:
            yield cls.from_saver(saver, index=index, ttl=ttl, hot_items=hot_items)

    @classmethod
    @asynccontextmanager
    async def from_env(cls, **options: Any) -> AsyncIterator[AsyncColosseumStore]:
        """A store on the configured servers, else the embedded PostgreSQL 18."""
        database, redis_url = await asyncio.to_thread(servers)
        async with cls.from_conn_string(database, redis_url=redis_url, **options) as store:
            yield store

    async def setup(self) -> int:
        """Create or upgrade the Store's tables (pgvector's too with `index=`); safe concurrently."""
        return await self._arun(self._ops.migrate())

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Run `ops`, together with the other calls made in the same loop iteration.

        Concurrent calls (a `gather` of `aget`s and `aput`s) become one batch:
        one transaction and one round trip instead of one each, as
        AsyncPostgresStore does. A batch that fails is rerun call by call, so
        one caller's bad value fails that caller alone.
        """
        ops = list(ops)
        loop = asyncio.get_running_loop()
        done: asyncio.Future[list[Result]] = loop.create_future()
        if not self._pending:
            loop.call_soon(self._flush)
        self._pending.append((ops, done))
        return await done

    def _flush(self) -> None:
        calls, self._pending = self._pending, []
        task = asyncio.ensure_future(self._run_calls(calls))
        self._flushes.add(task)
        task.add_done_callback(self._flushes.discard)

    async def _run_calls(self, calls: list[tuple[list[Op], asyncio.Future]]) -> None:
        try:
            results = await self._arun(self._ops.batch([op for ops, _ in calls for op in ops]))
        except BaseException as exc:
            if len(calls) == 1 or not isinstance(exc, Exception):
                for _, done in calls:
                    if not done.done():
                        done.set_exception(exc)
                return
            for ops, done in calls:  # find whose call it was
                try:
                    result = await self._arun(self._ops.batch(ops))
                except Exception as own:
                    if not done.done():
                        done.set_exception(own)
                else:
                    if not done.done():
                        done.set_result(result)
            return
        start = 0
        for ops, done in calls:
            if not done.done():
                done.set_result(results[start : start + len(ops)])
            start += len(ops)

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        loop = self._loop_for_blocking_call()
        return asyncio.run_coroutine_threadsafe(self.abatch(ops), loop).result()

    async def sweep_ttl(self) -> int:
        """Delete the expired items now; how many. (Reads never return them anyway.)"""
        return await self._arun(self._ops.sweep())

    async def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> asyncio.Task:
        """Sweep expired items every interval in a task of the running loop."""
        if self._sweeper is not None and not self._sweeper.done():
            return self._sweeper
        interval = self._sweep_interval(sweep_interval_minutes)

        async def loop() -> None:
            while True:
                await asyncio.sleep(interval)
                try:
                    await self.sweep_ttl()
                except Exception:
                    logger.exception("colosseum store sweep failed; retrying next interval")

        self._sweeper = asyncio.ensure_future(loop())
        return self._sweeper

    async def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper task; False if it did not stop within `timeout` seconds."""
        if self._sweeper is None or self._sweeper.done():
            return True
        self._sweeper.cancel()
        done, _ = await asyncio.wait({self._sweeper}, timeout=timeout)
        stopped = bool(done)
        if stopped:
            self._sweeper = None
        return stopped

    # Driver primitives ---------------------------------------------------

    async def _perform(self, request: Request) -> Any:
        if isinstance(request, Embed):
            return await _aembed(self.embeddings, request)
        with _store_schema_errors():
            return await self._driver._perform(request)

    async def _arun(self, op: Operation[T]) -> T:
        return await io.arun(op, self._perform)

    def _loop_for_blocking_call(self) -> asyncio.AbstractEventLoop:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        loop = self._driver.loop
        if running is not None and running is loop:
            raise asyncio.InvalidStateError(
                "Synchronous calls to AsyncColosseumStore are only allowed from a different "
                "thread. From the event loop's thread, use the async interface, for example "
                "`await store.aget(...)` or `await store.asearch(...)`."
            )
        if loop is None:
            raise asyncio.InvalidStateError(
                "AsyncColosseumStore has no event loop yet: create it inside a running loop, "
                "or make one async call first."
            )
        return loop


@contextmanager
def _store_schema_errors() -> Iterator[None]:
    """The saver's driver names saver.setup() for a missing table; here it is the Store's."""
    try:
        yield
    except SchemaMissingError as exc:
        detail = str(exc.__cause__ or exc)
        raise StoreSchemaMissingError(detail) from exc


async def _aembed(embeddings: Any, request: Embed) -> list[list[float]]:
    assert embeddings is not None
    if request.query:
        return list(await asyncio.gather(*(embeddings.aembed_query(t) for t in request.texts)))
    return await embeddings.aembed_documents(list(request.texts))
