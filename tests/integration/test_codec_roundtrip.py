"""The codec round trip through Postgres jsonb, via the saver's public API."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import threading
import uuid
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.types import ERROR
from langgraph.types import Send

from langgraph_colosseum import AsyncColosseumSaver, ColosseumSaver
from langgraph_colosseum._core.codec import in_jsonb_order
from langgraph_colosseum.errors import (
    CorruptRowError,
    UnregisteredClassError,
    ValueNotStorableError,
)
from tests.conftest import truncate
from tests.unit.test_codec import APP_TYPES, Position, plain_keys, same, values

ROUNDTRIP_SETTINGS = settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@dataclasses.dataclass
class NotRegistered:
    """A dataclass the saver does not know: the codec refuses it, serde takes it."""

    ticker: str
    lots: list[int]


def register_app_types(saver: ColosseumSaver) -> None:
    for cls in APP_TYPES:
        saver.register_type(cls)


def put_value(saver: ColosseumSaver, thread_id: str, channels: dict[str, Any]) -> tuple[dict, dict]:
    """Put one checkpoint holding `channels`; return (checkpoint, stored config)."""
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = dict(channels)
    checkpoint["channel_versions"] = {ch: saver.get_next_version(None, None) for ch in channels}
    config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    stored = saver.put(
        config, checkpoint, {"source": "input", "step": -1}, checkpoint["channel_versions"]
    )
    return checkpoint, stored


def encodings(pg_url: str, thread_id: str) -> dict[str, str]:
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute(
            "SELECT channel, encoding FROM colosseum_channel_values WHERE thread_id = %s",
            (thread_id,),
        ).fetchall()
    return dict(rows)


def row_counts(pg_url: str) -> tuple[int, int, int]:
    with psycopg.connect(pg_url) as conn:
        return tuple(
            conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            for table in ("colosseum_checkpoints", "colosseum_channel_values", "colosseum_writes")
        )


# ------------------------------------------------------------ the property


@ROUNDTRIP_SETTINGS
@given(value=values)
def test_channel_values_and_writes_roundtrip_through_jsonb(
    saver: ColosseumSaver, pg_url: str, value: Any
) -> None:
    register_app_types(saver)
    thread_id = f"rt-{uuid.uuid4()}"
    _, stored = put_value(saver, thread_id, {"v": value})
    saver.put_writes(stored, [("w", value)], task_id="task-1")

    got = saver.get_tuple(stored)
    assert got is not None
    assert same(got.checkpoint["channel_values"], {"v": value}), got.checkpoint["channel_values"]
    assert len(got.pending_writes) == 1
    task_id, channel, written = got.pending_writes[0]
    assert (task_id, channel) == ("task-1", "w")
    assert same(written, value), written
    # Every generated value is expressible, so none of it went to serde.
    assert encodings(pg_url, thread_id) == {"v": "json"}


@ROUNDTRIP_SETTINGS
@given(
    state=st.dictionaries(
        st.sampled_from(["a", "b", "messages", "$t", "é", "__pregel_tasks"]), values, max_size=3
    )
)
def test_many_channels_roundtrip(saver: ColosseumSaver, state: dict[str, Any]) -> None:
    register_app_types(saver)
    thread_id = f"rt-{uuid.uuid4()}"
    _, stored = put_value(saver, thread_id, state)
    got = saver.get_tuple({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}})
    assert got is not None and got.config == stored
    assert same(got.checkpoint["channel_values"], state)
    listed = list(saver.list({"configurable": {"thread_id": thread_id}}))
    assert len(listed) == 1 and same(listed[0].checkpoint["channel_values"], state)


def test_channel_named_like_the_tag_key(saver: ColosseumSaver) -> None:
    # Channel names are the keys of checkpoint["channel_versions"] in the stored
    # checkpoint document; the codec writes a dict with a "$t" key in its pair-list form.
    channel = "$t"
    _, stored = put_value(saver, f"chan-{uuid.uuid4()}", {channel: {"x": 1}, "plain": None})
    got = saver.get_tuple(stored)
    assert got is not None
    assert same(got.checkpoint["channel_values"], {channel: {"x": 1}, "plain": None})


# ------------------------------------------------------------ queryable jsonb


def test_values_are_queryable_jsonb(saver: ColosseumSaver, pg_url: str) -> None:
    register_app_types(saver)
    _, stored = put_value(saver, "portfolio-thread", {"portfolio": {"ticker": "AAPL", "qty": 10}})
    put_value(saver, "other-thread", {"portfolio": {"ticker": "MSFT", "qty": 1}})
    put_value(saver, "model-thread", {"position": Position(ticker="AAPL", qty=3)})

    with psycopg.connect(pg_url) as conn:
        threads = conn.execute(
            "SELECT DISTINCT thread_id FROM colosseum_channel_values "
            "WHERE channel = 'portfolio' AND value ->> 'ticker' = 'AAPL'"
        ).fetchall()
        assert threads == [("portfolio-thread",)]
        # The checkpoint names that value by version, so a join finds the checkpoint.
        checkpoint_ids = conn.execute(
            "SELECT c.checkpoint_id FROM colosseum_checkpoints c "
            "JOIN colosseum_channel_values v ON v.thread_id = c.thread_id "
            " AND v.checkpoint_ns = c.checkpoint_ns AND v.channel = 'portfolio' "
            " AND v.version = c.checkpoint -> 'channel_versions' ->> 'portfolio' "
            'WHERE v.value @> \'{"ticker": "AAPL"}\'::jsonb'
        ).fetchall()
        assert checkpoint_ids == [(stored["configurable"]["checkpoint_id"],)]
        assert conn.execute(
            "SELECT (value ->> 'qty')::int FROM colosseum_channel_values "
            "WHERE thread_id = 'portfolio-thread'"
        ).fetchone() == (10,)
        # A registered model is a tagged object whose fields stay queryable too.
        model = conn.execute(
            "SELECT value -> 'v' ->> 'ticker', jsonb_typeof(value -> 'v' -> 'qty') "
            "FROM colosseum_channel_values WHERE thread_id = 'model-thread'"
        ).fetchone()
        assert model == ("AAPL", "number")


# ------------------------------------------------------------ unregistered classes


def test_unregistered_class_is_refused_at_write_time(saver: ColosseumSaver, pg_url: str) -> None:
    """Stored, an unregistered class would come back as a dict of its fields (the
    strict serde does not construct it): it is refused instead, naming what to do."""
    value = {"pos": NotRegistered("AAPL", [1, 2]), "n": 1}
    _, parent = put_value(saver, "fallback", {"plain": {"ticker": "AAPL"}})
    before = row_counts(pg_url)
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"state": value}
    checkpoint["channel_versions"] = {"state": "1"}
    with pytest.raises(UnregisteredClassError) as info:
        saver.put(parent, checkpoint, {}, {"state": "1"})
    message = str(info.value)
    assert "types=" in message and "register_type" in message
    assert "NotRegistered" in message and "$.pos" in message and "'state'" in message
    assert info.value.path == "$.pos"
    assert row_counts(pg_url) == before

    # A task whose output holds one: its only pending write is the error
    # (LangGraph's ERROR writes hold exceptions, stored by the serde as ever).
    with pytest.raises(UnregisteredClassError):
        saver.put_writes(parent, [("w", NotRegistered("MSFT", []))], task_id="t")
    pending = saver.get_tuple(parent).pending_writes  # type: ignore[union-attr]
    assert [(task, channel) for task, channel, _ in pending] == [("t", ERROR)]
    assert "register_type" in str(pending[0][2])

    # Registered, the same values are stored and revive as the class.
    saver.register_type(NotRegistered)
    _, stored = put_value(saver, "fallback", {"state": value, "plain": {"ticker": "AAPL"}})
    saver.put_writes(stored, [("w", NotRegistered("MSFT", []))], task_id="t")
    got = saver.get_tuple(stored)
    assert got is not None
    assert same(got.checkpoint["channel_values"], {"state": value, "plain": {"ticker": "AAPL"}})
    assert same(got.pending_writes, [("t", "w", NotRegistered("MSFT", []))])
    assert encodings(pg_url, "fallback") == {"state": "json", "plain": "json"}


def test_user_serde_is_honoured(pg_url: str) -> None:
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    truncate(pg_url)
    permissive = JsonPlusSerializer(allowed_msgpack_modules=[(__name__, "NotRegistered")])
    with ColosseumSaver.from_conn_string(pg_url, serde=permissive) as saver:
        value = {"pos": NotRegistered("AAPL", [1, 2])}
        _, stored = put_value(saver, "user-serde", {"state": value})
        got = saver.get_tuple(stored)
        assert got is not None
        assert same(got.checkpoint["channel_values"], {"state": value})


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ({"ok": 1, "lock": threading.Lock()}, "$.lock"),
        ({"gen": [0, (i for i in range(3))]}, "$.gen[1]"),
    ],
    ids=["lock", "generator"],
)
def test_unstorable_value_raises_and_stores_only_the_error(
    saver: ColosseumSaver, pg_url: str, value: Any, path: str
) -> None:
    thread_id = "unstorable-thread"
    _, parent = put_value(saver, thread_id, {"ok": "kept"})
    before = row_counts(pg_url)

    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"fine": {"ticker": "AAPL"}, "state": value}
    checkpoint["channel_versions"] = {"fine": "1", "state": "1"}
    with pytest.raises(ValueNotStorableError) as info:
        saver.put(parent, checkpoint, {}, {"fine": "1", "state": "1"})
    message = str(info.value)
    assert thread_id in message
    assert checkpoint["id"] in message
    assert "'state'" in message
    assert path in message
    assert info.value.path == path and info.value.channel == "state"
    assert row_counts(pg_url) == before  # not the checkpoint, not the fine channel

    with pytest.raises(ValueNotStorableError) as info:
        saver.put_writes(parent, [("fine", 1), ("bad", value)], task_id="t")
    assert "'bad'" in str(info.value) and parent["configurable"]["checkpoint_id"] in str(info.value)
    # Not even the storable write: the task's only pending write is the error
    # that says why its output could not be kept (its thread's status is then
    # `error`, as for a node that raised).
    pending = saver.get_tuple(parent).pending_writes  # type: ignore[union-attr]
    assert [(task, channel) for task, channel, _ in pending] == [("t", ERROR)]
    assert "ValueNotStorableError" in str(pending[0][2]) and "'bad'" in str(pending[0][2])


# ------------------------------------------------------------ encryption


class XorCipher:
    """A toy CipherProtocol, so the encrypted path is tested without pycryptodome."""

    KEY = 0x5A

    def encrypt(self, plaintext: bytes) -> tuple[str, bytes]:
        return "xor", bytes(b ^ self.KEY for b in plaintext)

    def decrypt(self, ciphername: str, ciphertext: bytes) -> bytes:
        assert ciphername == "xor"
        return bytes(b ^ self.KEY for b in ciphertext)


ENCRYPTED_STATE = {
    "portfolio": {"ticker": "AAPL", "qty": 10},
    "messages": [
        HumanMessage("buy AAPL", id="h1"),
        AIMessage(
            "", id="a1", tool_calls=[{"name": "buy", "args": {"ticker": "AAPL"}, "id": "c1"}]
        ),
    ],
    "when": dt.datetime(2024, 5, 1, 9, 30, tzinfo=dt.timezone(dt.timedelta(hours=-4))),
    "send": Send("worker", {"n": 1}),
    "n": 7,
}


def _check_encrypted_roundtrip(pg_url: str, serde: EncryptedSerializer) -> None:
    with ColosseumSaver.from_conn_string(pg_url, pool_size=2, serde=serde) as enc_saver:
        thread_id = f"enc-{uuid.uuid4()}"
        _, stored = put_value(enc_saver, thread_id, ENCRYPTED_STATE)
        enc_saver.put_writes(stored, [("portfolio", {"ticker": "MSFT"})], task_id="t")
        got = enc_saver.get_tuple(stored)
        assert got is not None
        values = got.checkpoint["channel_values"]
        # Plain equality: serde (not this package) revives messages through
        # validation, so their pydantic fields_set may differ from the original's.
        assert values == ENCRYPTED_STATE
        assert {k: type(v) for k, v in values.items()} == {
            k: type(v) for k, v in ENCRYPTED_STATE.items()
        }
        assert [type(m) for m in values["messages"]] == [HumanMessage, AIMessage]
        assert same(values["when"], ENCRYPTED_STATE["when"])
        assert same(got.pending_writes, [("t", "portfolio", {"ticker": "MSFT"})])
    assert set(encodings(pg_url, thread_id).values()) == {"serde"}
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute(
            "SELECT value, value_bytes, value_type FROM colosseum_channel_values WHERE thread_id = %s "
            "UNION ALL SELECT value, value_bytes, value_type FROM colosseum_writes WHERE thread_id = %s",
            (thread_id, thread_id),
        ).fetchall()
    assert len(rows) == len(ENCRYPTED_STATE) + 1
    for value, value_bytes, value_type in rows:
        assert value is None
        assert b"AAPL" not in bytes(value_bytes) and b"MSFT" not in bytes(value_bytes)
        assert "+" in value_type  # "<serde type>+<cipher name>"


def test_encrypted_serde_with_pycryptodome_aes(saver: ColosseumSaver, pg_url: str) -> None:
    # pycryptodome is in the dev extra. Without it this test fails rather than
    # skips: a skip would let CI pass without ever running the AES path.
    try:
        import Crypto.Cipher.AES  # noqa: F401
    except ImportError as exc:
        pytest.fail(
            f"pycryptodome is missing ({exc}): install the dev extra, "
            "pip install -e '.[dev]'; EncryptedSerializer.from_pycryptodome_aes needs it"
        )
    _check_encrypted_roundtrip(pg_url, EncryptedSerializer.from_pycryptodome_aes(key=b"1" * 16))


def test_encrypted_serde_with_custom_cipher(saver: ColosseumSaver, pg_url: str) -> None:
    _check_encrypted_roundtrip(pg_url, EncryptedSerializer(XorCipher()))


# ------------------------------------------------------------ codec corners, end to end
# Values at the corners found by tests/unit/test_codec.py. Whatever the codec
# does with them, a put must either store something that reads back the same,
# or refuse with ValueNotStorableError and write nothing.


@pytest.mark.parametrize(
    "value",
    [
        10**5000,
        {Decimal("NaN"), Decimal(1)},
        dt.datetime(2023, 3, 12, 2, 30, tzinfo=ZoneInfo("America/New_York")),
        dt.datetime(1, 1, 1, 0, 0, tzinfo=ZoneInfo("Asia/Tokyo")),
    ],
    ids=["int-5001-digits", "set-with-decimal-nan", "nonexistent-wall-time", "year-1-tokyo"],
)
def test_codec_corner_values_through_put(saver: ColosseumSaver, pg_url: str, value: Any) -> None:
    thread_id = f"corner-{uuid.uuid4()}"
    before = row_counts(pg_url)
    try:
        _, stored = put_value(saver, thread_id, {"v": value})
    except ValueNotStorableError:
        assert row_counts(pg_url) == before
        return
    got = saver.get_tuple(stored)
    assert got is not None
    back = got.checkpoint["channel_values"]["v"]
    if isinstance(value, set):
        assert type(back) is set and sorted(map(str, back)) == sorted(map(str, value))
    else:
        assert same(back, value), back


# ------------------------------------------------------------ dict key order


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(keys=st.lists(plain_keys, unique=True, min_size=2, max_size=6))
def test_jsonb_key_order_is_what_the_codec_assumes(pg_url: str, keys: list[str]) -> None:
    """`in_jsonb_order` agrees with Postgres about which orders jsonb keeps."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        text = json.dumps({k: i for i, k in enumerate(keys)})
        row = conn.execute("SELECT array_agg(k) FROM jsonb_object_keys(%s::jsonb) k", (text,))
        stored = row.fetchone()[0]
    assert in_jsonb_order(stored)
    assert in_jsonb_order(keys) == (stored == keys)


ORDERED_STATE = {
    "question": "Refund order #7?",
    "plan": ["look up", "refund"],
    "context": {"zz": 1, "a": {"yy": 2, "b": 3}},
}


def test_key_order_round_trips_and_stays_queryable(saver: ColosseumSaver, pg_url: str) -> None:
    checkpoint, stored = put_value(saver, "order-thread", {"brief": ORDERED_STATE, "z": 1, "a": 2})
    config = {"configurable": {"thread_id": "order-thread", "checkpoint_ns": ""}}
    metadata = {"source": "loop", "step": 1, "brief": {"zeta": 1, "alpha": {"yy": 1, "b": 2}}}
    child = saver.put(stored, {**checkpoint, "id": str(uuid6())}, metadata, {})
    saver.put_writes(child, [("brief", ORDERED_STATE), ("__interrupt__", ORDERED_STATE)], "t1")
    for got in (saver.get_tuple(config), next(iter(saver.list(config)))):
        assert got is not None
        assert repr(got.checkpoint["channel_values"]) == repr(
            {"brief": ORDERED_STATE, "z": 1, "a": 2}
        )
        assert list(got.checkpoint["channel_versions"]) == ["brief", "z", "a"]
        assert repr(got.metadata["brief"]) == repr(metadata["brief"])
        assert [repr(w) for w in got.pending_writes] == [
            repr(("t1", "__interrupt__", ORDERED_STATE)),
            repr(("t1", "brief", ORDERED_STATE)),
        ]
    with psycopg.connect(pg_url) as conn:
        found = conn.execute(
            "SELECT value ->> 'question', value -> 'context' -> 'a' ->> 'yy', "
            'value @> \'{"context": {"zz": 1}}\'::jsonb '
            "FROM colosseum_channel_values WHERE thread_id = 'order-thread' AND channel = 'brief'"
        ).fetchone()
        assert found == ("Refund order #7?", "2", True)
        written = conn.execute(
            "SELECT value ->> 'question' FROM colosseum_writes "
            "WHERE thread_id = 'order-thread' AND channel = '__interrupt__'"
        ).fetchone()
        assert written == ("Refund order #7?",)
    # A metadata filter with the same dict in another order still matches (==, as
    # InMemorySaver), and a different dict does not.
    reordered = {"alpha": {"b": 2, "yy": 1}, "zeta": 1}
    assert [t.config for t in saver.list(config, filter={"brief": reordered})] == [child]
    assert list(saver.list(config, filter={"brief": {"zeta": 1}})) == []
    assert [t.config for t in saver.list(config, filter={"brief": metadata["brief"]})] == [child]


def _checkpoint_as_copied(checkpoint: dict) -> dict:
    """`checkpoint` as LangGraph's copy_checkpoint gives it: those keys, in its order."""
    order = ("v", "ts", "id", "channel_values", "channel_versions", "versions_seen")
    return {**{k: checkpoint[k] for k in order}, "updated_channels": None}


def _order_read_back(checkpoint: dict) -> list[str]:
    """Its keys as a read gives them: channel_values last, as InMemorySaver's."""
    return [k for k in checkpoint if k != "channel_values"] + ["channel_values"]


def test_checkpoint_key_order_is_recorded_once_and_old_rows_read_alike(
    saver: ColosseumSaver, pg_url: str
) -> None:
    """The checkpoint's key order is recorded once, as the number of LangGraph's
    usual order (not its names, twice: by the codec and by the document), and
    a row written in the old form still reads back the same."""
    first, stored = put_value(saver, "keys-thread", {"a": 1})
    copied = _checkpoint_as_copied({**first, "id": str(uuid6())})
    custom = {"extra": {"zz": 1, "a": 2}, **_checkpoint_as_copied({**first, "id": str(uuid6())})}
    configs = [
        saver.put(stored, checkpoint, {"source": "loop", "step": 0}, {})
        for checkpoint in (copied, custom)
    ]
    read = [saver.get_tuple(config).checkpoint for config in configs]
    assert [list(checkpoint) for checkpoint in read] == [
        _order_read_back(copied),
        _order_read_back(custom),
    ]
    want = [repr(checkpoint) for checkpoint in read]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        documents = [
            conn.execute(
                "SELECT checkpoint FROM colosseum_checkpoints WHERE checkpoint_id = %s",
                [config["configurable"]["checkpoint_id"]],
            ).fetchone()[0]
            for config in configs
        ]
        assert documents[0]["$key_order"] == 0 and "$t" not in documents[0]
        assert documents[1]["$key_order"] == [k for k in custom if k != "channel_values"]
        assert "$t" not in documents[1]
        # The old form: the codec's order of the other keys, and the names.
        conn.execute(
            "UPDATE colosseum_checkpoints SET checkpoint = checkpoint "
            "|| jsonb_build_object('$t', %s::jsonb, '$key_order', %s::jsonb) "
            "WHERE checkpoint_id = %s",
            [
                json.dumps([k for k in copied if k not in ("channel_values", "channel_versions")]),
                json.dumps([k for k in copied if k != "channel_values"]),
                configs[0]["configurable"]["checkpoint_id"],
            ],
        )
    assert repr(saver.get_tuple(configs[0]).checkpoint) == want[0]


@pytest.mark.parametrize("item", ["1", "null", '["v"]', '{"v": 1}'])
def test_a_recorded_key_order_naming_a_non_string_is_a_corrupt_row(pg_url: str, item: str) -> None:
    """A checkpoint's key order recorded by names (a tampered row's) that holds
    an item which is no name, hashable or not, is a corrupt row that names the
    checkpoint, in get_tuple and list alike, each time it is read (the orders
    checked once are remembered, a refused one never); the row stays as it is."""
    truncate(pg_url)
    config = {"configurable": {"thread_id": "tampered-order", "checkpoint_ns": ""}}
    checkpoint = {"extra": 1, **empty_checkpoint()}  # an order of its own: recorded by names
    checkpoint["channel_values"] = {"a": 1}
    with ColosseumSaver.from_conn_string(pg_url) as saver:
        checkpoint["channel_versions"] = {"a": saver.get_next_version(None, None)}
        stored = saver.put(config, checkpoint, {"step": -1}, dict(checkpoint["channel_versions"]))
        with psycopg.connect(pg_url, autocommit=True) as conn:
            names = conn.execute(
                "SELECT checkpoint -> '$key_order' FROM colosseum_checkpoints "
                "WHERE thread_id = 'tampered-order'"
            ).fetchone()[0]
            assert type(names) is list and names[0] == "extra"
            tampered = json.dumps(names[:-1])[:-1] + ", " + item + "]"
            conn.execute(
                "UPDATE colosseum_checkpoints SET checkpoint = jsonb_set(checkpoint, "
                "'{$key_order}', %s::jsonb) WHERE thread_id = 'tampered-order'",
                [tampered],
            )
        for _ in range(2):
            with pytest.raises(CorruptRowError, match="key order") as raised:
                saver.get_tuple(stored)
            assert stored["configurable"]["checkpoint_id"] in str(raised.value)
            with pytest.raises(CorruptRowError, match="key order"):
                list(saver.list(config))
    with psycopg.connect(pg_url) as conn:
        (kept,) = conn.execute(
            "SELECT checkpoint -> '$key_order' FROM colosseum_checkpoints "
            "WHERE thread_id = 'tampered-order'"
        ).fetchone()
    assert json.dumps(kept) == json.dumps(json.loads(tampered))


def test_a_channel_order_recorded_by_place_reads_alike(pg_url: str) -> None:
    """Channels not in jsonb's order have their order recorded by name (what
    this release writes). A row that records it as where each channel stands
    in jsonb's order ("2,1,0", what a later release will write, a few bytes
    where the names take dozens) reads back the same; places that are not a
    permutation of the channels make a corrupt row."""
    truncate(pg_url)
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"ccc": 3, "bb": 2, "a": 1}
    config = {"configurable": {"thread_id": "channel-places", "checkpoint_ns": ""}}
    memory = InMemorySaver()
    with ColosseumSaver.from_conn_string(pg_url) as saver:
        checkpoint["channel_versions"] = {
            name: saver.get_next_version(None, None) for name in ("ccc", "bb", "a")
        }
        versions = dict(checkpoint["channel_versions"])
        want = memory.get_tuple(memory.put(config, dict(checkpoint), {"step": -1}, versions))
        stored = saver.put(config, dict(checkpoint), {"step": -1}, versions)
        with psycopg.connect(pg_url, autocommit=True) as conn:
            (document,) = conn.execute(
                "SELECT checkpoint FROM colosseum_checkpoints WHERE thread_id = 'channel-places'"
            ).fetchone()
            assert document["$channel_order"] == ["ccc", "bb", "a"]
            for order, reads in (('"2,1,0"', True), ('"0,0,1"', False), ('"2,1"', False),
                                 ('"2,1,x"', False)):  # fmt: skip
                conn.execute(
                    "UPDATE colosseum_checkpoints SET checkpoint = jsonb_set(checkpoint, "
                    "'{$channel_order}', %s::jsonb) WHERE thread_id = 'channel-places'",
                    [order],
                )
                if reads:
                    got = saver.get_tuple(stored)
                    assert repr(got.checkpoint) == repr(want.checkpoint)
                    assert list(got.checkpoint["channel_versions"]) == ["ccc", "bb", "a"]
                else:
                    with pytest.raises(CorruptRowError, match="channel order"):
                        saver.get_tuple(stored)


def test_a_cleared_channel_stores_no_row(saver: ColosseumSaver, pg_url: str) -> None:
    """A channel the checkpoint cleared gets no value row: a version with no row
    reads as no value, in get_tuple and list alike."""
    first, stored = put_value(saver, "cleared-thread", {"a": 1, "b": [1, 2]})
    cleared = {**first, "id": str(uuid6()), "channel_values": {"a": 1}}
    version = saver.get_next_version(first["channel_versions"]["b"], None)
    cleared["channel_versions"] = {**first["channel_versions"], "b": version}
    config = saver.put(stored, cleared, {"source": "loop", "step": 0}, {"b": version})
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute(
            "SELECT version, encoding FROM colosseum_channel_values "
            "WHERE thread_id = 'cleared-thread' AND channel = 'b'"
        ).fetchall()
    assert rows == [(first["channel_versions"]["b"], "json")]
    for got in (saver.get_tuple(config), next(iter(saver.list(config)))):
        assert got.checkpoint["channel_values"] == {"a": 1}
        assert got.checkpoint["channel_versions"]["b"] == version


def _with_reserved_keys(key: str) -> list[dict]:
    """Checkpoints with a top-level key named as one the stored document keeps
    for itself (`key`): alone, after channels whose order is recorded, in a key
    order of its own, and beside the other reserved name."""
    base = empty_checkpoint()
    base["channel_values"] = {"bb": 1, "a": {"z": 1, "y": 2}}
    base["channel_versions"] = {"bb": 1, "a": 1}  # not jsonb's order: recorded
    other = "$channel_order" if key == "$key_order" else "$key_order"
    checkpoints = []
    for value in (1, ["bb", "a"], {"keys": 0, "own": {}}, None, "x"):
        alone = {**base, "id": str(uuid6()), key: value}
        first = {key: value, **base, "id": str(uuid6())}
        both = {**base, "id": str(uuid6()), other: [0], key: value}
        checkpoints += (alone, first, both)
    return checkpoints


@pytest.mark.parametrize("key", ["$key_order", "$channel_order"])
def test_a_checkpoint_key_named_as_a_reserved_one_round_trips(
    saver: ColosseumSaver, key: str
) -> None:
    """What put accepts reads back as InMemorySaver gives it, even a checkpoint
    key named as one of the document's own (it used to read as a corrupt row)."""
    memory = InMemorySaver()
    for n, checkpoint in enumerate(_with_reserved_keys(key)):
        config = {"configurable": {"thread_id": f"reserved-{key}-{n}", "checkpoint_ns": ""}}
        versions = dict(checkpoint["channel_versions"])
        want = memory.get_tuple(memory.put(config, dict(checkpoint), {"step": -1}, versions))
        stored = saver.put(config, dict(checkpoint), {"step": -1}, versions)
        # The second get_tuple is the hot head's, where there is one.
        for got in (saver.get_tuple(config), saver.get_tuple(stored), *saver.list(config)):
            assert got is not None and repr(got.checkpoint) == repr(want.checkpoint)


@pytest.mark.parametrize("key", ["$key_order", "$channel_order"])
async def test_a_checkpoint_key_named_as_a_reserved_one_round_trips_async(
    asaver: AsyncColosseumSaver, key: str
) -> None:
    memory = InMemorySaver()
    for n, checkpoint in enumerate(_with_reserved_keys(key)):
        config = {"configurable": {"thread_id": f"areserved-{key}-{n}", "checkpoint_ns": ""}}
        versions = dict(checkpoint["channel_versions"])
        want = memory.get_tuple(memory.put(config, dict(checkpoint), {"step": -1}, versions))
        stored = await asaver.aput(config, dict(checkpoint), {"step": -1}, versions)
        listed = [t async for t in asaver.alist(config)]
        for got in (await asaver.aget_tuple(config), await asaver.aget_tuple(stored), *listed):
            assert got is not None and repr(got.checkpoint) == repr(want.checkpoint)


def test_a_recorded_key_order_holding_other_keys_is_a_corrupt_row(pg_url: str) -> None:
    """The object form of the recorded key order brings back only the names the
    document keeps for itself: one naming any other key (a tampered row) is
    refused, not read as a checkpoint key."""
    truncate(pg_url)
    checkpoint = {**empty_checkpoint(), "$key_order": 1}
    config = {"configurable": {"thread_id": "reserved-tampered", "checkpoint_ns": ""}}
    with ColosseumSaver.from_conn_string(pg_url) as saver:
        stored = saver.put(config, checkpoint, {"step": -1}, {})
        assert saver.get_tuple(stored).checkpoint["$key_order"] == 1
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(
                "UPDATE colosseum_checkpoints SET checkpoint = jsonb_set(checkpoint, "
                "'{$key_order,own}', '{\"v\": 2}') WHERE thread_id = 'reserved-tampered'"
            )
        with pytest.raises(CorruptRowError, match="not the document's"):
            saver.get_tuple(stored)


@pytest.mark.parametrize(
    "extra",
    [
        {"note": [1, 2], "seen_by": {"a": 1, "bb": 2}},  # no tag in the document
        {"note": {"zz": 1, "a": 2}, "more": {"b": [{"yy": 1, "x": 2}]}},  # key orders tagged
        {"note": "$t"},  # the tag's name as a value
    ],
    ids=["plain", "reordered", "tag-as-text"],
)
def test_a_checkpoint_document_reads_back_as_put(saver: ColosseumSaver, extra: dict) -> None:
    """A checkpoint's own keys beside LangGraph's read back as InMemorySaver
    gives them, by repr, through get_tuple and list: dicts jsonb would reorder
    (whose key order the codec tags) as plain ones, which are read without
    the codec's walk."""
    memory = InMemorySaver()
    checkpoint = {**empty_checkpoint(), **extra}
    checkpoint["versions_seen"] = {"node": {"x": "1"}}
    config = {
        "configurable": {"thread_id": f"document-{uuid.uuid4().hex[:8]}", "checkpoint_ns": ""}
    }
    want = memory.get_tuple(memory.put(config, dict(checkpoint), {"step": -1}, {}))
    stored = saver.put(config, dict(checkpoint), {"step": -1}, {})
    for got in (saver.get_tuple(stored), *saver.list(config)):
        assert got is not None and repr(got.checkpoint) == repr(want.checkpoint)
