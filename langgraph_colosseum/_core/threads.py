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

from langgraph_colosseum._core.crypt import RowSealError, write_aad
from langgraph_colosseum._core.io import Operation, Query, Sleep, Transaction
from langgraph_colosseum._core.keys import checked_key
from langgraph_colosseum._core.sql import DELETE_LOCK
from langgraph_colosseum._core.values import ValueCodec, Where, corrupt_row, refused
from langgraph_colosseum.errors import (
    CodecError,
    CorruptRowError,
    InvalidConfigError,
    ThreadBusyError,
    ThreadNotFoundError,
)

logger = logging.getLogger("langgraph_colosseum")

# What a thread's root head left pending, which is its status when no run
# holds it: an error, else an interrupt, else idle (`t`: the thread's row). A
# scalar subquery, evaluated per row it is asked for (a few index entries of
# one checkpoint): an EXISTS here could be planned as a hash of every error
# write of every thread.
_HEAD_STATUS = """(
        SELECT CASE WHEN bool_or(w.channel = '__error__') THEN 'error'
                    WHEN bool_or(w.channel = '__interrupt__') THEN 'interrupted'
                    ELSE 'idle' END
        FROM colosseum_writes w
        WHERE w.thread_id = t.thread_id AND w.checkpoint_ns = ''
          AND w.checkpoint_id = t.head_checkpoint_id
          AND w.channel IN ('__error__', '__interrupt__'))"""

# A row that says busy without a live lease (past, or none at all): its
# holder died, or is paused past its lease (`t`: the thread's row).
_LAPSED = "t.status = 'busy' AND (t.run_lease_until > now()) IS NOT TRUE"

# The thread's status as every reader sees it (get, search, count, and so the
# CLI and the web inspector): `busy` only while its holder's lease is live.
# The row says `busy` from the take (ACQUIRE, multitask.TAKE) to the release;
# a holder that died, or was paused past its lease, leaves it so, and it reads
# as the release would have set it, from what the head left, without anyone
# writing. (A live lease always has `busy` in the row: RENEW sets it again
# after a put made while the lease had lapsed.)
STATUS_NOW = f"""CASE WHEN {_LAPSED}
    THEN {_HEAD_STATUS} ELSE t.status END"""


def _thread_columns(status: str) -> str:
    return f"""
    t.thread_id, {status}, t.created_at, t.updated_at, t.metadata::text,
    t.state_values::text, t.head_checkpoint_id, t.expires_at
"""


_THREAD_COLUMNS = _thread_columns(STATUS_NOW)

GET = f"SELECT {_THREAD_COLUMNS} FROM colosseum_threads t WHERE t.thread_id = %(thread_id)s"

_FILTERS = """(%(metadata)s::jsonb IS NULL OR t.metadata @> %(metadata)s::jsonb)
  AND (%(values)s::jsonb IS NULL OR t.state_values @> %(values)s::jsonb)
  AND (%(prefix)s::text IS NULL OR starts_with(t.thread_id, %(prefix)s))"""


# SEARCH (and COUNT_STATUS) read the rows in two parts, by what the row says.
# One that does not say busy reads as what it says (STATUS_NOW), and is found
# by the status index as before; only the few that say busy are read through
# STATUS_NOW, so that its subquery is neither run nor costed for the others
# (costed for every row, it made count(status="idle") a JIT-compiled scan).
# A page takes its first rows from each part (each in the order of the
# updated_at and status indexes, as one query would), then sorts those.
def _matching(each: str) -> str:
    return f"""
(SELECT {_thread_columns("t.status")} FROM colosseum_threads t
 WHERE t.status <> 'busy' AND (%(status)s::text IS NULL OR t.status = %(status)s::text)
   AND {_FILTERS}
 {each})
UNION ALL
(SELECT {_THREAD_COLUMNS} FROM colosseum_threads t
 WHERE t.status = 'busy' AND (%(status)s::text IS NULL OR {STATUS_NOW} = %(status)s::text)
   AND {_FILTERS}
 {each})
"""


_NEWEST_FIRST = "ORDER BY t.updated_at DESC, t.thread_id"

SEARCH = f"""
SELECT * FROM ({_matching(f"{_NEWEST_FIRST} LIMIT %(limit)s + %(offset)s")}) AS t
{_NEWEST_FIRST}
LIMIT %(limit)s OFFSET %(offset)s
"""


# SEARCH reads a page as STATUS_NOW says. It is planned afresh for every call
# (its filters choose the plan), and planning and starting its second part and
# the head's subquery cost more than the whole search did before the status
# was read from the lease (search-100k, no filter: planning 0.03 -> 0.19 ms, a
# call 0.26 -> 0.54 ms). So a search first reads with a statement as small as
# its filter allows, which also tells whether a row that says busy past its
# lease could be in the page; only then is the page read again, whole, by
# SEARCH (never a page mixed from two statements). Such rows are rare: one is
# left by a holder that died, until the thread is taken again.
#
# No status filter: the rows as they say, and whether each says busy past its
# lease (a row that does not reads as it says, see STATUS_NOW).
QUICK_SEARCH = f"""
SELECT {_thread_columns("t.status")}, {_LAPSED}
FROM colosseum_threads t
WHERE {_FILTERS}
{_NEWEST_FIRST}
LIMIT %(limit)s OFFSET %(offset)s
"""

# status="busy": the rows that say busy with a live lease, which is exactly
# what reads busy (a lapsed one reads as its head, never busy). No second read.
_BUSY_NOW = f"""
WHERE t.status = 'busy' AND t.run_lease_until > now() AND {_FILTERS}
"""

SEARCH_BUSY = f"""
SELECT {_thread_columns("t.status")} FROM colosseum_threads t {_BUSY_NOW}
{_NEWEST_FIRST} LIMIT %(limit)s OFFSET %(offset)s
"""

# Any other status: the page of the rows that say it, and (flagged) the newest
# row that says busy past its lease, whatever its head says (no subquery). Such
# a row can change the page only when it would come before the page's last row
# or the page is short (_quick_page); SEARCH reads the page then.
# (An Append returns its parts in order: the page's rows come first, sorted.)
QUICK_SEARCH_STATUS = f"""
(SELECT {_thread_columns("t.status")}, false FROM colosseum_threads t
 WHERE t.status = %(status)s::text AND {_FILTERS}
 {_NEWEST_FIRST} LIMIT %(limit)s OFFSET %(offset)s)
UNION ALL
(SELECT {_thread_columns("t.status")}, true FROM colosseum_threads t
 WHERE {_LAPSED} AND {_FILTERS}
 {_NEWEST_FIRST} LIMIT 1)
"""

# count: without a status filter the status does not matter; busy as above.
# Any other status: SEARCH's two parts, the rows that say it and those that
# say busy past their lease whose head says it, each counted by itself (one
# count over SEARCH's Append carried every row through it with its columns:
# count(status="idle") of 100,000 threads, 9.2 -> 12.1 ms).
COUNT = f"SELECT count(*) FROM colosseum_threads t WHERE {_FILTERS}"
COUNT_BUSY = f"SELECT count(*) FROM colosseum_threads t {_BUSY_NOW}"
COUNT_STATUS = f"""
SELECT (SELECT count(*) FROM colosseum_threads t
        WHERE t.status = %(status)s::text AND {_FILTERS})
     + (SELECT count(*) FROM colosseum_threads t
        WHERE {_LAPSED} AND {_HEAD_STATUS} = %(status)s::text AND {_FILTERS})
"""

STATUSES = ("idle", "busy", "interrupted", "error")

# An update of the row only, never an insert: a thread that does not exist
# (never written, or deleted) is not made by it (ThreadNotFoundError). An
# update racing delete_thread waits for the row the delete holds and, once the
# delete commits, finds none: it writes nothing without a lock of its own.
# The keys it sets are no run's any more (metadata_undo): a rollback of the run
# that set them before leaves them as this update left them.
UPDATE = f"""
UPDATE colosseum_threads AS t
SET metadata = t.metadata || %(metadata)s::jsonb,
    metadata_undo = t.metadata_undo - ARRAY(SELECT jsonb_object_keys(%(metadata)s::jsonb)),
    updated_at = now()
WHERE t.thread_id = %(thread_id)s
RETURNING {_THREAD_COLUMNS}
"""

# FOR UPDATE: conflicts with the KEY SHARE lock of a write's fence (sql._FENCED),
# so a write in flight commits before this transaction reads the row, or is
# judged after it (multitask's transactions, which change the row).
LOCK_THREAD = "SELECT 1 FROM colosseum_threads WHERE thread_id = %(thread_id)s FOR UPDATE"

# Taking a thread (run_guard's ACQUIRE, multitask's TAKE) first takes the
# thread's write lock exclusively, with the statement a delete takes it with
# (sql.DELETE_LOCK; `take_lock`): a write holds it shared
# (sql.WRITE_LOCK) from before its fence is checked until its commit, so the
# writes in flight commit first, and those after wait for the taking to commit
# and are judged by it. The upsert that takes the thread locks its row only
# FOR NO KEY UPDATE, which a fence's KEY SHARE lock neither waits for nor holds
# off, and a thread with no registry row yet has no row to lock at all: alone,
# a write checked before the thread was taken could commit after it.
TAKE_LOCK = DELETE_LOCK


def take_lock(thread_id: str) -> Query:
    """TAKE_LOCK of one thread, the first statement of a transaction that takes it."""
    return Query(TAKE_LOCK, {"thread_ids": [thread_id]}, fetch=False)


# Take the thread when no live run holds it; the token fences the holder.
# At the statement's time, not the transaction's start (now()), which was
# before its wait for TAKE_LOCK: a lease dated from then is short by that wait.
# The owner is unique to one guard: a thread held by it is this acquire's own
# earlier success, sent again on a fresh connection after the reply of its
# commit was lost (_driver.py); it is the guard's, with the same token.
ACQUIRE = """
INSERT INTO colosseum_threads AS t (thread_id, status, run_owner, run_token, run_lease_until)
VALUES (%(thread_id)s, 'busy', %(owner)s, 1, statement_timestamp() + make_interval(secs => %(lease)s))
ON CONFLICT (thread_id) DO UPDATE
SET status = 'busy', run_owner = EXCLUDED.run_owner,
    run_token = t.run_token + (t.run_owner IS DISTINCT FROM EXCLUDED.run_owner)::int,
    run_lease_until = EXCLUDED.run_lease_until, updated_at = statement_timestamp()
WHERE t.run_owner IS NULL OR t.run_lease_until < statement_timestamp()
   OR t.run_owner = EXCLUDED.run_owner  -- OWN_ACQUIRE
RETURNING run_token
"""

# `busy` again: a put made while the lease had lapsed (outside any run, or
# the holder's own) set the status from the head (sql.PUT), and a holder only
# paused renews a live lease again (see STATUS_NOW).
RENEW = """
UPDATE colosseum_threads
SET run_lease_until = now() + make_interval(secs => %(lease)s), status = 'busy'
WHERE thread_id = %(thread_id)s AND run_owner = %(owner)s
"""

# Let go, and settle the status from what the head left pending.
RELEASE = f"""
UPDATE colosseum_threads t
SET run_owner = NULL, run_lease_until = NULL, updated_at = now(),
    status = {_HEAD_STATUS}
WHERE thread_id = %(thread_id)s AND run_owner = %(owner)s
"""

# The root branch from a checkpoint (default: the thread's head) back to the
# first one, with, at each checkpoint, how it came to be (metadata source), the
# version of `channel` it names, and the writes to `channel` (and the Send
# writes that name push tasks) of the tasks that ran from it.
AUDIT = """
WITH RECURSIVE branch AS (
    SELECT c.checkpoint_id, c.parent_checkpoint_id, 0 AS depth
    FROM colosseum_checkpoints c
    WHERE c.thread_id = %(thread_id)s AND c.checkpoint_ns = ''
      AND c.checkpoint_id = coalesce(
          %(checkpoint_id)s::text,
          (SELECT head_checkpoint_id FROM colosseum_threads WHERE thread_id = %(thread_id)s),
          (SELECT max(checkpoint_id) FROM colosseum_checkpoints
           WHERE thread_id = %(thread_id)s AND checkpoint_ns = ''))
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
       c.metadata ->> 'source', c.checkpoint -> 'channel_versions' ->> %(channel)s,
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

    Every write and every `get_tuple` of a thread pushes its expiry `thread_ttl`
    ahead (reads the Redis head serves too, see expiry.py): a thread last read or
    written at time t expires between t + 0.8 * thread_ttl and t + thread_ttl.
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
    """One message that entered (or left) a channel on a branch of the thread.

    `node` is where it came from: the node that wrote it, `__start__` for the
    run's input, `update_state` for an edit made with `graph.update_state`
    (a fork from a past checkpoint included), or the checkpoint's source
    (`fork`) otherwise. `change` is "added", "edited" (a message replaced by
    id with new content) or "removed" (a `RemoveMessage`; `message` is then
    the message that was removed).
    """

    message: Any
    node: str
    step: int | None
    checkpoint_id: str  # the checkpoint where the change appears
    created_at: str  # that checkpoint's timestamp (ISO 8601)
    change: str = "added"


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
        decoded_metadata = codec.load_object(metadata, sealed_for=(thread_id, "metadata"))
        decoded_values = codec.load_object(values, sealed_for=(thread_id, "values"))
    except (CodecError, RowSealError) as exc:
        raise CorruptRowError(
            thread_id=thread_id, checkpoint_ns="", checkpoint_id=None, channel=None, cause=exc
        ) from exc
    return ThreadInfo(
        thread_id, status, created, updated, decoded_metadata, decoded_values, head, expires
    )


def get(thread_id: str, codec: ValueCodec) -> Operation[ThreadInfo | None]:
    rows = yield Query(GET, {"thread_id": checked_key("thread_id", thread_id)})
    return _thread(rows[0], codec) if rows else None


def _search_params(
    codec: ValueCodec,
    metadata: Mapping[str, Any] | None,
    values: Mapping[str, Any] | None,
    status: str | None,
    prefix: str | None,
) -> dict[str, Any]:
    if status is not None and status not in STATUSES:
        raise InvalidConfigError(
            f"unknown thread status {status!r}: expected one of {', '.join(STATUSES)}"
        )
    codec.check_filter("metadata", metadata or ())
    codec.check_filter("values", values or ())
    return {
        "metadata": codec.dump_object(metadata, filter=True) if metadata else None,
        "values": codec.dump_object(values, filter=True) if values else None,
        "status": status,
        "prefix": prefix or None,
    }


def search(
    codec: ValueCodec,
    *,
    metadata: Mapping[str, Any] | None = None,
    values: Mapping[str, Any] | None = None,
    status: str | None = None,
    prefix: str | None = None,
    limit: int = 10,
    offset: int = 0,
    unreadable: Callable[[CorruptRowError], None] | None = None,
) -> Operation[list[ThreadInfo]]:
    """Matching threads; a row that cannot be read is left out and reported to
    `unreadable` (a short page then), never raised."""
    params = _search_params(codec, metadata, values, status, prefix)
    params.update(limit=limit, offset=offset)
    if status == "busy":
        rows = yield Query(SEARCH_BUSY, params)
    else:
        quick = yield Query(QUICK_SEARCH if status is None else QUICK_SEARCH_STATUS, params)
        rows = _quick_page(quick, limit, by_status=status is not None)
        if rows is None:
            rows = yield Query(SEARCH, params)
    found = []
    for row in rows:
        try:
            found.append(_thread(row, codec))
        except CorruptRowError as exc:
            if unreadable is not None:
                unreadable(exc)
    return found


def count(
    codec: ValueCodec,
    *,
    metadata: Mapping[str, Any] | None = None,
    values: Mapping[str, Any] | None = None,
    status: str | None = None,
    prefix: str | None = None,
) -> Operation[int]:
    """How many threads `search` with these filters finds, over every page."""
    statement = COUNT if status is None else COUNT_BUSY if status == "busy" else COUNT_STATUS
    rows = yield Query(statement, _search_params(codec, metadata, values, status, prefix))
    return int(rows[0][0])


def _quick_page(rows: list[tuple], limit: int | None, *, by_status: bool) -> list[tuple] | None:
    """The page from QUICK_SEARCH / QUICK_SEARCH_STATUS rows (each ends with its
    flag), or None when a row that says busy past its lease may be in it: then
    SEARCH reads the page.

    Without a status filter a flagged row is a row of the page. With one, the
    flagged row is the newest of those that say busy past their lease, whatever
    their heads say: when the page is full and that row comes after its last
    row, so do all of them, and the page of the rows that say the status is
    the page. (Newest first: updated_at descending, then thread_id in the "C"
    collation, which orders as Python orders str.)
    """
    page = [row[:-1] for row in rows if not row[-1]]
    flagged = [row for row in rows if row[-1]]
    if not flagged:
        return page
    if not by_status or not page or limit is None or len(page) < limit:
        return None
    (lapsed,) = flagged
    last = page[-1]
    after_last = lapsed[3] < last[3] or (lapsed[3] == last[3] and lapsed[0] > last[0])
    return page if after_last else None


def update(thread_id: str, metadata: Mapping[str, Any], codec: ValueCodec) -> Operation[ThreadInfo]:
    thread_id = checked_key("thread_id", thread_id)
    try:
        stored = codec.dump_object(metadata, sealed_for=(thread_id, "metadata"))
    except CodecError as exc:  # the registry is jsonb: no serde to fall back on
        raise refused(Where(thread_id, "", None, "<metadata>"), exc) from None
    rows = yield Query(UPDATE, {"thread_id": thread_id, "metadata": stored})
    if not rows:
        raise ThreadNotFoundError(thread_id, "update")
    return _thread(rows[0], codec)


def acquire_request(params: Mapping[str, Any]) -> Transaction:
    """Taking the thread for run_guard: its write lock, then ACQUIRE."""
    return Transaction(
        (
            take_lock(params["thread_id"]),
            Query(ACQUIRE, params),
        )
    )


def acquire(
    thread_id: str, owner: str, lease_seconds: float, *, wait: bool, poll_seconds: float = 0.1
) -> Operation[int]:
    """The run token once the thread is ours; ThreadBusyError unless `wait`."""
    params = {
        "thread_id": checked_key("thread_id", thread_id),
        "owner": owner,
        "lease": lease_seconds,
    }
    while True:
        rows = (yield acquire_request(params))[-1]
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
    store: Any,
    thread_id: str,
    channel: str = "messages",
    *,
    checkpoint_id: str | None = None,
    limit: int | None = None,
    offset: int = 0,
) -> Operation[list[AuditEntry]]:
    """Every change to `channel` on the branch ending at `checkpoint_id` (default:
    the head), oldest first: two round trips, whatever the thread's length.

    A step of the graph is told by its writes: a write at checkpoint C is what
    a task running from C produced, and it lands in C's child. A pull task's
    node is in its task path; a push task (Send) is named by the Send that
    created it. A checkpoint made by `update_state` is told by comparing the
    channel's value with its parent's: its writes, when LangGraph saves them
    at all (not for a fork from the past), sit on the parent next to the
    writes of the branch the update did not take.
    """
    thread_id = checked_key("thread_id", thread_id)
    rows = yield Query(
        AUDIT,
        {"thread_id": thread_id, "channel": channel, "tasks": TASKS,
         "checkpoint_id": checkpoint_id},
    )  # fmt: skip
    by_depth: dict[int, dict[str, Any]] = {}
    for (
        depth,
        cid,
        step,
        ts,
        source,
        version,
        task_id,
        path,
        idx,
        ch,
        enc,
        json,
        data,
        type_,
    ) in rows:
        at = by_depth.setdefault(
            depth,
            {"id": cid, "step": step, "ts": ts, "source": source, "version": version, "w": []},
        )
        if ch is not None:  # a checkpoint without such writes still dates its parent's
            aad = write_aad(thread_id, "", cid, task_id, idx, path, ch, enc)
            at["w"].append(
                (writes_sort_key(path, task_id, idx), path, ch, enc, json, data, type_, aad)
            )
    branch = [by_depth[depth] for depth in sorted(by_depth, reverse=True)]  # oldest first
    values = yield from store.channel_values(
        thread_id, "", channel, [at["version"] for at in branch if at["version"] is not None]
    )
    codec = store.codec
    entries: list[AuditEntry] = []
    before: Any = []
    written: list[tuple[str, Any]] = []  # (node, message) the parent's tasks wrote
    sends: list[str] = []
    for at in branch:
        after = values.get(at["version"], []) if at["version"] is not None else []
        where = (at["step"], at["id"], at["ts"])
        if at["source"] in ("update", "fork") or (not written and after is not before):
            # Not a step of the graph: what changed is the difference itself.
            origin = "update_state" if at["source"] == "update" else at["source"] or "unknown"
            entries.extend(_changes(before, after, origin, where))
        else:
            entries.extend(_written(written, before, after, where))
        before = after
        written, next_sends = [], []
        for _, path, ch, enc, json, data, type_, aad in sorted(at["w"], key=lambda w: w[0]):
            try:
                json, data, type_, _ = codec.open(ch, json, data, type_, aad)
            except RowSealError as exc:
                raise corrupt_row((thread_id, "", ch), at["id"], exc) from None
            value = codec.load(enc, json, data, type_)
            if ch == TASKS:
                next_sends.append(getattr(value, "node", "?"))
            elif not path.startswith("~__interrupt__"):  # an update_state's, see above
                node = _node_of(path, sends)
                written.extend((node, m) for m in (value if isinstance(value, list) else [value]))
        sends = next_sends
    entries = entries[offset:]
    return entries[:limit] if limit is not None else entries


def _identity(message: Any) -> Any:
    return getattr(message, "id", None) or repr(message)


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _written(
    written: list[tuple[str, Any]], before: Any, after: Any, where: tuple[Any, str, str]
) -> list[AuditEntry]:
    """Entries for what the tasks of one step wrote, as they wrote it.

    A message written without an id got one from the reducer (add_messages):
    the entry shows it as it entered the state, id included.
    """
    previous = {_identity(m): m for m in _as_list(before)}
    fresh = [m for m in _as_list(after) if _identity(m) not in previous]
    entries = []
    for node, message in written:
        if type(message).__name__ == "RemoveMessage":
            removed = previous.get(message.id)
            entries.append(AuditEntry(removed or message, node, *where, change="removed"))
            continue
        if getattr(message, "id", False) is None:
            message = _take_same(fresh, message)
        old = previous.get(_identity(message))
        edited = old is not None and getattr(message, "id", None) and repr(old) != repr(message)
        entries.append(AuditEntry(message, node, *where, change="edited" if edited else "added"))
    return entries


def _take_same(fresh: list[Any], message: Any) -> Any:
    """The first of `fresh` that is `message` but for the id it was given (removed
    from `fresh`), else `message` itself."""
    for i, candidate in enumerate(fresh):
        if (
            type(candidate) is type(message)
            and candidate.model_copy(update={"id": None}) == message
        ):
            return fresh.pop(i)
    return message


def _changes(before: Any, after: Any, origin: str, where: tuple[Any, str, str]) -> list[AuditEntry]:
    """Entries for the difference between two values of the channel, by message id."""
    old = {_identity(m): m for m in _as_list(before)}
    new_ids = {_identity(m) for m in _as_list(after)}
    entries = [
        AuditEntry(m, origin, *where, change="removed")
        for key, m in old.items()
        if key not in new_ids
    ]
    for message in _as_list(after):
        previous = old.get(_identity(message))
        if previous is None:
            entries.append(AuditEntry(message, origin, *where))
        elif repr(previous) != repr(message):
            entries.append(AuditEntry(message, origin, *where, change="edited"))
    return entries


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
            yield from store.prune(
                thread_ids, "keep_latest", retention.keep_last or 1, only_expired=True
            )
            yield Query(CLEAR_EXPIRY, {"thread_ids": thread_ids}, fetch=False)
        swept += len(thread_ids)
        if len(thread_ids) < retention.batch_size:
            return swept
