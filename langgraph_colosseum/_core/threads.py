"""Thread registry operations (sans-IO): get, search, update, run guard, audit trail.

The registry row is written by `put` / `put_writes` in their own statements
(`sql.PUT`, `sql.PUT_WRITES`), so it is never behind the checkpoints.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from langgraph.checkpoint.base import writes_sort_key
from langgraph.checkpoint.serde.types import TASKS

from langgraph_colosseum._core.io import Operation, Query, Sleep
from langgraph_colosseum._core.values import ValueCodec
from langgraph_colosseum.errors import CodecError, CorruptRowError, ThreadBusyError

logger = logging.getLogger("langgraph_colosseum")

_THREAD_COLUMNS = """
    thread_id, status, created_at, updated_at, metadata::text, state_values::text,
    head_checkpoint_id, expires_at
"""

GET = f"SELECT {_THREAD_COLUMNS} FROM colosseum_threads WHERE thread_id = %(thread_id)s"

SEARCH = f"""
SELECT {_THREAD_COLUMNS} FROM colosseum_threads
WHERE (%(metadata)s::jsonb IS NULL OR metadata @> %(metadata)s::jsonb)
  AND (%(values)s::jsonb IS NULL OR state_values @> %(values)s::jsonb)
  AND (%(status)s::text IS NULL OR status = %(status)s)
ORDER BY updated_at DESC, thread_id
LIMIT %(limit)s OFFSET %(offset)s
"""

UPDATE = f"""
INSERT INTO colosseum_threads AS t (thread_id, metadata) VALUES (%(thread_id)s, %(metadata)s::jsonb)
ON CONFLICT (thread_id) DO UPDATE SET metadata = t.metadata || EXCLUDED.metadata, updated_at = now()
RETURNING {_THREAD_COLUMNS}
"""

# Take the thread when no live run holds it; the token fences the holder.
ACQUIRE = """
INSERT INTO colosseum_threads AS t (thread_id, status, run_owner, run_token, run_lease_until)
VALUES (%(thread_id)s, 'busy', %(owner)s, 1, now() + make_interval(secs => %(lease)s))
ON CONFLICT (thread_id) DO UPDATE
SET status = 'busy', run_owner = EXCLUDED.run_owner, run_token = t.run_token + 1,
    run_lease_until = EXCLUDED.run_lease_until, updated_at = now()
WHERE t.run_owner IS NULL OR t.run_lease_until < now()
RETURNING run_token
"""

RENEW = """
UPDATE colosseum_threads SET run_lease_until = now() + make_interval(secs => %(lease)s)
WHERE thread_id = %(thread_id)s AND run_owner = %(owner)s
"""

# Let go, and settle the status from what the head left pending.
RELEASE = """
UPDATE colosseum_threads t
SET run_owner = NULL, run_lease_until = NULL, updated_at = now(),
    status = CASE
        WHEN EXISTS (SELECT 1 FROM colosseum_writes w
                     WHERE w.thread_id = t.thread_id AND w.checkpoint_ns = ''
                       AND w.checkpoint_id = t.head_checkpoint_id AND w.channel = '__error__')
            THEN 'error'
        WHEN EXISTS (SELECT 1 FROM colosseum_writes w
                     WHERE w.thread_id = t.thread_id AND w.checkpoint_ns = ''
                       AND w.checkpoint_id = t.head_checkpoint_id AND w.channel = '__interrupt__')
            THEN 'interrupted'
        ELSE 'idle' END
WHERE thread_id = %(thread_id)s AND run_owner = %(owner)s
"""

# The root branch from the head back to the first checkpoint, with the writes
# to `channel` (and the Send writes that name push tasks) at each checkpoint.
AUDIT = """
WITH RECURSIVE branch AS (
    SELECT c.checkpoint_id, c.parent_checkpoint_id, 0 AS depth
    FROM colosseum_checkpoints c
    WHERE c.thread_id = %(thread_id)s AND c.checkpoint_ns = ''
      AND c.checkpoint_id = (SELECT head_checkpoint_id FROM colosseum_threads
                             WHERE thread_id = %(thread_id)s)
  UNION ALL
    SELECT p.checkpoint_id, p.parent_checkpoint_id, branch.depth + 1
    FROM branch
    CROSS JOIN LATERAL (
        SELECT c.checkpoint_id, c.parent_checkpoint_id FROM colosseum_checkpoints c
        WHERE c.thread_id = %(thread_id)s AND c.checkpoint_ns = ''
          AND c.checkpoint_id = branch.parent_checkpoint_id
        LIMIT 1
    ) AS p
)
SELECT branch.depth, branch.checkpoint_id, c.metadata -> 'step', c.checkpoint ->> 'ts',
       w.task_id, w.task_path, w.idx, w.channel, w.encoding, w.value::text, w.value_bytes,
       w.value_type
FROM branch
JOIN colosseum_checkpoints c
  ON c.thread_id = %(thread_id)s AND c.checkpoint_ns = '' AND c.checkpoint_id = branch.checkpoint_id
LEFT JOIN LATERAL (
    SELECT * FROM colosseum_writes w
    WHERE w.thread_id = %(thread_id)s AND w.checkpoint_ns = ''
      AND w.checkpoint_id = branch.checkpoint_id AND w.channel IN (%(channel)s, %(tasks)s)
    OFFSET 0
) AS w ON true
"""


@dataclass(frozen=True)
class Retention:
    """How long an idle thread lives, and what `sweep()` does when it expires.

    Every write and every read of a thread pushes its expiry `thread_ttl` ahead.
    `strategy="delete"` removes an expired thread whole (checkpoints, writes,
    tool-ledger rows, registry row); `"keep_latest"` prunes it to its
    `keep_last` (default 1) newest checkpoints per namespace (DeltaChannel-safe,
    see `prune`).

    Example:
        >>> ColosseumSaver.from_conn_string(dsn, retention=Retention(timedelta(days=30)))
    """

    thread_ttl: timedelta
    keep_last: int | None = None
    strategy: Literal["delete", "keep_latest"] = "delete"
    batch_size: int = 500

    def __post_init__(self) -> None:
        if self.keep_last is not None and self.strategy != "keep_latest":
            raise ValueError('keep_last applies to strategy="keep_latest"')
        if self.keep_last is not None and self.keep_last < 1:
            raise ValueError(f"keep_last must be at least 1, not {self.keep_last}")


@dataclass(frozen=True)
class ThreadInfo:
    """A thread as the registry knows it (named after the LangGraph SDK's Thread)."""

    thread_id: str
    status: str
    created_at: datetime
    updated_at: datetime
    metadata: dict[str, Any]
    values: dict[str, Any]
    head_checkpoint_id: str | None
    expires_at: datetime | None


@dataclass(frozen=True)
class AuditEntry:
    """One message written to a channel on the thread's current branch."""

    message: Any
    node: str
    step: int | None
    checkpoint_id: str  # the checkpoint the message's step produced
    created_at: str  # that checkpoint's timestamp (ISO 8601)


class UnreadableRows:
    """Counts (and logs) the registry rows a listing left out because they
    cannot be read: one tampered or corrupt row must not fail every caller's
    `search`. Shared by every `saver.threads` of one saver."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()

    def __call__(self, error: CorruptRowError) -> None:
        with self._lock:
            self.count += 1
        logger.warning("thread search skipped a registry row: %s", error)


def _thread(row: tuple, codec: ValueCodec) -> ThreadInfo:
    """A registry row as a ThreadInfo; CorruptRowError naming the thread if unreadable."""
    thread_id, status, created, updated, metadata, values, head, expires = row
    try:
        decoded_metadata = codec.load_object(metadata)
        decoded_values = codec.load_object(values)
    except CodecError as exc:
        raise CorruptRowError(
            thread_id=thread_id, checkpoint_ns="", checkpoint_id=None, channel=None, cause=exc
        ) from exc
    return ThreadInfo(
        thread_id, status, created, updated, decoded_metadata, decoded_values, head, expires
    )


def get(thread_id: str, codec: ValueCodec) -> Operation[ThreadInfo | None]:
    rows = yield Query(GET, {"thread_id": thread_id})
    return _thread(rows[0], codec) if rows else None


def search(
    codec: ValueCodec,
    *,
    metadata: Mapping[str, Any] | None = None,
    values: Mapping[str, Any] | None = None,
    status: str | None = None,
    limit: int = 10,
    offset: int = 0,
    unreadable: Callable[[CorruptRowError], None] | None = None,
) -> Operation[list[ThreadInfo]]:
    """Matching threads; a row that cannot be read is left out and reported to
    `unreadable` (a short page then), never raised."""
    rows = yield Query(
        SEARCH,
        {
            "metadata": codec.dump_object(metadata, filter=True) if metadata else None,
            "values": codec.dump_object(values, filter=True) if values else None,
            "status": status,
            "limit": limit,
            "offset": offset,
        },
    )
    found = []
    for row in rows:
        try:
            found.append(_thread(row, codec))
        except CorruptRowError as exc:
            if unreadable is not None:
                unreadable(exc)
    return found


def update(thread_id: str, metadata: Mapping[str, Any], codec: ValueCodec) -> Operation[ThreadInfo]:
    rows = yield Query(UPDATE, {"thread_id": thread_id, "metadata": codec.dump_object(metadata)})
    return _thread(rows[0], codec)


def acquire(
    thread_id: str, owner: str, lease_seconds: float, *, wait: bool, poll_seconds: float = 0.1
) -> Operation[int]:
    """The run token once the thread is ours; ThreadBusyError unless `wait`."""
    params = {"thread_id": thread_id, "owner": owner, "lease": lease_seconds}
    while True:
        rows = yield Query(ACQUIRE, params)
        if rows:
            return int(rows[0][0])
        if not wait:
            raise ThreadBusyError(thread_id)
        yield Sleep(poll_seconds)


def renew(thread_id: str, owner: str, lease_seconds: float) -> Operation[None]:
    yield Query(
        RENEW, {"thread_id": thread_id, "owner": owner, "lease": lease_seconds}, fetch=False
    )


def release(thread_id: str, owner: str) -> Operation[None]:
    yield Query(RELEASE, {"thread_id": thread_id, "owner": owner}, fetch=False)


def messages(
    thread_id: str, channel: str, codec: ValueCodec, limit: int | None = None
) -> Operation[list[AuditEntry]]:
    """Every value written to `channel` on the current branch, oldest first.

    A write at checkpoint C is what a task running from C produced; it lands
    in C's child, whose id and time the entry reports. A pull task's node is in
    its task path; a push task (Send) is named by the Send that created it.
    """
    rows = yield Query(AUDIT, {"thread_id": thread_id, "channel": channel, "tasks": TASKS})
    by_depth: dict[int, dict[str, Any]] = {}
    for depth, checkpoint_id, step, ts, task_id, path, idx, ch, enc, json, data, type_ in rows:
        at = by_depth.setdefault(depth, {"id": checkpoint_id, "step": step, "ts": ts, "w": []})
        if ch is not None:  # a checkpoint without such writes still dates its parent's
            at["w"].append((writes_sort_key(path, task_id, idx), path, ch, enc, json, data, type_))
    entries: list[AuditEntry] = []
    sends: list[str] = []
    for depth in sorted(by_depth, reverse=True):
        at = by_depth[depth]
        child = by_depth.get(depth - 1)
        produced_id = child["id"] if child else at["id"]
        produced_ts = child["ts"] if child else at["ts"]
        produced_step = child["step"] if child else None
        next_sends: list[str] = []
        for _, path, ch, enc, json, data, type_ in sorted(at["w"], key=lambda w: w[0]):
            value = codec.load(enc, json, data, type_)
            if ch == TASKS:
                next_sends.append(getattr(value, "node", "?"))
                continue
            node = _node_of(path, sends)
            for message in value if isinstance(value, list) else [value]:
                entries.append(AuditEntry(message, node, produced_step, produced_id, produced_ts))
        sends = next_sends
    return entries[:limit] if limit is not None else entries


def _node_of(task_path: str, sends: Sequence[str]) -> str:
    parts = [p.strip() for p in task_path.lstrip("~").split(",")]
    if parts and parts[0] == "__pregel_pull" and len(parts) > 1:
        return parts[1]
    if parts and parts[0] == "__pregel_push" and len(parts) > 1 and parts[1].isdigit():
        index = int(parts[1])
        return sends[index] if index < len(sends) else "send"
    return task_path or "input"


EXPIRED = """
SELECT thread_id FROM colosseum_threads
WHERE expires_at < now()
ORDER BY expires_at
LIMIT %(batch)s
"""

# Taken again under the row lock: a thread written since EXPIRED ran has a
# later expiry now, and is left alone (its put waits for this transaction).
LOCK_STILL_EXPIRED = """
SELECT thread_id FROM colosseum_threads
WHERE thread_id = ANY(%(thread_ids)b::text[]) AND expires_at < now()
FOR UPDATE
"""

CLEAR_EXPIRY = """
UPDATE colosseum_threads SET expires_at = NULL
WHERE thread_id = ANY(%(thread_ids)b::text[]) AND expires_at < now()
"""


def sweep(store: Any, retention: Retention) -> Operation[int]:
    """Apply `retention` to every expired thread, a batch per transaction; how many."""
    swept = 0
    while True:
        rows = yield Query(EXPIRED, {"batch": retention.batch_size})
        if not rows:
            return swept
        thread_ids = [row[0] for row in rows]
        if retention.strategy == "delete":
            yield from store.delete_threads(thread_ids, only_expired=True)
        else:
            yield from store.prune(thread_ids, "keep_latest", retention.keep_last or 1)
            yield Query(CLEAR_EXPIRY, {"thread_ids": thread_ids}, fetch=False)
        swept += len(thread_ids)
        if len(thread_ids) < retention.batch_size:
            return swept
