"""from_conn_string's pool and connection settings, on a real server.

The promise: a connection killed while idle in the pool (a Postgres restart,
`pg_terminate_backend`, a failover, a middlebox that forgot the flow) costs no
failed operation. With the idle check on, no operation even meets one.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Any

import psycopg
import pytest
from langgraph.checkpoint.base import empty_checkpoint

from langgraph_colosseum import AsyncColosseumSaver, ColosseumSaver, InvalidConfigError
from tests.conftest import truncate

POOL = 4
LOST = "Postgres connection lost"


def backends(url: str, application_name: str, state: str | None = None) -> list[int]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s"
            " AND (%s::text IS NULL OR state = %s)",
            (application_name, state, state),
        ).fetchall()
    return [pid for (pid,) in rows]


def terminate_idle(url: str, application_name: str) -> list[int]:
    """pg_terminate_backend on every idle backend of the pool; wait until they are gone."""
    pids = backends(url, application_name, "idle")
    with psycopg.connect(url, autocommit=True) as conn:
        for pid in pids:
            conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
    deadline = time.monotonic() + 10
    while set(pids) & set(backends(url, application_name)):
        assert time.monotonic() < deadline, "terminated backends did not go away"
        time.sleep(0.02)
    return pids


def config(tid: str) -> dict:
    # Thread ids of their own: other modules' tests share the session database.
    return {"configurable": {"thread_id": f"pool-{tid}", "checkpoint_ns": ""}}


def settings(name: str, check: str) -> dict[str, Any]:
    # min_size = max_size: every connection of the pool is open, idle, and killed.
    options: dict[str, Any] = {"min_size": POOL, "max_size": POOL, "application_name": name}
    options["check_idle_after"] = 0 if check == "on" else None
    return options


@pytest.mark.parametrize("check", ["on", "off"])
def test_idle_connections_killed_cost_no_failed_operation_sync(
    pg_url: str, check: str, caplog: pytest.LogCaptureFixture
) -> None:
    truncate(pg_url)
    name = f"colosseum-idle-{uuid.uuid4().hex[:8]}"
    with ColosseumSaver.from_conn_string(pg_url, **settings(name, check)) as saver:
        assert isinstance(saver.conn, psycopg_pool_type(False))
        saver.conn.wait()
        stored = saver.put(config("t"), empty_checkpoint(), {"step": 0}, {})
        assert len(terminate_idle(pg_url, name)) == POOL
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="langgraph_colosseum"):
            # Every operation after the kill succeeds, and sees what was written.
            assert saver.get_tuple(stored) is not None
            saver.put_writes(stored, [("x", 1)], "task")
            for i in range(2 * POOL):
                saver.put(config(f"t{i}"), empty_checkpoint(), {"step": i}, {})
            assert len(list(saver.list(None))) == 2 * POOL + 1
            assert saver.get_tuple(stored).pending_writes == [("task", "x", 1)]
        lost = [r for r in caplog.records if LOST in r.getMessage()]
        if check == "on":
            assert lost == []  # the check replaced them before any operation saw one
        assert len(backends(pg_url, name)) >= 1


@pytest.mark.parametrize("check", ["on", "off"])
async def test_idle_connections_killed_cost_no_failed_operation_async(
    pg_url: str, check: str, caplog: pytest.LogCaptureFixture
) -> None:
    truncate(pg_url)
    name = f"colosseum-idle-{uuid.uuid4().hex[:8]}"
    async with AsyncColosseumSaver.from_conn_string(pg_url, **settings(name, check)) as saver:
        assert isinstance(saver.conn, psycopg_pool_type(True))
        await saver.conn.wait()
        stored = await saver.aput(config("t"), empty_checkpoint(), {"step": 0}, {})
        killed = await asyncio.to_thread(terminate_idle, pg_url, name)
        assert len(killed) == POOL
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="langgraph_colosseum"):
            assert await saver.aget_tuple(stored) is not None
            await saver.aput_writes(stored, [("x", 1)], "task")
            await asyncio.gather(
                *(
                    saver.aput(config(f"t{i}"), empty_checkpoint(), {"step": i}, {})
                    for i in range(2 * POOL)
                )
            )
            assert len([t async for t in saver.alist(None)]) == 2 * POOL + 1
            assert (await saver.aget_tuple(stored)).pending_writes == [("task", "x", 1)]
        lost = [r for r in caplog.records if LOST in r.getMessage()]
        if check == "on":
            assert lost == []


def psycopg_pool_type(asynchronous: bool) -> type:
    from psycopg_pool import AsyncConnectionPool, ConnectionPool

    return AsyncConnectionPool if asynchronous else ConnectionPool


def test_settings_reach_every_connection(pg_url: str) -> None:
    name = f"colosseum-settings-{uuid.uuid4().hex[:8]}"
    options = {"application_name": name, "keepalives_idle": 17, "max_idle": 42.0}
    with ColosseumSaver.from_conn_string(pg_url, max_size=3, **options) as saver:
        pool = saver.conn
        assert (pool.max_size, pool.max_idle) == (3, 42.0)
        with pool.connection() as conn:
            parameters = conn.info.get_parameters()
            assert parameters["keepalives_idle"] == "17"
            assert parameters["application_name"] == name
            assert conn.prepare_threshold == 5
        assert backends(pg_url, name)
    with ColosseumSaver.from_conn_string(pg_url, prepare_threshold=None) as saver:
        with saver.conn.connection() as conn:
            assert conn.prepare_threshold is None


def test_pgbouncer_refuses_a_connection_that_prepares(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        with pytest.raises(InvalidConfigError, match=r"prepare_threshold=5"):
            ColosseumSaver(conn, pgbouncer=True)
        conn.prepare_threshold = None
        assert ColosseumSaver(conn, pgbouncer=True).conn is conn


async def test_pgbouncer_refuses_an_async_connection_that_prepares(pg_url: str) -> None:
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        with pytest.raises(InvalidConfigError, match=r"prepare_threshold=5"):
            AsyncColosseumSaver(conn, pgbouncer=True)
        conn.prepare_threshold = None
        assert AsyncColosseumSaver(conn, pgbouncer=True).conn is conn


def backends_that_ran(url: str, application_name: str, text: str) -> set[int]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s AND query LIKE %s",
            (application_name, f"%{text}%"),
        ).fetchall()
    return {pid for (pid,) in rows}


# A sequential caller keeps to the connection it gave back last: Postgres plans
# a prepared statement afresh on its first five runs on each connection, so
# rotating through the pool paid that warm-up once per connection (see
# _pool.StampingConnectionPool).
def test_a_sequential_caller_keeps_to_one_connection_sync(pg_url: str) -> None:
    name = f"colosseum-lifo-{uuid.uuid4().hex[:8]}"
    options = {"min_size": POOL, "max_size": POOL, "application_name": name}
    with ColosseumSaver.from_conn_string(pg_url, check_idle_after=None, **options) as saver:
        saver.conn.wait()
        stored = saver.put(config("lifo"), empty_checkpoint(), {"step": 0}, {})
        for _ in range(2 * POOL):
            assert saver.get_tuple(stored) is not None
        assert len(backends(pg_url, name)) == POOL
        assert len(backends_that_ran(pg_url, name, "colosseum_checkpoints")) == 1


async def test_a_sequential_caller_keeps_to_one_connection_async(pg_url: str) -> None:
    name = f"colosseum-lifo-{uuid.uuid4().hex[:8]}"
    options = {"min_size": POOL, "max_size": POOL, "application_name": name}
    async with AsyncColosseumSaver.from_conn_string(
        pg_url, check_idle_after=None, **options
    ) as saver:
        await saver.conn.wait()
        stored = await saver.aput(config("lifo"), empty_checkpoint(), {"step": 0}, {})
        for _ in range(2 * POOL):
            assert await saver.aget_tuple(stored) is not None
        assert len(await asyncio.to_thread(backends, pg_url, name)) == POOL
        ran = await asyncio.to_thread(backends_that_ran, pg_url, name, "colosseum_checkpoints")
        assert len(ran) == 1
