"""ColosseumStore / AsyncColosseumStore: the BaseStore contract on Postgres.

Each behaviour PostgresStore's own suites check (batch order, namespaces and
their listing, filters, TTL and refresh), written once and run on four
stores: blocking and async drivers, each on a single connection and on a pool.
Vector search lives in test_store_vectors.py (it needs pgvector).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal

import psycopg
import pytest
from langgraph.store.base import (
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from langgraph_colosseum import ColosseumSaver
from langgraph_colosseum.errors import (
    PgvectorUnavailableError,
    StoreFilterError,
    StoreSchemaMissingError,
    StoreValueError,
)
from langgraph_colosseum.memory import AsyncColosseumStore, ColosseumStore
from tests.conftest import server_url
from tests.integration.store_support import Facade, HashEmbeddings, fresh_database, sql

TTL = {"default_ttl": None, "refresh_on_read": True}


@pytest.fixture(scope="session")
def store_url() -> Iterator[str]:
    with fresh_database(server_url()) as url:
        with ColosseumStore.from_conn_string(url) as store:
            store.setup()
        yield url


def empty(url: str) -> None:
    sql(url, "TRUNCATE colosseum_store_items CASCADE")


@pytest.fixture(params=["sync-conn", "sync-pool", "async-conn", "async-pool"])
async def store(store_url: str, request: pytest.FixtureRequest) -> AsyncIterator[Facade]:
    empty(store_url)
    kind = request.param
    if kind == "sync-conn":
        with psycopg.connect(store_url, autocommit=True) as conn:
            yield Facade(ColosseumStore(conn, ttl=dict(TTL)), is_async=False)
    elif kind == "sync-pool":
        with ConnectionPool(store_url, max_size=4, kwargs={"autocommit": True}) as pool:
            yield Facade(ColosseumStore(pool, ttl=dict(TTL)), is_async=False)
    elif kind == "async-conn":
        async with await psycopg.AsyncConnection.connect(store_url, autocommit=True) as conn:
            yield Facade(AsyncColosseumStore(conn, ttl=dict(TTL)), is_async=True)
    else:
        async with AsyncConnectionPool(
            store_url, max_size=4, kwargs={"autocommit": True}, open=False
        ) as pool:
            yield Facade(AsyncColosseumStore(pool, ttl=dict(TTL)), is_async=True)


def keys(items: list) -> list[str]:
    return [item.key for item in items]


def expire_now(url: str, namespace: tuple[str, ...], key: str) -> None:
    """Backdate an item's expiry without deleting it: expired, not yet swept."""
    sql(
        url,
        "UPDATE colosseum_store_items SET expires_at = now() - interval '1 minute' "
        "WHERE prefix = %s AND key = %s",
        (".".join(namespace), key),
    )


def expires_at(url: str, namespace: tuple[str, ...], key: str) -> dt.datetime | None:
    rows = sql(
        url,
        "SELECT expires_at FROM colosseum_store_items WHERE prefix = %s AND key = %s",
        (".".join(namespace), key),
    )
    return rows[0][0] if rows else None


# ------------------------------------------------------------------ batch


async def test_batch_results_follow_op_order_and_reads_precede_writes(store: Facade) -> None:
    await store.put(("test", "foo"), "key1", {"data": "value1"})
    await store.put(("test", "bar"), "key2", {"data": "value2"})

    results = await store.batch(
        [
            GetOp(("test", "foo"), "key1"),
            PutOp(("test", "bar"), "key2", {"data": "changed"}),
            SearchOp(("test",), filter={"data": "value2"}),
            ListNamespacesOp(limit=10),
            GetOp(("test",), "key3"),
            GetOp(("test", "bar"), "key2"),
            PutOp(("test",), "key3", {"data": "value3"}),
            ListNamespacesOp(match_conditions=(MatchCondition("suffix", ("foo",)),)),
        ]
    )

    assert len(results) == 8
    assert results[7] == [("test", "foo")]
    assert isinstance(results[0], Item) and results[0].value == {"data": "value1"}
    assert results[1] is None and results[6] is None
    # Reads see the store as it was before the batch's writes.
    assert keys(results[2]) == ["key2"] and results[2][0].value == {"data": "value2"}
    assert results[3] == [("test", "bar"), ("test", "foo")]
    assert results[4] is None
    assert results[5].value == {"data": "value2"}
    # ... and the writes are all there after it.
    assert (await store.get(("test", "bar"), "key2")).value == {"data": "changed"}
    assert (await store.get(("test",), "key3")).value == {"data": "value3"}


async def test_batch_last_put_of_an_item_wins(store: Facade) -> None:
    ns = ("test",)
    await store.batch(
        [
            PutOp(ns, "a", {"n": 1}),
            PutOp(ns, "a", {"n": 2}),
            PutOp(ns, "b", {"n": 1}),
            PutOp(ns, "b", None),
            PutOp(ns, "c", None),
            PutOp(ns, "c", {"n": 3}),
        ]
    )
    assert (await store.get(ns, "a")).value == {"n": 2}
    assert await store.get(ns, "b") is None
    assert (await store.get(ns, "c")).value == {"n": 3}


async def test_batch_get_many_namespaces_and_missing(store: Facade) -> None:
    await store.put(("a",), "k", {"v": "a"})
    await store.put(("b", "c"), "k", {"v": "bc"})
    results = await store.batch(
        [GetOp(("b", "c"), "k"), GetOp(("a",), "k"), GetOp(("a",), "nope"), GetOp(("b",), "k")]
    )
    assert [r and r.value["v"] for r in results] == ["bc", "a", None, None]
    assert results[0].namespace == ("b", "c")


async def test_get_put_update_delete(store: Facade) -> None:
    ns = ("test", "documents")
    await store.put(ns, "doc1", {"title": "Test", "content": "Hello"})
    first = await store.get(ns, "doc1")
    assert first.namespace == ns and first.key == "doc1"
    assert first.value == {"title": "Test", "content": "Hello"}
    assert first.created_at == first.updated_at

    await store.put(ns, "doc1", {"title": "Updated"})
    second = await store.get(ns, "doc1")
    assert second.value == {"title": "Updated"}
    assert second.updated_at > first.updated_at
    assert second.created_at == first.created_at

    assert await store.get(("test", "other"), "doc1") is None
    await store.delete(ns, "doc1")
    assert await store.get(ns, "doc1") is None
    await store.delete(ns, "doc1")  # deleting nothing is not an error


async def test_invalid_namespaces_are_refused_before_anything_is_written(store: Facade) -> None:
    for bad in [(), ("a.b",), ("",), ("langgraph", "x"), ("nul\x00",)]:
        with pytest.raises(InvalidNamespaceError):
            await store.put(bad, "k", {"v": 1})
    assert await store.list_namespaces() == []


# -------------------------------------------------------------- search


async def test_search_scope_is_namespace_segments(store: Facade) -> None:
    for ns in [
        ("foo",),
        ("foo", "child"),
        ("foo", "child", "deep"),
        ("foobar",),
        ("foobar", "baz"),
        ("foo2",),
        ("user_1",),
        ("user_1", "child"),
        ("userX1",),
        ("a%b",),
        ("axxb",),
    ]:
        await store.put(ns, "k", {"v": 1})

    async def scope(prefix: tuple[str, ...]) -> set[tuple[str, ...]]:
        return {item.namespace for item in await store.search(prefix, limit=100)}

    assert await scope(("foo",)) == {("foo",), ("foo", "child"), ("foo", "child", "deep")}
    assert await scope(("foobar",)) == {("foobar",), ("foobar", "baz")}
    assert await scope(("foo", "child")) == {("foo", "child"), ("foo", "child", "deep")}
    assert await scope(("fo",)) == set()
    assert await scope(("user_1",)) == {("user_1",), ("user_1", "child")}
    assert await scope(("a%b",)) == {("a%b",)}
    assert len(await scope(())) == 11


async def test_search_most_recent_first_and_pages(store: Facade) -> None:
    ns = ("docs",)
    for i in range(5):
        await store.put(ns, f"d{i}", {"i": i})
    await store.put(ns, "d1", {"i": 10})  # now the most recent

    listed = await store.search(ns, limit=10)
    assert keys(listed) == ["d1", "d4", "d3", "d2", "d0"]
    assert all(item.score is None for item in listed)
    assert keys(await store.search(ns, limit=2)) == ["d1", "d4"]
    assert keys(await store.search(ns, limit=2, offset=2)) == ["d3", "d2"]
    assert keys(await store.search(ns, limit=2, offset=4)) == ["d0"]
    # Without an index, a query does not change anything (as PostgresStore).
    assert keys(await store.search(ns, query="anything", limit=10)) == keys(listed)


async def test_filters_match_inmemory_semantics(store: Facade) -> None:
    ns = ("f",)
    docs = {
        "a": {"n": 9, "s": "apple", "tag": "x", "nested": {"k": 1, "j": "q"}, "l": [1, 2]},
        "b": {"n": 10, "s": "banana", "tag": "y", "nested": {"k": 2}, "l": [2, 1]},
        "c": {"n": 10.5, "s": "cherry", "tag": None, "nested": "flat"},
        "d": {"n": "11", "s": "date"},  # a string where others hold numbers
        "e": {"n": -1, "s": "Éclair", "tag": "x"},
    }
    for key, value in docs.items():
        await store.put(ns, key, value)

    async def match(filter: dict) -> list[str]:
        return sorted(keys(await store.search(ns, filter=filter, limit=100)))

    assert await match({"tag": "x"}) == ["a", "e"]
    assert await match({"tag": {"$eq": "x"}}) == ["a", "e"]
    assert await match({"tag": {"$ne": "x"}}) == ["b", "c", "d"]  # missing is "not x"
    assert await match({"tag": None}) == ["c", "d"]  # None also matches a missing key
    assert await match({"tag": {"$ne": None}}) == ["a", "b", "e"]
    # Numbers compare as numbers (PostgresStore's text comparison puts 10 < 9).
    assert await match({"n": {"$gt": 9}}) == ["b", "c"]
    assert await match({"n": {"$gte": 9}}) == ["a", "b", "c"]
    assert await match({"n": {"$lt": 10}}) == ["a", "e"]
    assert await match({"n": {"$lte": 10}}) == ["a", "b", "e"]
    assert await match({"n": {"$gt": 0, "$lt": 10.5}}) == ["a", "b"]
    assert await match({"n": 10}) == ["b"]
    # Strings compare by code point.
    assert await match({"s": {"$gte": "banana", "$lt": "date"}}) == ["b", "c"]
    assert await match({"s": {"$gt": "d"}}) == ["d", "e"]
    # Nested dicts match nested keys; lists match as a whole.
    assert await match({"nested": {"k": 1}}) == ["a"]
    assert await match({"nested": {"k": {"$gte": 1}}}) == ["a", "b"]
    assert await match({"l": [1, 2]}) == ["a"]
    assert await match({"tag": "x", "n": {"$gt": 0}}) == ["a"]
    assert await match({"missing": {"$ne": 1}}) == sorted(docs)

    with pytest.raises(StoreFilterError, match=r"\$in"):
        await store.search(ns, filter={"tag": {"$in": ["x"]}})
    with pytest.raises(StoreFilterError):
        await store.search(ns, filter={"n": {"$gt": [1]}})


async def test_filter_values_are_compared_in_typed_form(store: Facade) -> None:
    when = dt.datetime(2026, 1, 2, 3, 4, tzinfo=dt.timezone.utc)
    ident = uuid.uuid4()
    await store.put(("t",), "a", {"when": when, "id": ident})
    await store.put(("t",), "b", {"when": when + dt.timedelta(days=1), "id": uuid.uuid4()})
    assert keys(await store.search(("t",), filter={"when": when})) == ["a"]
    assert keys(await store.search(("t",), filter={"id": ident})) == ["a"]


async def test_filter_keys_are_parameters_not_sql(store: Facade) -> None:
    await store.put(("t",), "a", {"x'); DROP TABLE colosseum_store_items; --": 1})
    found = await store.search(("t",), filter={"x'); DROP TABLE colosseum_store_items; --": 1})
    assert keys(found) == ["a"]


# ------------------------------------------------------------ namespaces


async def test_list_namespaces(store: Facade) -> None:
    namespaces = [
        ("test", "documents", "public"),
        ("test", "documents", "private"),
        ("test", "images", "public"),
        ("test", "images", "private"),
        ("prod", "documents", "public"),
        ("prod", "documents", "private"),
        ("a-x",),
        ("a", "b"),
    ]
    for ns in namespaces:
        await store.put(ns, "k", {"v": 1})

    # Ordered as tuples (("a", "b") before ("a-x",)), not as dot-joined text.
    assert await store.list_namespaces() == sorted(namespaces)
    assert await store.list_namespaces(prefix=("test",)) == sorted(namespaces[:4])
    assert await store.list_namespaces(suffix=("public",)) == sorted(
        ns for ns in namespaces if ns[-1] == "public"
    )
    assert await store.list_namespaces(prefix=("test", "*", "public")) == [
        ("test", "documents", "public"),
        ("test", "images", "public"),
    ]
    assert await store.list_namespaces(suffix=("*", "private")) == sorted(
        ns for ns in namespaces if ns[-1] == "private"
    )
    assert await store.list_namespaces(prefix=("test",), suffix=("private",)) == [
        ("test", "documents", "private"),
        ("test", "images", "private"),
    ]
    assert await store.list_namespaces(max_depth=2) == [
        ("a", "b"),
        ("a-x",),
        ("prod", "documents"),
        ("test", "documents"),
        ("test", "images"),
    ]
    assert await store.list_namespaces(max_depth=1, prefix=("test",)) == [("test",)]
    everything = sorted(namespaces)
    assert await store.list_namespaces(limit=3) == everything[:3]
    assert await store.list_namespaces(limit=3, offset=3) == everything[3:6]


async def test_list_namespaces_matches_whole_labels(store: Facade) -> None:
    for ns in [
        ("foo",),
        ("foo", "child"),
        ("foobar",),
        ("uid", "users", "alice"),
        ("uid", "users", "malice"),
        ("uid", "a", "b", "alice"),
        ("users", "alice\n"),
    ]:
        await store.put(ns, "k", {"v": 1})
    assert await store.list_namespaces(prefix=("foo",)) == [("foo",), ("foo", "child")]
    assert await store.list_namespaces(suffix=("alice",)) == [
        ("uid", "a", "b", "alice"),
        ("uid", "users", "alice"),
    ]
    assert await store.list_namespaces(prefix=("uid", "*", "alice")) == [("uid", "users", "alice")]
    assert await store.list_namespaces(prefix=("users", "alice")) == []


# ------------------------------------------------------------------- TTL


async def test_expired_items_are_never_returned_even_unswept(store: Facade, store_url: str) -> None:
    ns = ("omit", "expired")
    await store.put(ns, "gone", {"v": 1}, ttl=10)
    await store.put(("omit", "control"), "kept", {"v": 1}, ttl=None)
    expire_now(store_url, ns, "gone")
    assert expires_at(store_url, ns, "gone") is not None  # still in the table

    assert await store.get(ns, "gone") is None
    assert await store.search(ns) == []
    assert (await store.batch([GetOp(ns, "gone", refresh_ttl=False)]))[0] is None
    assert await store.list_namespaces(prefix=("omit",)) == [("omit", "control")]
    # Reading with refresh does not bring it back.
    assert await store.get(ns, "gone", refresh_ttl=True) is None
    assert expires_at(store_url, ns, "gone") < dt.datetime.now(dt.timezone.utc)

    # A new put of an expired item is a new item.
    await store.put(ns, "gone", {"v": 2})
    again = await store.get(ns, "gone")
    assert again.value == {"v": 2}
    assert again.created_at == again.updated_at


async def test_reads_refresh_ttl_unless_told_not_to(store: Facade, store_url: str) -> None:
    ns = ("refresh",)
    for key in ("got", "searched", "untouched"):
        await store.put(ns, key, {"k": key}, ttl=5)
    # Move them close to expiry so a refresh is visible.
    sql(store_url, "UPDATE colosseum_store_items SET expires_at = now() + interval '1 minute'")
    before = {k: expires_at(store_url, ns, k) for k in ("got", "searched", "untouched")}

    await store.get(ns, "untouched", refresh_ttl=False)
    await store.search(ns, filter={"k": "untouched"}, refresh_ttl=False)
    assert expires_at(store_url, ns, "untouched") == before["untouched"]

    await store.get(ns, "got")  # refresh_on_read=True in the config
    assert expires_at(store_url, ns, "got") > before["got"] + dt.timedelta(minutes=3)
    await store.search(ns, filter={"k": "searched"})
    assert expires_at(store_url, ns, "searched") > before["searched"] + dt.timedelta(minutes=3)
    assert expires_at(store_url, ns, "untouched") == before["untouched"]


async def test_ttl_per_item_and_default(store_url: str) -> None:
    empty(store_url)
    config = {"default_ttl": 30, "refresh_on_read": False}
    with ColosseumStore.from_conn_string(store_url, ttl=config) as store:
        store.put(("t",), "default", {"v": 1})
        store.put(("t",), "own", {"v": 1}, ttl=2)
        store.put(("t",), "forever", {"v": 1}, ttl=None)
        now = dt.datetime.now(dt.timezone.utc)
        assert now + dt.timedelta(minutes=29) < expires_at(store_url, ("t",), "default")
        assert expires_at(store_url, ("t",), "own") < now + dt.timedelta(minutes=3)
        assert expires_at(store_url, ("t",), "forever") is None
        # refresh_on_read=False is the default for reads...
        sql(store_url, "UPDATE colosseum_store_items SET expires_at = now() + interval '1 minute'")
        before = expires_at(store_url, ("t",), "default")
        store.get(("t",), "default")
        assert expires_at(store_url, ("t",), "default") == before
        # ... unless a read asks.
        store.get(("t",), "default", refresh_ttl=True)
        assert expires_at(store_url, ("t",), "default") > before


async def test_sweep_deletes_only_expired_items(store: Facade, store_url: str) -> None:
    await store.put(("s",), "old", {"v": 1}, ttl=10)
    await store.put(("s",), "young", {"v": 1}, ttl=10)
    await store.put(("s",), "forever", {"v": 1})
    expire_now(store_url, ("s",), "old")
    assert await store.sweep_ttl() == 1
    assert await store.sweep_ttl() == 0
    remaining = sql(store_url, "SELECT key FROM colosseum_store_items ORDER BY key")
    assert remaining == [("forever",), ("young",)]


def test_ttl_sweeper_thread_sweeps_and_stops(store_url: str) -> None:
    empty(store_url)
    with ColosseumStore.from_conn_string(store_url, ttl={"sweep_interval_minutes": 0.002}) as s:
        s.put(("s",), "old", {"v": 1}, ttl=10)
        expire_now(store_url, ("s",), "old")
        future = s.start_ttl_sweeper()
        deadline = time.monotonic() + 20
        while sql(store_url, "SELECT 1 FROM colosseum_store_items") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sql(store_url, "SELECT 1 FROM colosseum_store_items") == []
        assert s.stop_ttl_sweeper(timeout=10)
        future.result(timeout=10)


async def test_async_ttl_sweeper_task_sweeps_and_stops(store_url: str) -> None:
    empty(store_url)
    async with AsyncColosseumStore.from_conn_string(
        store_url, ttl={"sweep_interval_minutes": 0.002}
    ) as s:
        await s.aput(("s",), "old", {"v": 1}, ttl=10)
        expire_now(store_url, ("s",), "old")
        await s.start_ttl_sweeper()
        deadline = time.monotonic() + 20
        while sql(store_url, "SELECT 1 FROM colosseum_store_items") and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert sql(store_url, "SELECT 1 FROM colosseum_store_items") == []
        assert await s.stop_ttl_sweeper(timeout=10)


# ---------------------------------------------------------------- values


@dataclasses.dataclass
class Position:
    ticker: str
    qty: Decimal


async def test_values_are_typed_jsonb(store: Facade, store_url: str) -> None:
    value = {
        "text": "plain",
        "when": dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.timezone.utc),
        "id": uuid.UUID(int=7),
        "amount": Decimal("1.10"),
        "pair": (1, "a"),
        "tags": {"b", "a"},
        "raw": b"\x00\xff",
        "nul": "a\x00b",
        "big": 2**70,
        "nan": float("inf"),
    }
    await store.put(("v",), "k", value)
    got = (await store.get(("v",), "k")).value
    assert got == value
    assert {k: type(v) for k, v in got.items()} == {k: type(v) for k, v in value.items()}
    # Plain JSON stays queryable with SQL.
    assert sql(store_url, "SELECT value->>'text' FROM colosseum_store_items") == [("plain",)]


async def test_unregistered_class_is_refused_and_nothing_written(store: Facade) -> None:
    await store.put(("v",), "existing", {"v": 1})
    with pytest.raises(StoreValueError, match=r"'bad'.*\('v',\).*\$\.pos.*types="):
        await store.batch(
            [
                PutOp(("v",), "good", {"v": 1}),
                PutOp(("v",), "bad", {"pos": Position("X", Decimal(1))}),
                PutOp(("v",), "existing", None),
            ]
        )
    assert await store.get(("v",), "good") is None
    assert await store.get(("v",), "existing") is not None


def test_registered_class_round_trips(store_url: str) -> None:
    empty(store_url)
    with ColosseumStore.from_conn_string(store_url, types=[Position]) as store:
        store.put(("v",), "p", {"pos": Position("X", Decimal("2.5"))})
        assert store.get(("v",), "p").value == {"pos": Position("X", Decimal("2.5"))}


# ---------------------------------------------------------- drivers & setup


def test_setup_is_concurrent_safe_and_idempotent() -> None:
    with fresh_database(server_url()) as url:
        barrier = threading.Barrier(2)
        errors: list[BaseException] = []

        def setup() -> None:
            try:
                with ColosseumStore.from_conn_string(url) as store:
                    barrier.wait()
                    store.setup()
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=setup) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        with psycopg.connect(url) as conn:  # not autocommit: setup must work here too
            assert ColosseumStore(conn).setup() == 1
            store = ColosseumStore(conn)
            store.put(("x",), "k", {"v": 1})
            assert store.get(("x",), "k").value == {"v": 1}


def test_setup_with_index_without_pgvector_says_how_to_get_it() -> None:
    installed = sql(server_url(), "SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
    if installed:
        pytest.skip("this server has pgvector")
    with fresh_database(server_url()) as url:
        index = {"dims": 8, "embed": HashEmbeddings(8), "fields": ["text"]}
        with ColosseumStore.from_conn_string(url, index=index) as store:
            with pytest.raises(PgvectorUnavailableError, match=r"pgvector.*embedded PostgreSQL 18"):
                store.setup()
        # Nothing half-made: the store still sets up without an index.
        assert sql(url, "SELECT to_regclass('colosseum_store_items')") == [(None,)]
        with ColosseumStore.from_conn_string(url) as store:
            assert store.setup() == 1


async def test_async_store_blocking_calls_from_the_loop_are_refused(store_url: str) -> None:
    empty(store_url)
    async with AsyncColosseumStore.from_conn_string(store_url) as store:
        with pytest.raises(asyncio.InvalidStateError):
            store.put(("foo",), "k", {"v": 1})
        with pytest.raises(asyncio.InvalidStateError):
            store.list_namespaces()
        with ThreadPoolExecutor(max_workers=1) as executor:
            await asyncio.wrap_future(executor.submit(store.put, ("foo",), "k", {"v": 1}))
            got = await asyncio.wrap_future(executor.submit(store.get, ("foo",), "k"))
        assert got.value == {"v": 1}


async def test_many_concurrent_operations(store_url: str) -> None:
    empty(store_url)
    async with AsyncColosseumStore.from_conn_string(store_url, pool_size=4) as store:
        coros = []
        for i in range(200):
            ns = ("test", str(i % 2))
            coros += [
                store.aput(ns, f"k{i}", {"i": i}),
                store.aget(ns, f"k{i}"),
                store.asearch(("test",)),
                store.alist_namespaces(max_depth=1 + i % 3),
            ]
        results = await asyncio.gather(*coros)
        assert len(results) == 800
        assert len(await store.asearch(("test",), limit=1000)) == 200


def test_store_and_saver_share_a_pool_in_one_graph(store_url: str) -> None:
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.store.base import BaseStore

    empty(store_url)

    def remember(state: MessagesState, *, store: BaseStore) -> dict:
        store.put(("users", "cio"), "risk", {"text": state["messages"][-1].content})
        return {}

    builder = StateGraph(MessagesState)
    builder.add_node("remember", remember)
    builder.add_edge(START, "remember")

    with ColosseumStore.from_conn_string(store_url) as store:
        ColosseumSaver.setup(store.saver)
        graph = builder.compile(checkpointer=store.saver, store=store)
        graph.invoke({"messages": [("user", "no leverage")]}, {"configurable": {"thread_id": "1"}})
        assert store.get(("users", "cio"), "risk").value == {"text": "no leverage"}
        assert store.saver.get_tuple({"configurable": {"thread_id": "1"}}) is not None

    with ColosseumSaver.from_conn_string(store_url) as saver:
        shared = ColosseumStore.from_saver(saver)
        assert shared.saver is saver
        assert shared.get(("users", "cio"), "risk").value == {"text": "no leverage"}


async def test_use_before_setup_names_store_setup() -> None:
    with fresh_database(server_url()) as url:
        with ColosseumStore.from_conn_string(url) as store:
            with pytest.raises(StoreSchemaMissingError, match=r"store\.setup\(\)"):
                store.get(("a",), "k")
        async with AsyncColosseumStore.from_conn_string(url) as astore:
            with pytest.raises(StoreSchemaMissingError, match=r"await store\.setup\(\)"):
                await astore.aput(("a",), "k", {"v": 1})


async def test_async_store_on_an_async_savers_pool(store_url: str) -> None:
    from langgraph_colosseum import AsyncColosseumSaver

    empty(store_url)
    async with AsyncColosseumSaver.from_conn_string(store_url, pool_size=2) as saver:
        store = AsyncColosseumStore.from_saver(saver)
        assert store.saver is saver
        await store.aput(("a",), "k", {"v": 1})
        assert (await store.aget(("a",), "k")).value == {"v": 1}
        assert saver.conn.get_stats()["pool_size"] <= 2  # no pool of its own


class CountingStore(AsyncColosseumStore):
    """Records the requests the store sends (a hook on the driver, not a mock)."""

    async def _perform(self, request):  # type: ignore[override]
        self.requests.append(request)
        return await super()._perform(request)


async def test_concurrent_async_calls_share_one_round_trip(store_url: str) -> None:
    empty(store_url)
    async with CountingStore.from_conn_string(store_url, pool_size=2) as store:
        store.requests = []
        await asyncio.gather(*(store.aput(("c",), f"k{i}", {"i": i}) for i in range(50)))
        assert len(store.requests) == 1
        store.requests.clear()
        got = await asyncio.gather(
            store.aget(("c",), "k3"), store.asearch(("c",), limit=100), store.aget(("c",), "nope")
        )
        assert len(store.requests) == 1
        assert got[0].value == {"i": 3} and len(got[1]) == 50 and got[2] is None


async def test_a_bad_value_fails_only_its_own_concurrent_call(store_url: str) -> None:
    empty(store_url)
    async with AsyncColosseumStore.from_conn_string(store_url, pool_size=2) as store:
        outcomes = await asyncio.gather(
            store.aput(("c",), "good1", {"v": 1}),
            store.aput(("c",), "bad", {"pos": Position("X", Decimal(1))}),
            store.aput(("c",), "good2", {"v": 2}),
            return_exceptions=True,
        )
        assert outcomes[0] is None and outcomes[2] is None
        assert isinstance(outcomes[1], StoreValueError)
        assert (await store.aget(("c",), "good1")).value == {"v": 1}
        assert (await store.aget(("c",), "good2")).value == {"v": 2}
        assert await store.aget(("c",), "bad") is None
