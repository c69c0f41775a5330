"""Runs on a thread, and what a second run does while one is active (sans-IO).

`saver.runs(graph)` (runs.py) records every run it admits or queues in
`colosseum_runs` and holds the thread for it exactly as `run_guard` does: the
thread row's `run_owner` is the run's id and `run_token` its fencing token,
and every put / put_writes of the run carries both (`_core/guard.py`), so
Postgres refuses them once the run no longer owns the thread (`sql._FENCED`).
The four `multitask_strategy` values are four ways of taking the thread:

* `reject`: take it only when no live run holds it and no live run waits for
  it; else ThreadBusyError, and nothing is recorded or written.
* `enqueue`: record the run as `pending` first (its `seq` is its place in the
  queue), then take the thread once it is free and no live pending run
  arrived before it. Waiters sleep on LISTEN/NOTIFY (`Listen`), each on a
  channel of its own run's: whatever lets go of the thread or leaves the
  queue notifies the one run whose turn it then is (WAKE), and nobody else.
  Each waiter also wakes every third of its lease to renew its place: a
  waiter whose process died loses its place when its lease lapses, and the
  next in line, at its next renewal, finds nobody live before it and goes
  (also when the dead one had been told its turn: a dead waiter holds the
  queue for its lease and a third of the next one's at most).
* `interrupt`: take the thread whoever holds it. The holder's token is
  superseded in the same transaction, so its next write (its next step
  boundary) is refused and its caller gets RunInterruptedError; its steps
  stored before are kept, and the new run starts from them. The stopped
  run's record says `interrupted` and who stopped it.
* `rollback`: as `interrupt`, then `delete_for_runs` on the stopped run
  (tombstones: its content is never readable again, Redis heads included)
  and the registry metadata keys it set last are put back as they were
  before it set them (`colosseum_threads.metadata_undo`), before the new run
  writes anything.

Taking the thread first takes its write lock exclusively (threads.TAKE_LOCK,
as run_guard's ACQUIRE and a delete do), which waits for the writes in
flight: each holds it shared from before its fence is checked until its
commit. So a put either committed before the take (and is kept, or rolled
back) or is judged against the new owner (and refused). The take then locks
the thread row FOR UPDATE, as every transaction that changes the queue or
the thread does (see WAKE). Nothing here holds a session: its advisory locks
are the transaction's own (released at its commit) and no statement is
prepared, so it works through PgBouncer in transaction mode (where LISTEN
cannot be used and waiters poll instead, see `Listen`).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from langgraph_colosseum._core.io import AwaitNotify, Listen, Operation, Query, Transaction
from langgraph_colosseum._core.keys import checked_key
from langgraph_colosseum._core.threads import LOCK_THREAD, RELEASE, take_lock
from langgraph_colosseum.errors import (
    InvalidConfigError,
    RunInterruptedError,
    RunNotFoundError,
    RunQueueTimeoutError,
    RunRolledBackError,
    ThreadBusyError,
)

MultitaskStrategy = Literal["reject", "enqueue", "interrupt", "rollback"]
STRATEGIES: tuple[str, ...] = ("reject", "enqueue", "interrupt", "rollback")
STATUSES = ("pending", "running", "success", "error", "interrupted", "rolled_back")
FINAL_STATUSES = frozenset(("success", "error", "interrupted", "rolled_back"))

# The channel of the whole database, the payload the thread id whose holder let
# go: what queued runs and joins of older code wait on (one wake-up per waiter
# and release). Still notified, so that they are woken during an upgrade; this
# code listens on the channel of its own run (run_channel) instead.
CHANNEL = "colosseum_runs"


def run_channel(run_id: str) -> str:
    """The NOTIFY channel of one run: its turn in the queue, its cancel, its end.

    A hash (channel names stop at 63 bytes); `_RUN_CHANNEL` is the same in SQL.
    """
    return "colosseum_run_" + hashlib.sha256(run_id.encode()).hexdigest()[:40]


_RUN_CHANNEL = "'colosseum_run_' || left(encode(sha256(convert_to({}, 'UTF8')), 'hex'), 40)"

LEASE_LAPSED = (
    "its process stopped renewing its lease (it died, or was paused longer than the "
    "lease); the run was abandoned"
)
QUEUE_LAPSED = "its process stopped renewing its place in the queue (it died); it never ran"

# A retry after a lost reply (see TAKE) finds its own row: nothing to add.
ENQUEUE = """
INSERT INTO colosseum_runs (thread_id, run_id, strategy, status, holder, lease_until)
VALUES (%(thread_id)s, %(run_id)s, 'enqueue', 'pending', %(holder)s,
        now() + make_interval(secs => %(lease)s))
ON CONFLICT (thread_id, run_id) DO NOTHING
"""

ENSURE_THREAD = """
INSERT INTO colosseum_threads (thread_id) VALUES (%(thread_id)s) ON CONFLICT DO NOTHING
"""

# A run's started_at / ended_at are clock_timestamp(), not now(): now() is when the
# transaction began, and a TAKE's transaction may begin before the previous run's
# FINISH and then wait on LOCK_THREAD, which would date the start before that end.
#
# Under LOCK_THREAD: take the thread when this run may, mark the run it took it
# from (stopped while live, abandoned when its lease had lapsed), record this
# run as running; else renew a queued run's place. Returns (token or NULL, the
# run stopped, its new status, this run's status before, whether this run had
# taken the thread already).
#
# `again`: a TAKE is sent again on a fresh connection when the old one broke
# (_driver.py), possibly after it committed. The retry then finds this run
# running and holding the thread with the token it recorded: its own earlier
# success, whose token it returns (without it the run waited for itself, or
# was refused as busy, and the thread stayed held until its lease lapsed).
TAKE = """
WITH thread AS (
    SELECT run_owner, run_token, run_lease_until FROM colosseum_threads
    WHERE thread_id = %(thread_id)s
),
me AS (
    SELECT seq, status FROM colosseum_runs
    WHERE thread_id = %(thread_id)s AND run_id = %(run_id)s
),
ahead AS (
    SELECT 1 FROM colosseum_runs r
    WHERE r.thread_id = %(thread_id)s AND r.status = 'pending' AND r.lease_until > now()
      AND r.run_id <> %(run_id)s
      AND r.seq < coalesce((SELECT seq FROM me), 9223372036854775807)
    LIMIT 1
),
again AS (
    SELECT thread.run_token FROM thread, colosseum_runs r
    WHERE thread.run_owner = %(run_id)s AND r.thread_id = %(thread_id)s
      AND r.run_id = %(run_id)s AND r.status = 'running' AND r.token = thread.run_token
),
go AS (
    SELECT 1 FROM thread
    WHERE coalesce((SELECT status FROM me), 'pending') = 'pending'
      AND (%(steal)s
           OR ((run_owner IS NULL OR run_lease_until IS NULL OR run_lease_until < now())
               AND NOT EXISTS (SELECT 1 FROM ahead)))
),
taken AS (
    UPDATE colosseum_threads t
    SET status = 'busy', run_owner = %(run_id)s, run_token = t.run_token + 1,
        run_lease_until = now() + make_interval(secs => %(lease)s), updated_at = now()
    WHERE t.thread_id = %(thread_id)s AND EXISTS (SELECT 1 FROM go)
    RETURNING t.run_token
),
-- interrupt / rollback stop the holder as a live one, whether its lease is
-- live or lapsed: a process only paused past its lease (GC, SIGSTOP) is told
-- RunInterruptedError / RunRolledBackError when it wakes, and its record says
-- the same. reject / enqueue take a thread only from a lapsed holder, which
-- stays `error` as it read (RUNS_NOW), ended when its lease ran out.
stopped AS (
    UPDATE colosseum_runs r
    SET status = CASE WHEN %(steal)s OR thread.run_lease_until > now() THEN 'interrupted'
                      ELSE 'error' END,
        error = CASE WHEN %(steal)s OR thread.run_lease_until > now() THEN NULL
                     ELSE %(lapsed)s END,
        ended_at = CASE WHEN %(steal)s OR thread.run_lease_until > now() THEN clock_timestamp()
                        ELSE coalesce(thread.run_lease_until, clock_timestamp()) END,
        stopped_by = %(run_id)s
    FROM thread
    WHERE EXISTS (SELECT 1 FROM go) AND r.thread_id = %(thread_id)s
      AND ((r.run_id = thread.run_owner AND r.status = 'running')
           -- The last holder, settled as lapsed by a reader of older code
           -- (which let go of the thread; readers write nothing now): its
           -- token is still the thread's, so nobody took the thread since.
           -- interrupt / rollback stop it as they would have stopped it
           -- unsettled, so what a rollback removes does not depend on who
           -- looked first, during an upgrade either.
           OR (%(steal)s AND r.token = thread.run_token
               AND r.status = 'error' AND r.stopped_by = 'lease'))
    RETURNING r.run_id, r.status
),
-- metadata_keys, empty: a process of older code (before schema 12) that rolls
-- this run back puts back the keys listed there, none, where for NULL it would
-- put back its whole snapshot of the registry metadata, which this code no
-- longer takes (what a rollback puts back is in colosseum_threads.metadata_undo).
mine AS (
    INSERT INTO colosseum_runs AS r
        (thread_id, run_id, strategy, status, holder, token, started_at, metadata_keys)
    SELECT %(thread_id)s, %(run_id)s, %(strategy)s, 'running', %(holder)s, taken.run_token,
           clock_timestamp(), '{}'
    FROM taken
    ON CONFLICT (thread_id, run_id) DO UPDATE
    SET status = 'running', token = EXCLUDED.token, started_at = clock_timestamp(), lease_until = NULL,
        metadata_keys = EXCLUDED.metadata_keys
),
waiting AS (
    UPDATE colosseum_runs SET lease_until = now() + make_interval(secs => %(lease)s)
    WHERE thread_id = %(thread_id)s AND run_id = %(run_id)s AND status = 'pending'
      AND NOT EXISTS (SELECT 1 FROM go)
)
SELECT coalesce((SELECT run_token FROM taken), (SELECT run_token FROM again)),
       (SELECT run_id FROM stopped), (SELECT status FROM stopped), (SELECT status FROM me),
       EXISTS (SELECT 1 FROM again)
"""

# After delete_for_runs removed the stopped run's rows: the registry metadata
# keys whose last setter was the stopped run (their metadata_undo entry holds
# its token, see sql.py's put) go back to what they held before it set them,
# or go if they were not there. A key someone else set after the run did
# (threads.update) is not the run's any more and keeps their value, also
# when the run set it again later: then what it held before is their value.
# Nothing compares values: encrypted ones are sealed anew at each write.
ROLLED_BACK = """
WITH run AS (
    UPDATE colosseum_runs SET status = 'rolled_back'
    WHERE thread_id = %(thread_id)s AND run_id = %(stopped)s
      AND status IN ('interrupted', 'error')
    RETURNING token
),
undone AS (
    SELECT u.key, u.value FROM colosseum_threads t, run, jsonb_each(t.metadata_undo) AS u
    WHERE t.thread_id = %(thread_id)s AND u.value -> 't' = to_jsonb(run.token)
)
UPDATE colosseum_threads t
SET metadata = (t.metadata - ARRAY(SELECT key FROM undone))
               || coalesce((SELECT jsonb_object_agg(key, value -> 'v') FROM undone
                            WHERE value ? 'v'), '{}'::jsonb),
    metadata_undo = t.metadata_undo - ARRAY(SELECT key FROM undone)
WHERE t.thread_id = %(thread_id)s AND EXISTS (SELECT 1 FROM undone)
"""

# A run `r` stopped by a run whose strategy is rollback, not yet rolled back.
# The take that stopped it recorded the stopper (its strategy with it) in the
# same transaction, so from that commit on the rollback is decided: whoever
# holds the thread next finishes it (ROLLBACKS_DUE), and the stopped run's
# caller is told it was rolled back (FINISH), even before it is done.
_ROLLBACK_DUE = """r.status IN ('interrupted', 'error') AND EXISTS (
    SELECT 1 FROM colosseum_runs s
    WHERE s.thread_id = r.thread_id AND s.run_id = r.stopped_by AND s.strategy = 'rollback')"""

# Runs a rollback stopped whose rows may still be there: the one this run
# stopped, and those of a rollback that was itself stopped (or died) before it
# finished deleting. Whoever holds the thread next finishes the job before it
# reads the state, newest first (of two, only the oldest can have written: a
# run writes once its own start has finished the rollbacks due).
ROLLBACKS_DUE = f"""
SELECT r.run_id FROM colosseum_runs r
WHERE r.thread_id = %(thread_id)s AND {_ROLLBACK_DUE}
ORDER BY r.seq DESC
"""

GIVE_UP = """
UPDATE colosseum_runs
SET status = 'error', error = %(error)s, ended_at = clock_timestamp(), lease_until = NULL
WHERE thread_id = %(thread_id)s AND run_id = %(run_id)s AND status = 'pending'
"""

# The run ends: only while it is still running (a run stopped meanwhile stays
# stopped; its caller is told; one past its lease that nobody took over was
# only slow, and ends as it did), or when only a lease sweep of older code
# marked it and it still owns the thread with its token. A
# FINISH sent again after its reply was lost (see TAKE) finds the run ended as
# it asked and stopped by nobody (every stop records who): its own success.
# A run whose rollback is due is told `rolled_back`: its refused write can land
# before the rollback records it so, and its caller must not be told less.
FINISH = f"""
WITH run AS (
    SELECT CASE WHEN {_ROLLBACK_DUE} THEN 'rolled_back' ELSE r.status END AS status,
           r.stopped_by
    FROM colosseum_runs r
    WHERE r.thread_id = %(thread_id)s AND r.run_id = %(run_id)s
),
mine AS (
    UPDATE colosseum_runs r
    SET status = %(status)s, error = %(error)s, ended_at = clock_timestamp(), stopped_by = NULL
    WHERE r.thread_id = %(thread_id)s AND r.run_id = %(run_id)s
      AND (r.status = 'running'
           OR (r.stopped_by = 'lease' AND EXISTS (
                   SELECT 1 FROM colosseum_threads t
                   WHERE t.thread_id = %(thread_id)s AND t.run_owner = %(run_id)s
                     AND t.run_token = %(token)s)))
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM mine)
       OR coalesce((SELECT status = %(status)s AND stopped_by IS NULL FROM run), false),
       (SELECT status FROM run), (SELECT stopped_by FROM run),
       pg_notify(%(channel)s, %(thread_id)s)
"""


def _sql_text(text: str) -> str:
    assert "%" not in text  # a literal inside statements that take parameters
    return "'" + text.replace("'", "''") + "'"


# The run records as every reader sees them (saver.runs.get / list / join /
# cancel, `colosseum runs`, the web inspector): a run whose process is gone,
# or was paused longer than its lease, reads as `error`, stopped by "lease",
# ended when its lease ran out: running without a live lease on the thread,
# or queued without a live place. Nothing writes that on reading, so what
# happens next does not depend on who looked: a run that takes the thread
# records it (TAKE), and a process only paused that wakes before anyone took
# its place renews its lease and reads `running` again. Its row keeps what
# its process left (`running`, `pending`). A view of `colosseum_runs`, `r`.
RUNS_NOW = f"""(
SELECT r.thread_id, r.run_id, r.strategy, r.holder, r.seq, r.created_at, r.started_at,
       CASE WHEN lapse.lapsed THEN 'error' ELSE r.status END AS status,
       CASE WHEN lapse.lapsed THEN lapse.at ELSE r.ended_at END AS ended_at,
       CASE WHEN lapse.lapsed THEN 'lease' ELSE r.stopped_by END AS stopped_by,
       CASE WHEN NOT lapse.lapsed THEN r.error
            WHEN r.status = 'pending' THEN {_sql_text(QUEUE_LAPSED)}
            ELSE {_sql_text(LEASE_LAPSED)} END AS error
FROM colosseum_runs r
LEFT JOIN colosseum_threads t ON t.thread_id = r.thread_id AND t.run_owner = r.run_id
CROSS JOIN LATERAL (
    SELECT coalesce(r.status = 'pending' AND r.lease_until < now(), false)
           OR (r.status = 'running' AND NOT coalesce(t.run_lease_until > now(), false))
           AS lapsed,
           CASE WHEN r.status = 'pending' THEN r.lease_until ELSE t.run_lease_until END AS at
) AS lapse
)"""

_RUN_COLUMNS = """
    r.run_id, r.thread_id, r.strategy, r.status, r.holder, r.seq, r.created_at, r.started_at,
    r.ended_at, r.stopped_by, r.error
"""

GET = f"SELECT {_RUN_COLUMNS} FROM {RUNS_NOW} AS r WHERE r.run_id = %(run_id)s"

LIST = f"""
SELECT {_RUN_COLUMNS} FROM {RUNS_NOW} AS r
WHERE r.thread_id = %(thread_id)s AND (%(status)s::text IS NULL OR r.status = %(status)s)
ORDER BY r.seq
LIMIT %(limit)s
"""

# What cancel stops: the runs that read as pending or running.
ACTIVE = f"""
SELECT r.run_id, r.status FROM {RUNS_NOW} AS r
WHERE r.thread_id = %(thread_id)s AND r.status IN ('pending', 'running')
  AND (%(run_id)s::text IS NULL OR r.run_id = %(run_id)s)
"""

CANCEL = """
UPDATE colosseum_runs
SET status = 'interrupted', stopped_by = 'cancel', ended_at = clock_timestamp(), lease_until = NULL
WHERE thread_id = %(thread_id)s AND run_id = ANY(%(run_ids)s::text[])
  AND status IN ('pending', 'running')
RETURNING run_id
"""

NOTIFY = "SELECT pg_notify(%(channel)s, %(thread_id)s)"

# Last in a transaction that lets go of the thread or takes runs out of the
# queue (FINISH, a run leaving the queue, CANCEL), and after its statements
# that did: each run that `ended` is told on its own channel (its join waits
# there; a cancelled waiter learns it at once), and so is the first live
# queued run, when the thread is free: its turn has come. Only that one asks
# for the thread; the others sleep on. Each of those transactions holds the
# thread row first (LOCK_THREAD), so of two that change
# the queue or the thread at once, the second sees what the first did: the
# one whose turn it is never goes untold. A queued run whose place lapsed
# (its process died) is passed over; one that dies after it was told holds
# the queue only until its place lapses (see `enqueue` above).
WAKE = f"""
WITH next AS (
    SELECT r.run_id FROM colosseum_runs r
    WHERE r.thread_id = %(thread_id)s AND r.status = 'pending' AND r.lease_until > now()
      AND EXISTS (
          SELECT 1 FROM colosseum_threads t
          WHERE t.thread_id = %(thread_id)s
            AND (t.run_owner IS NULL OR t.run_lease_until IS NULL OR t.run_lease_until < now()))
    ORDER BY r.seq
    LIMIT 1
)
SELECT pg_notify({_RUN_CHANNEL.format("told.run_id")}, '')
FROM (SELECT run_id FROM next UNION SELECT unnest(%(ended)s::text[])) AS told
"""


@dataclass(frozen=True)
class RunInfo:
    """One run of `saver.runs(graph)`, as recorded in Postgres.

    `status`: pending (queued), running, success, error, interrupted (stopped by
    another run or by cancel; `stopped_by` says which), rolled_back. `holder`
    is the process that started it (host:pid); `seq` its arrival order.
    """

    run_id: str
    thread_id: str
    strategy: str
    status: str
    holder: str
    seq: int
    created_at: datetime
    started_at: datetime | None
    ended_at: datetime | None
    stopped_by: str | None
    error: str | None


def _info(row: Sequence[Any]) -> RunInfo:
    return RunInfo(*row[:5], int(row[5]), *row[6:])


def checked_strategy(strategy: str) -> str:
    if strategy not in STRATEGIES:
        raise InvalidConfigError(
            f"unknown multitask_strategy {strategy!r}: expected one of {', '.join(STRATEGIES)}"
        )
    return strategy


def stopped_error(thread_id: str, run_id: str, status: str | None, by: str | None) -> Exception:
    """What the caller of a run that no longer runs is told."""
    cls = RunRolledBackError if status == "rolled_back" else RunInterruptedError
    return cls(thread_id, run_id, status=status or "unknown", by=by)


def _decided(result: Any) -> bool:
    """A TAKE after which a queued run waits no more: it took the thread, or it
    was stopped meanwhile (cancelled, given up by the sweep). The NOTIFY of a
    cancel may have come before this wait's LISTEN: it is not waited for."""
    token, _, _, my_status, _ = result[-1][0]
    return token is not None or my_status not in (None, "pending")


def _queued(take: Transaction, lease_seconds: float, deadline: float | None) -> Operation[Any]:
    """A queued run's wait, run inside `Listen` on its own channel: TAKE when it
    arrives, again when told its turn has come (WAKE) and at least every third
    of its lease (each TAKE renews its place), until it is decided or its
    `deadline` (time.monotonic()) has passed; the last TAKE's result."""
    while True:
        result = yield take
        if _decided(result):
            return result
        wait = lease_seconds / 3
        if deadline is not None:
            wait = min(wait, deadline - time.monotonic())
            if wait <= 0:
                return result
        yield AwaitNotify(wait)


def _leave(params: dict[str, Any]) -> Transaction:
    """A queued run gives up its place (GIVE_UP), and whoever's turn that makes is told."""
    tell = {"thread_id": params["thread_id"], "ended": [params["run_id"]]}
    return Transaction(
        (
            Query(LOCK_THREAD, params),  # see WAKE
            Query(GIVE_UP, params, fetch=False),
            Query(NOTIFY, {"channel": CHANNEL, "thread_id": params["thread_id"]}),
            Query(WAKE, tell),
        )
    )


def take_request(params: dict[str, Any]) -> Transaction:
    """Taking the thread for a run: the thread's write lock, exclusive (see
    threads.TAKE_LOCK), its row, then TAKE."""
    return Transaction(
        (
            take_lock(params["thread_id"]),
            Query(ENSURE_THREAD, params, fetch=False),
            Query(LOCK_THREAD, params),
            Query(TAKE, params),
        )
    )


def start(
    store: Any,
    thread_id: str,
    run_id: str,
    strategy: str,
    holder: str,
    lease_seconds: float,
    queue_timeout: float | None,
) -> Operation[int]:
    """Take `thread_id` for run `run_id` under `strategy`; its fencing token.

    Raises ThreadBusyError (reject), RunQueueTimeoutError (enqueue, after
    `queue_timeout` seconds), RunInterruptedError (a queued run cancelled).
    """
    thread_id = checked_key("thread_id", thread_id)
    params = {
        "thread_id": thread_id,
        "run_id": run_id,
        "strategy": checked_strategy(strategy),
        "holder": holder,
        "lease": lease_seconds,
        "steal": strategy in ("interrupt", "rollback"),
        "lapsed": LEASE_LAPSED,
    }
    take = take_request(params)
    if strategy == "enqueue":
        yield Query(ENQUEUE, params, fetch=False)
        deadline = None if queue_timeout is None else time.monotonic() + queue_timeout
        result = yield Listen(run_channel(run_id), _queued(take, lease_seconds, deadline))
    else:
        result = yield take
    token, stopped, _, my_status, again = result[-1][0]
    if token is None:
        if strategy != "enqueue":
            raise ThreadBusyError(thread_id)
        if my_status not in (None, "pending"):  # cancelled, or given up by the sweep
            row = yield Query(GET, {"run_id": run_id})
            raise stopped_error(thread_id, run_id, my_status, row[0][9] if row else None)
        why = f"timed out after {queue_timeout:g} s in the queue; it never ran"
        yield _leave({**params, "error": why})
        raise RunQueueTimeoutError(thread_id, run_id, queue_timeout or 0.0)
    due = yield Query(ROLLBACKS_DUE, {"thread_id": thread_id})
    if due:
        # The stopped runs' puts after the take are refused by the fence; the
        # ones before it are deleted now, before this run reads or writes.
        rolled_back = [row[0] for row in due]
        yield from store.delete_for_runs(rolled_back)
        # The thread row first, as TAKE takes it: two runs finishing the same
        # rollbacks (one stopped by the other meanwhile) would otherwise lock a
        # run row and the thread row in opposite orders, and deadlock.
        yield Transaction(
            (
                Query(LOCK_THREAD, {"thread_id": thread_id}),
                *(
                    Query(ROLLED_BACK, {"thread_id": thread_id, "stopped": run}, fetch=False)
                    for run in rolled_back
                ),
            )
        )
    if due or stopped is not None or again:
        # The run stopped may have committed its last put and not yet advanced
        # the Redis head (or a rollback stopped midway, its delete and not yet
        # dropped the head): this run's first read must come from Postgres. A
        # take whose reply was lost (`again`) no longer knows whether it stopped one.
        yield from store._drop_heads([thread_id])
    return int(token)


def leave_queue(thread_id: str, run_id: str, why: str) -> Operation[None]:
    """A queued run whose caller stopped waiting (cancelled, interrupted) leaves
    the queue now, rather than blocking the runs behind it until its lease lapses."""
    yield _leave({"thread_id": thread_id, "run_id": run_id, "error": why})


def finish(
    thread_id: str, run_id: str, token: int, status: str, error: str | None
) -> Operation[tuple[bool, str | None, str | None]]:
    """End the run as `status` and let go of the thread: (ended, status, stopped_by).

    `ended` is False when the run had already been stopped (interrupted,
    rolled back, cancelled, abandoned): then `status` and `stopped_by` say how.
    """
    params = {
        "thread_id": thread_id,
        "run_id": run_id,
        "token": token,
        "status": status,
        "error": error,
        "channel": CHANNEL,
        "owner": run_id,
    }
    tell = {"thread_id": thread_id, "ended": [run_id]}
    # The thread row first, as TAKE takes it before it updates the run it
    # stops: FINISH updating this run's record first and then waiting for the
    # thread row (RELEASE) would deadlock with an interrupt taking the thread.
    _, rows, _, _ = yield Transaction(
        (
            Query(LOCK_THREAD, params),
            Query(FINISH, params),
            Query(RELEASE, params, fetch=False),
            Query(WAKE, tell),
        )
    )
    ended, stored, by, _ = rows[0]
    return bool(ended), stored, by


def get(run_id: str) -> Operation[RunInfo | None]:
    """The run's record as of now (RUNS_NOW: past its lease, it reads as error)."""
    rows = yield Query(GET, {"run_id": run_id})
    return _info(rows[0]) if rows else None


def list_runs(thread_id: str, status: str | None, limit: int) -> Operation[list[RunInfo]]:
    if status is not None and status not in STATUSES:
        raise InvalidConfigError(
            f"unknown run status {status!r}: expected one of {', '.join(STATUSES)}"
        )
    thread_id = checked_key("thread_id", thread_id)
    rows = yield Query(LIST, {"thread_id": thread_id, "status": status, "limit": limit})
    return [_info(row) for row in rows]


def cancel(thread_id: str, run_id: str | None) -> Operation[list[str]]:
    """Stop the thread's pending and running runs (or only `run_id`); the ids stopped.

    A running run's next write is refused (it no longer owns the thread) and
    its caller gets RunInterruptedError; a queued one leaves the queue.
    """
    active = yield Query(ACTIVE, {"thread_id": thread_id, "run_id": run_id})
    if not active:
        return []
    ids = [row[0] for row in active]
    params = {"thread_id": thread_id, "run_ids": ids, "channel": CHANNEL}
    queries: list[Query] = [
        Query(LOCK_THREAD, params),
        Query(CANCEL, params),
        *(Query(RELEASE, {"thread_id": thread_id, "owner": i}, fetch=False) for i in ids),
        Query(NOTIFY, params),
        Query(WAKE, {"thread_id": thread_id, "ended": ids}),
    ]
    results = yield Transaction(tuple(queries))
    return [row[0] for row in results[1]]


def join(run_id: str, timeout: float | None, poll_seconds: float = 5.0) -> Operation[RunInfo]:
    """Wait until the run has ended; its record. TimeoutError after `timeout` seconds."""
    info = yield from get(run_id)
    if info is None:
        raise RunNotFoundError(run_id)
    if info.status in FINAL_STATUSES:
        return info
    deadline = None if timeout is None else time.monotonic() + timeout
    return (yield Listen(run_channel(run_id), _joined(info, timeout, deadline, poll_seconds)))


def _joined(
    info: RunInfo, timeout: float | None, deadline: float | None, poll_seconds: float
) -> Operation[RunInfo]:
    """A join's wait, inside `Listen` on its run's channel: read the record, and
    again when the run ends (FINISH, a cancel, leaving the queue: WAKE) or every
    `poll_seconds` (a run whose process died is told nothing: `get` settles it)."""
    run_id = info.run_id
    while True:
        found = yield from get(run_id)
        assert found is not None
        if found.status in FINAL_STATUSES:
            return found
        wait = poll_seconds
        if deadline is not None:
            wait = min(wait, deadline - time.monotonic())
            if wait <= 0:
                raise TimeoutError(
                    f"run {run_id!r} on thread {info.thread_id!r} is still {found.status} "
                    f"after {timeout:g} s"
                )
        yield AwaitNotify(wait)
