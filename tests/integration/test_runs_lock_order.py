"""The order in which a run's transactions lock rows (`saver.runs(graph)`, issue 15).

A run that takes the thread with `interrupt` or `rollback` (TAKE) locks the
thread row, then updates the record of the run it stops. A run that ends
(FINISH) must lock in the same order: if it updated its own record first and
then waited for the thread row, the two would each hold what the other waits
for. Postgres breaks that deadlock only after `deadlock_timeout` (1 s by
default), aborting one side, which is rerun: a second of latency added to
exactly the moment a user double-texts.
"""

from __future__ import annotations

import threading
import time
import uuid

import psycopg
import pytest

from langgraph_colosseum import ColosseumSaver
from langgraph_colosseum._core import multitask

WAIT = 30.0


def blocked_behind(conn: psycopg.Connection, blocker_pid: int) -> bool:
    """Whether some backend now waits for a lock that `blocker_pid` holds."""
    row = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
        (blocker_pid,),
    ).fetchone()
    return bool(row and row[0])


def test_a_finish_waiting_for_the_thread_row_holds_no_run_record(pg_url: str) -> None:
    """While another transaction holds the thread row (as a stopping TAKE does
    before it updates the stopped run's record), a run's FINISH waits for it
    without holding its own run record: the TAKE can still update that
    record, so the two cannot deadlock. Then FINISH ends the run as asked."""
    thread_id, run_id = f"lock-order-{uuid.uuid4()}", str(uuid.uuid4())
    with ColosseumSaver.from_conn_string(pg_url, pool_size=2) as saver:
        token = saver._run(
            multitask.start(saver._store, thread_id, run_id, "reject", "test:1", 30.0, None)
        )
        ended: dict[str, object] = {}

        def finish() -> None:
            ended["result"] = saver._run(
                multitask.finish(thread_id, run_id, token, "success", None)
            )

        with psycopg.connect(pg_url) as taker, psycopg.connect(pg_url, autocommit=True) as probe:
            # The stopping TAKE's first lock, held in an open transaction.
            taker.execute(multitask.LOCK_THREAD, {"thread_id": thread_id})
            finisher = threading.Thread(target=finish)
            finisher.start()
            deadline = time.monotonic() + WAIT
            while not blocked_behind(probe, taker.info.backend_pid):
                assert time.monotonic() < deadline, "FINISH never reached the thread row"
                time.sleep(0.01)  # polling a condition, not timing a race
            # The TAKE's next lock: the record of the run it stops.
            try:
                taker.execute(
                    "SELECT 1 FROM colosseum_runs WHERE thread_id = %s AND run_id = %s"
                    " FOR UPDATE NOWAIT",
                    (thread_id, run_id),
                )
            except psycopg.errors.LockNotAvailable:
                taker.rollback()
                finisher.join(WAIT)
                pytest.fail("FINISH held the run's record while it waited for the thread row")
            taker.rollback()
        finisher.join(WAIT)
        assert not finisher.is_alive()
        assert ended["result"][0] is True  # ended as asked, stopped by nobody
        info = saver.runs.get(run_id)
        assert info is not None and info.status == "success"
