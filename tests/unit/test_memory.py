"""The Store's sans-IO core: what a batch asks for, in what order, without a server.

A batch is driven here by hand: each request it yields is answered with canned
rows, as a driver would answer it after a round trip.
"""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.store.base import GetOp, ListNamespacesOp, MatchCondition, PutOp, SearchOp

from langgraph_colosseum._core import memory_sql as sql
from langgraph_colosseum._core.codec import default_registry
from langgraph_colosseum._core.io import Query, Transaction
from langgraph_colosseum._core.memory import (
    ColosseumSearchOp,
    Embed,
    MemoryOps,
    VectorIndex,
    text_hash,
)
from langgraph_colosseum._core.memory_filters import FilterCompiler
from langgraph_colosseum.errors import StoreError


def fake_embed(texts: list[str]) -> list[list[float]]:
    return [[float(len(t)), 1.0, 0.0] for t in texts]


def ops_with(index: dict | None = None) -> MemoryOps:
    return MemoryOps(default_registry(), VectorIndex.from_config(index) if index else None)


def drive(op: Any, answer: Any) -> tuple[list[Any], Any]:
    """Run the operation, answering each request with answer(request); (requests, result)."""
    requests = []
    result = None
    while True:
        try:
            request = op.send(result)
        except StopIteration as stop:
            return requests, stop.value
        requests.append(request)
        result = answer(request)


def no_rows(request: Any) -> Any:
    if isinstance(request, Transaction):
        return [[] if q.fetch else None for q in request.queries]
    if isinstance(request, Embed):
        return fake_embed(list(request.texts))
    if isinstance(request, Query) and request.sql == sql.PGVECTOR:
        return [("0.8.1", True)]
    return []


def test_a_mixed_batch_is_one_transaction_with_reads_before_writes() -> None:
    requests, results = drive(
        ops_with().batch(
            [
                PutOp(("a",), "k", {"v": 1}),
                GetOp(("a",), "k"),
                SearchOp(("a",), filter={"v": 1}),
                ListNamespacesOp(match_conditions=(MatchCondition("prefix", ("a",)),)),
                PutOp(("a",), "gone", None),
            ]
        ),
        no_rows,
    )
    assert len(requests) == 1 and isinstance(requests[0], Transaction)
    statements = [q.sql for q in requests[0].queries]
    # get, search, list_namespaces, then the writes: reads see the store before them.
    assert statements[0] == sql.GET_REFRESHING
    assert "FROM colosseum_store_items i" in statements[1] and "DISTINCT" in statements[2]
    assert statements[3:] == [sql.DELETE, sql.UPSERT]
    assert results == [None, None, [], [], None]


def test_a_lone_get_is_one_query_without_a_transaction() -> None:
    requests, results = drive(ops_with().batch([GetOp(("a",), "k", refresh_ttl=False)]), no_rows)
    assert [type(r) for r in requests] == [Query]
    assert requests[0].sql == sql.GET
    assert results == [None]


def test_puts_embed_only_changed_texts_once_each() -> None:
    index = {"dims": 3, "embed": fake_embed, "fields": ["title", "body"]}
    stored = {("d", "a", "title", text_hash("alpha"))}  # a's title is unchanged

    def answer(request: Any) -> Any:
        if isinstance(request, Query) and request.sql == sql.VECTOR_HASHES:
            return list(stored)
        return no_rows(request)

    requests, _ = drive(
        ops_with(index).batch(
            [
                PutOp(("d",), "a", {"title": "alpha", "body": "same"}),
                PutOp(("d",), "b", {"title": "same", "body": "beta"}),
            ]
        ),
        answer,
    )
    embeds = [r for r in requests if isinstance(r, Embed)]
    assert embeds == [Embed(("same", "beta"), query=False)]
    final = requests[-1]
    upsert = next(q for q in final.queries if q.sql.startswith("\nINSERT INTO colosseum_store_v"))
    assert sorted(zip(upsert.params["keys"], upsert.params["fields"])) == [
        ("a", "body"),
        ("b", "body"),
        ("b", "title"),
    ]


def test_nothing_changed_means_no_embedding_call() -> None:
    index = {"dims": 3, "embed": fake_embed, "fields": ["title"]}

    def answer(request: Any) -> Any:
        if isinstance(request, Query) and request.sql == sql.VECTOR_HASHES:
            return [("d", "a", "title", text_hash("alpha"))]
        return no_rows(request)

    requests, _ = drive(ops_with(index).batch([PutOp(("d",), "a", {"title": "alpha"})]), answer)
    assert not any(isinstance(r, Embed) for r in requests)


def test_search_queries_are_embedded_once_per_distinct_text() -> None:
    index = {"dims": 3, "embed": fake_embed, "fields": ["text"]}
    requests, _ = drive(
        ops_with(index).batch(
            [
                SearchOp(("a",), query="risk"),
                SearchOp(("b",), query="risk"),
                ColosseumSearchOp(("c",), query="fees", mode="text"),  # full text: no vector
                SearchOp(("d",)),
            ]
        ),
        no_rows,
    )
    assert [r for r in requests if isinstance(r, Embed)] == [Embed(("risk",), query=True)]


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"embed": fake_embed}, "dims"),
        ({"dims": 0, "embed": fake_embed}, "between 1 and 16000"),
        ({"dims": 3, "embed": fake_embed, "distance_type": "hamming"}, "distance_type"),
        ({"dims": 3, "embed": fake_embed, "ann_index_config": {"kind": "ivfflat"}}, "kind"),
        ({"dims": 3, "embed": fake_embed, "ann_index_config": {"m": "16; DROP"}}, r"\.m must"),
        ({"dims": 3, "embed": fake_embed, "search_mode": "fuzzy"}, "search_mode"),
    ],
)
def test_index_config_is_validated_before_any_ddl(config: dict, message: str) -> None:
    with pytest.raises(StoreError, match=message):
        VectorIndex.from_config(config)


def test_filter_keys_and_values_are_parameters() -> None:
    compiler = FilterCompiler(default_registry())
    compiler.add({"a'; DROP TABLE x; --": {"$gt": 1}, "b": {"c": "d'e"}})
    text = compiler.sql()
    assert "DROP" not in text and "d'e" not in text
    assert ["a'; DROP TABLE x; --"] in compiler.params.values()
