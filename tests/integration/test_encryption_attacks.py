"""Attacks on encryption at rest beyond single-row tampering (issue 19, item 4):
what a sealed row's associated data binds, and what it does not.

Each test alters stored rows directly (SQL on Postgres, raw commands on Redis)
and reads through a saver, as an attacker with write access to one store
would see the result.
"""

from __future__ import annotations

from collections import Counter

import psycopg
import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.base import empty_checkpoint

from tests.conftest import CACHE_MODES, truncate
from tests.integration.graphs import chat_graph
from tests.integration.test_encryption import _chat, _refused, keys, open_saver

both_modes = pytest.mark.parametrize("mode", CACHE_MODES)


@pytest.fixture(autouse=True)
def _empty(pg_url: str) -> None:
    truncate(pg_url)


@both_modes
def test_task_path_of_a_pending_write_is_bound(pg_url: str, mode: str) -> None:
    """task_path orders pending writes (LangGraph's writes_sort_key), so it
    decides in which order a step's writes are applied: exchanging two tasks'
    paths in Postgres must not reorder the writes a reader is handed."""
    with open_saver(pg_url, mode, keys()) as saver:
        config = {"configurable": {"thread_id": "enc-path", "checkpoint_ns": ""}}
        stored = saver.put(config, empty_checkpoint(), {}, {})
        saver.put_writes(stored, [("messages", "first")], "task-a", "~a")
        saver.put_writes(stored, [("messages", "second")], "task-b", "~b")
        pending = saver.get_tuple(stored).pending_writes
        assert [value for _, _, value in pending] == ["first", "second"]
    with psycopg.connect(pg_url) as conn:
        swapped = conn.execute(
            "UPDATE colosseum_writes SET task_path = CASE task_id WHEN 'task-a' THEN '~b' "
            "ELSE '~a' END WHERE thread_id = 'enc-path'"
        )
        assert swapped.rowcount == 2
    _refused(pg_url, mode, "enc-path", keys(), "'messages'", "tag")


@both_modes
def test_threads_messages_opens_sealed_writes(pg_url: str, mode: str) -> None:
    """threads.messages reads each step's writes (sealed, bound to their task
    path as get_tuple's are) and lists the same messages as without encryption."""
    listed = []
    for encryption in (keys(), None):
        truncate(pg_url)
        with open_saver(pg_url, mode, encryption) as saver:
            _chat(saver, "enc-messages", "hello")
            listed.append(
                [(m.node, m.message.content) for m in saver.threads.messages("enc-messages")]
            )
    assert listed[0] == listed[1]
    assert ("__start__", "hello") in listed[0] and len(listed[0]) > 2, listed[0]


@both_modes
@pytest.mark.parametrize("edit", ["older version", "channel dropped"])
def test_altered_checkpoint_document_is_refused(pg_url: str, mode: str, edit: str) -> None:
    """The checkpoint document is plaintext (SQL joins on it) but bound to the
    sealed metadata: a checkpoint pointed at an older (genuine) version of a
    channel, or a channel dropped from it, does not read as another state."""
    config = {"configurable": {"thread_id": "enc-doc"}}
    with open_saver(pg_url, mode, keys()) as saver:
        graph = chat_graph(Counter()).compile(checkpointer=saver)
        graph.invoke({"messages": [HumanMessage(content="one", id="h1")]}, config)
        first = saver.get_tuple(config)
        graph.invoke({"messages": [HumanMessage(content="two", id="h2")]}, config)
        latest = saver.get_tuple(config).checkpoint["id"]
    change = {
        "older version": (
            "checkpoint = jsonb_set(checkpoint, '{channel_versions,messages}', to_jsonb(%(v)s::text))"
        ),
        # and from the recorded channel order, which would refuse it otherwise
        "channel dropped": (
            "checkpoint = jsonb_set(checkpoint #- '{channel_versions,messages}', "
            "'{$channel_order}', (checkpoint -> '$channel_order') - 'messages')"
        ),
    }[edit]
    with psycopg.connect(pg_url) as conn:
        conn.execute(
            f"UPDATE colosseum_checkpoints SET {change} "
            "WHERE thread_id = 'enc-doc' AND checkpoint_id = %(id)s",
            {
                "v": first.checkpoint["channel_versions"]["messages"],
                "id": latest,
            },
        )
    _refused(pg_url, mode, "enc-doc", keys(), "tag")
