"""The hot head's wire format, without Redis: what the scripts' replies become."""

from __future__ import annotations

import fnmatch
from datetime import timedelta
from typing import Any

import pytest
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from langgraph_colosseum._core import sql
from langgraph_colosseum._core.codec import default_registry
from langgraph_colosseum._core.hot import (
    INCARNATION_RECHECK,
    CorruptHeadError,
    HotHead,
    flat_versions,
    write_field,
)
from langgraph_colosseum._core.io import CacheCall, Query
from langgraph_colosseum._core.store import CheckpointStore
from langgraph_colosseum._core.values import ValueCodec


def test_a_write_slot_is_spelled_as_the_put_statement_spells_it() -> None:
    # ADVANCE compares the slots PUT returns with the slots put_writes stored.
    assert write_field("task-1", -3) == "-3:task-1"
    assert "w.idx || ':' || w.task_id" in sql.PUT


def bound(incarnation: str = "token.16384.16500") -> HotHead:
    hot = HotHead(timedelta(seconds=5), prefix="app:")
    hot.bind(incarnation)
    return hot


def test_keys_carry_the_incarnation_and_the_thread_as_a_hash_tag() -> None:
    hot = bound()
    key = hot.thread_key("t1")
    assert key.startswith("app:") and key.endswith(":{t1}")
    assert hot.read("t1", "", "", {}).args[0] == 5000  # the TTL, in milliseconds
    assert hot.drop(["a", "b"]).keys == (hot.thread_key("a"), hot.thread_key("b"))
    # Another incarnation (a recreated or restored database): other keys.
    assert bound("token.16384.16999").thread_key("t1") != key
    assert bound("other.16384.16500").thread_key("t1") != key
    assert fnmatch.fnmatchcase(key, hot.key_pattern().replace("\\", ""))
    with pytest.raises(ValueError, match="hot_ttl"):
        HotHead(timedelta(0))


def test_replies_other_than_a_hit() -> None:
    hot = bound()
    assert hot.parse_read("t", "", [b"17"]) == (b"17", None, True)  # miss: refill
    assert hot.parse_read("t", "", [b"17", 0]) == (b"17", None, False)  # not the head
    nothing = hot._head("t", "", None, None, None, None)  # type: ignore[arg-type]
    _, head, refillable = hot.parse_read("t", "", [b"17", nothing, b"", [], [], b""])
    assert head is not None and head.row == () and not refillable  # no checkpoint at all
    assert head.deleted is None  # on a thread id never deleted
    _, head, _ = hot.parse_read("t", "", [b"17", nothing, b"", [], [], b"1f0a1b2c3d4e5f6"])
    assert head is not None and head.deleted == "1f0a1b2c3d4e5f6"  # one deleted before
    with pytest.raises(CorruptHeadError):  # READ found it corrupt and dropped it
        hot.parse_read("t", "", [b"17", -1])
    with pytest.raises(CorruptHeadError):  # an emptied head is not "no checkpoint"
        hot.parse_read("t", "", [b"17", b"", b"", [], [], b""])


def hit(hot: HotHead, thread_id: str = "t") -> list:
    document = '{"v": 4, "channel_versions": {"messages": "v2"}}'
    head = hot._head(thread_id, "ns", "c2", "c1", document, '{"step": 1}')
    write = hot.pack_write(
        thread_id, "ns", "c2", "task", 0, "path", "messages", "json", '"hi"', None, None
    )
    rows = [b"messages", b"v2", b"v1",
            hot.pack_value(thread_id, "ns", "messages", "v2", "v1", "append", '["b"]', None, None),
            b"messages", b"v1", b"",
            hot.pack_value(thread_id, "ns", "messages", "v1", None, "json", '["a"]', None, None)]  # fmt: skip
    return [b"9", head, flat_versions({"messages": "v2"}), [write], rows, b"1f0a1b2c3d4e5f6"]


def test_a_hit_becomes_a_get_tuple_row() -> None:
    hot = bound()
    seq, found, _ = hot.parse_read("t", "ns", hit(hot))
    assert seq == b"9" and found is not None
    assert found.deleted == "1f0a1b2c3d4e5f6"  # the thread's deletion stamp, for the run
    assert found.row[:4] == ("t", "ns", "c2", "c1")
    assert found.row[6:14] == (["task"], [0], ["path"], ["messages"], ["json"], ['"hi"'],
                               [None], [None])  # fmt: skip
    assert found.row[14] == [None]  # a write cached before state_version was: none recorded
    reply = hit(hot)
    reply[3] = [
        reply[3][0],
        hot.pack_write("t", "ns", "c2", "task", 1, "path", "n", "json", "1", None, None, 2),
    ]
    _, found, _ = hot.parse_read("t", "ns", reply)
    assert found is not None and found.row[14] == [None, 2]  # each write's state version
    delta, full = found.value_rows
    assert delta.key == ("t", "ns", "messages", "v2") and delta.base_version == "v1"
    assert delta.encoding == "append" and delta.parsed == ["b"]
    assert full.base_version is None and full.parsed == ["a"]


def test_a_head_that_is_not_what_it_claims_is_corrupt() -> None:
    hot = bound()
    reply = hit(hot)
    with pytest.raises(CorruptHeadError):  # another thread's head, copied over
        hot.parse_read("u", "ns", reply)
    with pytest.raises(CorruptHeadError):  # another incarnation's
        bound("token.1.2").parse_read("t", "ns", reply)
    moved = list(reply)
    moved[4] = [b"messages", b"v3", *reply[4][2:]]  # a row under another version
    with pytest.raises(CorruptHeadError):
        hot.parse_read("t", "ns", moved)
    flipped = list(reply)
    flipped[4] = [*reply[4][:3], reply[4][3].replace(b'["b"]', b'["c"]'), *reply[4][4:]]
    with pytest.raises(CorruptHeadError):
        hot.parse_read("t", "ns", flipped)
    versions = list(reply)
    versions[2] = flat_versions({"messages": "v1"})
    with pytest.raises(CorruptHeadError):
        hot.parse_read("t", "ns", versions)
    with pytest.raises(CorruptHeadError):
        hot.parse_read("t", "ns", [b"9", b"garbage", b"", [], [], b""])


def test_a_hit_asks_for_the_incarnation_again_once_the_bound_has_passed() -> None:
    """README, Backup: a worker that lives through a recovery and does not write
    serves no head of the old incarnation to a read that starts
    INCARNATION_RECHECK seconds or more after the old server answered its last
    statement. Each statement that returned the incarnation proves it from
    the time it was sent; a hit within the bound sends nothing to Postgres."""
    store = CheckpointStore(ValueCodec(JsonPlusSerializer(), default_registry(), None))
    store.hot = hot = HotHead(timedelta(seconds=5))
    now = [0.0]
    hot.clock = lambda: now[0]
    config = {"configurable": {"thread_id": "t1"}}

    def first_request(answer: str | None = None) -> Any:
        """What a get_tuple sends first; when it asks for the incarnation, the
        Redis read it then sends (the server answering `answer`)."""
        op = store.get_tuple(config)
        request = next(op)
        if isinstance(request, Query):
            assert request.sql == sql.CURRENT_INCARNATION
            read = op.send([(answer,)])
            assert isinstance(read, CacheCall) and read.key == hot.thread_key("t1")
        op.close()
        return request

    assert isinstance(first_request("old.1.2"), Query)  # the first read learns it
    old_key = hot.thread_key("t1")
    now[0] = INCARNATION_RECHECK - 0.001
    assert isinstance(first_request(), CacheCall), "within the bound: Redis alone"
    now[0] = INCARNATION_RECHECK
    assert isinstance(first_request("new.1.2"), Query), "the bound passed: asked again"
    assert hot.thread_key("t1") != old_key
    # A reply of the old server handled late (sent at 0.5, before it stopped)
    # moves the saver back, proven only from when it was sent.
    assert hot.bind("old.1.2", 0.5)
    now[0] = 0.5 + INCARNATION_RECHECK - 0.001
    assert isinstance(first_request(), CacheCall)
    now[0] = 0.5 + INCARNATION_RECHECK
    assert isinstance(first_request("new.1.2"), Query)
    # A write's statement proves the same incarnation again from its sending.
    assert not hot.bind("new.1.2", 10.0)
    now[0] = 10.0 + INCARNATION_RECHECK - 0.001
    assert isinstance(first_request(), CacheCall)
