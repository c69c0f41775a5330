"""`inline_values=True`: each checkpoint carries the small scalars it changes.

The second of the three releases of inline values (README, "Stored forms
change in two releases"): a checkpoint's document holds the value of each
channel it changes that is a short scalar (a counter, a flag, a route, None),
in the codec's JSON, and the value's row is written as before, so that a
process reading only rows (one without the option, or a release before
2026-12-07's) reads the same state. Reads take those values from the document
and fetch no row for them. What a user relies on: state, history and tuples
stay repr-identical to InMemorySaver's, whichever processes of a fleet write
the thread with or without the option; the rows hold what the documents hold;
and nothing plaintext is kept inline under encryption.
"""

from __future__ import annotations

import asyncio
import math
import operator
import uuid
from collections import Counter
from typing import Annotated, Any

import orjson
import psycopg
import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from langgraph_colosseum import AsyncColosseumSaver, ColosseumSaver, Encryption
from langgraph_colosseum._core import sql as statements
from langgraph_colosseum._core.store import INLINE_TEXT_MAX
from langgraph_colosseum._core.values import Materializer
from tests.conftest import CACHE_MODES, cache_options, flush_cache, migrated_database, truncate
from tests.integration.graphs import delta_graph, linear_graph, normalise_history
from tests.integration.test_inline_values import INLINE, INLINE_ONLY, observed

# Per checkpoint of a thread: the channels its document carries, and how many
# of them differ from the row of the same version (or have none).
DOCUMENTS = """
SELECT c.checkpoint_id,
       coalesce((SELECT array_agg(k ORDER BY k)
                 FROM jsonb_object_keys(c.checkpoint -> 'channel_values') AS k), '{}'),
       (SELECT count(*) FROM jsonb_each(c.checkpoint -> 'channel_values') AS i(channel, value)
        LEFT JOIN colosseum_channel_values v
          ON v.thread_id = c.thread_id AND v.checkpoint_ns = c.checkpoint_ns
         AND v.channel = i.channel
         AND v.version = c.checkpoint -> 'channel_versions' ->> i.channel
        WHERE v.value IS DISTINCT FROM i.value OR v.encoding <> 'json')
FROM colosseum_checkpoints c WHERE c.thread_id = %s ORDER BY c.checkpoint_id
"""


def documents(url: str, thread_id: str) -> list[tuple[str, list[str], int]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(DOCUMENTS, (thread_id,)).fetchall()


def config_of(thread_id: str, **more: Any) -> dict:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": "", **more}}


@pytest.mark.parametrize("fleet", ["inline", "mixed"])
@pytest.mark.parametrize("mode", CACHE_MODES)
def test_a_thread_written_with_inline_values_reads_and_continues_as_the_reference(
    pg_url: str, mode: str, fleet: str
) -> None:
    """With "mixed", the second run is written by a process without the option,
    which must continue the thread as any other (the rows are all there)."""
    truncate(pg_url)
    thread_id = f"inline-w-{uuid.uuid4().hex[:8]}"
    reference = linear_graph(Counter()).compile(checkpointer=InMemorySaver())
    options = cache_options(mode)
    for turn, start in enumerate((1, 1000, 5)):
        inline = fleet == "inline" or turn != 1
        with ColosseumSaver.from_conn_string(pg_url, inline_values=inline, **options) as saver:
            ours = linear_graph(Counter()).compile(checkpointer=saver)
            for graph in (reference, ours):
                graph.invoke({"value": start, "trail": []}, config_of(thread_id))
            assert observed(ours, thread_id) == observed(reference, thread_id)
            assert observed(ours, thread_id) == observed(reference, thread_id)  # the hot head
    stored = documents(pg_url, thread_id)
    carried = [channels for _, channels, _ in stored if channels]
    # The counter ("value") is carried where it changed; the trail, a list, never.
    assert carried and all("trail" not in channels for channels in carried)
    assert sum("value" in channels for channels in carried) >= 6
    # Each value carried is the value its row holds: readers of rows agree.
    assert [differing for _, _, differing in stored] == [0] * len(stored)
    if fleet == "mixed":  # the second run's six checkpoints carry nothing
        assert sum(not channels for _, channels, _ in stored) >= 6


def test_a_delta_channel_thread_keeps_its_history_beside_inline_values(pg_url: str) -> None:
    """A DeltaChannel's value is rebuilt from the writes of earlier
    checkpoints; the int beside it is carried inline."""
    truncate(pg_url)
    thread_id = f"inline-d-{uuid.uuid4().hex[:8]}"
    reference = delta_graph(Counter()).compile(checkpointer=InMemorySaver())
    with ColosseumSaver.from_conn_string(pg_url, inline_values=True) as saver:
        ours = delta_graph(Counter()).compile(checkpointer=saver)
        for turn in range(5):
            for graph in (reference, ours):
                graph.invoke({"messages": [f"hello {turn}"], "turns": turn}, config_of(thread_id))
            assert observed(ours, thread_id) == observed(reference, thread_id)
    carried = [channels for _, channels, _ in documents(pg_url, thread_id) if channels]
    assert any("turns" in channels for channels in carried)
    assert all("messages" not in channels for channels in carried)


SCALARS: dict[str, Any] = {
    "none": None,
    "flag": True,
    "count": -7,
    "ratio": 1.5,
    "big_float": 1e20,  # jsonb would read it back as an int: the codec tags it
    "negative_zero": -0.0,
    "nan": math.nan,
    "label": "x" * INLINE_TEXT_MAX,
    "nul": "a\x00b",
}
NOT_CARRIED: dict[str, Any] = {
    "long_text": "x" * (INLINE_TEXT_MAX + 1),
    "huge": 2**63,  # past int64: the codec would tag it
    "items": [1, 2],
    "mapping": {"a": 1},
    "when": uuid.UUID(int=5),
}


def put_both(
    reference: InMemorySaver,
    saver: ColosseumSaver,
    thread_id: str,
    values: dict[str, Any],
    new: list[str],
    parent: str | None,
) -> str:
    """One direct put of `values` to both savers, the versions of the channels
    `new` bumped (the reference's new versions, given to ours too); its id."""
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = dict(values)
    config = config_of(thread_id)
    versions: dict[str, Any] = {}
    if parent is not None:
        config = config_of(thread_id, checkpoint_id=parent)
        versions = dict(reference.get_tuple(config).checkpoint["channel_versions"])
    new_versions = {ch: reference.get_next_version(versions.get(ch), None) for ch in new}
    checkpoint["channel_versions"] = {**versions, **new_versions}
    for target in (reference, saver):
        target.put(config, checkpoint, {"source": "update", "step": 0}, new_versions)
    return checkpoint["id"]


def test_which_values_a_document_carries(pg_url: str) -> None:
    truncate(pg_url)
    thread_id = f"inline-s-{uuid.uuid4().hex[:8]}"
    reference = InMemorySaver()
    with ColosseumSaver.from_conn_string(pg_url, inline_values=True) as saver:
        values = {**SCALARS, **NOT_CARRIED}
        first = put_both(reference, saver, thread_id, values, list(values), None)
        # The second changes one channel, and passes another value for an
        # unchanged one: its version's value is its row's (as the reference's).
        changed = {**values, "count": 8, "flag": False}
        second = put_both(reference, saver, thread_id, changed, ["count"], first)
        for checkpoint_id in (first, second):
            config = config_of(thread_id, checkpoint_id=checkpoint_id)
            ours, theirs = saver.get_tuple(config), reference.get_tuple(config)
            assert repr(ours.checkpoint) == repr(theirs.checkpoint)
        assert repr([t.checkpoint for t in saver.list(config_of(thread_id))]) == repr(
            [t.checkpoint for t in reference.list(config_of(thread_id))]
        )
        # A put whose new version of a channel is not the one its checkpoint
        # names (a caller's mistake): the value is its row's, under the version
        # it was given, and the checkpoint's version names none (as the
        # reference reads it), so nothing is carried.
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"count": 9}
        checkpoint["channel_versions"] = {"count": "00000000000000000000000000000001.5"}
        new_versions = {"count": "00000000000000000000000000000009.5"}
        for target in (reference, saver):
            target.put(config_of(thread_id), checkpoint, {"step": 1}, new_versions)
        config = config_of(thread_id, checkpoint_id=checkpoint["id"])
        assert repr(saver.get_tuple(config).checkpoint) == repr(
            reference.get_tuple(config).checkpoint
        )
    stored = dict((checkpoint_id, channels) for checkpoint_id, channels, _ in documents(
        pg_url, thread_id
    ))  # fmt: skip
    assert stored[first] == sorted(SCALARS)
    assert stored[second] == ["count"]
    assert stored[checkpoint["id"]] == []


def test_a_read_fetches_no_row_for_a_value_its_document_carries(pg_url: str) -> None:
    """The cost a document's values save: GET_TUPLE's reply names no row of
    theirs (the clause on 'channel_values' in its value chains)."""
    truncate(pg_url)
    thread_id = f"inline-r-{uuid.uuid4().hex[:8]}"
    with ColosseumSaver.from_conn_string(pg_url, inline_values=True) as saver:
        graph = linear_graph(Counter()).compile(checkpointer=saver)
        graph.invoke({"value": 1, "trail": []}, config_of(thread_id))
    params = {"thread_id": thread_id, "checkpoint_ns": "", "known": "{}", "memo": b""}
    with psycopg.connect(pg_url, autocommit=True) as conn:
        ((_, *row),) = conn.execute(statements.GET_TUPLE_LATEST, params).fetchall()
    document = orjson.loads(row[4])
    assert "value" in document["channel_values"]
    channels = [value_row[0] for value_row in orjson.loads(row[7])]
    assert "trail" in channels  # rows are still read for what is not carried
    assert "value" not in channels


def test_a_list_page_fetches_no_row_for_the_values_its_documents_carry(pg_url: str) -> None:
    """The same saving for `list`: the statement for a page's missing values
    (VALUE_CHAINS, store.py `_missing_values`) names no version on behalf of
    a document that carries it. The counter changes at every checkpoint that
    names it, so it is never fetched; the trail, a list, always is."""
    truncate(pg_url)
    thread_id = f"inline-l-{uuid.uuid4().hex[:8]}"
    with ColosseumSaver.from_conn_string(pg_url, inline_values=True) as saver:
        graph = linear_graph(Counter()).compile(checkpointer=saver)
        graph.invoke({"value": 1, "trail": []}, config_of(thread_id))
        store = saver._store
        with psycopg.connect(pg_url, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT thread_id, checkpoint_ns, checkpoint::text FROM colosseum_checkpoints "
                "WHERE thread_id = %s ORDER BY checkpoint_id",
                (thread_id,),
            ).fetchall()
        documents = [store._load_checkpoint_document(text) for _, _, text in rows]
        assert all("value" in document["channel_values"] for document in documents[1:])
        fetch = store._missing_values(Materializer(store.codec), rows, documents)
    assert fetch is not None
    assert "trail" in fetch.params["channels"] and "value" not in fetch.params["channels"]


@pytest.mark.parametrize("sealing", ["encryption", "serde"])
def test_nothing_is_carried_inline_when_values_are_sealed(pg_url: str, sealing: str) -> None:
    truncate(pg_url)
    thread_id = f"inline-e-{uuid.uuid4().hex[:8]}"
    if sealing == "encryption":
        options: dict[str, Any] = {"encryption": Encryption({"k1": bytes(range(32))})}
    else:
        options = {"serde": EncryptedSerializer.from_pycryptodome_aes(key=bytes(range(16)))}
    reference = linear_graph(Counter()).compile(checkpointer=InMemorySaver())
    with ColosseumSaver.from_conn_string(pg_url, inline_values=True, **options) as saver:
        ours = linear_graph(Counter()).compile(checkpointer=saver)
        for graph in (reference, ours):
            graph.invoke({"value": 1, "trail": []}, config_of(thread_id))
        assert observed(ours, thread_id) == observed(reference, thread_id)
    stored = documents(pg_url, thread_id)
    assert len(stored) == 5 and all(not channels for _, channels, _ in stored)


@pytest.mark.parametrize("mode", CACHE_MODES)
def test_the_asyncio_saver_writes_and_reads_them_alike(pg_url: str, mode: str) -> None:
    truncate(pg_url)
    thread_id = f"inline-a-{uuid.uuid4().hex[:8]}"
    reference = linear_graph(Counter()).compile(checkpointer=InMemorySaver())
    reference.invoke({"value": 3, "trail": []}, config_of(thread_id))
    expected = observed(reference, thread_id)

    async def main() -> tuple[str, str]:
        async with AsyncColosseumSaver.from_conn_string(
            pg_url, inline_values=True, **cache_options(mode)
        ) as saver:
            ours = linear_graph(Counter()).compile(checkpointer=saver)
            await ours.ainvoke({"value": 3, "trail": []}, config_of(thread_id))
            config = {"configurable": {"thread_id": thread_id}}
            history = [state async for state in ours.aget_state_history(config)]
            state = normalise_history([await ours.aget_state(config), *history])[0]
            return repr(state), repr(normalise_history(history))

    assert asyncio.run(main()) == expected
    assert any("value" in channels for _, channels, _ in documents(pg_url, thread_id))


@pytest.mark.parametrize("rows", ["kept", "deleted"])
def test_encrypt_plaintext_takes_the_values_out_of_the_documents(rows: str) -> None:
    """A database written with inline_values=True and then encrypted: the
    values' rows are sealed and the documents keep no plaintext copy. With
    the rows "deleted" (values only inline, a form this release reads),
    rekey first makes them rows (found by review: it dropped such values).
    (A database of its own: rekey crosses every thread and Store item.)"""
    thread_id = f"inline-k-{uuid.uuid4().hex[:8]}"
    reference = linear_graph(Counter()).compile(checkpointer=InMemorySaver())
    with migrated_database("colosseum_inline_rekey") as url:
        with ColosseumSaver.from_conn_string(url, inline_values=True) as saver:
            ours = linear_graph(Counter()).compile(checkpointer=saver)
            for graph in (reference, ours):
                graph.invoke({"value": 424242, "trail": []}, config_of(thread_id))
        if rows == "deleted":
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(INLINE, (thread_id,))
                assert conn.execute(INLINE_ONLY, (thread_id,)).rowcount > 0
        assert any(channels for _, channels, _ in documents(url, thread_id))
        encryption = Encryption({"k1": bytes(range(32))})
        with ColosseumSaver.from_conn_string(url, encryption=encryption) as saver:
            assert saver.rekey(encrypt_plaintext=True) > 0
            assert saver.rekey(encrypt_plaintext=True) == 0
            ours = linear_graph(Counter()).compile(checkpointer=saver)
            assert observed(ours, thread_id) == observed(reference, thread_id)
        assert all(not channels for _, channels, _ in documents(url, thread_id))
        with psycopg.connect(url, autocommit=True) as conn:
            text = repr(conn.execute("SELECT c::text FROM colosseum_checkpoints c").fetchall())
            text += repr(conn.execute("SELECT v::text FROM colosseum_channel_values v").fetchall())
        assert "424242" not in text and "424353" not in text


class FlagState(TypedDict):
    flag: str
    items: Annotated[list, operator.add]


def flag_graph(checkpointer: Any) -> Any:
    """A flag set once (carried inline by the checkpoint that sets it, and by
    no later one) beside a list that grows every turn."""

    def node(state: FlagState) -> dict:
        if state["flag"] != "on":
            return {"flag": "on"}
        return {"items": [len(state["items"])]}

    builder = StateGraph(FlagState)
    builder.add_node("node", node)
    builder.add_edge(START, "node")
    builder.add_edge("node", END)
    return builder.compile(checkpointer=checkpointer)


def test_a_refilled_hot_head_keeps_the_rows_of_the_values_documents_carry(pg_url: str) -> None:
    """A head refilled from Postgres, then advanced by a put that leaves the
    flag unchanged: that head's document does not carry the flag, so its
    readers take it from the row the refill brought (found by review: a
    refill without those rows served the state without the flag)."""
    truncate(pg_url)
    thread_id = f"inline-h-{uuid.uuid4().hex[:8]}"
    reference = flag_graph(InMemorySaver())
    with ColosseumSaver.from_conn_string(
        pg_url, inline_values=True, **cache_options("redis")
    ) as saver:
        ours = flag_graph(saver)
        for graph in (reference, ours):
            graph.invoke({"flag": "off", "items": []}, config_of(thread_id))
        flush_cache()  # the head is gone: the next read refills it from Postgres
        assert observed(ours, thread_id) == observed(reference, thread_id)
        for turn in range(2):
            for graph in (reference, ours):
                graph.invoke({"items": [f"x{turn}"]}, config_of(thread_id))
            assert observed(ours, thread_id) == observed(reference, thread_id)
    assert any("flag" in channels for _, channels, _ in documents(pg_url, thread_id))
