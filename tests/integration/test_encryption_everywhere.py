"""Encryption of metadata: checkpoint metadata and the thread registry's copies
(issue 19, item 4 "everything else is ciphertext"), searchable keys, and
filters on sealed keys refused. Tampering is done with SQL on Postgres, then
this session's Redis keys are dropped so the read goes to the altered rows.
"""

from __future__ import annotations

import uuid
from collections import Counter

import psycopg
import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.base import empty_checkpoint

from langgraph_colosseum import ColosseumSaver, CorruptRowError, EncryptedFieldError, Encryption
from tests.conftest import CACHE_MODES, cache_options, flush_cache, truncate
from tests.integration.graphs import chat_graph
from tests.integration.test_encryption import (
    KEY_1,
    KEY_2,
    _database_text,
    _redis_bytes,
    _refused,
    keys,
    open_saver,
)

SECRET = f"SECRET-{uuid.uuid4().hex}"

pytestmark = pytest.mark.parametrize("mode", CACHE_MODES)


@pytest.fixture(autouse=True)
def _empty(pg_url: str) -> None:
    truncate(pg_url)


def searchable():
    return keys(searchable_metadata=["user_id"], plaintext_channels=["status"])


def _chat_with_metadata(saver: ColosseumSaver, thread_id: str) -> dict:
    graph = chat_graph(Counter()).compile(checkpointer=saver)
    config = {
        "configurable": {"thread_id": thread_id},
        "metadata": {"user_id": f"user-of-{thread_id}", "note": SECRET},
    }
    graph.invoke({"messages": [HumanMessage(content="hi", id="h1")]}, config)
    return graph.invoke({"messages": [HumanMessage(content="again", id="h2")]}, config)


def test_metadata_sealed_searchable_keys_work_and_sealed_keys_refuse(
    pg_url: str, mode: str
) -> None:
    with open_saver(pg_url, mode, searchable()) as saver:
        _chat_with_metadata(saver, "meta-a")
        _chat_with_metadata(saver, "meta-b")
        # Read back whole: the sealed keys are data again.
        found = list(saver.list(None, filter={"user_id": "user-of-meta-a"}))
        assert found and {t.config["configurable"]["thread_id"] for t in found} == {"meta-a"}
        assert all(t.metadata["note"] == SECRET for t in found)
        latest = saver.get_tuple({"configurable": {"thread_id": "meta-a"}})
        assert latest is not None and latest.metadata["note"] == SECRET
        # LangGraph's own keys stay plaintext (SQL reads them): filters work.
        steps = list(saver.list({"configurable": {"thread_id": "meta-a"}}, filter={"step": 1}))
        assert [t.metadata["step"] for t in steps] == [1]
        with pytest.raises(EncryptedFieldError, match="'note'.*searchable_metadata"):
            list(saver.list(None, filter={"note": SECRET}))
        # The registry: searchable keys and plaintext channels found, sealed ones refused.
        assert [
            t.thread_id for t in saver.threads.search(metadata={"user_id": "user-of-meta-b"})
        ] == ["meta-b"]
        with pytest.raises(EncryptedFieldError, match="'note'"):
            saver.threads.search(metadata={"note": SECRET})
        with pytest.raises(EncryptedFieldError, match="'messages'.*plaintext_channels"):
            saver.threads.search(values={"messages": []})
        info = saver.threads.get("meta-a")
        assert info is not None and info.metadata["note"] == SECRET
        saver.threads.update("meta-a", metadata={"note": "updated " + SECRET, "user_id": "u2"})
        info = saver.threads.get("meta-a")
        assert info.metadata["note"] == "updated " + SECRET and info.metadata["user_id"] == "u2"
    text = _database_text(pg_url)
    assert "user-of-meta-a" in text  # searchable: plaintext by choice
    assert SECRET not in text and "again" not in text
    assert SECRET.encode() not in _redis_bytes()


def _two_checkpoints(conn: psycopg.Connection, thread_id: str) -> list[str]:
    return [
        r[0]
        for r in conn.execute(
            "SELECT checkpoint_id FROM colosseum_checkpoints WHERE thread_id = %s "
            "ORDER BY checkpoint_id DESC LIMIT 2",
            (thread_id,),
        ).fetchall()
    ]


TAMPERINGS = {
    # A byte of the sealed metadata changed.
    "flip": (
        "UPDATE colosseum_checkpoints SET metadata = jsonb_set(metadata, '{$sealed,v}', "
        "to_jsonb(translate(metadata #>> '{$sealed,v}', 'ABCabc', 'BCAbca'))) "
        "WHERE thread_id = %(t)s AND checkpoint_id = %(latest)s",
        "tag",
    ),
    # Two checkpoints' metadata exchanged: each is bound to its checkpoint.
    "swap": (
        "UPDATE colosseum_checkpoints a SET metadata = b.metadata FROM colosseum_checkpoints b "
        "WHERE a.thread_id = %(t)s AND b.thread_id = %(t)s AND "
        "((a.checkpoint_id = %(latest)s AND b.checkpoint_id = %(older)s) OR "
        " (a.checkpoint_id = %(older)s AND b.checkpoint_id = %(latest)s))",
        "tag",
    ),
    # A plaintext row written where a sealed one belongs.
    "plaintext": (
        'UPDATE colosseum_checkpoints SET metadata = \'{"step": 1, "note": "forged"}\' '
        "WHERE thread_id = %(t)s AND checkpoint_id = %(latest)s",
        "plaintext",
    ),
    # A searchable key changed beside its sealed copy.
    "searchable": (
        "UPDATE colosseum_checkpoints SET metadata = jsonb_set(metadata, '{user_id}', '\"other\"') "
        "WHERE thread_id = %(t)s AND checkpoint_id = %(latest)s",
        "differs",
    ),
}


@pytest.mark.parametrize("tampering", list(TAMPERINGS))
def test_altered_checkpoint_metadata_is_refused(pg_url: str, mode: str, tampering: str) -> None:
    statement, word = TAMPERINGS[tampering]
    thread_id = f"meta-{tampering}"
    with open_saver(pg_url, mode, searchable()) as saver:
        _chat_with_metadata(saver, thread_id)
    with psycopg.connect(pg_url) as conn:
        latest, older = _two_checkpoints(conn, thread_id)
        changed = conn.execute(statement, {"t": thread_id, "latest": latest, "older": older})
        assert changed.rowcount >= 1
    message = _refused(pg_url, mode, thread_id, searchable(), word)
    assert latest in message  # the row is named


def test_metadata_without_the_key_is_refused(pg_url: str, mode: str) -> None:
    with open_saver(pg_url, mode, searchable()) as saver:
        _chat_with_metadata(saver, "meta-nokey")
    with psycopg.connect(pg_url) as conn:
        # Only the metadata is sealed here: no value row, no pending write.
        conn.execute("DELETE FROM colosseum_writes WHERE thread_id = 'meta-nokey'")
        conn.execute(
            "UPDATE colosseum_checkpoints SET checkpoint = jsonb_set(checkpoint - '$channel_order', "
            "'{channel_versions}', '{}') WHERE thread_id = 'meta-nokey'"
        )
    _refused(pg_url, mode, "meta-nokey", None, "no encryption= keys")
    _refused(pg_url, mode, "meta-nokey", Encryption({"k2": KEY_2}), "'k1'", "not configured")


def test_altered_registry_rows_are_refused(pg_url: str, mode: str) -> None:
    with open_saver(pg_url, mode, searchable()) as saver:
        _chat_with_metadata(saver, "reg-a")
        _chat_with_metadata(saver, "reg-b")
    with psycopg.connect(pg_url) as conn:
        # reg-a: its sealed note swapped for reg-b's; reg-b: a plaintext note.
        conn.execute(
            "UPDATE colosseum_threads a SET metadata = jsonb_set(a.metadata, '{note}', "
            "b.metadata -> 'note') FROM colosseum_threads b "
            "WHERE a.thread_id = 'reg-a' AND b.thread_id = 'reg-b'"
        )
        conn.execute(
            "UPDATE colosseum_threads SET state_values = jsonb_set(state_values, "
            "'{messages}', '[]') WHERE thread_id = 'reg-b'"
        )
    flush_cache()
    with open_saver(pg_url, mode, searchable()) as saver:
        with pytest.raises(CorruptRowError, match="reg-a.*'note'.*tag"):
            saver.threads.get("reg-a")
        with pytest.raises(CorruptRowError, match="reg-b.*'messages'.*plaintext"):
            saver.threads.get("reg-b")
        # A listing leaves them out (counted), never shows them as data.
        assert saver.threads.search(metadata={"user_id": "user-of-reg-a"}) == []
        assert saver.threads.skipped_rows >= 1


# ------------------------------------------------------------ turning encryption on


def test_encrypt_plaintext_migrates_an_existing_database(pg_url: str, mode: str) -> None:
    """A database written without encryption=: reads with keys refuse its rows
    (fail closed stays the default) until rekey(encrypt_plaintext=True) seals
    them, in batches, once (a second run finds nothing). Then a new key: rekey
    moves every sealed thing (values, metadata, registry, ledger) to it, and
    the old key can go."""
    from tests.integration.test_tools import CALLS

    CALLS.clear()
    with open_saver(pg_url, mode, None) as saver:
        _chat_with_metadata(saver, "mig-a")
        saver.threads.update("mig-a", metadata={"team": SECRET})
        graph = chat_graph(Counter()).compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "mig-a"}}
        history = repr([(s.values, s.metadata) for s in graph.get_state_history(config)])
        registry = saver.threads.get("mig-a")
        answers = _ledger_call(saver)
    assert SECRET in _database_text(pg_url) and SECRET.upper() in _ledger_text(pg_url)
    _refused(pg_url, mode, "mig-a", searchable(), "plaintext")
    with open_saver(pg_url, mode, searchable()) as saver:
        assert saver.rekey() == 0  # without encrypt_plaintext: only older keys
        assert saver.rekey(batch_size=3, encrypt_plaintext=True) > 0
        assert saver.rekey(encrypt_plaintext=True) == 0
    assert SECRET not in _database_text(pg_url) and SECRET.upper() not in _ledger_text(pg_url)
    both = Encryption({"k2": KEY_2, "k1": KEY_1}, searchable_metadata=["user_id"])
    with open_saver(pg_url, mode, both) as saver:
        assert saver.rekey(batch_size=2) > 0
        assert saver.rekey() == 0
    text = (_database_text(pg_url) + _ledger_text(pg_url)).replace('""', '"')
    assert "aes256gcm:k2" in text or "aes256gcm:k2" in _ledger_text(pg_url)
    assert not any(old in text for old in ('"k": "k1"', '"k":"k1"', "aes256gcm:k1"))
    flush_cache()
    only_new = Encryption({"k2": KEY_2}, searchable_metadata=["user_id"])
    with open_saver(pg_url, mode, only_new) as saver:
        graph = chat_graph(Counter()).compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "mig-a"}}
        again = repr([(s.values, s.metadata) for s in graph.get_state_history(config)])
        assert again == history
        assert saver.threads.get("mig-a") == registry
        found = saver.threads.search(metadata={"user_id": "user-of-mig-a"})
        assert [t.thread_id for t in found] == ["mig-a"]
        assert _ledger_call(saver) == answers
        assert len(CALLS) == 2  # answered from the migrated ledger


def _ledger_text(pg_url: str) -> str:
    with psycopg.connect(pg_url) as conn:
        return repr(conn.execute("SELECT t::text FROM colosseum_tool_calls t").fetchall())


# ------------------------------------------------------------ copy_thread


def test_copy_thread_reseals_for_the_copy(pg_url: str, mode: str) -> None:
    """A copy reads as its source did; its rows are bound to the copy; a source
    row that does not open is refused, and nothing is copied."""
    with open_saver(pg_url, mode, searchable()) as saver:
        _chat_with_metadata(saver, "copy-src")
        saver.copy_thread("copy-src", "copy-dst")
        graph = chat_graph(Counter()).compile(checkpointer=saver)

        def history(thread_id: str) -> str:
            config = {"configurable": {"thread_id": thread_id}}
            return repr([(s.values, s.metadata, s.next) for s in graph.get_state_history(config)])

        assert history("copy-dst") == history("copy-src")
        # The copy goes on by itself.
        config = {"configurable": {"thread_id": "copy-dst"}}
        graph.invoke({"messages": [HumanMessage(content="on the copy", id="h3")]}, config)
    with psycopg.connect(pg_url) as conn:
        # A source row moved into the copy's place does not open there.
        conn.execute(
            "UPDATE colosseum_channel_values d SET value_bytes = s.value_bytes "
            "FROM colosseum_channel_values s WHERE d.thread_id = 'copy-dst' "
            "AND s.thread_id = 'copy-src' AND d.channel = s.channel AND d.version = s.version "
            "AND d.channel = 'messages'"
        )
        conn.execute(
            "UPDATE colosseum_writes SET value_bytes = set_byte(value_bytes, 20, "
            "get_byte(value_bytes, 20) # 1) WHERE thread_id = 'copy-src'"
        )
    flush_cache()
    with open_saver(pg_url, mode, searchable()) as saver:
        with pytest.raises(CorruptRowError, match="copy-dst.*tag"):
            list(saver.list({"configurable": {"thread_id": "copy-dst"}}))
        with pytest.raises(CorruptRowError, match="copy-src.*tag"):
            saver.copy_thread("copy-src", "copy-2")
        assert list(saver.list({"configurable": {"thread_id": "copy-2"}})) == []


# ------------------------------------------------------------ the tool ledger


def _ledger_call(saver: ColosseumSaver) -> list:
    """The tool node invoked on its own (thread "ledger-enc"): one answer, one handled error."""
    from langgraph.runtime import DEFAULT_RUNTIME

    from langgraph_colosseum import IdempotentToolNode
    from tests.integration.test_tools import ALL_TOOLS, ai, call

    message = ai(
        "ai-1", call("shout", {"text": SECRET.lower()}, "c1"), call("boom", {"x": 7}, "c2")
    )
    node = IdempotentToolNode(ALL_TOOLS, ledger=saver, handle_tool_errors=True)
    config = {"configurable": {"thread_id": "ledger-enc", "__pregel_runtime": DEFAULT_RUNTIME}}
    answers = node.invoke([HumanMessage("go", id="h"), message], config)
    return [(m.content, m.tool_call_id, m.status) for m in answers]


def test_tool_ledger_is_sealed_and_replays(pg_url: str, mode: str) -> None:
    """Input, output and error of a tool call are ciphertext; a second call is
    answered from the ledger (the tools do not run again); a moved or plaintext
    ledger value is refused, naming the call."""
    from tests.integration.test_tools import CALLS

    CALLS.clear()
    with open_saver(pg_url, mode, searchable()) as saver:
        first = _ledger_call(saver)
        assert SECRET.upper() in repr(first)  # the tool saw and answered it
        assert len(CALLS) == 2
        assert _ledger_call(saver) == first
        assert len(CALLS) == 2  # recorded answers, opened
    with psycopg.connect(pg_url) as conn:
        ledger = repr(conn.execute("SELECT t::text FROM colosseum_tool_calls t").fetchall())
        assert ledger.count("aes256gcm") >= 4  # inputs and outputs
        assert SECRET.upper() not in ledger and SECRET.lower() not in ledger
        assert "boom 7" not in ledger
        # The two calls' outputs exchanged: each is bound to its idempotency key.
        conn.execute(
            "UPDATE colosseum_tool_calls a SET output_bytes = b.output_bytes "
            "FROM colosseum_tool_calls b WHERE a.idempotency_key <> b.idempotency_key"
        )
    CALLS.clear()
    with open_saver(pg_url, mode, searchable()) as saver:
        with pytest.raises(CorruptRowError, match="output of tool call .* ledger.*tag"):
            _ledger_call(saver)
        with psycopg.connect(pg_url) as conn:  # a plaintext output written in
            conn.execute(
                "UPDATE colosseum_tool_calls SET output = '\"forged\"', output_bytes = NULL, "
                "output_type = NULL"
            )
        with pytest.raises(CorruptRowError, match="ledger-enc.*plaintext"):
            _ledger_call(saver)
        assert CALLS == []  # refused, never run again


# ------------------------------------------------------------ the Store


def test_store_items_are_sealed(pg_url: str, mode: str) -> None:
    """Item values are ciphertext bound to their namespace and key; a moved,
    altered or plaintext value is refused naming the item; a value filter is
    refused (the database cannot compare sealed values)."""
    from langgraph_colosseum import ColosseumStore
    from langgraph_colosseum.errors import StoreItemSealError

    with ColosseumStore.from_conn_string(
        pg_url, encryption=searchable(), **cache_options(mode)
    ) as store:
        store.setup()
        with psycopg.connect(pg_url) as conn:
            conn.execute("DELETE FROM colosseum_store_items")
        store.put(("users", "u1"), "profile", {"name": SECRET, "n": 1})
        store.put(("users", "u2"), "profile", {"name": "other", "n": 2})
        for _ in range(2):  # a miss that refills the hot item, then a hit (with Redis)
            assert store.get(("users", "u1"), "profile").value == {"name": SECRET, "n": 1}
        assert SECRET.encode() not in _redis_bytes()
        assert [i.key for i in store.search(("users",))] == ["profile", "profile"]
        with pytest.raises(EncryptedFieldError, match="'n'"):
            store.search(("users",), filter={"n": 1})
        with psycopg.connect(pg_url) as conn:
            stored = repr(conn.execute("SELECT value FROM colosseum_store_items").fetchall())
            assert SECRET not in stored and "aes256gcm" in stored
            conn.execute(  # u1's value moved to u2
                "UPDATE colosseum_store_items a SET value = b.value FROM colosseum_store_items b "
                "WHERE a.prefix = 'users.u2' AND b.prefix = 'users.u1'"
            )
        flush_cache()  # the altered rows, not a copy Redis holds from before
        with pytest.raises(StoreItemSealError, match="'profile'.*'users', 'u2'.*tag"):
            store.get(("users", "u2"), "profile")
        with psycopg.connect(pg_url) as conn:
            conn.execute(
                'UPDATE colosseum_store_items SET value = \'{"name": "forged"}\' '
                "WHERE prefix = 'users.u1'"
            )
        flush_cache()
        with pytest.raises(StoreItemSealError, match="plaintext"):
            store.get(("users", "u1"), "profile")
    with ColosseumStore.from_conn_string(pg_url) as store:  # no keys: refused too
        with psycopg.connect(pg_url) as conn:
            conn.execute("DELETE FROM colosseum_store_items")
        with ColosseumStore.from_conn_string(pg_url, encryption=searchable()) as sealed:
            sealed.put(("users", "u3"), "profile", {"name": SECRET})
        with pytest.raises(StoreItemSealError, match="no encryption= keys"):
            store.get(("users", "u3"), "profile")
        # A plaintext item is sealed by rekey(encrypt_plaintext=True), a k1 one moved to k2.
        store.put(("users", "u4"), "profile", {"name": SECRET})
    both = Encryption({"k2": KEY_2, "k1": KEY_1})
    with ColosseumStore.from_conn_string(pg_url, encryption=both) as store:
        assert store.saver.rekey(encrypt_plaintext=True, batch_size=1) == 2
    with ColosseumStore.from_conn_string(pg_url, encryption=Encryption({"k2": KEY_2})) as store:
        assert store.get(("users", "u3"), "profile").value == {"name": SECRET}
        assert store.get(("users", "u4"), "profile").value == {"name": SECRET}


# ------------------------------------------------------------ rekey against writers


def test_rekey_leaves_rows_a_writer_changed_meanwhile(pg_url: str, mode: str) -> None:
    """Between rekey's read of a batch and its write, a writer changes rows: a
    prune compacts a delta row, a threads.update merges metadata, a tool call
    completes. Rekey leaves those rows as the writer left them (its update
    names the row as read), and its next run takes them. Driven in order, not
    by timing: the write runs right after rekey's select returned."""
    from langgraph_colosseum import ColosseumStore
    from langgraph_colosseum._core import io, sql
    from langgraph_colosseum._core.io import Query
    from langgraph_colosseum._core.rekey import rekey
    from tests.integration.test_tools import CALLS

    CALLS.clear()
    with open_saver(pg_url, mode, searchable()) as saver:
        _chat_with_metadata(saver, "race")
        answers = _ledger_call(saver)
        store = ColosseumStore.from_saver(saver)
        store.setup()
        store.put(("race",), "item", {"v": "before"})
    with psycopg.connect(pg_url) as conn:
        conn.execute(  # a run record keeping the registry metadata for a rollback
            "INSERT INTO colosseum_runs (thread_id, run_id, strategy, status, holder, "
            "metadata_before) SELECT thread_id, 'run-1', 'rollback', 'success', 'here', "
            "metadata FROM colosseum_threads WHERE thread_id = 'race'"
        )
        compacted = conn.execute(
            "SELECT count(*) FROM colosseum_channel_values WHERE thread_id = 'race' "
            "AND encoding IN ('append', 'merge')"
        ).fetchone()[0]
        assert compacted > 0  # prune will rewrite delta rows of the kept checkpoint
        ((key, output, output_type),) = conn.execute(
            "SELECT idempotency_key, output_bytes, output_type FROM colosseum_tool_calls "
            "WHERE tool_name = 'shout'"
        ).fetchall()
        # The call is still running when rekey reads it; it completes meanwhile.
        conn.execute(
            "UPDATE colosseum_tool_calls SET status = 'RUNNING', output_bytes = NULL, "
            "output_type = NULL WHERE idempotency_key = %s",
            (key,),
        )

    def complete() -> None:
        with psycopg.connect(pg_url) as conn:
            conn.execute(
                "UPDATE colosseum_tool_calls SET status = 'SUCCESS', output_bytes = %s, "
                "output_type = %s WHERE idempotency_key = %s",
                (output, output_type, key),
            )

    both = Encryption({"k2": KEY_2, "k1": KEY_1}, searchable_metadata=["user_id"])
    with open_saver(pg_url, mode, both) as saver, open_saver(pg_url, mode, both) as writer:
        history = repr(
            [t.checkpoint for t in saver.list({"configurable": {"thread_id": "race"}})][:1]
        )

        def re_put() -> None:  # the latest checkpoint written again, with new metadata
            latest = writer.get_tuple({"configurable": {"thread_id": "race"}})
            writer.put(
                {"configurable": {"thread_id": "race", "checkpoint_ns": ""}},
                latest.checkpoint,
                {**latest.metadata, "note": "re-put meanwhile"},
                {},
            )

        meanwhile = {
            sql.REKEY_SELECT_VALUES.format(where=sql.REKEY_OLD_KEY): lambda: writer.prune(
                ["race"], keep=1
            ),
            sql.REKEY_SELECT_REGISTRY: lambda: writer.threads.update(
                "race", metadata={"note": "changed meanwhile"}
            ),
            sql.REKEY_SELECT_LEDGER: complete,
            sql.REKEY_SELECT_METADATA.format(where=sql.REKEY_METADATA_OLD_KEY): re_put,
            sql.REKEY_SELECT_STORE: lambda: ColosseumStore.from_saver(writer).put(
                ("race",), "item", {"v": "meanwhile"}
            ),
            sql.REKEY_SELECT_RUN_METADATA: lambda: _sql(
                pg_url, 'UPDATE colosseum_runs SET metadata_before = \'{"user_id": "meanwhile"}\''
            ),
        }

        def perform(request):
            result = saver._perform(request)
            if isinstance(request, Query) and request.sql in meanwhile:
                meanwhile.pop(request.sql)()
            return result

        io.run(rekey(saver._store.codec), perform)
        assert meanwhile == {}
        saver.rekey()  # the rows left to the next run
    flush_cache()
    only_new = Encryption({"k2": KEY_2}, searchable_metadata=["user_id"])
    with open_saver(pg_url, mode, only_new) as saver:
        latest = saver.list({"configurable": {"thread_id": "race"}})
        assert repr([t.checkpoint for t in latest][:1]) == history
        assert saver.threads.get("race").metadata["note"] == "changed meanwhile"
        assert _ledger_call(saver) == answers
        assert len(CALLS) == 2  # the completed call's output, not run again
        latest = saver.get_tuple({"configurable": {"thread_id": "race"}})
        assert latest.metadata["note"] == "re-put meanwhile"
        item = ColosseumStore.from_saver(saver).get(("race",), "item")
        assert item.value == {"v": "meanwhile"}
    assert _sql(pg_url, "SELECT metadata_before FROM colosseum_runs") == [
        ({"user_id": "meanwhile"},)
    ]


def _sql(pg_url: str, statement: str) -> list[tuple]:
    with psycopg.connect(pg_url) as conn:
        cursor = conn.execute(statement)
        return cursor.fetchall() if cursor.description else []


# ------------------------------------------------------------ through PgBouncer


def test_encryption_through_pgbouncer(mode: str, bouncer_url: str) -> None:
    """Everything above needs no session state: a run, its metadata search,
    copy_thread and rekey work through PgBouncer in transaction mode."""
    both = Encryption({"k2": KEY_2, "k1": KEY_1}, searchable_metadata=["user_id"])
    options = {"pgbouncer": True, "pool_size": 2, **cache_options(mode)}
    with ColosseumSaver.from_conn_string(bouncer_url, encryption=searchable(), **options) as saver:
        _chat_with_metadata(saver, "bouncer-a")
        saver.copy_thread("bouncer-a", "bouncer-b")
        found = list(saver.list(None, filter={"user_id": "user-of-bouncer-a"}))
        assert {t.config["configurable"]["thread_id"] for t in found} == {"bouncer-a", "bouncer-b"}
        assert all(t.metadata["note"] == SECRET for t in found)
    with ColosseumSaver.from_conn_string(bouncer_url, encryption=both, **options) as saver:
        assert saver.rekey(batch_size=5) > 0
        assert saver.rekey() == 0
    flush_cache()
    only_new = Encryption({"k2": KEY_2}, searchable_metadata=["user_id"])
    with ColosseumSaver.from_conn_string(bouncer_url, encryption=only_new, **options) as saver:
        graph = chat_graph(Counter()).compile(checkpointer=saver)
        states = [
            graph.get_state({"configurable": {"thread_id": t}}).values
            for t in ("bouncer-a", "bouncer-b")
        ]
        assert repr(states[0]) == repr(states[1])


def test_a_failed_runs_record_keeps_no_plaintext_message(pg_url: str, mode: str) -> None:
    """saver.runs records a failed run's error in colosseum_runs, a plaintext
    column: with encryption= only the exception's type is kept there."""
    from langgraph.graph import START, StateGraph
    from typing_extensions import TypedDict

    class State(TypedDict):
        note: str

    def fail(state: State) -> dict:
        raise ValueError(f"cannot handle {state['note']}")

    builder = StateGraph(State)
    builder.add_node("fail", fail)
    builder.add_edge(START, "fail")
    with open_saver(pg_url, mode, searchable()) as saver:
        # threads.update sets metadata on a thread that exists (a put made it).
        saver.put({"configurable": {"thread_id": "run-fail"}}, empty_checkpoint(), {"step": -1}, {})
        saver.threads.update("run-fail", metadata={"team": SECRET})
        runs = saver.runs(builder.compile(checkpointer=saver))
        # The run sets `team` too: the value it replaced is kept for a rollback.
        config = {"configurable": {"thread_id": "run-fail"}, "metadata": {"team": "runs"}}
        with pytest.raises(ValueError, match=SECRET):
            runs.invoke({"note": SECRET}, config)
        (record,) = saver.runs.list("run-fail")
        assert record.status == "error" and record.error.startswith("ValueError")

    def text_of(query: str) -> str:
        with psycopg.connect(pg_url) as conn:
            return repr(conn.execute(query).fetchall()).replace('""', '"')

    assert SECRET not in text_of("SELECT r::text FROM colosseum_runs r")
    assert SECRET not in _database_text(pg_url)
    undo = "SELECT metadata_undo::text FROM colosseum_threads"
    assert '"k": "k1"' in text_of(undo) and SECRET not in text_of(undo)
    # The registry metadata a rollback would restore moves to a new key with the rest.
    both = Encryption({"k2": KEY_2, "k1": KEY_1}, searchable_metadata=["user_id"])
    with open_saver(pg_url, mode, both) as saver:
        assert saver.rekey() > 0
    assert '"k": "k1"' not in text_of(undo) and '"k": "k2"' in text_of(undo)
