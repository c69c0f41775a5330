"""Semantic and hybrid search of the Store, on the embedded PostgreSQL 18 (pgvector).

The embedded server runs in a private data directory for this session (see
store_support.private_embedded_postgres); embeddings are feature hashes
(HashEmbeddings), so scores are exact functions of the texts.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Iterator

import pytest
from langgraph.store.base import PutOp, SearchOp

from langgraph_colosseum.errors import StoreError
from langgraph_colosseum.memory import AsyncColosseumStore, ColosseumStore
from tests.integration.store_support import (
    Facade,
    HashEmbeddings,
    fresh_database,
    private_embedded_postgres,
    sql,
)

DIMS = 64


@pytest.fixture(scope="session")
def pg18() -> Iterator[str]:
    with private_embedded_postgres() as admin_url:
        yield admin_url


@pytest.fixture(scope="session")
def vector_url(pg18: str) -> Iterator[str]:
    with fresh_database(pg18) as url:
        with ColosseumStore.from_conn_string(url, index=index_config(HashEmbeddings(DIMS))) as s:
            s.setup()
        yield url


@pytest.fixture(scope="session")
def halfvec_url(pg18: str) -> Iterator[str]:
    """A database of its own: the embedding column's type is fixed when it is made."""
    with fresh_database(pg18) as url:
        yield url


def empty(url: str) -> None:
    sql(url, "TRUNCATE colosseum_store_items CASCADE")


def empty_if_made(url: str) -> None:
    if sql(url, "SELECT to_regclass('colosseum_store_items')") != [(None,)]:
        empty(url)


def index_config(embeddings: HashEmbeddings, **extra) -> dict:
    return {"dims": DIMS, "embed": embeddings, "fields": ["text"], **extra}


@pytest.fixture(
    params=[
        ("sync", "cosine", "vector"),
        ("async", "cosine", "vector"),
        ("sync", "inner_product", "vector"),
        ("async", "l2", "halfvec"),
    ],
    ids=lambda p: "-".join(p),
)
async def vstore(
    vector_url: str, halfvec_url: str, request: pytest.FixtureRequest
) -> AsyncIterator[Facade]:
    driver, distance, vector_type = request.param
    url = halfvec_url if vector_type == "halfvec" else vector_url
    empty_if_made(url)
    async for facade in _open(url, driver, distance, vector_type):
        yield facade


async def _open(url: str, driver: str, distance: str, vector_type: str) -> AsyncIterator[Facade]:
    embeddings = HashEmbeddings(DIMS)
    config = index_config(
        embeddings, distance_type=distance, ann_index_config={"vector_type": vector_type}
    )
    if driver == "sync":
        with ColosseumStore.from_conn_string(url, index=config) as store:
            store.setup()
            facade = Facade(store, is_async=False)
            facade.embeddings = embeddings  # type: ignore[attr-defined]
            facade.distance = distance  # type: ignore[attr-defined]
            yield facade
    else:
        async with AsyncColosseumStore.from_conn_string(url, index=config) as store:
            await store.setup()
            facade = Facade(store, is_async=True)
            facade.embeddings = embeddings  # type: ignore[attr-defined]
            facade.distance = distance  # type: ignore[attr-defined]
            yield facade


def expected_score(distance: str, a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b))
    if distance == "cosine":
        return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))
    if distance == "inner_product":
        return dot
    return -math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b)))


def keys(items: list) -> list[str]:
    return [item.key for item in items]


async def test_similar_texts_rank_first_with_exact_scores(vstore: Facade) -> None:
    docs = {
        "doc1": "zany zebra Xerxes",
        "doc2": "something about dogs",
        "doc3": "text about birds",
    }
    for key, text in docs.items():
        await vstore.put(("test",), key, {"text": text})
    results = await vstore.search(("test",), query="Zany Xerxes")
    assert keys(results)[0] == "doc1"
    assert [r.score for r in results] == sorted((r.score for r in results), reverse=True)
    emb = vstore.embeddings  # type: ignore[attr-defined]
    for r in results:
        want = expected_score(
            vstore.distance,  # type: ignore[attr-defined]
            emb.vector("Zany Xerxes"),
            emb.vector(docs[r.key]),
        )
        assert r.score == pytest.approx(want, abs=2e-3)


async def test_update_re_embeds_and_index_false_is_not_found(vstore: Facade) -> None:
    await vstore.put(("test",), "doc1", {"text": "zany zebra Xerxes"})
    await vstore.put(("test",), "doc2", {"text": "something about dogs"})
    before = (await vstore.search(("test",), query="Zany Xerxes"))[0]
    assert before.key == "doc1"

    await vstore.put(("test",), "doc1", {"text": "new text about dogs"})
    after = {r.key: r.score for r in await vstore.search(("test",), query="Zany Xerxes")}
    assert after["doc1"] < before.score

    await vstore.put(("test",), "doc4", {"text": "new text about dogs"}, index=False)
    found = await vstore.search(("test",), query="new text about dogs", limit=10)
    assert "doc4" not in keys(found)
    # Re-put with index=False drops the item's vectors: its old text no longer finds it.
    await vstore.put(("test",), "doc1", {"text": "new text about dogs"}, index=False)
    assert "doc1" not in keys(await vstore.search(("test",), query="new text", limit=10))
    # Plain listing still has every item, unscored.
    listed = await vstore.search(("test",), limit=10)
    assert sorted(keys(listed)) == ["doc1", "doc2", "doc4"]
    assert all(r.score is None for r in listed)


async def test_filters_run_inside_the_vector_query(vstore: Facade) -> None:
    docs = [
        ("doc1", {"text": "red apple", "color": "red", "score": 4.5}),
        ("doc2", {"text": "red car", "color": "red", "score": 3.0}),
        ("doc3", {"text": "green apple", "color": "green", "score": 4.0}),
        ("doc4", {"text": "blue car", "color": "blue", "score": 3.5}),
    ]
    for key, value in docs:
        await vstore.put(("test",), key, value)
    red_apple = await vstore.search(("test",), query="apple", filter={"color": "red"})
    assert keys(red_apple) == ["doc1", "doc2"]
    red_car = await vstore.search(("test",), query="car", filter={"color": "red"})
    assert keys(red_car)[0] == "doc2" and len(red_car) == 2
    over = await vstore.search(("test",), query="blue", filter={"score": {"$gt": 3.2}})
    assert sorted(keys(over)) == ["doc1", "doc3", "doc4"] and keys(over)[0] == "doc4"
    both = await vstore.search(
        ("test",), query="apple", filter={"score": {"$gte": 4.0}, "color": "green"}
    )
    assert keys(both) == ["doc3"]
    # limit counts matching items, not candidates the filter then drops.
    assert len(await vstore.search(("test",), query="car", filter={"color": "red"}, limit=1)) == 1


async def test_pages_do_not_repeat(vstore: Facade) -> None:
    for i in range(7):
        await vstore.put(("test",), f"doc{i}", {"text": f"test document number {i}"})
    seen = []
    for offset in range(0, 8, 2):
        page = await vstore.search(("test",), query="test document", limit=2, offset=offset)
        seen += keys(page)
    assert sorted(seen) == [f"doc{i}" for i in range(7)]
    assert len(await vstore.search(("test",), query="test", limit=10)) == 7
    for query in ["", None, "test " * 100, "test!@#$%^&*()", "这是中文"]:
        assert len(await vstore.search(("test",), query=query, limit=10)) == 7


async def test_fields_each_get_a_vector_and_the_best_field_scores(vector_url: str) -> None:
    empty_if_made(vector_url)
    emb = HashEmbeddings(DIMS)
    config = {"dims": DIMS, "embed": emb, "fields": ["key0", "key1", "key3"]}
    with ColosseumStore.from_conn_string(vector_url, index=config) as store:
        store.put(("test",), "doc1", {"key1": "xxx", "key2": "yyy", "key3": "zzz"})
        store.put(("test",), "doc2", {"key0": "uuu", "key1": "vvv", "key2": "www", "key3": "xxx"})
        vectors = sql(
            vector_url,
            "SELECT key, field_name FROM colosseum_store_vectors ORDER BY key, field_name",
        )
        assert vectors == [
            ("doc1", "key1"),
            ("doc1", "key3"),
            ("doc2", "key0"),
            ("doc2", "key1"),
            ("doc2", "key3"),
        ]
        xxx = store.search(("test",), query="xxx")
        assert len(xxx) == 2 and xxx[0].score == pytest.approx(xxx[1].score, abs=1e-3)
        assert keys(store.search(("test",), query="uuu"))[0] == "doc2"
        assert keys(store.search(("test",), query="zzz"))[0] == "doc1"
        # A put's own index= overrides the configured fields.
        store.put(("test",), "doc3", {"key0": "aaa", "key2": "ccc"}, index=["key2"])
        assert keys(store.search(("test",), query="ccc"))[0] == "doc3"
        assert "doc3" not in keys(store.search(("test",), query="aaa", limit=1))


async def test_only_changed_fields_are_embedded_in_one_call(vector_url: str) -> None:
    empty_if_made(vector_url)
    emb = HashEmbeddings(DIMS)
    config = {"dims": DIMS, "embed": emb, "fields": ["title", "body"]}
    with ColosseumStore.from_conn_string(vector_url, index=config) as store:
        store.batch(
            [
                PutOp(("d",), "a", {"title": "alpha", "body": "first body"}),
                PutOp(("d",), "b", {"title": "beta", "body": "first body"}),
            ]
        )
        # One embed_documents call for the batch, each distinct text once.
        assert emb.calls == [("documents", ["alpha", "first body", "beta"])]
        emb.calls.clear()

        store.put(("d",), "a", {"title": "alpha", "body": "first body", "extra": 1})
        assert emb.calls == []  # no indexed text changed: nothing embedded
        store.put(("d",), "a", {"title": "alpha", "body": "second body"})
        assert emb.documents_embedded() == ["second body"]
        assert keys(store.search(("d",), query="second body"))[0] == "a"
        # A field that disappears loses its vector.
        store.put(("d",), "a", {"title": "alpha"})
        assert sql(
            vector_url, "SELECT field_name FROM colosseum_store_vectors WHERE key = 'a'"
        ) == [("title",)]


async def test_a_vector_changed_behind_our_back_is_dropped_not_kept(vector_url: str) -> None:
    """A put keeps a field's vector only if its stored digest is the text's."""
    empty_if_made(vector_url)
    emb = HashEmbeddings(DIMS)
    with ColosseumStore.from_conn_string(vector_url, index=index_config(emb)) as store:
        store.put(("d",), "a", {"text": "alpha"})
        # Another writer's vector for other text lands between our read and write:
        # simulated by corrupting the digest; our next put must not keep it.
        sql(vector_url, "UPDATE colosseum_store_vectors SET text_hash = 'other'")
        store.put(("d",), "a", {"text": "alpha"})
        rows = sql(vector_url, "SELECT text_hash FROM colosseum_store_vectors")
        assert rows and rows[0][0] != "other"


async def test_hybrid_fuses_vector_and_full_text_rankings(vector_url: str) -> None:
    empty_if_made(vector_url)
    emb = HashEmbeddings(DIMS)
    with ColosseumStore.from_conn_string(vector_url, index=index_config(emb)) as store:
        store.put(("kb",), "exact", {"text": "The CIO forbids leverage in every portfolio"})
        store.put(("kb",), "fuzzy", {"text": "a note on leverage"})
        store.put(("kb",), "other", {"text": "quarterly dividend calendar"})

        text = store.search(("kb",), query="leverage portfolio", mode="text")
        assert keys(text)[0] == "exact"
        assert "other" not in keys(text)  # full text returns only matches
        hybrid = store.search(("kb",), query="leverage portfolio", mode="hybrid")
        assert keys(hybrid)[0] == "exact"
        assert set(keys(hybrid)) == {"exact", "fuzzy", "other"}
        # Reciprocal rank fusion: 1/(60 + rank) from each ranking that has the item.
        assert hybrid[0].score == pytest.approx(2 / 61, abs=1e-9)
        vector = store.search(("kb",), query="leverage portfolio", mode="vector")
        assert all(-1.01 <= r.score <= 1.01 for r in vector)

    # The store's default mode is configurable.
    with ColosseumStore.from_conn_string(
        vector_url, index=index_config(emb, search_mode="hybrid")
    ) as store:
        assert store.search(("kb",), query="leverage portfolio")[0].score == pytest.approx(2 / 61)
        assert store.batch([SearchOp(("kb",), query="dividend")])[0][0].key == "other"


async def test_hnsw_index_and_filtered_search_through_it(vector_url: str) -> None:
    empty_if_made(vector_url)
    emb = HashEmbeddings(DIMS)
    config = index_config(emb, ann_index_config={"ef_search": 10})
    with ColosseumStore.from_conn_string(vector_url, index=config) as store:
        store.setup()
        ops = [
            PutOp(("bulk",), f"n{i}", {"text": f"note {i} on topic {i % 7}", "g": i % 50})
            for i in range(600)
        ]
        store.batch(ops)
        indexes = sql(
            vector_url,
            "SELECT indexdef FROM pg_indexes WHERE tablename = 'colosseum_store_vectors'",
        )
        assert any("USING hnsw (embedding vector_cosine_ops)" in i for (i,) in indexes)
        # Force the planner onto the HNSW index (a range filter: the GIN index on
        # value cannot serve it): a filter keeping 2% of the rows must still fill
        # the page (pgvector's iterative index scan). Without it: [] (checked).
        sql(vector_url, "ANALYZE colosseum_store_items; ANALYZE colosseum_store_vectors")
        db = sql(vector_url, "SELECT current_database()")[0][0]
        sql(vector_url, f'ALTER DATABASE "{db}" SET enable_seqscan = off')
        try:
            with ColosseumStore.from_conn_string(vector_url, index=config) as forced:
                found = forced.search(
                    ("bulk",),
                    query="note on topic 3",
                    filter={"g": {"$gte": 7, "$lte": 7}},
                    limit=12,
                )
        finally:
            sql(vector_url, f'ALTER DATABASE "{db}" RESET enable_seqscan')
        assert sorted(keys(found)) == sorted(f"n{i}" for i in range(7, 600, 50))


async def test_non_ascii_texts(vstore: Facade) -> None:
    texts = ["这是中文", "これは日本語です", "이건 한국어야", "Это русский", "यह रूसी है"]
    for i, text in enumerate(texts):
        await vstore.put(("user_123", "memories"), str(i), {"text": text})
    for i, text in enumerate(texts):
        assert keys(await vstore.search(("user_123", "memories"), query=text))[0] == str(i)


async def test_wrong_dimensions_are_refused(vector_url: str) -> None:
    empty_if_made(vector_url)
    with ColosseumStore.from_conn_string(
        vector_url, index={"dims": DIMS * 2, "embed": HashEmbeddings(DIMS * 2), "fields": ["t"]}
    ) as store:
        with pytest.raises(StoreError, match=r"vector\(64\).*vector\(128\)"):
            store.setup()
    with ColosseumStore.from_conn_string(
        vector_url, index={"dims": DIMS, "embed": HashEmbeddings(DIMS + 1), "fields": ["t"]}
    ) as store:
        with pytest.raises(StoreError, match="65 dimensions"):
            store.put(("d",), "a", {"t": "x"})
        assert store.get(("d",), "a") is None


async def test_async_embeddings_are_awaited(vector_url: str) -> None:
    empty_if_made(vector_url)
    calls: list[str] = []
    emb = HashEmbeddings(DIMS)

    async def aembed(texts: list[str]) -> list[list[float]]:
        calls.extend(texts)
        await asyncio.sleep(0)
        return [emb.vector(t) for t in texts]

    config = {"dims": DIMS, "embed": aembed, "fields": ["text"]}
    async with AsyncColosseumStore.from_conn_string(vector_url, index=config) as store:
        await store.aput(("a",), "k", {"text": "hello world"})
        assert keys(await store.asearch(("a",), query="hello")) == ["k"]
    assert calls == ["hello world", "hello"]


async def test_ranked_searches_skip_expired_items_and_refresh_what_they_return(
    vector_url: str,
) -> None:
    empty_if_made(vector_url)
    emb = HashEmbeddings(DIMS)
    with ColosseumStore.from_conn_string(vector_url, index=index_config(emb)) as store:
        store.put(("t",), "gone", {"text": "broker session token"}, ttl=10)
        store.put(("t",), "live", {"text": "broker session cache"}, ttl=10)
        sql(
            vector_url,
            "UPDATE colosseum_store_items SET expires_at = now() - interval '1 minute' "
            "WHERE key = 'gone'",
        )
        sql(
            vector_url,
            "UPDATE colosseum_store_items SET expires_at = now() + interval '1 minute' "
            "WHERE key = 'live'",
        )
        for mode in ("vector", "hybrid", "text"):
            found = store.search(("t",), query="broker session token", mode=mode, refresh_ttl=False)
            assert keys(found) == ["live"], mode
        (live_before,) = sql(
            vector_url, "SELECT expires_at FROM colosseum_store_items WHERE key = 'live'"
        )[0]
        store.search(("t",), query="broker session token", mode="hybrid")
        (live_after,) = sql(
            vector_url, "SELECT expires_at FROM colosseum_store_items WHERE key = 'live'"
        )[0]
        assert live_after > live_before


async def test_whole_value_index_embeds_typed_values(vector_url: str) -> None:
    """Without `fields`, the whole value is the text, datetimes and UUIDs included."""
    import datetime as dt
    import uuid

    empty_if_made(vector_url)
    emb = HashEmbeddings(DIMS)
    with ColosseumStore.from_conn_string(vector_url, index={"dims": DIMS, "embed": emb}) as store:
        when = dt.datetime(2026, 5, 1, tzinfo=dt.timezone.utc)
        store.put(("t",), "a", {"note": "rebalance quarterly", "at": when, "id": uuid.UUID(int=1)})
        store.put(("t",), "b", {"note": "dividend calendar"})
        assert keys(store.search(("t",), query="2026-05-01 00:00:00+00:00"))[0] == "a"
        assert store.get(("t",), "a").value["at"] == when
