"""The hot head's wire format, without Redis: what the scripts' replies become."""

from __future__ import annotations

from datetime import timedelta

import pytest

from langgraph_colosseum._core import sql
from langgraph_colosseum._core.hot import HotHead, pack, pack_value, pack_write, write_field


def test_a_write_slot_is_spelled_as_the_put_statement_spells_it() -> None:
    # ADVANCE compares the slots PUT returns with the slots put_writes stored.
    assert write_field("task-1", -3) == "-3:task-1"
    assert "w.idx || ':' || w.task_id" in sql.PUT


def test_keys_carry_the_thread_as_a_hash_tag() -> None:
    hot = HotHead(timedelta(seconds=5), prefix="app:")
    assert hot.thread_key("t1") == "app:{t1}"
    assert hot.read("t1", "", "", {}).args[0] == 5000  # the TTL, in milliseconds
    assert hot.drop(["a", "b"]).keys == ("app:{a}", "app:{b}")
    with pytest.raises(ValueError, match="hot_ttl"):
        HotHead(timedelta(0))


def test_replies_other_than_a_hit() -> None:
    assert HotHead.parse_read("t", "", [b"17"]) == (b"17", None, True)  # miss: refill
    assert HotHead.parse_read("t", "", [b"17", 0]) == (b"17", None, False)  # not the head
    _, head, refillable = HotHead.parse_read("t", "", [b"17", b"", b"", [], []])
    assert head is not None and head.row == () and not refillable  # no checkpoint at all


def test_a_hit_becomes_a_get_tuple_row() -> None:
    head = pack(["c2", "c1", '{"v": 4}', '{"step": 1}'])
    write = pack_write("task", 0, "path", "messages", "json", '"hi"', None, None)
    rows = [b"messages", b"v2", b"v1", pack_value("append", '["b"]', None, None),
            b"messages", b"v1", b"", pack_value("json", '["a"]', None, None)]  # fmt: skip
    seq, found, _ = HotHead.parse_read("t", "ns", [b"9", head, b"cv", [write], rows])
    assert seq == b"9" and found is not None
    assert found.row[:6] == ("t", "ns", "c2", "c1", '{"v": 4}', '{"step": 1}')
    assert found.row[6:14] == (["task"], [0], ["path"], ["messages"], ["json"], ['"hi"'],
                               [None], [None])  # fmt: skip
    delta, full = found.value_rows
    assert delta.key == ("t", "ns", "messages", "v2") and delta.base_version == "v1"
    assert delta.encoding == "append" and delta.parsed == ["b"]
    assert full.base_version is None and full.parsed == ["a"]
