"""The sealed forms of _core/crypt.py and their use by the codec, without services:
what opens, what is refused, and that the refusal says why."""

from __future__ import annotations

import base64
import os

import orjson
import pytest

from langgraph_colosseum._core.codec import default_registry
from langgraph_colosseum._core.crypt import (
    SEALED_KEY,
    Encryption,
    RowSealError,
    metadata_aad,
    registry_aad,
)
from langgraph_colosseum._core.values import ValueCodec
from langgraph_colosseum.errors import EncryptedFieldError

KEY = os.urandom(32)


def codec(**options) -> ValueCodec:
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    return ValueCodec(JsonPlusSerializer(), default_registry(), Encryption({"k": KEY}, **options))


def test_a_sealed_json_value_opens_only_in_its_place() -> None:
    enc = Encryption({"k": KEY})
    sealed = enc.seal_json('{"a": 1}', b"here")
    assert sealed["$t"] == "aes256gcm" and sealed["k"] == "k"
    assert enc.open_json(sealed, b"here") == '{"a": 1}'
    with pytest.raises(RowSealError, match="tag"):
        enc.open_json(sealed, b"elsewhere")
    with pytest.raises(RowSealError, match="plaintext"):
        enc.open_json({"a": 1}, b"here")
    with pytest.raises(RowSealError, match="'other'.*not configured"):
        enc.open_json({**sealed, "k": "other"}, b"here")
    with pytest.raises(RowSealError, match="base64"):
        enc.open_json({**sealed, "v": "not base64!"}, b"here")
    raw = bytearray(base64.b64decode(sealed["v"]))
    raw[-1] ^= 1
    with pytest.raises(RowSealError, match="tag"):
        enc.open_json({**sealed, "v": base64.b64encode(bytes(raw)).decode()}, b"here")


def test_metadata_keeps_plain_keys_checked_against_the_sealed_copy() -> None:
    values = codec(searchable_metadata=["user_id"])
    metadata = {"source": "loop", "step": 3, "user_id": "u1", "note": "secret", "parents": {}}
    document = '{"channel_versions": {"messages": "2"}, "versions_seen": {}}'
    aad = metadata_aad("t", "", "c1", document)
    text = values.seal_metadata(metadata, values.encode(metadata)[1], aad)
    stored = orjson.loads(text)
    # The plaintext keys (and their recorded order), and the sealed whole.
    assert set(stored) - {"$t"} == {"source", "step", "user_id", "parents", SEALED_KEY}
    assert "secret" not in text
    assert values.load_metadata(text, aad) == metadata
    with pytest.raises(RowSealError, match="tag"):
        values.load_metadata(text, metadata_aad("t", "", "c2", document))  # another's
    with pytest.raises(RowSealError, match="tag"):  # its checkpoint pointed elsewhere
        moved = document.replace('"2"', '"1"')
        values.load_metadata(text, metadata_aad("t", "", "c1", moved))
    # The document as jsonb gives it back (its keys in another order) still opens.
    again = '{"versions_seen": {}, "channel_versions": {"messages": "2"}}'
    assert values.load_metadata(text, metadata_aad("t", "", "c1", again)) == metadata
    altered = orjson.dumps({**stored, "step": 4}).decode()
    with pytest.raises(RowSealError, match="differs"):
        values.load_metadata(altered, aad)
    with pytest.raises(RowSealError, match="plaintext"):
        values.load_metadata(orjson.dumps(metadata).decode(), aad)
    # A key listed as searchable only later: rows written before still open.
    assert codec(searchable_metadata=["user_id", "note"]).load_metadata(text, aad) == metadata


def test_registry_objects_seal_each_key_on_its_own() -> None:
    values = codec(searchable_metadata=["user_id"], plaintext_channels=["status"])
    text = values.dump_object({"user_id": "u1", "note": "secret"}, sealed_for=("t", "metadata"))
    stored = orjson.loads(text)
    assert stored["user_id"] == "u1" and stored["note"]["$t"] == "aes256gcm"
    assert values.load_object(text, sealed_for=("t", "metadata")) == {
        "user_id": "u1",
        "note": "secret",
    }
    with pytest.raises(RowSealError, match="'note'.*tag"):
        values.load_object(text, sealed_for=("other thread", "metadata"))
    moved = orjson.dumps({"summary": stored["note"]}).decode()  # to "values", same thread
    with pytest.raises(RowSealError, match="tag"):
        values.load_object(moved, sealed_for=("t", "values"))
    assert values.seal_registry_value("t", "values", "status", '"done"') == "done"
    assert values.seal_registry_value("t", "values", "messages", "[]")["$t"] == "aes256gcm"
    assert registry_aad("t", "values", "x") != registry_aad("t", "metadata", "x")


def test_filters_on_sealed_keys_are_refused_by_name() -> None:
    values = codec(searchable_metadata=["user_id"], plaintext_channels=["status"])
    values.check_filter("metadata", ["user_id", "step", "source"])
    values.check_filter("values", ["status"])
    with pytest.raises(EncryptedFieldError, match="'note'.*searchable_metadata"):
        values.check_filter("metadata", ["user_id", "note"])
    with pytest.raises(EncryptedFieldError, match="'messages'.*plaintext_channels"):
        values.check_filter("values", ["messages"])


def test_from_spec_takes_the_plaintext_lists_and_refuses_reserved_keys() -> None:
    spec = f"new:{base64.b64encode(KEY).decode()},old:{base64.b64encode(os.urandom(32)).decode()}"
    enc = Encryption.from_spec(spec, plaintext_channels=["status"], searchable_metadata=["u"])
    assert enc.current == "new" and enc.plaintext_channels == {"status"}
    assert enc.plain_metadata_key("u") and enc.plain_metadata_key("step")
    assert not enc.plain_metadata_key("note")
    with pytest.raises(ValueError, match="searchable"):
        Encryption({"k": KEY}, searchable_metadata=[SEALED_KEY])
