"""What a person asks about a thread, as sans-IO operations: ids by prefix, the
checkpoint tree page by page, the tool ledger, the rows an export carries.

`inspection.py` runs them and renders the answers; the CLI and a web UI read
that, so nothing here is computed twice.
"""

from __future__ import annotations

from dataclasses import dataclass

from langgraph_colosseum._core.io import Operation, Query
from langgraph_colosseum._core.multitask import RUNS_NOW
from langgraph_colosseum._core.sql import CLAIM_TASK_ID
from langgraph_colosseum.errors import AmbiguousIdError, NotFoundError

# A few more than one, to show the candidates of an ambiguous prefix.
_CANDIDATES = 6

THREADS_BY_PREFIX = """
SELECT thread_id FROM colosseum_threads
WHERE starts_with(thread_id, %(prefix)s)
ORDER BY thread_id = %(prefix)s DESC, thread_id
LIMIT %(limit)s
"""

CHECKPOINTS_BY_PREFIX = """
SELECT checkpoint_id FROM colosseum_checkpoints
WHERE thread_id = %(thread_id)s AND checkpoint_ns = %(checkpoint_ns)s
  AND starts_with(checkpoint_id, %(prefix)s)
ORDER BY checkpoint_id = %(prefix)s DESC, checkpoint_id
LIMIT %(limit)s
"""

HISTORY_COUNT = """
SELECT count(*) FROM colosseum_checkpoints
WHERE thread_id = %(thread_id)s AND checkpoint_ns = %(checkpoint_ns)s
"""

# Newest first, with each checkpoint's parent and whether it is on the head's
# branch (the root namespace's head is the registry's; another namespace's is
# its newest checkpoint), so forks can be told from the line they left.
HISTORY_PAGE = f"""
WITH RECURSIVE head_branch AS (
    SELECT c.checkpoint_id, c.parent_checkpoint_id
    FROM colosseum_checkpoints c
    WHERE c.thread_id = %(thread_id)s AND c.checkpoint_ns = %(checkpoint_ns)s
      AND c.checkpoint_id = coalesce(
          (SELECT head_checkpoint_id FROM colosseum_threads
           WHERE thread_id = %(thread_id)s AND %(checkpoint_ns)s = ''),
          (SELECT max(checkpoint_id) FROM colosseum_checkpoints
           WHERE thread_id = %(thread_id)s AND checkpoint_ns = %(checkpoint_ns)s))
  UNION ALL
    SELECT p.checkpoint_id, p.parent_checkpoint_id
    FROM head_branch
    CROSS JOIN LATERAL (
        SELECT c.checkpoint_id, c.parent_checkpoint_id FROM colosseum_checkpoints c
        WHERE c.thread_id = %(thread_id)s AND c.checkpoint_ns = %(checkpoint_ns)s
          AND c.checkpoint_id = head_branch.parent_checkpoint_id
        LIMIT 1
    ) AS p
)
SELECT c.checkpoint_id, c.parent_checkpoint_id, c.metadata -> 'step', c.metadata ->> 'source',
       c.checkpoint ->> 'ts', c.run_id,
       (SELECT count(*) FROM colosseum_writes w
        WHERE w.thread_id = c.thread_id AND w.checkpoint_ns = c.checkpoint_ns
          AND w.checkpoint_id = c.checkpoint_id
          AND w.task_id <> '{CLAIM_TASK_ID}'),  -- on_conflict's claim is no write
       EXISTS (SELECT 1 FROM head_branch b WHERE b.checkpoint_id = c.checkpoint_id),
       ARRAY(SELECT jsonb_object_keys(c.checkpoint -> 'channel_versions') ORDER BY 1)
FROM colosseum_checkpoints c
WHERE c.thread_id = %(thread_id)s AND c.checkpoint_ns = %(checkpoint_ns)s
ORDER BY c.checkpoint_id DESC
LIMIT %(limit)s OFFSET %(offset)s
"""

LEDGER = """
SELECT idempotency_key, checkpoint_ns, tool_name, tool_call_id, status, attempts,
       started_at, completed_at, error, output::text, output_bytes, output_type
FROM colosseum_tool_calls
WHERE thread_id = %(thread_id)s
ORDER BY started_at NULLS LAST, idempotency_key
"""

# The task path of every pending write: a CheckpointTuple leaves it out, and
# the audit trail names nodes by it, so an export must keep it.
WRITE_PATHS = """
SELECT DISTINCT checkpoint_ns, checkpoint_id, task_id, task_path FROM colosseum_writes
WHERE thread_id = %(thread_id)s
"""


ANY_CHECKPOINT = "SELECT 1 FROM colosseum_checkpoints WHERE thread_id = %(thread_id)s LIMIT 1"


@dataclass(frozen=True)
class HistoryRow:
    """One checkpoint of a thread, without its values."""

    checkpoint_id: str
    parent_checkpoint_id: str | None
    step: int | None
    source: str | None
    ts: str | None
    run_id: str | None
    pending_writes: int
    on_head_branch: bool  # False: on a branch the head is not on (a fork left behind)
    channels: list[str]


def resolve_thread(given: str) -> Operation[str]:
    """The thread whose id is `given`, or the only one it is a prefix of."""
    rows = yield Query(THREADS_BY_PREFIX, {"prefix": given, "limit": _CANDIDATES})
    return _one("thread", given, [row[0] for row in rows], "colosseum threads --prefix")


def resolve_checkpoint(thread_id: str, checkpoint_ns: str, given: str) -> Operation[str]:
    rows = yield Query(
        CHECKPOINTS_BY_PREFIX,
        {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns, "prefix": given,
         "limit": _CANDIDATES},
    )  # fmt: skip
    found = [row[0] for row in rows]
    return _one(
        f"checkpoint of thread {thread_id!r}", given, found, f"colosseum history {thread_id}"
    )


def _one(what: str, given: str, found: list[str], see: str) -> str:
    if found and found[0] == given:
        return given
    if len(found) == 1:
        return found[0]
    if not found:
        raise NotFoundError(
            f"no {what} has the id {given!r} or an id starting with it (see: {see})"
        )
    shown = ", ".join(found[: _CANDIDATES - 1]) + (", …" if len(found) >= _CANDIDATES else "")
    raise AmbiguousIdError(
        f"{given!r} is the start of the ids of several {what.split(' of ')[0]}s ({shown}): "
        "give more of the id"
    )


def history(
    thread_id: str, checkpoint_ns: str, limit: int, offset: int
) -> Operation[tuple[int, list[HistoryRow]]]:
    """(how many checkpoints the namespace has, one page of them newest first)."""
    params = {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}
    total = (yield Query(HISTORY_COUNT, params))[0][0]
    rows = yield Query(HISTORY_PAGE, {**params, "limit": limit, "offset": offset})
    return int(total), [
        HistoryRow(*row[:6], int(row[6]), bool(row[7]), list(row[8])) for row in rows
    ]


def ledger(thread_id: str) -> Operation[list[tuple]]:
    return (yield Query(LEDGER, {"thread_id": thread_id}))


def write_paths(thread_id: str) -> Operation[dict[tuple[str, str, str], str]]:
    """(namespace, checkpoint id, task id) -> the task's path, for every pending write."""
    rows = yield Query(WRITE_PATHS, {"thread_id": thread_id})
    return {(ns, cid, task): path for ns, cid, task, path in rows}


def any_checkpoint(thread_id: str) -> Operation[bool]:
    return bool((yield Query(ANY_CHECKPOINT, {"thread_id": thread_id})))


# The runs that wrote a thread's checkpoints (LangGraph puts run_id in the
# metadata; the column keeps it), oldest first.
RUNS = """
SELECT run_id, count(*), min(checkpoint_id), max(checkpoint_id),
       min(checkpoint ->> 'ts'), max(checkpoint ->> 'ts')
FROM colosseum_checkpoints
WHERE thread_id = %(thread_id)s AND run_id IS NOT NULL
GROUP BY run_id
ORDER BY min(checkpoint_id)
"""

# Who holds the thread's run guard (saver.run_guard) and until when.
GUARD = """
SELECT run_owner, run_token, run_lease_until, coalesce(run_lease_until > now(), false)
FROM colosseum_threads
WHERE thread_id = %(thread_id)s
"""

# Checkpoints and stored bytes (checkpoint and channel-value rows) per thread,
# for one page of the thread list.
THREAD_SIZES = """
SELECT t.thread_id,
       (SELECT count(*) FROM colosseum_checkpoints c WHERE c.thread_id = t.thread_id),
       coalesce((SELECT sum(pg_column_size(c.*)) FROM colosseum_checkpoints c
                 WHERE c.thread_id = t.thread_id), 0)
       + coalesce((SELECT sum(pg_column_size(v.*)) FROM colosseum_channel_values v
                   WHERE v.thread_id = t.thread_id), 0)
FROM unnest(%(thread_ids)s::text[]) AS t(thread_id)
"""


# The records of saver.runs(graph) (colosseum_runs), in arrival order, as
# saver.runs.list reads them (a run past its lease reads as error).
RUN_RECORDS = f"""
SELECT r.run_id, r.strategy, r.status, r.holder, r.created_at, r.started_at, r.ended_at,
       r.stopped_by, r.error
FROM {RUNS_NOW} AS r
WHERE r.thread_id = %(thread_id)s
ORDER BY r.seq
"""


def runs(thread_id: str) -> Operation[tuple[list[tuple], tuple | None, list[tuple]]]:
    """(one row per run that wrote checkpoints, the guard's row or None, the run
    records of saver.runs)."""
    found = yield Query(RUNS, {"thread_id": thread_id})
    guard = yield Query(GUARD, {"thread_id": thread_id})
    records = yield Query(RUN_RECORDS, {"thread_id": thread_id})
    return list(found), (guard[0] if guard else None), list(records)


def thread_sizes(thread_ids: list[str]) -> Operation[dict[str, tuple[int, int]]]:
    """thread id -> (checkpoints, bytes of their rows); threads without any are absent."""
    if not thread_ids:
        return {}
    rows = yield Query(THREAD_SIZES, {"thread_ids": thread_ids})
    return {row[0]: (int(row[1]), int(row[2] or 0)) for row in rows}


# Which version of each channel every node had seen at each checkpoint of a
# tree page: compared with the parent's, it names the nodes a step ran.
TREE_VERSIONS_SEEN = """
SELECT checkpoint_id, (checkpoint -> 'versions_seen')::text
FROM colosseum_checkpoints
WHERE thread_id = %(thread_id)s AND checkpoint_ns = %(checkpoint_ns)s
  AND checkpoint_id = ANY(%(checkpoint_ids)s)
"""


def tree_versions(
    thread_id: str, checkpoint_ns: str, checkpoint_ids: list[str]
) -> Operation[dict[str, str]]:
    """checkpoint id -> its versions_seen, as the typed codec stored it (JSON text)."""
    rows = yield Query(
        TREE_VERSIONS_SEEN,
        {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns, "checkpoint_ids": checkpoint_ids},
    )
    return {row[0]: row[1] for row in rows if row[1]}
