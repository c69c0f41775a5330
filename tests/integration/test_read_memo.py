"""A head read again is decoded once, and is still what Postgres holds.

The store remembers the checkpoint it last read of each (thread, namespace)
(`_core/bases.CheckpointMemo`); a read sends that checkpoint's digest, and
Postgres leaves out its document, metadata and value rows while the checkpoint
it finds has that digest (`sql._DIGEST`). What a reader relies on, checked
here against another saver that has never read the thread (so decodes
everything): a remembered read returns exactly what a fresh read returns,
after the checkpoint was rewritten (by another process, twice in one
transaction, only in its document), replaced in place, deleted, or given
pending writes, and what it returns is the caller's own to change.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from langgraph.checkpoint.base import empty_checkpoint
from psycopg import conninfo

from langgraph_colosseum import AsyncColosseumSaver, ColosseumSaver
from langgraph_colosseum._core.bases import Remembered
from langgraph_colosseum._core.io import Transaction
from tests.conftest import cache_options, truncate

THREAD = "memo-thread"
CONFIG = {"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}}
# A memo is kept on the second read of a row version, used from the third.
READS_TO_REMEMBER = 2


def checkpoint(checkpoint_id: str, values: dict[str, Any], version: int = 1) -> dict[str, Any]:
    found = empty_checkpoint()
    found["id"] = checkpoint_id
    found["channel_values"] = values
    versions = {channel: f"{version:032}.0.5" for channel in values}
    found["channel_versions"] = versions
    found["versions_seen"] = {"node": {"__start__": f"{version:032}.0.5"}}
    return found


def put(
    saver: ColosseumSaver, checkpoint_id: str, values: dict[str, Any], step: int, version: int = 1
) -> None:
    """A put of `values`, at channel versions `version` (a version names one
    value forever: other values of a channel need another version)."""
    written = checkpoint(checkpoint_id, values, version)
    saver.put(
        CONFIG,
        written,
        {"source": "loop", "step": step, "parents": {}},
        written["channel_versions"],
    )


def fresh_read(url: str, config: dict = CONFIG) -> str:
    """What a saver that has never read the thread returns, from Postgres, as repr."""
    with ColosseumSaver.from_conn_string(url, pool_size=1) as other:
        return repr(other.get_tuple(config))


def remembered(saver: ColosseumSaver, config: dict = CONFIG) -> Any:
    """The thread read until its head is remembered (when Postgres answers the
    reads: the Redis hot head answers them otherwise), and once more."""
    for _ in range(READS_TO_REMEMBER):
        saver.get_tuple(config)
    if saver.cache is None:
        assert type(saver._store.memo.peek(THREAD, "")) is Remembered
    return saver.get_tuple(config)


@pytest.fixture(params=["postgres", "redis"])
def mode(request: pytest.FixtureRequest, pg_url: str) -> str:
    truncate(pg_url)
    return request.param


@pytest.fixture
def memo_saver(mode: str, pg_url: str) -> Iterator[ColosseumSaver]:
    with ColosseumSaver.from_conn_string(pg_url, pool_size=2, **cache_options(mode)) as saver:
        yield saver


@pytest.fixture
def other(mode: str, pg_url: str) -> Iterator[ColosseumSaver]:
    """Another worker, on the same servers, that has read nothing."""
    with ColosseumSaver.from_conn_string(pg_url, pool_size=1, **cache_options(mode)) as saver:
        yield saver


def documents_sent_by(saver: ColosseumSaver) -> list[str | None]:
    """The checkpoint document column of each GET_TUPLE row Postgres sends
    `saver` from now on (None: left out, the reader remembers it)."""
    sent: list[str | None] = []
    perform = saver._perform

    def recording(request: Any) -> Any:
        result = perform(request)
        if isinstance(request, Transaction) and "remembered" in request.queries[-1].sql:
            sent.extend(row[5] for row in result[-1])  # after `deleted`: id, ns, ..., document
        return result

    saver._perform = recording  # type: ignore[method-assign]
    return sent


@pytest.fixture
def documents_sent(memo_saver: ColosseumSaver) -> list[str | None]:
    return documents_sent_by(memo_saver)


def test_a_head_read_again_is_decoded_once_and_read_as_a_fresh_saver_reads_it(
    pg_url: str, mode: str, memo_saver: ColosseumSaver, documents_sent: list[str | None]
) -> None:
    put(memo_saver, "1", {"count": 7, "items": [{"a": (1, 2)}], "name": "x"}, 1)
    reads = [repr(memo_saver.get_tuple(CONFIG)) for _ in range(5)]
    assert reads == [fresh_read(pg_url)] * 5
    if mode == "postgres":  # (the Redis head answers the reads otherwise)
        assert [text is None for text in documents_sent] == [False, False, True, True, True]


def test_a_checkpoint_rewritten_by_another_process_is_read_as_rewritten(
    pg_url: str, memo_saver: ColosseumSaver, other: ColosseumSaver
) -> None:
    put(memo_saver, "1", {"count": 7, "name": "before"}, 1)
    remembered(memo_saver)
    put(other, "1", {"count": 8, "name": "after"}, 2, version=2)  # the same checkpoint id
    found = memo_saver.get_tuple(CONFIG)
    assert found.checkpoint["channel_values"] == {"count": 8, "name": "after"}
    assert found.metadata["step"] == 2
    assert repr(found) == fresh_read(pg_url)


def test_a_checkpoint_rewritten_twice_in_one_transaction_is_read_as_rewritten(
    pg_url: str,
) -> None:
    """Both versions of the row carry one transaction id: what is compared is
    the content (sql._REMEMBERED), not where or when it was written."""
    truncate(pg_url)
    with psycopg.connect(pg_url) as conn:  # not autocommit: one transaction throughout
        saver = ColosseumSaver(conn)
        put(saver, "1", {"count": 7}, 1)
        update = "UPDATE colosseum_checkpoints SET metadata = metadata || %s::jsonb"
        conn.execute(update, ('{"step": 2}',))
        assert remembered(saver).metadata["step"] == 2
        conn.execute(update, ('{"step": 3}',))
        assert saver.get_tuple(CONFIG).metadata["step"] == 3
        conn.rollback()


def test_a_checkpoint_rewritten_in_its_document_only_is_read_as_rewritten(
    pg_url: str, memo_saver: ColosseumSaver
) -> None:
    """The same metadata, another document: the digest covers both texts."""
    put(memo_saver, "1", {"count": 7}, 1)
    remembered(memo_saver)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            "UPDATE colosseum_checkpoints SET checkpoint = jsonb_set("
            "checkpoint, '{versions_seen,node,__start__}', '\"rewritten\"')"
        )
    if memo_saver.cache is not None:  # a head rewritten behind the saver's back
        memo_saver.flush_cache()
    found = memo_saver.get_tuple(CONFIG)
    assert found.checkpoint["versions_seen"]["node"]["__start__"] == "rewritten"
    assert repr(found) == fresh_read(pg_url)


def test_a_checkpoint_that_took_the_place_of_the_remembered_one_is_read_as_itself(
    pg_url: str, memo_saver: ColosseumSaver, other: ColosseumSaver
) -> None:
    """copy_thread writes a thread's rows in one transaction; the head's run is
    then deleted and CLUSTER moves the checkpoint now latest into the deleted
    head's place: same transaction id, same place, another checkpoint."""
    version = None
    for i in range(4):
        version = memo_saver.get_next_version(version, None)
        written = checkpoint(f"{i:08}", {"secret": f"value of {i}"})
        written["channel_versions"] = {"secret": version}
        memo_saver.put(
            {"configurable": {"thread_id": "memo-source", "checkpoint_ns": ""}},
            written,
            {"step": i, "run_id": "run-A" if i < 3 else "run-B"},
            {"secret": version},
        )
    memo_saver.copy_thread("memo-source", THREAD)
    assert remembered(memo_saver).checkpoint["id"] == f"{3:08}"
    other.delete_for_runs(["run-B"])
    version = None
    for i in range(2):  # a thread that sorts first, so that the copy's rows move
        version = other.get_next_version(version, None)
        written = checkpoint(f"{i:08}", {"other": i})
        written["channel_versions"] = {"other": version}
        other.put(
            {"configurable": {"thread_id": "a-first", "checkpoint_ns": ""}},
            written,
            {"step": i, "run_id": "run-C"},
            {"other": version},
        )
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CLUSTER colosseum_checkpoints USING colosseum_checkpoints_pkey")
    found = memo_saver.get_tuple(CONFIG)
    assert found.checkpoint["id"] == f"{2:08}"
    assert found.checkpoint["channel_values"] == {"secret": "value of 2"}
    assert repr(found) == fresh_read(pg_url)


def test_a_head_is_remembered_whatever_the_database_encoding(pg_url: str) -> None:
    """Postgres makes the digest it compares (a reader's own digest of the
    texts it got never matched on EUC_JP characters whose conversions to
    UTF-8 differ between the server and Python, such as '〜')."""
    admin_url = conninfo.make_conninfo(pg_url, dbname="postgres")
    name = f"colosseum_eucjp_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(
            f"CREATE DATABASE \"{name}\" ENCODING 'EUC_JP' LC_COLLATE 'C' LC_CTYPE 'C' "
            "TEMPLATE template0"
        )
    try:
        url = conninfo.make_conninfo(pg_url, dbname=name)
        with ColosseumSaver.from_conn_string(url, pool_size=1) as saver:
            saver.setup()
            written = checkpoint("1", {"note": "〜 ‖ − ¢ あ"})
            saver.put(CONFIG, written, {"note": "〜"}, written["channel_versions"])
            sent = documents_sent_by(saver)
            reads = [repr(saver.get_tuple(CONFIG)) for _ in range(READS_TO_REMEMBER + 1)]
            assert len(set(reads)) == 1 and "〜 ‖ − ¢ あ" in reads[0]
            assert [text is None for text in sent] == [False, False, True]
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_a_deleted_thread_read_again_is_gone(
    memo_saver: ColosseumSaver, other: ColosseumSaver
) -> None:
    put(memo_saver, "1", {"count": 7}, 1)
    remembered(memo_saver)
    other.delete_thread(THREAD)
    assert memo_saver.get_tuple(CONFIG) is None


def test_pending_writes_stored_after_the_memo_are_read(
    pg_url: str, memo_saver: ColosseumSaver, other: ColosseumSaver
) -> None:
    put(memo_saver, "1", {"count": 7}, 1)
    remembered(memo_saver)
    head = {"configurable": {"thread_id": THREAD, "checkpoint_ns": "", "checkpoint_id": "1"}}
    other.put_writes(head, [("count", 9), ("note", {"k": [1]})], "task-1", "path")
    found = memo_saver.get_tuple(CONFIG)
    assert found.pending_writes == [("task-1", "count", 9), ("task-1", "note", {"k": [1]})]
    assert repr(found) == fresh_read(pg_url)


def test_a_remembered_read_by_checkpoint_id(pg_url: str, memo_saver: ColosseumSaver) -> None:
    put(memo_saver, "1", {"count": 7}, 1)
    put(memo_saver, "2", {"count": 8}, 2)
    first = {"configurable": {"thread_id": THREAD, "checkpoint_ns": "", "checkpoint_id": "1"}}
    reads = [repr(memo_saver.get_tuple(first)) for _ in range(4)]
    assert reads == [fresh_read(pg_url, first)] * 4
    # a memo of checkpoint 1 is not the latest checkpoint's
    assert repr(memo_saver.get_tuple(CONFIG)) == fresh_read(pg_url)


def test_what_a_remembered_read_returns_is_the_callers_own(
    pg_url: str, memo_saver: ColosseumSaver
) -> None:
    put(memo_saver, "1", {"items": [{"a": [1]}], "count": 7}, 1)
    for _ in range(2):
        found = remembered(memo_saver)
        found.checkpoint["channel_values"]["items"][0]["a"].append(2)
        found.checkpoint["channel_values"]["count"] = 0
        found.checkpoint["channel_versions"]["count"] = "changed"
        found.checkpoint["versions_seen"]["node"]["x"] = "changed"
        found.metadata["parents"]["x"] = "changed"
    assert repr(memo_saver.get_tuple(CONFIG)) == fresh_read(pg_url)


async def test_the_async_saver_remembers_alike(mode: str, pg_url: str) -> None:
    async with AsyncColosseumSaver.from_conn_string(
        pg_url, pool_size=2, **cache_options(mode)
    ) as saver:
        await saver.aput(
            CONFIG,
            checkpoint("1", {"count": 7}),
            {"source": "loop", "step": 1, "parents": {}},
            checkpoint("1", {"count": 7})["channel_versions"],
        )
        reads = [repr(await saver.aget_tuple(CONFIG)) for _ in range(4)]
        with ColosseumSaver.from_conn_string(pg_url, pool_size=1, **cache_options(mode)) as other:
            put(other, "1", {"count": 8}, 2, version=2)
        reads.append(repr(await saver.aget_tuple(CONFIG)))
    expected = fresh_read(pg_url)
    assert "'count': 8" in expected
    assert reads[-1] == expected
    assert len(set(reads[:4])) == 1 and "'count': 7" in reads[0]


def read_threads(
    saver: ColosseumSaver, prefix: str, count: int, values: dict[str, Any], reads: int
) -> None:
    """`count` threads of one checkpoint each, each read `reads` times."""
    for i in range(count):
        config = {"configurable": {"thread_id": f"{prefix}-{i}", "checkpoint_ns": ""}}
        written = checkpoint("1", values)
        saver.put(config, written, {"step": 1}, written["channel_versions"])
        for _ in range(reads):
            saver.get_tuple(config)


def test_checkpoints_read_once_are_bounded_too(pg_url: str) -> None:
    """Most heads are read once and only noted: the notes count against the bound."""
    truncate(pg_url)
    with ColosseumSaver.from_conn_string(pg_url, pool_size=1) as saver:
        saver._store.memo.max_bytes = 5_000
        read_threads(saver, "once", 100, {"count": 1}, reads=1)
        entries = len(saver._store.memo._entries)
        assert 0 < entries < 100 and saver._store.memo._bytes <= 5_000


def test_what_the_memo_holds_is_bounded(pg_url: str) -> None:
    truncate(pg_url)
    with ColosseumSaver.from_conn_string(pg_url, pool_size=1) as saver:
        saver._store.memo.max_bytes = 2_000
        read_threads(saver, "bounded", 10, {"text": "x" * 300}, reads=READS_TO_REMEMBER)
        assert 0 < saver._store.memo._bytes <= 2_000
        kept = [k for k, entry in saver._store.memo._entries.items() if type(entry) is Remembered]
        assert kept and ("bounded-9", "") in kept and ("bounded-0", "") not in kept
