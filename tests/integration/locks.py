"""Where a race test stands, as Postgres tells it.

A race test stops one transaction on a lock another one holds, and goes on
once Postgres shows it waiting there (`pg_blocking_pids`, `pg_stat_activity`):
a condition polled, never a bet on timing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import psycopg

WAIT = 30.0


def wait_until(condition: Callable[[], Any], what: str = "", timeout: float = WAIT) -> Any:
    """Poll `condition` until it is truthy (its value), or fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not (result := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(what or "condition not met in time")
        time.sleep(0.01)
    return result


def blocked_behind(conn: psycopg.Connection, blocker_pid: int) -> bool:
    """Whether some backend now waits for a lock that `blocker_pid` holds."""
    row = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
        (blocker_pid,),
    ).fetchone()
    return bool(row and row[0])


def wait_for_a_backend_blocked_by(url: str, pid: int, what: str = "") -> None:
    """Until some backend waits for a lock `pid` holds."""
    with psycopg.connect(url, autocommit=True) as conn:
        wait_until(lambda: blocked_behind(conn, pid), what or f"nothing waited behind {pid}")


def backends_waiting_for_locks(conn: psycopg.Connection, event: str | None = None) -> int:
    """How many backends of this database wait for a lock (of kind `event`, as
    pg_stat_activity names it: 'advisory' for a thread's or a run's, ...)."""
    row = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
        " AND wait_event_type = 'Lock' AND (%s::text IS NULL OR wait_event = %s::text)",
        (event, event),
    ).fetchone()
    return int(row[0]) if row else 0
