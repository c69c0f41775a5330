"""ColosseumStore against InMemoryStore, LangGraph's reference: seeded random
sequences of put, delete, get, search with filters and list_namespaces must
give the same answers.

Compared as LangGraph documents them, not as each happens to order ties:
searches without a query compare as sets (InMemoryStore lists in insertion
order, PostgresStore and we most recent first); namespaces compare in order.
Two quirks of InMemoryStore are steered around, not copied: a get of a missing
namespace makes it appear in list_namespaces (its dict is a defaultdict), and
a range filter on a missing key raises TypeError there (float(None)), so range
filters here name a key every value has.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator
from typing import Any

import pytest
from langgraph.store.memory import InMemoryStore
from psycopg import conninfo

from langgraph_colosseum.memory import AsyncColosseumStore, ColosseumStore
from tests.conftest import server_url
from tests.integration.pgbouncer import PgBouncer
from tests.integration.store_support import fresh_database, sql

NAMESPACES = [
    ("users",),
    ("users", "u1"),
    ("users", "u1", "prefs"),
    ("users", "u2"),
    ("users_x",),
    ("docs", "a"),
    ("docs", "a", "b"),
    ("docs", "b"),
]
KEYS = ["k1", "k2", "k3", "k_4", "k.5"]
TAGS = ["x", "y", "z", None]


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with fresh_database(server_url()) as url:
        with ColosseumStore.from_conn_string(url) as store:
            store.setup()
        yield url


def random_value(rng: random.Random) -> dict[str, Any]:
    value: dict[str, Any] = {"n": rng.choice([rng.randint(-5, 15), rng.uniform(-5, 15)])}
    if rng.random() < 0.8:
        value["tag"] = rng.choice(TAGS)
    if rng.random() < 0.5:
        value["meta"] = {"level": rng.randint(0, 3), "owner": rng.choice(["ann", "bob"])}
    if rng.random() < 0.3:
        value["flag"] = rng.random() < 0.5
    if rng.random() < 0.3:
        value["list"] = rng.sample([1, 2, 3], rng.randint(0, 2))
    return value


def random_filter(rng: random.Random) -> dict[str, Any] | None:
    choices = [
        lambda: None,
        lambda: {"tag": rng.choice(TAGS)},
        lambda: {"tag": {"$ne": rng.choice(TAGS)}},
        lambda: {"n": {rng.choice(["$gt", "$gte", "$lt", "$lte"]): rng.randint(-5, 15)}},
        lambda: {"n": {"$gt": rng.randint(-5, 5), "$lte": rng.randint(5, 15)}},
        lambda: {"meta": {"owner": rng.choice(["ann", "bob"])}},
        lambda: {"meta": {"level": {"$gte": rng.randint(0, 3)}}, "tag": rng.choice(TAGS)},
        lambda: {"flag": rng.random() < 0.5},
        lambda: {"list": rng.sample([1, 2, 3], rng.randint(0, 2))},
        lambda: {"n": {"$eq": rng.randint(-5, 15)}},
    ]
    return rng.choice(choices)()


def random_path(rng: random.Random) -> tuple[str, ...]:
    ns = rng.choice(NAMESPACES)
    path = list(ns[: rng.randint(1, len(ns))])
    if rng.random() < 0.3:
        path[rng.randrange(len(path))] = "*"
    return tuple(path)


def item_view(items: list) -> list[tuple]:
    return sorted((i.namespace, i.key, repr(sorted(i.value.items()))) for i in items)


def prune_empty_namespaces(memory: InMemoryStore) -> None:
    for ns in [ns for ns, items in memory._data.items() if not items]:
        del memory._data[ns]


async def replay(seed: int, store: Any, is_async: bool) -> None:
    rng = random.Random(seed)
    memory = InMemoryStore()

    async def call(name: str, *args: Any, **kwargs: Any) -> Any:
        if is_async:
            return await getattr(store, f"a{name}")(*args, **kwargs)
        return getattr(store, name)(*args, **kwargs)

    for step in range(60):
        where = f"seed {seed}, step {step}"
        roll = rng.random()
        if roll < 0.4:
            ns, key, value = rng.choice(NAMESPACES), rng.choice(KEYS), random_value(rng)
            memory.put(ns, key, value)
            await call("put", ns, key, value)
        elif roll < 0.5:
            ns, key = rng.choice(NAMESPACES), rng.choice(KEYS)
            memory.delete(ns, key)
            await call("delete", ns, key)
        elif roll < 0.65:
            ns, key = rng.choice(NAMESPACES), rng.choice(KEYS)
            want, got = memory.get(ns, key), await call("get", ns, key)
            assert (got and got.value) == (want and want.value), where
        elif roll < 0.9:
            prefix = rng.choice([(), *NAMESPACES])[: rng.randint(0, 3)]
            filter = random_filter(rng)
            want = memory.search(prefix, filter=filter, limit=1000)
            got = await call("search", prefix, filter=filter, limit=1000)
            assert item_view(got) == item_view(want), f"{where}: {prefix} {filter}"
        else:
            prune_empty_namespaces(memory)
            options: dict[str, Any] = {
                "limit": rng.choice([2, 5, 100]),
                "offset": rng.choice([0, 0, 1, 3]),
            }
            if rng.random() < 0.5:
                options["prefix"] = random_path(rng)
            if rng.random() < 0.3:
                options["suffix"] = random_path(rng)[-1:]
            if rng.random() < 0.4:
                options["max_depth"] = rng.randint(1, 3)
            want = memory.list_namespaces(**options)
            got = await call("list_namespaces", **options)
            assert got == want, f"{where}: {options}"


@pytest.mark.parametrize("seed", range(25))
def test_blocking_store_agrees_with_inmemory(url: str, seed: int) -> None:
    sql(url, "TRUNCATE colosseum_store_items CASCADE")
    with ColosseumStore.from_conn_string(url, pool_size=2) as store:
        asyncio.run(replay(seed, store, is_async=False))


@pytest.mark.parametrize("seed", range(100, 110))
async def test_async_store_agrees_with_inmemory(url: str, seed: int) -> None:
    sql(url, "TRUNCATE colosseum_store_items CASCADE")
    async with AsyncColosseumStore.from_conn_string(url, pool_size=2) as store:
        await replay(seed, store, is_async=True)


@pytest.mark.parametrize("seed", range(200, 203))
@pytest.mark.parametrize("driver", ["sync", "async"])
async def test_store_through_pgbouncer_agrees_with_inmemory(
    url: str, driver: str, seed: int, pgbouncer: PgBouncer
) -> None:
    """PgBouncer in transaction mode (`pgbouncer=True`): the Store keeps no session state."""
    sql(url, "TRUNCATE colosseum_store_items CASCADE")
    bounced = pgbouncer.url(str(conninfo.conninfo_to_dict(url)["dbname"]))
    if driver == "sync":
        with ColosseumStore.from_conn_string(bounced, pool_size=2, pgbouncer=True) as store:
            await replay(seed, store, is_async=False)
    else:
        async with AsyncColosseumStore.from_conn_string(
            bounced, pool_size=2, pgbouncer=True
        ) as store:
            await replay(seed, store, is_async=True)
