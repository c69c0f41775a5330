"""Hot Store items in Redis: served without Postgres, and never staler than Postgres.

The invariants users rely on (README, Store): a `get` of a hot item makes no
Postgres round trip and returns what a Postgres read returns (compared by
repr); a put or delete from any process is never hidden by a hot copy once it
returned, even when a reader's refill races it; an item with a TTL is never
served from Redis after it expired, and a refreshing get still refreshes; two
databases on one Redis never see each other's items; a drop Redis refused is
recorded and applied by the next write that reaches Redis.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import decimal
import multiprocessing
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
import redis
from langgraph.store.base import GetOp, PutOp

from langgraph_colosseum._core.io import CacheCall, Query, Request, Transaction
from langgraph_colosseum.cache import async_client_from_url, client_from_url
from langgraph_colosseum.memory import AsyncColosseumStore, ColosseumStore
from tests.conftest import CACHE_PREFIX, flush_cache, redis_url, server_url
from tests.integration.store_support import fresh_database, sql

NS = ("users", "u1", "prefs")
PG_REQUESTS = (Query, Transaction)


@pytest.fixture(scope="module")
def hot_url() -> Iterator[str]:
    with fresh_database(server_url()) as url:
        with hot_store(url) as store:
            store.setup()  # with hot items, the checkpointer's schema too
        yield url
    flush_cache()


def hot_store(url: str, **options: Any) -> Any:
    options = {"redis_url": redis_url(), "cache_prefix": CACHE_PREFIX, **options}
    return ColosseumStore.from_conn_string(url, **options)


class Spy:
    """Records the requests a store's driver performs; `before(request)` runs
    first (a hook that steers a race)."""

    def __init__(self, store: Any) -> None:
        self.requests: list[Request] = []
        self.before: Callable[[Request], None] | None = None
        driver = store._driver
        if driver._store.hot is not None:
            # Time stands still for the incarnation re-check (HotHead.recheck_due):
            # one due mid-test would be a Postgres request the test did not make.
            driver._store.hot.clock = lambda: 0.0
        perform = driver._perform
        if asyncio.iscoroutinefunction(perform):

            async def spied_async(request: Request) -> Any:
                self.requests.append(request)
                return await perform(request)

            driver._perform = spied_async
        else:

            def spied(request: Request) -> Any:
                self.requests.append(request)
                if self.before is not None:
                    self.before(request)
                return perform(request)

            driver._perform = spied

    def postgres_requests(self) -> list[Request]:
        return [r for r in self.requests if isinstance(r, PG_REQUESTS)]

    def scripts(self) -> list[str]:
        return [r.script for r in self.requests if isinstance(r, CacheCall)]


def typed_value() -> dict:
    return {
        "text": "no leverage, ever",
        "limit": decimal.Decimal("1.20"),
        "since": dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc),
        "tags": ("risk", "cio"),
        "nested": {"b": 1, "a": [1.5, None, True]},
    }


def test_a_hot_get_makes_no_postgres_round_trip_and_reads_as_postgres_does(
    hot_url: str,
) -> None:
    key = f"k-{uuid.uuid4().hex[:8]}"
    with hot_store(hot_url) as store, ColosseumStore.from_conn_string(hot_url) as plain:
        store.put(NS, key, typed_value())
        spy = Spy(store)
        first = store.get(NS, key)  # a miss: Postgres, then the refill
        assert spy.scripts() == ["item_read", "item_refill"]
        spy.requests.clear()
        hit = store.get(NS, key)
        absent = [store.get(NS, "nobody"), store.get(NS, "nobody")]
        assert spy.scripts()[-1] == "item_read"
        spy.requests.clear()
        assert store.get(NS, key) == hit and store.get(NS, "nobody") is None
        assert spy.postgres_requests() == []  # hit, and the absent item remembered
        from_postgres = plain.get(NS, key)
        assert repr(hit) == repr(first) == repr(from_postgres)
        assert absent == [None, None]
        # A batch mixing hits with other ops keeps the order of its results.
        got, _, missing = store.batch(
            [GetOp(NS, key), PutOp(NS, "other", {"x": 1}), GetOp(NS, "nobody")]
        )
        assert repr(got) == repr(from_postgres) and missing is None


async def test_an_async_hot_get_makes_no_postgres_round_trip(hot_url: str) -> None:
    key = f"k-{uuid.uuid4().hex[:8]}"
    client = async_client_from_url(redis_url())
    try:
        async with await psycopg.AsyncConnection.connect(hot_url, autocommit=True) as conn:
            store = AsyncColosseumStore(conn, cache=client, cache_prefix=CACHE_PREFIX)
            await store.aput(NS, key, typed_value())
            first = await store.aget(NS, key)
            spy = Spy(store)
            hit = await store.aget(NS, key)
            assert spy.postgres_requests() == [] and spy.scripts() == ["item_read"]
            assert repr(hit) == repr(first)
            await store.adelete(NS, key)
            assert await store.aget(NS, key) is None
    finally:
        await client.aclose()


# ------------------------------------------------ another process writes


def _writer(url: str, prefix: str, redis: str, commands: Any, done: Any) -> None:
    """A second process: performs each command on its own store and says so."""
    with ColosseumStore.from_conn_string(url, redis_url=redis, cache_prefix=prefix) as store:
        while (command := commands.get()) is not None:
            kind, key, value = command
            if kind == "put":
                store.put(NS, key, value)
            else:
                store.delete(NS, key)
            done.put(kind)


@pytest.fixture(scope="module")
def writer(hot_url: str) -> Iterator[Callable[[str, str, Any], None]]:
    spawn = multiprocessing.get_context("spawn")
    commands, done = spawn.Queue(), spawn.Queue()
    process = spawn.Process(
        target=_writer, args=(hot_url, CACHE_PREFIX, redis_url(), commands, done), daemon=True
    )
    process.start()

    def write(kind: str, key: str, value: Any = None) -> None:
        """Returns once the other process's write has returned (committed and dropped)."""
        commands.put((kind, key, value))
        assert done.get(timeout=60) == kind

    yield write
    commands.put(None)
    process.join(30)


@pytest.mark.parametrize("write", ["put", "delete"])
def test_a_write_from_another_process_between_a_miss_and_its_refill_wins(
    hot_url: str, writer: Callable[..., None], write: str
) -> None:
    """Reader: misses, reads Postgres (the old value). Then, before its refill
    reaches Redis, another process writes the item and returns, and a second
    reader misses and refills. The late refill must be refused (ITEM_REFILL
    compares the counter the miss noted; the write dropped the hash, the second
    reader made a new counter), and every later get sees the write."""
    key = f"race-{write}-{uuid.uuid4().hex[:8]}"
    with hot_store(hot_url) as reader, hot_store(hot_url) as checker:
        reader.put(NS, key, {"v": "old"})
        spy = Spy(reader)
        fired = []

        def write_before_the_refill(request: Request) -> None:
            if isinstance(request, CacheCall) and request.script == "item_refill" and not fired:
                fired.append(True)
                writer(write, key, {"v": "new"})
                # Another reader misses and refills with the write's value
                # first: the late refill must not overwrite it.
                checker.get(NS, key)

        spy.before = write_before_the_refill
        seen = reader.get(NS, key)
        assert fired and seen is not None and seen.value == {"v": "old"}
        expected = {"v": "new"} if write == "put" else None
        for store in (checker, reader, checker):  # a miss (refilled), then hits
            item = store.get(NS, key)
            assert (item.value if item else None) == expected
        # The last read was a hit, and it was the write's value.
        checker_spy = Spy(checker)
        item = checker.get(NS, key)
        assert checker_spy.postgres_requests() == []
        assert (item.value if item else None) == expected


def test_a_hot_item_written_by_another_process_is_read_fresh(
    hot_url: str, writer: Callable[..., None]
) -> None:
    key = f"fresh-{uuid.uuid4().hex[:8]}"
    with hot_store(hot_url) as reader:
        reader.put(NS, key, {"v": 1})
        for version in (2, 3):
            assert reader.get(NS, key) is not None  # hot now
            writer("put", key, {"v": version})
            assert reader.get(NS, key).value == {"v": version}
        writer("delete", key)
        assert reader.get(NS, key) is None


# --------------------------------------------------------------- TTL


def remaining_ms(url: str, key: str) -> float:
    rows = sql(
        url,
        "SELECT extract(epoch FROM expires_at - now())::float8 * 1000 "
        "FROM colosseum_store_items WHERE prefix = %s AND key = %s",
        (".".join(NS), key),
    )
    return rows[0][0]


def expires_at(url: str, key: str) -> dt.datetime:
    rows = sql(
        url,
        "SELECT expires_at FROM colosseum_store_items WHERE prefix = %s AND key = %s",
        (".".join(NS), key),
    )
    return rows[0][0]


def test_a_ttl_item_lives_in_redis_no_longer_than_in_postgres(hot_url: str) -> None:
    key = f"ttl-{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(redis_url())
    with hot_store(hot_url) as store:
        store.put(NS, key, {"token": "abc"}, ttl=1.0)  # one minute; hot_ttl is an hour
        store.get(NS, key, refresh_ttl=False)
        redis_key = store._ops.hot.head.item_key(".".join(NS), key)
        left_in_postgres = remaining_ms(hot_url, key)  # read first: it only shrinks
        left_in_redis = client.pttl(redis_key)
        assert 0 < left_in_redis <= left_in_postgres

        # Served from Redis when not refreshing; a refreshing get goes to Postgres.
        spy = Spy(store)
        assert store.get(NS, key, refresh_ttl=False).value == {"token": "abc"}
        assert spy.postgres_requests() == []
        before = expires_at(hot_url, key)
        assert store.get(NS, key, refresh_ttl=True) is not None
        assert spy.postgres_requests() != []
        assert expires_at(hot_url, key) > before  # pushed back

        # An item about to expire: once Postgres says it expired, Redis must too.
        short = f"short-{uuid.uuid4().hex[:8]}"
        store.put(NS, short, {"token": "brief"}, ttl=0.003)  # 180 ms
        assert store.get(NS, short, refresh_ttl=False) is not None
        while remaining_ms(hot_url, short) > 0:  # the subject is time passing
            time.sleep(0.02)
        assert store.get(NS, short, refresh_ttl=False) is None
    client.close()


# --------------------------------------------------- isolation, outages


def test_two_databases_on_one_redis_never_see_each_others_items(hot_url: str) -> None:
    key = f"iso-{uuid.uuid4().hex[:8]}"
    with fresh_database(server_url()) as other_url:
        with hot_store(hot_url) as first, hot_store(other_url) as second:
            second.setup()
            first.put(NS, key, {"db": "first"})
            second.put(NS, key, {"db": "second"})
            for _ in range(2):  # a miss each, then hits
                assert first.get(NS, key).value == {"db": "first"}
                assert second.get(NS, key).value == {"db": "second"}
            assert first.get(NS, "only-second") is None  # remembered as absent
            second.put(NS, "only-second", {"db": "second"})
            assert first.get(NS, "only-second") is None
            assert second.get(NS, "only-second").value == {"db": "second"}


def test_a_drop_redis_refused_is_recorded_and_applied_by_the_next_write(hot_url: str) -> None:
    key = f"outage-{uuid.uuid4().hex[:8]}"
    down = client_from_url("redis://127.0.0.1:1/0")  # nothing listens there
    with hot_store(hot_url) as reader, psycopg.connect(hot_url, autocommit=True) as conn:
        reader.put(NS, key, {"v": "old"})
        assert reader.get(NS, key) is not None  # hot in the shared Redis
        cut_off = ColosseumStore(conn, cache=down, cache_prefix=CACHE_PREFIX)
        cut_off.put(NS, key, {"v": "new"})  # committed; its drop did not reach Redis
        redis_key = reader._ops.hot.head.item_key(".".join(NS), key)
        recorded = sql(hot_url, "SELECT head_key FROM colosseum_stale_heads")
        assert (redis_key,) in recorded
        reader.put(NS, f"{key}-any", {"v": 0})  # any write that reaches Redis
        assert reader.get(NS, key).value == {"v": "new"}
        assert (redis_key,) not in sql(hot_url, "SELECT head_key FROM colosseum_stale_heads")
    down.close()
