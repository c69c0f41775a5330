"""Encryption at rest (`encryption=`): real graphs round-trip, nothing readable is
stored, and every altered row is refused (issue 19, item 4).

Each test runs on Postgres alone and with the Redis hot head in front of it.
Tampering is done on Postgres with SQL, then this session's Redis keys are
dropped so the read must go to the altered rows.
"""

from __future__ import annotations

import os
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator

import psycopg
import pytest
import redis
from langchain_core.messages import HumanMessage

from langgraph_colosseum import AsyncColosseumSaver, ColosseumSaver, CorruptRowError, Encryption
from tests.conftest import (
    CACHE_MODES,
    CACHE_PREFIX,
    cache_options,
    flush_cache,
    redis_url,
    truncate,
)
from tests.integration.graphs import chat_graph, delta_graph, fanout_graph, run_sync
from tests.integration.test_differential import (
    approval_graph,
    approval_scenario,
    chat_scenario,
    delta_scenario,
    differential_async,
    differential_sync,
    fanout_scenario,
)

KEY_1 = os.urandom(32)
KEY_2 = os.urandom(32)
TABLES = (
    "colosseum_checkpoints",
    "colosseum_channel_values",
    "colosseum_writes",
    "colosseum_delta_histories",
    "colosseum_threads",
)


def keys(**options) -> Encryption:
    return Encryption({"k1": KEY_1}, **options)


@pytest.fixture(params=CACHE_MODES)
def mode(request: pytest.FixtureRequest, pg_url: str) -> str:
    truncate(pg_url)
    return request.param


def open_saver(pg_url: str, mode: str, encryption: Encryption | None):
    return ColosseumSaver.from_conn_string(
        pg_url, pool_size=2, encryption=encryption, **cache_options(mode)
    )


@pytest.fixture
def saver(pg_url: str, mode: str) -> Iterator[ColosseumSaver]:
    with open_saver(pg_url, mode, keys()) as s:
        yield s


@pytest.fixture
async def asaver(pg_url: str, mode: str) -> AsyncIterator[AsyncColosseumSaver]:
    async with AsyncColosseumSaver.from_conn_string(
        pg_url, pool_size=2, encryption=keys(), **cache_options(mode)
    ) as s:
        yield s


# ------------------------------------------------------------ round trips


def test_chat_sync(saver: ColosseumSaver) -> None:
    differential_sync(chat_scenario, chat_graph, saver, "enc-chat-sync")


async def test_chat_async(asaver: AsyncColosseumSaver) -> None:
    await differential_async(chat_scenario, chat_graph, asaver, "enc-chat-async")


def test_interrupt_resume_sync(saver: ColosseumSaver) -> None:
    differential_sync(approval_scenario, approval_graph, saver, "enc-approval-sync")


async def test_send_fanout_async(asaver: AsyncColosseumSaver) -> None:
    await differential_async(fanout_scenario, fanout_graph, asaver, "enc-fanout-async")


def test_delta_channel_and_prune_sync(saver: ColosseumSaver) -> None:
    """DeltaChannel histories (writes, frozen histories after prune) are sealed too."""
    _, subject = differential_sync(delta_scenario, delta_graph, saver, "enc-delta")
    config = subject.config
    before = run_sync(subject.drv.get_state(config))
    run_sync(subject.drv.prune([subject.thread_id]))
    flush_cache()
    after = run_sync(subject.drv.get_state(config))
    assert after.values == before.values
    assert repr(after.values) == repr(before.values)


# ------------------------------------------------------------ nothing readable stored


def _database_text(pg_url: str) -> str:
    with psycopg.connect(pg_url) as conn:
        return "\n".join(
            str(row[0])
            for table in TABLES
            for row in conn.execute(f"SELECT t::text FROM {table} t").fetchall()
        )


def _redis_bytes() -> bytes:
    client = redis.Redis.from_url(redis_url())
    out = []
    try:
        for key in client.scan_iter(match=f"{CACHE_PREFIX}*", count=1000):
            kind = client.type(key)
            if kind == b"hash":
                for field, value in client.hgetall(key).items():
                    out += [field, value]
            elif kind == b"string":
                out.append(client.get(key) or b"")
            elif kind == b"list":
                out += client.lrange(key, 0, -1)
            elif kind == b"zset":
                out += client.zrange(key, 0, -1)
            elif kind == b"set":
                out += list(client.smembers(key))
            else:
                raise AssertionError(f"unexpected Redis type {kind!r} of {key!r}")
    finally:
        client.close()
    return b"\n".join(out)


def _chat(saver: ColosseumSaver, thread_id: str, text: str) -> dict:
    graph = chat_graph(Counter()).compile(checkpointer=saver)
    config = {"configurable": {"thread_id": thread_id}}
    graph.invoke({"messages": [HumanMessage(content=text, id="h1")]}, config)
    return graph.invoke({"messages": [HumanMessage(content=text + " again", id="h2")]}, config)


def test_nothing_readable_in_postgres_or_redis(pg_url: str, mode: str) -> None:
    secret = f"SECRET-{uuid.uuid4().hex}"
    with open_saver(pg_url, mode, keys()) as saver:
        result = _chat(saver, "enc-secret", secret)
        assert secret in repr(result["messages"])  # the graph saw it
        state = saver.threads.get("enc-secret")
        assert state is not None
        # get_state through the hot head, when there is one.
        graph = chat_graph(Counter()).compile(checkpointer=saver)
        snapshot = graph.get_state({"configurable": {"thread_id": "enc-secret"}})
        assert repr(snapshot.values) == repr(result)
    text = _database_text(pg_url)
    assert "enc-secret" in text  # the scan reads the rows: thread ids stay plaintext
    assert secret not in text
    assert secret.encode() not in _redis_bytes()
    if mode == "redis":
        assert _redis_bytes(), "the hot head should have been written"
    # The control: without encryption= the same text is stored readable.
    truncate(pg_url)
    with open_saver(pg_url, mode, None) as saver:
        _chat(saver, "plain-secret", secret)
    assert secret in _database_text(pg_url)


def test_registry_seals_its_copy_of_encrypted_channels(pg_url: str, mode: str) -> None:
    """threads.search(values=...) finds plaintext-listed channels and refuses a
    filter on an encrypted one; colosseum_threads.state_values holds that
    channel sealed, and ThreadInfo.values has it back."""
    from langgraph.graph import StateGraph
    from typing_extensions import TypedDict

    from langgraph_colosseum import EncryptedFieldError

    class State(TypedDict):
        status: str
        note: str

    builder = StateGraph(State)
    builder.add_node("step", lambda s: {"status": "done", "note": "private-note-xyz"})
    builder.set_entry_point("step")
    with open_saver(pg_url, mode, keys(plaintext_channels=["status"])) as saver:
        graph = builder.compile(checkpointer=saver)
        graph.invoke({"status": "new", "note": "x"}, {"configurable": {"thread_id": "enc-reg"}})
        found = saver.threads.search(values={"status": "done"})
        assert [t.thread_id for t in found] == ["enc-reg"]
        assert found[0].values == {"status": "done", "note": "private-note-xyz"}
        with pytest.raises(EncryptedFieldError, match="'note'"):
            saver.threads.search(values={"note": "private-note-xyz"})
    with psycopg.connect(pg_url) as conn:
        ((values,),) = conn.execute(
            "SELECT state_values FROM colosseum_threads WHERE thread_id = 'enc-reg'"
        ).fetchall()
        assert values["status"] == "done" and values["note"]["$t"] == "aes256gcm"
        # The plaintext channel stays queryable jsonb.
        rows = conn.execute(
            "SELECT value FROM colosseum_channel_values WHERE channel = 'status'"
        ).fetchall()
        assert {"done", "new"} <= {r[0] for r in rows}
    assert "private-note-xyz" not in _database_text(pg_url)


# ------------------------------------------------------------ fail closed


def _write_thread(pg_url: str, mode: str, thread_id: str, encryption: Encryption) -> None:
    with open_saver(pg_url, mode, encryption) as saver:
        _chat(saver, thread_id, "tamper me")


def _read(pg_url: str, mode: str, thread_id: str, encryption: Encryption):
    flush_cache()  # the altered rows, not a head written before the change
    with open_saver(pg_url, mode, encryption) as saver:
        return saver.get_tuple({"configurable": {"thread_id": thread_id}})


def _refused(pg_url: str, mode: str, thread_id: str, encryption: Encryption, *words: str) -> str:
    with pytest.raises(CorruptRowError) as caught:
        _read(pg_url, mode, thread_id, encryption)
    message = str(caught.value)
    assert thread_id in message
    for word in words:
        assert word in message, message
    return message


def _latest_messages_row(conn: psycopg.Connection, thread_id: str) -> tuple[str, str]:
    """(version, encoding) of the messages row the latest checkpoint names."""
    ((version,),) = conn.execute(
        "SELECT checkpoint -> 'channel_versions' ->> 'messages' FROM colosseum_checkpoints "
        "WHERE thread_id = %s ORDER BY checkpoint_id DESC LIMIT 1",
        (thread_id,),
    ).fetchall()
    ((encoding,),) = conn.execute(
        "SELECT encoding FROM colosseum_channel_values WHERE thread_id = %s "
        "AND channel = 'messages' AND version = %s",
        (thread_id, version),
    ).fetchall()
    return version, encoding


def test_flipped_byte_is_refused(pg_url: str, mode: str) -> None:
    _write_thread(pg_url, mode, "enc-flip", keys())
    assert _read(pg_url, mode, "enc-flip", keys()) is not None  # intact: reads
    with psycopg.connect(pg_url) as conn:
        version, _ = _latest_messages_row(conn, "enc-flip")
        conn.execute(
            "UPDATE colosseum_channel_values "
            "SET value_bytes = set_byte(value_bytes, 20, get_byte(value_bytes, 20) # 1) WHERE thread_id = 'enc-flip' AND channel = 'messages' AND version = %s",
            (version,),
        )
    _refused(pg_url, mode, "enc-flip", keys(), "'messages'", "tag")


def test_swapped_rows_are_refused(pg_url: str, mode: str) -> None:
    """Two valid ciphertexts of one channel, exchanged: each is bound to its version."""
    _write_thread(pg_url, mode, "enc-swap", keys())
    with psycopg.connect(pg_url) as conn:
        version, encoding = _latest_messages_row(conn, "enc-swap")
        ((other,),) = conn.execute(
            "SELECT version FROM colosseum_channel_values WHERE thread_id = 'enc-swap' "
            "AND channel = 'messages' AND version <> %s AND encoding = %s LIMIT 1",
            (version, encoding),
        ).fetchall()
        conn.execute(
            "UPDATE colosseum_channel_values a SET value_bytes = b.value_bytes "
            "FROM colosseum_channel_values b WHERE a.thread_id = 'enc-swap' "
            "AND b.thread_id = 'enc-swap' AND a.channel = 'messages' AND b.channel = 'messages' "
            "AND ((a.version = %s AND b.version = %s) OR (a.version = %s AND b.version = %s))",
            (version, other, other, version),
        )
    _refused(pg_url, mode, "enc-swap", keys(), "'messages'", "tag")


def test_row_moved_from_another_thread_is_refused(pg_url: str, mode: str) -> None:
    _write_thread(pg_url, mode, "enc-a", keys())
    _write_thread(pg_url, mode, "enc-b", keys())
    with psycopg.connect(pg_url) as conn:
        version_a, _ = _latest_messages_row(conn, "enc-a")
        version_b, _ = _latest_messages_row(conn, "enc-b")
        moved = conn.execute(
            "UPDATE colosseum_channel_values b SET value_bytes = a.value_bytes, "
            "value_type = a.value_type, encoding = a.encoding, base_version = a.base_version "
            "FROM colosseum_channel_values a WHERE a.thread_id = 'enc-a' AND b.thread_id = 'enc-b' "
            "AND a.channel = 'messages' AND b.channel = 'messages' "
            "AND a.version = %s AND b.version = %s",
            (version_a, version_b),
        )
        assert moved.rowcount == 1
    _refused(pg_url, mode, "enc-b", keys(), "'messages'", "tag")


def test_removed_key_is_refused(pg_url: str, mode: str) -> None:
    _write_thread(pg_url, mode, "enc-nokey", keys())
    _refused(pg_url, mode, "enc-nokey", Encryption({"k2": KEY_2}), "'k1'", "not configured")
    # Without any key, a sealed row is refused too, never passed on as bytes.
    _refused(pg_url, mode, "enc-nokey", None, "no encryption= keys")


def test_plaintext_value_row_is_refused(pg_url: str, mode: str) -> None:
    _write_thread(pg_url, mode, "enc-plain", keys())
    with psycopg.connect(pg_url) as conn:
        version, _ = _latest_messages_row(conn, "enc-plain")
        conn.execute(
            "UPDATE colosseum_channel_values SET encoding = 'json', value = '[]'::jsonb, "
            "value_bytes = NULL, value_type = NULL, base_version = NULL, depth = 0 "
            "WHERE thread_id = 'enc-plain' AND channel = 'messages' AND version = %s",
            (version,),
        )
    _refused(pg_url, mode, "enc-plain", keys(), "'messages'", "plaintext")


def test_plaintext_pending_write_is_refused(pg_url: str, mode: str) -> None:
    with open_saver(pg_url, mode, keys()) as saver:
        config = {"configurable": {"thread_id": "enc-w", "checkpoint_ns": ""}}
        from langgraph.checkpoint.base import empty_checkpoint

        stored = saver.put(config, empty_checkpoint(), {}, {})
        saver.put_writes(stored, [("messages", ["hello"])], "task-1")
        assert saver.get_tuple(stored).pending_writes == [("task-1", "messages", ["hello"])]
    with psycopg.connect(pg_url) as conn:
        conn.execute(
            "UPDATE colosseum_writes SET value = '[\"forged\"]'::jsonb, value_bytes = NULL, "
            "value_type = NULL WHERE thread_id = 'enc-w'"
        )
    _refused(pg_url, mode, "enc-w", keys(), "'messages'", "plaintext")


def test_swapped_pending_writes_are_refused(pg_url: str, mode: str) -> None:
    with open_saver(pg_url, mode, keys()) as saver:
        config = {"configurable": {"thread_id": "enc-ws", "checkpoint_ns": ""}}
        from langgraph.checkpoint.base import empty_checkpoint

        stored = saver.put(config, empty_checkpoint(), {}, {})
        saver.put_writes(stored, [("a", "one"), ("a", "two")], "task-1")
    with psycopg.connect(pg_url) as conn:
        conn.execute(
            "UPDATE colosseum_writes w SET value_bytes = o.value_bytes FROM colosseum_writes o "
            "WHERE w.thread_id = 'enc-ws' AND o.thread_id = 'enc-ws' AND w.idx <> o.idx"
        )
    _refused(pg_url, mode, "enc-ws", keys(), "'a'", "tag")


# ------------------------------------------------------------ keys


def test_two_keys_live(pg_url: str, mode: str) -> None:
    """Old rows open with the old key while new rows use the current one."""
    _write_thread(pg_url, mode, "enc-rot", keys())
    both = Encryption({"k2": KEY_2, "k1": KEY_1})
    assert both.current == "k2"
    with open_saver(pg_url, mode, both) as saver:
        graph = chat_graph(Counter()).compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "enc-rot"}}
        before = graph.get_state(config).values
        result = graph.invoke({"messages": [HumanMessage(content="rotated", id="h9")]}, config)
        assert result["messages"][: len(before["messages"])] == before["messages"]
        history = list(graph.get_state_history(config))
    with psycopg.connect(pg_url) as conn:
        kinds = {
            r[0]
            for r in conn.execute(
                "SELECT value_type FROM colosseum_channel_values WHERE thread_id = 'enc-rot'"
            ).fetchall()
        }
    assert kinds == {"aes256gcm:k1", "aes256gcm:k2"}
    flush_cache()
    with open_saver(pg_url, mode, both) as saver:
        graph = chat_graph(Counter()).compile(checkpointer=saver)
        again = list(graph.get_state_history({"configurable": {"thread_id": "enc-rot"}}))
        assert repr([s.values for s in again]) == repr([s.values for s in history])
    # The old key alone cannot read what the new one sealed.
    _refused(pg_url, mode, "enc-rot", keys(), "'k2'", "not configured")


def test_bad_keys_are_refused() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        Encryption({"k": b"short"})
    with pytest.raises(ValueError, match="current key"):
        Encryption({"k": KEY_1}, current="other")
    assert "KEY" not in repr(Encryption({"k": KEY_1})) and repr(KEY_1) not in repr(
        Encryption({"k": KEY_1})
    )


# ------------------------------------------------------------ rekey


def _key_ids(pg_url: str) -> set[str]:
    with psycopg.connect(pg_url) as conn:
        return {
            r[0]
            for table in ("colosseum_channel_values", "colosseum_writes")
            for r in conn.execute(f"SELECT DISTINCT value_type FROM {table}").fetchall()
        }


def test_rekey_moves_every_row_to_the_current_key(pg_url: str, mode: str) -> None:
    _write_thread(pg_url, mode, "enc-rekey", keys())
    with open_saver(pg_url, mode, keys()) as saver:
        graph = chat_graph(Counter()).compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "enc-rekey"}}
        history = repr([s.values for s in graph.get_state_history(config)])
    assert _key_ids(pg_url) == {"aes256gcm:k1"}
    both = Encryption({"k2": KEY_2, "k1": KEY_1})
    with open_saver(pg_url, mode, both) as saver:
        assert saver.rekey(batch_size=3) > 0  # several batches
        assert saver.rekey() == 0  # idempotent: nothing left
    assert _key_ids(pg_url) == {"aes256gcm:k2"}
    flush_cache()
    # The old key can now be retired: the new one alone reads everything.
    with open_saver(pg_url, mode, Encryption({"k2": KEY_2})) as saver:
        graph = chat_graph(Counter()).compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "enc-rekey"}}
        assert repr([s.values for s in graph.get_state_history(config)]) == history


async def test_rekey_async_refuses_an_altered_row(pg_url: str, mode: str) -> None:
    _write_thread(pg_url, mode, "enc-rekey-bad", keys())
    with psycopg.connect(pg_url) as conn:
        conn.execute(
            "UPDATE colosseum_writes "
            "SET value_bytes = set_byte(value_bytes, 20, get_byte(value_bytes, 20) # 1) "
            "WHERE thread_id = 'enc-rekey-bad'"
        )
    both = Encryption({"k2": KEY_2, "k1": KEY_1})
    async with AsyncColosseumSaver.from_conn_string(
        pg_url, pool_size=2, encryption=both, **cache_options(mode)
    ) as saver:
        with pytest.raises(CorruptRowError, match="enc-rekey-bad"):
            await saver.arekey()
    # Nothing it could not authenticate was sealed under the new key.
    with psycopg.connect(pg_url) as conn:
        assert conn.execute(
            "SELECT count(*) FROM colosseum_writes WHERE value_type = 'aes256gcm:k2'"
        ).fetchone() == (0,)


def test_rekey_command(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import base64

    from typer.testing import CliRunner

    from langgraph_colosseum.cli import app

    truncate(pg_url)
    _write_thread(pg_url, "postgres", "enc-cli", keys())
    monkeypatch.setenv("COLOSSEUM_DATABASE_URL", pg_url)
    for name in ("COLOSSEUM_REDIS_URL", "REDIS_URL"):
        monkeypatch.delenv(name, raising=False)
    runner = CliRunner()
    assert runner.invoke(app, ["rekey"]).exit_code == 1  # no keys: says how to give them
    spec = ",".join(
        f"{k}:{base64.b64encode(v).decode()}" for k, v in (("k2", KEY_2), ("k1", KEY_1))
    )
    monkeypatch.setenv("COLOSSEUM_ENCRYPTION_KEYS", spec)
    first = runner.invoke(app, ["rekey", "--batch-size", "2"])
    assert first.exit_code == 0, first.output
    assert "with key 'k2'" in first.output and " 0 rows" not in first.output
    again = runner.invoke(app, ["rekey"])
    assert again.exit_code == 0 and "re-encrypted 0 rows" in again.output
    assert _key_ids(pg_url) == {"aes256gcm:k2"}
    assert base64.b64encode(KEY_2).decode() not in first.output + again.output
    shown = runner.invoke(app, ["show", "enc-cli"])  # other commands read with the keys
    assert shown.exit_code == 0 and "tamper me" in shown.output, shown.output
    monkeypatch.setenv("COLOSSEUM_ENCRYPTION_KEYS", "k2:not base64!")
    bad = runner.invoke(app, ["rekey"])
    assert bad.exit_code == 2 and "not base64" in bad.output


def test_export_writes_plaintext_and_import_seals_it_again(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    """README: with the keys, `colosseum export` writes the thread decrypted and
    `colosseum import` seals it again: the copy reads back as the original, and
    nothing of it is stored readable."""
    import base64

    from typer.testing import CliRunner

    from langgraph_colosseum.cli import app

    truncate(pg_url)
    secret = f"SECRET-{uuid.uuid4().hex}"
    with open_saver(pg_url, "postgres", keys()) as saver:
        _chat(saver, "enc-exp", secret)
    monkeypatch.setenv("COLOSSEUM_DATABASE_URL", pg_url)
    for name in ("COLOSSEUM_REDIS_URL", "REDIS_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COLOSSEUM_ENCRYPTION_KEYS", f"k1:{base64.b64encode(KEY_1).decode()}")
    runner, exported = CliRunner(), tmp_path / "thread.jsonl"
    result = runner.invoke(app, ["export", "enc-exp", "-o", str(exported)])
    assert result.exit_code == 0, result.output
    assert secret in exported.read_text()  # decrypted, as the README warns
    result = runner.invoke(app, ["import", str(exported), "--thread", "enc-imp"])
    assert result.exit_code == 0, result.output
    assert secret not in _database_text(pg_url)

    def history(saver: ColosseumSaver, thread_id: str) -> list[str]:
        return [
            repr((t.checkpoint["channel_values"], t.metadata, t.pending_writes))
            for t in saver.list({"configurable": {"thread_id": thread_id}})
        ]

    with open_saver(pg_url, "postgres", keys()) as saver:
        original = history(saver, "enc-exp")
        assert secret in "".join(original)
        assert history(saver, "enc-imp") == original
