"""Values inline in a checkpoint's document: read by this release, written by none yet.

A later release is to keep a checkpoint's small values (a counter, a flag,
None) inside its document, under "channel_values", as PostgresSaver keeps
them in its row: a long thread of tiny steps then reads and writes no value
row for them (issue 14). A form is written only once every process reads it
("Stored forms change in two releases", README): this release reads it, and
nothing writes it yet. So the form is made here by SQL, from the value rows of
a thread our saver wrote, and read back by a saver that never read the thread:
with the rows kept (a release writing both) and with them deleted (one writing
the document alone). What a user relies on: state, history and tuples are
repr-identical to InMemorySaver's, on Postgres and through the Redis head, and
the graph goes on from there alike. A malformed inline form is a corrupt row
naming the checkpoint; with encryption= it is plaintext, and refused.
"""

from __future__ import annotations

import os
import uuid
from collections import Counter
from typing import Any

import psycopg
import pytest
from langgraph.checkpoint.memory import InMemorySaver

from langgraph_colosseum import ColosseumSaver, CorruptRowError, Encryption
from tests.conftest import CACHE_MODES, cache_options, flush_cache, truncate
from tests.integration.graphs import linear_graph, normalise_history

# Each checkpoint's values of JSON scalars, copied into its document.
INLINE = """
UPDATE colosseum_checkpoints c
SET checkpoint = c.checkpoint || jsonb_build_object('channel_values', coalesce((
    SELECT jsonb_object_agg(v.channel, v.value)
    FROM jsonb_each_text(c.checkpoint -> 'channel_versions') AS ver(channel, version)
    JOIN colosseum_channel_values v
      ON v.thread_id = c.thread_id AND v.checkpoint_ns = c.checkpoint_ns
     AND v.channel = ver.channel AND v.version = ver.version
    WHERE v.encoding = 'json'
      AND jsonb_typeof(v.value) IN ('number', 'string', 'boolean', 'null')), '{}'::jsonb))
WHERE c.thread_id = %s
"""
# ... and their rows gone, as a release writing them inline only would leave it.
INLINE_ONLY = """
DELETE FROM colosseum_channel_values v
WHERE v.thread_id = %s AND v.encoding = 'json'
  AND jsonb_typeof(v.value) IN ('number', 'string', 'boolean', 'null')
"""


def sql(url: str, statement: str, *params: Any) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(statement, params).rowcount


def run(graph: Any, thread_id: str, start: int) -> None:
    graph.invoke({"value": start, "trail": []}, {"configurable": {"thread_id": thread_id}})


def observed(graph: Any, thread_id: str) -> tuple[str, str]:
    """repr of the thread's state and of its whole history, ids by position."""
    config = {"configurable": {"thread_id": thread_id}}
    history = list(graph.get_state_history(config))
    state = normalise_history([graph.get_state(config), *history])[0]
    return repr(state), repr(normalise_history(history))


@pytest.mark.parametrize("rows", ["kept", "deleted"])
@pytest.mark.parametrize("mode", CACHE_MODES)
def test_a_thread_stored_with_inline_values_reads_and_continues_as_the_reference(
    pg_url: str, mode: str, rows: str
) -> None:
    truncate(pg_url)
    thread_id = f"inline-{uuid.uuid4().hex[:8]}"
    reference = linear_graph(Counter()).compile(checkpointer=InMemorySaver())
    with ColosseumSaver.from_conn_string(pg_url, **cache_options(mode)) as writer:
        ours = linear_graph(Counter()).compile(checkpointer=writer)
        for start in (1, 1000):
            run(reference, thread_id, start)
            run(ours, thread_id, start)
    assert sql(pg_url, INLINE, thread_id) > 0
    inlined = sql(
        pg_url,
        "SELECT 1 FROM colosseum_checkpoints WHERE thread_id = %s "
        "AND checkpoint -> 'channel_values' ? 'value'",
        thread_id,
    )
    assert inlined > 0  # the form read below is really the inline one
    if rows == "deleted":
        assert sql(pg_url, INLINE_ONLY, thread_id) > 0
    flush_cache()  # a head in Redis would hold the document as it was
    expected = observed(reference, thread_id)
    with ColosseumSaver.from_conn_string(pg_url, **cache_options(mode)) as reader:
        ours = linear_graph(Counter()).compile(checkpointer=reader)
        assert observed(ours, thread_id) == expected
        assert observed(ours, thread_id) == expected  # again: through the Redis head, if any
        config = {"configurable": {"thread_id": thread_id}}
        assert repr(reader.get_tuple(config).checkpoint["channel_values"]) == repr(
            reference.checkpointer.get_tuple(config).checkpoint["channel_values"]
        )
        if rows == "deleted":
            # Not continued: this release's writer names unchanged versions
            # without their values, and those would now be nowhere. Hence the
            # order of the releases (README): the rows go only after a release
            # that writes every small value inline.
            return
        run(reference, thread_id, 5)
        run(ours, thread_id, 5)
        assert observed(ours, thread_id) == observed(reference, thread_id)


def forge(url: str, thread_id: str, inline: str) -> str:
    """The head's document given `inline` (JSON text) as its channel_values; its id."""
    with psycopg.connect(url, autocommit=True) as conn:
        (checkpoint_id,) = conn.execute(
            "UPDATE colosseum_checkpoints SET checkpoint = jsonb_set(checkpoint, "
            "'{channel_values}', %s::jsonb) WHERE thread_id = %s AND checkpoint_id = "
            "(SELECT max(checkpoint_id) FROM colosseum_checkpoints WHERE thread_id = %s) "
            "RETURNING checkpoint_id",
            (inline, thread_id, thread_id),
        ).fetchone()
    flush_cache()
    return checkpoint_id


def refused(saver: ColosseumSaver, thread_id: str, checkpoint_id: str) -> list[CorruptRowError]:
    """The errors of get_tuple and list on a thread whose head is corrupt."""
    config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    errors = []
    for read in (lambda: saver.get_tuple(config), lambda: list(saver.list(config))):
        with pytest.raises(CorruptRowError) as caught:
            read()
        assert caught.value.thread_id == thread_id
        assert caught.value.checkpoint_id == checkpoint_id
        errors.append(caught.value)
    return errors


@pytest.mark.parametrize(
    "inline, says",
    [
        ("[1, 2]", "channel_values is not an object"),
        ('{"nowhere": 1}', "'nowhere'"),
        ('{"value": {"$t": "no-such-tag"}}', "no-such-tag"),
    ],
)
@pytest.mark.parametrize("mode", CACHE_MODES)
def test_a_malformed_inline_form_is_a_corrupt_row_naming_the_checkpoint(
    pg_url: str, mode: str, inline: str, says: str
) -> None:
    truncate(pg_url)
    thread_id = f"inline-bad-{uuid.uuid4().hex[:8]}"
    with ColosseumSaver.from_conn_string(pg_url, **cache_options(mode)) as saver:
        run(linear_graph(Counter()).compile(checkpointer=saver), thread_id, 1)
    checkpoint_id = forge(pg_url, thread_id, inline)
    with ColosseumSaver.from_conn_string(pg_url, **cache_options(mode)) as saver:
        for error in refused(saver, thread_id, checkpoint_id):
            assert says in str(error)


@pytest.mark.parametrize("mode", CACHE_MODES)
def test_with_encryption_an_inline_value_is_plaintext_and_refused(pg_url: str, mode: str) -> None:
    truncate(pg_url)
    thread_id = f"inline-sealed-{uuid.uuid4().hex[:8]}"
    encryption = Encryption({"k1": os.urandom(32)})
    options = {**cache_options(mode), "encryption": encryption}
    with ColosseumSaver.from_conn_string(pg_url, **options) as saver:
        run(linear_graph(Counter()).compile(checkpointer=saver), thread_id, 1)
    checkpoint_id = forge(pg_url, thread_id, '{"value": 666}')
    with ColosseumSaver.from_conn_string(pg_url, **options) as saver:
        for error in refused(saver, thread_id, checkpoint_id):
            assert error.channel == "value"
            assert "plaintext" in str(error)
