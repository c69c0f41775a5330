"""Encryption at rest: each stored row sealed on its own with AES-256-GCM.

A sealed row keeps its columns' meaning for SQL (encoding, base version,
depth), so delta chains are followed and collected as before, and a step still
writes only what changed; the value itself moves into ``value_bytes`` as
``nonce || ciphertext+tag``, ``value`` (jsonb) is NULL and ``value_type`` is
``aes256gcm:<key id>``. The Redis head carries the row exactly as Postgres
holds it, so it is ciphertext there too.

Invariants (tests/integration/test_encryption.py):

* The row's identity is the associated data: thread, namespace, channel and
  version (value rows, with encoding and base version), or thread, namespace,
  checkpoint, task, idx, task path and channel (pending writes). A row moved to another
  place, or its base pointer or encoding changed, fails the tag.
* Fail closed: with encryption on, a row of a channel that is not listed as
  plaintext must be sealed. A plaintext row, an unknown key id, a short or
  damaged ciphertext are `RowSealError`, which readers report as
  `CorruptRowError` naming the row; never data.
* Several keys are live at once: new rows use `current`, any listed key opens.
* A checkpoint's sealed metadata is bound to its plaintext document too
  (channel versions, versions seen: `metadata_aad`).
* Metadata (a checkpoint's, the registry's) stays a jsonb object: the keys
  SQL reads (LangGraph's own, `STRUCTURAL_METADATA`) and the ones the user
  lists as searchable are plain object keys; a checkpoint's whole metadata,
  those keys included, is sealed under `SEALED_KEY`, and a read takes it from
  there and checks the plain keys against it (`open_metadata`), so an altered
  plain key is refused too. The registry's metadata is merged key by key
  (``||``), so each of its encrypted keys is sealed on its own.
* A sealed jsonb value is ``{"$t": "aes256gcm", "k": key id, "v": base64}``: a
  codec tag no user value can take (a dict with a "$t" key is stored in the
  pair-list form), which a saver without keys refuses as an unknown tag.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import orjson

MARK = "aes256gcm:"
SEALED_TAG = "aes256gcm"
SEALED_KEY = "$sealed"
# LangGraph's own metadata keys that SQL reads (the audit trail and the
# inspector's tree read step and source; prune reads the delta channels in
# counters_since_delta_snapshot; run_id has a column anyway; `colosseum state`
# reads state_version, see versions.py): never sealed, as checkpoint ids are
# not. They hold ids, counters, versions and channel names.
STRUCTURAL_METADATA = frozenset(
    {"source", "step", "parents", "run_id", "counters_since_delta_snapshot", "state_version"}
)
NONCE_BYTES = 12
KEY_BYTES = 32


class RowSealError(ValueError):
    """A row that should be sealed is not, or does not open."""


def is_sealed_json(data: Any) -> bool:
    """Whether parsed jsonb data is a sealed value (see the module docstring)."""
    return type(data) is dict and data.get("$t") == SEALED_TAG


class Sealed(NamedTuple):
    json: str | None
    data: bytes | None
    type: str | None


class Encryption:
    """AES-256-GCM keys for `encryption=` of the savers.

    `keys` maps a key id to 32 key bytes; `current` (default: the first) seals
    new rows, every key opens rows sealed with it. `plaintext_channels` stay
    jsonb, queryable with SQL and by ``threads.search(values=...)``.
    `searchable_metadata` keys stay plaintext in checkpoint and thread
    metadata, for ``list(filter=...)`` and ``threads.search(metadata=...)``.

    Example:
        >>> enc = Encryption({"2026-11": os.urandom(32)}, plaintext_channels=["status"],
        ...                  searchable_metadata=["user_id"])
        >>> saver = ColosseumSaver.from_conn_string(dsn, encryption=enc)
    """

    def __init__(
        self,
        keys: Mapping[str, bytes],
        *,
        current: str | None = None,
        plaintext_channels: Iterable[str] = (),
        searchable_metadata: Iterable[str] = (),
    ) -> None:
        try:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        except ImportError as exc:  # pragma: no cover
            raise ImportError(
                "encryption= needs the `cryptography` package: "
                "pip install 'langgraph-colosseum[encryption]'"
            ) from exc
        if not keys:
            raise ValueError("encryption needs at least one key")
        self._ciphers = {}
        for key_id, key in keys.items():
            if type(key_id) is not str or not key_id or not key_id.isprintable():
                raise ValueError(f"a key id must be a non-empty printable string, got {key_id!r}")
            if not isinstance(key, bytes | bytearray) or len(key) != KEY_BYTES:
                raise ValueError(f"key {key_id!r} must be {KEY_BYTES} bytes (AES-256)")
            self._ciphers[key_id] = AESGCM(bytes(key))
        self.current = next(iter(keys)) if current is None else current
        if self.current not in self._ciphers:
            raise ValueError(f"the current key {self.current!r} is not among the keys")
        self.plaintext_channels = frozenset(plaintext_channels)
        self.searchable_metadata = frozenset(searchable_metadata)
        if self.searchable_metadata & {SEALED_KEY, "$t"}:
            raise ValueError(f"{SEALED_KEY!r} and '$t' cannot be searchable metadata keys")

    @classmethod
    def from_spec(
        cls,
        spec: str,
        *,
        plaintext_channels: Iterable[str] = (),
        searchable_metadata: Iterable[str] = (),
    ) -> Encryption:
        """Keys from text such as an environment variable holds:
        ``id:base64key,id:base64key``, the first one current.

        Example:
            >>> Encryption.from_spec(os.environ["COLOSSEUM_ENCRYPTION_KEYS"])
        """
        import base64
        import binascii

        keys = {}
        for part in spec.split(","):
            key_id, sep, encoded = part.strip().partition(":")
            if not sep:
                raise ValueError("encryption keys are written id:base64key,id:base64key")
            try:
                keys[key_id] = base64.b64decode(encoded, validate=True)
            except binascii.Error:
                raise ValueError(f"key {key_id!r} is not base64") from None
        return cls(
            keys, plaintext_channels=plaintext_channels, searchable_metadata=searchable_metadata
        )

    def __repr__(self) -> str:  # never the keys themselves
        return f"Encryption(key_ids={list(self._ciphers)!r}, current={self.current!r})"

    def encrypts(self, channel: str) -> bool:
        return channel not in self.plaintext_channels

    def plain_metadata_key(self, key: str) -> bool:
        """Whether a metadata key stays plaintext (searchable)."""
        return key in self.searchable_metadata or key in STRUCTURAL_METADATA

    def seal_json(self, text: str, aad: bytes) -> dict[str, str]:
        """JSON text as a sealed jsonb value."""
        nonce = os.urandom(NONCE_BYTES)
        body = self._ciphers[self.current].encrypt(nonce, text.encode(), aad)
        return {"$t": SEALED_TAG, "k": self.current, "v": _b64(nonce + body)}

    def open_json(self, data: Any, aad: bytes) -> str:
        """The JSON text a sealed jsonb value holds; `RowSealError` as `open`."""
        if not is_sealed_json(data):
            raise RowSealError("the value is plaintext where ciphertext is expected")
        key_id, body = data.get("k"), data.get("v")
        if type(key_id) is not str or type(body) is not str:
            raise RowSealError("the sealed value is malformed")
        import base64
        import binascii

        try:
            raw = base64.b64decode(body, validate=True)
        except binascii.Error:
            raise RowSealError("the sealed value is not base64") from None
        return self._decrypt(raw, MARK + key_id, aad).decode()

    def seal(
        self, encoding: str, json: str | None, data: bytes | None, type_: str | None, aad: bytes
    ) -> Sealed:
        nonce = os.urandom(NONCE_BYTES)
        body = self._ciphers[self.current].encrypt(nonce, _plain(json, data, type_), aad)
        return Sealed(None, nonce + body, MARK + self.current)

    def open(self, json: Any, data: bytes | None, type_: str | None, aad: bytes) -> Sealed:
        """The row's plaintext columns (json as text); `RowSealError` if it is not sealed
        or does not open."""
        if json is not None and is_sealed(type_):
            raise RowSealError("the row's ciphertext is missing or truncated")
        return _unplain(self._decrypt(data, type_, aad))

    def _decrypt(self, data: bytes | None, type_: str | None, aad: bytes) -> bytes:
        if type_ is None or not type_.startswith(MARK):
            raise RowSealError("the row is plaintext where ciphertext is expected")
        key_id = type_[len(MARK) :]
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise RowSealError(f"the row is sealed with key id {key_id!r}, which is not configured")
        if data is None or len(data) < NONCE_BYTES + 16:
            raise RowSealError("the row's ciphertext is missing or truncated")
        from cryptography.exceptions import InvalidTag

        try:
            return cipher.decrypt(data[:NONCE_BYTES], data[NONCE_BYTES:], aad)
        except InvalidTag:
            raise RowSealError(
                "the row's authentication tag does not match (altered, or moved from another row)"
            ) from None

    def is_current(self, type_: str | None) -> bool:
        return type_ == MARK + self.current


def is_sealed(type_: str | None) -> bool:
    return type_ is not None and type_.startswith(MARK)


def _b64(data: bytes) -> str:
    import base64

    return base64.b64encode(data).decode("ascii")


def _plain(json: str | None, data: bytes | None, type_: str | None) -> bytes:
    # One tag byte says which columns the row had: j(son), s(erde), n(othing).
    if json is not None:
        return b"j" + json.encode()
    if data is not None or type_ is not None:
        return b"s" + (type_ or "").encode() + b"\0" + (data or b"")
    return b"n"


def _unplain(plain: bytes) -> Sealed:
    tag, body = plain[:1], plain[1:]
    if tag == b"j":
        return Sealed(body.decode(), None, None)
    if tag == b"s":
        type_, _, data = body.partition(b"\0")
        return Sealed(None, data, type_.decode())
    return Sealed(None, None, None)


def value_aad(
    thread_id: str, checkpoint_ns: str, channel: str, version: str, encoding: str, base: str | None
) -> bytes:
    return orjson.dumps(["v", thread_id, checkpoint_ns, channel, version, encoding, base])


def write_aad(
    thread_id: str,
    checkpoint_ns: str,
    checkpoint_id: str,
    task_id: str,
    idx: int,
    task_path: str,
    channel: str,
    encoding: str,
) -> bytes:
    # task_path is bound too: it orders a step's writes (writes_sort_key), so
    # an exchanged path would reorder what the writes apply.
    return orjson.dumps(
        ["w", thread_id, checkpoint_ns, checkpoint_id, task_id, idx, task_path, channel, encoding]
    )


def frozen_aad(
    thread_id: str,
    checkpoint_ns: str,
    checkpoint_id: str,
    channel: str,
    seq: int,
    task_id: str | None,
    encoding: str,
) -> bytes:
    return orjson.dumps(
        ["f", thread_id, checkpoint_ns, checkpoint_id, channel, seq, task_id, encoding]
    )


def metadata_aad(
    thread_id: str,
    checkpoint_ns: str,
    checkpoint_id: str,
    document: str,
) -> bytes:
    """A checkpoint's sealed metadata, bound to the checkpoint's plaintext
    document too: its `channel_versions` and `versions_seen` (`document` is
    its JSON text, as stored or as jsonb gives it back). A checkpoint pointed
    at an older version of a channel, or without one, then fails the tag
    rather than read as another state. (Not the parent column: a re-put of
    the checkpoint keeps the first one's, see sql.PUT.)"""
    try:
        raw = orjson.loads(document)
    except orjson.JSONDecodeError:
        raise RowSealError("the checkpoint document is not JSON") from None
    if type(raw) is not dict:
        raise RowSealError("the checkpoint document is not an object")
    # Sorted keys: jsonb gives an object's keys back in its own order.
    plain = orjson.dumps(
        [raw.get("channel_versions"), raw.get("versions_seen")], option=orjson.OPT_SORT_KEYS
    )
    return orjson.dumps(["m", thread_id, checkpoint_ns, checkpoint_id]) + plain


def registry_aad(thread_id: str, part: str, key: str) -> bytes:
    """A registry row's sealed value: `part` is "metadata" or "values"."""
    return orjson.dumps(["t", thread_id, part, key])
