"""Every checkpointer operation, written once, as a sans-IO generator.

`ColosseumSaver` and `AsyncColosseumSaver` only drive these generators over
psycopg (see `io.py`). Nothing here opens a socket.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
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

from langgraph_colosseum._core import schema, sql
from langgraph_colosseum._core.io import Emit, Operation, Query, Transaction
from langgraph_colosseum._core.values import EMPTY, StoredValue, ValueCodec, Where, columns
from langgraph_colosseum.errors import (
    CodecError,
    CorruptRowError,
    InvalidConfigError,
    SchemaVersionError,
    ValueNotStorableError,
)

DEFAULT_PAGE_SIZE = 100


def thread_of(config: RunnableConfig) -> tuple[str, str]:
    """(thread_id, checkpoint_ns) of a config, with a clear error when absent."""
    configurable = config.get("configurable") or {}
    thread_id = configurable.get("thread_id")
    if thread_id is None or thread_id == "":
        raise InvalidConfigError(
            "the config has no configurable.thread_id; pass "
            '{"configurable": {"thread_id": ...}} to identify the thread'
        )
    return str(thread_id), configurable.get("checkpoint_ns") or ""


def checkpoint_config(thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": checkpoint_id,
        }
    }


def next_version(current: str | int | float | None) -> str:
    """Zero-padded so versions sort as text; random tail as InMemorySaver's."""
    if current is None:
        number = 0
    elif isinstance(current, (int, float)):
        number = int(current)
    else:
        number = int(current.split(".")[0])
    return f"{number + 1:032}.{random.random():016}"


class CheckpointStore:
    """The checkpointer's logic over the `colosseum_*` tables."""

    def __init__(self, codec: ValueCodec, *, page_size: int = DEFAULT_PAGE_SIZE) -> None:
        self.codec = codec
        self.page_size = page_size

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
        return version

    # ------------------------------------------------------------ reads

    def get_tuple(self, config: RunnableConfig) -> Operation[CheckpointTuple | None]:
        thread_id, checkpoint_ns = thread_of(config)
        checkpoint_id = get_checkpoint_id(config)
        params = {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}
        if checkpoint_id:
            rows = yield Query(sql.GET_TUPLE_BY_ID, {**params, "checkpoint_id": checkpoint_id})
        else:
            rows = yield Query(sql.GET_TUPLE_LATEST, params)
        return self.tuple_from_row(rows[0]) if rows else None

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
                params["thread_id"] = str(configurable["thread_id"])
            # As InMemorySaver: no checkpoint_ns key means every namespace.
            if configurable.get("checkpoint_ns") is not None:
                where.append(sql.LIST_WHERE_NS)
                params["checkpoint_ns"] = configurable["checkpoint_ns"]
            if checkpoint_id := configurable.get("checkpoint_id"):
                where.append(sql.LIST_WHERE_ID)
                params["checkpoint_id"] = checkpoint_id
        if before is not None and (before_id := get_checkpoint_id(before)):
            where.append(sql.LIST_WHERE_BEFORE)
            params["before"] = before_id
        for i, (key, value) in enumerate((filter or {}).items()):
            where.append(sql.LIST_WHERE_METADATA.format(i=i))
            params[f"mk{i}"] = key
            params[f"mv{i}"] = self.codec.dump_json(value)
        remaining = limit
        cursor: tuple[str, str, str] | None = None
        while remaining is None or remaining > 0:
            page_size = self.page_size if remaining is None else min(self.page_size, remaining)
            page_where = list(where)
            page_params = {**params, "page_size": page_size}
            if cursor is not None:
                page_where.append(sql.LIST_WHERE_CURSOR)
                page_params.update(
                    cursor_id=cursor[0], cursor_thread=cursor[1], cursor_ns=cursor[2]
                )
            query = sql.LIST_PAGE.format(where=" AND ".join(page_where) or "true")
            rows = yield Query(query, page_params)
            for row in rows:
                yield Emit(self.tuple_from_row(row))
            if remaining is not None:
                remaining -= len(rows)
            if len(rows) < page_size:
                return
            last = rows[-1]
            cursor = (last[2], last[0], last[1])

    def delta_history(
        self, config: RunnableConfig, channels: Sequence[str]
    ) -> Operation[dict[str, DeltaChannelHistory]]:
        """`get_delta_channel_history` in one round trip, whatever the thread's length."""
        if not channels:
            return {}
        thread_id, checkpoint_ns = thread_of(config)
        rows = yield Query(
            sql.DELTA_HISTORY,
            {
                "thread_id": thread_id,
                "checkpoint_ns": checkpoint_ns,
                "checkpoint_id": get_checkpoint_id(config),
                "channels": list(channels),
            },
        )
        return self._assemble_history(thread_id, checkpoint_ns, channels, rows)

    def _assemble_history(
        self, thread_id: str, checkpoint_ns: str, channels: Sequence[str], rows: list[tuple]
    ) -> dict[str, DeltaChannelHistory]:
        writes: dict[str, list[tuple[int, tuple[str, str, int], PendingWrite]]] = {
            ch: [] for ch in channels
        }
        seeds: dict[str, tuple[int, Any]] = {}
        frozen: dict[str, list[tuple[int, int, str | None, Any]]] = {}
        for kind, depth, channel, task_id, task_path, idx, *stored in rows:
            value = self._load(thread_id, checkpoint_ns, "?", channel, *stored)
            if kind == "write":
                key = writes_sort_key(task_path, task_id, idx)
                writes[channel].append((depth, key, (task_id, channel, value)))
            elif kind == "value":
                seeds[channel] = (depth, value)
            else:
                frozen.setdefault(channel, []).append((depth, idx, task_id, value))
        result: dict[str, DeltaChannelHistory] = {}
        for ch in channels:
            # Oldest ancestor first; within one checkpoint, live execution order.
            ordered = [w for _, _, w in sorted(writes[ch], key=lambda e: (-e[0], e[1]))]
            entry: DeltaChannelHistory = {"writes": ordered}
            if ch in seeds:
                entry["seed"] = seeds[ch][1]
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
        stored: list[StoredValue] = []
        for channel, _version in new_versions.items():
            where = Where(thread_id, checkpoint_ns, checkpoint_id, channel)
            stored.append(self.codec.dump(values[channel], where) if channel in values else EMPTY)
        full_metadata = get_serializable_checkpoint_metadata(config, metadata)
        params = {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": checkpoint_id,
            "parent_checkpoint_id": get_checkpoint_id(config),
            "run_id": _text_or_none(full_metadata.get("run_id")),
            "checkpoint": self._checkpoint_document(
                checkpoint, Where(thread_id, checkpoint_ns, checkpoint_id, "<checkpoint>")
            ),
            "metadata": self._json(
                full_metadata, Where(thread_id, checkpoint_ns, checkpoint_id, "<metadata>")
            ),
            "channels": list(new_versions),
            "versions": [str(v) for v in new_versions.values()],
            **columns(stored),
        }
        yield Query(sql.PUT, params, fetch=False)
        return checkpoint_config(thread_id, checkpoint_ns, checkpoint_id)

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
        checkpoint_id = get_checkpoint_id(config)
        if not checkpoint_id:
            raise InvalidConfigError(
                f"put_writes for thread {thread_id!r} needs configurable.checkpoint_id "
                "(the checkpoint the writes belong to)"
            )
        # A special channel has one slot per task (its negative idx) and the last
        # write to it wins, as in InMemorySaver: a node that interrupts twice
        # hands over `__resume__` twice in one call.
        by_idx = {
            WRITES_IDX_MAP.get(channel, i): (channel, value)
            for i, (channel, value) in enumerate(writes)
        }
        stored = [
            self.codec.dump(value, Where(thread_id, checkpoint_ns, checkpoint_id, channel))
            for channel, value in by_idx.values()
        ]
        params = {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": checkpoint_id,
            "task_id": task_id,
            "task_path": task_path,
            "idxs": list(by_idx),
            "channels": [channel for channel, _ in by_idx.values()],
            **columns(stored),
        }
        yield Query(sql.PUT_WRITES, params, fetch=False)

    # ------------------------------------------------------------ maintenance

    def delete_threads(self, thread_ids: Sequence[str]) -> Operation[None]:
        if not thread_ids:
            return
        params = {"thread_ids": [str(t) for t in thread_ids]}
        yield Transaction(tuple(Query(q, params, fetch=False) for q in sql.DELETE_THREADS))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> Operation[None]:
        """Copy every checkpoint, value, write and frozen history: the whole chain."""
        params = {"source": str(source_thread_id), "target": str(target_thread_id)}
        yield Transaction(tuple(Query(q, params, fetch=False) for q in sql.COPY_THREAD))

    def prune(self, thread_ids: Sequence[str], strategy: str = "keep_latest") -> Operation[None]:
        """Keep the newest checkpoint per namespace (or delete everything).

        DeltaChannel-safe: before ancestors go, the history each kept checkpoint
        is rebuilt from is frozen into `colosseum_delta_histories`.
        """
        if strategy == "delete":
            yield from self.delete_threads(thread_ids)
            return
        if strategy != "keep_latest":
            raise ValueError(f"unknown prune strategy {strategy!r}; use 'keep_latest' or 'delete'")
        if not thread_ids:
            return
        thread_list = [str(t) for t in thread_ids]
        kept = yield Query(sql.LATEST_PER_NAMESPACE, {"thread_ids": thread_list})
        if not kept:
            return
        queries = yield from self._freeze_histories(kept)
        kept_params = {
            "kept_threads": [row[0] for row in kept],
            "kept_namespaces": [row[1] for row in kept],
            "kept_ids": [row[2] for row in kept],
        }
        queries += [Query(q, kept_params, fetch=False) for q in sql.PRUNE_KEEP_LATEST]
        queries.append(
            Query(sql.COLLECT_UNREFERENCED_VALUES, {"thread_ids": thread_list}, fetch=False)
        )
        yield Transaction(tuple(queries))

    def delete_for_runs(self, run_ids: Sequence[str]) -> Operation[None]:
        """Delete the runs' checkpoints and writes.

        A surviving checkpoint whose parent is deleted gets its delta-channel
        history frozen first, so it still rebuilds the state it had.
        """
        if not run_ids:
            return
        params = {"run_ids": [str(r) for r in run_ids]}
        threads = yield Query(sql.THREADS_OF_RUNS, params)
        if not threads:
            return
        boundaries = yield Query(sql.RUN_BOUNDARIES, params)
        queries = yield from self._freeze_histories(boundaries)
        queries += [Query(q, params, fetch=False) for q in sql.DELETE_RUNS]
        queries.append(
            Query(
                sql.COLLECT_UNREFERENCED_VALUES,
                {"thread_ids": [row[0] for row in threads]},
                fetch=False,
            )
        )
        yield Transaction(tuple(queries))

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

    def tuple_from_row(self, row: tuple) -> CheckpointTuple:
        (
            thread_id,
            checkpoint_ns,
            checkpoint_id,
            parent_id,
            checkpoint_json,
            metadata_json,
            v_channels,
            v_encodings,
            v_jsons,
            v_datas,
            v_types,
            w_task_ids,
            w_idxs,
            w_task_paths,
            w_channels,
            w_encodings,
            w_jsons,
            w_datas,
            w_types,
        ) = row
        try:
            document = self._load_checkpoint_document(checkpoint_json)
            metadata = self.codec.load_json(metadata_json)
        except CodecError as exc:
            raise CorruptRowError(
                thread_id=thread_id,
                checkpoint_ns=checkpoint_ns,
                checkpoint_id=checkpoint_id,
                channel=None,
                cause=exc,
            ) from exc
        channel_values = {}
        for i, channel in enumerate(v_channels or ()):
            channel_values[channel] = self._load(
                thread_id,
                checkpoint_ns,
                checkpoint_id,
                channel,
                v_encodings[i],
                v_jsons[i],
                v_datas[i],
                v_types[i],
            )
        pending: list[tuple[tuple[str, str, int], PendingWrite]] = []
        for i, channel in enumerate(w_channels or ()):
            value = self._load(
                thread_id,
                checkpoint_ns,
                checkpoint_id,
                channel,
                w_encodings[i],
                w_jsons[i],
                w_datas[i],
                w_types[i],
            )
            key = writes_sort_key(w_task_paths[i], w_task_ids[i], w_idxs[i])
            pending.append((key, (w_task_ids[i], channel, value)))
        pending.sort(key=lambda p: p[0])
        checkpoint: Checkpoint = {**document, "channel_values": channel_values}
        return CheckpointTuple(
            config=checkpoint_config(thread_id, checkpoint_ns, checkpoint_id),
            checkpoint=checkpoint,
            metadata=metadata,
            parent_config=(
                checkpoint_config(thread_id, checkpoint_ns, parent_id) if parent_id else None
            ),
            pending_writes=[write for _, write in pending],
        )

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
    ) -> Any:
        try:
            return self.codec.load(encoding, json, data, type_)
        except Exception as exc:
            raise CorruptRowError(
                thread_id=thread_id,
                checkpoint_ns=checkpoint_ns,
                checkpoint_id=checkpoint_id,
                channel=channel,
                cause=exc,
            ) from exc

    def _checkpoint_document(self, checkpoint: Checkpoint, where: Where) -> str:
        """The checkpoint without its values, as jsonb text.

        `channel_versions` stays a plain JSON object, outside the codec, because
        SQL joins on it (``checkpoint -> 'channel_versions' ->> channel``): a
        channel named "$t" must not turn it into the codec's pair-list form.
        """
        versions = checkpoint["channel_versions"]
        for channel, version in versions.items():
            if not (type(channel) is str and "\x00" not in channel and _is_json_version(version)):
                raise ValueNotStorableError(
                    thread_id=where.thread_id,
                    checkpoint_ns=where.checkpoint_ns,
                    checkpoint_id=where.checkpoint_id,
                    channel=str(channel),
                    path="$.channel_versions",
                    cause=ValueError(
                        "channel names must be strings without NUL, and versions str, int "
                        f"or finite float; got {channel!r}: {version!r}"
                    ),
                )
        rest = {
            k: v for k, v in checkpoint.items() if k not in ("channel_values", "channel_versions")
        }
        document = self._encoded(rest, where)
        document["channel_versions"] = versions
        return orjson.dumps(document).decode()

    def _load_checkpoint_document(self, text: str) -> dict[str, Any]:
        raw = orjson.loads(text)
        versions = raw.pop("channel_versions", {})
        document = self.codec.registry.decode(raw)
        document["channel_versions"] = versions
        return document

    def _json(self, value: Any, where: Where) -> str:
        return orjson.dumps(self._encoded(value, where)).decode()

    def _encoded(self, value: Any, where: Where) -> Any:
        """Typed-codec data for a value that must be jsonb (no serde fallback)."""
        try:
            return self.codec.registry.encode(value)
        except CodecError as exc:
            raise ValueNotStorableError(
                thread_id=where.thread_id,
                checkpoint_ns=where.checkpoint_ns,
                checkpoint_id=where.checkpoint_id,
                channel=where.channel,
                path=getattr(exc, "path", "$"),
                cause=exc,
            ) from exc


def _is_json_version(version: Any) -> bool:
    if type(version) is float:
        return math.isfinite(version)
    return type(version) in (str, int) and "\x00" not in str(version)


def _text_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


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
