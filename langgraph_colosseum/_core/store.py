"""Every checkpointer operation, written once, as a sans-IO generator.

`ColosseumSaver` and `AsyncColosseumSaver` only drive these generators over
psycopg (see `io.py`). Nothing here opens a socket.
"""

from __future__ import annotations

import copy
import functools
import logging
import math
import random
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import timedelta
from typing import Any, NamedTuple

import orjson
from langchain_core.runnables import RunnableConfig
from langgraph._internal._constants import NS_END, NS_SEP
from langgraph.checkpoint.base import (
    EXCLUDED_METADATA_KEYS,
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    PendingWrite,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.types import ERROR, INTERRUPT

from langgraph_colosseum._core import schema, shapes, sql
from langgraph_colosseum._core.arrays import IntArray, TextArray
from langgraph_colosseum._core.bases import (
    DEFAULT_MAX_BYTES,
    BaseCache,
    ChannelKey,
    CheckpointMemo,
    Remembered,
    Seen,
)
from langgraph_colosseum._core.codec import TAG, in_jsonb_order, is_object_key
from langgraph_colosseum._core.crypt import (
    RowSealError,
    frozen_aad,
    is_sealed,
    metadata_aad,
    value_aad,
    write_aad,
)
from langgraph_colosseum._core.expiry import ReadTouches
from langgraph_colosseum._core.guard import fence_of
from langgraph_colosseum._core.hot import CorruptHeadError, HotHead, write_field
from langgraph_colosseum._core.io import (
    CACHE_UNAVAILABLE,
    Ahead,
    CacheCall,
    CacheDrop,
    Collect,
    Emit,
    Operation,
    Query,
    Sleep,
    Transaction,
)
from langgraph_colosseum._core.keys import checked_key, shown
from langgraph_colosseum._core.runs import Read, Runs, RunWrites
from langgraph_colosseum._core.threads import UnreadableRows
from langgraph_colosseum._core.values import (
    DELTA_ENCODINGS,
    EMPTY,
    EMPTY_ENCODING,
    JSON,
    Materializer,
    StoredValue,
    Unparsed,
    ValueCodec,
    ValueKey,
    ValueMemo,
    ValueRow,
    Where,
    columns,
    corrupt_row,
    fresh_copy,
    not_storable,
    parse_json,
    parse_value_rows,
)
from langgraph_colosseum._core.versions import StateVersions
from langgraph_colosseum.errors import (
    CheckpointDeletedError,
    CodecError,
    CorruptRowError,
    InvalidConfigError,
    LeaseLostError,
    SchemaVersionError,
    ThreadBusyError,
    ThreadConflictError,
    UnsupportedValueError,
    ValueNotStorableError,
)

DEFAULT_PAGE_SIZE = 100
# `list` pages double from `page_size` up to this many checkpoints: a caller
# that stops early paid for one small page, and a history read to the end
# costs two statements per 500 checkpoints, not per hundred, sent as one
# round trip from the second page on (see `list`); memory stays bounded by
# three pages (one being read, the next, and the one after it on its way)
# whatever the thread's length.
# Not 1,000, as it was: the objects a page keeps alive until it is read are
# what Python's cyclic GC walks over and over, and a full list() of 20,000
# tiny checkpoints cost 0.44-0.47 s of client CPU in pages of 1,000 against
# 0.35-0.37 s in pages of 500 (a looping graph's: 0.80-0.87 against 0.73-0.81 s;
# 0.34-0.39 and 0.69-0.73 s in pages of 250, for twice the round trips).
MAX_PAGE_SIZE = 500

logger = logging.getLogger("langgraph_colosseum")


def thread_of(config: RunnableConfig) -> tuple[str, str]:
    """(thread_id, checkpoint_ns) of a config, with a clear error when absent."""
    configurable = config.get("configurable") or {}
    thread_id = configurable.get("thread_id")
    if thread_id is None or thread_id == "":
        raise InvalidConfigError(
            "the config has no configurable.thread_id; pass "
            '{"configurable": {"thread_id": ...}} to identify the thread'
        )
    thread_id = checked_key("thread_id", str(thread_id))
    checkpoint_ns = configurable.get("checkpoint_ns") or ""
    if checkpoint_ns:
        checked_key("checkpoint_ns", checkpoint_ns, thread_id)
    return thread_id, checkpoint_ns


def checkpoint_id_of(config: RunnableConfig, thread_id: str) -> str | None:
    """configurable.checkpoint_id, if any, checked as a key (see `checked_key`)."""
    checkpoint_id = get_checkpoint_id(config)
    return checked_key("checkpoint_id", checkpoint_id, thread_id) if checkpoint_id else None


def checkpoint_config(thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": checkpoint_id,
        }
    }


# The random tail makes a version name one value forever, which the base cache
# and the Redis rows rely on. It is drawn from the OS, not from `random`: an
# application that seeds `random` (or forks after importing us) must not make
# two workers, or a deleted and a recreated thread, draw the same tails.
_TAILS = random.SystemRandom()


# Versions have InMemorySaver's form, "{:032}.{random():016}" (about 51
# characters), or the short form, 12 digits, a dot and 64 random bits in hex
# ("000000000042.9f3c0e6b1d2a4c57", 29 characters); a thread keeps the form it
# began with. A version is stored about eight times a checkpoint, and the short
# form saves 246 kB of chat-200-delta's 3.52 MB. New threads get it only with
# `compact_forms=True`: LangGraph takes each new version from the largest of a
# checkpoint's versions and compares versions as text, so a release that does
# not continue the short form (those before 2026-12-04's, which write every
# version long) would give a short thread a long version, which sorts below
# the short ones, and the thread's triggers would stop, silently. Every
# process that uses the database must run a release that continues it first.
SHORT_VERSION_DIGITS = 12
_LONG_VERSION_DIGITS = 32


def next_version(current: str | int | float | None, compact: bool = False) -> str:
    """The version after `current`: zero-padded so that a thread's versions
    sort as text, with a random tail that makes the name one value forever;
    in the width of `current`, and for a new channel (None) the short width
    when `compact` (see SHORT_VERSION_DIGITS).

        >>> next_version("00000000000000000000000000000007.0.42")  # doctest: +SKIP
        '00000000000000000000000000000008.0.8444218515250481'
        >>> next_version("000000000007.5be2a3c90f1e77d4")  # doctest: +SKIP
        '000000000008.9f3c0e6b1d2a4c57'
    """
    if current is None:
        # A short first version sorts above every long one a thread already
        # has (its twelfth digit is 1, theirs 0), as LangGraph's forced
        # snapshot of a never-written channel needs: the thread goes on short.
        number, short = 0, compact
    elif isinstance(current, (int, float)):
        number, short = int(current), False
    else:
        prefix = current.split(".")[0]
        number = int(prefix)
        short = len(prefix) == SHORT_VERSION_DIGITS
    if short:
        return f"{number + 1:0{SHORT_VERSION_DIGITS}}.{_TAILS.getrandbits(64):016x}"
    return f"{number + 1:0{_LONG_VERSION_DIGITS}}.{_TAILS.random():016}"


class CheckpointStore:
    """The checkpointer's logic over the `colosseum_*` tables."""

    def __init__(
        self,
        codec: ValueCodec,
        *,
        page_size: int = DEFAULT_PAGE_SIZE,
        snapshot_every: int = shapes.DEFAULT_SNAPSHOT_EVERY,
        base_cache_bytes: int = DEFAULT_MAX_BYTES,
        compact_forms: bool = False,
        inline_values: bool = False,
    ) -> None:
        if snapshot_every < 1:
            raise ValueError(f"snapshot_every must be at least 1, got {snapshot_every}")
        self.codec = codec
        self.page_size = page_size
        self.snapshot_every = snapshot_every
        # Write the smaller stored forms that releases since 2026-12-04 read
        # (short versions, the channel order by place; README, "Stored forms
        # change in two releases"); every release reads both forms.
        self.compact_forms = compact_forms
        # Keep small scalar values in each checkpoint's document as well as in
        # their rows, so that reads need no row for them (releases since
        # 2026-12-07 read it; README, "Stored forms change in two releases").
        # Never under encryption= (a document is not sealed) nor for a serde's
        # values (bytes, not the codec's JSON).
        self.inline_values = inline_values and codec.encryption is None and codec.jsonb_values
        self.bases = BaseCache(base_cache_bytes)
        self.seeds = ValueMemo(base_cache_bytes)
        self.memo = CheckpointMemo(base_cache_bytes)  # the heads read (see get_tuple)
        self.runs = Runs()  # the LangGraph runs writing through here (see runs.py)
        self.thread_ttl: timedelta | None = None  # set by Retention (threads.py)
        self.read_touches = ReadTouches()  # reads that pushed an expiry back (expiry.py)
        self.hot: HotHead | None = None  # the Redis hot head, when a cache is configured
        self.recorded_stale = False  # this process recorded heads Redis refused (see below)
        self.unreadable_rows = UnreadableRows()  # registry rows `threads.search` skipped
        self.versions: StateVersions | None = None  # the state schema (saver.versioned)
        # on_conflict="raise": a run that read the latest checkpoint may only
        # continue from it while no other run has (sql._OPTIMISTIC)
        self.on_conflict = False
        # seconds a subgraph task another run holds (sql._OPTIMISTIC) lasts
        # after that run's last write under it; None: until the head moves
        self.on_conflict_hold: float | None = None

    def with_codec(self, codec: ValueCodec) -> CheckpointStore:
        """The same store reading and writing through `codec`, with caches of its own:
        a decoded value depends on the codec that decoded it."""
        clone = copy.copy(self)
        clone.codec = codec
        clone.bases = BaseCache(self.bases.max_bytes)
        clone.seeds = ValueMemo(self.seeds.max_bytes)
        clone.memo = CheckpointMemo(self.memo.max_bytes)
        return clone

    def with_versions(self, versions: StateVersions) -> CheckpointStore:
        """The same store (and caches: they hold stored values, never migrated
        ones) reading and writing state of `versions`' version. With field
        renames (`Migration.fields`) values decode differently: own caches."""
        clone = copy.copy(self)
        if versions.field_renames:
            clone = self.with_codec(self.codec.renaming_fields(versions.field_renames))
        clone.versions = versions
        return clone

    def forget_threads(self, thread_ids: Iterable[str]) -> None:
        """Drop what this process holds decoded of these threads (deleted,
        rewritten or copied over: a base must not outlive its rows)."""
        thread_ids = list(thread_ids)
        self.bases.forget_threads(thread_ids)
        self.seeds.forget_threads(thread_ids)
        self.memo.forget_threads(thread_ids)

    def forget_decoded(self) -> None:
        """Drop every decoded value held: the codec now revives other classes."""
        self.bases = BaseCache(self.bases.max_bytes)
        self.seeds = ValueMemo(self.seeds.max_bytes)
        self.memo = CheckpointMemo(self.memo.max_bytes)

    # ------------------------------------------------------------ schema

    def migrate(self) -> Operation[int]:
        """Apply missing migrations; return the schema version.

        One transaction under an advisory lock, so concurrent callers serialise
        and the second finds nothing left to do.
        """
        queries = [
            Query(schema.LOCK, {"key": schema.ADVISORY_LOCK_KEY}, fetch=False),
            Query(schema.CREATE_SCHEMA_TABLE, fetch=False),
        ]
        for number, migration in enumerate(schema.MIGRATIONS, start=1):
            queries.append(Query(_conditional_migration(number, migration), fetch=False))
        queries.append(Query(schema.CURRENT_VERSION))
        results = yield Transaction(tuple(queries))
        version = int(results[-1][0][0])
        if version > schema.LATEST_VERSION:
            raise SchemaVersionError(database_version=version, code_version=schema.LATEST_VERSION)
        # The incarnation token the Redis heads are bound to: made here once.
        if self.hot is not None:
            yield from self._learn_incarnation(None, -math.inf)
        else:
            yield Query(sql.ENSURE_INCARNATION)
        return version

    # ------------------------------------------------------------ reads

    def get_tuple(self, config: RunnableConfig) -> Operation[CheckpointTuple | None]:
        thread_id, checkpoint_ns = thread_of(config)
        checkpoint_id = checkpoint_id_of(config, thread_id)
        # Only the root namespace's read begins a run: a subgraph's loads its
        # namespace mid-run, after a deletion its run may have read before.
        run = self.runs.of(config, begins=not checkpoint_ns)
        seq = None  # set when the hot head missed and may be refilled from Postgres
        if self.hot is not None:
            yield from self.bound_incarnation()
        # Values this process holds decoded (its bases) are copied, not fetched.
        bases = self.bases.of_namespace(thread_id, checkpoint_ns)
        if self.hot is not None:
            hit, found, seq, claim, deleted = yield from self._hot_read(
                thread_id, checkpoint_ns, checkpoint_id, bases
            )
            if hit:
                if run is not None:
                    run.note_seen(thread_id, deleted)
                if self.on_conflict:
                    self._note_read(config, thread_id, checkpoint_ns, checkpoint_id, found, claim)
                if found is not None and self.thread_ttl is not None:
                    yield from self._touch_on_hit(thread_id)
                return found
            if checkpoint_id:
                seq = None  # only the latest checkpoint is ever refilled
            elif seq is not None:
                bases = {}  # a refill of the hot head must carry every row
        known = {channel: base.version for channel, base in bases.items()}
        # The checkpoint this process last decoded here, if it is the one asked
        # for: Postgres sends its document, metadata and values only if its row
        # changed since (sql._DIGEST). Not for a refill, which carries every row.
        memo = self.memo.peek(thread_id, checkpoint_ns) if seq is None else None
        if memo is not None and checkpoint_id and memo.checkpoint_id != checkpoint_id:
            memo = None
        kept = memo if type(memo) is Remembered else None
        params = {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "ttl": self.thread_ttl,
            "known": orjson.dumps(known).decode(),
            "memo": kept.digest if kept is not None else b"",
        }
        # With a retention policy, reading a thread also pushes its expiry back.
        touch = sql.TOUCH_THREAD if self.thread_ttl is not None else ""
        epoch = 0
        started = self.read_touches.clock()
        # Each read returns the thread's deletion stamp, from its snapshot,
        # before the checkpoint (NULL columns: none); a refill its deletion
        # epoch first.
        if checkpoint_id:
            ((deleted, *found),) = yield from _on_generic_plan(
                Query(
                    touch + sql.GET_TUPLE_BY_ID,
                    {**params, "checkpoint_id": checkpoint_id},
                    prepare=True,
                )
            )
        elif seq is not None:
            ((epoch, deleted, *found),) = yield from _on_generic_plan(
                Query(touch + sql.GET_TUPLE_LATEST_FOR_HEAD, params, prepare=True)
            )
        else:
            ((deleted, *found),) = yield from _on_generic_plan(
                Query(touch + sql.GET_TUPLE_LATEST, params, prepare=True)
            )
        if run is not None:
            run.note_seen(thread_id, deleted)
        rows = [tuple(found)] if found[0] is not None else []
        if self.thread_ttl is not None:
            self.read_touches.record(thread_id, started, self.thread_ttl.total_seconds())
        row = rows[0] if rows else None
        value_rows = []
        result = None
        if row is not None and kept is not None and row[_REMEMBERED]:
            self.memo.touch(thread_id, checkpoint_ns)
            row = _expanded(row)
            result = self._assembled(
                row,
                fresh_copy(kept.document),
                fresh_copy(kept.metadata),
                {channel: fresh_copy(value) for channel, value in kept.values.items()},
                resume=True,
            )
        elif row is not None:
            value_rows = parse_value_rows(row[0], row[1], row[_CHECKPOINT_COLUMNS])
            value_rows_text, digest = row[_CHECKPOINT_COLUMNS], row[_DIGEST]
            row = _expanded(row)
            document = self._load_document(row)
            values = self._materializer(thread_id, checkpoint_ns, document, bases)
            values.add(value_rows)
            metadata, channel_values = self._decoded(row, document, values)
            self._remember_bases(row[0], row[1], document, values)
            if seq is None:
                self._remember_read(
                    row, digest, memo, document, metadata, channel_values, value_rows_text
                )
            result = self._assembled(row, document, metadata, channel_values, resume=True)
        # Only what read back cleanly goes to Redis: a corrupt row stays a miss.
        if seq is not None:
            assert self.hot is not None
            yield self.hot.refill(thread_id, checkpoint_ns, seq, row, value_rows, epoch, deleted)
        if self.on_conflict:
            claim = _claim_of(row) if row is not None else None
            self._note_read(config, thread_id, checkpoint_ns, checkpoint_id, result, claim)
        return result

    def _note_read(
        self,
        config: RunnableConfig,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str | None,
        found: CheckpointTuple | None,
        claim: str | None,
    ) -> None:
        """on_conflict: remember how the run reading began (sql._OPTIMISTIC)."""
        run = self.runs.of(config)
        if run is not None:
            run.note_read(thread_id, checkpoint_ns, Read(
                latest=not checkpoint_id,
                checkpoint_id=found.checkpoint["id"] if found is not None else None,
                claim=claim,
            ))  # fmt: skip

    def _touch_on_hit(self, thread_id: str) -> Operation[None]:
        """A read Redis served pushes the thread's expiry back in Postgres too,
        at most once per HIT_TOUCH_EVERY of the TTL per process (expiry.py)."""
        assert self.thread_ttl is not None
        ttl = self.thread_ttl.total_seconds()
        if not self.read_touches.due(thread_id, ttl):
            return
        started = self.read_touches.clock()
        params = {"thread_id": thread_id, "ttl": self.thread_ttl}
        yield Query(sql.TOUCH_THREAD + sql.TOUCHED, params, fetch=False, prepare=True)
        self.read_touches.record(thread_id, started, ttl)

    def _hot_read(
        self,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str | None,
        bases: Mapping[str, shapes.Base],
    ) -> Operation[tuple[bool, CheckpointTuple | None, Any, str | None, str | None]]:
        """(hit, tuple, seq, claim, deleted): the head from Redis (and the claim
        on it, see sql._OPTIMISTIC, and the thread's deletion stamp it was read
        with, see sql.THREAD_DELETED), or the counter a refill must match.

        Values this process already holds decoded (its bases) are not sent
        again: the reply leaves their rows out and they are copied here.
        """
        assert self.hot is not None
        known = {channel: base.version for channel, base in bases.items()}
        reply = yield self.hot.read(thread_id, checkpoint_ns, checkpoint_id or "", known)
        if reply is CACHE_UNAVAILABLE:
            return False, None, None, None, None
        try:
            seq, head, refillable = self.hot.parse_read(thread_id, checkpoint_ns, reply)
            if head is None:
                return False, None, seq if refillable else None, None, None
            if not head.row:
                return True, None, None, None, head.deleted  # the namespace has no checkpoint
            document = self._load_document(head.row)
            values = self._materializer(thread_id, checkpoint_ns, document, bases)
            values.add(head.value_rows)
            result = self._checkpoint_tuple(head.row, document, values, resume=True)
        except (CorruptHeadError, CorruptRowError) as exc:
            # Postgres is intact: a head that does not decode, or is not what
            # it claims, is dropped (once: the next read refills it) and missed.
            logger.warning(
                "dropped the hot head of thread %r%s from Redis and read Postgres: %s",
                thread_id,
                f", namespace {checkpoint_ns!r}" if checkpoint_ns else "",
                exc,
            )
            yield from self._drop_heads([thread_id])
            return False, None, None, None, None
        self._remember_bases(thread_id, checkpoint_ns, document, values)
        claim = _claim_of(head.row) if self.on_conflict else None
        return True, result, None, claim, head.deleted

    def _materializer(
        self,
        thread_id: str,
        checkpoint_ns: str,
        document: dict[str, Any],
        bases: Mapping[str, shapes.Base],
    ) -> Materializer:
        """A Materializer holding copies of the bases at the versions `document` names.

        The read left those rows out (they were `known`); a base at another
        version was not left out, and is not used.
        """
        values = Materializer(self.codec)
        for channel, version in document["channel_versions"].items():
            base = bases.get(channel)
            if base is not None and base.version == str(version):
                key = (thread_id, checkpoint_ns, channel, base.version)
                values.values[key] = fresh_copy(base.value)
        return values

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: Mapping[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Operation[None]:
        """Emit matching tuples newest first, fetching one page per round trip."""
        where: list[str] = []
        params: dict[str, Any] = {}
        if config is not None:
            configurable = config.get("configurable") or {}
            if configurable.get("thread_id") is not None:
                where.append(sql.LIST_WHERE_THREAD)
                params["thread_id"] = checked_key("thread_id", str(configurable["thread_id"]))
            # As InMemorySaver: no checkpoint_ns key means every namespace.
            if configurable.get("checkpoint_ns") is not None:
                where.append(sql.LIST_WHERE_NS)
                params["checkpoint_ns"] = checked_key(
                    "checkpoint_ns", configurable["checkpoint_ns"]
                )
            if checkpoint_id := configurable.get("checkpoint_id"):
                where.append(sql.LIST_WHERE_ID)
                params["checkpoint_id"] = checked_key("checkpoint_id", checkpoint_id)
        if before is not None and (before_id := get_checkpoint_id(before)):
            where.append(sql.LIST_WHERE_BEFORE)
            params["before"] = checked_key("checkpoint_id", before_id)
        self.codec.check_filter("metadata", filter or ())
        compared_in_python: dict[str, Any] = {}
        for i, (key, value) in enumerate((filter or {}).items()):
            params[f"mk{i}"] = key
            params[f"mv{i}"] = self.codec.dump_json(value, filter=True)
            if params[f"mv{i}"] == self.codec.dump_json(value):
                where.append(sql.LIST_WHERE_METADATA.format(i=i))
            else:  # it holds a dict whose stored form may record a key order
                where.append(sql.LIST_WHERE_METADATA_CONTAINS.format(i=i))
                compared_in_python[key] = value
        if "thread_id" in params and "checkpoint_ns" in params:
            order, cursor_sql = sql.LIST_ORDER_IN_NAMESPACE, sql.LIST_CURSOR_IN_NAMESPACE
        elif "thread_id" in params:
            order, cursor_sql = sql.LIST_ORDER_IN_THREAD, sql.LIST_CURSOR_IN_THREAD
        else:
            order, cursor_sql = sql.LIST_ORDER_ANYWHERE, sql.LIST_CURSOR_ANYWHERE
        remaining = limit
        if remaining is not None and remaining <= 0:
            return
        # Rebuilt versions carry over from page to page: the next (older) page's
        # values are mostly the bases of this one's.
        values = Materializer(self.codec)
        sizes = _page_sizes(self.page_size)
        size = _page_size(sizes, remaining)
        rows = yield self._list_page(where, params, order, cursor_sql, None, size)
        documents = [self._load_document(row) for row in rows]
        # The first page alone, and its values alone: a caller that reads only
        # the first page fetches nothing more.
        fetch = self._missing_values(values, rows, documents)
        found = (yield fetch) if fetch is not None else None

        def next_requests(next_rows: list, next_size: int, left: int | None) -> _NextPage:
            """What reading the page after this one takes: its documents, the
            values it lacks, and the rows of the page after it, if the limit
            (`left` items after both pages) will surely need them."""
            next_documents = [self._load_document(row) for row in next_rows]
            fetch = self._missing_values(values, rows + next_rows, documents + next_documents)
            after, after_size = None, 0
            if len(next_rows) == next_size and (left is None or left > 0):
                after_size = _page_size(sizes, left)
                after = self._list_page(where, params, order, cursor_sql, next_rows[-1], after_size)
            return _NextPage(next_rows, next_size, next_documents, fetch, after, after_size)

        if found is not None:
            values.add(_value_row(*row) for row in found)
        # The page after the one being emitted, and the request reading its
        # values with the rows of the page after it, sent ahead.
        following: _NextPage | None = None
        ahead: Any = None
        while True:
            # From the third page on, a page is emitted while Postgres reads
            # the next one's values and the rows of the one after (io.Ahead):
            # the reader waited for every page in turn before (long-20k: a
            # third of a full list's 0.78 s). What a limit will not surely
            # need is not read ahead (a filter compared in Python may drop
            # items, never add them).
            if following is not None and following.requests:
                ahead = yield Ahead(Transaction(following.requests))
            for row, document in zip(rows, documents):
                # Split here, not for the whole page: a page's rows live until
                # it is read, and each object kept alive that long is one more
                # for Python's cyclic GC to walk (a third of a long list's CPU).
                item = self._checkpoint_tuple(_expanded(row), document, values)
                if all(item.metadata.get(k) == v for k, v in compared_in_python.items()):
                    yield Emit(item)
                    if remaining is not None:
                        remaining -= 1
            if len(rows) < size or (remaining is not None and remaining <= 0):
                return
            if following is None:
                # The next page was not read ahead (the second page, or one a
                # limit might not have needed): read it now, then its values
                # and the rows of the page after it, together.
                next_size = _page_size(sizes, remaining)
                next_rows = yield self._list_page(
                    where, params, order, cursor_sql, rows[-1], next_size
                )
                left = None if remaining is None else remaining - next_size
                following = next_requests(next_rows, next_size, left)
                results = (yield Transaction(following.requests)) if following.requests else []
            else:
                results = (yield Collect(ahead)) if following.requests else []
            rows, size, documents = following.rows, following.size, following.documents
            if following.fetch is not None:
                values.add(_value_row(*row) for row in results[0])
            if following.after is None:
                following = None
            else:
                after_size = following.after_size
                left = None if remaining is None else remaining - size - after_size
                following = next_requests(results[-1], after_size, left)

    @staticmethod
    def _list_page(
        where: list[str],
        params: dict[str, Any],
        order: str,
        cursor_sql: str,
        after: tuple | None,
        page_size: int,
    ) -> Query:
        """The statement of one `list` page: `page_size` checkpoints after the
        checkpoint row `after` (the last of the page before; None: the first)."""
        page_where = list(where)
        page_params = {**params, "page_size": page_size}
        if after is not None:
            page_where.append(cursor_sql)
            page_params.update(cursor_id=after[2], cursor_thread=after[0], cursor_ns=after[1])
        query = sql.LIST_PAGE.format(where=" AND ".join(page_where) or "true", order=order)
        return Query(query, page_params, prepare=True)

    def _missing_values(
        self, values: Materializer, rows: list[tuple], documents: list[dict[str, Any]]
    ) -> Query | None:
        """The statement fetching what `values` lacks to rebuild every version the
        checkpoints name (the rows and their bases, stopping at the versions it
        already rebuilt), or None; `values` forgets versions no longer named."""
        needed: set[ValueKey] = set()
        for row, document in zip(rows, documents):
            inline = document.get("channel_values", _NOTHING_INLINE)
            for channel, version in document["channel_versions"].items():
                if channel not in inline:
                    needed.add((row[0], row[1], channel, str(version)))
        values.keep_only(needed)
        missing = [key for key in needed if not values.knows(key)]
        if not missing:
            return None
        return _value_chains(missing, known=list(values.values))

    def channel_values(
        self, thread_id: str, checkpoint_ns: str, channel: str, versions: Sequence[str]
    ) -> Operation[dict[str, Any]]:
        """The values of one channel at several versions, in one round trip.

        Each chain is rebuilt once, and versions share the unchanged items of
        their bases (the audit trail reads every version of a branch this way).
        """
        keys = [(thread_id, checkpoint_ns, channel, str(v)) for v in dict.fromkeys(versions)]
        if not keys:
            return {}
        values = Materializer(self.codec)
        found = yield _value_chains(keys)
        values.add(_value_row(*row) for row in found)
        return {key[3]: values.value(key) for key in keys if values.knows(key)}

    def delta_history(
        self, config: RunnableConfig, channels: Sequence[str]
    ) -> Operation[dict[str, DeltaChannelHistory]]:
        """`get_delta_channel_history` in one round trip, whatever the thread's length."""
        if not channels:
            return {}
        thread_id, checkpoint_ns = thread_of(config)
        params = {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": checkpoint_id_of(config, thread_id),
            "channels": list(channels),
        }
        return (yield from self._delta_history(params, use_memo=True))

    def _delta_history(
        self, params: dict[str, Any], *, use_memo: bool
    ) -> Operation[dict[str, DeltaChannelHistory]]:
        # A history walk (get_state_history calls this once per checkpoint)
        # meets the same seed again and again: the memo spares sending and
        # decoding it each time.
        thread_id, checkpoint_ns = params["thread_id"], params["checkpoint_ns"]
        known = self.seeds.keys_of(thread_id, checkpoint_ns) if use_memo else []
        by_id = params["checkpoint_id"] is not None
        statement = sql.DELTA_HISTORY_BY_ID if by_id else sql.DELTA_HISTORY_LATEST
        rows = yield from _on_generic_plan(
            Query(statement, {**params, **_known(known)}, prepare=True)
        )
        seeds = Materializer(self.codec)
        seed_keys: dict[str, ValueKey] = {}
        for kind, _, channel, _, _, _, version, base, encoding, json, data, type_ in rows:
            key = (thread_id, checkpoint_ns, channel, version)
            if kind == "known":
                found, value = self.seeds.get(key)
                if not found:  # evicted meanwhile: ask again, for everything
                    return (yield from self._delta_history(params, use_memo=False))
                seeds.values[key] = value
            elif kind in ("value", "base"):
                seeds.add([ValueRow(key, base, encoding, _parse(json), data, type_)])
            if kind in ("known", "value"):
                seed_keys[channel] = key
        history = self._assemble_history(
            thread_id, checkpoint_ns, params["channels"], rows, seeds, seed_keys
        )
        for channel, key in seed_keys.items():
            row = seeds.rows.get(key)
            if row is not None and "seed" in history[channel]:
                self.seeds.put(key, history[channel]["seed"], _row_size(row))
        return history

    def _assemble_history(
        self,
        thread_id: str,
        checkpoint_ns: str,
        channels: Sequence[str],
        rows: list[tuple],
        seed_values: Materializer,
        seed_keys: dict[str, ValueKey],
    ) -> dict[str, DeltaChannelHistory]:
        writes: dict[str, list[tuple[int, tuple[str, str, int], PendingWrite]]] = {
            ch: [] for ch in channels
        }
        seeds = {ch: seed_values.value(key) for ch, key in seed_keys.items()}
        frozen: dict[str, list[tuple[int, int, str | None, Any]]] = {}
        for kind, depth, channel, task_id, task_path, idx, checkpoint_id, _, *stored in rows:
            if kind in ("known", "value", "base"):
                continue
            aad = (write_aad if kind == "write" else frozen_aad)(
                *(thread_id, checkpoint_ns, checkpoint_id),
                *(
                    (task_id, idx, task_path, channel)
                    if kind == "write"
                    else (channel, idx, task_id)
                ),
                stored[0],
            )
            value = self._load(thread_id, checkpoint_ns, checkpoint_id, channel, *stored, aad=aad)
            if kind == "write":
                key = writes_sort_key(task_path, task_id, idx)
                writes[channel].append((depth, key, (task_id, channel, value)))
            else:
                frozen.setdefault(channel, []).append((depth, idx, task_id, value))
        result: dict[str, DeltaChannelHistory] = {}
        for ch in channels:
            # Oldest ancestor first; within one checkpoint, live execution order.
            ordered = [w for _, _, w in sorted(writes[ch], key=lambda e: (-e[0], e[1]))]
            entry: DeltaChannelHistory = {"writes": ordered}
            if ch in seeds:
                entry["seed"] = seeds[ch]
            elif ch in frozen:
                # A frozen history is everything before its checkpoint.
                parts = sorted(frozen[ch], key=lambda f: f[1])
                before = [(task_id, ch, value) for _, seq, task_id, value in parts if seq > 0]
                entry["writes"] = before + ordered
                if parts and parts[0][1] == 0:
                    entry["seed"] = parts[0][3]
            result[ch] = entry
        return result

    # ------------------------------------------------------------ writes

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> Operation[RunnableConfig]:
        """Checkpoint row and changed channel values in one statement."""
        thread_id, checkpoint_ns = thread_of(config)
        checkpoint_id = checkpoint["id"]
        values = checkpoint["channel_values"]
        if self.versions is not None:
            # Continuing from a migrated checkpoint: its migrated values become rows.
            metadata = self.versions.stamp(metadata)  # type: ignore[assignment]
            marked = self.versions.channels_to_write(
                thread_id, checkpoint_ns, checkpoint, new_versions
            )
            if marked:
                new_versions = {**new_versions, **marked}
        planned: list[tuple[StoredValue, shapes.Base | None]] = []
        for channel, version in new_versions.items():
            where = Where(thread_id, checkpoint_ns, checkpoint_id, channel)
            if channel not in values:
                planned.append((EMPTY, None))
            else:
                planned.append(self._plan_value(where, str(version), values[channel]))
        full_metadata = get_serializable_checkpoint_metadata(config, metadata)
        metadata_text = self._json(
            full_metadata, Where(thread_id, checkpoint_ns, checkpoint_id, "<metadata>")
        )
        parent_id = checkpoint_id_of(config, thread_id)
        document = self._checkpoint_document(
            checkpoint,
            Where(thread_id, checkpoint_ns, checkpoint_id, "<checkpoint>"),
            self._inline_values(checkpoint, new_versions) if self.inline_values else None,
        )
        if self.codec.encryption is not None:
            metadata_text = self.codec.seal_metadata(
                full_metadata,
                metadata_text,
                metadata_aad(thread_id, checkpoint_ns, checkpoint_id, document),
            )
        params = {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": checkpoint_id,
            "parent_checkpoint_id": parent_id,
            "run_id": _text_or_none(full_metadata.get("run_id")),
            "checkpoint": document,
            "metadata": metadata_text,
            # what it continues from: its parent; a subgraph's, the checkpoints
            # of the enclosing namespaces (metadata "parents"); and itself
            **lineage_params(
                [(checkpoint_ns, parent_id), (checkpoint_ns, checkpoint_id)],
                metadata.get("parents"),
            ),
            **self._registry_params(
                config, thread_id, checkpoint_ns, values, new_versions, planned
            ),
        }
        sealed = self._seal_values(thread_id, checkpoint_ns, new_versions, planned)
        run = self.runs.of(config)
        params["seen"] = seen_of(run, thread_id)
        statement = sql.PUT if self.hot is not None else sql.PUT_NO_HEAD
        if self.on_conflict:
            statement = sql.PUT_ON_CONFLICT
            if run is not None:
                run.put_sending((thread_id, checkpoint_ns, checkpoint_id))
        here = Where(thread_id, checkpoint_ns, checkpoint_id, "<checkpoint>")
        # When the statement that returns the incarnation was sent (its first
        # sending: an earlier time errs towards re-checking, HotHead.recheck_due).
        asked_at = self._clock()
        (missing_bases, inserted, fenced, deleted, writes_before, incarnation, stale, epoch,
         *conflict) = (
            yield from self._send_checked(
                run, statement, params, self._value_columns(new_versions, sealed), here, "put",
                parent_id,
            )
        )  # fmt: skip
        if deleted is not None:
            yield from self._bury_run(run)
        self._refuse(params, fenced, deleted, "put")
        yield from self._conflict(run, params, conflict, parent_id, "put")
        if missing_bases:
            # A base this process remembered was pruned meanwhile: nothing was
            # written; forget those bases and write those channels in full.
            self.bases.forget((thread_id, checkpoint_ns, ch) for ch in missing_bases)
            planned = [
                self._plan_value(
                    Where(thread_id, checkpoint_ns, checkpoint_id, ch), str(v), values[ch]
                )
                if stored.encoding in DELTA_ENCODINGS
                else (stored, base)
                for (stored, base), (ch, v) in zip(planned, new_versions.items())
            ]
            sealed = self._seal_values(thread_id, checkpoint_ns, new_versions, planned)
            (
                missing_bases, inserted, fenced, deleted, writes_before, incarnation, stale,
                epoch, *conflict,
            ) = yield from self._send_checked(
                run, statement, params, self._value_columns(new_versions, sealed), here, "put",
                parent_id,
            )  # fmt: skip
            if deleted is not None:
                yield from self._bury_run(run)
            self._refuse(params, fenced, deleted, "put")
            yield from self._conflict(run, params, conflict, parent_id, "put")
            assert not missing_bases
        if run is not None:
            # on_conflict: a subgraph checkpoint hangs from its root until that
            # is stored (runs.RunWrites.nested)
            hanging = self.on_conflict and checkpoint_ns
            root = (metadata.get("parents") or {}).get("") if hanging else None
            run.put_stored((thread_id, checkpoint_ns, checkpoint_id), root)
        if self.versions is not None:
            self.versions.remember_written(thread_id, checkpoint_ns, new_versions)
        # Remember what was stored, and only that: a version that already
        # existed (the insert did nothing) may hold another value.
        written = set(inserted)
        for (channel, _), (_, base) in zip(new_versions.items(), planned):
            if base is not None and channel in written:
                self.bases.put((thread_id, checkpoint_ns, channel), base)
        if self.hot is not None:
            # A channel whose new version is no base (LangGraph cleared it, as
            # it clears `__start__` after each step, or its value cannot be
            # one) forgets the base before it: a later delta of that base would
            # name a version the Redis head no longer holds, which ADVANCE
            # cannot rebuild (it dropped the head at every turn whose input
            # repeated the last one's). Postgres alone rebuilds any version, so
            # a saver without the head keeps that base and its smaller rows.
            self.bases.forget(
                (thread_id, checkpoint_ns, channel)
                for (channel, _), (_, base) in zip(new_versions.items(), planned)
                if base is None
            )
        if self.hot is not None:
            yield from self._check_incarnation(incarnation, asked_at)
            yield from self._write_head(thread_id, stale, self.hot.advance(
                thread_id,
                checkpoint_ns,
                checkpoint_id,
                params["parent_checkpoint_id"],
                params["checkpoint"],
                params["metadata"],
                checkpoint["channel_versions"],
                writes_before,
                [
                    (ch, str(v), stored)
                    for (ch, v), stored in zip(new_versions.items(), sealed)
                ],
                epoch,
            ))  # fmt: skip
            yield from self._root_claimed_head(params, conflict, epoch)
        return checkpoint_config(thread_id, checkpoint_ns, checkpoint_id)

    def _optimistic(
        self,
        run: RunWrites | None,
        thread_id: str,
        checkpoint_ns: str,
        claimed_id: str | None,
        target_id: str | None = None,
    ) -> dict[str, Any]:
        """The parameters of the on_conflict check (sql._OPTIMISTIC) of a put
        continuing from `claimed_id`, or (`target_id`) of writes to it."""
        read = run.read_of(thread_id, checkpoint_ns) if run is not None else None
        seen = read.claim if read is not None and read.checkpoint_id == claimed_id else None
        # a subgraph's write is checked against the root as the run read it too
        root = run.read_of(thread_id, "") if run is not None and checkpoint_ns else None
        params: dict[str, Any] = {
            # only a run whose first read asked for the latest checkpoint
            "checked": read is not None and read.latest,
            # a subgraph's write holds its root task (the first namespace's task id)
            "root_task": checkpoint_ns.split(NS_SEP, 1)[0].rpartition(NS_END)[2] or None,
            "hold": self.on_conflict_hold,
            "writer": run.writer if run is not None else None,
            "seen_claim": seen,
            "claimed_id": claimed_id,
            "root_checked": root is not None and root.latest,
            "root_read": root.checkpoint_id if root is not None else None,
            "root_seen": root.claim if root is not None else None,
            "root_own": run.own(thread_id, "") if root is not None else [],
        }
        if target_id is not None:
            heads = [target_id]
            if run is not None:
                heads += run.own(thread_id, checkpoint_ns)
            if read is not None and read.checkpoint_id is not None:
                heads.append(read.checkpoint_id)
            params["heads"] = heads
        return params

    def _send_checked(
        self,
        run: RunWrites | None,
        statement: str,
        params: dict[str, Any],
        values: Mapping[str, Any],
        where: Where,
        operation: str,
        claimed_id: str | None,
        target_id: str | None = None,
    ) -> Any:
        """`_send` of a put (`claimed_id`: its parent) or of writes to
        `target_id`, with on_conflict's parameters (sql._OPTIMISTIC); its row.

        The run's own puts go on in the background: one that committed while
        this statement waited for the head lock moved the head (its
        namespace's, or the root's for a subgraph's write) past what the
        parameters named. Refused, the statement stored nothing: sent again,
        it names that checkpoint too. (Each time round another put of the run
        committed; they come one at a time.)
        """
        thread_id, checkpoint_ns = params["thread_id"], params["checkpoint_ns"]
        while True:
            if self.on_conflict:
                params.update(
                    self._optimistic(run, thread_id, checkpoint_ns, claimed_id, target_id)
                )
            (row,) = yield from self._send(run, statement, {**params, **values}, where, operation)
            if not self.on_conflict or run is None:
                return row
            refused, head, root_refused, root_head, _, _ = row[-6:]
            own_root_put = (
                root_refused
                and root_head not in params["root_own"]
                and root_head in run.own(thread_id, "")
            )
            own_put = (
                refused
                and target_id is not None
                and head not in params["heads"]
                and head in run.own(thread_id, checkpoint_ns)
            )
            if not (own_root_put or own_put):
                return row

    def _conflict(
        self,
        run: RunWrites | None,
        params: Mapping[str, Any],
        conflict: Sequence[Any],
        continued_from: str | None,
        operation: str,
    ) -> Operation[None]:
        """Raise ThreadConflictError when Postgres refused the write as the
        loser of a race for the head (on_conflict, sql._OPTIMISTIC): it stored
        nothing; the run's writes that landed for checkpoints whose put it
        will never make go too, and its later writes are refused here."""
        if not conflict or not conflict[0]:
            return
        _, head, root_refused, root_head, _, held = conflict
        details = {
            "thread_id": params["thread_id"],
            "checkpoint_ns": params["checkpoint_ns"],
            "continued_from": continued_from,
            "head": head,
            "held": held,
        }
        if root_refused:  # a subgraph's write, refused by the root (sql._OPTIMISTIC)
            details.update(checkpoint_ns="", continued_from=params["root_read"], head=root_head)

        # Raised again (a fresh one each time) by the run's later writes: the
        # first refusal may be in a background future the caller never sees.
        # What of the run stays is asked each time: a write of it in flight
        # may land meanwhile.
        def refusal() -> ThreadConflictError:
            kept = run.kept_root(params["thread_id"]) if run is not None else None
            return ThreadConflictError(**details, operation=operation, kept_checkpoint_id=kept)

        if run is not None:
            # several of its writes may be refused at once: the first one says where
            run.refuse(refusal)
            yield from self._bury_run(run)
            raise run.refusal()  # type: ignore[misc]
        raise refusal()

    def _seal_values(
        self,
        thread_id: str,
        checkpoint_ns: str,
        new_versions: ChannelVersions,
        planned: list[tuple[StoredValue, shapes.Base | None]],
    ) -> list[StoredValue]:
        """The value rows as stored (and as the Redis head carries them): each
        encrypted channel's row sealed on its own, bound to its identity."""
        if self.codec.encryption is None:
            return [stored for stored, _ in planned]
        return [
            self.codec.seal(
                stored,
                channel,
                value_aad(
                    thread_id,
                    checkpoint_ns,
                    channel,
                    str(version),
                    stored.encoding,
                    stored.base_version,
                ),
            )
            for (channel, version), (stored, _) in zip(new_versions.items(), planned)
        ]

    def _value_columns(
        self, new_versions: ChannelVersions, sealed: list[StoredValue]
    ) -> dict[str, list[Any]]:
        """The PUT's value rows as column arrays: one per changed channel, but
        none for a channel the checkpoint cleared. A version with no row reads
        as no value, as InMemorySaver has none (every reader, in Python and in
        SQL, takes a missing row and an 'empty' one alike), so an 'empty' row
        cost a row and an index entry for nothing: most of a DeltaChannel
        thread's rows, whose checkpoints hold the channel only at snapshots.
        Sealed values keep theirs: an 'empty' row is sealed like any other."""
        pairs = list(zip(new_versions.items(), sealed))
        if self.codec.encryption is None:
            pairs = [pair for pair in pairs if pair[1].encoding != EMPTY_ENCODING]
        stored = [value for _, value in pairs]
        return {
            "channels": TextArray([channel for (channel, _), _ in pairs]),
            "versions": TextArray([str(version) for (_, version), _ in pairs]),
            **columns(stored),
            "bases": TextArray([s.base_version for s in stored]),
            "depths": IntArray([s.depth for s in stored]),
        }

    def _send(
        self,
        run: RunWrites | None,
        statement: str,
        params: Mapping[str, Any],
        where: Where,
        operation: str,
    ) -> Any:
        """Send a put / put_writes statement after the thread's write lock (see
        sql.WRITE_LOCK), counted as in flight for its run; its rows.

        A run already refused as deleted sends nothing (see runs.py).
        """
        if run is not None and not run.begin():
            if run.refusal is not None:
                raise run.refusal()
            raise CheckpointDeletedError(
                thread_id=where.thread_id, checkpoint_ns=where.checkpoint_ns,
                checkpoint_id=where.checkpoint_id or "", deleted_id=None, operation=operation,
            )  # fmt: skip
        lock_params = {"thread_id": params["thread_id"], "run_id": params.get("run_id")}
        if self.on_conflict:
            lock_params["checkpoint_ns"] = params["checkpoint_ns"]
        lock = Query(
            sql.WRITE_LOCK_ON_CONFLICT if self.on_conflict else sql.WRITE_LOCK,
            lock_params,
            fetch=False,
            prepare=True,  # parsed and planned afresh, it cost 8% of a put's backend CPU
        )
        # on_conflict="raise" takes the thread's head lock, exclusive: such a
        # write commits alone, so that no transaction holds two of them.
        shared = None if self.on_conflict else (lock_params["thread_id"], lock_params["run_id"])
        try:
            results = yield Transaction(
                (lock, Query(statement, params, prepare=True)), shared_write_lock=shared
            )
        finally:
            if run is not None:
                run.end()
        return results[1]

    def _bury_run(self, run: RunWrites | None) -> Operation[None]:
        """A write of `run` was refused as deleted: delete what it wrote for nothing.

        Its writes in flight land first; then the writes it stored for
        checkpoints that were never stored go, recorded as deleted.
        """
        if run is None:
            return
        run.die()
        while run.inflight:
            yield Sleep(0.005)
        nested = run.take_nested()
        if nested:
            # Subgraph checkpoints under a root checkpoint of the run never
            # stored (sql.BURY_ORPHAN_CHECKPOINTS), their values after them;
            # the thread's lock keeps every write out meanwhile.
            threads = sorted({key[0] for key, _ in nested})
            params = {
                "threads": [key[0] for key, _ in nested],
                "namespaces": [key[1] for key, _ in nested],
                "ids": [key[2] for key, _ in nested],
                "roots": [root for _, root in nested],
                "writer": run.writer,
            }
            asked_at = self._clock()
            results = yield Transaction(self._reading_incarnation((
                Query(sql.DELETE_LOCK, {"thread_ids": threads}, fetch=False),
                Query(sql.BURY_ORPHAN_CHECKPOINTS, params, fetch=False),
                Query(sql.COLLECT_UNREFERENCED_VALUES, {"thread_ids": threads}, fetch=False),
                Query(sql.MOVE_EPOCHS, {"thread_ids": threads}, fetch=False),
            )))  # fmt: skip
            self.forget_threads(threads)
            yield from self._drop_heads(threads, results, asked_at)
        keys = run.take_pending()
        if keys:
            params = {
                "threads": [k[0] for k in keys],
                "namespaces": [k[1] for k in keys],
                "ids": [k[2] for k in keys],
            }
            yield Query(sql.BURY_ORPHAN_WRITES, params, fetch=False)

    def _refuse(
        self,
        params: Mapping[str, Any],
        fenced: bool,
        deleted: str | None,
        operation: str,
    ) -> None:
        """Raise what Postgres refused the write for; it stored nothing of it."""
        thread_id = params["thread_id"]
        if deleted is not None:
            # Whatever this process holds decoded of the thread is deleted content.
            self.forget_threads([thread_id])
            raise CheckpointDeletedError(
                thread_id=thread_id,
                checkpoint_ns=params["checkpoint_ns"],
                checkpoint_id=params["checkpoint_id"],
                deleted_id=deleted,
                operation=operation,
            )
        if fenced:
            if params["run_owner"] is not None:
                raise LeaseLostError(
                    thread_id, token=params["run_token"], checkpoint_id=params["checkpoint_id"]
                )
            raise ThreadBusyError(thread_id)

    def _registry_params(
        self,
        config: RunnableConfig,
        thread_id: str,
        checkpoint_ns: str,
        values: dict[str, Any],
        new_versions: ChannelVersions,
        planned: list[tuple[StoredValue, shapes.Base | None]],
    ) -> dict[str, Any]:
        """The thread row's share of a put: run metadata, small values, fencing."""
        run_metadata = registry_metadata(config)
        values_set: dict[str, Any] = {}
        values_del: list[str] = []
        if checkpoint_ns == "":
            for channel, (stored, base) in zip(new_versions, planned):
                if channel.startswith("__") or ":" in channel:
                    continue  # LangGraph's own channels (tasks, branches) are not state
                text = stored.json if stored.encoding == JSON else None
                if text is None and base is not None and stored.encoding in DELTA_ENCODINGS:
                    # A delta row: the base knows the value's size without encoding it.
                    if base.full_bytes + base.delta_bytes <= SEARCHABLE_VALUE_BYTES:
                        text = self._json_or_none(values[channel])
                if text is not None and len(text) <= SEARCHABLE_VALUE_BYTES:
                    # An encrypted channel's copy is sealed (see _core/crypt.py).
                    values_set[channel] = self.codec.seal_registry_value(
                        thread_id, "values", channel, text
                    )
                else:
                    values_del.append(channel)
        owner, token = fence_of(thread_id)
        return {
            "run_owner": owner,
            "run_token": token,
            "run_metadata": self.codec.dump_object(
                run_metadata, sealed_for=(thread_id, "metadata")
            ),
            "values_set": orjson.dumps(values_set).decode(),
            "values_del": TextArray(values_del),
            "ttl": self.thread_ttl,
        }

    def _json_or_none(self, value: Any) -> str | None:
        try:
            return self.codec.encode(value)[1]
        except CodecError:
            return None

    def _plan_value(
        self, where: Where, version: str, value: Any
    ) -> tuple[StoredValue, shapes.Base | None]:
        """The row for one channel's new value, and the base it makes for the next."""
        if not self.codec.jsonb_values:
            return self.codec.dump(value, where), None
        key: ChannelKey = (where.thread_id, where.checkpoint_ns, where.channel)
        base = self.bases.get(key) if shapes.can_be_a_base(value) else None
        delta = shapes.diff(value, base, self.snapshot_every)
        if base is not None and delta is not None:
            try:
                encoded, text = self.codec.encode(delta.payload)
            except UnsupportedValueError:
                pass  # the whole value then goes to serde, below
            else:
                if shapes.worth_a_delta(base, delta, len(text)):
                    payload = self.codec.registry.decode(encoded)  # private copy
                    successor = shapes.Base(
                        version,
                        shapes.apply(base.value, delta.shape, payload),
                        base.depth + 1,
                        base.delta_bytes + len(text),
                        base.full_bytes,
                    )
                    stored = StoredValue(
                        delta.shape, text, None, None, base.version, base.depth + 1
                    )
                    return stored, successor
        try:
            encoded, text = self.codec.encode(value)
        except UnsupportedValueError as exc:
            return self.codec.dump_fallback(value, where, exc), None
        successor = None
        if shapes.can_be_a_base(value):
            successor = shapes.Base(version, self.codec.registry.decode(encoded), 0, 0, len(text))
        return StoredValue(JSON, text, None, None), successor

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> Operation[None]:
        if not writes:
            return
        thread_id, checkpoint_ns = thread_of(config)
        checkpoint_id = checkpoint_id_of(config, thread_id)
        if not checkpoint_id:
            raise InvalidConfigError(
                f"put_writes for thread {thread_id!r} needs configurable.checkpoint_id "
                "(the checkpoint the writes belong to)"
            )
        # Refused here, before any I/O, as NULs in the keys are (keys.py): else a
        # raw DataError from the driver, after the writes' values were encoded.
        for what, value in (("task_id", task_id), ("task_path", task_path)):
            if "\x00" in value:
                raise InvalidConfigError(
                    f"put_writes for thread {shown(thread_id)}, checkpoint {checkpoint_id!r}: "
                    f"{what} {shown(value)} contains a NUL character, which Postgres text "
                    "cannot hold. Nothing was written."
                )
        # A special channel has one slot per task (its negative idx) and the last
        # write to it wins, as in InMemorySaver: a node that interrupts twice
        # hands over `__resume__` twice in one call.
        by_idx = {
            WRITES_IDX_MAP.get(channel, i): (channel, value)
            for i, (channel, value) in enumerate(writes)
        }
        try:
            stored = [
                self.codec.dump(value, Where(thread_id, checkpoint_ns, checkpoint_id, channel))
                for channel, value in by_idx.values()
            ]
        except ValueNotStorableError as exc:
            # The task's output cannot be kept, so the step failed: record it as
            # the task's error, as LangGraph records a node that raised, so the
            # thread's status says `error` (and get_state shows why), then raise.
            if all(channel != ERROR for channel, _ in writes):
                yield from self.put_writes(config, [(ERROR, exc)], task_id, task_path)
            raise
        if self.codec.encryption is not None:
            stored = [
                self.codec.seal(
                    row,
                    channel,
                    write_aad(
                        *(thread_id, checkpoint_ns, checkpoint_id, task_id, idx, task_path),
                        channel,
                        row.encoding,
                    ),
                )
                for (idx, (channel, _)), row in zip(by_idx.items(), stored)
            ]
        owner, token = fence_of(thread_id)
        # A subgraph's writes name the checkpoints of the enclosing namespaces.
        checkpoint_map = (config.get("configurable") or {}).get("checkpoint_map")
        params = {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": checkpoint_id,
            "task_id": task_id,
            "task_path": task_path,
            "idxs": IntArray(by_idx),
            "channels": TextArray([channel for channel, _ in by_idx.values()]),
            "run_owner": owner,
            "run_token": token,
            # the writing run, as its checkpoints record it (delete_for_runs
            # deletes its writes wherever they are, and refuses its later ones)
            "run_id": _run_id_of(config),
            # the state version of the code writing (a versioned saver's; None
            # otherwise): read back, a write is migrated from it (see versions.py)
            "state_version": None if self.versions is None else self.versions.version,
            **lineage_params([(checkpoint_ns, checkpoint_id)], checkpoint_map),
            "status": _status_of_writes(checkpoint_ns, [channel for channel, _ in writes]),
            **columns(stored),
        }
        run = self.runs.of(config)
        params["seen"] = seen_of(run, thread_id)
        statement = sql.PUT_WRITES_BY[self.hot is not None, params["status"] is not None]
        if self.on_conflict:
            statement = sql.PUT_WRITES_ON_CONFLICT
        here = Where(thread_id, checkpoint_ns, checkpoint_id, "<writes>")
        asked_at = self._clock()  # as in put
        (fenced, deleted, incarnation, stale, epoch, *conflict) = yield from self._send_checked(
            run, statement, params, {}, here, "put_writes", checkpoint_id, checkpoint_id
        )
        if deleted is not None:
            yield from self._bury_run(run)
        self._refuse(params, fenced, deleted, "put_writes")
        yield from self._conflict(run, params, conflict, checkpoint_id, "put_writes")
        if run is not None:
            # a subgraph's writes hang from the root checkpoint (what of a
            # refused run stays: runs.RunWrites.kept_root)
            root = checkpoint_map.get("") if isinstance(checkpoint_map, Mapping) else None
            run.writes_stored((thread_id, checkpoint_ns, checkpoint_id), root)
        if self.hot is not None:
            yield from self._check_incarnation(incarnation, asked_at)
            slots = [
                (
                    write_field(task_id, idx),
                    self.hot.pack_write(
                        thread_id,
                        checkpoint_ns,
                        checkpoint_id,
                        task_id,
                        idx,
                        task_path,
                        channel,
                        *stored_value[:4],
                        params["state_version"],
                    ),
                    idx < 0,  # special channels: the last write wins, as in Postgres
                )
                for (idx, (channel, _)), stored_value in zip(by_idx.items(), stored)
            ]
            if params.get("writer") is not None:
                # the claim the statement wrote goes with the writes (sql._OPTIMISTIC)
                slots.append(self._claim_slot(thread_id, checkpoint_ns, checkpoint_id, params))
            yield from self._write_head(
                thread_id,
                stale,
                self.hot.add_writes(thread_id, checkpoint_ns, checkpoint_id, slots, epoch),
            )
            yield from self._root_claimed_head(params, conflict, epoch)

    def _claim_slot(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str, params: Mapping[str, Any]
    ) -> tuple[str, bytes, bool]:
        """The Redis head's slot of the claim a write left (sql._OPTIMISTIC)."""
        assert self.hot is not None
        packed = self.hot.pack_write(
            thread_id, checkpoint_ns, checkpoint_id, sql.CLAIM_TASK_ID, sql.CLAIM_IDX,
            params["writer"], sql.CLAIM_CHANNEL, "json", "null", None, None, None,
        )  # fmt: skip
        return write_field(sql.CLAIM_TASK_ID, sql.CLAIM_IDX), packed, True

    def _root_claimed_head(
        self, params: Mapping[str, Any], conflict: Sequence[Any], epoch: int
    ) -> Operation[None]:
        """A subgraph's write that claimed the root head (sql._ROOT_CLAIMED)
        puts the claim in the root's Redis head too: a run reading the head
        there must see it, as it would in Postgres."""
        if self.hot is None or not conflict or conflict[4] is None:
            return
        thread_id, root_id = params["thread_id"], conflict[4]
        slot = self._claim_slot(thread_id, "", root_id, params)
        yield from self._write_head(
            thread_id, [], self.hot.add_writes(thread_id, "", root_id, [slot], epoch)
        )

    # ------------------------------------------------------------ maintenance

    def delete_threads(
        self, thread_ids: Sequence[str], *, only_expired: bool = False
    ) -> Operation[None]:
        """Delete threads whole; with `only_expired`, those still expired once locked."""
        if not thread_ids:
            return
        params = {"thread_ids": [checked_key("thread_id", str(t)) for t in thread_ids]}
        self.forget_threads(params["thread_ids"])
        deletes = sql.DELETE_EXPIRED_THREADS if only_expired else sql.DELETE_THREADS
        tombstones = sql.TOMBSTONE_EXPIRED_THREADS if only_expired else sql.TOMBSTONE_THREADS
        # The lock first: the writes in flight land before, and are deleted too.
        # The ledger is rehomed before the deletion is recorded, which changes
        # the lineage of the ids (see sql.lineage_of).
        rehome = sql.REHOME_EXPIRED_TOOL_CALLS if only_expired else sql.REHOME_TOOL_CALLS
        statements = [sql.DELETE_LOCK, rehome, *tombstones, *deletes]
        statements.append(sql.MOVE_EPOCHS)  # the epochs move with the deletion
        if only_expired:
            statements.insert(1, sql.LOCK_STILL_EXPIRED)
        queries = [Query(q, params, fetch=False) for q in statements]
        asked_at = self._clock()
        results = yield Transaction(self._reading_incarnation(queries))
        # A put that committed before the delete may have cached values since.
        self.forget_threads(params["thread_ids"])
        yield from self._drop_heads(params["thread_ids"], results, asked_at)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> Operation[None]:
        """Copy every checkpoint, value, write and frozen history: the whole chain.

        The tool ledger is keyed by lineage, not copied: the target records
        the source (or the source's own lineage) as the thread its tool calls
        are keyed by, so a call the source recorded is not run again on the
        copy, and the copy's `current_idempotency_key()` is the source's.

        Both threads' write locks are held exclusive (DELETE_LOCK, in its key
        order) from the copy's first statement: each statement sees the
        database as of its own start, and a deletion or prune of the source
        committing between the checkpoints' statement and the values' would
        leave the target with checkpoints whose values were never copied.
        Writes to either thread wait for the copy, as they wait for a deletion.
        """
        params = {
            "source": checked_key("thread_id", str(source_thread_id)),
            "target": checked_key("thread_id", str(target_thread_id)),
        }
        lock = Query(
            sql.DELETE_LOCK, {"thread_ids": [params["source"], params["target"]]}, fetch=False
        )
        self.forget_threads([params["target"]])
        statements = sql.COPY_THREAD
        if self.codec.encryption is not None:
            # Each row is bound to its thread (the AES-GCM associated data):
            # the copy is opened and sealed again for the target.
            params.update(
                (yield from self._resealed_copy(params["source"], params["target"], lock))
            )
            statements = (sql.COPY_THREAD[0], *sql.COPY_SEALED, sql.COPY_THREAD[-1])
        queries = [lock, *(Query(q, params, fetch=False) for q in statements)]
        asked_at = self._clock()
        results = yield Transaction(self._reading_incarnation(queries))
        yield from self._drop_heads([params["target"]], results, asked_at)

    def _resealed_copy(self, source: str, target: str, lock: Query) -> Operation[dict[str, list]]:
        """The source thread's rows opened and sealed for `target`: COPY_SEALED's
        arrays. A row that does not open is refused (`CorruptRowError`), not copied.
        Read under `lock` (copy_thread's), so that the four reads are of one
        moment of the source."""
        read = {"source": source}
        _, checkpoints, values, writes, histories = yield Transaction(
            (
                lock,
                *(
                    Query(q, read)
                    for q in (
                        sql.COPY_READ_CHECKPOINTS,
                        sql.COPY_READ_VALUES,
                        sql.COPY_READ_WRITES,
                        sql.COPY_READ_HISTORIES,
                    )
                ),
            )
        )

        def reseal(where, at, channel, encoding, json, data, type_, aad, *identity):
            # `aad(thread, *identity)`: the row's associated data in either thread.
            try:
                json, data, type_, _ = self.codec.open(
                    channel, json, data, type_, aad(source, *identity)
                )
            except RowSealError as exc:
                raise corrupt_row(where, at, exc) from None
            stored = StoredValue(encoding, json, data, type_)
            return self.codec.seal(stored, channel, aad(target, *identity))[1:4]

        out: dict[str, list] = {}
        for ns, cid, parent, run_id, document, metadata, created in checkpoints:
            try:
                metadata = self.codec.reseal_metadata(
                    metadata,
                    metadata_aad(source, ns, cid, document),
                    metadata_aad(target, ns, cid, document),
                )
            except (RowSealError, CodecError) as exc:
                raise corrupt_row((source, ns, None), cid, exc) from None
            for name, item in zip(
                (
                    "c_ns",
                    "c_ids",
                    "c_parents",
                    "c_runs",
                    "c_checkpoints",
                    "c_metadata",
                    "c_created",
                ),
                (ns, cid, parent, run_id, document, metadata, created),
            ):
                out.setdefault(name, []).append(item)
        for ns, ch, version, enc, json, data, type_, base, depth in values:
            sealed = reseal(
                (source, ns, ch), f"version {version!r}", ch, enc, json, data, type_,
                value_aad, ns, ch, version, enc, base,
            )  # fmt: skip
            for name, item in zip(
                ("v_ns", "v_channels", "v_versions", "v_encodings", "v_jsons", "v_datas",
                 "v_types", "v_bases", "v_depths"),
                (ns, ch, version, enc, *sealed, base, depth),
            ):  # fmt: skip
                out.setdefault(name, []).append(item)
        for ns, cid, task, idx, path, ch, enc, json, data, type_, state_version, run in writes:
            sealed = reseal(
                (source, ns, ch), cid, ch, enc, json, data, type_,
                write_aad, ns, cid, task, idx, path, ch, enc,
            )  # fmt: skip
            for name, item in zip(
                ("w_ns", "w_ids", "w_tasks", "w_idxs", "w_paths", "w_channels", "w_encodings",
                 "w_jsons", "w_datas", "w_types", "w_state_versions", "w_runs"),
                (ns, cid, task, idx, path, ch, enc, *sealed, state_version, run),
            ):  # fmt: skip
                out.setdefault(name, []).append(item)
        for ns, cid, ch, seq, task, enc, json, data, type_ in histories:
            sealed = reseal(
                (source, ns, ch), cid, ch, enc, json, data, type_,
                frozen_aad, ns, cid, ch, seq, task, enc,
            )  # fmt: skip
            for name, item in zip(
                ("h_ns", "h_ids", "h_channels", "h_seqs", "h_tasks", "h_encodings", "h_jsons",
                 "h_datas", "h_types"),
                (ns, cid, ch, seq, task, enc, *sealed),
            ):  # fmt: skip
                out.setdefault(name, []).append(item)
        for name in _COPY_ARRAYS:
            out.setdefault(name, [])
        return out

    def prune(
        self,
        thread_ids: Sequence[str],
        strategy: str = "keep_latest",
        keep: int = 1,
        only_expired: bool = False,
    ) -> Operation[None]:
        """Keep the `keep` newest checkpoints per namespace (or delete everything).

        DeltaChannel-safe: before ancestors go, the history the oldest kept
        checkpoint is rebuilt from is frozen into `colosseum_delta_histories`;
        the later kept ones rebuild through it.

        `only_expired` (the retention sweep): of `thread_ids`, only those still
        expired under the prune's locks lose checkpoints (the others' kept values
        may still be rewritten as full rows, the same values).
        """
        if keep < 1:
            raise ValueError(f"prune keeps at least one checkpoint, not {keep}")
        if strategy == "delete":
            yield from self.delete_threads(thread_ids)
            return
        if strategy != "keep_latest":
            raise ValueError(f"unknown prune strategy {strategy!r}; use 'keep_latest' or 'delete'")
        if not thread_ids:
            return
        thread_list = [str(t) for t in thread_ids]
        kept = yield Query(sql.OLDEST_KEPT_PER_NAMESPACE, {"thread_ids": thread_list, "keep": keep})
        if not kept:
            return
        self.forget_threads(thread_list)
        queries = [Query(sql.DELETE_LOCK, {"thread_ids": thread_list}, fetch=False)]
        if only_expired:
            queries.append(Query(sql.LOCK_STILL_EXPIRED, {"thread_ids": thread_list}, fetch=False))
        queries += yield from self._freeze_histories([row[:4] for row in kept])
        queries += yield from self._compact(kept)
        kept_params = {
            "kept_threads": [row[0] for row in kept],
            "kept_namespaces": [row[1] for row in kept],
            "kept_ids": [row[2] for row in kept],
            "only_expired": only_expired,
        }
        queries += [Query(q, kept_params, fetch=False) for q in sql.PRUNE_KEEP_LATEST]
        queries.append(
            Query(sql.COLLECT_UNREFERENCED_VALUES, {"thread_ids": thread_list}, fetch=False)
        )
        queries.append(Query(sql.MOVE_EPOCHS, {"thread_ids": thread_list}, fetch=False))
        asked_at = self._clock()
        results = yield Transaction(self._reading_incarnation(queries))
        self.forget_threads(thread_list)
        yield from self._drop_heads(thread_list, results, asked_at)

    def delete_for_runs(self, run_ids: Sequence[str]) -> Operation[None]:
        """Delete the runs' checkpoints and writes, and the records of their tool
        calls that no checkpoint staying holds (sql.DELETE_RUNS_TOOL_CALLS).

        A surviving checkpoint whose parent is deleted gets its delta-channel
        history frozen first, so it still rebuilds the state it had.
        """
        if not run_ids:
            return
        params = {"run_ids": [str(r) for r in run_ids]}
        # Recorded first, in a statement of its own: a run whose puts have not
        # landed yet has no rows to delete, and its later puts are refused.
        yield Transaction(
            (
                Query(sql.RUNS_LOCK, params, fetch=False),
                Query(sql.DELETED_RUNS, params, fetch=False),
            )
        )
        threads = yield Query(sql.THREADS_OF_RUNS, params)
        if not threads:
            return
        self.forget_threads([row[0] for row in threads])
        boundaries = yield Query(sql.RUN_BOUNDARIES, params)
        queries = [Query(sql.DELETE_LOCK, {"thread_ids": [row[0] for row in threads]}, fetch=False)]
        queries += yield from self._freeze_histories(boundaries)
        # their tool calls' records with them, before their checkpoints go
        queries.append(Query(sql.DELETE_RUNS_TOOL_CALLS, params, fetch=False))
        queries += [Query(q, params, fetch=False) for q in sql.DELETE_RUNS]
        thread_ids = {"thread_ids": [row[0] for row in threads]}
        queries.append(Query(sql.RESET_DELETED_HEADS, thread_ids, fetch=False))
        queries.append(Query(sql.COLLECT_UNREFERENCED_VALUES, thread_ids, fetch=False))
        queries.append(Query(sql.MOVE_EPOCHS, thread_ids, fetch=False))
        asked_at = self._clock()
        results = yield Transaction(self._reading_incarnation(queries))
        self.forget_threads([row[0] for row in threads])
        yield from self._drop_heads([row[0] for row in threads], results, asked_at)

    def _reading_incarnation(self, queries: Sequence[Query]) -> tuple[Query, ...]:
        """A transaction that removes or replaces state, reading the database
        incarnation last when there are heads to drop (see `_drop_heads`)."""
        if self.hot is None:
            return tuple(queries)
        return (*queries, Query(sql.CURRENT_INCARNATION))

    def _clock(self) -> float:
        return self.hot.clock() if self.hot is not None else 0.0

    def _drop_heads(
        self,
        thread_ids: Sequence[str],
        committed: Sequence[Any] | None = None,
        asked_at: float = -math.inf,
    ) -> Operation[None]:
        """After a commit that removed or replaced state: the heads go, whole.

        `committed`: the results of a `_reading_incarnation` transaction sent at
        `asked_at`. The heads dropped are those of the incarnation it saw, not
        of the one this saver last knew: right after a failover, a deletion
        from a worker that has not moved yet must still drop the heads another
        worker filled from the recovered server (a hit serves a head until it
        expires, whatever the thread became since)."""
        if self.hot is not None:
            if committed is not None:
                yield from self._learn_incarnation(committed[-1][0][0], asked_at)
            else:
                yield from self.bound_incarnation()
            drop = self.hot.drop(thread_ids)
            if (yield drop) is CACHE_UNAVAILABLE:
                yield from self._record_stale(thread_ids, drop.keys)

    # ------------------------------------------------------------ the hot head's truth
    #
    # Postgres is the truth; a head in Redis may be served only while it
    # provably equals what Postgres holds. Two things can make it differ
    # without any write reaching Redis, and both are handled here:
    #
    # * The database changed under the saver (another database on the same
    #   Redis, a recreated or restored one). Keys carry the incarnation, which
    #   the saver learns on its first request and which every write statement
    #   returns: a change moves the saver to the new incarnation's keys. A hit
    #   relies on the last such answer for INCARNATION_RECHECK seconds, then
    #   asks again (HotHead.recheck_due), so a saver that only reads moves too.
    # * A write committed but Redis refused to update or drop its head. The
    #   head is recorded in colosseum_stale_heads, where every worker sees it;
    #   each write statement returns a few, and the writer drops them (and
    #   forgets the record) as soon as Redis takes commands again; a saver
    #   does the same as it closes. Until then the head expires `hot_ttl`
    #   after its last write: reads never extend it.

    def _learn_incarnation(self, seen: str | None, asked_at: float) -> Operation[None]:
        """Use the heads of the incarnation a statement sent at `asked_at` (the
        hot head's clock) returned (None: the token is gone, after a recovery
        that emptied UNLOGGED tables; make one)."""
        assert self.hot is not None
        while seen is None:
            asked_at = self.hot.clock()
            ((seen,),) = yield Query(sql.ENSURE_INCARNATION)
        previous = self.hot.incarnation
        if self.hot.bind(seen, asked_at) and previous is not None:
            logger.warning(
                "the database behind this saver is another incarnation than before "
                "(recreated or restored); Redis heads of the old one are no longer used"
            )
            self.forget_decoded()  # values decoded from the old database

    def learn_incarnation(self) -> Operation[str | None]:
        """Ask Postgres which incarnation it is (making its token if none); bind to it."""
        if self.hot is None:
            return None
        yield from self._learn_incarnation(None, -math.inf)
        return self.hot.incarnation

    def _check_incarnation(self, incarnation: str | None, asked_at: float) -> Operation[None]:
        """The incarnation a write statement sent at `asked_at` returned: before
        this write touches Redis. It proves the incarnation for later hits too."""
        assert self.hot is not None
        yield from self._learn_incarnation(incarnation, asked_at)

    def _write_head(
        self, thread_id: str, stale: list[list[str]], call: CacheCall
    ) -> Operation[None]:
        """Run a write's script: a head it could not update is recorded stale; once
        Redis took it, the stale heads the write statement returned are dropped
        (not before: while Redis is out, a write costs one failed attempt, not two)."""
        if (yield call) is CACHE_UNAVAILABLE:
            yield from self._record_stale([thread_id], (call.key,))
        elif stale:
            yield from self._drop_stale(stale)

    def _record_stale(self, thread_ids: Sequence[str], keys: Sequence[str]) -> Operation[None]:
        self.recorded_stale = True
        yield Query(
            sql.RECORD_STALE_HEADS,
            {"thread_ids": list(thread_ids), "head_keys": list(keys)},
            fetch=False,
        )

    def _drop_stale(self, stale: list[list[str]]) -> Operation[None]:
        """Drop recorded stale heads, all of them (a statement returns a page);
        forget each record only once Redis dropped its head."""
        while stale:
            if (yield CacheDrop(tuple(key for _, key, _ in stale))) is CACHE_UNAVAILABLE:
                return
            yield from self._forget_stale(stale)
            if len(stale) < sql.STALE_HEADS_PAGE:
                return
            ((stale,),) = yield Query(sql.LIST_STALE_HEADS)

    def _forget_stale(self, stale: list[list[str]]) -> Operation[None]:
        thread_ids, keys, recorded = (list(column) for column in zip(*stale))
        yield Query(
            sql.FORGET_STALE_HEADS,
            {"thread_ids": thread_ids, "head_keys": keys, "recorded": recorded},
            fetch=False,
        )

    def drop_stale_heads(self) -> Operation[int]:
        """Drop every recorded stale head Redis takes now; how many the first page held.

        A saver runs this as it closes, so a short-lived process whose writes
        Redis refused leaves nothing behind that Redis would take.
        """
        if self.hot is None:
            return 0
        ((stale,),) = yield Query(sql.LIST_STALE_HEADS)
        yield from self._drop_stale(stale)
        return len(stale)

    # The same truth for the Store's hot items (memory.py), on this store's
    # binding: Redis keys other than threads', dropped after a commit.

    def bound_incarnation(self) -> Operation[None]:
        """Before a read (or a drop) makes a key: learn the incarnation, or ask
        again when the last proof is older than the bound (HotHead.recheck_due)."""
        assert self.hot is not None
        if self.hot.recheck_due():
            asked_at = self.hot.clock()
            ((seen,),) = yield Query(sql.CURRENT_INCARNATION, prepare=True)
            yield from self._learn_incarnation(seen, asked_at)

    def after_commit(
        self,
        incarnation: str | None,
        stale: list[list[str]],
        make_keys: Callable[[], Sequence[str]],
        asked_at: float,
    ) -> Operation[None]:
        """After a Store write sent at `asked_at` committed (its statement
        returned `incarnation` and a page of `stale` heads): drop the keys
        `make_keys` gives once bound to that incarnation; a drop Redis refused
        is recorded stale (each key its own name)."""
        assert self.hot is not None
        yield from self._check_incarnation(incarnation, asked_at)
        keys = make_keys()
        if (yield CacheDrop(tuple(keys))) is CACHE_UNAVAILABLE:
            yield from self._record_stale(keys, keys)
            return
        yield from self._drop_stale(stale)  # Redis is back: what others could not drop

    def _compact(self, kept: list[tuple]) -> Operation[list[Query]]:
        """Statements rewriting the kept checkpoints' delta rows as full rows.

        After them, the kept values need no base, and the chains behind them
        can be collected.
        """
        keys = [
            (thread_id, checkpoint_ns, channel, str(version))
            for thread_id, checkpoint_ns, _, _, versions in kept
            for channel, version in orjson.loads(versions).items()
        ]
        if not keys:
            return []
        found = yield _value_chains(keys)
        values = Materializer(self.codec)
        values.add(_value_row(*row) for row in found)
        queries = []
        for key in keys:
            row = values.rows.get(key)
            if row is None or row.encoding not in DELTA_ENCODINGS:
                continue
            thread_id, checkpoint_ns, channel, version = key
            stored = self.codec.dump(
                values.value(key), Where(thread_id, checkpoint_ns, None, channel)
            )
            stored = self.codec.seal(
                stored,
                channel,
                value_aad(thread_id, checkpoint_ns, channel, version, stored.encoding, None),
            )
            queries.append(
                Query(
                    sql.MAKE_FULL,
                    {
                        "thread_id": thread_id,
                        "checkpoint_ns": checkpoint_ns,
                        "channel": channel,
                        "version": version,
                        "encoding": stored.encoding,
                        "json": stored.json,
                        "data": stored.data,
                        "type": stored.type,
                    },
                    fetch=False,
                )
            )
        return queries

    def _freeze_histories(self, checkpoints: list[tuple]) -> Operation[list[Query]]:
        """Insert statements that freeze each (thread, ns, id, channels) row's history."""
        queries: list[Query] = []
        for thread_id, checkpoint_ns, checkpoint_id, channels in checkpoints:
            if not channels:
                continue
            config = checkpoint_config(thread_id, checkpoint_ns, checkpoint_id)
            histories = yield from self.delta_history(config, channels)
            for channel, history in histories.items():
                queries.append(
                    self._frozen_history_insert(
                        thread_id, checkpoint_ns, checkpoint_id, channel, history
                    )
                )
        return queries

    def _frozen_history_insert(
        self,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        channel: str,
        history: DeltaChannelHistory,
    ) -> Query:
        where = Where(thread_id, checkpoint_ns, checkpoint_id, channel)
        seqs: list[int] = []
        task_ids: list[str | None] = []
        stored: list[StoredValue] = []
        if "seed" in history:
            seqs.append(0)
            task_ids.append(None)
            stored.append(self.codec.dump(history["seed"], where))
        for seq, (task_id, _, value) in enumerate(history["writes"], start=1):
            seqs.append(seq)
            task_ids.append(task_id)
            stored.append(self.codec.dump(value, where))
        stored = [
            self.codec.seal(
                row,
                channel,
                frozen_aad(
                    thread_id, checkpoint_ns, checkpoint_id, channel, seq, task_id, row.encoding
                ),
            )
            for row, seq, task_id in zip(stored, seqs, task_ids)
        ]
        params = {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": checkpoint_id,
            "channel": channel,
            "seqs": seqs,
            "task_ids": task_ids,
            **columns(stored),
        }
        return Query(sql.INSERT_DELTA_HISTORY, params, fetch=False)

    # ------------------------------------------------------------ rows

    def _load_document(self, row: tuple) -> dict[str, Any]:
        thread_id, checkpoint_ns, checkpoint_id, _, checkpoint_json = row[:5]
        try:
            return self._load_checkpoint_document(checkpoint_json)
        except Exception as exc:  # any parse or decode failure: the row is unreadable
            raise corrupt_row((thread_id, checkpoint_ns, None), checkpoint_id, exc) from exc

    def _checkpoint_tuple(
        self, row: tuple, document: dict[str, Any], values: Materializer, *, resume: bool = False
    ) -> CheckpointTuple:
        """A CheckpointTuple from a checkpoint row (checkpoint, metadata, writes),
        as the graph's state version sees it. `resume`: a run may continue from it."""
        metadata, channel_values = self._decoded(row, document, values)
        return self._assembled(row, document, metadata, channel_values, resume=resume)

    def _decoded(
        self, row: tuple, document: dict[str, Any], values: Materializer
    ) -> tuple[CheckpointMetadata, dict[str, Any]]:
        """The metadata and channel values of a checkpoint row."""
        thread_id, checkpoint_ns, checkpoint_id, _, checkpoint_json, metadata_json = row[:6]
        # The associated data binds sealed rows to their place; without
        # encryption= nothing is opened with it (and a sealed row is refused
        # before it is read), so it is not built: the metadata's re-parses the
        # whole checkpoint document.
        sealed = self.codec.encryption is not None
        try:
            metadata = self.codec.load_metadata(
                metadata_json,
                metadata_aad(thread_id, checkpoint_ns, checkpoint_id, checkpoint_json)
                if sealed
                else b"",
            )
        except Exception as exc:  # any parse or decode failure: the row is unreadable
            raise corrupt_row((thread_id, checkpoint_ns, None), checkpoint_id, exc) from exc
        channel_values = {}
        inline = document.get("channel_values", _NOTHING_INLINE)
        for channel, version in document["channel_versions"].items():
            if channel in inline:
                channel_values[channel] = self._inline_value(
                    (thread_id, checkpoint_ns, channel), checkpoint_id, inline[channel]
                )
                continue
            key = (thread_id, checkpoint_ns, channel, str(version))
            row_ = values.rows.get(key)
            if key not in values.values and row_ is None:
                continue  # no value stored for this version (as InMemorySaver)
            if row_ is not None and row_.encoding == EMPTY_ENCODING:
                if sealed:
                    try:  # an "empty" that is not sealed as one would hide the value
                        self.codec.open_value_row(row_)
                    except RowSealError as exc:
                        raise corrupt_row(key[:3], checkpoint_id, exc) from None
                continue
            channel_values[channel] = values.value(key, checkpoint_id)
        return metadata, channel_values

    def _inline_value(self, where: tuple[str, str, str], checkpoint_id: str, stored: Any) -> Any:
        """A value its checkpoint's document holds (see _load_checkpoint_document)."""
        if self.codec.encryption is not None:  # no inline value is ever sealed
            sealed = RowSealError("the value is plaintext where ciphertext is expected")
            raise corrupt_row(where, checkpoint_id, sealed)
        try:
            return self.codec.load_parsed(JSON, stored, None, None)
        except Exception as exc:  # any decode failure: the row is unreadable
            raise corrupt_row(where, checkpoint_id, exc) from exc

    def _assembled(
        self,
        row: tuple,
        document: dict[str, Any],
        metadata: CheckpointMetadata,
        channel_values: dict[str, Any],
        *,
        resume: bool,
    ) -> CheckpointTuple:
        """The CheckpointTuple of a checkpoint decoded (or remembered decoded)
        with the pending writes of its row, as the graph's state version sees it."""
        (thread_id, checkpoint_ns, checkpoint_id, parent_id, _, _,
         w_task_ids, w_idxs, w_task_paths, w_channels, w_encodings, w_jsons, w_datas,
         w_types, w_state_versions) = row[:_CHECKPOINT_WIDTH]  # fmt: skip
        if w_task_ids and sql.CLAIM_TASK_ID in w_task_ids:
            # the claim of on_conflict="raise" is no pending write (sql._OPTIMISTIC)
            keep = [i for i, t in enumerate(w_task_ids) if t != sql.CLAIM_TASK_ID]
            (w_task_ids, w_idxs, w_task_paths, w_channels, w_encodings, w_jsons, w_datas,
             w_types) = (
                [column[i] for i in keep]
                for column in (w_task_ids, w_idxs, w_task_paths, w_channels, w_encodings,
                               w_jsons, w_datas, w_types)
            )  # fmt: skip
            if w_state_versions:
                w_state_versions = [w_state_versions[i] for i in keep]
        sealed = self.codec.encryption is not None
        pending: list[tuple[tuple[str, str, int], PendingWrite, int | None]] = []
        for i, channel in enumerate(w_channels or ()):
            aad = write_aad(
                thread_id, checkpoint_ns, checkpoint_id, w_task_ids[i], w_idxs[i],
                w_task_paths[i], channel, w_encodings[i],
            ) if sealed else b""  # fmt: skip
            value = self._load(
                thread_id, checkpoint_ns, checkpoint_id, channel,
                w_encodings[i], w_jsons[i], w_datas[i], w_types[i], aad=aad,
            )  # fmt: skip
            key_ = writes_sort_key(w_task_paths[i], w_task_ids[i], w_idxs[i])
            version = w_state_versions[i] if w_state_versions else None
            pending.append((key_, (w_task_ids[i], channel, value), version))
        pending.sort(key=lambda p: p[0])
        checkpoint: Checkpoint = {**document, "channel_values": channel_values}
        found = CheckpointTuple(
            config=checkpoint_config(thread_id, checkpoint_ns, checkpoint_id),
            checkpoint=checkpoint,
            metadata=metadata,
            parent_config=(
                checkpoint_config(thread_id, checkpoint_ns, parent_id) if parent_id else None
            ),
            pending_writes=[write for _, write, _ in pending],
        )
        if self.versions is None:
            return found
        task_paths = dict(zip(w_task_ids or (), w_task_paths or ()))
        write_versions = [version for _, _, version in pending]
        return self.versions.on_read(found, task_paths, write_versions, resume=resume)

    def _remember_bases(
        self,
        thread_id: str,
        checkpoint_ns: str,
        document: dict[str, Any],
        values: Materializer,
    ) -> None:
        """After a read, the versions read become the bases of the next put.

        The graph resumes from what it read, so its next values usually extend
        these. Each base is a second, private rebuild of the value, from the
        rows; a value copied from a base (no row was fetched) is one already.
        """
        private: Materializer | None = None
        for channel, version in document["channel_versions"].items():
            key = (thread_id, checkpoint_ns, channel, str(version))
            if key not in values.rows:
                continue
            cached = self.bases.get(key[:3])
            if cached is not None and cached.version == key[3]:
                continue
            if not shapes.can_be_a_base(values.values.get(key)):
                continue
            private = private or _private_copy(values)
            depth, delta_bytes, full_bytes = _chain_size(values, key)
            self.bases.put(
                key[:3], shapes.Base(key[3], private.value(key), depth, delta_bytes, full_bytes)
            )

    def _remember_read(
        self,
        row: tuple,
        digest: bytes,
        seen: Seen | Remembered | None,
        document: dict[str, Any],
        metadata: CheckpointMetadata,
        channel_values: dict[str, Any],
        value_rows_text: str | None,
    ) -> None:
        """After a read of Postgres, note the checkpoint read for its (thread,
        namespace) (see get_tuple); read a second time (`seen`), keep what it
        decoded, in private objects: a value held as a base at the version
        read is that base's own (a base is never changed), any other a copy."""
        thread_id, checkpoint_ns, checkpoint_id, _, checkpoint_json, metadata_json = row[:6]
        if seen is None or seen.digest != digest:
            self.memo.put(thread_id, checkpoint_ns, Seen(digest, checkpoint_id))
            return
        size = len(checkpoint_json) + len(metadata_json) + len(value_rows_text or "")
        values = {}
        for channel, value in channel_values.items():
            base = self.bases.get((thread_id, checkpoint_ns, channel))
            if base is not None and base.version == str(document["channel_versions"][channel]):
                values[channel] = base.value
                size += base.full_bytes + base.delta_bytes
            else:
                values[channel] = fresh_copy(value)
        self.memo.put(thread_id, checkpoint_ns, Remembered(
            digest, checkpoint_id, fresh_copy(document), fresh_copy(metadata), values, size,
        ))  # fmt: skip

    def _load(
        self,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        channel: str,
        encoding: str,
        json: str | None,
        data: bytes | None,
        type_: str | None,
        *,
        aad: bytes,
    ) -> Any:
        """A pending write or frozen history value; `aad` is its row's identity."""
        try:
            json, data, type_, _ = self.codec.open(channel, json, data, type_, aad)
            return self.codec.load(encoding, json, data, type_)
        except Exception as exc:
            raise corrupt_row((thread_id, checkpoint_ns, channel), checkpoint_id, exc) from exc

    def _inline_values(
        self, checkpoint: Checkpoint, new_versions: ChannelVersions
    ) -> dict[str, Any]:
        """What a checkpoint's document carries (`inline_values=True`): the value
        of each channel it changes (at the version it names) that is a small
        scalar, in the codec's JSON, the value the put writes to the channel's
        row (a row already there at that version keeps its own: the insert
        does nothing; a caller naming one version twice with two values is
        read back differently by rows and documents, while LangGraph's
        versions, with their random tails, are new to each put). An
        unchanged channel is read from its row, as every release reads it: the
        value at that version is the row's, not necessarily what a caller
        passed in `channel_values` for a channel it did not change."""
        inline = {}
        values = checkpoint["channel_values"]
        versions = checkpoint["channel_versions"]
        for channel, version in new_versions.items():
            if channel not in values or versions.get(channel) != version:
                continue  # cleared, or not the version the checkpoint names
            value = values[channel]
            kind = type(value)
            if kind not in _INLINE_TYPES:
                continue
            if (kind is str and len(value) > INLINE_TEXT_MAX) or (
                kind is int and not -_INLINE_INT_LIMIT < value < _INLINE_INT_LIMIT
            ):
                continue
            inline[channel] = self.codec.encode_data(value)
        return inline

    def _checkpoint_document(
        self, checkpoint: Checkpoint, where: Where, inline: dict[str, Any] | None
    ) -> str:
        """The checkpoint as jsonb text: without its values, but for those
        `inline` holds (in the codec's JSON, see _inline_values).

        `channel_versions` stays a plain JSON object, outside the codec, because
        SQL joins on it (``checkpoint -> 'channel_versions' ->> channel``): a
        channel named "$t" must not turn it into the codec's pair-list form.
        """
        versions = checkpoint["channel_versions"]
        for channel, version in versions.items():
            if not (is_object_key(channel) and _is_json_version(version)):
                raise not_storable(
                    where._replace(channel=str(channel)),
                    "$.channel_versions",
                    ValueError(
                        "channel names must be strings without NUL or lone surrogates, and versions str, int "
                        f"or finite float; got {channel!r}: {version!r}"
                    ),
                )
        keys = [k for k in checkpoint if k != "channel_values"]
        plain = all(type(k) is str and is_object_key(k) for k in keys)
        # In jsonb's own order, the codec records no order of these keys:
        # the checkpoint's key order below restores them all.
        stored_order = sorted(keys, key=_jsonb_key) if plain else keys
        rest = {k: checkpoint[k] for k in stored_order if k != "channel_versions"}
        document = self._encoded(rest, where)
        # The checkpoint's own keys named as the document's (a user's
        # "$key_order"): moved into the recorded key order, then in its
        # object form, which no row stored before had (it was an int or list).
        own = {name: document.pop(name) for name in _RESERVED if name in document}
        document["channel_versions"] = versions
        # Key order, recorded only where reading back would not restore it: the
        # checkpoint's own keys (channel_values always comes last on the way
        # back, as from InMemorySaver) and the channels (channel_values' order).
        restored = _checkpoint_key_order(stored_order)
        if keys != restored or own:
            # LangGraph's usual orders by their number, not their ~90 bytes of names.
            known = _KNOWN_KEY_ORDERS.get(tuple(keys))
            order = keys if known is None else known
            document[_KEY_ORDER] = {"keys": order, "own": own} if own else order
        if not in_jsonb_order(versions):
            document[_CHANNEL_ORDER] = (
                _channel_places(versions) if self.compact_forms else list(versions)
            )
        if inline:
            document["channel_values"] = inline
        try:
            return orjson.dumps(document).decode()
        except orjson.JSONEncodeError as exc:
            raise not_storable(where, "$", exc) from exc

    def _load_checkpoint_document(self, text: str) -> dict[str, Any]:
        raw = parse_json(text)
        if type(raw) is Unparsed:
            raise raw.error()
        if type(raw) is not dict:
            raise CodecError(f"the checkpoint is a JSON {type(raw).__name__}, not an object")
        versions = raw.pop("channel_versions", {})
        if type(versions) is not dict:
            raise CodecError("channel_versions is not an object of channel -> version")
        for version in versions.values():  # a loop: all() over a generator costs twice
            if type(version) not in _VERSION_TYPES:
                raise CodecError("channel_versions is not an object of channel -> version")
        inline = raw.pop("channel_values", None)
        if inline is not None and (
            type(inline) is not dict or not all(channel in versions for channel in inline)
        ):
            raise CodecError(
                "channel_values is not an object of values of channels the checkpoint names "
                f"a version of: {sorted(inline) if type(inline) is dict else type(inline).__name__}"
            )
        recorded_keys = raw.pop(_KEY_ORDER, None)
        channel_order = raw.pop(_CHANNEL_ORDER, None)
        if type(recorded_keys) is dict:  # with the checkpoint's keys named as ours
            own = recorded_keys.get("own")
            if type(own) is not dict or not own or not own.keys() <= _RESERVED:
                raise CodecError("a recorded key order holds keys that are not the document's")
            raw.update(own)
            recorded_keys = recorded_keys.get("keys")
        # The codec changes only objects that hold its tag; a document whose
        # text never names it is plain JSON already (a fresh parse, not shared),
        # and decoding it would copy it whole: 20% of a long list()'s CPU.
        rest = self.codec.registry.decode(raw) if _TAG_TEXT in text else raw
        if type(rest) is not dict:
            raise CodecError("the checkpoint is not a plain object")
        channels = _recorded_channel_order(channel_order, list(versions))
        rest["channel_versions"] = {channel: versions[channel] for channel in channels}
        if recorded_keys is None or type(recorded_keys) is int:
            keys = _key_order(recorded_keys, tuple(rest))
        elif type(recorded_keys) is list:
            # `_key_order` checks the names once per key set (an exception is
            # not cached); an item no tuple can hash is no name either.
            try:
                keys = _key_order(tuple(recorded_keys), tuple(rest))
            except TypeError:
                raise CodecError("a recorded key order does not name the object's keys") from None
        else:
            keys = _recorded_order(recorded_keys, _checkpoint_key_order(list(rest)))
        document = {key: rest[key] for key in keys}
        if inline:
            # As stored (JSON, each value decoded where it is read, _decoded):
            # `_assembled` puts the decoded values in its place, last.
            document["channel_values"] = inline
        return document

    def _json(self, value: Any, where: Where) -> str:
        """Typed-codec JSON text for a value that must be jsonb (no serde fallback)."""
        try:
            return self.codec.encode(value)[1]
        except CodecError as exc:
            raise not_storable(where, getattr(exc, "path", "$"), exc) from exc

    def _encoded(self, value: Any, where: Where) -> Any:
        """Typed-codec data for a value that must be jsonb (no serde fallback)."""
        try:
            return self.codec.encode_data(value)
        except CodecError as exc:
            raise not_storable(where, getattr(exc, "path", "$"), exc) from exc


# The arrays of sql.COPY_SEALED (an empty thread's copy sends them empty).
_COPY_ARRAYS = (
    *("c_ns", "c_ids", "c_parents", "c_runs", "c_checkpoints", "c_metadata", "c_created"),
    *("v_ns", "v_channels", "v_versions", "v_encodings", "v_jsons", "v_datas", "v_types"),
    *("v_bases", "v_depths", "w_ns", "w_ids", "w_tasks", "w_idxs", "w_paths", "w_channels"),
    *("w_encodings", "w_jsons", "w_datas", "w_types", "w_state_versions", "w_runs"),
    *("h_ns", "h_ids", "h_channels", "h_seqs"),
    *("h_tasks", "h_encodings", "h_jsons", "h_datas", "h_types"),
)


class _NextPage(NamedTuple):
    """The page of a `list` after the one being emitted (see `CheckpointStore.list`)."""

    rows: list
    size: int
    documents: list[dict[str, Any]]
    fetch: Query | None  # the values it lacks
    after: Query | None  # the rows of the page after it
    after_size: int

    @property
    def requests(self) -> tuple[Query, ...]:
        return tuple(q for q in (self.fetch, self.after) if q is not None)


# The checkpoint and writes columns every checkpoint query starts with (the
# writes as one JSON text, sql._WRITES), and as the readers take them once
# `_expanded` split the writes into nine columns (a hot head's rows too).
_CHECKPOINT_COLUMNS = 7
_CHECKPOINT_WIDTH = 15
# In a GET_TUPLE row (before `_expanded`), after the value rows: whether the
# checkpoint is the one the reader remembers, and its digest (sql._DIGEST).
_REMEMBERED = _CHECKPOINT_COLUMNS + 1
_DIGEST = _CHECKPOINT_COLUMNS + 2


_NO_WRITES = (None,) * (_CHECKPOINT_WIDTH - 6)


_GENERIC_PLAN = Query(sql.GENERIC_PLAN, {}, fetch=False, prepare=True)


def _on_generic_plan(read: Query) -> Operation[Any]:
    """`read`'s rows, run on its generic plan (sql.GENERIC_PLAN)."""
    results = yield Transaction((_GENERIC_PLAN, read))
    return results[1]


def _expanded(row: tuple) -> tuple:
    """A checkpoint row with its writes JSON (sql._WRITES) split into the columns
    task_ids, idxs, task_paths, channels, encodings, jsons, datas, types,
    state_versions (each None when there are no writes)."""
    writes = row[6]
    if writes is None:
        return (*row[:6], *_NO_WRITES)
    columns = [list(column) for column in zip(*orjson.loads(writes))]
    columns[6] = [None if data is None else bytes.fromhex(data) for data in columns[6]]
    return (*row[:6], *columns)


def _claim_of(row: tuple) -> str | None:
    """The claim on a checkpoint row (on_conflict, see sql._OPTIMISTIC): the
    task_path of its write in the claim slot."""
    task_ids, task_paths = row[6], row[8]
    if task_ids:
        for task_id, task_path in zip(task_ids, task_paths):
            if task_id == sql.CLAIM_TASK_ID:
                return task_path
    return None


# The checkpoint document's record of channel_versions' key order, beside that
# plain object (which SQL reads by channel name), when jsonb would reorder it.
# Not a Checkpoint key; the rest of the document goes through the codec.
_CHANNEL_ORDER = "$channel_order"
_KEY_ORDER = "$key_order"  # the same for the checkpoint's own keys
_RESERVED = frozenset((_CHANNEL_ORDER, _KEY_ORDER))
# A checkpoint's values kept in its document ("channel_values": channel ->
# value in the codec's JSON, a plain object: each value is decoded alone, so a
# channel named as the codec's tag stays a name): read since 2026-12-07, and
# written with `inline_values=True` beside the values' rows (README, "Stored
# forms change in two releases"). Readers take those channels from the
# document and need no row for them; the others are read from their rows.
_NOTHING_INLINE: frozenset[str] = frozenset()
# What a document carries inline: scalars whose codec JSON is a few bytes, as
# the values of a counter, a flag, a route or a short label are. Every
# checkpoint repeats them while the channel holds them, so longer text (a
# message, a document) stays a row of its own, written once per version.
_INLINE_TYPES = frozenset((type(None), bool, int, float, str))
INLINE_TEXT_MAX = 64
_INLINE_INT_LIMIT = 2**63
# The order of a Checkpoint's fields as LangGraph builds one (`empty_checkpoint`,
# `create_checkpoint`): restored without being recorded.
_CHECKPOINT_FIELDS = (
    "v", "id", "ts", "channel_values", "channel_versions", "versions_seen", "updated_channels",
)  # fmt: skip


_VERSION_TYPES = frozenset((str, int, float))


_TAG_TEXT = f'"{TAG}"'


@functools.lru_cache(maxsize=256)
def _key_order(recorded: int | tuple[str, ...] | None, keys: tuple[str, ...]) -> tuple[str, ...]:
    """`_recorded_order` of an order recorded by number, by names, or not at
    all, for a document with `keys`: the same few key sets come back on every
    row (checking a list of names was a fifth of reading a document whose
    keys are in an order of its own)."""
    order = list(recorded) if type(recorded) is tuple else recorded
    return tuple(_recorded_order(order, _checkpoint_key_order(list(keys))))


def _checkpoint_key_order(keys: list[str]) -> list[str]:
    """What reading back restores unrecorded: Checkpoint's fields first, in
    LangGraph's order, then any other key in its stored order."""
    return [k for k in _CHECKPOINT_FIELDS if k in keys] + [
        k for k in keys if k not in _CHECKPOINT_FIELDS
    ]


# Key orders LangGraph gives a checkpoint (copy_checkpoint's, with and without
# updated_channels; channel_values left out), recorded as their index here.
_KEY_ORDERS = (
    ("v", "ts", "id", "channel_versions", "versions_seen", "updated_channels"),
    ("v", "ts", "id", "channel_versions", "versions_seen"),
)
_KNOWN_KEY_ORDERS = {order: i for i, order in enumerate(_KEY_ORDERS)}


def _jsonb_key(key: str) -> tuple[int, bytes]:
    """Where jsonb puts an object key: shorter keys first, then by UTF-8 bytes."""
    data = key.encode()
    return len(data), data


def _recorded_order(order: Any, keys: list[str]) -> list[str] | None:
    """A recorded key order, checked to name exactly `keys` (a tampered row's may not)."""
    if order is None:
        return keys
    if type(order) is int and 0 <= order < len(_KEY_ORDERS):
        order = list(_KEY_ORDERS[order])
    if type(order) is not list or len(order) != len(keys):
        raise CodecError("a recorded key order does not name the object's keys")
    for key in order:
        if type(key) is not str:
            raise CodecError("a recorded key order does not name the object's keys")
    if set(order) != set(keys):
        raise CodecError("a recorded key order does not name the object's keys")
    return order


def _channel_places(versions: Mapping[str, Any]) -> str:
    """The channels' order as where each stands in jsonb's order of them, "1,0,3,2"."""
    place = {channel: i for i, channel in enumerate(sorted(versions, key=_jsonb_key))}
    return ",".join(str(place[channel]) for channel in versions)


def _recorded_channel_order(order: Any, channels: list[str]) -> list[str] | None:
    """The channels in their recorded order: by name (checked by
    `_recorded_order`), or by place (`_channel_places`, what `compact_forms`
    writes), checked to be a permutation. The places take a few bytes a row
    where the names took 92 of a chat-200-delta document's 816 (7 rows a page,
    not 6); releases since 2026-12-04 read them (see SHORT_VERSION_DIGITS)."""
    if type(order) is not str:
        return _recorded_order(order, channels)
    stored = sorted(channels, key=_jsonb_key)
    try:
        places = [int(place) for place in order.split(",")]
    except ValueError:
        places = []
    if sorted(places) != list(range(len(stored))):
        raise CodecError("a recorded channel order does not name the checkpoint's channels")
    return [stored[place] for place in places]


def _page_sizes(first: int) -> Iterator[int]:
    """`list` page sizes: doubling from `first` up to MAX_PAGE_SIZE (or `first`, if larger)."""
    size = first
    while True:
        yield size
        size = min(size * 2, max(first, MAX_PAGE_SIZE))


def _page_size(sizes: Iterator[int], remaining: int | None) -> int:
    """The next page's size, no larger than the `remaining` checkpoints a limit allows."""
    size = next(sizes)
    return size if remaining is None else min(size, remaining)


def _value_chains(keys: list[ValueKey], known: Sequence[ValueKey] = ()) -> Query:
    """The rows of `keys` and of their bases, stopping at the `known` ones."""
    return Query(
        sql.VALUE_CHAINS,
        {**_key_columns("", keys), **_key_columns("known_", known)},
        prepare=True,
    )


def _key_columns(prefix: str, keys: Sequence[ValueKey]) -> dict[str, list[str]]:
    return {
        f"{prefix}threads": TextArray([k[0] for k in keys]),
        f"{prefix}namespaces": TextArray([k[1] for k in keys]),
        f"{prefix}channels": TextArray([k[2] for k in keys]),
        f"{prefix}versions": TextArray([k[3] for k in keys]),
    }


def _parse(json: str | None) -> Any:
    return parse_json(json)


def _value_row(thread_id, checkpoint_ns, channel, version, base, encoding, json, data, type_):
    return ValueRow(
        (thread_id, checkpoint_ns, channel, version), base, encoding, _parse(json), data, type_
    )


def _known(keys: list[ValueKey]) -> dict[str, list[str]]:
    return {
        "known_channels": TextArray([k[2] for k in keys]),
        "known_versions": TextArray([k[3] for k in keys]),
    }


def _row_size(row: ValueRow) -> int:
    return len(row.data or b"") + (len(orjson.dumps(row.parsed)) if row.parsed is not None else 0)


def _json_size(row: ValueRow) -> int:
    """A row's encoded size; a sealed row's ciphertext stands for its JSON."""
    if row.parsed is not None:
        return len(orjson.dumps(row.parsed))
    return len(row.data or b"") if is_sealed(row.type) else 0


def _private_copy(values: Materializer) -> Materializer:
    copy = Materializer(values.codec)
    copy.add(values.rows.values())
    return copy


def _chain_size(values: Materializer, key: ValueKey) -> tuple[int, int, int]:
    """(depth, delta bytes, full bytes) of a version's chain, from its rows' JSON size."""
    depth = delta_bytes = 0
    row = values.rows.get(key)
    # Called after the chain was rebuilt (which rejects cycles): it ends at a full row.
    while row is not None and row.encoding in DELTA_ENCODINGS:
        depth += 1
        delta_bytes += _json_size(row)
        row = values.rows.get((*key[:3], row.base_version))
    full_bytes = _json_size(row) if row is not None else 0
    return depth, delta_bytes, full_bytes


# A root channel value this small (as typed JSON) is kept in the thread row too,
# so `threads.search(values=...)` finds it by jsonb containment.
SEARCHABLE_VALUE_BYTES = 1024


def seen_of(run: RunWrites | None, thread_id: str) -> str | None:
    """The deletion stamp a write (or a tool claim) on `thread_id` carries
    (sql._DELETED, ledger.CLAIM): the one its run's first read of the thread
    saw; None outside a LangGraph run (a direct call read nothing: only what
    it names is checked)."""
    return run.seen_of(thread_id) if run is not None else None


def lineage_params(
    own: Sequence[tuple[str, str | None]], checkpoint_map: Any
) -> dict[str, TextArray]:
    """The checkpoints a write's `deleted` check looks for (sql._DELETED): the
    (namespace, id) pairs in `own` (an id None: none) and those of the
    {namespace: checkpoint id} a subgraph runs under.

    Sent as arrays for one index probe of the tombstones: the namespaces and
    ids narrow it, and the pairs, keyed `len(ns):ns id` (no two pairs share a
    key), make it exact. Built in Postgres from the same inputs (a CTE over
    jsonb_each_text, hash-joined to the tombstones), the check cost 16 µs of
    backend CPU per put and 13 per put_writes more, in setting up its plan
    nodes (README, "The Postgres side of a write").

    >>> lineage_params([("", "p"), ("", "c")], {"": "r"})["lineage_keys"]
    ['0:p', '0:c', '0:r']
    """
    pairs = [(ns, cid) for ns, cid in own if cid is not None]
    if isinstance(checkpoint_map, Mapping):
        pairs += [(str(ns), str(cid)) for ns, cid in checkpoint_map.items() if cid is not None]
    return {
        "lineage_ns": TextArray(sorted({ns for ns, _ in pairs})),
        "lineage_ids": TextArray(sorted({cid for _, cid in pairs})),
        "lineage_keys": TextArray([f"{len(ns)}:{ns}{cid}" for ns, cid in pairs]),
    }


def _status_of_writes(checkpoint_ns: str, channels: list[str]) -> str | None:
    if checkpoint_ns != "":
        return None
    if ERROR in channels:
        return "error"
    if INTERRUPT in channels:
        return "interrupted"
    return None


def _is_json_version(version: Any) -> bool:
    if type(version) is float:
        return math.isfinite(version)
    return type(version) in (str, int) and "\x00" not in str(version)


def _text_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def registry_metadata(config: RunnableConfig) -> dict[str, Any]:
    """The keys of a run's config metadata that its puts merge into the
    thread's registry metadata (`threads.get(...).metadata`)."""
    return {
        k: v
        for k, v in (config.get("metadata") or {}).items()
        if is_object_key(k)
        and not k.startswith("__")
        and k not in EXCLUDED_METADATA_KEYS
        and type(v) in (str, int, float, bool)
    }


def _run_id_of(config: RunnableConfig) -> str | None:
    """The run_id a put of `config` records in its metadata (the checkpoints'
    run_id column): config metadata first, then configurable, as LangGraph's
    get_checkpoint_metadata merges them."""
    for source in (config.get("metadata"), config.get("configurable")):
        if source and source.get("run_id") is not None:
            return str(source["run_id"])
    return None


def _conditional_migration(number: int, migration: str) -> str:
    """A migration that runs only if the schema table does not record it yet."""
    return f"""
    DO $colosseum_migrate$
    BEGIN
        IF NOT EXISTS (SELECT 1 FROM {schema.SCHEMA_TABLE} WHERE version = {number}) THEN
            EXECUTE $colosseum_sql${migration}$colosseum_sql$;
            INSERT INTO {schema.SCHEMA_TABLE} (version) VALUES ({number});
        END IF;
    END
    $colosseum_migrate$
    """
