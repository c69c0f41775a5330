"""The bases a process knows: the last stored list/dict value of each channel.

`put` diffs a new value against the base of its (thread, namespace, channel)
to store only what changed. An entry is a private copy decoded from what was
stored, so nothing the graph does to its live objects can alter it. The cache is
only an optimisation: a miss (another worker wrote the last version, the
process restarted, the entry was evicted) costs one full row, never
correctness. It is bounded by the encoded size of the values it holds.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any, NamedTuple

from langgraph_colosseum._core.shapes import Base

ChannelKey = tuple[str, str, str]  # (thread_id, checkpoint_ns, channel)

DEFAULT_MAX_BYTES = 64 * 1024 * 1024


class BaseCache:
    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[ChannelKey, Base] = OrderedDict()
        self._bytes = 0
        # The channels held per (thread, namespace), for `of_namespace`.
        self._channels: dict[tuple[str, str], set[str]] = {}
        # Guards the dicts only (never held across I/O), so no statement waits on it.
        self._lock = threading.Lock()

    def get(self, key: ChannelKey) -> Base | None:
        with self._lock:
            base = self._entries.get(key)
            if base is not None:
                self._entries.move_to_end(key)
            return base

    def of_namespace(self, thread_id: str, checkpoint_ns: str) -> dict[str, Base]:
        """The bases held for one (thread, namespace), by channel."""
        with self._lock:
            channels = self._channels.get((thread_id, checkpoint_ns), ())
            return {ch: self._entries[(thread_id, checkpoint_ns, ch)] for ch in channels}

    def put(self, key: ChannelKey, base: Base) -> None:
        size = base.full_bytes + base.delta_bytes
        if size > self.max_bytes:
            self.forget([key])
            return
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old.full_bytes + old.delta_bytes
            self._entries[key] = base
            self._channels.setdefault(key[:2], set()).add(key[2])
            self._bytes += size
            while self._bytes > self.max_bytes:
                evicted_key, evicted = self._entries.popitem(last=False)
                self._unindex(evicted_key)
                self._bytes -= evicted.full_bytes + evicted.delta_bytes

    def forget(self, keys: Iterable[ChannelKey]) -> None:
        with self._lock:
            for key in keys:
                old = self._entries.pop(key, None)
                if old is not None:
                    self._unindex(key)
                    self._bytes -= old.full_bytes + old.delta_bytes

    def _unindex(self, key: ChannelKey) -> None:
        channels = self._channels.get(key[:2])
        if channels is not None:
            channels.discard(key[2])
            if not channels:
                del self._channels[key[:2]]

    def forget_threads(self, thread_ids: Iterable[str]) -> None:
        threads = set(thread_ids)
        with self._lock:
            doomed = [key for key in self._entries if key[0] in threads]
        self.forget(doomed)


class Seen(NamedTuple):
    """A checkpoint read once, and nothing of it kept (see `CheckpointMemo`)."""

    digest: bytes  # sql._DIGEST of the checkpoint read
    checkpoint_id: str

    @property
    def size(self) -> int:
        # What the entry itself costs (a tuple, its digest and id; its key
        # and the dict's node are counted by CheckpointMemo, `_cost`): the
        # bound counts seen entries too, or a process reading many threads
        # once each would keep one each forever.
        return 190 + len(self.checkpoint_id)


class Remembered(NamedTuple):
    """A checkpoint as a read decoded it: everything of it but its pending writes.

    `values` are private objects (a base's own, or copies); the document has no
    channel_values (see store._checkpoint_document)."""

    digest: bytes  # sql._DIGEST of the checkpoint it was decoded from
    checkpoint_id: str
    document: dict[str, Any]
    metadata: dict[str, Any]
    values: dict[str, Any]
    size: int  # the encoded size it stands for


class CheckpointMemo:
    """The checkpoint each (thread, namespace) was last read at, decoded.

    A read of that thread sends the digest of the remembered checkpoint's
    texts, and Postgres leaves out its document, metadata and value rows
    while the latest (or asked-for) checkpoint still has those texts
    (sql._DIGEST): a head read again and again (a UI polling
    `get_state`) is decoded once. Which checkpoint it is, and whether it is
    there at all, comes from Postgres every time, in the read's own snapshot,
    with its pending writes: a deleted or rewritten checkpoint is never
    served from here; an entry only saves decoding. Its value rows are taken
    as what their versions name, as the bases take them. Callers get fresh
    copies. Bounded by the encoded size of what it holds, like the bases.

    A row version read for the first time is only noted (`Seen`); the second
    read of it keeps what it decoded (`Remembered`). Most heads are read
    once (a run reads the head the last run wrote, then moves it), and
    keeping each would cost private copies of every head read for nothing.
    """

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[tuple[str, str], Seen | Remembered] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()  # guards the dict only, never held across I/O

    def peek(self, thread_id: str, checkpoint_ns: str) -> Seen | Remembered | None:
        """The entry itself, shared: what is handed out of it is copied (store.get_tuple)."""
        with self._lock:
            return self._entries.get((thread_id, checkpoint_ns))

    def put(self, thread_id: str, checkpoint_ns: str, entry: Seen | Remembered) -> None:
        key = (thread_id, checkpoint_ns)
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= _cost(key, old)
            if _cost(key, entry) > self.max_bytes:
                return
            self._entries[key] = entry
            self._bytes += _cost(key, entry)
            while self._bytes > self.max_bytes:
                evicted_key, evicted = self._entries.popitem(last=False)
                self._bytes -= _cost(evicted_key, evicted)

    def touch(self, thread_id: str, checkpoint_ns: str) -> None:
        with self._lock:
            if (thread_id, checkpoint_ns) in self._entries:
                self._entries.move_to_end((thread_id, checkpoint_ns))

    def forget_threads(self, thread_ids: Iterable[str]) -> None:
        threads = set(thread_ids)
        with self._lock:
            for key in [k for k in self._entries if k[0] in threads]:
                self._bytes -= _cost(key, self._entries.pop(key))


def _cost(key: tuple[str, str], entry: Seen | Remembered) -> int:
    """An entry's size with its key's and its node's in the ordered dict: with
    36-character ids, a seen entry counts 502 bytes where tracemalloc found
    about 430 (CPython 3.11)."""
    return entry.size + 240 + len(key[0]) + len(key[1])
